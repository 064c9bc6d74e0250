"""ma.patch: interventions on any named activation (the names ma.capture records), on every backend, scoped as
capture is. Checked against their definitions: a zeroed head is the output projection without that head's
columns; a patched probability map is what the attention's output is made of; activation patching with a
clean run's state gives the clean run's output; bad patches are named."""

import pytest
import torch

import minialign as ma

TOL = dict(atol=1e-5, rtol=0)
BACKENDS = ["eager", "sdpa", pytest.param("flex", marks=pytest.mark.slow)]


def _model(backend="sdpa", arch="bert"):
    config = ma.Config(vocab_size=300, hidden_size=32, num_layers=3, num_heads=4, intermediate_size=48,
                       hidden_dropout=0.0, attention_dropout=0.0)
    return ma.Encoder(config, attn_backend=backend, seed=0).eval()


def _batch():
    torch.manual_seed(1)
    ids = torch.randint(5, 300, (2, 10))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    return ids, mask


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_zeroed_head_is_the_output_projection_without_it(backend):
    model = _model(backend)
    ids, mask = _batch()
    real = mask.bool()
    ablated = _model(backend)
    D = model.config.head_dim
    with torch.no_grad():
        ablated.layers[1].attention.output.weight[:, 2 * D:3 * D] = 0  # head 2's columns
        expected = ablated(ids, attention_mask=mask).last_hidden_state
        plain = model(ids, attention_mask=mask).last_hidden_state
        with ma.patch(model, {"layers.1.attention.context": ma.ablate_heads(2)}):
            got = model(ids, attention_mask=mask).last_hidden_state
        again = model(ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(got[real], expected[real], **TOL)
    assert (got - plain)[real].abs().max() > 1e-3
    assert torch.equal(again, plain)  # outside the block the model is itself again


@pytest.mark.parametrize("backend", BACKENDS)
def test_patched_probabilities_make_the_attention_output(backend):
    """Every query attends the first token only: the context is that token's value, on any backend; an
    identity patch changes nothing."""
    model = _model(backend)
    ids, mask = _batch()
    real = mask.bool()

    def first_token(probs):
        out = torch.zeros_like(probs)
        out[..., 0] = 1
        return out

    with torch.no_grad():
        plain = model(ids, attention_mask=mask).last_hidden_state
        with ma.patch(model, {"layers.0.attention.probs": lambda p: p.clone()}):
            same = model(ids, attention_mask=mask).last_hidden_state
        with ma.capture(model) as cap, ma.patch(model, {"layers.0.attention.probs": first_token}):
            model(ids, attention_mask=mask)
    torch.testing.assert_close(same[real], plain[real], **TOL)
    v, context = cap["layers.0.attention.v"], cap["layers.0.attention.context"]
    torch.testing.assert_close(context, v[:, :, :1].expand_as(context), **TOL)
    assert torch.equal(cap["layers.0.attention.probs"][..., 0], torch.ones_like(context[..., 0]))  # recorded patched


def test_activation_patching_between_a_clean_and_a_corrupted_run():
    """The clean run's residual stream put into the corrupted run at layer 1: every later state is the clean
    run's (a post-LN stack is a function of its input)."""
    model = _model()
    clean = torch.randint(5, 300, (1, 8))
    corrupted = clean.clone()
    corrupted[0, 3] = 7
    with torch.no_grad():
        with ma.capture(model, names=["layers.*.output"]) as cap:
            expected = model(clean).last_hidden_state
        assert set(cap) == {"layers.0.output", "layers.1.output", "layers.2.output"}  # only what was asked
        with ma.patch(model, {"layers.1.output": ma.replace_with(cap["layers.1.output"])}):
            patched = model(corrupted).last_hidden_state
        unpatched = model(corrupted).last_hidden_state
    torch.testing.assert_close(patched, expected, **TOL)
    assert (unpatched - expected).abs().max() > 1e-3


def test_mean_ablation_and_patterns():
    model = _model()
    ids, mask = _batch()
    with torch.no_grad(), ma.capture(model) as cap, \
            ma.patch(model, {"layers.*.attention.context": ma.ablate_mean(0, 3)}):
        model(ids, attention_mask=mask)
    for i in range(3):
        context = cap[f"layers.{i}.attention.context"]
        for head in (0, 3):  # one value per head and dimension, over the batch and the tokens
            assert torch.allclose(context[:, head], context[:1, head, :1].expand_as(context[:, head]))
        assert not torch.allclose(context[:, 1], context[:1, 1, :1].expand_as(context[:, 1]))


def test_bad_patches_are_named():
    model = _model()
    ids, _ = _batch()
    with pytest.raises(ValueError, match=r"patch of layers\.0\.attention\.context returned \(2, 4, 10\); it must "
                                         r"return a tensor of the activation's shape \(2, 4, 10, 8\)"):
        with torch.no_grad(), ma.patch(model, {"layers.0.attention.context": lambda t: t[..., 0]}):
            model(ids)
    with pytest.raises(ValueError, match=r"no activation of Encoder's forward is named 'layers\.0\.atention\.probs'; "
                                         r"close: layers\.0\.attention\.probs"):
        with torch.no_grad(), ma.patch(model, {"layers.0.atention.probs": lambda t: t}):
            model(ids)
    with pytest.raises(ValueError, match="named 'layer.9.output'"):
        with torch.no_grad(), ma.capture(model, names=["layer.9.output"]):
            model(ids)


def test_deberta_position_terms_are_read_only(tiny_family):
    directory, _ = tiny_family.hf("deberta-v2")
    model = ma.Encoder.from_pretrained(directory)
    with pytest.raises(ValueError, match=r"attention\.c2p is recorded for reading only .* patch the scores"):
        with torch.no_grad(), ma.patch(model, {"layers.0.attention.c2p": lambda t: t * 0}):
            model(torch.tensor([[1, 5, 6, 7, 2]]))


def test_name_patterns():
    from minialign.nn.capture import matches

    assert matches("layers.3.output", "layers.*.output") and not matches("layers.3.attention.output", "layers.*.output")
    assert matches("layers.3.attention.output", "layers.**.output") and matches("layers.3.output", "layers.3.output")
    assert matches("encoder.layers.10.attention.probs", "encoder.layers.1?.attention.probs")
    assert not matches("layers.3.output", "layers.3.outpu") and not matches("layers_3.output", "layers.3.output")


def test_an_in_place_patch_and_a_copied_context_thread():
    """A patch that edits the probabilities in place still makes the output; a thread started inside the block
    with a copy of the context (asyncio.to_thread) sees no session: it runs as if none were open."""
    import asyncio

    from minialign.nn import capture as capture_module

    model = _model()
    ids, mask = _batch()
    with torch.no_grad():
        plain = model(ids, attention_mask=mask).last_hidden_state
        with ma.patch(model, {"layers.0.attention.probs": lambda p: p.zero_()}):
            zeroed = model(ids, attention_mask=mask).last_hidden_state

            async def elsewhere():
                return await asyncio.to_thread(lambda: (capture_module.capturing(),
                                                        model(ids, attention_mask=mask).last_hidden_state))

            seen, other = asyncio.run(elsewhere())
    assert (zeroed - plain).abs().max() > 1e-3
    assert seen is False and torch.equal(other, plain)
