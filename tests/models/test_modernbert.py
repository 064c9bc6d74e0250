"""ModernBERT (minialign/models/modernbert.py) against transformers' ModernBertModel and
ModernBertForSequenceClassification (eager attention, fp32): tiny random configs built and saved here,
with and without biases, sequences longer than the local window (every local layer's band cuts), every
backend, padded and packed, both classifier poolings; the windows as each backend takes them; the
converter both ways; both config.json spellings (transformers 5's rope_parameters / layer_types and the
Hub's global_rope_theta / global_attn_every_n_layers)."""

import dataclasses

import pytest
import torch
import transformers
from conftest import encoder_parity, pad_batch

import minialign as ma
from minialign import convert
from minialign.apps.cli import main as cli
from minialign.nn import flex
from minialign.nn.attention import LOCAL_BLOCK, additive_bias, eager, local_blocks, sdpa
from minialign.nn.inputs import AttentionInputs
from minialign.nn.layout import padded
from minialign.nn.score_functions import ScaledDot

TOL = dict(atol=1e-5, rtol=0)
BACKENDS = ["eager", "sdpa", pytest.param("flex", marks=pytest.mark.slow)]
LENGTHS = (150, 131, 9)  # far past the local window (local_attention 16: |i - j| <= 8), one shorter than it
BIASES = dict(attention_bias=True, mlp_bias=True, norm_bias=True, classifier_bias=True)
NO_BIASES = dict(attention_bias=False, mlp_bias=False, norm_bias=False, classifier_bias=False)


def hf_config(**overrides):
    base = dict(vocab_size=97, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=37,
                max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1,
                sep_token_id=2, global_attn_every_n_layers=2, local_attention=16, global_rope_theta=1000.0,
                local_rope_theta=50.0, norm_eps=1e-5, **BIASES)
    return transformers.ModernBertConfig(**{**base, **overrides})


def hf_model(cls=transformers.ModernBertModel, **overrides):
    config = hf_config(**overrides)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = cls(config).eval()
    with torch.no_grad():  # non-zero biases and norm params, so a swapped name cannot pass
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    return model


def _saved(tmp_path, cls=transformers.ModernBertModel, **overrides):
    hf = hf_model(cls, **overrides)
    hf.save_pretrained(tmp_path / "m")
    return hf, tmp_path / "m"


def _batch(config, lengths=LENGTHS):
    torch.manual_seed(1)
    ids = torch.randint(3, config.vocab_size, (len(lengths), max(lengths)))
    return pad_batch(ids, list(lengths), config.pad_token_id)


@pytest.mark.parametrize("biases", [BIASES, NO_BIASES], ids=["biases", "no-biases"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_encoder_parity_padded_and_packed(backend, biases, tmp_path):
    hf, directory = _saved(tmp_path, **biases)
    ours = ma.Encoder.from_pretrained(directory, attn_backend=backend)
    assert ours.config.arch == "modernbert" and ours.pooler is None
    assert [layer.window for layer in ours.layers] == [None, 8, None, 8]
    assert (ours.layers[1].attention.qkv.bias is not None) == biases["attention_bias"]
    ids, mask = _batch(hf.config)
    real = mask.bool()
    _, out, diffs = encoder_parity(hf, ours, real, TOL, input_ids=ids, attention_mask=mask)
    assert {f"hidden_{i}" for i in range(5)} | {f"attention_{i}" for i in range(4)} <= set(diffs)
    # a local layer's probabilities are zero beyond the window, a global one's are not
    assert out.attentions[1][0, :, 100, :92].abs().max() == 0 and out.attentions[0][0, :, 100, :92].min() > 0
    torch.testing.assert_close(out.hidden_states[-1], out.last_hidden_state)  # the final norm's, as transformers


@pytest.mark.parametrize("pooling", ["cls", "mean"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_classifier_logits_padded_and_packed(backend, pooling, tmp_path):
    hf, directory = _saved(tmp_path, transformers.ModernBertForSequenceClassification, num_labels=3,
                           classifier_pooling=pooling, global_attn_every_n_layers=3, num_hidden_layers=3)
    model = ma.ClassifierModel.from_pretrained(directory, attn_backend=backend)
    assert model.config.classifier_pooling == pooling and model.encoder.layers[-1].window == 8
    ids, mask = _batch(hf.config)
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask).logits
        for unpad in (False, True):
            got = model(ids, attention_mask=mask, unpad=unpad)
            torch.testing.assert_close(got.logits, expected, **TOL)
            assert got.last_hidden_state.shape[1] == (1 if pooling == "cls" else ids.size(1))
        no_mask = ids[:1, :128]  # no mask: every token real (transformers' default); the band alone as the mask
        torch.testing.assert_close(model(no_mask).logits, hf(no_mask).logits, **TOL)


def test_the_window_joins_the_padding_mask_in_every_backend():
    """Eager's and sdpa's additive bias blocks keys outside |i - j| <= window and padding keys, once each
    (no -inf); flex's BlockMask allows the same pairs for real queries and skips blocks out of reach."""
    L, window = 300, 8
    lengths = torch.tensor([300, 200, 5])
    mask = (torch.arange(L)[None] < lengths[:, None]).long()
    bias = additive_bias(AttentionInputs(mask, padded(3, L), torch.float32, 4, window=window))
    keep = bias == 0
    pos = torch.arange(L)
    expected = mask.bool()[:, None, None, :] & ((pos[:, None] - pos[None, :]).abs() <= window)[None, None]
    assert torch.equal(keep, expected) and torch.isfinite(bias).all()
    block_mask = flex.prepare(AttentionInputs(mask, padded(3, L), torch.float32, 4, window=window)).block_mask
    dense = torch.nn.attention.flex_attention.create_mask(block_mask.mask_mod, 3, 1, L, L)
    real_queries = (pos[None, :] < lengths[:, None])[:, None, :, None]
    assert torch.equal(dense & real_queries, expected & real_queries)
    assert block_mask.kv_num_blocks[0].sum() + block_mask.full_kv_num_blocks[0].sum() < 3 * 3  # blocks skipped
    short = AttentionInputs(mask[:, :9], padded(3, 9), torch.float32, 4, window=window)
    assert additive_bias(short).shape == (3, 1, 1, 9)


def test_local_layers_on_sdpa_run_by_blocks_as_the_band():
    """On a CPU, sdpa runs a local layer past a few blocks by blocks of queries against their window's keys
    (nn/attention.py LocalBlocks): the same outputs as eager under the band for every real query, padding and the
    sequences' ends blocked; the band mask where blocks do not pay or do not apply."""
    L, window, H, D = 300, 8, 4, 16
    lengths = torch.tensor([300, 200, 37])
    mask = (torch.arange(L)[None] < lengths[:, None]).long()
    inputs = AttentionInputs(mask, padded(3, L), torch.float32, H, window=window)
    blocks = local_blocks(inputs)
    assert blocks is not None and blocks.bias.shape == (3 * -(-L // LOCAL_BLOCK), 1, LOCAL_BLOCK,
                                                        LOCAL_BLOCK + 2 * window)
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, H, L, D) for _ in range(3))
    band = eager(q, k, v, additive_bias(inputs), ScaledDot(), 0.0)[0]
    out = sdpa(q, k, v, blocks, ScaledDot(), 0.0)[0]
    real = mask.bool()[:, None, :, None].expand_as(out)
    assert (out - band)[real].abs().max() < 1e-6
    unmasked = local_blocks(AttentionInputs(None, padded(3, L), torch.float32, H, window=window))
    assert (sdpa(q, k, v, unmasked, ScaledDot(), 0.0)[0]
            - eager(q, k, v, additive_bias(AttentionInputs(None, padded(3, L), torch.float32, H, window=window)),
                    ScaledDot(), 0.0)[0]).abs().max() < 1e-6
    pairs = torch.ones(3, L, L, dtype=torch.bool)
    for refused in (dataclasses.replace(inputs, layout=padded(3, 2 * window + 3 * LOCAL_BLOCK - 1)),
                    dataclasses.replace(inputs, causal=True), dataclasses.replace(inputs, mask=pairs),
                    dataclasses.replace(inputs, mask=torch.zeros(3, 1, L, L)), dataclasses.replace(inputs, window=None),
                    dataclasses.replace(inputs, queries="first")):
        assert local_blocks(refused) is None


def test_local_blocks_give_a_text_the_same_bits_alone_and_batched(tmp_path):
    """Sequences long enough for blocks (nn/attention.py LocalBlocks), through the model on sdpa, packed: each text
    alone and batched with others (150 and 147 in one bucket, each block an entry of one sdpa call) gets the same
    bits, and matches transformers padded and packed."""
    hf, path = _saved(tmp_path)
    model = ma.Encoder.from_pretrained(path, attn_backend="sdpa")
    lengths = (250, 150, 9, 147)
    ids, mask = _batch(hf.config, lengths)
    with torch.no_grad():
        batched = model(ids, attention_mask=mask, unpad=True).last_hidden_state
        reference = hf(input_ids=ids, attention_mask=mask).last_hidden_state
        assert (batched - reference)[mask.bool()].abs().max() < 1e-5
        padded_out = model(ids, attention_mask=mask, unpad=False).last_hidden_state
        assert (padded_out - reference)[mask.bool()].abs().max() < 1e-5
        for i, n in enumerate(lengths):
            alone = model(ids[i:i + 1, :n], attention_mask=mask[i:i + 1, :n], unpad=True).last_hidden_state
            assert torch.equal(alone[0], batched[i, :n]), n


@pytest.mark.parametrize("layers", [4, 3], ids=["last-local", "last-global"])
def test_final_tokens_as_a_mask_runs_the_last_layer_for_those_tokens(layers, tmp_path):
    """Encoder.forward(final_tokens=mask): packed, the last layer's queries and feed-forward are the wanted tokens
    alone, each the bits of its text run alone and within 1e-6 of the full forward's; padded the same; the others
    zero, a sequence with none wanted all zero; a mask that is not (B, L) bool refused naming it. A feed-forward
    width of whole vectors: torch's GELU gives the elements of a row's tail past them other bits at other row
    counts (the 37 elsewhere here would move a token's last bit between one row and many)."""
    hf, path = _saved(tmp_path, num_hidden_layers=layers, intermediate_size=64)
    model = ma.Encoder.from_pretrained(path)
    assert (model.layers[-1].window is not None) == (layers == 4)
    ids, mask = _batch(hf.config, (150, 131, 9, 147))
    starts = torch.tensor([100, 3, 8, 0])
    wanted = (torch.arange(ids.size(1))[None] >= starts[:, None]) & mask.bool()
    rows = []
    hook = model.layers[-1].ffn.register_forward_hook(lambda m, args, out: rows.append(args[0].shape[:-1]))
    with torch.no_grad():
        full = model(ids, attention_mask=mask, unpad=True).last_hidden_state
        picked = model(ids, attention_mask=mask, unpad=True, final_tokens=wanted).last_hidden_state
        padded_out = model(ids, attention_mask=mask, final_tokens=wanted).last_hidden_state
        hook.remove()
        assert rows[1] == (1, int(wanted.sum()))  # the last layer's feed-forward: the wanted tokens alone
        assert (picked - full)[wanted].abs().max() < 1e-6 and not picked[~wanted].any()
        assert (padded_out - full)[wanted].abs().max() < 1e-6 and not padded_out[~wanted].any()
        for i, n in enumerate((150, 131, 9, 147)):
            alone = model(ids[i:i + 1, :n], attention_mask=mask[i:i + 1, :n], unpad=True,
                          final_tokens=wanted[i:i + 1, :n]).last_hidden_state
            assert torch.equal(alone[0], picked[i, :n]), n
        with pytest.raises(ValueError, match=r"final_tokens must be one of .* or a \(4, 150\) bool mask, got torch.int64"):
            model(ids, attention_mask=mask, unpad=True, final_tokens=wanted.long())
        none_of_2 = wanted & (torch.arange(4) != 2)[:, None]
        out = model(ids, attention_mask=mask, unpad=True, final_tokens=none_of_2).last_hidden_state
        assert not out[2].any() and torch.equal(out[none_of_2], picked[none_of_2])


def test_final_tokens_as_a_mask_keep_a_text_s_bits_beside_others_of_its_bucket():
    """Two sequences of one key bucket (260 and 280 tokens) wanting 259 and 280 tokens: each sequence's queries are
    attended at a query length of its own count's (layout.Layout.picked), so its bits are those it has alone (at the
    other's query length, torch's CPU attention gave it others)."""
    config = ma.Config(arch="modernbert", vocab_size=300, hidden_size=256, num_layers=2, num_heads=4,
                       intermediate_size=384, rope_theta=160000.0, local_rope_theta=10000.0,
                       max_position_embeddings=1024)
    model = ma.Encoder(config, attn_backend="sdpa", seed=0).eval()
    lengths, starts = torch.tensor([260, 280]), torch.tensor([1, 0])
    ids = torch.randint(5, 250, (2, 280), generator=torch.Generator().manual_seed(0))
    mask = (torch.arange(280)[None] < lengths[:, None]).long()
    wanted = (torch.arange(280)[None] >= starts[:, None]) & mask.bool()
    with torch.inference_mode():
        both = model(ids, mask, unpad=True, final_tokens=wanted).last_hidden_state
        for i, n in enumerate(lengths.tolist()):
            alone = model(ids[i:i + 1, :n], mask[i:i + 1, :n], unpad=True, final_tokens=wanted[i:i + 1, :n])
            assert torch.equal(alone.last_hidden_state[0], both[i, :n]), n


def test_window_and_theta_matter(tmp_path):
    """A window wider than the batch, or one theta for every layer, gives another result."""
    hf, directory = _saved(tmp_path)
    ids, mask = _batch(hf.config)
    ref = ma.Encoder.from_pretrained(directory, attn_backend="sdpa")
    with torch.no_grad():  # sharper attention than the tiny initialisation's, so positions move the outputs
        for layer in ref.layers:
            layer.attention.qkv.weight.mul_(20)
    for change in (dict(local_attention=None), dict(local_rope_theta=1000.0)):
        other = ma.Encoder(dataclasses.replace(ref.config, **change), attn_backend="sdpa")
        other.load_state_dict(ref.state_dict())
        with torch.no_grad():
            a, b = ref(ids, attention_mask=mask), other(ids, attention_mask=mask)
        assert (a.last_hidden_state - b.last_hidden_state)[mask.bool()].abs().max() > 1e-3, change


def test_masked_lm_names_and_its_head_as_the_classifiers(tmp_path):
    """ModernBertForMaskedLM's names map both ways bit for bit, the decoder's included (the MaskedLMModel's);
    its head is the classifier's, as transformers loads it."""
    hf = hf_model(transformers.ModernBertForMaskedLM)
    sd = {k.removeprefix("model."): v for k, v in hf.state_dict().items()}
    ours, dropped = convert.hf_to_minialign(sd, "modernbert")
    assert dropped == [] and {"mlm_head.decoder.weight", "mlm_head.bias", "classifier.dense.weight"} <= set(ours)
    back = convert.minialign_to_hf(ours, "modernbert")
    assert set(back) == set(sd)
    for k in back:
        assert torch.equal(back[k], sd[k]), k
    hf.save_pretrained(tmp_path / "mlm")
    encoder = ma.Encoder.from_pretrained(tmp_path / "mlm", attn_backend="eager")
    assert set(encoder.state_dict()) == {k.removeprefix("encoder.") for k in ours if k.startswith("encoder.")}
    ids, mask = _batch(hf.config, lengths=(40, 12))
    with torch.no_grad():
        torch.testing.assert_close(encoder(ids, attention_mask=mask).last_hidden_state[mask.bool()],
                                   hf.model(ids, attention_mask=mask).last_hidden_state[mask.bool()], **TOL)


@pytest.mark.parametrize("cls", [transformers.ModernBertModel, transformers.ModernBertForSequenceClassification])
def test_convert_round_trip_loads_in_transformers(cls, tmp_path):
    labels = {"num_labels": 2, "classifier_pooling": "mean"} if cls is not transformers.ModernBertModel else {}
    hf, directory = _saved(tmp_path, cls, **labels)
    assert cli(["convert", str(directory), str(tmp_path / "native")]) == 0
    assert cli(["convert", str(tmp_path / "native"), str(tmp_path / "hf"), "--to", "hf"]) == 0
    auto = transformers.AutoModel if cls is transformers.ModernBertModel else \
        transformers.AutoModelForSequenceClassification
    back, info = auto.from_pretrained(tmp_path / "hf", output_loading_info=True, attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"] and type(back) is cls
    for name in ("local_attention", "layer_types", "rope_parameters", "classifier_pooling", "norm_bias"):
        assert getattr(back.config, name) == getattr(hf.config, name), name
    ids, mask = _batch(hf.config)
    with torch.no_grad():
        a, b = back.eval()(ids, attention_mask=mask), hf(ids, attention_mask=mask)
    if cls is transformers.ModernBertModel:
        torch.testing.assert_close(a.last_hidden_state[mask.bool()], b.last_hidden_state[mask.bool()], **TOL)
    else:
        torch.testing.assert_close(a.logits, b.logits, **TOL)
    saved = convert.read_safetensors(directory / "model.safetensors")
    exported = convert.read_safetensors(tmp_path / "hf" / "model.safetensors")
    assert set(exported) == set(saved)
    for k, v in saved.items():
        assert torch.equal(exported[k], v), k


def test_config_both_spellings_and_preset():
    new = hf_config(num_labels=2, classifier_pooling="mean").to_dict()  # transformers 5: rope_parameters, layer_types
    assert "rope_parameters" in new and "layer_types" in new
    hub = {k: v for k, v in new.items() if k not in ("rope_parameters", "layer_types")}
    hub.update(global_rope_theta=1000.0, local_rope_theta=50.0, global_attn_every_n_layers=2)  # the Hub's spelling
    for hf in (new, hub):
        config = ma.Config.from_hf(hf)
        assert (config.rope_theta, config.local_rope_theta, config.local_attention, config.global_attn_every_n_layers,
                config.classifier_pooling, config.norm_bias) == (1000.0, 50.0, 16, 2, "mean", True)
    back = transformers.ModernBertConfig(**ma.Config.from_hf(new).to_hf(classifier=True))
    for name in ("hidden_size", "num_hidden_layers", "intermediate_size", "local_attention", "layer_types",
                 "rope_parameters", "norm_eps", "attention_bias", "mlp_bias", "classifier_pooling", "pad_token_id"):
        assert getattr(back, name) == getattr(hf_config(), name) or name == "classifier_pooling", name
    assert back.architectures == ["ModernBertForSequenceClassification"]
    preset = ma.Config.from_name("modernbert-base")
    assert (preset.hidden_size, preset.num_layers, preset.intermediate_size, preset.local_attention,
            preset.max_seq_len, preset.norm_bias, preset.attention_bias) == (768, 22, 1152, 128, 8192, False, False)


def test_bad_configs_name_the_field():
    odd = hf_config().to_dict()
    odd["layer_types"] = ["full_attention", "full_attention", "sliding_attention", "full_attention"]
    with pytest.raises(ValueError, match="layer_types"):
        ma.Config.from_hf(odd)
    scaled = hf_config().to_dict()
    scaled["rope_parameters"]["full_attention"]["rope_type"] = "linear"
    with pytest.raises(ValueError, match="rope_type"):
        ma.Config.from_hf(scaled)
    good = ma.Config.from_hf(hf_config().to_dict())
    for field, value in (("local_attention", 1), ("global_attn_every_n_layers", 0), ("rope_theta", -1.0),
                         ("classifier_pooling", "max"), ("norm_bias", "yes"), ("classifier_activation", "nope")):
        with pytest.raises(ValueError, match=field):
            dataclasses.replace(good, **{field: value})
    with pytest.raises(ValueError, match="rope_theta"):
        ma.Encoder(dataclasses.replace(good, rope_theta=None))



def test_tokenizer_ids_equal_transformers(tmp_path):
    """ModernBERT's byte-level BPE tokenizer.json (`[CLS] A [SEP] B [SEP]`, made here as the Hub's is laid out:
    family_builders.modernbert_bpe) gives transformers' fast tokenizer's ids and keys, singles and pairs,
    truncated or not; no token_type_ids (the model has no token types; its tokenizer_config.json leaves them out)."""
    from family_builders import FAMILIES, write_tokenizer
    from text.test_family_tokenizers import _assert_matches_transformers

    write_tokenizer(FAMILIES["modernbert"], tmp_path, wordpiece_dir=tmp_path, bpe_dir=tmp_path)
    assert ma.Tokenizer.from_pretrained(tmp_path).pad_token_id == transformers.AutoTokenizer.from_pretrained(
        tmp_path).pad_token_id == 3
    assert "token_type_ids" not in ma.Tokenizer.from_pretrained(tmp_path)(["a"], ["b"])
    _assert_matches_transformers(tmp_path)


def test_compiles_without_graph_breaks(tmp_path):
    """Rotary tables, the per-window masks and the finishing norm trace into one graph (the padded forward, as
    tests/nn/test_backends.py checks the other families)."""
    _, directory = _saved(tmp_path)
    model = ma.Encoder.from_pretrained(directory, attn_backend="sdpa")
    ids, mask = _batch(model.config, lengths=(20, 12))
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(ids, attention_mask=mask)
    assert explanation.graph_break_count == 0, explanation.break_reasons


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_a_custom_mask_keeps_the_windows_unless_asked_as_transformers(backend, tmp_path):
    """Given a 4-D mask, transformers takes it as it is (no sliding window on the local layers); minialign keeps
    each local layer's window on top of it by default, and drops it with windows_over_custom_mask=False:
    then the two agree."""
    hf, directory = _saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend=backend)
    ids, pad = _batch(hf.config, lengths=(60, 41))
    L = ids.shape[1]
    keep = pad.bool()[:, None, None, :] & torch.ones(1, 1, L, L, dtype=torch.bool)  # padding only, as a 4-D mask
    additive = torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)
    real = pad.bool()
    with torch.no_grad():
        theirs = hf(ids, attention_mask=additive).last_hidden_state
        windowed = ours(ids, attention_mask=keep).last_hidden_state
        as_given = ours(ids, attention_mask=keep, windows_over_custom_mask=False).last_hidden_state
        padded_2d = ours(ids, attention_mask=pad, windows_over_custom_mask=False).last_hidden_state
    torch.testing.assert_close(as_given[real], theirs[real], **TOL)
    assert (windowed - theirs)[real].abs().max() > 1e-3  # the windows cut keys the 4-D mask lets through
    torch.testing.assert_close(padded_2d[real], windowed[real], **TOL)  # a 2-D mask always keeps the windows
