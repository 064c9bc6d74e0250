"""ELECTRA (minialign/models/electra.py) against transformers' ElectraModel and
ElectraForSequenceClassification, on tiny random configs whose embedding_size differs from
hidden_size (the embeddings_project path), built and saved by transformers: every backend, padded and
packed, every hidden state and attention, the logits; the Classifier product on a WordPiece
tokenizer; the convert round trip back into transformers."""

import json
import shutil

import pytest
import torch
import transformers
from conftest import pad_batch

import minialign as ma
from minialign import convert
from minialign.apps.cli import main as cli
from minialign.apps.parity import compare

TOL = dict(atol=1e-5, rtol=0)


def electra_config(**overrides):
    """A tiny ElectraConfig with odd sizes; embedding_size != hidden_size unless overridden."""
    base = dict(vocab_size=211, embedding_size=20, hidden_size=36, num_hidden_layers=3, num_attention_heads=3,
                intermediate_size=53, max_position_embeddings=64, type_vocab_size=2, hidden_act="gelu",
                layer_norm_eps=1e-12, pad_token_id=0)
    config = transformers.ElectraConfig(**{**base, **overrides})
    config._attn_implementation = "eager"
    return config


def electra_model(cls=transformers.ElectraModel, seed=0, **overrides):
    torch.manual_seed(seed)
    model = cls(electra_config(**overrides)).eval()
    with torch.no_grad():  # non-zero biases and LayerNorm params, so a swapped name cannot pass
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    return model


def _batch(config, lengths=(19, 11, 4)):
    ids = torch.randint(config.pad_token_id + 1, config.vocab_size, (len(lengths), max(lengths)))
    ids, mask = pad_batch(ids, list(lengths), config.pad_token_id)
    types = torch.zeros_like(ids)
    types[:, 6:] = 1
    return ids, mask, types * mask


def _assert_states_equal(theirs, out, real, *, attentions=True):
    """Every hidden state (and attention) within 1e-5 on real tokens."""
    assert len(out.hidden_states) == len(theirs.hidden_states)
    if not attentions:
        theirs = type(theirs)(last_hidden_state=theirs.last_hidden_state, hidden_states=theirs.hidden_states)
    diffs = compare(theirs, out, real)
    assert {f"hidden_{i}" for i in range(len(out.hidden_states))} <= set(diffs)
    if attentions:
        assert {f"attention_{i}" for i in range(len(out.attentions))} <= set(diffs)
    worst = {name: d for name, d in diffs.items() if d > TOL["atol"]}
    assert not worst, worst


BACKENDS = ["eager", "sdpa", pytest.param("flex", marks=pytest.mark.slow)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("overrides", [{}, dict(embedding_size=36, hidden_size=36)], ids=["projected", "same-width"])
def test_encoder_parity(backend, overrides, tmp_path):
    hf = electra_model(**overrides)
    hf.save_pretrained(tmp_path / "m")
    ours = ma.Encoder.from_pretrained(tmp_path / "m", attn_backend=backend)
    assert ours.config.arch == "electra" and ours.pooler is None
    assert (ours.embeddings.project is None) == (hf.config.embedding_size == hf.config.hidden_size)
    ids, mask, types = _batch(hf.config)
    real = mask.bool()
    with torch.no_grad():
        theirs = hf(ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True,
                    output_attentions=True)
        out = ours(ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True, output_attentions=True)
        assert out.pooler_output is None
        _assert_states_equal(theirs, out, real)
        for unpad in (False, True):  # the backend's own path, padded and packed
            fast = ours(ids, attention_mask=mask, token_type_ids=types, unpad=unpad, output_hidden_states=True)
            _assert_states_equal(theirs, fast, real, attentions=False)
            torch.testing.assert_close(fast.last_hidden_state[real], theirs.last_hidden_state[real], **TOL)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("num_labels", [1, 3])
def test_classifier_parity(backend, num_labels, tmp_path):
    hf = electra_model(transformers.ElectraForSequenceClassification, num_labels=num_labels)
    hf.save_pretrained(tmp_path / "m")
    ours = ma.ClassifierModel.from_pretrained(tmp_path / "m", attn_backend=backend)
    assert ours.encoder.pooler is None and len(ours.config.labels) == num_labels
    ids, mask, types = _batch(hf.config)
    real = mask.bool()
    with torch.no_grad():
        theirs = hf(ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
        out = ours(ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
        torch.testing.assert_close(out.logits, theirs.logits, **TOL)
        for i, (a, b) in enumerate(zip(theirs.hidden_states, out.hidden_states, strict=True)):
            torch.testing.assert_close(b[real], a[real], **TOL, msg=lambda m, i=i: f"hidden_{i}: {m}")
        for unpad in (False, True):
            logits = ours(ids, attention_mask=mask, token_type_ids=types, unpad=unpad).logits
            torch.testing.assert_close(logits, theirs.logits, **TOL)


def test_classification_head_is_exact_gelu_on_the_first_token(tmp_path):
    """ElectraClassificationHead uses get_activation("gelu") whatever hidden_act says."""
    hf = electra_model(transformers.ElectraForSequenceClassification, num_labels=2, hidden_act="relu")
    with torch.no_grad():
        hf.classifier.dense.weight.mul_(40)  # pre-activations of a few units, where GELU's forms differ,
        hf.classifier.out_proj.weight.mul_(40)  # and logits that show it
    hf.save_pretrained(tmp_path / "m")
    ours = ma.ClassifierModel.from_pretrained(tmp_path / "m", attn_backend="eager")
    assert ours.config.activation == "relu" and ours.classifier.dense.activation == "gelu"
    ids, mask, types = _batch(hf.config)
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask, token_type_ids=types).logits
        torch.testing.assert_close(ours(ids, attention_mask=mask, token_type_ids=types).logits, expected, **TOL)
        ours.classifier.dense.activation = "gelu_new"  # the tanh approximation: the test would see it
        assert (ours(ids, attention_mask=mask, token_type_ids=types).logits - expected).abs().max() > 1e-4


def test_config_round_trip():
    hf = electra_config(hidden_act="gelu_new")
    config = ma.Config.from_hf(hf.to_dict())
    assert config.arch == "electra" and config.embedding_size == 20 and config.activation == "gelu_new"
    back = transformers.AutoConfig.for_model(**config.to_hf())
    assert type(back) is transformers.ElectraConfig
    for field in ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                  "intermediate_size", "max_position_embeddings", "type_vocab_size", "layer_norm_eps", "hidden_act"):
        assert getattr(back, field) == getattr(hf, field), field
    assert ma.Config.from_hf(config.to_hf()) == config
    # ElectraConfig's default width when config.json leaves it out; Config's None is hidden_size
    old = {k: v for k, v in hf.to_dict().items() if k != "embedding_size"}
    assert ma.Config.from_hf(old).embedding_size == 128
    unset = ma.Config(vocab_size=20, hidden_size=8, num_layers=1, num_heads=2, intermediate_size=16, arch="electra")
    assert unset.to_hf()["embedding_size"] == 8
    assert ma.Encoder(unset, seed=0).embeddings.project is None
    with pytest.raises(ValueError, match="embedding_size"):
        ma.Config(vocab_size=20, hidden_size=8, num_layers=1, num_heads=2, intermediate_size=16, embedding_size=0)


def test_presets():
    small = ma.Config.from_name("electra-small-discriminator")
    assert (small.arch, small.embedding_size, small.hidden_size, small.num_heads) == ("electra", 128, 256, 4)
    model = transformers.ElectraModel(transformers.AutoConfig.for_model(**small.to_hf()))
    ours = ma.Encoder(small, seed=0)
    ours_names = set(convert.minialign_to_hf({f"encoder.{k}": v for k, v in ours.state_dict().items()}, "electra"))
    assert ours_names == set(model.state_dict())
    assert ma.Config.from_name("electra-base-discriminator").embedding_size == 768


def test_pretraining_heads_are_dropped(tmp_path):
    """An ElectraForPreTraining (discriminator) checkpoint loads as an Encoder; its head is dropped by name."""
    hf = electra_model(transformers.ElectraForPreTraining)
    hf.save_pretrained(tmp_path / "m")
    sd = convert.read_safetensors(tmp_path / "m" / "model.safetensors")
    ours, dropped = convert.hf_to_minialign(sd, "electra")
    assert dropped and all(name.startswith("discriminator_predictions.") for name in dropped)
    encoder = ma.Encoder.from_pretrained(tmp_path / "m", attn_backend="eager")
    ids, mask, types = _batch(hf.config)
    with torch.no_grad():
        theirs = hf.electra(ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        out = encoder(ids, attention_mask=mask, token_type_ids=types).last_hidden_state
    torch.testing.assert_close(out[mask.bool()], theirs[mask.bool()], **TOL)


PAIRS = [("The tower was built in Paris.", "It is in France."), ("A short one.", "Tiny."),
         ("Unicode: café naïve 東京 😀 — “quotes”", "Numbers 3.14 and $5,000."),
         ("the minister said " * 200, "a very long first text, cut by the window")]


def test_classifier_from_pretrained_with_wordpiece(tmp_path, minilm_dir):
    directory = tmp_path / "m"
    hf = electra_model(transformers.ElectraForSequenceClassification, num_labels=3, vocab_size=30522,
                       max_position_embeddings=512)
    hf.save_pretrained(directory)
    for name in ("vocab.txt", "special_tokens_map.json"):
        shutil.copyfile(minilm_dir / name, directory / name)
    (directory / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 512, "do_lower_case": True,
                                                                 "tokenizer_class": "ElectraTokenizer"}))
    tok = transformers.AutoTokenizer.from_pretrained(directory)
    clf = ma.Classifier.from_pretrained(directory)
    assert clf.labels == ["LABEL_0", "LABEL_1", "LABEL_2"]
    a, b = map(list, zip(*PAIRS))
    for args in ((a, b), (a,)):
        batch = tok(*args, truncation=True, max_length=512, padding=True, return_tensors="pt")
        with torch.no_grad():
            expected = hf(**batch).logits
        torch.testing.assert_close(clf.predict(*args, activation="none"), expected, **TOL)


@pytest.mark.parametrize("cls", [transformers.ElectraModel, transformers.ElectraForSequenceClassification])
def test_convert_round_trip_loads_in_transformers(cls, tmp_path):
    hf = electra_model(cls, **({"num_labels": 3} if cls is transformers.ElectraForSequenceClassification else {}))
    hf.save_pretrained(tmp_path / "m")
    assert cli(["convert", str(tmp_path / "m"), str(tmp_path / "native")]) == 0
    assert cli(["convert", str(tmp_path / "native"), str(tmp_path / "hf"), "--to", "hf"]) == 0
    classifier = cls is transformers.ElectraForSequenceClassification
    auto = transformers.AutoModelForSequenceClassification if classifier else transformers.AutoModel
    back, info = auto.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert type(back) is cls and back.config.embedding_size == hf.config.embedding_size
    ids, mask, types = _batch(hf.config)
    with torch.no_grad():
        a = hf(ids, attention_mask=mask, token_type_ids=types)
        b = back.eval()(ids, attention_mask=mask, token_type_ids=types)
    if classifier:
        torch.testing.assert_close(b.logits, a.logits, **TOL)
    else:
        torch.testing.assert_close(b.last_hidden_state, a.last_hidden_state, **TOL)
    saved = convert.read_safetensors(tmp_path / "m" / "model.safetensors")
    exported = convert.read_safetensors(tmp_path / "hf" / "model.safetensors")
    assert set(exported) == set(saved)
    for k, v in saved.items():
        assert torch.equal(exported[k], v), k
