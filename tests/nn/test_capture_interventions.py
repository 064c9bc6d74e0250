"""Capture and patch together, on every family and backend where they apply: the recorded probabilities are on
the output's graph under capture(detach=False); a mean ablation reads its layout from the activation's name
(each head its own mean) and averages over the real tokens only; a capture opens inside a patch as a patch
inside a capture, with the same records and outputs."""

import pytest
import torch
from family_builders import FAMILIES, family_params, random_encoder, supported

import minialign as ma

TOL = dict(atol=1e-5, rtol=0)
BACKENDS = ["eager", "sdpa", pytest.param("flex", marks=pytest.mark.slow)]
ARCHS = [name for name in FAMILIES if supported(name)]


def _batch(pad_id: int = 0):
    torch.manual_seed(1)
    ids = torch.randint(5, 300, (3, 9))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    mask[2, 3:] = 0
    ids[mask == 0] = pad_id
    return ids, mask


@pytest.mark.parametrize("backend", BACKENDS)
def test_recorded_probabilities_get_the_outputs_gradient(backend):
    """Under capture(detach=False) the output is eager's formula from the recorded probabilities (probs @ v), so a
    loss on the output fills their gradient; the probabilities' gradient is then d loss / d probs of that formula."""
    model = random_encoder("bert", backend)
    ids, mask = _batch()
    with torch.no_grad():
        plain = model(ids, attention_mask=mask).last_hidden_state
        with ma.capture(model) as detached:
            kept = model(ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    if backend != "flex":  # (flex on a CPU runs the batch packed, its pad rows zero: the capture runs it padded)
        assert torch.equal(kept, plain)  # a detached capture keeps the backend's own output, bit for bit
    with ma.capture(model, detach=False) as cap:
        out = model(ids, attention_mask=mask)
    probs, v = cap["layers.2.attention.probs"], cap["layers.2.attention.v"]
    probs.retain_grad()
    context = cap["layers.2.attention.context"]
    context.retain_grad()
    out.last_hidden_state.sum().backward()
    assert probs.grad is not None and probs.grad.abs().sum() > 0
    # the chain rule through context = probs @ v: d/d probs = d/d context @ v^T
    torch.testing.assert_close(probs.grad, context.grad @ v.detach().transpose(-2, -1), **TOL)
    torch.testing.assert_close(out.last_hidden_state.detach()[real], plain[real], **TOL)
    for name in detached:  # the same records, on the graph
        torch.testing.assert_close(cap[name].detach(), detached[name], **TOL)


@pytest.mark.parametrize("arch", ARCHS)
def test_probabilities_on_the_graph_in_every_family(arch):
    model = random_encoder(arch, "sdpa", num_layers=2)
    ids, mask = _batch()
    with ma.capture(model, names=["layers.1.attention.probs"], detach=False) as cap:
        out = model(ids, attention_mask=mask)
    cap["layers.1.attention.probs"].retain_grad()
    out.last_hidden_state.sum().backward()
    assert cap["layers.1.attention.probs"].grad.abs().sum() > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_mean_ablation_of_every_head_takes_each_heads_own_mean(backend):
    model = random_encoder("bert", backend)
    ids, mask = _batch()
    real = mask.bool()
    with torch.no_grad():
        with ma.capture(model, names=["layers.1.attention.*"]) as clean:
            model(ids, attention_mask=mask)
        with ma.capture(model, names=["layers.1.attention.*"]) as cap, \
                ma.patch(model, {"layers.1.attention.context": ma.ablate_mean(),
                                 "layers.1.attention.probs": ma.ablate_mean()}):
            model(ids, attention_mask=mask)
    probs = clean["layers.1.attention.probs"]  # (B, H, L, L): patched first, so the context reads the mean map
    mean_probs = probs.transpose(1, 2)[real].mean(0)  # (H, L): each head's, over the batch and the real queries
    torch.testing.assert_close(cap["layers.1.attention.probs"], mean_probs[None, :, None].expand_as(probs), **TOL)
    v = clean["layers.1.attention.v"]
    context = mean_probs[None, :, None] @ v  # (B, H, 1, D) -> the mean of what the mean map makes
    context = context.expand(-1, -1, v.size(2), -1)  # every query reads the same map
    expected = context.transpose(1, 2)[real].mean(0)  # (H, D)
    torch.testing.assert_close(cap["layers.1.attention.context"], expected[None, :, None].expand_as(context), **TOL)
    assert (expected[0] - expected[1]).abs().max() > 1e-4  # one mean per head, not one for all


def test_mean_ablation_reads_the_names_layout():
    model = random_encoder("bert")
    ids, mask = _batch()
    real = mask.bool()
    with torch.no_grad():
        with ma.capture(model, names=["layers.0.output", "pooler.output"]) as clean:
            model(ids, attention_mask=mask)
        with ma.capture(model, names=["layers.0.output"]) as cap, \
                ma.patch(model, {"layers.0.output": ma.ablate_mean()}):
            model(ids, attention_mask=mask)
        with pytest.raises(ValueError, match=r"layers\.0\.output is \(B, L, \.\.\.\): it has no heads"):
            with ma.patch(model, {"layers.0.output": ma.ablate_mean(1)}):
                model(ids, attention_mask=mask)
        with ma.capture(model, names=["pooler.output"]) as pooled, ma.patch(model, {"pooler.output": ma.ablate_mean()}):
            model(ids, attention_mask=mask)
    state = clean["layers.0.output"]
    torch.testing.assert_close(cap["layers.0.output"], state[real].mean(0).expand_as(state), **TOL)
    torch.testing.assert_close(pooled["pooler.output"], clean["pooler.output"].mean(0).expand(3, -1), **TOL)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", ["embeddings.word", "layers.0.output", "layers.1.attention.v"])
def test_mean_ablation_leaves_the_padding_out(arch, name):
    """Only the pad ids change: the real tokens' outputs under a mean ablation do not move."""
    model = random_encoder(arch, "sdpa", num_layers=2)
    outputs = []
    for pad_id in (0, 7):
        ids, mask = _batch(pad_id)
        with torch.no_grad(), ma.patch(model, {name: ma.ablate_mean()}):
            outputs.append(model(ids, attention_mask=mask).last_hidden_state[mask.bool()])
    torch.testing.assert_close(outputs[0], outputs[1], atol=1e-6, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_capture_opens_inside_a_patch(backend):
    model = random_encoder("bert", backend)
    ids, mask = _batch()
    patches = {"layers.1.attention.context": ma.ablate_heads(0, 2), "layers.0.attention.probs": ma.ablate_mean()}
    with torch.no_grad():
        with ma.capture(model) as outer_capture, ma.patch(model, patches):
            first = model(ids, attention_mask=mask).last_hidden_state
        with ma.patch(model, patches), ma.capture(model) as inner_capture:
            second = model(ids, attention_mask=mask).last_hidden_state
        with ma.patch(model, patches):
            patched = model(ids, attention_mask=mask).last_hidden_state
            with ma.capture(model, names=["layers.1.attention.context"]):
                model(ids, attention_mask=mask)
            after = model(ids, attention_mask=mask).last_hidden_state  # the patch goes on once the capture closes
    assert torch.equal(first, second) and torch.equal(patched, first) and torch.equal(after, first)
    assert list(outer_capture) == list(inner_capture)
    for name in outer_capture:
        assert torch.equal(outer_capture[name], inner_capture[name]), name
    assert inner_capture["layers.1.attention.context"][:, [0, 2]].abs().max() == 0
    with pytest.raises(ValueError, match="named 'layers.9.output'"):  # each session checks the names it was given
        with torch.no_grad(), ma.patch(model, patches), ma.capture(model, names=["layers.9.output"]):
            model(ids, attention_mask=mask)
    with pytest.raises(RuntimeError, match="a capture is already open"):
        with ma.capture(model), ma.capture(model):
            pass
