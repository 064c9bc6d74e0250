"""nn.Linear and its variants for CPU inference: each variant one kernel, a module set in a Linear's place where a
model's precision asks for it (`swap`; nn/precision.py applies a precision, nn/layers.py PRECISION_LAYERS declares
which layers take which variant), as gpt-fast's quantize.py puts a WeightOnlyInt8Linear where a Linear was
(`setattr(parent, name, ...)`): a kernel is a module's class, not a flag read inside every forward.

  Linear                the product in the weights' dtype: F.linear, or oneDNN on a prepacked fp32 weight
  MixedPrecisionLinear  the product in a compute dtype (bf16): on a rounded copy of the weight, packed where
                        oneDNN has that dtype
  Int8Linear            the quantized product (nn/int8.py, where it is defined with its formula)

Each variant falls back to the plain product wherever its kernel does not apply, by the rules below, so a
model in any precision trains, compiles and runs on a GPU as a plain one does.

torch's fp32 `F.linear` on CPU calls MKL's sgemm. oneDNN, with the weight reordered once into its
blocked layout, computes the same product faster on some CPUs and shapes: it is what torch.compile's
CPU freezing pass does (`torch.ops.mkldnn._linear_pointwise` on a weight from
`torch.ops.mkldnn._reorder_linear_weight`). The sums are taken in another order, so results differ
from F.linear by fp32 rounding only (tests: parity with transformers holds at 1e-5).

Which kernel, decided once per process from the CPU (`cpu_kind`, `PACKED_KINDS`; BENCHMARKS.md, "Linear kernels (fp32)",
measures both on every run): the packed path for every fp32 product with AVX-512 (oneDNN's avx512_core kernels)
or AVX2, F.linear on other CPUs. Never by the product's row count, although that would be faster on some CPUs
(F.linear from about 64 rows on Intel AVX-512 and 48 on AVX2): MKL's sgemm gives a row other bits depending on
how many rows the product has (measured: 384 -> 1536 and 1536 -> 384 from 16 rows, on AVX-512 and AVX2), so a
text's result would change with what it is batched with; oneDNN's packed kernel gives each row the same bits
at every row count (tests/nn/test_linear.py). The price, measured: packed is 0.83-0.92x F.linear from 512 rows
on AVX2 and 12-17% slower end to end on an Intel Xeon; it is 1.1-2.3x at small products everywhere and 2.2x at
every shape on AMD AVX-512 (MKL's sgemm does not run its AVX-512 kernels there).
A compute dtype is packed only where oneDNN has that dtype's kernels on this CPU
(`torch.ops.mkldnn._is_mkldnn_bf16_supported`: AVX-512 or AVX2-VNNI-2), never on a CPU without
them, where oneDNN would refuse the weight.

The packed path is taken only where it applies: a CPU input and weight of the same dtype (fp32 or
the compute dtype below), no autograd recording, no autocast, not while torch.compile traces (the
compiler picks its own kernels), mkldnn built in. Everything else (training, GPUs) is plain F.linear.
oneDNN builds and caches a kernel per input shape, so the rows of a packed product are rounded up
to one of a few sizes (`packed_rows`: exact up to 64, then 8 sizes per doubling, at most 12.5% more
rows) and the padding rows' outputs dropped: a process running inputs of every length keeps a bounded
set of kernels. The padding rows are read where the input's memory goes on past it (the down projection reads
the up projection's padded output), else the input is copied into a taller buffer (`rows_beyond`: that copy of
the feed-forward's widest input, a fresh buffer each call, was 8% of all-MiniLM-L6-v2's forward on an AMD EPYC). The packed weight is made on first use and made again when the weight changes (its
version counter moves on optimizer steps and load_state_dict); it is not in the state dict and is not
pickled. It costs one more copy of each weight's memory. `Linear.prepack = False` turns it off
everywhere.

MixedPrecisionLinear's `compute_dtype` is mixed precision for one layer, as torch.autocast does it
for all: the input and the weight are rounded to it, the product is taken in it (fp32 accumulation)
and the output is in it; the stored weight keeps its dtype. The rounded weight is made once and
kept like the packed one (packed, where oneDNN can).

A swap sets a new module of the variant in the layer's place in its parent (`swap(owner, "ffn.down", variant)`),
made over the layer's own Parameter objects: parameter names, the state dict, parameter identity (what an
optimizer holds) and the hooks registered on the layer (LoRA's, a capture's) are unchanged; what the old
module kept for its own kernel (packed weights, settings) goes with it. A reference to the old module taken
before the swap still reaches the old module: look the layer up again (`get_submodule`).

A Linear may carry the activation that follows it (the feed-forward's up projection, the MLM head's
dense layer): oneDNN then applies it in the same pass.

Every variant takes `scratch=` (the float ones ignore it): whether the product may overwrite its input, which
the int8 product uses to skip a copy. It stays an argument of the call, because only the caller knows whether
it reads the tensor again, and capture.unobserved whether anything else can (a capture, a hook); every caller
that hands over an intermediate of its own passes it (SelfAttention and DeBERTa's attention for the output
projection, FeedForward and ModernBERT's GeGLU for the down projection). The results are the same either way.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from minialign.nn.activations import ACTIVATIONS as FUNCTIONS
from minialign.nn.activations import IN_PLACE, ONEDNN_POST_OPS

# name -> (the function, oneDNN's fused post-op as (attr, algorithm), or None where it has none): the
# names and functions of activations.py, which every other user of an activation reads too.
ACTIVATIONS: dict[str, tuple[Callable[[Tensor], Tensor], tuple[str, str] | None]] = {
    name: (function, ONEDNN_POST_OPS.get(name)) for name, function in FUNCTIONS.items()}


# The CPU kinds (cpu_kind) whose fp32 products run on the packed kernel, at every row count (module docstring:
# why never by rows). Measured against F.linear (2 threads, encoder shapes 384-3072 wide): AMD AVX-512 (EPYC)
# 2.2x at 8-2048 rows; Intel AVX-512 (a Xeon with AMX) 1.1-1.9x at 32-64 rows, 0.84-1.08x from 128 rows on;
# AVX2 1.1-2.3x at 8-48 rows, about even at 64-96, 0.83-0.95x from 128 rows on.
PACKED_KINDS = frozenset({"AVX512", "AVX2"})
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



@cache
def cpu_vendor() -> str | None:
    """The CPU's vendor as /proc/cpuinfo names it ("GenuineIntel", "AuthenticAMD"), or None where it cannot say."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def packs_fp32() -> bool:
    """Whether this CPU runs fp32 products on the packed kernel (PACKED_KINDS)."""
    return cpu_kind() in PACKED_KINDS


def no_kernel_of_its_own(x: Tensor, weight: Tensor) -> bool:
    """Where every variant runs torch's plain product: while torch.compile traces (the compiler picks its own
    kernels), on an empty input, and where autograd records (training)."""
    return torch.compiler.is_compiling() or x.numel() == 0 or (
        torch.is_grad_enabled() and (weight.requires_grad or x.requires_grad))


def on_cpu(x: Tensor, weight: Tensor) -> bool:
    return x.device.type == "cpu" and weight.device.type == "cpu"


def rows_beyond(flat: Tensor, wanted: int) -> Tensor:
    """`flat` (rows, K) as the first rows of a (wanted, K) input of the packed product, whose extra rows' outputs are
    dropped (a row's output depends on that row alone). Where flat's own memory goes on past its end (the input is
    the leading rows of a packed product's taller output: the feed-forward's down projection reads the up
    projection's), the extra rows are read there, whatever they hold: no copy. Elsewhere the rows are copied into
    a taller buffer, only its extra rows zeroed (F.pad would zero them all first: a second pass)."""
    K = flat.size(1)
    if flat.is_contiguous() and (flat.storage_offset() + wanted * K) * flat.element_size() <= \
            flat.untyped_storage().nbytes():
        return flat.as_strided((wanted, K), (K, 1), flat.storage_offset())
    taller = flat.new_empty(wanted, K)
    taller[:len(flat)].copy_(flat)
    taller[len(flat):].zero_()
    return taller


def activate(y: Tensor, activation: str | None) -> Tensor:
    """activation(y) (a name of ACTIVATIONS; None: y), in place where autograd does not need y: the product is this
    call's own buffer, and a second one of its size is a fresh allocation (page faults) on every call."""
    if activation is None:
        return y
    if y.requires_grad or activation not in IN_PLACE:
        return ACTIVATIONS[activation][0](y)
    return IN_PLACE[activation](y)


class Linear(nn.Linear):
    """activation(x W^T + b) in the weights' dtype: oneDNN on a prepacked fp32 weight where this CPU runs it faster
    (module docstring), F.linear elsewhere. The base of every variant (`swap`)."""

    prepack = True  # class-wide switch: False runs torch's F.linear everywhere
    # The keyword settings a variant's constructor takes for its own kernel (`swap` carries them over, by name)
    settings: ClassVar[tuple[str, ...]] = ()

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, activation: str | None = None,
                 **factory):
        """activation: a name of ACTIVATIONS applied to the output (default: none)."""
        super().__init__(in_features, out_features, bias=bias, **factory)
        if activation is not None and activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose from {tuple(ACTIVATIONS)}")
        self.activation = activation
        self._packed: tuple[tuple, Tensor] | None = None  # (the weight's identity, its packed / rounded copy)

    def forward(self, x: Tensor, *, scratch: bool = False) -> Tensor:
        """`scratch`: the caller does not read x again, so a variant may change it in place (Int8Linear); the float
        kernels leave x as it is either way."""
        if not torch.is_autocast_enabled(x.device.type):
            x = x.to(self.weight.dtype)  # e.g. after a mixed-precision layer
        if self._kernel(x) == "packed":
            return self._packed_product(x)
        return self._activate(F.linear(x, self.weight, self.bias))

    def _kernel(self, x: Tensor) -> str:
        """"packed" (oneDNN, a weight packed once) or "plain" (F.linear on the weight as it is) for this call."""
        w = self.weight
        if no_kernel_of_its_own(x, w) or not on_cpu(x, w):
            return "plain"
        if not (self.prepack and x.dtype == w.dtype == torch.float32 and not torch.is_autocast_enabled("cpu")):
            return "plain"
        return "packed" if packs_fp32() else "plain"

    def _packed_product(self, x: Tensor) -> Tensor:
        """oneDNN's product on inference_weight(), the activation fused where oneDNN has it as a post-op; the rows
        rounded up to packed_rows (module docstring) and the padding rows' outputs dropped."""
        fused = ACTIVATIONS[self.activation][1] if self.activation else None
        attr, algorithm = fused or ("none", "")
        rows = x.numel() // x.shape[-1]
        y = packed_product(x.reshape(rows, x.shape[-1]), self.inference_weight(), self.bias, attr, algorithm)
        y = y.reshape(*x.shape[:-1], self.out_features)
        return y if fused else self._activate(y)

    def _activate(self, y: Tensor) -> Tensor:
        return activate(y, self.activation)

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

    def keep(self, *, outputs: Tensor | None = None, inputs: Tensor | None = None) -> None:
        """Keep only these output rows (and their biases) and input columns of the weight, in place (head
        pruning: SelfAttention.prune); the parameters become new ones (an optimizer holding the old ones must be
        made again), and a packed copy is made again on next use."""
        with torch.no_grad():
            weight = self.weight.detach()
            if outputs is not None:
                weight = weight[outputs.to(weight.device)]
                if self.bias is not None:
                    self.bias = nn.Parameter(self.bias.detach()[outputs.to(weight.device)].clone(),
                                             requires_grad=self.bias.requires_grad)
            if inputs is not None:
                weight = weight[:, inputs.to(weight.device)]
            self.weight = nn.Parameter(weight.clone(), requires_grad=self.weight.requires_grad)
        self.out_features, self.in_features = self.weight.shape
        self._packed = None

    @property
    def compute_dtype(self) -> torch.dtype | None:
        """The dtype the product runs in where it is not the weights' (MixedPrecisionLinear); None here."""
        return None

    @property
    def int8(self) -> bool:
        """Whether this layer runs the quantized product (nn/int8.py, Int8Linear)."""
        return False

    def __getstate__(self) -> dict:  # pickles and deep copies (worker processes) leave the packed copies out
        return {**super().__getstate__(), "_packed": None}


class MixedPrecisionLinear(Linear):
    """activation(x W^T + b) with x and W rounded to `compute_dtype` and the product taken in it (module docstring):
    oneDNN on a packed copy of the rounded weight where this CPU has that dtype's kernels, F.linear on a rounded
    copy elsewhere, F.linear on the weight rounded per call where autograd records."""

    settings = ("compute_dtype",)

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, compute_dtype: torch.dtype,
                 activation: str | None = None, **factory):
        """compute_dtype: the floating dtype the product runs in (e.g. torch.bfloat16)."""
        if not (isinstance(compute_dtype, torch.dtype) and compute_dtype.is_floating_point):
            raise ValueError(f"compute_dtype must be a floating torch.dtype, got {compute_dtype!r}")
        super().__init__(in_features, out_features, bias, activation=activation, **factory)
        self._compute_dtype = compute_dtype

    def forward(self, x: Tensor, *, scratch: bool = False) -> Tensor:
        dtype = self.compute_dtype
        x = x.to(dtype)
        kernel = self._kernel(x)
        if kernel == "packed":
            return self._packed_product(x)
        weight = self.inference_weight() if kernel == "rounded" else self.weight.to(dtype)
        return self._activate(F.linear(x, weight, None if self.bias is None else self.bias.to(dtype)))

    def _kernel(self, x: Tensor) -> str:
        """"packed" (oneDNN, the rounded weight packed once), "rounded" (F.linear on a weight rounded once) or
        "plain" (F.linear on the weight rounded for this call) for this call."""
        w, dtype = self.weight, self.compute_dtype
        if no_kernel_of_its_own(x, w):
            return "plain"
        rounded = "rounded" if dtype != w.dtype else "plain"
        if not on_cpu(x, w) or not (self.prepack and x.dtype == dtype and not torch.is_autocast_enabled("cpu")):
            return rounded
        if dtype == torch.float32:
            return "packed" if packs_fp32() else "plain"
        return "packed" if onednn_has(dtype) else rounded

    @property
    def compute_dtype(self) -> torch.dtype:
        return self._compute_dtype


def packed_product(flat: Tensor, packed: Tensor, bias: Tensor | None, attr: str = "none",
                   algorithm: str = "") -> Tensor:
    """oneDNN's product of the rows `flat` (rows, K) by a weight it packed (`_reorder_linear_weight`), the rows
    rounded up to packed_rows (module docstring: `rows_beyond`) and the padding rows' outputs dropped."""
    rows = flat.size(0)
    wanted = packed_rows(rows)
    if wanted > rows:
        flat = rows_beyond(flat, wanted)
    return torch.ops.mkldnn._linear_pointwise(flat, packed, bias, attr, [], algorithm)[:rows]


def row_products(x: Tensor, y: Tensor) -> Tensor:
    """x (M, K) @ y (N, K)^T, (M, N), each element the same bits whatever M and N where Linear packs (an fp32
    CPU product outside autograd): y is the weight of a packed product (a row's output never depends on the other
    rows; a one-row weight runs another kernel, so N = 1 gets a zero second row, dropped). torch's matmul (MKL's
    sgemm) sums otherwise by shape: MaxSim scores moved with the other queries (products/maxsim.py)."""
    n = y.size(0)
    w = y if n >= 2 else torch.cat([y, y.new_zeros(2 - n, y.size(1))])
    packs = (x.device.type == w.device.type == "cpu" and x.dtype == w.dtype == torch.float32 and Linear.prepack
             and packs_fp32() and not no_kernel_of_its_own(x, w))
    if not packs:
        return (x @ w.T)[:, :n]
    packed = torch.ops.mkldnn._reorder_linear_weight(w.contiguous(), None)
    return packed_product(x.contiguous(), packed, None)[:, :n]


# What a module carries besides its parameters: its hooks' tables, as torch names them; the module a swap sets in
# a layer's place takes the same tables, so every hook stays registered and its handle still removes it.
HOOK_TABLES = tuple(name for name in vars(nn.Module()) if "hook" in name)


def swap(owner: nn.Module, name: str, variant: type[Linear], **settings: Any) -> Linear:
    """Set a `variant` in the place of the Linear at `name` (a path under `owner`, as `get_submodule` reads it:
    "ffn.down", "layers.0.ffn.up") and return it (module docstring): a new module over the layer's own Parameter
    objects, with its activation, training mode and hooks. `settings`: the variant's own constructor keywords
    (MixedPrecisionLinear: compute_dtype; Int8Linear: int8_input_absmax); a layer that is a `variant` already keeps
    the settings not given, and is returned as it is where those given are its own."""
    layer = owner.get_submodule(name)  # an AttributeError naming what is missing
    parent_name, _, child = name.rpartition(".")
    parent = owner.get_submodule(parent_name)
    if not isinstance(layer, Linear) or not (isinstance(variant, type) and issubclass(variant, Linear)):
        raise TypeError(f"swap sets a variant of minialign's Linear in the place of one, not "
                        f"{getattr(variant, '__name__', variant)!r} in the place of {name!r}, a {type(layer).__name__}")
    unknown = set(settings) - set(variant.settings)
    if unknown:
        raise ValueError(f"{variant.__name__} has no setting {', '.join(sorted(unknown))}")
    if type(layer) is variant:
        if all(getattr(layer, key) is value for key, value in settings.items()):
            return layer
        settings = {key: getattr(layer, key) for key in variant.settings} | settings
    new = variant(layer.in_features, layer.out_features, bias=False, activation=layer.activation, device="meta",
                  **settings)
    for key, parameter in layer._parameters.items():  # the same Parameter objects (bias: None where it has none)
        new.register_parameter(key, parameter)
    for key, buffer in layer._buffers.items():
        new.register_buffer(key, buffer, persistent=key not in layer._non_persistent_buffers_set)
    for key, module in layer._modules.items():
        new.add_module(key, module)
    new.training = layer.training
    for table in HOOK_TABLES:
        setattr(new, table, getattr(layer, table))
    setattr(parent, child, new)
    return new
