"""int8 products on CPU: the opt-in quantized mode (loading's dtype="int8", nn/precision.py INT8), run by
`Int8Linear`, the variant of nn/linear.py's Linear swapped in for the layers nn/layers.py PRECISION_LAYERS
names (gpt-fast's quantize.py: a quantized Linear is another module, put where the Linear was).

The formula (one input row r = one token, one output channel n; O the outlier input channels below,
k outside O):

    weight  W ~ s_w[n] * Wq[n, k]      Wq int8, symmetric per output channel, 127 levels (see saturation),
                                       made once per weight
    input   X[r, k] ~ lo[r] + span[r] * Xq[r, k] / 255
                                       Xq uint8, one affine range per token, from the row's own min and
                                       max over k outside O: dynamic (nothing calibrated), and a row's
                                       result does not depend on the other rows of its batch
    output  Y[r, n] = span[r] / 255 * s_w[n] * sum_k Xq[r, k] Wq[n, k]   (int32 accumulation)
                      + lo[r] * sum_k s_w[n] Wq[n, k]                    (fp32 from here)
                      + sum_{o in O} X[r, o] W[n, o] + b[n]

FBGEMM runs the int32 sums on weights packed by `quantized::linear_prepack`, quantizing its input with one
affine scale per call, so each row is first mapped onto [0, 1], (X - lo) / span, and the call is given that
scale, 1/255 with zero point 0 (`quantized::linear_with_input_q_dq_qweight_dq_output_fp32`: the same
product as `linear_dynamic`, to the bit, without the pass that finds the scale): per-token quantization
from a per-tensor kernel. The offset term uses the quantized weights' row sums, so the only losses are the
rounding of Xn and of W. Per token, not per call, because real weights have outlier features: one call's
range is set by its largest token, and torch.ao / ONNX Runtime's per-call scale lost far more
(BENCHMARKS.md, "int8": top-10 neighbour overlap 0.88 per call, 0.94 per token, 0.966 with the smoothing
below).

Smoothing (SmoothQuant, Xiao et al. 2023, eq. 4, alpha 0.5; `smoothing`): where the layer has calibrated
input statistics (`calibrating`: max |X[:, k]| over a calibration pass in fp32), X W^T = (X / c)(W c)^T with
c[k] = sqrt(max |X[:, k]|) / sqrt(max_n |W[n, k]|) (rounded to 2^(i/4)): input channels with outliers are
scaled down and their weight columns up before both are quantized, which evens the rows' ranges. The
products (SentenceEncoder, Classifier) calibrate on loading with the built-in text of int8_calibration.txt
(ordinary English written for this purpose, unrelated to the benchmark's text).

Outlier channels (LLM.int8(), Dettmers et al. 2022, its mixed-precision decomposition, on fixed channels):
smoothing evens the channels' ranges only by half (alpha 0.5) on a log scale, so a few channels still set
most tokens' ranges. Where the layer is calibrated, the OUTLIER_CHANNELS channels with the largest
smoothed range, max |X[:, k]| / c[k] (`outlier_channels`), leave the int8 product: their weight columns are
zero in Wq (so they set no row's scale either), their inputs are zero before each token's range is taken,
and X[:, O] W[:, O]^T is added in fp32, one pass over the output per channel. Measured on the real
all-MiniLM-L6-v2 (BENCHMARKS.md, "int8"; the frozen-[CLS] cross-encoder, whose logits' rms error was 0.16
without): 2 channels gave 0.11, 4 0.090, 8 0.093, 16 0.086; top-10 neighbour overlap 0.963 without, 0.967
/ 0.973 / 0.974 / 0.974. At 1500 tokens the four products of a MiniLM layer cost 3.5% more than without
with 2 channels, 5% with 4, 10% with 8 (elementwise; a small fp32 matmul instead cost 17%).

Saturation: without AVX-512 VNNI, FBGEMM multiplies uint8 by int8 with `vpmaddubsw`, which adds the two
products of the inputs k = 2i and 2i + 1 into one saturating int16 (measured: weights 127 and 127 against
inputs 255 give 128.5, not 254). With AVX-512 VNNI (`vpdpbusd`) the sums are int32 and every row gets
127 levels. Without it, each row's scale also covers its largest same-sign adjacent pair, |W[n, 2i]| +
|W[n, 2i+1]| <= 127 s_w[n], so |Wq[n, 2i]| + |Wq[n, 2i+1]| <= 128 after rounding and 255 * 128 = 32640 <
32767: no sum saturates, whatever the input. That leaves a row about 100 of its 127 levels on the real
all-MiniLM-L6-v2 (torch's own answer, `reduce_range`, takes a bit off the inputs instead: worse there).

Taken only where it applies: a float32 CPU input, no autograd recording, not while torch.compile
traces, and a torch with FBGEMM (x86). Anything else, the layer runs Linear's product unchanged.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import warnings
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor, nn

from minialign.nn.linear import Linear, no_kernel_of_its_own, on_cpu, swap

CALIBRATION_TEXT = Path(__file__).with_name("int8_calibration.txt")
SMOOTHING_ALPHA = 0.5  # SmoothQuant's migration strength (eq. 4); measured best of 0.35 / 0.5 / 0.65 here
SMOOTHING_FLOOR = 1e-5  # SmoothQuant's clamp of both statistics and of the factor (its smooth.py)
# c rounded to 2^(i / 4): top-10 overlap 0.966 (unrounded 0.963; powers of two, exact in fp, 0.954)
SMOOTHING_STEPS = 4
OUTLIER_CHANNELS = 4  # of each layer's input channels (module docstring); 0: none
# What a quantized model's answers depend on besides its weights and calibration (`fingerprint`); a new
# revision whenever the formula or its rounding changes, so a file made under an older one is not resumed
# under this one (2: inputs mapped onto [0, 1] by a multiplication, not a division).
SCHEME = (f"int8 scheme 2: per-token inputs, SmoothQuant {SMOOTHING_ALPHA} on 2^(i/{SMOOTHING_STEPS}), "
          f"{OUTLIER_CHANNELS} fp32 outlier channels")


@cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux reports them (empty elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


@cache
def available() -> bool:
    """Whether this torch and CPU run FBGEMM's int8 products."""
    return "fbgemm" in torch.backends.quantized.supported_engines and \
        torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


# FBGEMM_ENABLE_INSTRUCTIONS values that cap FBGEMM below its VNNI kernels (fbgemm/src/Utils.cc,
# fbgemmEnvGetIsa / fbgemmInstructionSet: a cap the CPU supports is obeyed, read once per process)
FBGEMM_BELOW_VNNI = frozenset({"AVX2", "AVX512", "AVX512_256"})


@cache
def fbgemm_runs_vnni() -> bool:
    """Whether FBGEMM's int8 products here run AVX-512 VNNI (`vpdpbusd`): the CPU reports avx512_vnni and FBGEMM's
    own switch does not ask for less (FBGEMM_ENABLE_INSTRUCTIONS=AVX2: how an AVX-512 machine runs the AVX2
    kind's int8 kernels)."""
    forced = os.environ.get("FBGEMM_ENABLE_INSTRUCTIONS", "").upper()
    return "avx512_vnni" in cpu_flags() and forced not in FBGEMM_BELOW_VNNI


@cache
def pairs_saturate() -> bool:
    """Whether the weights must keep FBGEMM's int16 pair sums from saturating (module docstring, Saturation):
    wherever FBGEMM runs without VNNI, and also where ATen alone is capped below AVX-512
    (ATEN_CPU_CAPABILITY=avx2: the AVX2 kind as a whole), where FBGEMM still runs VNNI and the pair-bounded
    weights are only a little coarser, never wrong."""
    return not fbgemm_runs_vnni() or torch.backends.cpu.get_cpu_capability() != "AVX512"


def unavailable_reason() -> str:
    return (f"dtype='int8' needs torch's FBGEMM int8 kernels on an x86 CPU with AVX2; this torch has "
            f"{torch.backends.quantized.supported_engines} on a {torch.backends.cpu.get_cpu_capability()} CPU")


def quantize_weight(weight: Tensor, *, pairs: bool | None = None) -> tuple[Tensor, Tensor]:
    """(Wq int8 (N, K), s_w float64 (N,)): symmetric per output channel, 127 levels; with pairs (default:
    where they saturate, `pairs_saturate`) each row's scale also covers its largest same-sign adjacent
    pair (module docstring)."""
    w = weight.detach().float()
    reach = w.abs().amax(dim=1)
    if pairs_saturate() if pairs is None else pairs:
        even_k = torch.nn.functional.pad(w, (0, w.shape[1] % 2))  # an odd K's last input pairs with padding
        first, second = even_k[:, 0::2], even_k[:, 1::2]
        same_sign = torch.where(first * second > 0, first.abs() + second.abs(), 0.0)
        reach = torch.maximum(reach, same_sign.amax(dim=1))
    scale = (reach / 127).clamp(min=torch.finfo(torch.float32).tiny).double()
    q = torch.round(w / scale[:, None].float()).clamp(-127, 127).to(torch.int8)
    return q, scale


def smoothing(input_absmax: Tensor, weight: Tensor) -> Tensor:
    """SmoothQuant's factor c (K,) (module docstring), rounded to a grid of SMOOTHING_STEPS per octave:
    statistics that differ in their last bits (another batch size or thread count: fp32 sums in another
    order) then give the same factors, so the same quantized weights (unrounded factors made a 2-worker
    run differ from one process by 7e-3)."""
    floor = SMOOTHING_FLOOR
    activation = input_absmax.float().clamp(min=floor).pow(SMOOTHING_ALPHA)
    factor = (activation / weight.detach().float().abs().amax(dim=0).clamp(min=floor).pow(1 - SMOOTHING_ALPHA))
    steps = SMOOTHING_STEPS
    return torch.exp2(torch.round(torch.log2(factor.clamp(min=floor)) * steps) / steps)


class Int8Weight(NamedTuple):
    """A Linear layer's weight as `linear` multiplies by it."""
    packed: object  # FBGEMM's packed Wq and s_w (no bias; the outlier channels' columns zero)
    row_sums: Tensor  # (N,) sum_k s_w[n] Wq[n, k]: the offset term's
    bias: Tensor | None
    outliers: Tensor | None  # (k,) the input channels multiplied in fp32 (None: none)
    outlier_weight: Tensor | None  # (k, N) their columns of the (smoothed) weight
    input_scale: Tensor | None  # (K,) 1 / c, the smoothing (None: none)


def outlier_channels(input_absmax: Tensor, factor: Tensor, count: int) -> Tensor:
    """The `count` input channels with the largest smoothed range, max |X[:, k]| / c[k], in ascending order:
    those that would set most tokens' ranges after smoothing (module docstring)."""
    reach = input_absmax.float() / factor
    return torch.sort(torch.topk(reach, min(count, reach.numel()), sorted=False).indices).values


def pack(weight: Tensor, bias: Tensor | None, input_absmax: Tensor | None = None, *,
         outliers: int | None = None) -> Int8Weight:
    """The weight quantized (smoothed where input_absmax, the calibrated max |X[:, k]|, is given, with its
    `outliers` (default OUTLIER_CHANNELS) widest input channels multiplied in fp32) and packed for FBGEMM,
    with what the formula adds in fp32."""
    outliers = OUTLIER_CHANNELS if outliers is None else outliers
    weight = weight.detach().float()
    factor = None if input_absmax is None else smoothing(input_absmax, weight)
    smoothed = weight if factor is None else weight * factor
    channels = None if factor is None or outliers <= 0 else outlier_channels(input_absmax, factor, outliers)
    q, scale = quantize_weight(smoothed if channels is None else smoothed.index_fill(1, channels, 0.0))
    with warnings.catch_warnings():  # torch's quantized tensors carry a deprecation notice (torch.ao -> torchao)
        warnings.simplefilter("ignore")
        quantized = torch._make_per_channel_quantized_tensor(q, scale, torch.zeros_like(scale, dtype=torch.long), 0)
        engine = torch.backends.quantized.engine
        torch.backends.quantized.engine = "fbgemm"
        try:
            packed = torch.ops.quantized.linear_prepack(quantized, None)
        finally:
            torch.backends.quantized.engine = engine
    row_sums = (q.double() * scale[:, None]).sum(dim=1).float()
    return Int8Weight(packed, row_sums, None if bias is None else bias.detach().float(), channels,
                      None if channels is None else smoothed[:, channels].T.contiguous(),
                      None if factor is None else factor.reciprocal())


def unit_rows(rows: Tensor, *, in_place: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """(each row of `rows` (T, K) mapped onto [0, 1], (X - lo) * (1 / span), in `rows` itself where
    in_place; lo (T, 1); span (T, 1)). The subtraction comes first, so a row far from zero keeps its
    precision (X / span - lo / span would lose |lo| / span ulps); a row constant to fp32's precision (or
    with a span below the smallest normal float, whose reciprocal overflows) maps to 0, its Y then the
    offset term alone."""
    lo = rows.amin(dim=1, keepdim=True)  # not torch.aminmax: along a dim, 20x slower on a CPU (torch 2.13,
    span = rows.amax(dim=1, keepdim=True).sub_(lo)  # 1867 x 768: 3.0 ms against 0.15 ms for the two)
    finfo = torch.finfo(torch.float32)
    flat = span <= lo.abs().mul(finfo.eps).clamp_(min=finfo.tiny)
    inverse = span.reciprocal().masked_fill_(flat, 0.0)
    return (rows.sub_(lo) if in_place else rows.sub(lo)).mul_(inverse), lo, span


def linear(x: Tensor, weight: Int8Weight, *, scratch: bool = False) -> Tensor:
    """Y for the float32 input x (..., K) (module docstring), float32 (..., N). `scratch`: x is the caller's
    to throw away (an intermediate nobody reads again), so the smoothing and the mapping onto [0, 1] are
    done in it instead of in a copy. Past the int8 product only elementwise steps: a row's result does not
    depend on the other rows (a matmul's order of sums would vary with their count, and a last-bit change of
    one layer's output moves the next layer's rounding of that token)."""
    rows = x.reshape(-1, x.shape[-1])
    own = scratch or weight.input_scale is not None  # `rows` may be changed in place below
    if weight.input_scale is not None:
        rows = rows.mul_(weight.input_scale) if scratch else rows * weight.input_scale
    aside = None
    if weight.outliers is not None:  # only with the smoothing, so in `rows` of our own
        aside = rows.index_select(1, weight.outliers)
        rows.index_fill_(1, weight.outliers, 0.0)
    unit, lo, span = unit_rows(rows, in_place=own)
    # FBGEMM's product with the input's scale given (1/255, zero point 0) rather than found by a pass of its own
    y = torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(unit, 1 / 255, 0, weight.packed)
    if weight.bias is not None:
        torch.addcmul(weight.bias, y, span, out=y)
    else:
        y.mul_(span)
    y.addcmul_(lo, weight.row_sums)
    if aside is not None:
        for j, column in enumerate(weight.outlier_weight):
            y.addcmul_(aside[:, j:j + 1], column)
    return y.reshape(*x.shape[:-1], y.shape[-1])


def fingerprint(model: nn.Module) -> str:
    """The quantized mode's answers as a file's settings record them (so `--resume` refuses a file made
    under another scheme, calibration or weight rounding): SCHEME, the weights' levels on this CPU
    ("pair-bounded" where pairs saturate), and a digest of each quantized layer's smoothing factors and
    outlier channels: factors rounded to their grid and a ranking of channels, so runs whose statistics
    differ in their last bits (other batch sizes or thread counts) get the same digest (tested)."""
    digest = hashlib.sha256()
    for layer in quantized_layers(model):
        weight = layer.int8_weight()
        for part in (weight.input_scale, weight.outliers):
            digest.update(b"none" if part is None else part.numpy().tobytes())
    levels = "pair-bounded weights" if pairs_saturate() else "127-level weights"
    return f"{SCHEME}; {levels}; calibration {digest.hexdigest()[:16]}"


def quantized_layers(model: nn.Module) -> list[Int8Linear]:
    """The layers of `model` in the quantized mode."""
    return [m for m in model.modules() if isinstance(m, Int8Linear)]


@contextlib.contextmanager
def calibrating(model: nn.Module) -> Iterator[None]:
    """Within: the model's quantized layers are Linear layers again (their fp32 product) recording the largest
    |X[:, k]| of their inputs; on leaving, each is an Int8Linear again and keeps it as `int8_input_absmax` (its
    smoothing's statistics, replacing any earlier ones; a layer that saw no input keeps its own). Deterministic:
    the same passes give the same statistics."""
    names = [name for name, module in model.named_modules() if isinstance(module, Int8Linear)]
    kept = {name: model.get_submodule(name).int8_input_absmax for name in names}
    seen: dict[str, Tensor] = {}

    def observe(name: str):
        def record(layer, args):
            rows = args[0].detach().reshape(-1, args[0].shape[-1])
            # max |x| as max(max x, -min x): the same value without an |x| copy (12x faster at 3000 x 384)
            batch_max = torch.maximum(rows.amax(dim=0), rows.amin(dim=0).neg_()).float()
            seen[name] = batch_max if name not in seen else torch.maximum(seen[name], batch_max)
        return record

    hooks = [swap(model, name, Linear).register_forward_pre_hook(observe(name)) for name in names]
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()
        for name in names:
            swap(model, name, Int8Linear, int8_input_absmax=seen[name].cpu() if name in seen else kept[name])


class Int8Linear(Linear):
    """activation(x W^T + b) as the int8 product above (`linear`) on CPU float32 inference, on a weight quantized
    and packed once (`int8_weight`); Linear's product wherever that does not apply (module docstring).
    `int8_input_absmax`: the calibrated max |x_k| of the smoothing (`calibrating`), None: unsmoothed."""

    settings = ("int8_input_absmax",)

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 int8_input_absmax: Tensor | None = None, activation: str | None = None, **factory):
        super().__init__(in_features, out_features, bias, activation=activation, **factory)
        self.int8_input_absmax = int8_input_absmax
        self._int8: tuple | None = None  # (the weight's and bias' identity, the statistics, FBGEMM's packed form)

    def forward(self, x: Tensor, *, scratch: bool = False) -> Tensor:
        """`scratch`: the caller does not read x again, so the product may change it in place (`linear`)."""
        if not torch.is_autocast_enabled(x.device.type):
            x = x.to(self.weight.dtype)
        if self._kernel(x) != "int8":
            return super().forward(x)
        return self._activate(linear(x, self.int8_weight(), scratch=scratch))

    def _kernel(self, x: Tensor) -> str:
        """"int8" (FBGEMM, a weight quantized and packed once) where it applies, else Linear's choice."""
        w = self.weight
        if not no_kernel_of_its_own(x, w) and on_cpu(x, w) and x.dtype == torch.float32 and available():
            return "int8"
        return super()._kernel(x)

    def int8_weight(self) -> Int8Weight:
        """The weight quantized and packed for FBGEMM, with the bias and the smoothing (`pack`); made again
        whenever any of them has changed."""
        w, b, absmax = self.weight, self.bias, self.int8_input_absmax
        key = (w.data_ptr(), w._version, tuple(w.shape), None if b is None else (b.data_ptr(), b._version))
        if self._int8 is None or self._int8[0] != key or self._int8[1] is not absmax:
            self._int8 = (key, absmax, pack(w, b, absmax))
        return self._int8[2]

    @property
    def int8(self) -> bool:
        return True

    def __getstate__(self) -> dict:  # pickles and deep copies (worker processes) leave the packed weight out
        return {**super().__getstate__(), "_int8": None}


def calibration_texts() -> list[str]:
    """The built-in calibration text, one text per line (module docstring)."""
    return [line for line in CALIBRATION_TEXT.read_text(encoding="utf-8").splitlines() if line.strip()]
