"""nn.Linear that runs CPU inference on oneDNN with a prepacked weight, optionally in a lower precision.

torch's fp32 `F.linear` on CPU calls MKL's sgemm. oneDNN, with the weight reordered once into its
blocked layout, computes the same product several times faster on the CPUs measured
(BENCHMARKS.md): it is what torch.compile's CPU freezing pass does (`torch.ops.mkldnn._linear_pointwise`
on a weight from `torch.ops.mkldnn._reorder_linear_weight`). The sums are taken in another order, so
results differ from F.linear by fp32 rounding only (tests: parity with transformers holds at 1e-5).

The packed path is taken only where it applies: a CPU input and weight of the same dtype (fp32 or
the compute dtype below), no autograd recording, no autocast, not while torch.compile traces (the
compiler picks its own kernels), mkldnn built in. Everything else (training, GPUs) is plain F.linear.
The packed weight is made on first use and made again when the weight changes (its version counter
moves on optimizer steps and load_state_dict); it is not in the state dict and is not pickled. It
costs one more copy of each weight's memory. `Linear.prepack = False` turns it off everywhere.

`compute_dtype` (None: the weight's own) is mixed precision for one layer, as torch.autocast does it
for all: the input and the weight are rounded to it, the product is taken in it (fp32 accumulation)
and the output is in it; the stored weight keeps its dtype. The rounded weight is made once and
kept like the packed one (packed, on CPU). The model chooses which layers get it (model.py,
EncoderLayer.MIXED_PRECISION).

A Linear may carry the activation that follows it (the feed-forward's up projection, the MLM head's
dense layer): oneDNN then applies it in the same pass.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# name -> (the function, oneDNN's fused post-op as (attr, algorithm), or None where it has none).
# transformers activations.py: "gelu" is the exact erf GELU; "gelu_new" / "gelu_pytorch_tanh" the tanh form.
_TANH_GELU = (partial(F.gelu, approximate="tanh"), ("gelu", "tanh"))
ACTIVATIONS = {"gelu": (F.gelu, ("gelu", "none")), "gelu_new": _TANH_GELU, "gelu_pytorch_tanh": _TANH_GELU,
               "relu": (F.relu, ("relu", "")), "silu": (F.silu, None)}


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
        self._packed: tuple[tuple, Tensor] | None = None  # (the weight's identity, its packed / rounded copy)

    def forward(self, x: Tensor) -> Tensor:
        function, fused = ACTIVATIONS[self.activation] if self.activation else (None, None)
        if self.compute_dtype is not None or not torch.is_autocast_enabled(x.device.type):
            x = x.to(self.compute_dtype or self.weight.dtype)  # e.g. after a mixed-precision layer
        cached = self._caches(x)
        if cached and x.device.type == "cpu":
            attr, algorithm = fused or ("none", "")
            y = torch.ops.mkldnn._linear_pointwise(x, self.inference_weight(), self.bias, attr, [], algorithm)
            return y if fused or function is None else function(y)
        if self.compute_dtype is None:
            y = F.linear(x, self.weight, self.bias)
        else:
            weight = self.inference_weight() if cached else self.weight.to(self.compute_dtype)
            y = F.linear(x, weight, None if self.bias is None else self.bias.to(self.compute_dtype))
        return function(y) if function is not None else y

    def _caches(self, x: Tensor) -> bool:
        """Whether this call may use a weight made once (packed on CPU; rounded to compute_dtype elsewhere)."""
        if torch.compiler.is_compiling() or x.numel() == 0:
            return False
        w = self.weight
        if torch.is_grad_enabled() and (w.requires_grad or x.requires_grad):
            return False
        if x.device.type != "cpu":
            return self.compute_dtype not in (None, w.dtype)
        return (self.prepack and x.dtype == (self.compute_dtype or w.dtype) in (torch.float32, self.compute_dtype)
                and w.device.type == "cpu"
                and not torch.is_autocast_enabled("cpu") and torch.backends.mkldnn.is_available())

    def inference_weight(self) -> Tensor:
        """The weight as this layer multiplies by it outside autograd: rounded to compute_dtype and, on
        CPU, in oneDNN's layout; made again whenever the weight or compute_dtype has changed."""
        w = self.weight
        dtype = self.compute_dtype or w.dtype
        key = (w.data_ptr(), w._version, tuple(w.shape), dtype, self.prepack)
        if self._packed is None or self._packed[0] != key:
            with torch.no_grad():
                rounded = w.detach().to(dtype)
                cpu = w.device.type == "cpu" and self.prepack
                self._packed = (key, torch.ops.mkldnn._reorder_linear_weight(rounded, None) if cpu else rounded)
        return self._packed[1]

    def __getstate__(self) -> dict:  # pickles and deep copies (worker processes) leave the packed copy out
        return {**super().__getstate__(), "_packed": None}
