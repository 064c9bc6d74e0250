"""ma.explore: the numbers embedded in the page are the captured tensors; long inputs stay under the
stated size; the page works in a real browser (headless Chromium), offline."""

from __future__ import annotations

import array
import contextlib
import base64
import json
import math
import os
import re
import shutil
import struct
import zlib

import pytest
import torch
import torch.nn.functional as F

import minialign as ma
from minialign.apps.cli import main
from minialign.apps.explore.data import FLOW_STEPS, PAGE_LIMIT, QUANT
from minialign.nn.score_swap import with_score_function
from minialign.nn import analysis

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@contextlib.contextmanager
def headless_page(url: str, *, timeout_ms: int = 20000):
    """`url` in headless Chromium, once the page says it is ready (body[data-ready='1']): yields (the page, the
    URLs it requested, its console errors and uncaught exceptions); the browser closes after."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (the test extra) is not installed")
    requests, errors = [], []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 1400})
            page.on("request", lambda r: requests.append(r.url))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url)
            page.wait_for_selector("body[data-ready='1']", timeout=timeout_ms)
            yield page, requests, errors
        finally:
            browser.close()


def page_data(html: str) -> dict:
    match = re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S)
    return json.loads(match.group(1).replace("<\\/", "</"))


def u16(b64: str) -> torch.Tensor:
    values = array.array("H")
    values.frombytes(base64.b64decode(b64))
    return torch.tensor(values.tolist(), dtype=torch.float32)


def _maps(stored: dict, T: int) -> torch.Tensor:
    """Maps the page stores whole (data.py _token_maps) as (maps, T, T) weights."""
    assert stored["storage"] == "full"
    return u16(stored["weights"]).view(-1, T, T) / QUANT


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    return ma.Encoder.from_pretrained(minilm_dir), ma.Tokenizer.from_pretrained(minilm_dir)


def _capture(model, tokenizer, text, pair=None, mask=None):
    batch = tokenizer([text], None if pair is None else [pair])
    if mask is not None:
        batch["attention_mask"] = mask
    with torch.inference_mode(), ma.capture(model) as cap:
        out = model(**{k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")})
    return cap, out


def test_embedded_numbers_are_the_captured_tensors(minilm):
    model, tokenizer = minilm
    text, pair = "The bank raised rates.", "Rates went up at the bank."
    data = page_data(ma.explore(model, tokenizer, text, pair=pair).html())
    cap, _ = _capture(model, tokenizer, text, pair)
    T, L, H = len(data["tokens"]), model.config.num_layers, model.config.num_heads
    assert data["tokens"][0] == "[CLS]" and T == cap["layers.0.attention.probs"].shape[-1]
    attention = data["runs"][0]["attention"]
    assert attention["storage"] == "full"
    weights = u16(attention["weights"]).view(L, H, T, T) / QUANT
    probs = torch.cat([cap[f"layers.{i}.attention.probs"] for i in range(L)])
    assert (weights - probs).abs().max() <= 0.5 / QUANT + 1e-7
    assert (weights.sum(-1) - 1).abs().max() <= T * 0.5 / QUANT  # rows sum to 1 on the real tokens
    norms = torch.tensor(data["runs"][0]["norms"])
    expected = torch.stack([cap["embeddings.norm"][0].norm(dim=-1)] + [cap[f"layers.{i}.output"][0].norm(dim=-1)
                                                                        for i in range(L)])
    torch.testing.assert_close(norms, expected, atol=1e-4, rtol=1e-5)
    word = torch.tensor(data["runs"][0]["parts"]["word"])
    torch.testing.assert_close(word, cap["embeddings.word"][0].norm(dim=-1), atol=1e-4, rtol=1e-5)
    cosines = torch.tensor(data["runs"][0]["part_cosines"]["position"])
    torch.testing.assert_close(cosines[3], F.cosine_similarity(cap["layers.2.output"][0],
                                                               cap["embeddings.position"][0], dim=-1), atol=1e-4, rtol=0)


def _left_only(tokenizer, text: str) -> tuple[int, torch.Tensor]:
    """(the text's tokens T, the left-only mask (1, T, T) of them)."""
    T = len(tokenizer([text])["input_ids"][0])
    return T, ma.masks.left_only_mask(torch.ones(1, T, dtype=torch.bool))


def test_two_runs_left_only_against_bidirectional(minilm):
    model, tokenizer = minilm
    text = "The bank raised rates again."
    T, left = _left_only(tokenizer, text)
    data = page_data(ma.explore(model, tokenizer, text, compare_mask=left, labels=("bidirectional", "left-only")).html())
    a, _ = _capture(model, tokenizer, text)
    b, _ = _capture(model, tokenizer, text, mask=left)
    L = model.config.num_layers
    cos = torch.tensor(data["cosine"])
    expected = torch.stack([F.cosine_similarity(a[f"layers.{i}.output"][0], b[f"layers.{i}.output"][0], dim=-1)
                            for i in range(L)])
    torch.testing.assert_close(cos[1:], expected, atol=1e-4, rtol=0)
    assert cos[0].min() > 0.9999  # the embeddings do not see the mask
    weights = u16(data["runs"][1]["attention"]["weights"]).view(L, -1, T, T)
    assert weights.triu(1).max() == 0  # left-only: no query attends a later key
    with pytest.raises(ValueError, match=f"compare_mask must be \\({T}, {T}\\)"):
        ma.explore(model, tokenizer, text, compare_mask=torch.ones(T + 1, T + 1, dtype=torch.bool))
    with pytest.raises(ValueError, match="text must be a string, got int"):
        ma.explore(model, tokenizer, 3)
    blank = ma.explore(model, tokenizer, "  ")  # the special tokens alone, as every face runs ""
    assert blank.data["tokens"] == ["[CLS]", "[SEP]"] and len(blank.data["runs"]) == 1


def test_alignscore_heads(minilm_dir):
    config = ma.Config(vocab_size=30522, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=40)
    torch.manual_seed(0)
    model = ma.AlignModel(config).eval()
    tokenizer = ma.Tokenizer.from_pretrained(minilm_dir)
    data = page_data(ma.explore(model, tokenizer, "A claim.", pair="A context.").html())
    _, out = _capture(model, tokenizer, "A claim.", "A context.")
    heads = data["runs"][0]["heads"]
    tri = torch.softmax(out.tri_label_logits, -1)[0]
    assert data["model"]["class"] == "AlignModel" and len(data["runs"]) == 1 and "cosine" not in data
    assert heads["tri: aligned"] == pytest.approx(float(tri[0]), abs=1e-6)
    assert heads["tri: contradiction"] == pytest.approx(float(tri[2]), abs=1e-6)
    assert heads["reg"] == pytest.approx(float(out.reg_label_logits[0, 0]), abs=1e-6)


def test_the_cli_runs_the_class_the_checkpoint_is_for(tmp_path, tiny_alignscore, minilm_dir):
    """`minialign explore` builds the model class the checkpoint's heads name (models.auto.model_class):
    AlignScore's heads shown for an AlignScore checkpoint, none for an encoder or a classifier."""
    from conftest import save_classifier

    path, backbone, _ = tiny_alignscore
    save_classifier(tmp_path / "clf", "bert", 3, minilm_dir)
    out = tmp_path / "page.html"
    for model, extra, cls in ((path, ["--backbone", str(backbone)], "AlignModel"), (minilm_dir, [], "Encoder"),
                              (tmp_path / "clf", [], "ClassifierModel")):
        assert main(["explore", "--model", str(model), *extra, "--text", "A claim.", "--pair", "A context.",
                     "--output", str(out)]) == 0
        data = page_data(out.read_text())
        assert data["model"]["class"] == cls and ("heads" in data["runs"][0]) == (cls == "AlignModel")


def test_score_function_swap(minilm):
    model, tokenizer = minilm
    text = "The bank raised its rates."
    location = with_score_function(model, "location")  # its offsets' weights start small: near-uniform attention
    data = page_data(ma.explore(model, tokenizer, text, compare_model=location).html())
    assert data["model"]["score_fn"] == "scaled_dot" and len(data["runs"]) == 2
    assert torch.tensor(data["cosine"])[1:].min() < 0.99  # another score function: other states
    general = with_score_function(model, "general")  # starts as the scaled dot product (model.init_parameter)
    same = page_data(ma.explore(model, tokenizer, text, compare_model=general).html())
    assert torch.tensor(same["cosine"]).min() > 0.9999


def test_a_score_function_page_is_the_same_every_run_and_seeded(tmp_path, minilm_dir, capsys):
    """`explore --score-fn additive` draws the additive function's weights from with_score_function's fixed seed:
    two runs write the same page; --seed draws others (another page); --seed without --score-fn is refused."""
    pages = []
    for name, seed in (("a", []), ("b", []), ("c", ["--seed", "1"])):
        out = tmp_path / f"{name}.html"
        assert main(["explore", "--model", str(minilm_dir), "--text", "The bank raised its rates.",
                     "--score-fn", "additive", *seed, "--output", str(out)]) == 0
        pages.append(out.read_bytes())
    assert pages[0] == pages[1] and pages[0] != pages[2]
    assert main(["explore", "--model", str(minilm_dir), "--text", "A.", "--seed", "1",
                 "--output", str(tmp_path / "d.html")]) == 2
    assert "give --score-fn too" in capsys.readouterr().err


def test_a_512_token_input_on_12x12_heads_stays_under_the_page_limit(minilm_dir):
    config = ma.Config(vocab_size=30522, hidden_size=96, num_layers=12, num_heads=12, intermediate_size=96)
    model = ma.Encoder(config).eval()
    tokenizer = ma.Tokenizer.from_pretrained(minilm_dir)
    text = " ".join(f"word{i % 50} and more" for i in range(400))
    page = ma.explore(model, tokenizer, text, max_length=512).html()
    data = page_data(page)
    T = len(data["tokens"])
    assert T == 512 and data["truncated"] > 0
    assert len(page.encode()) < PAGE_LIMIT
    attention = data["runs"][0]["attention"]
    assert attention["storage"] == "topk" and attention["k"] >= 4
    cap, _ = _capture(model, tokenizer, text)
    probs = cap["layers.5.attention.probs"][0, 7]  # layer 5, head 7
    k = attention["k"]
    kept = (u16(attention["weights"]).view(12, 12, T, k) / QUANT)[5, 7]
    index = u16(attention["index"]).view(12, 12, T, k)[5, 7].long()
    assert (kept - probs.gather(-1, index)).abs().max() <= 0.5 / QUANT + 1e-7  # the captured weights
    assert (kept[:, 0] - probs.max(-1).values).abs().max() <= 0.5 / QUANT + 1e-7  # the strongest first
    rollout = _maps(data["runs"][0]["analysis"]["rollout"], T)[0]  # one T x T map, whole
    expected = analysis.attention_rollout([cap[f"layers.{i}.attention.probs"] for i in range(12)])[0]
    assert (rollout - expected).abs().max() <= 0.5 / QUANT + 1e-6
    assert len(data["runs"][0]["analysis"]["decomposition"]["share"][0]) == T
    assert "flow_note" in data["runs"][0]["analysis"]


LONG = " ".join(f"w{i}" for i in range(3000))  # 3,000 words, each its own few tokens: a cut is easy to see


def test_a_long_input_shows_only_what_the_model_saw(minilm):
    model, tokenizer = minilm
    page = ma.explore(model, tokenizer, LONG)
    html = page.html()
    data = page_data(html)
    total = tokenizer.token_counts([LONG])[0] + 2  # [CLS] ... [SEP]
    cut = total - 512
    assert data["truncated"] == cut and data["cut"] == {"tokens": total, "window": 512, "text": cut, "pair": None}
    note = f"the input is {total:,} tokens; the model's window is 512: {cut:,} tokens cut from the text"
    assert page.cut_note == note and note in html  # stated on the page
    assert "w2999" not in html and "w1000" not in html  # the cut words appear nowhere, not even in the data
    assert LONG.startswith(data["text"]) and tokenizer.token_counts([data["text"]])[0] == 510  # what was seen
    short = ma.explore(model, tokenizer, "The bank raised rates.")
    assert short.cut_note is None and short.data["text"] == "The bank raised rates."


def test_a_long_pair_states_which_text_was_cut(minilm):
    model, tokenizer = minilm
    claim = "Rates went up at the bank."
    n_long, n_claim = tokenizer.token_counts([LONG, claim])
    data = page_data(ma.explore(model, tokenizer, LONG, pair=claim).html())  # the first text absorbs the cut
    assert data["cut"] == {"tokens": n_long + n_claim + 3, "window": 512, "text": n_long + n_claim + 3 - 512, "pair": 0}
    assert data["pair"] == claim and LONG.startswith(data["text"])
    page = ma.explore(model, tokenizer, claim, pair=LONG)  # the second text alone does not fit: longest first
    data = page_data(page.html())
    assert data["cut"]["text"] == 0 and data["cut"]["pair"] == n_long + n_claim + 3 - 512 == data["truncated"]
    assert data["text"] == claim and LONG.startswith(data["pair"]) and "w2999" not in page.html()
    assert page.cut_note.endswith(f"{data['cut']['pair']:,} tokens cut from the pair")



@pytest.mark.parametrize("long", ["text", "pair", "both"])
def test_the_cut_of_each_text_of_a_pair_with_a_byte_level_bpe_tokenizer(bpe_dir, long):
    """RoBERTa's layout (<s> a </s></s> b </s>): each text's cut and the part seen agree with `tokenizers`' own
    truncation of the pair (the reference for small inputs; explore reads a long pair in linear memory)."""
    tokenizer = ma.Tokenizer.from_pretrained(bpe_dir)
    config = ma.Config(vocab_size=tokenizer.backend.get_vocab_size(), hidden_size=16, num_layers=1, num_heads=2,
                       intermediate_size=16, arch="roberta", pad_token_id=tokenizer.pad_token_id,
                       max_position_embeddings=66)
    model = ma.Encoder(config).eval()
    words = "the bank raised its rates again and café naïve 東京 went up".split()
    many = " ".join(words[i % len(words)] for i in range(120))
    text, pair = (many if long in ("text", "both") else "A claim."), (many if long in ("pair", "both") else "Rates.")
    data = ma.explore(model, tokenizer, text, pair=pair).data
    reference = tokenizer.encode([text], [pair], max_length=64)[0]
    counts = tokenizer.token_counts([text, pair])
    kept = [reference.sequence_ids.count(i) for i in (0, 1)]
    assert data["tokens"] == [tokenizer.decode([i], skip_special_tokens=False) for i in reference.ids]
    assert (data["cut"]["text"], data["cut"]["pair"]) == (counts[0] - kept[0], counts[1] - kept[1])
    assert data["cut"]["tokens"] == sum(counts) + 4 and data["truncated"] == sum(counts) - sum(kept) > 0
    for name, value, i in (("text", text, 0), ("pair", pair, 1)):
        assert value.startswith(data[name]) and tokenizer.token_counts([data[name]])[0] == kept[i]


def test_the_cli_says_the_cut_in_one_line_and_never_prints_the_text(tmp_path, minilm_dir, capsys):
    out = tmp_path / "long.html"
    assert main(["explore", "--model", str(minilm_dir), "--text", LONG, "--output", str(out)]) == 0
    captured = capsys.readouterr()
    printed = captured.out + captured.err
    lines = [line for line in printed.splitlines() if line.startswith("explore:")]
    assert len(lines) == 1, printed
    assert re.fullmatch(r"explore: the input is [\d,]+ tokens; the model's window is 512: [\d,]+ tokens cut "
                        r"from the text", lines[0])
    assert "w1 " not in printed and "w2999" not in printed and len(printed) < 400
    assert main(["explore", "--model", str(minilm_dir), "--text", "The bank raised rates.", "--output", str(out)]) == 0
    assert "explore:" not in capsys.readouterr().err  # nothing cut, nothing said


def test_every_heat_map_has_a_colour_scale(minilm):
    model, tokenizer = minilm
    text = "The bank raised rates."
    _, left = _left_only(tokenizer, text)
    html = ma.explore(model, tokenizer, text, compare_mask=left).html()
    for canvas in ("grid", "zoom-canvas", "norms", "parts", "diff", "entropy", "rollout"):
        assert f'<div class="legend" id="{canvas}-legend">' in html, canvas
    data = page_data(html)  # the model view's maps are each scaled to their own largest: the page says how large
    thumb_max = torch.tensor(data["runs"][0]["attention"]["thumb_max"])
    cap, _ = _capture(model, tokenizer, text)
    probs = torch.cat([cap[f"layers.{i}.attention.probs"] for i in range(model.config.num_layers)])
    torch.testing.assert_close(thumb_max, probs.flatten(0, 1).amax(dim=(1, 2)), atol=1e-5, rtol=0)  # T <= THUMB


TINY = ma.Config(vocab_size=30522, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=40)  # 2 layers: flow


def test_the_analysis_sections_are_ma_analysis_on_the_same_capture(minilm):
    """Head entropy, the rollout and the residual decomposition on the page are ma.analysis's on the same capture, to
    the storage's rounding; the decomposition's shares of the last hidden state sum to 1 on every token. MiniLM's 6
    layers make the exact flow too costly for this input, and the page says so."""
    model, tokenizer = minilm
    text, pair = "The bank raised rates.", "Rates at the bank went up again this year."  # 18 tokens: no flow
    data = page_data(ma.explore(model, tokenizer, text, pair=pair).html())
    cap, out = _capture(model, tokenizer, text, pair)
    L, T = model.config.num_layers, len(data["tokens"])
    probs = [cap[f"layers.{i}.attention.probs"] for i in range(L)]
    got = data["runs"][0]["analysis"]
    entropy = torch.tensor(got["entropy"])  # (layers, heads), nats
    torch.testing.assert_close(entropy, torch.stack([analysis.head_entropy(p) for p in probs]), atol=1e-5, rtol=0)
    assert 0 < entropy.min() < entropy.max() < math.log(T)
    rollout = _maps(got["rollout"], T)
    assert rollout.shape == (1, T, T)
    assert (rollout[0] - analysis.attention_rollout(probs)[0]).abs().max() <= 0.5 / QUANT + 1e-6
    assert "flow" not in got and L ** 2 * T ** 4 > FLOW_STEPS
    assert got["flow_note"].startswith("Attention flow is left out")
    assert f"({L}\u00b2 x {T}\u2074 = {L ** 2 * T ** 4:,} here" in got["flow_note"]
    decomposition = got["decomposition"]
    names = decomposition["parts"]
    assert names == ["embeddings", *(f"layers.{i}.{p}" for i in range(L) for p in ("attention", "ffn")), "norm biases"]
    with torch.inference_mode():  # the records are inference tensors; the norms' weights are parameters
        parts = torch.stack([analysis.residual_decomposition(model, cap)[name][0] for name in names])  # (parts, T, C)
    x = out.last_hidden_state[0]  # (T, C)
    share = torch.tensor(decomposition["share"])  # (parts, T): <p, x> / |x|^2
    torch.testing.assert_close(share, (parts * x).sum(-1) / (x * x).sum(-1), atol=1e-5, rtol=0)
    torch.testing.assert_close(share.sum(0), torch.ones(T), atol=1e-4, rtol=0)  # the bars sum to 1, every token
    torch.testing.assert_close(torch.tensor(decomposition["norm"]), parts.norm(dim=-1), atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(torch.tensor(decomposition["state_norm"]), x.norm(dim=-1), atol=1e-4, rtol=1e-5)
    assert decomposition["sum_error"] < 1e-5 and share.max() - share.min() > 0.1  # parts that differ


def test_the_flow_and_both_runs_under_an_alignmodel(minilm_dir):
    """A 2-layer model on a short input gets the attention flow (ma.analysis.attention_flow on the same capture);
    an AlignModel's encoder is what is decomposed; the left-only run's rollout and flow draw on no later token."""
    torch.manual_seed(0)
    model = ma.AlignModel(TINY).eval()
    tokenizer = ma.Tokenizer.from_pretrained(minilm_dir)
    text, pair = "A claim.", "A context about it."
    T = len(tokenizer([text], [pair])["input_ids"][0])
    left = ma.masks.left_only_mask(torch.ones(1, T, dtype=torch.bool))
    data = page_data(ma.explore(model, tokenizer, text, pair=pair, compare_mask=left).html())
    batch = tokenizer([text], [pair])
    with torch.inference_mode(), ma.capture(model.encoder) as cap:  # the encoder's own names
        model(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"])
    probs = [cap[f"layers.{i}.attention.probs"] for i in range(TINY.num_layers)]
    first, second = (run["analysis"] for run in data["runs"])
    flow = _maps(first["flow"], T)[0]
    assert (flow - analysis.attention_flow(probs)[0]).abs().max() <= 0.5 / QUANT + 1e-6 and "flow_note" not in first
    assert (flow - _maps(first["rollout"], T)[0]).abs().max() > 0.01  # the flow is not the rollout
    with torch.inference_mode():
        parts = analysis.residual_decomposition(model.encoder, cap)
    x = cap[f"layers.{TINY.num_layers - 1}.output"][0]
    share = torch.tensor(first["decomposition"]["share"])
    embeddings = (parts["embeddings"][0] * x).sum(-1) / (x * x).sum(-1)
    torch.testing.assert_close(share[0], embeddings, atol=1e-5, rtol=0)
    torch.testing.assert_close(share.sum(0), torch.ones(T), atol=1e-4, rtol=0)
    for kind in ("rollout", "flow"):  # left-only: no output token draws on a later input token
        later = _maps(second[kind], T)[0].triu(1)
        assert later.max() == 0 and _maps(first[kind], T)[0].triu(1).max() > 0.01, kind
    assert torch.tensor(second["decomposition"]["share"]).sum(0).sub(1).abs().max() < 1e-4


def test_a_training_mode_page_says_why_it_has_no_decomposition(minilm_dir):
    torch.manual_seed(0)
    model = ma.Encoder(TINY).train()  # dropout: residual_decomposition refuses
    html = ma.explore(model, ma.Tokenizer.from_pretrained(minilm_dir), "The bank raised rates.").html()
    refused = page_data(html)["runs"][0]["analysis"]["decomposition"]
    assert list(refused) == ["refused"] and "eval-mode" in refused["refused"]
    assert 'id="decomposition-refused"' in html and model.training  # the page says it; the model left as it was


def _png_pixels(png: bytes) -> list[bytes]:
    """Rows of RGB(A) pixels of an 8-bit non-interlaced PNG (what Chromium's screenshots are)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        body = png[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and interlace == 0 and colour in (2, 6)
    bpp = 3 if colour == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return rows


_INK = """const ink = (c, x, y, w, h) => { const p = c.getContext("2d").getImageData(x, y, w, h).data; let n = 0;
  for (let i = 0; i < p.length; i += 4) if (p[i] + p[i + 1] + p[i + 2] < 300) n++; return n; };\n"""


def _zoom_labels(page) -> dict:
    """The enlarged map's label step and counts, and the dark pixels (text) in its two label margins."""
    return page.eval_on_selector("#zoom-canvas", _INK + """c => { const d = c.dataset;
      return {tokens: +d.tokens, step: +d.step, cell: +d.cell, rows: +d.rowLabels, cols: +d.colLabels,
              row_ink: ink(c, 0, +d.top, +d.left, c.height - d.top),
              col_ink: ink(c, +d.left, 0, c.width - d.left, +d.top)}; }""")


def _legend(page, name: str) -> tuple[str, float, float, int]:
    """A heat map's colour scale: what it shows, its low and high ends as numbers, the shades of its bar."""
    what, lo, hi, shades = page.eval_on_selector(f"#{name}-legend", """b => { const bar = b.querySelector("canvas");
      const p = bar.getContext("2d").getImageData(0, 0, bar.width, 1).data, shades = new Set();
      for (let i = 0; i < p.length; i += 4) shades.add(p[i] * 65536 + p[i + 1] * 256 + p[i + 2]);
      const text = name => b.querySelector(name).textContent;
      return [text(".what"), text(".lo"), text(".hi"), shades.size]; }""")
    number = r"-?\d+(?:\.\d+)?(?:e-?\d+)?"
    return what.strip(), float(re.search(number, lo).group()), float(re.search(number, hi).group()), shades


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium; CI installs it)")
def test_the_page_in_headless_chromium(tmp_path, minilm_dir, minilm):
    pytest.importorskip("playwright.sync_api", reason="playwright (the test extra) is not installed")
    out = tmp_path / "explore.html"
    assert main(["explore", "--model", str(minilm_dir), "--text", "The bank raised rates.", "--pair",
                 "Rates at the bank went up again this year.", "--mask", "left-only", "--output", str(out)]) == 0
    url = out.resolve().as_uri()
    with headless_page(url) as (page, requests, errors):
        drawn = lambda: page.eval_on_selector("#head-canvas", "c => [c.dataset.drawn, c.toDataURL()]")  # noqa: E731
        before = drawn()
        page.select_option("#layer", "3")
        after = drawn()
        assert before[0] != after[0] and before[1] != after[1]  # another layer, other lines
        page.check("#heads input[data-head='2']")  # a second head, in its own colour
        assert drawn()[1] != after[1]
        page.click("#grid canvas[title='layer 2, head 5']")
        assert page.text_content("#zoom-title").endswith("layer 2, head 5 (rows: queries, columns: keys)")
        zoom = _zoom_labels(page)
        assert zoom["step"] == 1 and zoom["rows"] == zoom["cols"] == zoom["tokens"]  # every token, both axes
        assert zoom["row_ink"] > 100 and zoom["col_ink"] > 100  # and drawn
        assert page.is_visible("#diff-section")
        legends = {name: _legend(page, name) for name in ("grid", "zoom-canvas", "norms", "parts", "diff", "entropy",
                                                          "rollout")}
        diff = page.eval_on_selector("#diff", _INK + "c => ({values: +c.dataset.values, header: "
                                     "ink(c, +c.dataset.left, 0, c.width - c.dataset.left, +c.dataset.top)})")
        analysis_view = _analysis_view(page)
        shot = tmp_path / "explore.png"
        page.screenshot(path=str(shot), full_page=False)
    assert errors == []
    assert requests == [url]  # the page itself, nothing else
    data = page_data(out.read_text())
    T, L = len(data["tokens"]), data["model"]["layers"]
    for name, (what, lo, hi, shades) in legends.items():
        assert what and shades > 20, name  # a named quantity over a drawn colour bar
    a = data["runs"][0]["attention"]
    assert legends["zoom-canvas"][1:3] == (0, pytest.approx(float((u16(a["weights"]).view(L, -1, T, T)[2, 5]).max())
                                                             / QUANT, abs=1e-4))
    assert legends["grid"][1] == 0 and legends["grid"][2] == pytest.approx(max(a["thumb_max"]), abs=1e-4)
    norms = torch.tensor(data["runs"][0]["norms"])
    assert legends["norms"][1:3] == (pytest.approx(float(norms.min()), abs=1e-3),
                                     pytest.approx(float(norms.max()), abs=1e-3))
    assert legends["parts"][1:3] == (-1, 1)
    cosine = torch.tensor(data["cosine"])
    assert legends["diff"][1:3] == (pytest.approx(float(cosine.min()), abs=1e-4),
                                    pytest.approx(float(cosine.max()), abs=1e-4))
    assert diff["values"] == cosine.numel() and diff["header"] > 50  # every cosine printed; layers named
    _check_analysis_view(analysis_view, data, legends)
    rows = _png_pixels(shot.read_bytes())
    colours = {row[i:i + 3] for row in rows[::7] for i in range(0, len(row), 4 * 7)}
    assert len(colours) > 20  # drawn content, not a blank page
    if os.environ.get("MINIALIGN_SCREENSHOT"):  # how README's picture is made
        shutil.copyfile(shot, os.environ["MINIALIGN_SCREENSHOT"])


def _analysis_view(page) -> dict:
    """The analysis sections as drawn, and as they answer a click and a hover: an entropy cell (layer 1, head 3)
    enlarges its head's map; the rollout reads out (output token 1, input token 2); a click on token 3 redraws the
    decomposition; the run selector redraws the rollout."""
    seen = {"entropy_values": int(page.get_attribute("#entropy", "data-values"))}
    box = lambda name: page.eval_on_selector(  # noqa: E731  (its dataset, numbers as numbers)
        f"#{name}", "c => Object.fromEntries(Object.entries(c.dataset).map(([k, v]) => "
        "[k, v !== '' && !isNaN(v) ? +v : v]))")
    e = box("entropy")
    page.click("#entropy", position={"x": e["left"] + 3.5 * e["cw"], "y": e["top"] + 1.5 * e["rh"]})
    seen["zoom_title"] = page.text_content("#zoom-title")
    seen["entropy_readout"] = page.text_content("#entropy-readout")
    r = box("rollout")
    page.hover("#rollout", position={"x": r["left"] + 2.5 * r["cell"], "y": r["top"] + 1.5 * r["cell"]})
    seen["rollout"] = {**r, "readout": page.text_content("#rollout-readout"),
                       "kinds": page.eval_on_selector_all("#rollout-kind option", "os => os.map(o => o.value)"),
                       "flow_note": page.text_content("#flow-note"),
                       "row_ink": page.eval_on_selector("#rollout", _INK + "c => ink(c, 0, +c.dataset.top, "
                                                        "+c.dataset.left, c.height - c.dataset.top)")}
    table = lambda: page.eval_on_selector(  # noqa: E731  (what it shows: which run and token, its rows, its sum)
        "#decomposition", "t => [t.dataset.drawn, [...t.tBodies[0].rows].map(r => [...r.cells].map(c => "
        "c.textContent)), t.tFoot.textContent]")
    seen["decomposition_first"] = table()
    page.click("#decomposition-tokens .tok >> nth=3")
    seen["decomposition_picked"] = table()
    seen["picked_chip"] = page.eval_on_selector_all("#decomposition-tokens .tok.picked", "cs => cs.map(c => c.title)")
    seen["refused_visible"] = page.is_visible("#decomposition-refused") and page.text_content("#decomposition-refused")
    before = page.get_attribute("#rollout", "data-drawn")
    page.select_option("#run", "1")
    seen["rollout_drawn"] = (before, page.get_attribute("#rollout", "data-drawn"))
    return seen


def _check_analysis_view(seen: dict, data: dict, legends: dict) -> None:
    T, L, H = len(data["tokens"]), data["model"]["layers"], data["model"]["heads"]
    first = data["runs"][0]["analysis"]
    entropy = torch.tensor(first["entropy"])
    assert legends["entropy"][1:3] == (pytest.approx(float(entropy.min()), abs=1e-4),
                                       pytest.approx(float(entropy.max()), abs=1e-4))
    assert seen["entropy_values"] == L * H  # every head's entropy printed in its cell
    assert seen["zoom_title"].endswith("layer 1, head 3 (rows: queries, columns: keys)")  # the click enlarged it
    run = data["runs"][0]["label"]
    assert seen["entropy_readout"].startswith(f"{run}: layer 1, head 3: {float(entropy[1, 3]):.4f} nats")
    rollout = _maps(first["rollout"], T)[0]
    assert legends["rollout"][1:3] == (0, pytest.approx(float(rollout.max()), abs=1e-4))
    r = seen["rollout"]
    assert r["step"] == 1 and r["rowLabels"] == r["colLabels"] == T and r["row_ink"] > 100  # every token labelled
    query, key = (re.sub(r"\s", "\u00b7", data["tokens"][i]) or "\u2205" for i in (1, 2))  # the page's label()
    assert r["readout"] == f"{run}, rollout: {query} after the last layer from input {key}: {float(rollout[1, 2]):.5f}"
    assert r["kinds"] == ["rollout"] and r["flow_note"].startswith("Attention flow is left out")  # 6 layers: too costly
    parts = first["decomposition"]["parts"]
    share = torch.tensor(first["decomposition"]["share"])
    for (drawn, rows, foot), token in ((seen["decomposition_first"], 0), (seen["decomposition_picked"], 3)):
        assert drawn == f"0:{token}" and [row[0] for row in rows] == parts
        assert [float(row[2]) for row in rows] == pytest.approx(share[:, token].tolist(), abs=1e-4)
        assert foot == f"sum{float(share[:, token].sum()):.4f}" == "sum1.0000"  # the bars sum to 1
    assert seen["decomposition_first"][1] != seen["decomposition_picked"][1]  # the click redrew it
    assert seen["picked_chip"] == ["token 3"] and not seen["refused_visible"]
    assert seen["rollout_drawn"] == ("0:rollout", "1:rollout")  # the run selector redraws the rollout


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium)")
def test_the_flow_and_a_refused_decomposition_in_headless_chromium(tmp_path, minilm_dir):
    """A 2-layer model in training mode: the flow can be chosen and is drawn; the decomposition section gives
    residual_decomposition's reason instead of its table."""
    torch.manual_seed(0)
    model = ma.Encoder(TINY).train()
    out = ma.explore(model, ma.Tokenizer.from_pretrained(minilm_dir), "A claim.", pair="A context.").save(
        tmp_path / "train.html")
    with headless_page(out.resolve().as_uri()) as (page, _, errors):
        drawn = lambda: page.eval_on_selector("#rollout", "c => [c.dataset.drawn, c.toDataURL()]")  # noqa: E731
        before = drawn()
        page.select_option("#rollout-kind", "flow")
        after = drawn()
        legend = _legend(page, "rollout")
        refused = page.text_content("#decomposition-refused")
        shown = page.is_visible("#decomposition-shown")
        flow_note = page.text_content("#flow-note")
    assert errors == []
    data = page_data(out.read_text())
    flow = _maps(data["runs"][0]["analysis"]["flow"], len(data["tokens"]))[0]
    assert before[0] == "0:rollout" and after[0] == "0:flow" and before[1] != after[1] and flow_note == ""
    assert legend[0].startswith("flow") and legend[1:3] == (0, pytest.approx(float(flow.max()), abs=1e-4))
    assert "eval-mode" in refused and refused == f"Not shown for this model (run): " \
        f"{data['runs'][0]['analysis']['decomposition']['refused']}." and not shown


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium)")
def test_a_long_input_in_headless_chromium(tmp_path, minilm):
    pytest.importorskip("playwright.sync_api", reason="playwright (the test extra) is not installed")
    model, tokenizer = minilm
    page_obj = ma.explore(model, tokenizer, LONG)
    out = page_obj.save(tmp_path / "long.html")
    with headless_page(out.resolve().as_uri(), timeout_ms=60000) as (page, _, errors):
        text = page.inner_text("body")
        page.click("#grid canvas[title='layer 4, head 1']")
        zoom = _zoom_labels(page)
        legend = _legend(page, "zoom-canvas")
    assert errors == []
    assert page_obj.cut_note in text and "w2999" not in text and "w1000" not in text
    assert zoom["tokens"] == 512 and zoom["step"] > 1
    assert zoom["step"] * zoom["cell"] >= 11  # one label per 11 pixels at least: 10px text never overlaps
    assert zoom["rows"] == zoom["cols"] == -(-512 // zoom["step"]) and zoom["row_ink"] > 100 and zoom["col_ink"] > 100
    assert legend[1] == 0 and 0 < legend[2] <= 1


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium; CI installs it)")
def test_a_token_classifiers_labels_marked_on_the_pair(tmp_path, wordpiece_dir):
    """A *ForTokenClassification model (a tagger; LettuceDetect's hallucination detector is one): `minialign explore`
    stores each token's label probabilities (the model's own, softmax of its logits) and the page marks the pair's
    tokens (a LettuceDetect answer's), shaded by the probability of any label but the first, underlined where such
    a label wins; the first text's tokens are left unmarked."""
    from conftest import save_tagger

    directory = save_tagger(tmp_path / "tagger", wordpiece_dir)
    out = tmp_path / "labels.html"
    text, pair = "Berlin is in Germany.", "Paris is the capital of France."
    assert main(["explore", "--model", str(directory), "--text", text, "--pair", pair, "--output", str(out)]) == 0
    data = page_data(out.read_text())
    model, tokenizer = ma.TokenClassifierModel.from_pretrained(directory), ma.Tokenizer.from_pretrained(directory)
    batch = tokenizer([text], [pair])
    with torch.inference_mode():
        expected = torch.softmax(model(**batch).logits[0], dim=-1)
    stored = data["runs"][0]["token_labels"]
    assert stored["labels"] == list(model.config.labels)
    assert torch.tensor(stored["probs"]) == pytest.approx(expected, abs=1e-4)
    pair_from = batch["token_type_ids"][0].tolist().index(1)
    assert data["pair_from"] == pair_from
    with headless_page(out.resolve().as_uri()) as (page, _, errors):
        chips = page.eval_on_selector_all("#labels span", "els => els.map(e => [e.style.background, e.className])")
    assert errors == [] and len(chips) == len(data["tokens"])
    assert all(background == "" for background, _ in chips[:pair_from])  # the first text: not marked
    marked = [t for t in range(pair_from, len(chips)) if chips[t][1] == "marked"]
    assert marked and marked == [t for t in range(pair_from, len(chips)) if int(expected[t].argmax()) != 0]
    assert all(background.startswith("rgba") for background, _ in chips[pair_from:])
