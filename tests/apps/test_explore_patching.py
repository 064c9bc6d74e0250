"""ma.explore's clean / corrupted view: the corrupted run beside the clean one, and activation patching's maps equal to
ma.analysis.activation_patching called directly; the command line's --corrupted; mismatched token counts refused
before any forward; the section drawn in headless Chromium."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import minialign as ma
from minialign.apps.cli import main
from minialign.apps.explore import patching
from minialign.nn import analysis
from minialign.products import probes
from minialign.products.embeddings import SentenceEncoder
from test_explore import CHROMIUM, headless_page, page_data

CLEAN, CORRUPTED = "The Eiffel Tower is in Paris.", "The Colosseum Tower is in Rome."


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    return ma.Encoder.from_pretrained(minilm_dir), ma.Tokenizer.from_pretrained(minilm_dir)


def _inputs(tokenizer, text, pair=None):
    batch = tokenizer([text], None if pair is None else [pair])
    return {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}


def _restored(model, clean, corrupted, metric, names, per):
    result = analysis.activation_patching(model, clean, corrupted, metric, names, per=per)
    return result, torch.stack([result.restored()[name] for name in names])


def test_the_maps_are_activation_patching_s_with_the_mean_pooled_cosine(minilm):
    model, tokenizer = minilm
    data = ma.explore(model, tokenizer, CLEAN, corrupted=CORRUPTED).data
    clean, corrupted = _inputs(tokenizer, CLEAN), _inputs(tokenizer, CORRUPTED)
    T, layers, heads = clean["input_ids"].size(1), model.config.num_layers, model.config.num_heads
    assert [run["label"] for run in data["runs"]] == ["clean", "corrupted"]
    assert data["runs"][1]["tokens"] == data["corrupted_tokens"] != data["tokens"]
    assert len(data["corrupted_tokens"]) == T and data["corrupted"]["text"] == CORRUPTED

    with torch.no_grad():  # the metric: the cosine of the mean-pooled last state against the clean run's
        reference = model(**clean).last_hidden_state[0].mean(0)

    def metric(output):
        return F.cosine_similarity(output.last_hidden_state[0].mean(0), reference, dim=0)

    P = data["patching"]
    assert "mean-pooled" in P["metric"]
    result, residual = _restored(model, clean, corrupted, metric, [f"layers.{i}.output" for i in range(layers)],
                                 "position")
    assert abs(P["clean"] - 1) < 1e-5 and abs(P["corrupted"] - result.corrupted) < 1e-5
    stored = torch.tensor(P["residual"]["restored"])
    assert stored.shape == (layers, T)
    torch.testing.assert_close(stored, residual, atol=2e-4, rtol=0)
    _, by_head = _restored(model, clean, corrupted, metric, [f"layers.{i}.attention.context" for i in range(layers)],
                           "head")
    stored = torch.tensor(P["heads"]["restored"])
    assert stored.shape == (layers, heads)
    torch.testing.assert_close(stored, by_head, atol=2e-4, rtol=0)
    # the tokens that differ are where the last layer's output restores most; the others restore nothing there
    differ = [i for i, (a, b) in enumerate(zip(data["tokens"], data["corrupted_tokens"])) if a != b]
    assert set(range(T)) - set(differ) and all(abs(v) < 0.35 for i, v in enumerate(residual[0]) if i not in differ)


def test_an_alignmodel_is_scored_by_its_aligned_probability(minilm_dir):
    config = ma.Config(vocab_size=30522, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=40)
    torch.manual_seed(0)
    model = ma.AlignModel(config).eval()
    tokenizer = ma.Tokenizer.from_pretrained(minilm_dir)
    data = ma.explore(model, tokenizer, "Paris is in France.", pair="Paris is French.",
                      corrupted="Paris is in Spain.").data
    P = data["patching"]
    assert "aligned" in P["metric"] and data["corrupted"]["pair"] == "Paris is French."  # the pair kept
    clean = _inputs(tokenizer, "Paris is in France.", "Paris is French.")
    with torch.no_grad():
        aligned = torch.softmax(model(**clean).tri_label_logits, dim=-1)[0, 0]
    assert abs(P["clean"] - float(aligned)) < 1e-5
    assert abs(data["runs"][0]["heads"]["tri: aligned"] - P["clean"]) < 1e-5  # the page's own probability
    layers, T = model.config.num_layers, clean["input_ids"].size(1)
    assert torch.tensor(P["residual"]["restored"]).shape == (layers, T)
    assert P["residual"]["names"][0] == "encoder.layers.0.output"


def test_mismatched_token_counts_are_refused_before_any_forward(minilm, monkeypatch):
    model, tokenizer = minilm
    calls = []
    monkeypatch.setattr(type(model), "forward", lambda *a, **k: calls.append(1))
    with pytest.raises(ValueError, match=r"clean input is 11 tokens, the corrupted one 5"):
        ma.explore(model, tokenizer, CLEAN, corrupted="In Rome.")
    with pytest.raises(ValueError, match="compare_model"):
        ma.explore(model, tokenizer, CLEAN, corrupted=CORRUPTED, compare_mask=torch.ones(11, 11, dtype=torch.bool))
    with pytest.raises(ValueError, match="corrupted= too"):
        ma.explore(model, tokenizer, CLEAN, corrupted_pair="x")
    assert not calls


def test_the_position_map_is_left_out_past_the_budget_and_the_page_says_so(minilm, monkeypatch):
    model, tokenizer = minilm
    monkeypatch.setattr(patching, "POSITION_PATCHES", 10)
    P = ma.explore(model, tokenizer, CLEAN, corrupted=CORRUPTED).data["patching"]
    assert "restored" not in P["residual"] and "66 patched runs, over the page's 10" in P["residual"]["note"]
    assert len(P["heads"]["restored"]) == model.config.num_layers


def test_a_metric_given_is_used_and_named(minilm):
    model, tokenizer = minilm
    runner = SentenceEncoder(model, tokenizer, normalize=True)
    clean = _inputs(tokenizer, CLEAN)
    metric = probes.pooled_cosine(runner, runner.encode([CLEAN])[0], clean["attention_mask"])
    P = ma.explore(model, tokenizer, CLEAN, corrupted=CORRUPTED, metric=metric,
                   metric_name="the runner's cosine").data["patching"]
    assert P["metric"] == "the runner's cosine"
    expected = F.cosine_similarity(runner.encode([CORRUPTED]), runner.encode([CLEAN]))[0]
    assert abs(P["corrupted"] - float(expected)) < 1e-5


def test_the_cli_writes_the_page_with_the_model_s_own_pooling(tmp_path, minilm_dir, capsys):
    out = tmp_path / "patching.html"
    assert main(["explore", "--model", str(minilm_dir), "--text", CLEAN, "--corrupted", CORRUPTED,
                 "--output", str(out)]) == 0
    data = page_data(out.read_text())
    assert "sentence-transformers modules" in data["patching"]["metric"] and "Normalize" in data["patching"]["metric"]
    assert len(data["runs"]) == 2 and "Corrupted text" in out.read_text()
    assert main(["explore", "--model", str(minilm_dir), "--text", CLEAN, "--corrupted", "Rome.",
                 "--output", str(out)]) == 2
    assert "the clean input is 11 tokens, the corrupted one 4" in capsys.readouterr().err


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium")
def test_the_patching_section_in_headless_chromium(tmp_path, minilm):
    model, tokenizer = minilm
    path = ma.explore(model, tokenizer, CLEAN, corrupted=CORRUPTED).save(tmp_path / "p.html")
    with headless_page(path.as_uri()) as (page, requests, errors):
        assert not errors and all(url.startswith("file:") for url in requests)
        assert page.is_visible("#patching-section") and page.is_visible("#residual-patch")
        assert "mean-pooled" in page.inner_text("#patching-metric")
        assert int(page.get_attribute("#heads-patch", "data-values")) > 0
        page.select_option("#run", "1")  # the corrupted run's head view is labelled with its own tokens
    plain = ma.explore(model, tokenizer, CLEAN).save(tmp_path / "plain.html")
    with headless_page(plain.as_uri()) as (page, _, errors):
        assert not errors and not page.is_visible("#patching-section")


@pytest.mark.parametrize("arch", ["gemma3_text", "qwen3", "qwen2"])
def test_the_newest_families_explore_side_by_side(arch, minilm):
    """A tiny random model of each newest family (Gemma 3's sandwich norms and sliding window; causal Qwen): the
    page's two maps are activation patching's, and its residual decomposition is computed, not refused."""
    _, tokenizer = minilm
    extra = {} if arch == "qwen2" else {"head_dim": 8}
    config = ma.Config(arch=arch, vocab_size=30522, hidden_size=32, num_layers=2, num_heads=4, num_key_value_heads=2,
                       intermediate_size=48, **extra)
    model = ma.Encoder(config, seed=0).eval()
    page = ma.explore(model, tokenizer, "The bridge is in Paris.", corrupted="The bridge is in Rome.")
    patching = page.data["patching"]
    assert len(patching["residual"]["restored"]) == 2 and len(patching["heads"]["restored"]) == 2
    decomposition = page.data["runs"][0]["analysis"]["decomposition"]
    assert "parts" in decomposition and decomposition["sum_error"] < 1e-4
