"""Parity with transformers (eager attention) in fp32: every output field, <= 1e-5 on real tokens."""

import pytest
import torch
from conftest import hf_model, pad_batch

import minialign as ma
from minialign.apps.parity import compare

TOL = dict(atol=1e-5, rtol=0)

CONFIGS = [
    ("bert", {}),
    ("bert", dict(hidden_size=20, num_attention_heads=5, intermediate_size=31, num_hidden_layers=2)),
    ("roberta", {}),
    ("roberta", dict(hidden_size=28, num_attention_heads=7, intermediate_size=45, num_hidden_layers=2,
                     pad_token_id=3, layer_norm_eps=1e-5)),
]


def _pair(arch, overrides, tmp_path, backend):
    hf = hf_model(arch, "base", **overrides)
    hf.save_pretrained(tmp_path / "m")
    return hf, ma.Encoder.from_pretrained(tmp_path / "m", attn_backend=backend)


def _batch(config, lengths=(19, 11, 4)):
    ids = torch.randint(config.pad_token_id + 1, config.vocab_size, (len(lengths), max(lengths)))
    return pad_batch(ids, list(lengths), config.pad_token_id)


def _assert_equal_on_real(hf_out, out, real):
    """Every shared output field (shapes equal, every layer) within 1e-5 on real tokens."""
    assert len(out.hidden_states) == len(hf_out.hidden_states)
    assert len(out.attentions) == len(hf_out.attentions)
    diffs = compare(hf_out, out, real)
    assert {f"hidden_{i}" for i in range(len(out.hidden_states))} <= set(diffs)
    assert {f"attention_{i}" for i in range(len(out.attentions))} <= set(diffs)
    worst = {name: d for name, d in diffs.items() if d > TOL["atol"]}
    assert not worst, worst


@pytest.mark.parametrize("backend", ["eager", "sdpa", pytest.param("flex", marks=pytest.mark.slow)])
@pytest.mark.parametrize("arch,overrides", CONFIGS)
def test_padding_mask_parity(arch, overrides, backend, tmp_path):
    hf, ours = _pair(arch, overrides, tmp_path, backend)
    ids, mask = _batch(hf.config)
    with torch.no_grad():
        theirs = hf(ids, attention_mask=mask, output_hidden_states=True, output_attentions=True)
        out = ours(ids, attention_mask=mask, output_hidden_states=True, output_attentions=True)
        fast = ours(ids, attention_mask=mask)  # the backend's own path, no probabilities
    _assert_equal_on_real(theirs, out, mask.bool())
    torch.testing.assert_close(fast.last_hidden_state[mask.bool()], theirs.last_hidden_state[mask.bool()], **TOL)
    assert fast.hidden_states is None and fast.attentions is None


@pytest.mark.parametrize("backend", ["eager", "sdpa", pytest.param("flex", marks=pytest.mark.slow)])
@pytest.mark.parametrize("arch,overrides", CONFIGS[::2])
def test_3d_mask_parity(arch, overrides, backend, tmp_path):
    """A (B, L, L) mask; transformers gets the same mask as a 4-D additive one."""
    hf, ours = _pair(arch, overrides, tmp_path, backend)
    ids, pad = _batch(hf.config)
    L = ids.shape[1]
    causal = torch.tril(torch.ones(L, L, dtype=torch.long))
    mask3 = pad[:, None, :] * causal[None]  # left-only attention over real tokens
    mask3[0] = pad[0][None, :]  # first sequence stays bidirectional
    additive = (1.0 - mask3[:, None].float()) * torch.finfo(torch.float32).min
    with torch.no_grad():
        theirs = hf(ids, attention_mask=additive, output_hidden_states=True, output_attentions=True)
        out = ours(ids, attention_mask=mask3, output_hidden_states=True, output_attentions=True)
        fast = ours(ids, attention_mask=mask3)
    _assert_equal_on_real(theirs, out, pad.bool())
    torch.testing.assert_close(fast.last_hidden_state[pad.bool()], theirs.last_hidden_state[pad.bool()], **TOL)


def test_4d_masks_equal_2d(tmp_path):
    hf, ours = _pair("bert", {}, tmp_path, "eager")
    ids, mask = _batch(hf.config)
    L = ids.shape[1]
    bool4 = mask.bool()[:, None, None, :].expand(-1, 1, L, -1)
    additive4 = (1.0 - bool4.float()) * -1e9
    with torch.no_grad():
        ref = ours(ids, attention_mask=mask).last_hidden_state
        for m in (bool4, additive4, mask.bool()[:, None, :].expand(-1, L, -1)):
            torch.testing.assert_close(ours(ids, attention_mask=m).last_hidden_state, ref, **TOL)


def test_no_mask_equals_full_mask(tmp_path):
    _, ours = _pair("roberta", {}, tmp_path, "sdpa")
    ids = torch.randint(5, 200, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).last_hidden_state,
                                   ours(ids, attention_mask=torch.ones_like(ids)).last_hidden_state, **TOL)


def test_token_type_ids_parity(tmp_path):
    hf, ours = _pair("bert", {}, tmp_path, "eager")
    ids, mask = _batch(hf.config)
    types = torch.zeros_like(ids)
    types[:, 5:] = 1
    with torch.no_grad():
        a = hf(ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        b = ours(ids, attention_mask=mask, token_type_ids=types).last_hidden_state
    torch.testing.assert_close(b[mask.bool()], a[mask.bool()], **TOL)


def test_roberta_positions_start_after_pad():
    from minialign.models.roberta import roberta_position_ids

    ids = torch.tensor([[0, 7, 8, 2, 1, 1], [1, 1, 0, 7, 2, 1]])
    assert roberta_position_ids(ids, 1).tolist() == [[2, 3, 4, 5, 1, 1], [1, 1, 2, 3, 4, 1]]


def test_minilm_real_weights_parity(minilm_dir):
    """all-MiniLM-L6-v2 with its real tokenizer, against transformers."""
    hf = transformers_model(minilm_dir)
    ours = ma.Encoder.from_pretrained(minilm_dir, attn_backend="eager")
    tok = ma.Tokenizer.from_pretrained(minilm_dir)
    batch = tok(["The Eiffel Tower is in Paris.", "Short.", "A much longer sentence about the tower, " * 6],
                ["It was built in 1889.", "Tiny pair.", "Second part."])
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        theirs = hf(**batch, output_hidden_states=True, output_attentions=True)
        out = ours(**batch, output_hidden_states=True, output_attentions=True)
    _assert_equal_on_real(theirs, out, real)
    sdpa = ma.Encoder.from_pretrained(minilm_dir)
    with torch.no_grad():
        fast = sdpa(**batch)
    torch.testing.assert_close(fast.last_hidden_state[real], theirs.last_hidden_state[real], **TOL)


def transformers_model(directory):
    import transformers

    return transformers.AutoModel.from_pretrained(directory, attn_implementation="eager").eval()


def test_dropout_active_in_train_absent_in_eval(tmp_path):
    _, ours = _pair("bert", dict(hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.3), tmp_path, "sdpa")
    ids = torch.randint(5, 200, (2, 12))
    with torch.no_grad():
        assert torch.equal(ours(ids).last_hidden_state, ours(ids).last_hidden_state)
        ours.train()
        a, b = ours(ids).last_hidden_state, ours(ids).last_hidden_state
        assert not torch.allclose(a, b)
        ours.eval()
        assert torch.equal(ours(ids).last_hidden_state, ours(ids).last_hidden_state)


def test_bad_inputs(tmp_path):
    _, ours = _pair("bert", dict(max_position_embeddings=16), tmp_path, "sdpa")
    with pytest.raises(ValueError, match="window of 16"):
        ours(torch.ones(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        ours(torch.tensor([[5, 999]]))
    with pytest.raises(ValueError, match=r"\(B, L\)"):
        ours(torch.ones(4, dtype=torch.long))
    with pytest.raises(ValueError, match="2-D attention_mask"):
        ours(torch.ones(2, 5, dtype=torch.long), attention_mask=torch.ones(2, 6))
    with pytest.raises(ValueError, match="3-D attention_mask"):
        ours(torch.ones(2, 5, dtype=torch.long), attention_mask=torch.ones(2, 5, 4))
    with pytest.raises(ValueError, match="unknown attention backend"):
        ma.Encoder(ours.config, attn_backend="flash")


def test_roberta_window_excludes_pad_offset():
    config = ma.Config.from_name("roberta-base")
    assert config.max_seq_len == 512


def test_compare_reports_each_field_and_refuses_shape_mismatches():
    """The one comparison: a perturbation shows up in its own field, only on real tokens."""
    from minialign.models.encoder import EncoderOutput

    B, L, C, H = 2, 5, 4, 2
    real = torch.tensor([[True] * 5, [True, True, False, False, False]])
    base = EncoderOutput(torch.randn(B, L, C), torch.randn(B, C), tuple(torch.randn(B, L, C) for _ in range(3)),
                         tuple(torch.softmax(torch.randn(B, H, L, L), -1) for _ in range(2)))
    assert set(compare(base, base, real).values()) == {0.0}
    hidden = list(base.hidden_states)
    hidden[1] = hidden[1].clone()
    hidden[1][1, 4] += 9.0  # a pad token: ignored
    hidden[1][0, 2] += 0.5
    attentions = list(base.attentions)
    attentions[1] = attentions[1].clone()
    attentions[1][1, 0, 1, 3] += 0.25  # a real query row
    other = EncoderOutput(base.last_hidden_state, base.pooler_output, tuple(hidden), tuple(attentions))
    diffs = compare(base, other, real)
    assert diffs["hidden_1"] == pytest.approx(0.5) and diffs["attention_1"] == pytest.approx(0.25)
    assert diffs["hidden_0"] == diffs["attention_0"] == diffs["last_hidden_state"] == 0.0
    with pytest.raises(ValueError, match="pooled: shapes differ"):  # as `minialign parity` names it
        compare(base, EncoderOutput(base.last_hidden_state, base.pooler_output[:1]), real)
