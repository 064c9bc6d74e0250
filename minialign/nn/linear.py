"""nn.Linear that runs CPU inference on oneDNN with a prepacked weight where that is faster, optionally
in a lower precision.

torch's fp32 `F.linear` on CPU calls MKL's sgemm. oneDNN, with the weight reordered once into its
blocked layout, computes the same product faster on some CPUs and shapes: it is what torch.compile's
CPU freezing pass does (`torch.ops.mkldnn._linear_pointwise` on a weight from
`torch.ops.mkldnn._reorder_linear_weight`). The sums are taken in another order, so results differ
from F.linear by fp32 rounding only (tests: parity with transformers holds at 1e-5).

Which kernel, decided once per process from the CPU (`cpu_kind`, `PACKED_ROWS`; BENCHMARKS.md,
"Machine", measures both on every run): with AVX-512 (oneDNN's avx512_core kernels) the packed
path at every shape (2.2x F.linear on the encoder's shapes); with AVX2 only for products of at most
48 rows (1.1-2.3x there, 0.87-0.95x from 128 rows on), F.linear above; on other CPUs F.linear.
A compute dtype is packed only where oneDNN has that dtype's kernels on this CPU
(`torch.ops.mkldnn._is_mkldnn_bf16_supported`: AVX-512 or AVX2-VNNI-2), never on a CPU without
them, where oneDNN would refuse the weight.

The packed path is taken only where it applies: a CPU input and weight of the same dtype (fp32 or
the compute dtype below), no autograd recording, no autocast, not while torch.compile traces (the
compiler picks its own kernels), mkldnn built in. Everything else (training, GPUs) is plain F.linear.
oneDNN builds and caches a kernel per input shape, so the rows of a packed product are rounded up
to one of a few sizes (`packed_rows`: exact up to 64, then 8 sizes per doubling, at most 12.5% more
rows) and the padding rows' outputs dropped: a process running inputs of every length keeps a bounded
set of kernels. The packed weight is made on first use and made again when the weight changes (its
version counter moves on optimizer steps and load_state_dict); it is not in the state dict and is not
pickled. It costs one more copy of each weight's memory. `Linear.prepack = False` turns it off
everywhere.

`compute_dtype` (None: the weight's own) is mixed precision for one layer, as torch.autocast does it
for all: the input and the weight are rounded to it, the product is taken in it (fp32 accumulation)
and the output is in it; the stored weight keeps its dtype. The rounded weight is made once and
kept like the packed one (packed, where oneDNN can). The model chooses which layers get it
(nn/layers.py, EncoderLayer.MIXED_PRECISION).

`int8` (False: off) is the opt-in quantized product (nn/int8.py: int8 weights per output channel, int8
inputs per token, int32 accumulation, FBGEMM), set per layer by the model (EncoderLayer.INT8) when it is
loaded with dtype="int8"; it applies to CPU float32 inference only, and its packed weight is kept and
remade like the others (also when `int8_input_absmax`, the smoothing's calibrated statistics, is set anew).

A Linear may carry the activation that follows it (the feed-forward's up projection, the MLM head's
dense layer): oneDNN then applies it in the same pass.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from minialign.nn.activations import ACTIVATIONS as FUNCTIONS
from minialign.nn import int8 as int8_kernel
from minialign.nn.activations import IN_PLACE, ONEDNN_POST_OPS

# name -> (the function, oneDNN's fused post-op as (attr, algorithm), or None where it has none): the
# names and functions of activations.py, which every other user of an activation reads too.
ACTIVATIONS: dict[str, tuple[Callable[[Tensor], Tensor], tuple[str, str] | None]] = {
    name: (function, ONEDNN_POST_OPS.get(name)) for name, function in FUNCTIONS.items()}


# CPU kind (cpu_kind) -> the most rows of a product the packed fp32 kernel runs (None: any number);
# kinds not listed run F.linear. Measured (2 threads, encoder shapes 384-3072 wide): AVX-512 2.2x at
# 8-2048 rows; AVX2 1.1-2.3x at 8-48 rows, about even at 64-96, 0.87-0.95x from 128 rows on.
PACKED_ROWS = {"AVX512": None, "AVX2": 48}
# oneDNN's probe of each half-precision dtype (also read by loading.cpu_has_native)
ONEDNN_PROBES = {torch.bfloat16: "_is_mkldnn_bf16_supported", torch.float16: "_is_mkldnn_fp16_supported"}


@cache
def cpu_kind() -> str:
    """"AVX512" where ATen and oneDNN both run AVX-512 kernels, else ATen's CPU capability ("AVX2",
    "DEFAULT", an ARM name). Either library's switch selects the AVX2 kind on an AVX-512 CPU:
    ATEN_CPU_CAPABILITY=avx2 (F.linear's side) or ONEDNN_MAX_CPU_ISA=AVX2 (oneDNN's, bf16 packing too)."""
    kind = torch.backends.cpu.get_cpu_capability()
    if kind == "AVX512" and not onednn_has(torch.bfloat16):  # oneDNN capped below avx512_core
        return "AVX2"
    return kind


@cache
def onednn_has(dtype: torch.dtype) -> bool:
    """Whether oneDNN runs `dtype` matmuls on this CPU (fp32 everywhere mkldnn is built; bf16 / fp16
    with AVX-512, AVX2-VNNI-2 or AMX, as oneDNN reports)."""
    if not torch.backends.mkldnn.is_available():
        return False
    if dtype == torch.float32:
        return True
    try:
        return bool(getattr(torch.ops.mkldnn, ONEDNN_PROBES[dtype])())
    except (AttributeError, KeyError, RuntimeError):
        return False


def packed_rows(rows: int) -> int:
    """The row count a packed product of `rows` rows runs at: exact up to 64, then rounded up to one
    of 8 sizes per doubling (multiples of 8), so the shapes oneDNN makes kernels for stay few."""
    if rows <= 64:
        return rows
    step = 1 << (rows.bit_length() - 4)  # rows in [2^k, 2^(k+1)): steps of 2^(k-3)
    return -(-rows // step) * step


class Linear(nn.Linear):
    prepack = True  # class-wide switch: False runs torch's F.linear everywhere

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, activation: str | None = None,
                 **factory):
        """activation: a name of ACTIVATIONS applied to the output (default: none)."""
        super().__init__(in_features, out_features, bias=bias, **factory)
        if activation is not None and activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose from {tuple(ACTIVATIONS)}")
        self.activation = activation
        self.compute_dtype: torch.dtype | None = None  # mixed precision (module docstring); None: the weight's
        self.int8 = False  # the quantized product (module docstring)
        self.int8_input_absmax: Tensor | None = None  # calibrated max |x_k| (nn/int8.py, smoothing); None: none
        self._int8: tuple | None = None  # (the weight's and bias' identity, the statistics, FBGEMM's packed form)
        self._packed: tuple[tuple, Tensor] | None = None  # (the weight's identity, its packed / rounded copy)

    def forward(self, x: Tensor, *, scratch: bool = False) -> Tensor:
        """`scratch`: the caller does not read x again, so the int8 product may change it in place (nn/int8.py,
        `linear`); the other kernels leave x as it is either way."""
        function, fused = ACTIVATIONS[self.activation] if self.activation else (None, None)
        if self.compute_dtype is not None or not torch.is_autocast_enabled(x.device.type):
            x = x.to(self.compute_dtype or self.weight.dtype)  # e.g. after a mixed-precision layer
        kernel = self._kernel(x)
        if kernel == "int8":
            y = int8_kernel.linear(x, self.int8_weight(), scratch=scratch)
            return self._activate(function, y) if function is not None else y
        if kernel == "packed":
            attr, algorithm = fused or ("none", "")
            rows = x.numel() // x.shape[-1]
            flat = x.reshape(rows, x.shape[-1])
            if packed_rows(rows) > rows:  # a few shapes only (module docstring); padding rows' outputs dropped
                flat = F.pad(flat, (0, 0, 0, packed_rows(rows) - rows))
            y = torch.ops.mkldnn._linear_pointwise(flat, self.inference_weight(), self.bias, attr, [], algorithm)
            y = y[:rows].reshape(*x.shape[:-1], self.out_features)
            return y if fused or function is None else self._activate(function, y)
        if self.compute_dtype is None:
            y = F.linear(x, self.weight, self.bias)
        else:
            weight = self.inference_weight() if kernel == "rounded" else self.weight.to(self.compute_dtype)
            y = F.linear(x, weight, None if self.bias is None else self.bias.to(self.compute_dtype))
        return self._activate(function, y) if function is not None else y

    def _activate(self, function: Callable[[Tensor], Tensor], y: Tensor) -> Tensor:
        """function(y), in place where autograd does not need y: the product is this call's own buffer,
        and a second one of its size is a fresh allocation (page faults) on every call."""
        if y.requires_grad or self.activation not in IN_PLACE:
            return function(y)
        return IN_PLACE[self.activation](y)

    def _kernel(self, x: Tensor) -> str:
        """"int8" (FBGEMM, a weight quantized and packed once), "packed" (oneDNN, a weight packed once),
        "rounded" (F.linear on a weight rounded to compute_dtype once) or "plain" (F.linear on the weight
        as it is) for this call."""
        w = self.weight
        if torch.compiler.is_compiling() or x.numel() == 0 or (
                torch.is_grad_enabled() and (w.requires_grad or x.requires_grad)):
            return "plain"
        if self.int8 and x.device.type == "cpu" and w.device.type == "cpu" and x.dtype == torch.float32 \
                and int8_kernel.available():
            return "int8"
        rounded = "rounded" if self.compute_dtype not in (None, w.dtype) else "plain"
        if x.device.type != "cpu" or w.device.type != "cpu":
            return rounded
        dtype = self.compute_dtype or w.dtype
        if not (self.prepack and x.dtype == dtype and not torch.is_autocast_enabled("cpu")):
            return rounded
        if dtype == torch.float32:
            if cpu_kind() not in PACKED_ROWS:
                return "plain"
            most = PACKED_ROWS[cpu_kind()]
            return "packed" if most is None or x.numel() // x.shape[-1] <= most else "plain"
        return "packed" if dtype == self.compute_dtype and onednn_has(dtype) else rounded

    def inference_weight(self) -> Tensor:
        """The weight as this layer multiplies by it outside autograd: rounded to compute_dtype and, where
        oneDNN runs it on this CPU, in oneDNN's layout; made again whenever the weight or compute_dtype
        has changed."""
        w = self.weight
        dtype = self.compute_dtype or w.dtype
        pack = w.device.type == "cpu" and self.prepack and onednn_has(dtype)
        key = (w.data_ptr(), w._version, tuple(w.shape), dtype, pack)
        if self._packed is None or self._packed[0] != key:
            with torch.no_grad():
                rounded = w.detach().to(dtype)
                self._packed = (key, torch.ops.mkldnn._reorder_linear_weight(rounded, None) if pack else rounded)
        return self._packed[1]

    def int8_weight(self):
        """The weight quantized and packed for FBGEMM, with the bias and the smoothing (nn/int8.py); made
        again whenever any of them has changed."""
        w, b, absmax = self.weight, self.bias, self.int8_input_absmax
        key = (w.data_ptr(), w._version, tuple(w.shape), None if b is None else (b.data_ptr(), b._version))
        if self._int8 is None or self._int8[0] != key or self._int8[1] is not absmax:
            self._int8 = (key, absmax, int8_kernel.pack(w, b, absmax))
        return self._int8[2]

    def __getstate__(self) -> dict:  # pickles and deep copies (worker processes) leave the packed copy out
        return {**super().__getstate__(), "_packed": None, "_int8": None}
