"""int8 products on CPU: the opt-in quantized mode (loading's dtype="int8") of the Linear layers a model
names in its INT8 tuple (nn/layers.py, EncoderLayer.INT8).

The formula, as torch's dynamic quantization (torch.ao.nn.quantized.dynamic.Linear) and ONNX Runtime's
MatMulInteger compute it:

    weight  W ~ s_w[n] * Wq[n, k]   Wq int8, one symmetric scale per output channel n (zero point 0),
                                    s_w[n] = max_k |W[n, k]| / WEIGHT_LEVELS, made once per weight
    input   X ~ s_x * (Xq - z_x)    Xq uint8, one affine scale and zero point per call (per tensor:
                                    over every row of this call's input), from its min and max (0
                                    always representable): dynamic, nothing calibrated
    output  Y = s_x * s_w[n] * sum_k (Xq - z_x)[., k] Wq[n, k]  (int32 accumulation) + b[n]   (fp32)

FBGEMM runs it (`quantized::linear_dynamic` on weights packed by `quantized::linear_prepack`; the
input's min / max and its quantisation happen inside the call). Without AVX-512 VNNI its kernels
multiply uint8 by int8 with `vpmaddubsw`, which adds two products into a saturating int16: 255 * 127
* 2 overflows. torch's answer is `reduce_range` (7-bit inputs); ours keeps the input's 8 bits (the
side with outliers) and takes one bit off the weights instead (|Wq| <= 63: 255 * 64 * 2 < 32767), so
no sum saturates; with AVX-512 VNNI (`vpdpbusd` accumulates in int32) the weights get all 127 levels.
Measured on the real all-MiniLM-L6-v2 (BENCHMARKS.md, "int8"): per-tensor 7-bit inputs lost far more
(worst cosine 0.92) than 7-bit weights (0.98).

Taken only where it applies: a float32 CPU input, no autograd recording, not while torch.compile
traces, and a torch with FBGEMM (x86). Anything else, the layer runs its fp32 product unchanged.
"""

from __future__ import annotations

import warnings
from functools import cache

import torch
from torch import Tensor


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


@cache
def weight_levels() -> int:
    """The largest |Wq|: 127 where FBGEMM accumulates in int32 (AVX-512 VNNI), else 63 (module docstring)."""
    vnni = "avx512_vnni" in cpu_flags() and torch.backends.cpu.get_cpu_capability() == "AVX512"
    return 127 if vnni else 63


def unavailable_reason() -> str:
    return (f"dtype='int8' needs torch's FBGEMM int8 kernels on an x86 CPU with AVX2; this torch has "
            f"{torch.backends.quantized.supported_engines} on a {torch.backends.cpu.get_cpu_capability()} CPU")


def quantize_weight(weight: Tensor) -> tuple[Tensor, Tensor]:
    """(Wq int8 (N, K), s_w float64 (N,)): symmetric per output channel (module docstring)."""
    w = weight.detach().float()
    scale = (w.abs().amax(dim=1) / weight_levels()).clamp(min=torch.finfo(torch.float32).tiny).double()
    q = torch.round(w / scale[:, None].float()).clamp(-weight_levels(), weight_levels()).to(torch.int8)
    return q, scale


def pack(weight: Tensor, bias: Tensor | None):
    """FBGEMM's packed form of the quantized weight and the fp32 bias."""
    q, scale = quantize_weight(weight)
    with warnings.catch_warnings():  # torch's quantized tensors carry a deprecation notice (torch.ao -> torchao)
        warnings.simplefilter("ignore")
        quantized = torch._make_per_channel_quantized_tensor(q, scale, torch.zeros_like(scale, dtype=torch.long), 0)
        engine = torch.backends.quantized.engine
        torch.backends.quantized.engine = "fbgemm"
        try:
            return torch.ops.quantized.linear_prepack(quantized, None if bias is None else bias.detach().float())
        finally:
            torch.backends.quantized.engine = engine


def linear(x: Tensor, packed) -> Tensor:
    """Y for the float32 input x (..., K) (module docstring), float32 (..., N)."""
    return torch.ops.quantized.linear_dynamic(x, packed, False)  # 8-bit inputs: the weights keep the margin
