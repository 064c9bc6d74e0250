"""T5's encoder (minialign/models/t5.py) against transformers' T5EncoderModel, the encoder of
T5ForConditionalGeneration and T5ForTokenClassification (eager attention, fp32): tiny random configs built and saved
here (d_model 32, d_kv 8, 4 heads, d_ff 37, 2 layers, 8 buckets up to distance 20, so a 40-token text reaches the
log-spaced and the last buckets), both feed-forward kinds (relu, flan-t5's gated-gelu), padded and packed on eager
and sdpa (flex: one slow case), a text's bits independent of its batch; the bucket rule against transformers' in
both directions; the names both ways (the decoder's dropped), the exported directory read back by transformers; the
config's refusals."""

import json

import pytest
import torch
import transformers
from conftest import encoder_parity, pad_batch, reference_model

import minialign as ma
from minialign import convert
from minialign.apps.cli import main as cli
from minialign.models.t5 import relative_position_bucket

TOL = dict(atol=1e-5, rtol=0)
LENGTHS = (40, 23, 9)
SIZES = dict(vocab_size=97, d_model=32, d_kv=8, num_heads=4, d_ff=37, num_layers=2, relative_attention_num_buckets=8,
             relative_attention_max_distance=20, dropout_rate=0.1, layer_norm_epsilon=1e-6)
KINDS = ("relu", "gated-gelu")


def hf_model(cls=transformers.T5EncoderModel, feed_forward_proj="gated-gelu", **overrides):
    config = transformers.T5Config(**{**SIZES, "feed_forward_proj": feed_forward_proj, **overrides})
    # the queries, keys and the relative-position table sharpened: positions then move the outputs
    return reference_model(cls, config, factor=3, sharpen=lambda name, p: name.endswith(
        ("SelfAttention.q.weight", "SelfAttention.k.weight", "relative_attention_bias.weight")))


def saved(tmp_path, cls=transformers.T5EncoderModel, **overrides):
    hf = hf_model(cls, **overrides)
    hf.save_pretrained(tmp_path / "m")
    return hf, tmp_path / "m"


def batch(config, lengths=LENGTHS):
    torch.manual_seed(1)
    ids = torch.randint(2, config.vocab_size, (len(lengths), max(lengths)))
    return pad_batch(ids, list(lengths), config.pad_token_id)


@pytest.mark.parametrize("feed_forward_proj", KINDS)
@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_encoder_parity_padded_and_packed(backend, feed_forward_proj, tmp_path):
    hf, directory = saved(tmp_path, feed_forward_proj=feed_forward_proj)
    ours = ma.Encoder.from_pretrained(directory, attn_backend=backend)
    config = ours.config
    assert (config.arch, config.head_dim, config.relative_attention_buckets) == ("t5", 8, 8) and ours.pooler is None
    assert config.activation == ("gelu_new" if feed_forward_proj == "gated-gelu" else "relu")
    assert config.gated == (feed_forward_proj == "gated-gelu") and config.attention_dropout == 0.1
    assert ours.layers[0].attention.qkv.bias is None and ours.relative_position_bias.table.weight.shape == (8, 4)
    ids, mask = batch(hf.config)
    real = mask.bool()
    _, out, diffs = encoder_parity(hf, ours, real, TOL, input_ids=ids, attention_mask=mask)
    assert {"hidden_2", "attention_0", "attention_1"} <= set(diffs)
    torch.testing.assert_close(out.hidden_states[-1], out.last_hidden_state)


def test_positions_matter_and_the_scores_are_unscaled(tmp_path):
    """A guard on the reference: the relative bias and the missing 1 / sqrt(D) each move the outputs past the
    tolerance, so the parity above holds them."""
    hf, directory = saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend="eager")
    ids, mask = batch(hf.config)
    real = mask.bool()
    with torch.no_grad():
        expected = ours(ids, attention_mask=mask).last_hidden_state[real]
        table = ours.relative_position_bias.table.weight
        saved_table = table.clone()
        table.zero_()
        assert (ours(ids, attention_mask=mask).last_hidden_state[real] - expected).abs().max() > 1e-3
        table.copy_(saved_table)
        qkv = ours.layers[0].attention.qkv.weight
        qkv[:32].mul_(8 ** -0.5)  # the queries as a scaled dot product would read them
        assert (ours(ids, attention_mask=mask).last_hidden_state[real] - expected).abs().max() > 1e-3


@pytest.mark.parametrize("bidirectional", [True, False], ids=["encoder", "causal"])
@pytest.mark.parametrize("buckets, distance", [(8, 20), (32, 128), (6, 7)])
def test_buckets_as_transformers(bidirectional, buckets, distance):
    offsets = torch.arange(-300, 301)
    expected = transformers.models.t5.modeling_t5.T5Attention._relative_position_bucket(
        offsets, bidirectional=bidirectional, num_buckets=buckets, max_distance=distance)
    assert torch.equal(relative_position_bucket(offsets, buckets, distance, bidirectional=bidirectional), expected)


def test_a_text_is_bit_identical_whatever_it_is_batched_with(tmp_path):
    _, directory = saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend="sdpa")
    ids, mask = batch(ours.config, lengths=(37, 120, 5, 64))
    with torch.no_grad():
        alone = ours(ids[:1, :37], attention_mask=mask[:1, :37], unpad=True).last_hidden_state[0]
        for rows in (slice(0, 2), slice(0, 4)):
            together = ours(ids[rows], attention_mask=mask[rows], unpad=True).last_hidden_state[0, :37]
            assert torch.equal(together, alone)


@pytest.mark.parametrize("feed_forward_proj", KINDS)
def test_names_both_ways_and_the_decoder_dropped(feed_forward_proj, tmp_path):
    """T5ForConditionalGeneration: every encoder name read, every decoder name (and lm_head) dropped; back, the
    encoder's names under `shared`; the saved model loads as an encoder equal to transformers' encoder stack."""
    hf, directory = saved(tmp_path, transformers.T5ForConditionalGeneration, feed_forward_proj=feed_forward_proj)
    sd = hf.state_dict()
    ours_sd, dropped = convert.hf_to_minialign(sd, "t5")
    assert dropped and all(k.startswith(("decoder.", "lm_head.")) for k in dropped)
    assert not any(k.startswith("encoder.") and k != "encoder.embed_tokens.weight" for k in dropped)
    back = convert.minialign_to_hf(ours_sd, "t5")
    encoder_names = {k for k in sd if k.startswith("encoder.") and k != "encoder.embed_tokens.weight"}
    assert set(back) == encoder_names | {"shared.weight"} and all(torch.equal(back[k], sd[k]) for k in back)
    ours = ma.Encoder.from_pretrained(directory, attn_backend="sdpa")
    ids, mask = batch(hf.config)
    real = mask.bool()
    with torch.no_grad():
        expected = hf.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        for unpad in (False, True):
            got = ours(ids, attention_mask=mask, unpad=unpad).last_hidden_state
            torch.testing.assert_close(got[real], expected[real], **TOL)


def test_token_classification_logits(tmp_path):
    """T5ForTokenClassification (the encoder under `transformer.`, dropout -> classifier on every token): HHEM's
    head."""
    hf = hf_model(transformers.T5ForTokenClassification, num_labels=2)
    with torch.no_grad():  # T5's initialisation draws the classifier at std 1 (logits ~5): to the scale of a trained one
        hf.classifier.weight.mul_(0.1)
    hf.save_pretrained(directory := tmp_path / "m")
    model = ma.TokenClassifierModel.from_pretrained(directory, attn_backend="sdpa")
    ids, mask = batch(hf.config)
    real = mask.bool()
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask).logits
        for unpad in (False, True):
            torch.testing.assert_close(model(ids, attention_mask=mask, unpad=unpad).logits[real], expected[real], **TOL)


def test_convert_round_trip_loads_in_transformers(tmp_path):
    hf, directory = saved(tmp_path)
    assert cli(["convert", str(directory), str(tmp_path / "native")]) == 0
    assert cli(["convert", str(tmp_path / "native"), str(tmp_path / "hf"), "--to", "hf"]) == 0
    back, info = transformers.T5EncoderModel.from_pretrained(tmp_path / "hf", output_loading_info=True,
                                                             attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"]
    for name in ("d_kv", "d_ff", "feed_forward_proj", "relative_attention_num_buckets",
                 "relative_attention_max_distance", "layer_norm_epsilon", "dropout_rate", "is_gated_act"):
        assert getattr(back.config, name) == getattr(hf.config, name), name
    ids, mask = batch(hf.config)
    with torch.no_grad():
        a, b = back.eval()(ids, attention_mask=mask), hf(ids, attention_mask=mask)
    torch.testing.assert_close(a.last_hidden_state[mask.bool()], b.last_hidden_state[mask.bool()], **TOL)


def test_config_reading_and_its_refusals(tmp_path):
    _, directory = saved(tmp_path)
    config = json.loads((directory / "config.json").read_text())
    ours = ma.Config.from_hf(config)
    assert (ours.hidden_size, ours.head_dim, ours.intermediate_size, ours.relative_attention_max_distance,
            ours.hidden_dropout, ours.feed_forward_proj) == (32, 8, 37, 20, 0.1, "gated-gelu")
    assert ma.Config.from_hf({**config, "feed_forward_proj": "gated-silu"}).activation == "silu"
    assert ma.Config.from_hf({**config, "d_kv": 16}).head_dim == 16  # heads wider than d_model / num_heads
    for bad, match in ((dict(feed_forward_proj="gelu-gated"), "feed_forward_proj"),
                       (dict(feed_forward_proj="gated-nope"), "feed_forward_proj"),
                       (dict(relative_attention_num_buckets=2), "relative_attention_buckets"),
                       (dict(relative_attention_max_distance=2), "relative_attention_max_distance"),
                       (dict(is_decoder=True), "decoder")):
        with pytest.raises(ValueError, match=match):
            ma.Config.from_hf({**config, **bad})
    with pytest.raises(ValueError, match="unscaled dot product"):
        ma.Config(arch="t5", vocab_size=9, hidden_size=8, num_layers=1, num_heads=2, intermediate_size=4,
                  score_fn="general")
    for other in ("mt5", "umt5"):  # other model_types (umt5: a bias table per layer): refused, naming t5
        with pytest.raises(ValueError, match="'t5'"):
            ma.Config.from_hf({**config, "model_type": other})
    preset = ma.PRESETS["flan-t5-base"]
    assert (preset.hidden_size, preset.num_heads, preset.head_dim, preset.activation) == (768, 12, 64, "gelu_new")


def test_heads_cannot_be_pruned(tmp_path):
    _, directory = saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory)
    with pytest.raises(ValueError, match="relative-position bias"):
        ours.prune_heads({0: [1]})


@pytest.mark.slow
def test_flex_padded_and_packed(tmp_path):
    """One flex case (CPU flex compiles per shape): the bias as a score_mod, packed by default on CPU, and padded."""
    hf, directory = saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend="flex")
    ids, mask = batch(hf.config, lengths=(150, 40))
    real = mask.bool()
    with torch.no_grad():
        theirs = hf(ids, attention_mask=mask).last_hidden_state
        for unpad in (False, True):
            got = ours(ids, attention_mask=mask, unpad=unpad).last_hidden_state
            torch.testing.assert_close(got[real], theirs[real], **TOL)


def test_varlen_hands_the_bias_to_sdpa_saying_why(tmp_path, monkeypatch):
    """varlen's kernel cannot add a relative-position bias: a packed forward on that row runs on sdpa, with a
    warning naming the reason, and gives sdpa's result (the kernel a stand-in: no GPU here, tests/nn/test_varlen.py)."""
    from minialign.nn import varlen
    from minialign.nn.attention import BackendFallbackWarning

    monkeypatch.setattr(varlen, "kernel", lambda device, dtype: lambda q, k, v, mask, scale: varlen.per_document(
        q, k, v, mask, scale))
    _, directory = saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend="varlen")
    ref = ma.Encoder.from_pretrained(directory, attn_backend="sdpa")
    ids, mask = batch(ours.config)
    with torch.no_grad(), pytest.warns(BackendFallbackWarning, match="relative-position bias"):
        got = ours(ids, attention_mask=mask, unpad=True).last_hidden_state
    with torch.no_grad():
        assert torch.equal(got, ref(ids, attention_mask=mask, unpad=True).last_hidden_state)
