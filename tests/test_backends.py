"""Attention backends (eager, sdpa, flex), unpadded execution, fused QKV, first-token-only
pooling, autocast and compilation: all against transformers or the eager reference."""

import pytest
import torch
from conftest import hf_model, pad_batch

import minialign as ma

TOL = dict(atol=1e-5, rtol=0)


@pytest.fixture(params=["bert", "roberta"])
def pair(request, tmp_path):
    hf = hf_model(request.param, "base")
    hf.save_pretrained(tmp_path / "m")
    return hf, tmp_path / "m"


def _batch(config, lengths=(37, 20, 5)):
    ids = torch.randint(config.pad_token_id + 1, config.vocab_size, (len(lengths), max(lengths)))
    return pad_batch(ids, list(lengths), config.pad_token_id)


@pytest.mark.parametrize("backend", ["eager", "sdpa", pytest.param("flex", marks=pytest.mark.slow)])
def test_unpadded_equals_transformers(pair, backend):
    hf, directory = pair
    model = ma.Encoder.from_pretrained(directory, attn_backend=backend)
    ids, mask = _batch(hf.config)
    real = mask.bool()
    with torch.no_grad():
        theirs = hf(ids, attention_mask=mask, output_hidden_states=True)
        padded = model(ids, attention_mask=mask)
        packed = model(ids, attention_mask=mask, unpad=True, output_hidden_states=True)
        pooled = model(ids, attention_mask=mask, unpad=True, pooled_only=True)
    for out in (padded, packed):
        torch.testing.assert_close(out.last_hidden_state[real], theirs.last_hidden_state[real], **TOL)
        torch.testing.assert_close(out.pooler_output, theirs.pooler_output, **TOL)
    for ours, ref in zip(packed.hidden_states, theirs.hidden_states):
        torch.testing.assert_close(ours[real], ref[real], **TOL)
    assert (packed.last_hidden_state[~real] == 0).all()  # pad rows of the unpacked output
    assert pooled.last_hidden_state is None
    torch.testing.assert_close(pooled.pooler_output, theirs.pooler_output, **TOL)


@pytest.mark.slow
def test_flex_masks_equal_eager(tmp_path):
    hf = hf_model("roberta", "base")
    hf.save_pretrained(tmp_path / "m")
    flex = ma.Encoder.from_pretrained(tmp_path / "m", attn_backend="flex")
    eager = ma.Encoder.from_pretrained(tmp_path / "m", attn_backend="eager")
    ids, mask = _batch(hf.config)
    L = ids.shape[1]
    left_only = mask[:, None, :] * torch.tril(torch.ones(L, L, dtype=torch.long))
    additive = (1.0 - left_only[:, None].float()) * -1e9
    real = mask.bool()
    with torch.no_grad():
        for m in (mask, left_only, additive, None):
            a = flex(ids, attention_mask=m).last_hidden_state
            b = eager(ids, attention_mask=m).last_hidden_state
            torch.testing.assert_close(a[real], b[real], **TOL)


def test_pooled_only_runs_the_last_layer_for_the_first_token(pair):
    hf, directory = pair
    model = ma.Encoder.from_pretrained(directory)
    ids, mask = _batch(hf.config)
    calls = []
    handle = model.layers[-1].ffn.register_forward_hook(lambda m, i, o: calls.append(i[0].shape))
    with torch.no_grad():
        fast = model(ids, attention_mask=mask, pooled_only=True)
        full = model(ids, attention_mask=mask)
    handle.remove()
    assert calls[0][1] == 1 and calls[1][1] == ids.shape[1]
    torch.testing.assert_close(fast.pooler_output, full.pooler_output, **TOL)


def test_alignmodel_unpad_and_pooled_only(tmp_path):
    from conftest import write_alignscore_ckpt

    path, ref = write_alignscore_ckpt(tmp_path / "a.ckpt", "roberta")
    ref["backbone"].save_pretrained(tmp_path / "bb")
    model = ma.AlignModel.from_pretrained(path, backbone=str(tmp_path / "bb"))
    ids, mask = _batch(ref["backbone"].config)
    with torch.no_grad():
        pooled = ref["backbone"](ids, attention_mask=mask).pooler_output
        for unpad in (False, True):
            out = model(ids, attention_mask=mask, unpad=unpad)
            assert out.last_hidden_state is None and out.prediction_logits is None
            torch.testing.assert_close(out.tri_label_logits, ref["tri_layer"](pooled), **TOL)
        assert model(ids, attention_mask=mask, mlm=True).last_hidden_state is not None


def test_unpad_without_padding_runs_the_padded_path(pair, monkeypatch):
    hf, directory = pair
    model = ma.Encoder.from_pretrained(directory)
    ids, mask = _batch(hf.config, lengths=(9, 9))
    with torch.no_grad():
        expected = model(ids, attention_mask=mask).last_hidden_state
        monkeypatch.setattr(model, "_forward_packed", lambda *a, **k: pytest.fail("packed a batch without padding"))
        for m in (mask, None):
            torch.testing.assert_close(model(ids, attention_mask=m, unpad=True).last_hidden_state, expected, **TOL)


def test_unpad_needs_right_padding(pair):
    hf, directory = pair
    model = ma.Encoder.from_pretrained(directory)
    ids, mask = _batch(hf.config)
    with pytest.raises(ValueError, match="right-padded"):
        model(ids, attention_mask=mask.flip(1), unpad=True)


def test_fused_qkv_keeps_checkpoint_names(pair):
    hf, directory = pair
    model = ma.Encoder.from_pretrained(directory)
    attention = model.layers[0].attention
    assert attention.qkv.weight.shape == (3 * hf.config.hidden_size, hf.config.hidden_size)
    names = set(model.state_dict())
    assert {"layers.0.attention.query.weight", "layers.0.attention.key.bias", "layers.0.attention.value.weight"} <= names
    assert not any("qkv" in n for n in names)
    sd = hf.state_dict()
    torch.testing.assert_close(model.state_dict()["layers.1.attention.key.weight"],
                               sd["encoder.layer.1.attention.self.key.weight"], atol=0, rtol=0)
    fresh = ma.Encoder(model.config)
    fresh.load_state_dict(model.state_dict())
    assert torch.equal(fresh.layers[2].attention.qkv.weight, model.layers[2].attention.qkv.weight)


def test_bf16_and_autocast_close_to_fp32(pair):
    hf, directory = pair
    fp32 = ma.Encoder.from_pretrained(directory)
    bf16 = ma.Encoder.from_pretrained(directory, dtype=torch.bfloat16)
    ids, mask = _batch(hf.config)
    real = mask.bool()
    with torch.no_grad():
        ref = fp32(ids, attention_mask=mask).last_hidden_state
        hf_bf16 = hf.to(torch.bfloat16)(ids, attention_mask=mask).last_hidden_state.float()
        hf.float()
        ours = bf16(ids, attention_mask=mask).last_hidden_state.float()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            auto = fp32(ids, attention_mask=mask).last_hidden_state.float()
    bound = 3 * (hf_bf16 - ref)[real].abs().max()  # judged against transformers' own bf16 error
    assert (ours - ref)[real].abs().max() <= bound
    assert (auto - ref)[real].abs().max() <= bound


@pytest.mark.parametrize("cls", [ma.Encoder, ma.AlignModel])
@pytest.mark.parametrize("backend", ["sdpa", "eager"])
def test_compiles_without_graph_breaks(pair, backend, cls):
    hf, directory = pair
    with pytest.warns(UserWarning) if cls is ma.AlignModel else _nothing():
        model = cls.from_pretrained(directory, attn_backend=backend)
    ids, mask = _batch(hf.config)
    explanation = torch._dynamo.explain(model)(ids, attention_mask=mask)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


def _nothing():
    import contextlib

    return contextlib.nullcontext()


def test_compile_true_gives_the_same_numbers(pair):
    hf, directory = pair
    compiled = ma.Encoder.from_pretrained(directory, compile=True)
    plain = ma.Encoder.from_pretrained(directory)
    ids, mask = _batch(hf.config)
    with torch.no_grad():
        torch.testing.assert_close(compiled(ids, attention_mask=mask).pooler_output,
                                   plain(ids, attention_mask=mask).pooler_output, **TOL)
