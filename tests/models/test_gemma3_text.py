"""Gemma 3's text model, bidirectional (minialign/models/gemma3_text.py) against transformers' Gemma3TextModel with
use_bidirectional_attention (eager attention, fp32): tiny random configs built and saved here with sliding and full
layers mixed, each with its rotary base, a sliding window small enough to matter (4 and 5: |i - j| <= 2), grouped
queries and plain, a head width of its own (H * D != hidden_size), a query scaling other than head_dim's; every
backend, padded and packed; a text's bits whatever it is batched with; the converter both ways and both config.json
spellings (transformers 5's rope_parameters, the Hub's rope_theta / rope_local_base_freq); an EmbeddingGemma-like
sentence-transformers directory (Transformer -> Pooling mean -> Dense -> Dense -> Normalize, prompts) through
SentenceEncoder against SentenceTransformer.encode."""

import dataclasses
import json

import pytest
import torch
import transformers
from conftest import encoder_parity, pad_batch, reference_model

import minialign as ma
from minialign import convert
from minialign.apps.cli import main as cli

TOL = dict(atol=1e-5, rtol=0)
LENGTHS = (40, 23, 7)
FULL, SLIDING = "full_attention", "sliding_attention"
LAYER_TYPES = [SLIDING, FULL, SLIDING]


def hf_config(**overrides):
    base = dict(vocab_size=97, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                head_dim=12, intermediate_size=37, max_position_embeddings=256, pad_token_id=1, bos_token_id=0,
                eos_token_id=1, rms_norm_eps=1e-6, sliding_window=4, layer_types=LAYER_TYPES,
                query_pre_attn_scalar=20, use_bidirectional_attention=True,
                rope_parameters={FULL: {"rope_type": "default", "rope_theta": 1000.0},
                                 SLIDING: {"rope_type": "default", "rope_theta": 50.0}})
    return transformers.Gemma3TextConfig(**{**base, **overrides})


def _saved(tmp_path, **overrides):
    hf = reference_model(transformers.Gemma3TextModel, hf_config(**overrides), factor=3,
                         sharpen=lambda name, p: p.dim() == 2 and "embed" not in name)
    hf.save_pretrained(tmp_path / "m")
    return hf, tmp_path / "m"


def _batch(config, lengths=LENGTHS):
    torch.manual_seed(1)
    ids = torch.randint(3, config.vocab_size, (len(lengths), max(lengths)))
    return pad_batch(ids, list(lengths), config.pad_token_id)


@pytest.mark.parametrize("shape", [dict(num_key_value_heads=2), dict(num_key_value_heads=4, head_dim=8,
                                                                     query_pre_attn_scalar=8, sliding_window=5)],
                         ids=["gqa-own-scale", "mha-h*d=c-window5"])
@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_encoder_parity_padded_and_packed(backend, shape, tmp_path):
    hf, directory = _saved(tmp_path, **shape)
    ours = ma.Encoder.from_pretrained(directory, attn_backend=backend)
    config = ours.config
    assert config.arch == "gemma3_text" and ours.pooler is None and config.head_dim == shape.get("head_dim", 12)
    assert [layer.window for layer in ours.layers] == [2, None, 2]  # |i - j| <= sliding_window // 2
    assert [layer.theta for layer in ours.layers] == [50.0, 1000.0, 50.0]
    attention = ours.layers[0].attention
    kv = shape["num_key_value_heads"]
    assert attention.qkv.weight.shape == ((4 + 2 * kv) * config.head_dim, 32)  # (H + 2 KV) D
    assert attention.output.weight.shape == (32, 4 * config.head_dim)
    ids, mask = _batch(hf.config)
    _, out, diffs = encoder_parity(hf, ours, mask.bool(), TOL, input_ids=ids, attention_mask=mask)
    assert {f"hidden_{i}" for i in range(4)} <= set(diffs)
    torch.testing.assert_close(out.hidden_states[-1], out.last_hidden_state)  # the final norm's, as transformers


def test_the_window_and_the_query_scale_are_read():
    """Past the window, and with another query scale, the outputs move: the parity above depends on both."""
    config = ma.Config.from_hf(hf_config().to_dict())
    model = ma.Encoder(config, seed=0).eval()
    ids, mask = _batch(config)
    variants = [dataclasses.replace(config, sliding_window=64), dataclasses.replace(config, query_pre_attn_scalar=12)]
    with torch.no_grad():
        base = model(ids, attention_mask=mask).last_hidden_state
        for variant in variants:
            other = ma.Encoder(variant, seed=0).eval()
            other.load_state_dict(model.state_dict())
            assert (other(ids, attention_mask=mask).last_hidden_state - base).abs().max() > 1e-3


@pytest.mark.slow
def test_flex_padded_and_packed(tmp_path):
    """One flex case (CPU flex compiles per shape): grouped queries, sliding and full layers, packed and padded."""
    hf, directory = _saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend="flex")
    ids, mask = _batch(hf.config, lengths=(40, 17))
    real = mask.bool()
    with torch.no_grad():
        theirs = hf(ids, attention_mask=mask).last_hidden_state
        for unpad in (False, True):
            got = ours(ids, attention_mask=mask, unpad=unpad).last_hidden_state
            torch.testing.assert_close(got[real], theirs[real], **TOL)


def test_a_text_is_bit_identical_whatever_it_is_batched_with(tmp_path):
    """A sequence's states alone, and beside others of other lengths, packed: torch.equal."""
    _, directory = _saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend="sdpa")
    ids, mask = _batch(ours.config, lengths=(37, 120, 5, 64))
    with torch.no_grad():
        alone = ours(ids[:1, :37], attention_mask=mask[:1, :37], unpad=True).last_hidden_state[0]
        for batch in (slice(0, 2), slice(0, 4)):
            together = ours(ids[batch], attention_mask=mask[batch], unpad=True).last_hidden_state[0, :37]
            assert torch.equal(together, alone)


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_the_first_tokens_alone_equal_the_full_forward(backend, tmp_path):
    """final_tokens="first": the last layer's queries are each sequence's first token (Gemma3Attention picks them
    after the norms, the rotation and the scale), padded and packed."""
    _, directory = _saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend=backend)
    ids, mask = _batch(ours.config)
    with torch.no_grad():
        full = ours(ids, attention_mask=mask).last_hidden_state[:, :1]
        for unpad in (False, True):
            first = ours(ids, attention_mask=mask, final_tokens="first", unpad=unpad).last_hidden_state
            assert first.shape == (len(LENGTHS), 1, 32)
            torch.testing.assert_close(first, full, **TOL)


def test_half_precision_embeddings_scale_in_the_weights_dtype(tmp_path):
    """sqrt(hidden_size) is rounded to the weights' dtype before the product (Gemma3TextScaledWordEmbedding): bf16
    embeddings equal transformers' bit for bit."""
    hf, directory = _saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, dtype=torch.bfloat16)
    ids, _ = _batch(hf.config)
    with torch.no_grad():
        theirs = hf.to(torch.bfloat16).embed_tokens(ids)
        assert torch.equal(ours.embeddings(ids, torch.zeros_like(ids), ids), theirs)


def test_convert_round_trip_loads_in_transformers(tmp_path):
    hf, directory = _saved(tmp_path)
    assert cli(["convert", str(directory), str(tmp_path / "native")]) == 0
    assert cli(["convert", str(tmp_path / "native"), str(tmp_path / "hf"), "--to", "hf"]) == 0
    back, info = transformers.AutoModel.from_pretrained(tmp_path / "hf", output_loading_info=True,
                                                        attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"] and type(back) is transformers.Gemma3TextModel
    for name in ("num_key_value_heads", "head_dim", "rope_parameters", "layer_types", "sliding_window",
                 "query_pre_attn_scalar", "rms_norm_eps", "use_bidirectional_attention", "hidden_activation"):
        assert getattr(back.config, name) == getattr(hf.config, name), name
    ids, mask = _batch(hf.config)
    with torch.no_grad():
        a, b = back.eval()(ids, attention_mask=mask), hf(ids, attention_mask=mask)
    torch.testing.assert_close(a.last_hidden_state[mask.bool()], b.last_hidden_state[mask.bool()], **TOL)
    saved = convert.read_safetensors(directory / "model.safetensors")
    exported = convert.read_safetensors(tmp_path / "hf" / "model.safetensors")
    assert set(exported) == set(saved) and all(torch.equal(exported[k], v) for k, v in saved.items())
    sd = {k.removeprefix("model."): v for k, v in hf.state_dict().items()}
    ours_sd, dropped = convert.hf_to_minialign(sd, "gemma3_text")
    assert dropped == [] and "encoder.layers.0.attention.q_norm.weight" in ours_sd
    back_sd = convert.minialign_to_hf(ours_sd, "gemma3_text")
    assert set(back_sd) == set(sd) and all(torch.equal(back_sd[k], sd[k]) for k in back_sd)


def test_config_both_spellings_default_pattern_and_preset():
    new = hf_config().to_dict()  # transformers 5: rope_parameters, sliding_window written back as given
    assert new["sliding_window"] == 4
    hub = {k: v for k, v in new.items() if k not in ("rope_parameters", "layer_types")}
    hub.update(rope_theta=1000.0, rope_local_base_freq=50.0, rope_scaling=None, sliding_window_pattern=2)
    for hf, types in ((new, tuple(LAYER_TYPES)), (hub, (SLIDING, FULL, SLIDING))):
        config = ma.Config.from_hf(hf)
        assert (config.rope_theta, config.local_rope_theta, config.layer_types, config.sliding_window, config.head_dim,
                config.kv_heads, config.query_pre_attn_scalar, config.activation, config.hidden_dropout) == (
            1000.0, 50.0, types, 4, 12, 2, 20, "gelu_pytorch_tanh", 0.0)
    preset = ma.Config.from_name("embeddinggemma-300m")
    assert (preset.hidden_size, preset.num_layers, preset.num_heads, preset.kv_heads, preset.head_dim,
            preset.sliding_window, preset.layer_types.count(FULL), preset.max_seq_len) == (768, 24, 3, 1, 256, 512, 4,
                                                                                            2048)
    assert [layer.window for layer in ma.Encoder(dataclasses.replace(preset, num_layers=6, layer_types=(
        SLIDING,) * 5 + (FULL,), vocab_size=300, hidden_size=48, intermediate_size=8, head_dim=8)).layers] == [256] * 5 + [None]


def test_bad_configs_name_the_field():
    good = hf_config().to_dict()
    for change, field in (({"use_bidirectional_attention": False}, "use_bidirectional_attention"),
                          ({"attn_logit_softcapping": 50.0}, "attn_logit_softcapping"),
                          ({"rope_parameters": {FULL: {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                                                SLIDING: {"rope_type": "default", "rope_theta": 1e4}}}, "rope_type")):
        with pytest.raises(ValueError, match=field):
            ma.Config.from_hf({**good, **change})
    config = ma.Config.from_hf(good)
    for field, value in (("num_key_value_heads", 3), ("layer_types", (FULL,)), ("layer_types", ("causal",) * 3),
                         ("head_dim", 7), ("sliding_window", 0)):
        with pytest.raises(ValueError, match=field):
            dataclasses.replace(config, **{field: value})
    with pytest.raises(ValueError, match="no question-answering head"):
        ma.QuestionAnsweringModel(dataclasses.replace(config, labels=("a", "b")))


def test_compiles_without_graph_breaks(tmp_path):
    _, directory = _saved(tmp_path)
    model = ma.Encoder.from_pretrained(directory, attn_backend="sdpa")
    ids, mask = _batch(model.config, lengths=(20, 12))
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(ids, attention_mask=mask)
    assert explanation.graph_break_count == 0, explanation.break_reasons


# -- EmbeddingGemma's sentence-transformers directory ------------------------------------------------------------

PROMPTS = {"query": "task: search result | query: ", "document": "title: none | text: ",
           "Classification": "task: classification | query: "}  # EmbeddingGemma's prompts (a few of them)
TEXTS = ["The Eiffel Tower is in Paris.", "La tour a été construite à Paris en 1889.", "Short.",
         "Der Turm wurde in Paris gebaut, sagte der Minister am Montag, und die Zahl 3.14 stand im Bericht."]


@pytest.fixture(scope="module")
def embedding_gemma(tmp_path_factory):
    """An EmbeddingGemma-like directory saved by sentence-transformers itself: Transformer (a tiny random
    Gemma3TextModel, EuroBERT's Llama-3-style BPE tokenizer: `<bos> A <eos>`, pad = eos) -> Pooling mean ->
    Dense(32 -> 64) -> Dense(64 -> 32), both without bias or activation -> Normalize; its prompts in
    config_sentence_transformers.json (EmbeddingGemma's layout, google/embeddinggemma-300m modules.json)."""
    from family_builders import FAMILIES, write_tokenizer
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Transformer

    root = tmp_path_factory.mktemp("embeddinggemma")
    base = root / "base"
    vocab = write_tokenizer(FAMILIES["eurobert"], base, wordpiece_dir=root, bpe_dir=root)
    hf = reference_model(transformers.Gemma3TextModel, hf_config(vocab_size=vocab, max_position_embeddings=64),
                         factor=3, sharpen=lambda name, p: p.dim() == 2 and "embed" not in name)
    hf.save_pretrained(base)
    torch.manual_seed(2)
    modules = [Transformer(str(base), max_seq_length=32), Pooling(32, pooling_mode="mean"),
               Dense(32, 64, bias=False, activation_function=torch.nn.Identity()),
               Dense(64, 32, bias=False, activation_function=torch.nn.Identity()), Normalize()]
    directory = root / "st"
    SentenceTransformer(modules=modules, prompts=PROMPTS, device="cpu").save(str(directory))
    return directory


@pytest.mark.parametrize("unpad", [True, False], ids=["packed", "padded"])
def test_embedding_gemma_directory_equals_sentence_transformers(embedding_gemma, unpad):
    from sentence_transformers import SentenceTransformer

    modules = [m["type"].rsplit(".", 1)[-1] for m in json.loads((embedding_gemma / "modules.json").read_text())]
    assert modules == ["Transformer", "Pooling", "Dense", "Dense", "Normalize"]
    reference = SentenceTransformer(str(embedding_gemma), device="cpu")
    emb = ma.SentenceEncoder.from_pretrained(embedding_gemma, unpad=unpad)
    assert emb.model.config.arch == "gemma3_text" and emb.pooling == ["mean"] and emb.prompts == PROMPTS
    assert emb.dimension == 32
    for kwargs in ({}, {"prompt_name": "query"}, {"prompt_name": "document"}, {"prompt": "task: code | query: "}):
        got = emb.encode(TEXTS, batch_size=3, warn_truncation=False, **kwargs)  # cut by the window as ST cuts
        expected = torch.as_tensor(reference.encode(TEXTS, batch_size=3, **kwargs))
        assert got.shape == expected.shape == (len(TEXTS), 32)
        torch.testing.assert_close(got, expected, **TOL)
    if unpad:  # packed (the default): a text's bits whatever it is batched with
        alone = emb.encode(TEXTS[2:3], prompt_name="query")
        assert torch.equal(alone[0], emb.encode(TEXTS, batch_size=4, prompt_name="query", warn_truncation=False)[2])
