"""Capture of every intermediate tensor of a forward pass, by name.

    with ma.capture(model) as cap:
        model(input_ids, attention_mask=mask)
    cap["layers.3.attention.probs"]       # (B, H, L, L)
    list(cap)                            # every name recorded, in order

Model code calls `record(name, tensor)`; with no capture active that is one `is None` test, so
the default path pays nothing and compiles without graph breaks. Names are the module's name
(as in `model.named_modules()`) plus the tensor's role:

  embeddings.{word,position,token_type,sum,norm}   the three parts, their sum, the LayerNorm result
  layers.i.input                                   the residual stream entering layer i
  layers.i.attention.{q,k,v}                       per-head projections (B, H, L, D)
  layers.i.attention.{scores_raw,scores_masked,probs}   (B, H, L, L), before and after the mask, softmax
  layers.i.attention.{context,output}              per-head weighted sums (B, H, L, D); after Wo (B, L, C)
  layers.i.{attention_residual,attention_norm}     x + attention (before LN), after LN
  layers.i.ffn.intermediate                        activation of the feed-forward's first layer (B, L, I)
  layers.i.{ffn_output,ffn_residual,output}        feed-forward output, x + ffn (before LN), after LN
  pooler.output                                    (B, C)

Attention scores and probabilities are recorded from the eager formulas, run beside the model's own
backend (attention.recording: while a capture is active, choose_backend hands out that row's
recording twin), so results do not change. That row runs the padded layout for every token (unpad
and final_tokens="first" are ignored while capturing), so every layer records full (B, H, L, L)
scores. `choose_backend` is the one place that asks whether a capture is active.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch.nn as nn
import torch.nn.modules.module as torch_module
from torch import Tensor

_active: Capture | None = None


class Capture:
    def __init__(self):
        self.tensors: dict[str, Tensor] = {}
        self._scope: list[str] = []

    def __getitem__(self, name: str) -> Tensor:
        return self.tensors[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)

    def add(self, role: str, tensor: Tensor) -> None:
        scope = self._scope[-1] if self._scope else ""
        name = f"{scope}.{role}" if scope else role
        if name in self.tensors:  # the same module called twice in one capture: number the calls
            n = 1
            while f"{name}#{n}" in self.tensors:
                n += 1
            name = f"{name}#{n}"
        self.tensors[name] = tensor.detach()


def capturing() -> bool:
    return _active is not None


def unobserved(*modules: nn.Module) -> bool:
    """Whether a tensor handed between `modules` (its maker's output, its reader's input) is seen by nothing
    else: no capture active and no forward hook on any of them, nor a global one (torch's
    register_module_forward_hook / _pre_hook), so its reader may overwrite it (nn/int8.py, `linear`)."""
    if _active is not None or any(m._forward_hooks or m._forward_pre_hooks for m in modules):
        return False
    return not (getattr(torch_module, "_global_forward_hooks", None)
                or getattr(torch_module, "_global_forward_pre_hooks", None))


def record(role: str, tensor: Tensor) -> None:
    if _active is not None:
        _active.add(role, tensor)


@contextlib.contextmanager
def capture(model: nn.Module) -> Iterator[Capture]:
    """Record the named intermediates of every forward pass of `model` inside the block."""
    global _active
    if _active is not None:
        raise RuntimeError("a capture is already active")
    cap = Capture()

    def enter(name):
        def hook(module, args):
            cap._scope.append(name)  # returns None: the inputs are left alone
        return hook

    def leave(module, args, output):
        cap._scope.pop()  # returns None: the output is left alone

    handles = []
    for name, module in model.named_modules():
        if name:
            handles += [module.register_forward_pre_hook(enter(name)), module.register_forward_hook(leave)]
    _active = cap
    try:
        yield cap
    finally:
        _active = None
        for handle in handles:
            handle.remove()
