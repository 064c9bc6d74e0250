"""dtype="int8" through the products: SentenceEncoder and Classifier quantized on request only, close to
fp32 on the real all-MiniLM-L6-v2, said everywhere (dtype_name, settings, the CLI's start line, the
service's /info, --resume), refused where it is not offered (scorers, GPUs)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from conftest import save_classifier
from family_builders import family_params

import minialign as ma
from minialign.apps.cli import main as cli
from minialign.loading.devices import check_int8
from minialign.nn import int8
from minialign.nn.int8 import Int8Linear
from minialign.nn.layers import PRECISION_LAYERS
from minialign.nn.linear import Linear

pytestmark = pytest.mark.skipif(not int8.available(), reason="no FBGEMM int8 kernels on this torch / CPU")

TEXTS = ["The Eiffel Tower is in Paris.", "A decorator indicating abstract methods.",
         "Return the number of items in a container; the argument may be a sequence or a collection. " * 4,
         "Unicode: café 東京 😀", "Short."]


@pytest.fixture(scope="module")
def encoders(minilm_dir):
    return ma.SentenceEncoder.from_pretrained(minilm_dir), ma.SentenceEncoder.from_pretrained(minilm_dir, dtype="int8")


def test_int8_is_opt_in_and_quantizes_the_encoder_layers_only(encoders):
    fp32, quantized = encoders
    assert fp32.dtype_name == "float32" and not fp32.model.int8
    assert quantized.dtype_name == "int8" and quantized.settings()["dtype"] == "int8"
    flagged = {name for name, m in quantized.model.named_modules() if isinstance(m, Linear) and m.int8}
    linears = {name for name, m in quantized.model.named_modules() if isinstance(m, Linear)}
    layer_parts = {f"layers.{i}.{part}" for i in range(6) for part in PRECISION_LAYERS[Int8Linear]}
    assert {n.removeprefix("encoder.") for n in flagged} == layer_parts
    assert all(p.dtype == torch.float32 for p in quantized.model.parameters())  # the weights stay fp32
    assert linears > flagged or linears == flagged


def test_int8_embeddings_are_close_to_fp32_and_the_same_every_call(encoders):
    fp32, quantized = encoders
    reference, first = fp32.encode(TEXTS), quantized.encode(TEXTS)
    assert torch.equal(quantized.encode(TEXTS), first)
    cosine = F.cosine_similarity(first, reference)
    assert cosine.min() >= 0.97 and cosine.mean() >= 0.98
    assert not torch.equal(first, reference)  # quantized: not the fp32 answer


def test_int8_is_calibrated_on_loading_and_each_text_gets_its_own_answer(encoders, minilm_dir):
    """Every quantized layer has its smoothing statistics from the built-in text, the same on every load;
    per-token input ranges: a text's embedding does not depend on the batch it runs in."""
    _, quantized = encoders
    layers = [m for m in quantized.model.modules() if isinstance(m, Linear) and m.int8]
    assert layers and all(m.int8_input_absmax is not None and m.int8_weight().input_scale is not None
                          for m in layers)
    again = ma.SentenceEncoder.from_pretrained(minilm_dir, dtype="int8")
    assert all(torch.equal(a.int8_input_absmax, b.int8_input_absmax) for a, b in zip(
        layers, [m for m in again.model.modules() if isinstance(m, Linear) and m.int8]))
    together = quantized.encode(TEXTS)
    alone = torch.cat([quantized.encode([text]) for text in TEXTS])
    assert torch.equal(alone, together)


def test_hooks_and_captures_see_the_intermediates_the_int8_products_read(encoders):
    """The feed-forward's intermediate and attention's context are worked on in place by the int8 product
    that reads them (nn/int8.py, scratch) only where nothing else can hold them: a forward hook on the
    up projection, or a capture, keeps the values it was given, and the answer is the same to the bit."""
    _, quantized = encoders
    model, kept = quantized.model, {}
    up = next(m for name, m in model.named_modules() if name.endswith("layers.0.ffn.up"))
    alone = quantized.encode(TEXTS[:2])

    output = next(m for name, m in model.named_modules() if name.endswith("layers.0.attention.output"))

    def keep(module, args, result):
        kept["held"], kept["then"] = result, result.clone()

    def keep_input(module, args):
        kept["context"], kept["context then"] = args[0], args[0].clone()

    handles = [up.register_forward_hook(keep), output.register_forward_pre_hook(keep_input)]
    try:
        assert torch.equal(quantized.encode(TEXTS[:2]), alone)
    finally:
        for handle in handles:
            handle.remove()
    assert torch.equal(kept["held"], kept["then"]) and torch.equal(kept["context"], kept["context then"])
    with ma.capture(model) as cap:
        quantized.encode(TEXTS[:2])
    name = next(n for n in cap if n.endswith("layers.0.ffn.intermediate"))
    with torch.inference_mode():
        recomputed = up(cap[name.replace("ffn.intermediate", "attention_norm")])
    assert torch.equal(cap[name], recomputed)


def test_recalibrating_on_other_text_changes_the_statistics(minilm_dir):
    encoder = ma.SentenceEncoder.from_pretrained(minilm_dir, dtype="int8")
    name = next(n for n, m in encoder.model.named_modules() if isinstance(m, Linear) and m.int8)
    builtin, before = encoder.model.get_submodule(name).int8_input_absmax, encoder.encode(TEXTS)
    encoder.calibrate_int8(TEXTS)  # sets new Int8Linear modules in the layers' places
    assert not torch.equal(encoder.model.get_submodule(name).int8_input_absmax, builtin)
    assert not torch.equal(encoder.encode(TEXTS), before)
    for bad, problem in (([], "at least one text"), ("one text", "sequence of strings"), ([None], r"texts\[0\]")):
        with pytest.raises(ValueError, match=problem):
            encoder.calibrate_int8(bad)
    with pytest.raises(ValueError, match="dtype='int8'"):
        ma.SentenceEncoder.from_pretrained(minilm_dir).calibrate_int8(TEXTS)


def test_int8_worker_processes_get_the_statistics(encoders, minilm_dir):
    _, quantized = encoders
    workers = ma.SentenceEncoder.from_pretrained(minilm_dir, dtype="int8", batch_size=2, workers=2)
    try:
        # equal on this machine; where the workers run fewer threads than this process, fp32 sums in another
        # order may move an input across a rounding step: far below the loss of the smoothing (cosine 0.9995)
        cosine = F.cosine_similarity(workers.encode(TEXTS), quantized.encode(TEXTS))
        assert cosine.min() > 0.99999
    finally:
        workers.close()


def test_int8_classifier_predict_and_rerank(tmp_path, minilm_dir):
    save_classifier(tmp_path / "reranker", "bert", 1, minilm_dir)
    fp32 = ma.Classifier.from_pretrained(tmp_path / "reranker")
    quantized = ma.Classifier.from_pretrained(tmp_path / "reranker", dtype="int8")
    assert quantized.dtype_name == "int8" and quantized.settings()["dtype"] == "int8"
    queries, docs = ["Eiffel Tower"] * 4, ["A tower in Paris.", "Bananas are yellow.", "It opened in 1889.", "Hi"]
    reference = fp32.predict(queries, docs, activation="none")
    logits = quantized.predict(queries, docs, activation="none")
    assert (logits - reference).abs().max() <= 0.05 * reference.abs().max() + 1e-3
    ranked = quantized.rerank("Eiffel Tower", docs)
    assert sorted(index for index, _ in ranked) == [0, 1, 2, 3]


def test_scorers_and_gpus_refuse_int8(tmp_path):
    for runner in (ma.AlignScorer, ma.MiniCheckScorer):
        with pytest.raises(ValueError, match="does not run dtype='int8'"):
            runner.from_pretrained(tmp_path / "anything", dtype="int8")
    with pytest.raises(ValueError, match="CPU only"):
        check_int8(torch.device("cuda"))


def test_cli_says_int8_and_resume_refuses_a_mix(tmp_path, minilm_dir, capsys, encoders):
    assert cli(["embed", "--model", str(minilm_dir), "--text", TEXTS[0], "--dtype", "int8"]) == 0
    captured = capsys.readouterr()
    assert "dtype int8: quantized" in captured.err
    torch.testing.assert_close(torch.tensor(json.loads(captured.out)), encoders[1].encode(TEXTS[:1])[0],
                               atol=1e-6, rtol=0)
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    out = tmp_path / "out.jsonl"
    args = ["embed", "--model", str(minilm_dir), "--input", str(tmp_path / "in.jsonl"), "--output", str(out)]
    assert cli([*args, "--dtype", "int8"]) == 0
    whole = out.read_text()
    out.write_text("".join(whole.splitlines(keepends=True)[:2]))
    capsys.readouterr()
    assert cli([*args, "--resume"]) == 2  # the rest in fp32: refused
    assert "dtype" in capsys.readouterr().err
    assert cli([*args, "--resume", "--dtype", "int8"]) == 0
    assert len(out.read_text().splitlines()) == len(TEXTS)
    record = out.with_name(out.name + ".settings.json")
    made = json.loads(record.read_text())
    assert made["settings"]["int8"] == encoders[1].settings()["int8"]
    made["settings"]["int8"] = made["settings"]["int8"].replace(int8.SCHEME, "an older int8 scheme")
    record.write_text(json.dumps(made))
    out.write_text("".join(whole.splitlines(keepends=True)[:2]))
    capsys.readouterr()
    assert cli([*args, "--resume", "--dtype", "int8"]) == 2  # made under another int8 formula: refused
    assert "an older int8 scheme" in capsys.readouterr().err


def test_int8_settings_name_the_scheme_and_the_calibration(encoders, minilm_dir):
    """The fingerprint a file records: the same for another load and for worker processes (statistics
    from other batch shapes), another after recalibrating on other text."""
    quantized = encoders[1]
    recorded = quantized.settings()["int8"]
    assert recorded.startswith(int8.SCHEME) and "weights" in recorded and "calibration " in recorded
    assert ma.SentenceEncoder.from_pretrained(minilm_dir, dtype="int8", batch_size=3).settings()["int8"] == recorded
    other = ma.SentenceEncoder.from_pretrained(minilm_dir, dtype="int8")
    other.calibrate_int8(TEXTS)
    assert other.settings()["int8"] != recorded
    assert "int8" not in encoders[0].settings()


@pytest.mark.parametrize("family", family_params())
def test_int8_runs_every_family_close_to_fp32(family, tiny_family):
    """Calibration on loading and the quantized products through each family's layers (DeBERTa's
    disentangled attention, ModernBERT's gated feed-forward and windows, ...): close to fp32."""
    directory = tiny_family.sentence_transformers(family)
    reference = ma.SentenceEncoder.from_pretrained(directory).encode(TEXTS, warn_truncation=False)
    quantized = ma.SentenceEncoder.from_pretrained(directory, dtype="int8")
    assert all(m.int8_input_absmax is not None for m in quantized.model.modules() if isinstance(m, Linear) and m.int8)
    assert F.cosine_similarity(quantized.encode(TEXTS, warn_truncation=False), reference).min() > 0.99
    directory, _ = tiny_family.classifier(family, 3)
    texts, pairs = TEXTS[:3], TEXTS[2:]
    options = {"activation": "none", "warn_truncation": False}
    reference = ma.Classifier.from_pretrained(directory).predict(texts, pairs, **options)
    logits = ma.Classifier.from_pretrained(directory, dtype="int8").predict(texts, pairs, **options)
    assert (logits - reference).abs().max() <= 0.05 * reference.abs().max() + 1e-3
