"""Per-head writes: `layers.{i}.attention.head_outputs` (B, H, L, C), each head's context through its columns of the
output projection, recorded on request only; their sum over heads plus the projection's bias is the attention's
output, and a patch of one head's write is what the output is then made of."""

from __future__ import annotations

import pytest
import torch

import minialign as ma
from family_builders import FAMILIES, random_encoder, supported

ARCHS = [name for name in FAMILIES if supported(name)]


def _batch():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 250, (2, 7), generator=g)
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    return ids, mask


@pytest.mark.parametrize("arch", ARCHS)
def test_the_heads_writes_sum_to_the_attention_output(arch):
    model = random_encoder(arch, "sdpa")
    ids, mask = _batch()
    names = ["layers.1.attention.head_outputs", "layers.1.attention.output", "layers.1.attention.context"]
    with torch.no_grad(), ma.capture(model, names=names) as cap:
        out = model(ids, mask).last_hidden_state
    writes, output = cap["layers.1.attention.head_outputs"], cap["layers.1.attention.output"]
    attention = model.layers[1].attention
    assert writes.shape == (2, attention.num_heads, 7, model.config.hidden_size)
    bias = attention.output.bias if attention.output.bias is not None else 0
    torch.testing.assert_close(writes.sum(1) + bias, output, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        assert torch.equal(out, model(ids, mask).last_hidden_state)  # recording them changes no result


def test_a_capture_of_every_name_leaves_them_out():
    model = random_encoder("bert")
    ids, mask = _batch()
    with torch.no_grad(), ma.capture(model) as cap:
        model(ids, mask)
    assert "layers.1.attention.output" in cap.tensors
    assert not any(name.endswith("head_outputs") for name in cap.tensors)
    with torch.no_grad(), ma.capture(model, names=["layers.*.attention.head_outputs"]) as cap:
        model(ids, mask)
    assert sorted(cap.tensors) == [f"layers.{i}.attention.head_outputs" for i in range(model.config.num_layers)]


@pytest.mark.parametrize("arch", ["bert", "modernbert", "eurobert"])
def test_a_patched_write_is_what_the_output_is_made_of(arch):
    """Zeroing head 2's write equals zeroing its context (ablate_heads), to rounding."""
    model = random_encoder(arch, "sdpa")
    ids, mask = _batch()

    def without_head_2(writes):
        writes = writes.clone()
        writes[:, 2] = 0
        return writes

    with torch.no_grad():
        with ma.patch(model, {"layers.1.attention.head_outputs": without_head_2}):
            patched = model(ids, mask).last_hidden_state
        with ma.patch(model, {"layers.1.attention.context": ma.ablate_heads(2)}):
            expected = model(ids, mask).last_hidden_state
        plain = model(ids, mask).last_hidden_state
    torch.testing.assert_close(patched, expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(patched, plain, atol=1e-4)
