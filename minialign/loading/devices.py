"""The device and dtype decisions loading makes: which device a name means on this machine, whether
this CPU runs bf16 / fp16 natively (oneDNN's own probes, nn.linear.ONEDNN_PROBES), what a `dtype` means
(`parse_dtype`, the one place a user's dtype string is read: the weights' dtype and a precision,
nn/precision.py), what dtype="auto" / "auto-all" pick, and where dtype="int8" runs."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from minialign.nn import int8
from minialign.nn.choices import PRECISION_DTYPES
from minialign.nn.config import DTYPES
from minialign.nn.linear import ONEDNN_PROBES
from minialign.nn.precision import INT8, LAYER_SETS, PLAIN, Precision, mixed


def auto_compute_dtype(device: torch.device) -> torch.dtype | None:
    """dtype="auto" and "auto-all": bf16 matmuls where the hardware runs them natively (a CPU with AVX512-BF16 / AMX,
    a GPU that supports bf16), else None (fp32 throughout). BENCHMARKS.md ("Precision") has the
    score deviations of this recipe against fp32."""
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else None
    if device.type == "cpu":
        return torch.bfloat16 if cpu_has_native(torch.bfloat16, unknown=False) else None
    return None


# The dtype names from_pretrained takes (besides a torch.dtype): the command line's (nn.config.DTYPES), torch's
# own names for the same three, and the precisions that keep fp32 weights (nn.choices.PRECISION_DTYPES).
DTYPE_NAMES = {**DTYPES, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
MODES = PRECISION_DTYPES
# The words for a precision decided on the device (DtypeChoice.auto) -> the layers its mixed precision takes
# (nn/precision.py LAYER_SETS): "auto" those declared for it (the attention output and ffn.down), "auto-all" all four
# projections; the rest of MODES is "int8".
AUTO_LAYERS = {"auto": "declared", "auto-all": "all"}


@dataclass(frozen=True)
class DtypeChoice:
    """A from_pretrained `dtype`, parsed (`parse_dtype`): the dtype the weights are held in, and the precision
    their declared layers run (nn/precision.py), or `auto`: mixed bf16 on the `layers` it names (nn/precision.py
    LAYER_SETS: "declared" for dtype="auto", "all" for "auto-all") where the device runs bf16 natively, else PLAIN
    (`precision_on`). `layers` is auto's alone: a precision given outright carries its own."""

    weights: torch.dtype = torch.float32
    precision: Precision = PLAIN
    auto: bool = False
    layers: str = "declared"

    def __post_init__(self):
        if self.layers not in LAYER_SETS:
            raise ValueError(f"unknown precision layers {self.layers!r}; choose from {tuple(LAYER_SETS)}")
        if self.auto and (self.precision != PLAIN or self.weights != torch.float32):
            raise ValueError(f"auto=True keeps fp32 weights and decides the precision on the device; it takes "
                             f"neither given ({self.weights}, {self.precision})")
        if self.layers != "declared" and not self.auto:
            raise ValueError(f"layers={self.layers!r} goes with auto=True; a precision given outright carries its "
                             f"own (mixed(dtype, layers=...))")

    def precision_on(self, device: torch.device) -> Precision:
        """The precision on `device`: "auto" / "auto-all" decided (auto_compute_dtype), INT8 checked to run there
        (check_int8)."""
        if self.auto:
            compute = auto_compute_dtype(device)
            return PLAIN if compute is None else mixed(compute, layers=self.layers)
        if self.precision == INT8:
            check_int8(device)
        return self.precision

    def __str__(self) -> str:
        """The user's words ("auto", "auto-all", "int8") or the weights' dtype ("bfloat16"), which parse_dtype reads
        back to this choice; the precision ("mixed bfloat16") for a choice made outright that no word names."""
        if self.auto:
            return next(word for word, layers in AUTO_LAYERS.items() if layers == self.layers)
        weights = str(self.weights).removeprefix("torch.")
        if self.precision == PLAIN:
            return weights
        return str(self.precision) if self.weights == torch.float32 else f"{weights} {self.precision}"


def parse_dtype(dtype: str | torch.dtype | DtypeChoice | None) -> DtypeChoice:
    """What a from_pretrained / command-line dtype means, read once where it enters: None (fp32 weights), a
    floating torch.dtype or its name (DTYPE_NAMES: "bf16", "float16", ...; the weights' dtype), "auto", "auto-all"
    or "int8" (fp32 weights, a precision: MODES); a DtypeChoice as it is. Anything else is a ValueError naming the
    values taken."""
    if dtype is None:
        return DtypeChoice()
    if isinstance(dtype, DtypeChoice):
        return dtype
    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point:
            raise ValueError(f"dtype={dtype} is not a floating-point dtype; {_TAKEN}")
        return DtypeChoice(weights=dtype)
    name = dtype.lower() if isinstance(dtype, str) else None
    if name in AUTO_LAYERS:
        return DtypeChoice(auto=True, layers=AUTO_LAYERS[name])
    if name == "int8":
        return DtypeChoice(precision=INT8)
    if name in DTYPE_NAMES:
        return DtypeChoice(weights=DTYPE_NAMES[name])
    raise ValueError(f"unknown dtype {dtype!r}; {_TAKEN}")


_TAKEN = (f"use one of {', '.join(map(repr, (*DTYPE_NAMES, *MODES)))} or a floating torch.dtype "
          f"(e.g. torch.bfloat16)")


def check_int8(device: torch.device) -> None:
    """dtype="int8" runs on CPUs with FBGEMM (nn/int8.py) and nowhere else: a ValueError saying why."""
    if device.type != "cpu":
        raise ValueError(f"dtype='int8' runs on CPU only (FBGEMM's int8 kernels), not on {device}; on a GPU use "
                         f"dtype='auto' or bf16")
    if not int8.available():
        raise ValueError(int8.unavailable_reason())


def resolve_device(device: str | torch.device | None) -> torch.device:
    """The torch.device named, checked to exist on this machine (default: cpu)."""
    try:
        resolved = torch.device(device or "cpu")
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"unknown device {device!r} ({e}); use cpu, cuda, cuda:N or mps") from None
    if resolved.type == "cpu":
        return resolved
    if resolved.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            why = "this torch was built without CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
            raise ValueError(f"device {str(device)!r} is not available on this machine ({why}); use cpu")
        if resolved.index is not None and resolved.index >= count:
            raise ValueError(f"device {str(device)!r} does not exist: this machine has {count} CUDA device(s)")
        return resolved
    if resolved.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"device {str(device)!r} is not available on this machine (no Apple MPS); use cpu")
        return resolved
    raise ValueError(f"device {str(device)!r} is not supported; use cpu, cuda, cuda:N or mps")


def warn_if_emulated(device: torch.device, dtype: torch.dtype) -> None:
    if device.type == "cpu" and dtype in (torch.bfloat16, torch.float16) and not cpu_has_native(dtype):
        warnings.warn(f"this CPU has no native {dtype} matmul (no AVX512-BF16/FP16 or AMX), so {dtype} is "
                      f"emulated and runs several times slower than float32 here (BENCHMARKS.md); "
                      f"float32 is the faster choice on this machine", stacklevel=4)


def cpu_has_native(dtype: torch.dtype, *, unknown: bool = True) -> bool:
    """Whether oneDNN reports hardware matmul support for bf16 / fp16 on this CPU; `unknown` for a
    torch build that cannot tell (True: do not warn; dtype="auto" asks False: do not pick it)."""
    try:
        return bool(getattr(torch.ops.mkldnn, ONEDNN_PROBES[dtype])())
    except (AttributeError, RuntimeError):
        return unknown
