"""DistilBERT (minialign/models/distilbert.py) against transformers' DistilBertModel and
DistilBertForSequenceClassification (eager attention, fp32): tiny random configs built and saved here,
learned and sinusoidal positions, every backend, padded and packed; the converter both ways."""

import json
import shutil

import pytest
import torch
import transformers
from conftest import encoder_parity, pad_batch

import minialign as ma
from minialign import convert
from minialign.apps.cli import main as cli

TOL = dict(atol=1e-5, rtol=0)

CONFIGS = {
    "learned": {},
    "sinusoidal": dict(dim=20, n_heads=5, hidden_dim=31, n_layers=2, sinusoidal_pos_embds=True, pad_token_id=3,
                       activation="relu"),
}
BACKENDS = ["eager", "sdpa", pytest.param("flex", marks=pytest.mark.slow)]


def hf_config(**overrides):
    base = dict(vocab_size=211, dim=36, n_layers=3, n_heads=3, hidden_dim=53, max_position_embeddings=64,
                activation="gelu", pad_token_id=0)
    return transformers.DistilBertConfig(**{**base, **overrides})


def hf_model(cls=transformers.DistilBertModel, **overrides):
    config = hf_config(**overrides)
    config._attn_implementation = "eager"
    model = cls(config).eval()
    with torch.no_grad():  # non-zero biases and LayerNorm params, so a swapped name cannot pass
        for name, p in model.named_parameters():
            if "layer_norm" in name or "LayerNorm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    return model


def _saved(tmp_path, kind, cls=transformers.DistilBertModel, **extra):
    hf = hf_model(cls, **CONFIGS[kind], **extra)
    hf.save_pretrained(tmp_path / "m")
    return hf, tmp_path / "m"


def _batch(config, lengths=(19, 11, 4)):
    ids = torch.randint(config.pad_token_id + 1, config.vocab_size, (len(lengths), max(lengths)))
    return pad_batch(ids, list(lengths), config.pad_token_id)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", CONFIGS)
def test_encoder_parity_padded_and_packed(kind, backend, tmp_path):
    hf, directory = _saved(tmp_path, kind)
    ours = ma.Encoder.from_pretrained(directory, attn_backend=backend)
    assert ours.pooler is None and ours.config.arch == "distilbert"
    ids, mask = _batch(hf.config)
    real = mask.bool()
    theirs, out, diffs = encoder_parity(hf, ours, real, TOL, input_ids=ids, attention_mask=mask)
    assert len(out.hidden_states) == len(theirs.hidden_states) == hf.config.n_layers + 1
    assert len(out.attentions) == len(theirs.attentions) == hf.config.n_layers
    assert {f"hidden_{i}" for i in range(len(out.hidden_states))} <= set(diffs)
    assert {f"attention_{i}" for i in range(len(out.attentions))} <= set(diffs)


def test_token_type_ids_are_ignored(tmp_path):
    hf, directory = _saved(tmp_path, "learned")
    ours = ma.Encoder.from_pretrained(directory, attn_backend="eager")
    assert ours.embeddings.token_type is None
    ids, mask = _batch(hf.config)
    types = torch.zeros_like(ids)
    types[:, 5:] = 1
    with torch.no_grad():
        a = ours(ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        b = ours(ids, attention_mask=mask).last_hidden_state
        ref = hf(ids, attention_mask=mask).last_hidden_state
    assert torch.equal(a, b)
    torch.testing.assert_close(a[mask.bool()], ref[mask.bool()], **TOL)


def test_sinusoidal_table_is_transformers_and_not_initialised_at_random():
    hf = hf_model(**CONFIGS["sinusoidal"])
    config = ma.Config.from_hf(hf.config.to_dict())
    assert config.sinusoidal_positions and config.layer_norm_eps == 1e-12
    ours = ma.Encoder(config, seed=0)
    assert "embeddings.position.weight" in ours.state_dict()
    assert torch.equal(ours.embeddings.position.weight, hf.embeddings.position_embeddings.weight.detach())
    assert not any(name.startswith("embeddings.position") for name, _ in ours.named_parameters())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", CONFIGS)
def test_classifier_logits_parity(kind, backend, tmp_path):
    hf, directory = _saved(tmp_path, kind, transformers.DistilBertForSequenceClassification, num_labels=2)
    model = ma.ClassifierModel.from_pretrained(directory, attn_backend=backend)
    assert model.encoder.pooler is None and model.config.classifier_dropout == hf.config.seq_classif_dropout
    ids, mask = _batch(hf.config)
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask).logits
        for unpad in (False, True):
            torch.testing.assert_close(model(ids, attention_mask=mask, unpad=unpad).logits, expected, **TOL)


def _wordpiece_classifier(directory, minilm_dir):
    """A random DistilBertForSequenceClassification (2 labels) with a WordPiece tokenizer (vocab.txt only)."""
    config = hf_config(vocab_size=30522, max_position_embeddings=512, num_labels=2)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.DistilBertForSequenceClassification(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "layer_norm" in name or "LayerNorm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(directory)
    for name in ("vocab.txt", "special_tokens_map.json"):
        shutil.copyfile(minilm_dir / name, directory / name)
    (directory / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 512, "do_lower_case": True,
                                                                 "tokenizer_class": "DistilBertTokenizer"}))
    return model


PAIRS = [("The tower was built in Paris.", "It is in France."), ("A short one.", "Tiny."),
         ("Unicode: café naïve 東京 😀 — “quotes”", "Numbers 3.14 and $5,000."),
         ("the minister said " * 200, "a very long first text, cut by the window")]


def test_classifier_from_pretrained_with_wordpiece(tmp_path, minilm_dir):
    hf = _wordpiece_classifier(tmp_path / "m", minilm_dir)
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "m")
    clf = ma.Classifier.from_pretrained(tmp_path / "m")
    assert clf.labels == ["LABEL_0", "LABEL_1"]
    a, b = map(list, zip(*PAIRS))
    for args in ((a, b), (a,)):
        batch = tok(*args, truncation=True, max_length=512, padding=True, return_tensors="pt")
        batch.pop("token_type_ids", None)  # DistilBertForSequenceClassification takes none; ours ignores them
        with torch.no_grad():
            expected = hf(**batch).logits
        torch.testing.assert_close(clf.predict(*args, activation="none"), expected, **TOL)


def test_convert_round_trip_loads_in_transformers(tmp_path):
    hf, directory = _saved(tmp_path, "sinusoidal", transformers.DistilBertForSequenceClassification, num_labels=2)
    assert cli(["convert", str(directory), str(tmp_path / "native")]) == 0
    assert cli(["convert", str(tmp_path / "native"), str(tmp_path / "hf"), "--to", "hf"]) == 0
    back, info = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf",
                                                                                 output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert type(back) is type(hf) and back.config.sinusoidal_pos_embds
    assert back.config.seq_classif_dropout == hf.config.seq_classif_dropout
    ids, mask = _batch(hf.config)
    with torch.no_grad():
        torch.testing.assert_close(back.eval()(ids, attention_mask=mask).logits,
                                   hf(ids, attention_mask=mask).logits, **TOL)
    saved = convert.read_safetensors(directory / "model.safetensors")
    exported = convert.read_safetensors(tmp_path / "hf" / "model.safetensors")
    assert set(exported) == set(saved)
    for k, v in saved.items():
        assert torch.equal(exported[k], v), k


def test_bare_model_round_trip(tmp_path):
    hf, directory = _saved(tmp_path, "learned")
    assert cli(["convert", str(directory), str(tmp_path / "hf"), "--to", "hf"]) == 0
    back, info = transformers.AutoModel.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and type(back) is type(hf)
    ids, mask = _batch(hf.config)
    with torch.no_grad():
        torch.testing.assert_close(back.eval()(ids, attention_mask=mask).last_hidden_state,
                                   hf(ids, attention_mask=mask).last_hidden_state, **TOL)


def test_masked_lm_names_round_trip_and_encoder_reads_it(tmp_path):
    """DistilBertForMaskedLM's names (the hub's distilbert-base-uncased is one) map both ways, bit for bit."""
    hf = hf_model(transformers.DistilBertForMaskedLM)
    sd = {k.removeprefix("distilbert."): v for k, v in hf.state_dict().items()}
    ours, dropped = convert.hf_to_minialign(sd, "distilbert")
    assert dropped == []
    back = convert.minialign_to_hf(ours, "distilbert")
    assert set(back) == set(sd)
    for k in sd:
        assert torch.equal(back[k], sd[k]), k
    hf.save_pretrained(tmp_path / "mlm")
    encoder = ma.Encoder.from_pretrained(tmp_path / "mlm", attn_backend="eager")
    ids, mask = _batch(hf.config)
    with torch.no_grad():
        ref = hf.distilbert(ids, attention_mask=mask).last_hidden_state
        torch.testing.assert_close(encoder(ids, attention_mask=mask).last_hidden_state[mask.bool()],
                                   ref[mask.bool()], **TOL)


def test_config_round_trip():
    hf = hf_config(**CONFIGS["sinusoidal"], seq_classif_dropout=0.3, num_labels=2)
    config = ma.Config.from_hf(hf.to_dict())
    assert (config.hidden_size, config.num_layers, config.num_heads, config.intermediate_size) == (20, 2, 5, 31)
    assert config.activation == "relu" and config.pad_token_id == 3 and config.classifier_dropout == 0.3
    back = transformers.DistilBertConfig(**config.to_hf(classifier=True))
    for name in ("dim", "n_layers", "n_heads", "hidden_dim", "sinusoidal_pos_embds", "activation", "pad_token_id",
                 "seq_classif_dropout", "max_position_embeddings", "vocab_size"):
        assert getattr(back, name) == getattr(hf, name), name
    assert back.architectures == ["DistilBertForSequenceClassification"]
    with pytest.raises(ValueError, match=r"missing field\(s\) \['n_heads'\]"):
        ma.Config.from_hf({k: v for k, v in hf.to_dict().items() if k != "n_heads"})
    assert ma.Config.from_name("distilbert-base-uncased").arch == "distilbert"
