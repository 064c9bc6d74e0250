"""The feed-forward's inference path: activations applied in place on the product, and rows run in slices
of a bounded intermediate, with the same numbers as the plain path and the capture still whole."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import minialign as ma
from minialign.nn.activations import ACTIVATIONS, ELEMENTWISE, IN_PLACE
from minialign.nn.capture import capture
from minialign.nn.config import Config
from minialign.nn.layers import FeedForward
from minialign.nn.linear import Linear


@pytest.mark.parametrize("name", sorted(IN_PLACE))
def test_in_place_activations_equal_their_functions_bit_for_bit(name):
    assert name in ELEMENTWISE
    x = torch.randn(64, 96) * 4
    y = x.clone()
    assert IN_PLACE[name](y) is not None
    assert torch.equal(y, ACTIVATIONS[name](x))


@pytest.mark.parametrize("name", sorted(IN_PLACE))
def test_linear_activates_in_place_at_inference_and_not_under_autograd(name, monkeypatch):
    monkeypatch.setattr(Linear, "prepack", False)  # F.linear, then the activation after the product
    layer = Linear(32, 48, activation=name)
    x = torch.randn(5, 32)
    expected = ACTIVATIONS[name](F.linear(x, layer.weight, layer.bias))
    with torch.inference_mode():
        assert torch.equal(layer(x), expected)
    y = layer(x.requires_grad_())  # autograd needs the product: the out-of-place function
    y.sum().backward()
    assert torch.equal(y.detach(), expected) and layer.weight.grad is not None


def _feed_forward() -> FeedForward:
    torch.manual_seed(0)
    ffn = FeedForward(Config(vocab_size=50, hidden_size=32, intermediate_size=128, num_heads=4, num_layers=1)).eval()
    ffn.SLICE_BYTES = 64 * 128 * 4  # 64 rows a slice at fp32
    return ffn


@pytest.mark.parametrize("rows", [1, 64, 65, 200, 333])
def test_sliced_rows_equal_the_whole_product(rows):
    ffn, x = _feed_forward(), torch.randn(1, rows, 32)
    assert ffn.slice_rows(x) == 64
    with torch.no_grad():
        whole = ffn.down(ffn.up(x))
    with torch.inference_mode():
        sliced = ffn(x)
    assert sliced.shape == (1, rows, 32)
    torch.testing.assert_close(sliced, whole, rtol=0, atol=1e-6)


def test_slices_scale_with_the_intermediate_width_and_dtype():
    ffn = FeedForward(Config.from_name("roberta-base"))
    assert ffn.slice_rows(torch.zeros(1, 1, 768)) == 1024  # 12 MiB of 3072 fp32 values
    assert ffn.slice_rows(torch.zeros(1, 1, 768, dtype=torch.bfloat16)) == 2048
    ffn.SLICE_BYTES = 1
    assert ffn.slice_rows(torch.zeros(1, 1, 768)) == 64  # never below 64 rows


def test_capture_records_the_whole_intermediate():
    ffn, x = _feed_forward(), torch.randn(1, 200, 32)
    with torch.inference_mode():
        with capture(ffn) as seen:
            out = ffn(x)
        (intermediate,) = [t for name, t in seen.tensors.items() if "intermediate" in name]
        assert intermediate.shape == (1, 200, 128)
        torch.testing.assert_close(out, ffn.down(intermediate), rtol=0, atol=1e-6)


def test_an_encoder_with_small_slices_gives_the_same_states(monkeypatch):
    torch.manual_seed(0)
    model = ma.Encoder(Config(hidden_size=32, intermediate_size=64, num_heads=4, num_layers=2,
                              vocab_size=100, max_position_embeddings=300)).eval()
    ids = torch.randint(5, 100, (3, 250))
    with torch.inference_mode():
        default = model(ids).last_hidden_state
        monkeypatch.setattr(FeedForward, "SLICE_BYTES", 64 * 64 * 4)
        sliced = model(ids).last_hidden_state
    torch.testing.assert_close(sliced, default, rtol=0, atol=1e-5)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_rows_are_sliced_on_the_cpu_alone(device):
    """The slices are a measure against the CPU's allocator; elsewhere (a GPU; here the meta device, which no
    allocator backs) the rows run in one product: one call of `rows` instead of one per slice."""
    ffn = _feed_forward().to(device)
    calls = []  # the rows of each call (its product is not what is checked: zeros of the output's shape)
    ffn.rows = lambda x: calls.append(x.shape[0]) or x.new_zeros(*x.shape[:-1], 32)
    with torch.inference_mode():
        out = ffn(torch.randn(1, 200, 32, device=device))
    assert out.shape == (1, 200, 32)
    assert calls == ([64, 64, 64, 8] if device == "cpu" else [1])  # the 200 rows as (1, 200, 32) off the CPU
