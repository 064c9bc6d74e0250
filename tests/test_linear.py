"""minialign.linear.Linear: oneDNN's prepacked fp32 kernel where it applies, F.linear elsewhere, the
same numbers up to fp32 rounding, and a packed copy that follows the weight."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
import torch.nn.functional as F

import minialign as ma
from minialign.linear import ACTIVATIONS, Linear

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without mkldnn")


def _layer(activation=None) -> Linear:
    layer = Linear(48, 80, activation=activation)
    with torch.no_grad():
        layer.bias.normal_()
    return layer


def _reference(layer: Linear, x: torch.Tensor) -> torch.Tensor:
    y = F.linear(x.double(), layer.weight.double(), layer.bias.double())
    return ACTIVATIONS[layer.activation][0](y) if layer.activation else y


@pytest.mark.parametrize("activation", [None, *ACTIVATIONS])
@pytest.mark.parametrize("shape", [(7, 48), (3, 5, 48)])
def test_packed_inference_equals_the_formula(activation, shape):
    layer, x = _layer(activation), torch.randn(shape)
    with torch.inference_mode():
        y = layer(x)
    assert layer._packed is not None  # the oneDNN path ran
    assert y.shape == (*shape[:-1], 80)
    torch.testing.assert_close(y.double(), _reference(layer, x), atol=2e-5, rtol=1e-5)


def test_training_and_other_dtypes_use_f_linear():
    layer, x = _layer("gelu"), torch.randn(4, 48)
    y = layer(x)  # autograd records: no packed weight, gradients flow
    y.sum().backward()
    assert layer._packed is None and layer.weight.grad is not None
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        layer(x)
    with torch.no_grad():
        layer.double()(x.double())
    assert layer._packed is None


def test_the_packed_weight_follows_weight_changes():
    layer, x = _layer(), torch.randn(4, 48)
    with torch.no_grad():
        before = layer(x)
        layer.weight.mul_(2)  # an optimizer step changes the weight in place
        torch.testing.assert_close(layer(x), _reference(layer, x).float(), atol=2e-5, rtol=1e-5)
        layer.load_state_dict({"weight": torch.zeros(80, 48), "bias": torch.ones(80)})
        assert torch.equal(layer(x), torch.ones(4, 80))
    assert not torch.allclose(before, torch.ones(4, 80))


def test_switch_off_gives_f_linear_exactly(monkeypatch):
    layer, x = _layer("relu"), torch.randn(6, 48)
    monkeypatch.setattr(Linear, "prepack", False)
    with torch.inference_mode():
        y = layer(x)
    assert layer._packed is None
    assert torch.equal(y, F.relu(F.linear(x, layer.weight, layer.bias)))


def test_pickle_and_deepcopy_leave_the_packed_copy_out():
    layer, x = _layer(), torch.randn(2, 48)
    with torch.inference_mode():
        y = layer(x)
    for clone in (pickle.loads(pickle.dumps(layer)), copy.deepcopy(layer)):
        assert clone._packed is None
        with torch.inference_mode():
            assert torch.equal(clone(x), y)


def test_unknown_activation_is_named():
    with pytest.raises(ValueError, match="unknown activation 'swiglu'"):
        Linear(4, 4, activation="swiglu")


def test_encoder_with_and_without_packing_agree(monkeypatch):
    config = ma.Config(vocab_size=97, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=40)
    model = ma.Encoder(config).eval()
    ids = torch.randint(1, 97, (3, 11))
    with torch.inference_mode():
        packed = model(ids).last_hidden_state
        monkeypatch.setattr(Linear, "prepack", False)
        plain = model(ids).last_hidden_state
    torch.testing.assert_close(packed, plain, atol=1e-5, rtol=1e-5)


def _bf16_reference(layer: Linear, x: torch.Tensor) -> torch.Tensor:
    """Mixed precision's formula: input and weight rounded to bf16, products summed in fp64 here."""
    rounded = lambda t: t.to(torch.bfloat16).double()  # noqa: E731
    y = F.linear(rounded(x), rounded(layer.weight), layer.bias.double())
    return ACTIVATIONS[layer.activation][0](y) if layer.activation else y


@pytest.mark.parametrize("activation", [None, "gelu"])
def test_compute_dtype_rounds_input_and_weight_and_keeps_the_weight(activation):
    layer, x = _layer(activation), torch.randn(9, 48)
    stored = layer.weight.detach().clone()
    layer.compute_dtype = torch.bfloat16
    with torch.inference_mode():
        y = layer(x)
    assert y.dtype == torch.bfloat16 and layer._packed is not None
    torch.testing.assert_close(y.double(), _bf16_reference(layer, x), atol=1e-2, rtol=8e-3)  # bf16 output rounding
    assert layer.weight.dtype == torch.float32 and torch.equal(layer.weight, stored)
    assert set(layer.state_dict()) == {"weight", "bias"} and layer.state_dict()["weight"].dtype == torch.float32
    layer.compute_dtype = None  # back to fp32: the fp32 formula again, from a new packed copy
    with torch.inference_mode():
        torch.testing.assert_close(layer(x).double(), _reference(layer, x), atol=2e-5, rtol=1e-5)


def test_compute_dtype_trains_the_fp32_weight():
    layer, x = _layer(), torch.randn(5, 48)
    layer.compute_dtype = torch.bfloat16
    y = layer(x)
    assert y.dtype == torch.bfloat16 and layer._packed is None
    y.float().sum().backward()
    assert layer.weight.grad.dtype == torch.float32
    expected = x.to(torch.bfloat16).float().sum(0).expand(80, 48)  # d sum(x W^T) / dW, x rounded to bf16
    torch.testing.assert_close(layer.weight.grad, expected, atol=2e-2, rtol=1e-2)


def test_a_layer_after_a_mixed_precision_one_takes_its_output():
    first, second = _layer("gelu"), Linear(80, 16)
    first.compute_dtype = torch.bfloat16
    x = torch.randn(3, 48)
    with torch.inference_mode():
        y = second(first(x))
        assert y.dtype == torch.float32
        torch.testing.assert_close(y, second(first(x).float()), atol=0, rtol=0)


def test_compute_dtype_without_packing_is_f_linear_on_rounded_tensors(monkeypatch):
    layer, x = _layer("gelu"), torch.randn(6, 48)
    layer.compute_dtype = torch.bfloat16
    monkeypatch.setattr(Linear, "prepack", False)
    with torch.inference_mode():
        y = layer(x)
    bf16 = torch.bfloat16
    assert layer._packed is None
    assert torch.equal(y, F.gelu(F.linear(x.to(bf16), layer.weight.to(bf16), layer.bias.to(bf16))))
