"""Qwen3 and Qwen2 (minialign/models/qwen3.py) against transformers' native Qwen3Model and Qwen2Model
(eager attention, fp32): tiny random configs built and saved here (grouped-query attention; Qwen3's heads wider than
hidden / heads, its q / k norms; Qwen2's q / k / v biases), causal, padded on the right and on the left and packed,
every backend; the bidirectional variant by its config flag; a text's states the same bits in any batch; the names
both ways; the config's refusals."""

import json

import pytest
import torch
import transformers
from conftest import encoder_parity, pad_batch, reference_model

import minialign as ma
from minialign import convert

TOL = dict(atol=1e-5, rtol=0)
LENGTHS = (40, 23, 9)
ROPE = {"rope_type": "default", "rope_theta": 500.0}
SIZES = dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=37, max_position_embeddings=256, rms_norm_eps=1e-6, rope_parameters=ROPE)


def hf_model(arch="qwen3", cls=None, **overrides):
    if arch == "qwen3":
        config = transformers.Qwen3Config(**{**SIZES, "head_dim": 16, **overrides})  # 4 x 16 > 32: heads of their own
        cls = cls or transformers.Qwen3Model
    else:
        config = transformers.Qwen2Config(**{**SIZES, **overrides})
        cls = cls or transformers.Qwen2Model
    return reference_model(cls, config, factor=3, sharpen=lambda name, p: p.dim() == 2 and "embed" not in name)


def saved(tmp_path, arch="qwen3", **overrides):
    hf = hf_model(arch, **overrides)
    hf.save_pretrained(tmp_path / arch)
    return hf, tmp_path / arch


def batch(config, lengths=LENGTHS, *, left=False):
    torch.manual_seed(1)
    ids = torch.randint(3, config.vocab_size, (len(lengths), max(lengths)))
    ids, mask = pad_batch(ids, list(lengths), 0)
    if left:  # each row's real tokens moved to its end
        L = ids.size(1)
        for i, n in enumerate(lengths):
            ids[i] = torch.cat([ids[i, n:], ids[i, :n]]) if n < L else ids[i]
            mask[i] = torch.cat([mask[i, n:], mask[i, :n]]) if n < L else mask[i]
    return ids, mask


@pytest.mark.parametrize("arch", ["qwen3", "qwen2"])
@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_encoder_parity_right_padded_and_packed(arch, backend, tmp_path):
    hf, directory = saved(tmp_path, arch)
    ours = ma.Encoder.from_pretrained(directory, attn_backend=backend)
    assert ours.config.arch == arch and ours.config.causal and ours.pooler is None
    attention = ours.layers[0].attention
    if arch == "qwen3":
        assert attention.qkv.weight.shape == ((4 + 2 * 2) * 16, 32) and attention.output.weight.shape == (32, 64)
        assert attention.q_norm.weight.shape == (16,) and attention.qkv.bias is None
    else:
        assert attention.qkv.bias is not None and attention.output.bias is None and attention.q_norm is None
    ids, mask = batch(hf.config)
    _, out, diffs = encoder_parity(hf, ours, mask.bool(), TOL, input_ids=ids, attention_mask=mask)
    assert {"hidden_2", "attention_1"} <= set(diffs)
    torch.testing.assert_close(out.hidden_states[-1], out.last_hidden_state)


def test_the_mask_is_causal_a_later_token_changes_no_earlier_state(tmp_path):
    _, directory = saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend="sdpa")
    ids = torch.randint(3, 97, (1, 12))
    changed = ids.clone()
    changed[0, 8:] = (changed[0, 8:] + 1) % 97
    with torch.no_grad():
        a, b = ours(ids).last_hidden_state, ours(changed).last_hidden_state
    assert torch.equal(a[0, :8], b[0, :8]) and not torch.allclose(a[0, 8:], b[0, 8:])


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_left_padding_as_transformers_and_as_the_right_padded_text(backend, tmp_path):
    """Left padded, transformers counts positions from the row's first slot (position_ids = arange): ours too, on
    the padded layout. The same texts right padded or packed (positions from each text's first token) give the same
    states within 1e-5: rotary scores depend on j - i alone."""
    hf, directory = saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend=backend)
    ids, mask = batch(hf.config, left=True)
    right_ids, right_mask = batch(hf.config)
    with torch.no_grad():
        theirs = hf(ids, attention_mask=mask).last_hidden_state
        left = ours(ids, attention_mask=mask).last_hidden_state
        for unpad in (False, True):
            right = ours(right_ids, attention_mask=right_mask, unpad=unpad).last_hidden_state
            torch.testing.assert_close(right[right_mask.bool()], theirs[mask.bool()], **TOL)
    torch.testing.assert_close(left[mask.bool()], theirs[mask.bool()], **TOL)
    with pytest.raises(ValueError, match="right-padded"):
        ours(ids, attention_mask=mask, unpad=True)


def test_a_text_is_bit_identical_whatever_it_is_batched_with(tmp_path):
    _, directory = saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend="sdpa")
    ids, mask = batch(ours.config, lengths=(37, 120, 5, 64))
    with torch.no_grad():
        alone = ours(ids[:1, :37], attention_mask=mask[:1, :37], unpad=True).last_hidden_state[0]
        for rows in (slice(0, 2), slice(0, 4)):
            together = ours(ids[rows], attention_mask=mask[rows], unpad=True).last_hidden_state[0, :37]
            assert torch.equal(together, alone)


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_first_tokens_only_see_themselves(backend, tmp_path):
    """final_tokens="first" on a causal model: each first token's state from itself alone, as in the full forward."""
    hf, directory = saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend=backend)
    ids, mask = batch(hf.config)
    with torch.no_grad():
        full = ours(ids, attention_mask=mask).last_hidden_state[:, :1]
        for unpad in (False, True):
            first = ours(ids, attention_mask=mask, unpad=unpad, final_tokens="first").last_hidden_state
            torch.testing.assert_close(first, full, **TOL)


def test_bidirectional_by_its_config_flag(tmp_path):
    """use_bidirectional_attention: every real key (transformers handed the bidirectional mask itself)."""
    hf, directory = saved(tmp_path, use_bidirectional_attention=True)
    ours = ma.Encoder.from_pretrained(directory, attn_backend="sdpa")
    assert ours.config.use_bidirectional_attention and not ours.config.causal
    ids, mask = batch(hf.config)
    keep = mask.bool()[:, None, None, :].expand(-1, 1, ids.size(1), -1)
    bias = torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)  # eager's additive form
    with torch.no_grad():
        theirs = hf(ids, attention_mask={"full_attention": bias}).last_hidden_state
        causal = hf(ids, attention_mask=mask).last_hidden_state
    assert not torch.allclose(theirs[mask.bool()], causal[mask.bool()], atol=1e-3)  # the flag makes a difference
    with torch.no_grad():
        for unpad in (False, True):
            got = ours(ids, attention_mask=mask, unpad=unpad).last_hidden_state
            torch.testing.assert_close(got[mask.bool()], theirs[mask.bool()], **TOL)


@pytest.mark.parametrize("arch", ["qwen3", "qwen2"])
def test_names_both_ways_and_the_causal_lm_head_dropped(arch, tmp_path):
    cls = transformers.Qwen3ForCausalLM if arch == "qwen3" else transformers.Qwen2ForCausalLM
    hf = hf_model(arch, cls)
    sd = {k.removeprefix("model."): v for k, v in hf.state_dict().items()}
    ours_sd, dropped = convert.hf_to_minialign(sd, arch)
    assert "lm_head.weight" in dropped
    back = convert.minialign_to_hf(ours_sd, arch)
    assert set(back) == set(sd) - {"lm_head.weight"}
    assert all(torch.equal(back[k], sd[k]) for k in back)
    hf.save_pretrained(tmp_path / "lm")
    ours = ma.Encoder.from_pretrained(tmp_path / "lm", attn_backend="sdpa")
    ids = torch.randint(3, 97, (2, 10))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).last_hidden_state, hf.model(ids).last_hidden_state, **TOL)


def test_config_reading_and_its_refusals(tmp_path):
    hf, directory = saved(tmp_path)
    config = json.loads((directory / "config.json").read_text())
    ours = ma.Config.from_hf(config)
    assert (ours.head_dim, ours.num_key_value_heads, ours.rope_theta, ours.layer_norm_eps) == (16, 2, 500.0, 1e-6)
    assert ma.Config.from_hf({**config, "rope_parameters": None, "rope_theta": 1000.0}).rope_theta == 1000.0
    with pytest.raises(ValueError, match="use_sliding_window"):
        ma.Config.from_hf({**config, "use_sliding_window": True})
    with pytest.raises(ValueError, match="rope_type 'linear'"):
        ma.Config.from_hf({**config, "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 5.0}})
    assert ma.Config(arch="qwen3", vocab_size=9, hidden_size=8, num_layers=1, num_heads=2,
                     intermediate_size=4).head_dim == 4  # no head_dim: the hidden size split
    assert ma.PRESETS["qwen3-embedding-0.6b"].head_dim == 128 and ma.PRESETS["mxbai-rerank-base-v2"].head_dim == 64


@pytest.mark.slow
def test_flex_padded_and_packed(tmp_path):
    """One flex case (CPU flex compiles per shape): packed by default on CPU, and padded (right and left)."""
    hf, directory = saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend="flex")
    for left in (False, True):
        ids, mask = batch(hf.config, lengths=(150, 40), left=left)
        real = mask.bool()
        with torch.no_grad():
            theirs = hf(ids, attention_mask=mask).last_hidden_state
            for unpad in (False, True) if not left else (False,):
                got = ours(ids, attention_mask=mask, unpad=unpad).last_hidden_state
                torch.testing.assert_close(got[real], theirs[real], **TOL)


def qwen3_embedding_dir(directory):
    """A Qwen3-Embedding-shaped sentence-transformers directory: a tiny random Qwen3Model, a byte-level BPE
    tokenizer appending its end-of-text token and padding on the left (Qwen/Qwen3-Embedding-0.6B's
    tokenizer_config.json: padding_side "left", pad_token "<|endoftext|>"), Transformer -> Pooling lasttoken ->
    Normalize, and a query prompt."""
    from family_builders import eurobert_bpe
    from sentence_transformers import SentenceTransformer, models
    from tokenizers import Tokenizer, processors

    base = directory / "base"
    base.mkdir(parents=True)
    eurobert_bpe(base)
    tok = Tokenizer.from_file(str(base / "tokenizer.json"))
    eos = "<|end_of_text|>"
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"$A:0 {eos}:0", pair=f"$A:0 {eos}:0 $B:1 {eos}:1",
                                      special_tokens=[(eos, tok.token_to_id(eos))])])
    tok.save(str(base / "tokenizer.json"))
    (base / "tokenizer_config.json").write_text(json.dumps({
        "model_max_length": 64, "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": eos, "pad_token": eos,
        "padding_side": "left", "model_input_names": ["input_ids", "attention_mask"]}))
    hf = hf_model(vocab_size=tok.get_vocab_size(), max_position_embeddings=128)
    hf.save_pretrained(base)
    transformer = models.Transformer(str(base), max_seq_length=24)
    assert transformer.tokenizer.padding_side == "left"
    st = SentenceTransformer(modules=[transformer, models.Pooling(32, pooling_mode="lasttoken"), models.Normalize()],
                             device="cpu", prompts={"query": "Instruct: Given a question, find the answer\nQuery:"})
    st.save(str(directory / "st"))
    return st, directory / "st"


def test_qwen3_embedding_directory_equals_sentence_transformers(tmp_path):
    """SentenceEncoder against SentenceTransformer.encode (which pads on the left, as the tokenizer says; ours
    pads on the right: the same states, rotary scores depend on j - i alone), with and without the query prompt,
    a text cut to the window included; a text's embedding the same bits alone and in a batch."""
    st, directory = qwen3_embedding_dir(tmp_path)
    texts = ["The tower was built in Paris.", "La tour", "opened in 1889 and built in Paris, the tower opened " * 3]
    emb = ma.SentenceEncoder.from_pretrained(directory)
    for prompt in ("query", None):
        expected = st.encode(texts, prompt_name=prompt, convert_to_tensor=True)
        got = emb.encode(texts, prompt_name=prompt, warn_truncation=False)
        torch.testing.assert_close(got, expected, **TOL)
    together = emb.encode(texts, prompt_name="query", warn_truncation=False)
    for i, text in enumerate(texts):
        assert torch.equal(emb.encode([text], prompt_name="query", warn_truncation=False)[0], together[i])


def test_varlen_runs_the_causal_model_packed_and_hands_first_tokens_to_sdpa(tmp_path, monkeypatch):
    """On the varlen row (its kernel the per-document stand-in: no GPU here, tests/nn/test_varlen.py), a packed
    forward equals sdpa's; the first-token queries of a causal model are refused, run on sdpa, and still right."""
    import warnings

    from minialign.nn import varlen
    from minialign.nn.attention import BackendFallbackWarning

    monkeypatch.setattr(varlen, "kernel", lambda device, dtype: lambda q, k, v, mask, scale: varlen.per_document(
        q, k, v, mask, scale))
    _, directory = saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend="varlen")
    ref = ma.Encoder.from_pretrained(directory, attn_backend="sdpa")
    ids, mask = batch(ours.config)
    real = mask.bool()
    with torch.no_grad():
        expected = ref(ids, attention_mask=mask).last_hidden_state
        with warnings.catch_warnings():
            warnings.simplefilter("error", BackendFallbackWarning)
            got = ours(ids, attention_mask=mask, unpad=True).last_hidden_state
        with pytest.warns(BackendFallbackWarning, match="first-token queries of a causal model"):
            first = ours(ids, attention_mask=mask, unpad=True, final_tokens="first").last_hidden_state
    torch.testing.assert_close(got[real], expected[real], **TOL)
    torch.testing.assert_close(first, expected[:, :1], **TOL)


def test_captured_probabilities_are_causal(tmp_path):
    _, directory = saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend="sdpa")
    ids, mask = batch(ours.config)
    with torch.no_grad(), ma.capture(ours) as cap:
        ours(ids, attention_mask=mask, unpad=True)
    probs = cap["layers.0.attention.probs"]  # (B, H, L, L)
    later = torch.ones(ids.size(1), ids.size(1), dtype=torch.bool).triu(1)
    assert probs.shape[-1] == ids.size(1) and float(probs[..., later].abs().max()) == 0.0


@pytest.mark.parametrize("arch", ["qwen3", "qwen2"])
@pytest.mark.parametrize("left", [False, True])
def test_sequence_classification_reads_the_last_non_pad_token(arch, left, tmp_path):
    """Qwen3ForSequenceClassification / Qwen2ForSequenceClassification (Qwen3-Reranker-seq-cls's class): `score`
    without a bias on each row's last token that is not pad_token_id, padded on either side, packed too."""
    cls = transformers.Qwen3ForSequenceClassification if arch == "qwen3" else transformers.Qwen2ForSequenceClassification
    hf = hf_model(arch, cls=cls, num_labels=2, pad_token_id=0)
    hf.save_pretrained(tmp_path / "clf")
    ours = ma.ClassifierModel.from_pretrained(tmp_path / "clf")
    assert ours.classifier.out_proj.bias is None and ours.classifier.kind.pool == "last"
    ids, mask = batch(hf.config, left=left)
    with torch.no_grad():
        theirs = hf(ids, attention_mask=mask).logits
        for unpad in (False, True) if not left else (False,):
            torch.testing.assert_close(ours(ids, attention_mask=mask, unpad=unpad).logits, theirs, **TOL)


def test_sequence_classification_without_a_pad_token_reads_the_last_real_token(tmp_path):
    """pad_token_id null in config.json: transformers reads the last position (a batch of one); a last token of id 0
    is read, not skipped as padding; an export writes the pad token null again."""
    hf = hf_model("qwen3", cls=transformers.Qwen3ForSequenceClassification, num_labels=2, pad_token_id=None)
    hf.save_pretrained(tmp_path / "clf")
    assert json.loads((tmp_path / "clf" / "config.json").read_text()).get("pad_token_id") is None
    ours = ma.ClassifierModel.from_pretrained(tmp_path / "clf")
    ids = torch.tensor([[5, 9, 17, 0]])
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).logits, hf(ids).logits, **TOL)
    assert ours.config.to_hf(classifier=True).get("pad_token_id") is None
