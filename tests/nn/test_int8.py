"""nn/int8.py and its Linear variant, Int8Linear: the formula where every value is representable, no int16 pair sum
saturating on this CPU's kernels, one input range per token, smoothing from calibrated statistics, close
to fp32 elsewhere, fp32 wherever it does not apply."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from minialign.nn import int8
from minialign.nn.int8 import Int8Linear
from minialign.nn.linear import Linear, swap

pytestmark = pytest.mark.skipif(not int8.available(), reason="no FBGEMM int8 kernels on this torch / CPU")


def test_weights_are_symmetric_per_output_channel_with_127_levels():
    torch.manual_seed(0)
    w = torch.randn(6, 40) * torch.tensor([0.01, 0.1, 1.0, 10.0, 100.0, 0.0])[:, None]
    q, scale = int8.quantize_weight(w, pairs=False)
    assert q.dtype == torch.int8 and scale.shape == (6,)
    assert q[:5].abs().amax(dim=1).tolist() == [127] * 5 and q[5].abs().max() == 0  # each row its own scale
    torch.testing.assert_close(scale[:5].float(), w[:5].abs().amax(dim=1) / 127)
    assert ((q.float() * scale[:, None].float() - w).abs() <= scale[:, None].float() / 2 + 1e-7).all()


@pytest.mark.parametrize("columns", [40, 41])
def test_weights_for_saturating_pairs_keep_every_same_sign_adjacent_pair_within_128(columns):
    torch.manual_seed(0)
    w = torch.randn(64, columns)
    w[0, :2] = 3.0  # a pair at the row's largest value: its row's scale is set by the pair
    q, scale = int8.quantize_weight(w, pairs=True)
    padded = F.pad(q.int(), (0, columns % 2))
    first, second = padded[:, 0::2], padded[:, 1::2]
    assert ((first + second).abs() <= 128).all()
    same_sign = torch.where(first * second > 0, (first + second).abs(), 0)
    reach = torch.maximum(q.int().abs().amax(dim=1), same_sign.amax(dim=1))
    assert reach.ge(126).all()  # each row's scale is set by its value or its pair: the levels are used
    assert q[0, 0] == q[0, 1] == 64
    assert ((q.float() * scale[:, None].float() - w).abs() <= scale[:, None].float() / 2 + 1e-7).all()


def test_no_int16_pair_sum_saturates_on_this_cpu():
    """Weights whose adjacent pairs would saturate an int16 (127 + 127 against inputs 255: FBGEMM without
    VNNI returns 128.5 for 254) and inputs quantized to 255 but one: the product equals fp32's with the
    quantized weights."""
    w = torch.zeros(8, 64)
    w[0, :2], w[1, 2:4], w[2, :] = 1.0, -1.0, 1.0
    w[3, 0::2] = 1.0
    x = torch.ones(4, 64)
    x[:, -1] = 0.0  # each row: lo 0, span 1, Xq 255 everywhere else
    x[2:, :-1] = torch.rand(2, 63)
    q, scale = int8.quantize_weight(w)
    y = int8.linear(x, int8.pack(w, None))
    torch.testing.assert_close(y, F.linear(x, q.float() * scale[:, None].float()), rtol=1e-5, atol=1e-2)


SATURATION_CHECK = """
import torch, torch.nn.functional as F
from minialign.nn import int8
w = torch.zeros(8, 64); w[0, :2], w[1, 2:4], w[2, :] = 1.0, -1.0, 1.0; w[3, 0::2] = 1.0
x = torch.ones(4, 64); x[:, -1] = 0.0
q, scale = int8.quantize_weight(w)
y = int8.linear(x, int8.pack(w, None))
torch.testing.assert_close(y, F.linear(x, q.float() * scale[:, None].float()), rtol=1e-5, atol=1e-2)
print(int8.pairs_saturate())
"""


def test_no_pair_saturates_where_fbgemm_is_capped_at_avx2():
    """FBGEMM_ENABLE_INSTRUCTIONS=AVX2 makes FBGEMM run its saturating AVX2 kernels on a VNNI CPU too: the
    weights must be pair-bounded there (without it, 127 + 127 against 255 came back as 128.5)."""
    env = {**os.environ, "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2"}
    run = subprocess.run([sys.executable, "-c", SATURATION_CHECK], env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[-1] == "True"


@pytest.mark.parametrize("shape", [(5, 64), (3, 7, 64)])
def test_the_product_follows_the_formula_where_every_value_is_representable(shape):
    """Rows of integers 0..255 with 0 and 255 present (each row's lo 0, span 255: Xq = X) and integer
    weights within the pair bound reaching 127 in every row (scale 1): the int32 sums are the exact
    product; the output differs from fp32's only by the fp32 rounding of the scales' arithmetic."""
    torch.manual_seed(0)
    x = torch.randint(0, 256, shape).float()
    x.view(-1, 64)[:, 0], x.view(-1, 64)[:, 1] = 255.0, 0.0
    w = torch.randint(-63, 64, (24, 64)).float()
    w[:, 0], w[:, 1] = 127, 0
    bias = torch.randint(-100, 100, (24,)).float()
    y = int8.linear(x, int8.pack(w, bias))
    assert y.shape == (*shape[:-1], 24)
    torch.testing.assert_close(y.double(), F.linear(x.double(), w.double(), bias.double()), rtol=1e-6, atol=1e-3)


@pytest.mark.parametrize("calibrated", [False, True])
def test_each_token_has_its_own_input_range(calibrated):
    """A token beside one 1000 times larger keeps its precision, and gets the same answer alone or among
    any number of others: nothing depends on the other rows of a call (one call's range would round the
    small row to zero), also with smoothing and outlier channels (added elementwise in fp32)."""
    torch.manual_seed(0)
    w, x = torch.randn(32, 64) / 8, torch.randn(300, 64)
    x[0] *= 1000
    x[:, 5] *= 30
    bias = torch.randn(32)
    packed = int8.pack(w, bias, x.abs().amax(dim=0) if calibrated else None)
    assert (packed.outliers is not None) == calibrated
    y = int8.linear(x, packed)
    for start, stop in ((0, 1), (1, 2), (2, 3), (5, 200), (130, 300)):
        assert torch.equal(int8.linear(x[start:stop], packed), y[start:stop])
    reference = F.linear(x, w, bias)
    error = ((y - reference).norm(dim=1) / reference.norm(dim=1))
    assert (error < 3e-2).all() and error.median() < 1e-2, error


@pytest.mark.parametrize("calibrated", [False, True])
def test_a_scratch_input_gives_the_same_product_and_only_it_is_overwritten(calibrated):
    """scratch=True may work in the caller's x (the smoothing, the mapping onto [0, 1]) and answers the same
    to the bit; without it x is left as it was."""
    torch.manual_seed(0)
    w, x = torch.randn(32, 64) / 8, torch.randn(50, 64)
    x[:, 5] *= 30
    packed = int8.pack(w, torch.randn(32), x.abs().amax(dim=0) if calibrated else None)
    kept = x.clone()
    y = int8.linear(x, packed)
    assert torch.equal(x, kept)
    scratch = x.clone()
    assert torch.equal(int8.linear(scratch, packed, scratch=True), y)
    assert not torch.equal(scratch, kept)  # worked in place: the reason to offer it


def test_constant_rows_give_the_offset_term():
    """A token whose inputs are all equal (zero, small, large) has no range to quantize: it maps to 0 and
    its result is lo * sum_k s_w[n] Wq[n, k] + b (the offset term), finite; a row far from zero (7 +- 1e-3)
    maps onto [0, 1] to fp32's precision."""
    torch.manual_seed(0)
    w, bias = torch.randn(16, 32) / 8, torch.randn(16)
    x = torch.tensor([0.0, 0.5, 5.0, -1e3, 3e30])[:, None].expand(5, 32).contiguous()
    unit, lo, span = int8.unit_rows(x)
    assert torch.equal(unit, torch.zeros_like(x)) and torch.equal(lo, x[:, :1]) and not span.any()
    varied = torch.randn(4, 32) * torch.tensor([1e-3, 1.0, 1e3, 1e30])[:, None] + 7.0
    unit, lo, span = int8.unit_rows(varied)
    assert unit.min() == 0 and unit.max() <= 1 + 1e-6 and torch.equal(unit.amin(dim=1), torch.zeros(4))
    exact = (varied.double() - lo.double()) / span.double()  # the subtraction first: no cancellation
    torch.testing.assert_close(unit.double(), exact, rtol=0, atol=3e-7)
    packed = int8.pack(w, bias)
    y = int8.linear(x, packed)
    assert torch.isfinite(y).all()
    expected = x[:, :1].double() * packed.row_sums.double() + bias.double()
    torch.testing.assert_close(y.double(), expected, rtol=1e-5, atol=1e-5)


def test_smoothing_moves_an_outlier_channel_into_the_weights():
    """SmoothQuant's factor (sqrt(max|X_k|) / sqrt(max_n |W[n, k]|)) and its effect: an input channel 50x the
    others costs the other channels their precision; with the calibrated statistics the error drops."""
    torch.manual_seed(0)
    w, x = torch.randn(48, 96) / 10, torch.randn(200, 96)
    x[:, 7] *= 50
    absmax = x.abs().amax(dim=0)
    factor = int8.smoothing(absmax, w)
    exact = absmax.sqrt() / w.abs().amax(dim=0).sqrt()
    assert ((factor / exact).log2().abs() <= 0.5 / int8.SMOOTHING_STEPS + 1e-6).all()  # on the grid, nearest
    assert torch.equal(int8.smoothing(absmax * (1 + 1e-6), w), factor)  # last-bit noise: the same factors
    reference = F.linear(x, w)
    plain = (int8.linear(x, int8.pack(w, None)) - reference).norm() / reference.norm()
    smoothed = (int8.linear(x, int8.pack(w, None, absmax, outliers=0)) - reference).norm() / reference.norm()
    assert smoothed < plain / 2, (plain, smoothed)


def test_the_widest_smoothed_channels_are_multiplied_in_fp32():
    """The `outliers` channels of largest max |X_k| / c_k are picked (ascending), their columns leave the
    int8 weight, and their inputs are multiplied in fp32: an input in those channels alone comes out as
    fp32's product, and their values no longer take the other channels' precision."""
    torch.manual_seed(0)
    w, x = torch.randn(48, 96) / 10, torch.randn(200, 96)
    x[:, 70] *= 300
    x[:, 7] *= 200
    x[:, 31] *= 100
    absmax = x.abs().amax(dim=0)
    factor = int8.smoothing(absmax, w)
    assert int8.outlier_channels(absmax, factor, 2).tolist() == [7, 70]
    packed = int8.pack(w, None, absmax, outliers=3)
    assert packed.outliers.tolist() == [7, 31, 70]
    alone = torch.zeros(5, 96)
    alone[:, [7, 31, 70]] = x[:5, [7, 31, 70]]
    torch.testing.assert_close(int8.linear(alone, packed), F.linear(alone, w), rtol=1e-5, atol=1e-5)
    reference = F.linear(x, w)
    smoothed = (int8.linear(x, int8.pack(w, None, absmax, outliers=0)) - reference).norm() / reference.norm()
    split = (int8.linear(x, packed) - reference).norm() / reference.norm()
    assert split < smoothed / 2, (smoothed, split)


def test_calibrating_records_the_largest_input_per_channel_in_fp32():
    model = torch.nn.Sequential(_layer())
    a, b = torch.randn(5, 96), torch.randn(7, 96) * 3
    with torch.inference_mode():
        quantized = model(a)
        with int8.calibrating(model):
            layer = model[0]
            assert type(layer) is Linear  # the fp32 product while calibrating
            torch.testing.assert_close(model(a), F.linear(a, layer.weight, layer.bias))  # fp32 while calibrating
            model(b)
        layer = model[0]
        assert type(layer) is Int8Linear and layer.int8 and layer._kernel(a) == "int8"
        torch.testing.assert_close(layer.int8_input_absmax, torch.cat([a, b]).abs().amax(dim=0), rtol=0, atol=0)
        smoothed = model(a)  # packed anew with the statistics
    assert not torch.equal(smoothed, quantized)
    assert layer.int8_weight().input_scale is not None


def _layer(activation=None) -> Int8Linear:
    torch.manual_seed(0)
    layer = Linear(96, 48, activation=activation)
    with torch.no_grad():
        layer.bias.normal_()
    return swap(torch.nn.ModuleDict({"layer": layer}), "layer", Int8Linear)


@pytest.mark.parametrize("activation", [None, "gelu", "relu"])
def test_linear_int8_is_close_to_fp32_at_inference(activation):
    layer, x = _layer(activation), torch.randn(2, 30, 96)
    with torch.inference_mode():
        y = layer(x)
        layer = swap(torch.nn.ModuleDict({"layer": layer}), "layer", Linear)
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
