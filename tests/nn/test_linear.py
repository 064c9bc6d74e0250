"""minialign.nn.linear.Linear: oneDNN's prepacked fp32 kernel where it applies, F.linear elsewhere, the
same numbers up to fp32 rounding, and a packed copy that follows the weight."""

from __future__ import annotations

import copy
import os
import pickle
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import minialign as ma
from minialign.nn import linear
from minialign.nn.linear import ACTIVATIONS, Linear, MixedPrecisionLinear, swap

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without mkldnn")


def _layer(activation=None) -> Linear:
    layer = Linear(48, 80, activation=activation)
    with torch.no_grad():
        layer.bias.normal_()
    return layer


def _held(layer: Linear) -> torch.nn.Module:
    """A parent for a layer made alone, for `swap` to set a variant in its place."""
    return torch.nn.ModuleDict({"layer": layer})


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
    layer = swap(_held(layer), "layer", MixedPrecisionLinear, compute_dtype=torch.bfloat16)
    with torch.inference_mode():
        y = layer(x)
    assert y.dtype == torch.bfloat16 and layer._packed is not None
    torch.testing.assert_close(y.double(), _bf16_reference(layer, x), atol=1e-2, rtol=8e-3)  # bf16 output rounding
    assert layer.weight.dtype == torch.float32 and torch.equal(layer.weight, stored)
    assert set(layer.state_dict()) == {"weight", "bias"} and layer.state_dict()["weight"].dtype == torch.float32
    layer = swap(_held(layer), "layer", Linear)  # back to fp32: the fp32 formula again, from a new packed copy
    with torch.inference_mode():
        torch.testing.assert_close(layer(x).double(), _reference(layer, x), atol=2e-5, rtol=1e-5)


def test_compute_dtype_trains_the_fp32_weight():
    layer, x = _layer(), torch.randn(5, 48)
    layer = swap(_held(layer), "layer", MixedPrecisionLinear, compute_dtype=torch.bfloat16)
    y = layer(x)
    assert y.dtype == torch.bfloat16 and layer._packed is None
    y.float().sum().backward()
    assert layer.weight.grad.dtype == torch.float32
    expected = x.to(torch.bfloat16).float().sum(0).expand(80, 48)  # d sum(x W^T) / dW, x rounded to bf16
    torch.testing.assert_close(layer.weight.grad, expected, atol=2e-2, rtol=1e-2)


def test_a_layer_after_a_mixed_precision_one_takes_its_output():
    first, second = _layer("gelu"), Linear(80, 16)
    first = swap(_held(first), "layer", MixedPrecisionLinear, compute_dtype=torch.bfloat16)
    x = torch.randn(3, 48)
    with torch.inference_mode():
        y = second(first(x))
        assert y.dtype == torch.float32
        torch.testing.assert_close(y, second(first(x).float()), atol=0, rtol=0)


def test_compute_dtype_without_packing_is_f_linear_on_rounded_tensors(monkeypatch):
    layer, x = _layer("gelu"), torch.randn(6, 48)
    layer = swap(_held(layer), "layer", MixedPrecisionLinear, compute_dtype=torch.bfloat16)
    monkeypatch.setattr(Linear, "prepack", False)
    with torch.inference_mode():
        y = layer(x)
    bf16 = torch.bfloat16
    assert torch.equal(layer._packed[1], layer.weight.to(bf16))  # rounded once, in torch's layout
    assert torch.equal(y, F.gelu(F.linear(x.to(bf16), layer.weight.to(bf16), layer.bias.to(bf16))))


@pytest.mark.parametrize("kind, vendor, packs", [
    ("AVX512", "AuthenticAMD", True), ("AVX512", "GenuineIntel", True), ("AVX2", "GenuineIntel", True),
    ("AVX2", None, True), ("DEFAULT", "AuthenticAMD", False)])
def test_the_fp32_kernel_is_chosen_per_cpu_kind_never_per_rows(monkeypatch, kind, vendor, packs):
    """AVX-512 and AVX2, whatever the vendor: oneDNN packed at every row count; other CPUs: F.linear. Either way the
    numbers are the formula's."""
    monkeypatch.setattr(linear, "cpu_kind", lambda: kind)
    monkeypatch.setattr(linear, "cpu_vendor", lambda: vendor)
    layer = _layer("gelu")
    for rows in (1, 8, 48, 49, 65, 300, 2048):
        x = torch.randn(rows, 48)
        with torch.inference_mode():
            assert layer._kernel(x) == ("packed" if packs else "plain"), rows
            torch.testing.assert_close(layer(x).double(), _reference(layer, x), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("shape", [(384, 1536), (1536, 384), (48, 80)])
def test_a_row_gets_the_same_bits_whatever_the_number_of_rows(shape):
    """What the kernel rule exists for: the first rows of a product computed alone and with more rows below
    them, across the row counts where packed_rows pads and where another kernel would be faster, are equal bit
    for bit (MKL's sgemm, F.linear's library, is not: measured from 16 rows on at the first two shapes)."""
    if not linear.packs_fp32():
        pytest.skip(f"no packed fp32 kernel on this CPU kind ({linear.cpu_kind()})")
    torch.manual_seed(0)
    layer = Linear(*shape, activation="gelu")
    x = torch.randn(700, shape[0])
    with torch.no_grad():
        alone = layer(x[:11])
        for rows in (12, 16, 33, 49, 64, 65, 111, 128, 300, 700):
            assert torch.equal(layer(x[:rows])[:11], alone), rows


def test_packed_products_run_at_few_row_counts():
    """oneDNN makes a kernel per shape: rows are rounded up to exact counts to 64, then 8 sizes per
    doubling (at most 12.5% padding), so 1..4096 rows take 112 shapes, not 4096."""
    sizes = [linear.packed_rows(r) for r in range(1, 4097)]
    assert all(r <= s <= r * 1.125 for r, s in zip(range(1, 4097), sizes))
    assert sizes[:64] == list(range(1, 65)) and sizes == sorted(sizes)
    assert len(set(sizes)) == 64 + 8 * 6


def test_compute_dtype_is_never_packed_where_onednn_lacks_it(monkeypatch):
    """A CPU without oneDNN's bf16 kernels (AVX2 only) must not be asked for a bf16 packed weight
    (oneDNN raises "bf16 path needs the cpu support avx_ne_convert or avx512bw, avx512vl and
    avx512dq"): the layer multiplies by a rounded copy with F.linear instead."""
    monkeypatch.setattr(linear, "onednn_has", lambda dtype: dtype == torch.float32)
    layer, x = _layer("gelu"), torch.randn(9, 48)
    layer = swap(_held(layer), "layer", MixedPrecisionLinear, compute_dtype=torch.bfloat16)
    with torch.inference_mode():
        assert layer._kernel(x.to(torch.bfloat16)) == "rounded"
        y = layer(x)
    assert torch.equal(layer._packed[1], layer.weight.to(torch.bfloat16))
    torch.testing.assert_close(y.double(), _bf16_reference(layer, x), atol=1e-2, rtol=8e-3)


def test_onednn_isa_cap_selects_the_avx2_kind():
    """ONEDNN_MAX_CPU_ISA=AVX2 (how an AVX-512 machine checks the other kind's path) gives the AVX2
    kind and no bf16 packing, and a mixed-precision layer still runs."""
    code = ("import torch; from minialign.nn import linear; l = linear.Linear(16, 8); "
            "l = linear.swap(torch.nn.ModuleDict({'l': l}), 'l', linear.MixedPrecisionLinear, "
            "compute_dtype=torch.bfloat16); "
            "torch.inference_mode().__enter__(); y = l(torch.randn(3, 16)); "
            "print(linear.cpu_kind(), linear.onednn_has(torch.bfloat16), y.dtype)")
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    kind, bf16, dtype = done.stdout.split()
    assert kind in ("AVX2", "DEFAULT") and bf16 == "False" and dtype == "torch.bfloat16"


@pytest.mark.parametrize("activation", [None, "silu", "gelu_new", "relu"])
@pytest.mark.parametrize("bias", [True, False])
def test_padded_packed_products_equal_the_formula(monkeypatch, activation, bias):
    """The packed path rounds a product's rows up (here 3 x 37 = 111 rows run as 112) and drops the
    padding rows' outputs: a (B, L, C) input, fused and unfused activations, with and without bias."""
    monkeypatch.setattr(linear, "cpu_kind", lambda: "AVX512")
    layer = Linear(48, 80, bias=bias, activation=activation)
    x = torch.randn(3, 37, 48)
    assert linear.packed_rows(111) == 112
    with torch.inference_mode():
        assert layer._kernel(x) == "packed"
        y = layer(x)
    assert y.shape == (3, 37, 80) and y.is_contiguous()
    reference = F.linear(x.double(), layer.weight.double(), None if layer.bias is None else layer.bias.double())
    reference = ACTIVATIONS[activation][0](reference) if activation else reference
    torch.testing.assert_close(y.double(), reference, atol=2e-5, rtol=1e-5)



def test_rows_past_the_input_are_read_in_place_where_its_memory_goes_on(monkeypatch):
    """A packed product of 111 rows runs as 112 (packed_rows). Where the input is the leading rows of a taller
    tensor (the down projection reads the up projection's output, whose buffer has the padded row count), the extra
    row is read where it lies, whatever it holds (NaN here), instead of copying the input: the 111 outputs are the
    bits of the copied input's; an input whose memory ends with it is copied into a taller buffer."""
    monkeypatch.setattr(linear, "cpu_kind", lambda: "AVX512")
    layer = Linear(48, 80, activation="gelu")
    taller = torch.randn(112, 48)
    taller[111] = float("nan")
    view = taller[:111]
    beyond = linear.rows_beyond(view, 112)
    assert beyond.data_ptr() == taller.data_ptr() and beyond.shape == (112, 48)
    alone = view.clone()
    copied = linear.rows_beyond(alone, 112)
    assert copied.data_ptr() != alone.data_ptr() and torch.equal(copied[:111], alone) and not copied[111].any()
    with torch.inference_mode():
        assert layer._kernel(view) == "packed"
        from_view, from_copy = layer(view), layer(alone)
    assert torch.isfinite(from_view).all() and torch.equal(from_view, from_copy)


def test_row_products_give_each_element_the_same_bits_whatever_the_shapes():
    """linear.row_products(x, y) = x @ y^T, each element independent of how many rows either side has (what MaxSim
    needs: a query's scores whatever the other queries and documents); one row of y included."""
    torch.manual_seed(0)
    x, y = torch.randn(150, 64), torch.randn(300, 64)
    with torch.inference_mode():
        full = linear.row_products(x, y)
        torch.testing.assert_close(full, x @ y.T, atol=1e-4, rtol=1e-5)
        for n in (1, 2, 7, 64, 65, 299):
            assert torch.equal(linear.row_products(x, y[:n]), full[:, :n]), n
        for m in (1, 3, 64, 65, 149):
            assert torch.equal(linear.row_products(x[:m], y), full[:m]), m
        for rows, columns in ((slice(3, 50), slice(17, 99)), (slice(77, 150), slice(150, 299)),
                              (slice(31, 32), slice(100, 101)), (slice(0, 150), slice(63, 129))):
            # wherever a row or column sits in the product (maxsim_pairwise keeps diagonal blocks of shared ones)
            assert torch.equal(linear.row_products(x[rows], y[columns]), full[rows, columns]), (rows, columns)
