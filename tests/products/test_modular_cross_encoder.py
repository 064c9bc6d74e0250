"""Classifier on CrossEncoders saved as modules (sentence-transformers 5.4+: a Transformer, then Pooling, Dense and
LayerNorm modules, the last Dense writing "scores"), against CrossEncoder.predict / rank on tiny random ModernBERT
and BERT models saved by sentence-transformers itself, padded and packed."""

import json
import shutil
import warnings

import pytest
import torch

import minialign as ma
from minialign.apps.cli import main as cli
from minialign.runtime.engine import TruncationWarning

TOL = dict(atol=1e-5, rtol=0)
PAIRS = [("The tower was built in Paris.", "It is in France."), ("A short one.", "Tiny."),
         ("Unicode: café naïve 東京 😀", "Numbers 3.14 and $5,000."), ("", "An empty first text."),
         ("the minister said " * 20, "a long first text, cut by the window")]


def _save(tiny_family, root, model_type, *, layout: str, num_labels: int = 1, seed: int = 3):
    """A CrossEncoder over `tiny_family.hf(model_type)` with a head of modules, saved by sentence-transformers:
    "ettin" Pooling(cls) -> Dense(GELU) -> LayerNorm -> Dense(num_labels) (the Ettin rerankers'), "mean" Pooling(mean,
    max) -> Dense(tanh, no bias) -> Dense(num_labels, no bias)."""
    from sentence_transformers import CrossEncoder
    from sentence_transformers.base.modules import Dense, Transformer
    from sentence_transformers.sentence_transformer.modules import LayerNorm, Pooling

    base, _ = tiny_family.hf(model_type)
    transformer = Transformer(str(base), transformer_task="feature-extraction", max_seq_length=24)
    width = transformer.get_embedding_dimension()
    torch.manual_seed(seed)
    if layout == "ettin":
        head = [Pooling(width, "cls"), Dense(width, width, activation_function=torch.nn.GELU()), LayerNorm(width)]
    else:
        head = [Pooling(width, ["mean", "max"]), Dense(2 * width, width, bias=False)]
    scores = Dense(width, num_labels, bias=layout == "ettin", activation_function=None, module_output_name="scores")
    for module in head[1:] + [scores]:  # random, not LayerNorm's ones and zeros: every value is read
        for parameter in module.parameters():
            torch.nn.init.normal_(parameter, std=0.5)
    directory = root / f"{model_type}-{layout}-{num_labels}"
    CrossEncoder(modules=[transformer, *head, scores], device="cpu").save(str(directory))
    return directory


@pytest.fixture(scope="module")
def ettin(tiny_family, tmp_path_factory):
    return _save(tiny_family, tmp_path_factory.mktemp("ce"), "modernbert", layout="ettin")


@pytest.mark.parametrize("model_type,layout", [("modernbert", "ettin"), ("bert", "mean")])
@pytest.mark.parametrize("unpad", [False, True])
def test_predict_equals_cross_encoder(tiny_family, tmp_path, model_type, layout, unpad):
    from sentence_transformers import CrossEncoder

    directory = _save(tiny_family, tmp_path, model_type, layout=layout)
    reference = CrossEncoder(str(directory), device="cpu")
    clf = ma.Classifier.from_pretrained(directory, unpad=unpad)
    assert clf.reranker and clf.activation() == "sigmoid"
    a, b = map(list, zip(*PAIRS))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)
        torch.testing.assert_close(clf.predict(a, b), reference.predict(PAIRS, convert_to_tensor=True), **TOL)
        logits = reference.predict(PAIRS, activation_fn=torch.nn.Identity(), convert_to_tensor=True)
        torch.testing.assert_close(clf.predict(a, b, activation="none"), logits, **TOL)
        assert [i for i, _ in clf.rerank("Where is the tower?", b)] == [
            r["corpus_id"] for r in reference.rank("Where is the tower?", b)]


def test_several_labels_are_logits_as_cross_encoder_gives_them(tiny_family, tmp_path):
    """Three labels: CrossEncoder's default activation is none (Identity), and the labels are LABEL_i."""
    from sentence_transformers import CrossEncoder

    directory = _save(tiny_family, tmp_path, "bert", layout="mean", num_labels=3)
    clf = ma.Classifier.from_pretrained(directory)
    assert clf.labels == ["LABEL_0", "LABEL_1", "LABEL_2"] and clf.activation() == "none"
    expected = CrossEncoder(str(directory), device="cpu").predict(PAIRS[:3], convert_to_tensor=True)
    torch.testing.assert_close(clf.predict(*map(list, zip(*PAIRS[:3]))), expected, **TOL)


def test_a_pair_scores_the_same_bits_whatever_its_batch(ettin):
    clf = ma.Classifier.from_pretrained(ettin, unpad=True)
    a, b = map(list, zip(*PAIRS[:4]))
    together = clf.predict(a, b)
    for i in range(len(a)):
        assert torch.equal(clf.predict(a[i], b[i]), together[i])


def test_the_classify_command_scores_as_predict(ettin, tmp_path):
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps({"text": a, "pair": b}) + "\n" for a, b in PAIRS[:3]))
    assert cli(["classify", "--model", str(ettin), "--input", str(tmp_path / "pairs.jsonl"), "--pair-field", "pair",
                "--output", str(tmp_path / "out.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    expected = ma.Classifier.from_pretrained(ettin).predict(*map(list, zip(*PAIRS[:3])))
    torch.testing.assert_close(torch.tensor([r["score"] for r in rows]), expected, atol=1e-6, rtol=0)


def _edit(source, target, change):
    shutil.copytree(source, target)
    change(target)
    return target


def test_a_logit_score_module_after_a_head_is_refused(ettin, tmp_path):
    def logit_score(directory):
        modules = json.loads((directory / "modules.json").read_text())
        modules.append({"idx": len(modules), "name": str(len(modules)), "path": "9_LogitScore",
                        "type": "sentence_transformers.cross_encoder.modules.logit_score.LogitScore"})
        (directory / "modules.json").write_text(json.dumps(modules))

    with pytest.raises(ValueError, match="LogitScore module must follow the Transformer"):
        ma.Classifier.from_pretrained(_edit(ettin, tmp_path / "m", logit_score))


@pytest.mark.parametrize("key,value,message", [("module_output_name", "sentence_embedding", "writes"),
                                               ("use_residual", True, "use_residual")])
def test_a_head_minialign_cannot_run_is_refused(ettin, tmp_path, key, value, message):
    def change(directory):
        config = json.loads((directory / "4_Dense" / "config.json").read_text())
        (directory / "4_Dense" / "config.json").write_text(json.dumps({**config, key: value}))

    with pytest.raises(ValueError, match=message):
        ma.Classifier.from_pretrained(_edit(ettin, tmp_path / "m", change))


def test_int8_calibrates_the_encoder_of_a_modular_cross_encoder(ettin):
    """dtype="int8": the encoder's layers are int8 and calibrated on loading, as for every runner; the scores stay
    close to fp32's."""
    exact, quantized = ma.Classifier.from_pretrained(ettin), ma.Classifier.from_pretrained(ettin, dtype="int8")
    assert quantized.dtype_name == "int8" and quantized.settings()["dtype"] == "int8"
    a, b = map(list, zip(*PAIRS[:3]))
    torch.testing.assert_close(quantized.predict(a, b), exact.predict(a, b), atol=0.02, rtol=0)


def test_do_lower_case_is_the_transformer_modules(ettin, tmp_path):
    """sentence_bert_config.json's do_lower_case: the Transformer module lowercases each text first (as
    CrossEncoder does), so a pair scores as its lowercased copy."""
    def lower(directory):
        path = directory / "sentence_bert_config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "do_lower_case": True}))

    plain = ma.Classifier.from_pretrained(ettin)
    lowered = ma.Classifier.from_pretrained(_edit(ettin, tmp_path / "m", lower))
    a, b = map(list, zip(*PAIRS[:3]))
    torch.testing.assert_close(lowered.predict(a, b), plain.predict([t.lower() for t in a], [t.lower() for t in b]),
                               atol=1e-6, rtol=0)
    assert not torch.allclose(lowered.predict(a, b), plain.predict(a, b))
