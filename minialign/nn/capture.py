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

A capture is scoped to its caller (a `contextvars.ContextVar`, as asyncio and threads each see their own):
another thread's forward, even of the same model, runs as if no capture were open (its kernels, its
backend, nothing recorded). It records `model`'s forward only: a forward of another model inside the
block records nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator

import torch.nn as nn
import torch.nn.modules.module as torch_module
from torch import Tensor

# The caller's open capture, if any (each thread and asyncio task sees its own; a new thread sees none).
_active: contextvars.ContextVar[Capture | None] = contextvars.ContextVar("minialign_capture", default=None)
# How many captures are open in any thread: while none is (the common case), `current` answers without
# reading the ContextVar, a plain global that torch.compile guards on (it cannot trace ContextVar.get).
_open = 0
_open_lock = threading.Lock()


def current() -> Capture | None:
    """The capture this thread (or task) opened, or None."""
    return _active.get() if _open else None


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
        if not self._scope:  # outside the captured model's forward (another model run inside the block)
            return
        scope = self._scope[-1]
        name = f"{scope}.{role}" if scope else role
        if name in self.tensors:  # the same module called twice in one capture: number the calls
            n = 1
            while f"{name}#{n}" in self.tensors:
                n += 1
            name = f"{name}#{n}"
        self.tensors[name] = tensor.detach()


def capturing() -> bool:
    return current() is not None


def unobserved(*modules: nn.Module) -> bool:
    """Whether a tensor handed between `modules` (its maker's output, its reader's input) is seen by nothing
    else: no capture active and no forward hook on any of them, nor a global one (torch's
    register_module_forward_hook / _pre_hook), so its reader may overwrite it (nn/int8.py, `linear`)."""
    if current() is not None or any(m._forward_hooks or m._forward_pre_hooks for m in modules):
        return False
    return not (getattr(torch_module, "_global_forward_hooks", None)
                or getattr(torch_module, "_global_forward_pre_hooks", None))


def record(role: str, tensor: Tensor) -> None:
    if (cap := current()) is not None:
        cap.add(role, tensor)


@contextlib.contextmanager
def capture(model: nn.Module) -> Iterator[Capture]:
    """Record the named intermediates of every forward pass of `model` inside the block, in this thread
    (or asyncio task) only; the forwards of other models and of other threads are left alone."""
    if current() is not None:
        raise RuntimeError("a capture is already active")
    cap = Capture()

    # The hooks are the modules' own, so they fire in every thread: each acts for this capture's caller only.
    def enter(name):
        def hook(module, args):
            if _active.get() is cap:
                cap._scope.append(name)  # returns None: the inputs are left alone
        return hook

    def leave(module, args, output):
        if _active.get() is cap:
            cap._scope.pop()  # returns None: the output is left alone

    handles = []
    for name, module in model.named_modules():  # the model itself too (name ""): its scope is the bare names
        handles += [module.register_forward_pre_hook(enter(name)), module.register_forward_hook(leave)]
    global _open
    token = _active.set(cap)
    with _open_lock:
        _open += 1
    try:
        yield cap
    finally:
        with _open_lock:
            _open -= 1
        _active.reset(token)
        for handle in handles:
            handle.remove()
