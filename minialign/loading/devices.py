"""The device and dtype decisions loading makes: which device a name means on this machine, whether
this CPU runs bf16 / fp16 natively (oneDNN's own probes, nn.linear.ONEDNN_PROBES), what
dtype="auto" picks, and where dtype="int8" runs."""

from __future__ import annotations

import warnings

import torch

from minialign.nn import int8
from minialign.nn.config import DTYPES
from minialign.nn.linear import ONEDNN_PROBES


def auto_compute_dtype(device: torch.device) -> torch.dtype | None:
    """dtype="auto": bf16 matmuls where the hardware runs them natively (a CPU with AVX512-BF16 / AMX,
    a GPU that supports bf16), else None (fp32 throughout). BENCHMARKS.md ("Precision") has the
    score deviations of this recipe against fp32."""
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else None
    if device.type == "cpu":
        return torch.bfloat16 if cpu_has_native(torch.bfloat16, unknown=False) else None
    return None


# The dtype names from_pretrained takes (besides a torch.dtype): the command line's (nn.config.DTYPES), torch's
# own names for the same three, and the two modes that keep fp32 weights.
DTYPE_NAMES = {**DTYPES, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
MODES = ("auto", "int8")


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype | str | None:
    """A from_pretrained dtype as loading uses it: None (fp32), a floating torch.dtype, or "auto" / "int8";
    a name (DTYPE_NAMES: "bf16", "float16", ...) becomes its torch.dtype. Anything else is a ValueError
    naming the values taken."""
    if dtype is None:
        return None
    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point:
            raise ValueError(f"dtype={dtype} is not a floating-point dtype; {_TAKEN}")
        return dtype
    name = dtype.lower() if isinstance(dtype, str) else None
    if name in MODES:
        return name
    if name in DTYPE_NAMES:
        return DTYPE_NAMES[name]
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
