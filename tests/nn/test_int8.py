"""nn/int8.py and Linear's int8 product: the formula exactly where every value is representable (no int16
saturation on this CPU's kernels), close to fp32 elsewhere, fp32 wherever it does not apply."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from minialign.nn import int8
from minialign.nn.linear import Linear

pytestmark = pytest.mark.skipif(not int8.available(), reason="no FBGEMM int8 kernels on this torch / CPU")


def test_weight_levels_follow_the_cpu():
    vnni = "avx512_vnni" in int8.cpu_flags() and torch.backends.cpu.get_cpu_capability() == "AVX512"
    assert int8.weight_levels() == (127 if vnni else 63)


def test_weights_are_symmetric_per_output_channel():
    torch.manual_seed(0)
    w = torch.randn(6, 40) * torch.tensor([0.01, 0.1, 1.0, 10.0, 100.0, 0.0])[:, None]
    q, scale = int8.quantize_weight(w)
    levels = int8.weight_levels()
    assert q.dtype == torch.int8 and scale.shape == (6,)
    assert q[:5].abs().amax(dim=1).tolist() == [levels] * 5 and q[5].abs().max() == 0  # each row its own scale
    torch.testing.assert_close(scale[:5].float(), w[:5].abs().amax(dim=1) / levels)
    assert ((q.float() * scale[:, None].float() - w).abs() <= scale[:, None].float() / 2 + 1e-7).all()


@pytest.mark.parametrize("shape", [(5, 64), (3, 7, 64)])
def test_the_product_is_exact_where_every_value_is_representable(shape):
    """Inputs 0..255 with 0 and 255 present (scale 1, zero point 0) and integer weights reaching the
    levels in every row (scale 1): the int32 sums are the exact product, including the all-255 x all-max
    rows that would saturate an int16 pair sum with 127 levels on a CPU without VNNI."""
    torch.manual_seed(0)
    levels = int8.weight_levels()
    x = torch.randint(0, 256, shape).float()
    x.view(-1, 64)[0] = 255.0
    x.view(-1, 64)[1, 0] = 0.0
    w = torch.randint(-levels, levels + 1, (24, 64)).float()
    w[:, 0] = levels
    w[0], w[1] = levels, -levels
    bias = torch.randint(-100, 100, (24,)).float()
    y = int8.linear(x, int8.pack(w, bias))
    assert y.shape == (*shape[:-1], 24)
    assert torch.equal(y.double(), F.linear(x.double(), w.double(), bias.double()).float().double())


def _layer(activation=None) -> Linear:
    torch.manual_seed(0)
    layer = Linear(96, 48, activation=activation)
    with torch.no_grad():
        layer.bias.normal_()
    layer.int8 = True
    return layer


@pytest.mark.parametrize("activation", [None, "gelu", "relu"])
def test_linear_int8_is_close_to_fp32_at_inference(activation):
    layer, x = _layer(activation), torch.randn(2, 30, 96)
    with torch.inference_mode():
        y = layer(x)
        layer.int8 = False
        reference = layer(x)
    assert layer._kernel(x) != "int8"
    error = (y - reference).norm() / reference.norm()
    assert 0 < error < 3e-2


def test_linear_int8_does_not_apply_under_autograd_or_to_other_dtypes():
    layer, x = _layer(), torch.randn(4, 96)
    y = layer(x)  # autograd records: fp32
    assert torch.equal(y.detach(), F.linear(x, layer.weight, layer.bias))
    with torch.inference_mode():
        assert layer._kernel(x) == "int8"
        assert layer._kernel(x.double()) != "int8"
        assert layer._kernel(x[:0]) != "int8"


def test_the_packed_int8_weight_follows_weight_and_bias_changes():
    layer, x = _layer(), torch.randn(8, 96)
    with torch.inference_mode():
        first = layer(x)
        assert layer(x).equal(first)  # the same input, the same answer
        packed = layer.int8_weight()
        assert layer.int8_weight() is packed
    with torch.no_grad():
        layer.bias.add_(1.0)
    with torch.inference_mode():
        torch.testing.assert_close(layer(x), first + 1.0, atol=1e-5, rtol=0)
    with torch.no_grad():
        layer.weight.mul_(2.0)
    with torch.inference_mode():
        assert layer.int8_weight() is not packed
        torch.testing.assert_close(layer(x) - layer.bias, 2 * (first + 1.0 - layer.bias), atol=1e-4, rtol=0)


def test_pickled_layers_leave_the_packed_int8_weight_out():
    import pickle

    layer, x = _layer(), torch.randn(3, 96)
    with torch.inference_mode():
        y = layer(x)
    copy = pickle.loads(pickle.dumps(layer))
    assert copy._int8 is None and copy.int8
    with torch.inference_mode():
        assert copy(x).equal(y)
