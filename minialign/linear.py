"""nn.Linear that runs CPU fp32 inference on oneDNN with a prepacked weight.

torch's fp32 `F.linear` on CPU calls MKL's sgemm. oneDNN, with the weight reordered once into its
blocked layout, computes the same product several times faster on the CPUs measured
(BENCHMARKS.md): it is what torch.compile's CPU freezing pass does (`torch.ops.mkldnn._linear_pointwise`
on a weight from `torch.ops.mkldnn._reorder_linear_weight`). The sums are taken in another order, so
results differ from F.linear by fp32 rounding only (tests: parity with transformers holds at 1e-5).

The packed path is taken only where it applies: a CPU fp32 input and weight, no autograd recording,
no autocast, not while torch.compile traces (the compiler picks its own kernels), mkldnn built in.
Everything else (training, GPUs, bf16) is plain F.linear. The packed weight is made on first use and
made again when the weight changes (its version counter moves on optimizer steps and
load_state_dict); it is not in the state dict and is not pickled. It costs one more copy of each
weight's memory. `Linear.prepack = False` turns it off everywhere.

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
        self._packed: tuple[tuple, Tensor] | None = None  # (the weight's identity, oneDNN's copy of it)

    def forward(self, x: Tensor) -> Tensor:
        function, fused = ACTIVATIONS[self.activation] if self.activation else (None, None)
        if self.prepack and self._packs(x):
            attr, algorithm = fused or ("none", "")
            y = torch.ops.mkldnn._linear_pointwise(x, self.packed_weight(), self.bias, attr, [], algorithm)
            return y if fused or function is None else function(y)
        y = F.linear(x, self.weight, self.bias)
        return function(y) if function is not None else y

    def _packs(self, x: Tensor) -> bool:
        if torch.compiler.is_compiling():
            return False
        w = self.weight
        return (x.device.type == "cpu" and w.device.type == "cpu" and x.dtype == w.dtype == torch.float32
                and x.numel() > 0 and not (torch.is_grad_enabled() and (w.requires_grad or x.requires_grad))
                and not torch.is_autocast_enabled("cpu") and torch.backends.mkldnn.is_available())

    def packed_weight(self) -> Tensor:
        """oneDNN's layout of the current weight, made again whenever the weight has changed."""
        w = self.weight
        key = (w.data_ptr(), w._version, tuple(w.shape))
        if self._packed is None or self._packed[0] != key:
            with torch.no_grad():
                self._packed = (key, torch.ops.mkldnn._reorder_linear_weight(w.detach(), None))
        return self._packed[1]

    def __getstate__(self) -> dict:  # pickles and deep copies (worker processes) leave the packed copy out
        return {**super().__getstate__(), "_packed": None}
