"""ma.explore on DeBERTa (disentangled attention): the score terms c2c / c2p / p2c embedded in the page are the
captured tensors and add up to the raw scores; long inputs stay under the page limit; no other family gets the
section; the section is drawn in a real browser (headless Chromium), offline."""

from __future__ import annotations

import array
import base64
import os
import re
import shutil

import pytest
import torch
import torch.nn.functional as F
from test_explore import _INK, CHROMIUM, _legend, _png_pixels, headless_page, page_data

import minialign as ma
from minialign.apps.explore.data import PAGE_LIMIT, TERM_QUANT

TEXT, PAIR = "The tower was built in Paris and opened in 1889.", "Police said the company grew."


def i16(b64: str) -> torch.Tensor:
    values = array.array("h")
    values.frombytes(base64.b64decode(b64))
    return torch.tensor(values.tolist(), dtype=torch.float64)


def decoded(terms: dict, layers: int, heads: int) -> dict[str, torch.Tensor]:
    """Each term's maps (layers, H, N, N) as the page reads them, and the bound of their rounding error."""
    N = terms["size"]
    out = {}
    for name in terms["names"]:
        largest = torch.tensor(terms["largest"][name], dtype=torch.float64).view(layers, heads, 1, 1)
        out[name] = i16(terms["maps"][name]).view(layers, heads, N, N) / TERM_QUANT * largest
    return out


@pytest.fixture(scope="module")
def deberta(tiny_family):
    directory, _ = tiny_family.hf("deberta-v2")
    return directory, ma.Encoder.from_pretrained(directory).eval(), ma.Tokenizer.from_pretrained(directory)


def _capture(model, tokenizer, text, pair=None, mask=None):
    batch = tokenizer([text], None if pair is None else [pair])
    if mask is not None:
        batch["attention_mask"] = mask
    with torch.inference_mode(), ma.capture(model) as cap:
        model(**{k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")})
    return cap


def test_the_score_terms_are_the_captured_tensors(deberta):
    _, model, tokenizer = deberta
    T = len(tokenizer([TEXT], [PAIR])["input_ids"][0])
    left = ma.masks.left_only_mask(torch.ones(1, T, dtype=torch.bool))
    html = ma.explore(model, tokenizer, TEXT, pair=PAIR, compare_mask=left).html()
    assert '<div class="legend" id="terms-legend">' in html  # the maps' colour scale
    data = page_data(html)
    cap = _capture(model, tokenizer, TEXT, PAIR)
    L, H = model.config.num_layers, model.config.num_heads
    terms = data["runs"][0]["terms"]
    assert terms["names"] == ["c2c", "c2p", "p2c"] and terms["storage"] == "full" and terms["size"] == T
    maps = decoded(terms, L, H)
    layer = lambda role: torch.cat([cap[f"layers.{i}.attention.{role}"] for i in range(L)])  # noqa: E731
    raw, q, k = layer("scores_raw"), layer("q"), layer("k")
    D = q.size(-1)
    assert terms["head_dim"] == D
    # c2c is q . k / sqrt(D (1 + 2)) (transformers' DisentangledSelfAttention: scale_factor = 1 + len(pos_att_type))
    expected = {"c2c": q @ k.transpose(-1, -2) / (3 * D) ** 0.5, "c2p": layer("c2p"), "p2c": layer("p2c")}
    torch.testing.assert_close(expected["c2c"] + expected["c2p"] + expected["p2c"], raw, atol=1e-6, rtol=0)
    for name, value in expected.items():
        bound = torch.tensor(terms["largest"][name]).view(L, H, 1, 1) * 0.5 / TERM_QUANT + 1e-6
        assert ((maps[name] - value).abs() <= bound).all(), name  # the captured tensor, to the rounding
        assert terms["largest"][name] == pytest.approx(value.abs().amax(dim=(-2, -1)).flatten().tolist(), rel=1e-6)
        mean = torch.tensor(terms["mean_abs"][name])
        torch.testing.assert_close(mean, value.abs().mean(dim=(-2, -1)), atol=1e-7, rtol=1e-5)
    assert (sum(maps.values()) - raw).abs().max() <= 1e-5  # the three parts add up to the scores before the mask
    assert raw.abs().max() > 0.01 and min(float(v.abs().max()) for v in expected.values()) > 0.001  # not all zero
    # the left-only run: layer 0 reads the same input, so has the same scores before the mask; the means are over
    # the pairs the mask lets through
    other = data["runs"][1]["terms"]
    torch.testing.assert_close(decoded(other, L, H)["c2p"][0], maps["c2p"][0], atol=0, rtol=0)
    keep = torch.ones(T, T).tril()
    torch.testing.assert_close(torch.tensor(other["mean_abs"]["c2p"][0]),
                               (expected["c2p"][0].abs() * keep).sum(dim=(-2, -1)) / keep.sum(), atol=1e-7, rtol=1e-5)


def test_a_convolution_leaves_the_decomposition_out_and_says_why(minilm_dir):
    """DeBERTa-v2's convolution after the first layer is not covered by ma.analysis.residual_decomposition: the page
    holds its reason instead; the entropy and rollout are there as for every model."""
    config = ma.Config(arch="deberta-v2", vocab_size=30522, hidden_size=32, num_layers=2, num_heads=4,
                       intermediate_size=40, relative_attention=True, pos_att_type=("p2c", "c2p"), conv_kernel_size=3)
    torch.manual_seed(0)
    model = ma.Encoder(config).eval()
    html = ma.explore(model, ma.Tokenizer.from_pretrained(minilm_dir), TEXT).html()
    analysis = page_data(html)["runs"][0]["analysis"]
    assert list(analysis["decomposition"]) == ["refused"] and "convolution" in analysis["decomposition"]["refused"]
    assert len(analysis["entropy"]) == 2 and analysis["rollout"]["storage"] == "full"
    assert 'id="decomposition-refused"' in html


def test_no_score_terms_for_a_model_without_them(minilm_dir):
    model, tokenizer = ma.Encoder.from_pretrained(minilm_dir), ma.Tokenizer.from_pretrained(minilm_dir)
    html = ma.explore(model, tokenizer, "The bank raised rates.").html()
    assert "terms" not in page_data(html)["runs"][0]
    assert 'id="terms-section"' not in html and 'id="terms"' not in html


def test_a_512_token_deberta_input_on_12x12_heads_stays_under_the_page_limit(minilm_dir):
    tokenizer = ma.Tokenizer.from_pretrained(minilm_dir)  # any 512-token tokenizer: the sizes are what is tested
    config = ma.Config(arch="deberta-v2", vocab_size=30522, hidden_size=96, num_layers=12, num_heads=12,
                       intermediate_size=96, type_vocab_size=0, max_position_embeddings=512, relative_attention=True,
                       pos_att_type=("p2c", "c2p"), position_buckets=256, max_relative_positions=512,
                       share_att_key=True, norm_rel_ebd="layer_norm", position_biased_input=False)
    torch.manual_seed(0)
    model = ma.Encoder(config).eval()
    text = " ".join(f"word{i % 50} and more" for i in range(400))
    page = ma.explore(model, tokenizer, text, max_length=512).html()
    data = page_data(page)
    T = len(data["tokens"])
    assert T == 512 and len(page.encode()) < PAGE_LIMIT  # with the analysis sections: the rollout and decomposition
    assert data["runs"][0]["analysis"]["rollout"]["storage"] == "full" and "share" in data["runs"][0]["analysis"][
        "decomposition"]
    terms = data["runs"][0]["terms"]
    N = terms["size"]
    assert terms["storage"] == "blocks" and 16 <= N < T
    maps = decoded(terms, 12, 12)
    cap = _capture(model, tokenizer, text)
    raw = cap["layers.5.attention.scores_raw"][0]  # layer 5: (H, T, T)
    blocks = F.adaptive_avg_pool2d(raw, N)  # block means of the scores: the sum of the parts' block means
    bound = sum(torch.tensor(terms["largest"][n]).view(12, 12)[5] for n in terms["names"]) * 0.5 / TERM_QUANT + 1e-6
    assert ((sum(maps[n][5] for n in terms["names"]) - blocks).abs() <= bound.view(12, 1, 1)).all()
    c2p = F.adaptive_avg_pool2d(cap["layers.5.attention.c2p"][0], N)
    assert ((maps["c2p"][5] - c2p).abs() <= torch.tensor(terms["largest"]["c2p"]).view(12, 12)[5].view(12, 1, 1)
            * 0.5 / TERM_QUANT + 1e-6).all()


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium)")
def test_the_score_terms_in_headless_chromium(tmp_path, deberta):
    pytest.importorskip("playwright.sync_api", reason="playwright (the test extra) is not installed")
    _, model, tokenizer = deberta
    out = ma.explore(model, tokenizer, TEXT, pair=PAIR).save(tmp_path / "deberta.html")
    url = out.resolve().as_uri()
    with headless_page(url) as (page, requests, errors):
        drawn = lambda: page.eval_on_selector("#terms", "c => [c.dataset.drawn, c.toDataURL()]")  # noqa: E731
        assert page.is_visible("#terms-section")
        assert "disentangled attention (c2c + c2p + p2c" in page.text_content("#summary")
        note = page.text_content("#terms-note")
        rows = page.eval_on_selector_all("#terms-summary tr", "rs => rs.map(r => r.cells.length)")
        before = drawn()
        page.select_option("#layer", "1")  # the head view's layer selector drives the section too
        after = drawn()
        assert page.input_value("#term-layer") == "1" and before[0] != after[0] and before[1] != after[1]
        page.select_option("#term-head", "2")
        share = page.text_content("#terms-share")
        legend = _legend(page, "terms")
        ink = page.eval_on_selector("#terms", _INK + "c => ink(c, 0, +c.dataset.top, +c.dataset.left, "
                                    "c.height - c.dataset.top)")  # the row labels
        page.locator("#terms").scroll_into_view_if_needed()
        box = page.eval_on_selector("#terms", "c => { const r = c.getBoundingClientRect(); "
                                    "return [r.left, r.top, +c.dataset.left, +c.dataset.top, +c.dataset.cell]; }")
        page.mouse.move(box[0] + box[2] + 2.5 * box[4], box[1] + box[3] + 1.5 * box[4])  # query 1, key 2
        readout = page.text_content("#terms-readout")
        page.click("#terms-summary tr:first-child")  # a row of the table selects its layer
        assert page.input_value("#layer") == "0" and drawn()[0].startswith("0:0:2")
        shot = tmp_path / "deberta.png"
        page.locator("#terms-section").screenshot(path=str(shot))
    assert errors == []
    assert requests == [url]  # the page itself, nothing else
    terms = page_data(out.read_text())["runs"][0]["terms"]
    assert "c2c (query content" in note and "c2p" in note and "p2c" in note and "\u221a(12 \u00b7 3)" in note
    assert rows == [4 + 1] * model.config.num_layers  # layer, three means, the shares
    assert share.startswith("run: layer 1, head 2") and all(f"{n} " in share for n in terms["names"])
    top = max(terms["largest"][n][1 * 3 + 2] for n in terms["names"])
    assert legend[0] and legend[3] > 20 and legend[1:3] == (pytest.approx(-top, abs=1e-4), pytest.approx(top, abs=1e-4))
    assert ink > 100
    maps = decoded(terms, 2, 3)
    tokens = page_data(out.read_text())["tokens"]
    values = [float(maps[n][1, 2, 1, 2]) for n in terms["names"]]
    query = re.sub(r"\s", "\u00b7", tokens[1]) or "\u2205"  # the page's label(): spaces shown, empty named
    assert readout.startswith(f"{query} -> ") and f"= {sum(values):.5f}" in readout
    pixels = _png_pixels(shot.read_bytes())
    assert len({row[i:i + 3] for row in pixels[::5] for i in range(0, len(row), 4 * 5)}) > 20  # drawn content
    if os.environ.get("MINIALIGN_SCREENSHOT"):  # how README's picture is made
        shutil.copyfile(shot, os.environ["MINIALIGN_SCREENSHOT"])
