"""Patch functions: what `ma.patch(model, {name: fn})` (nn/capture.py) puts in place of an activation.

Each returns a function of the activation, which returns a tensor of its shape. A patch function may take a second
parameter, the `Site` it is called at: the activation's name, its layer, the heads of its H axis, the
forward's attention_mask and real tokens, its layout (TransformerLens' hook functions take (activation, hook) alike).
Those here read the layout and the real tokens from it; called by hand without one (fn(tensor)), they take the
layout from their own arguments and every token as real.

    ablate_heads(*heads)           zero heads of a per-head activation
    ablate_mean(*heads)            its mean over the batch and the real tokens, at every position
    replace_with(tensor)           another run's activation (activation patching)
    steer(vector, positions=...)   a vector added at some positions of a (B, L, C) activation (activation steering)
    reconstruct(sae)               a (B, L, C) activation replaced by an SAE's reconstruction of it
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch import Tensor

# How an activation's axes read, from its name (README "Capture names"; docs/internals/index.md): the per-head
# attention tensors (B, H, L, ...), the pooler's (B, C), the tables every sequence shares (no batch axis); every
# other name (B, L, ...).
_PER_HEAD = re.compile(r"(?:^|\.)attention\.(?:q|k|v|context|scores_raw|scores_masked|probs|c2p|p2c|head_outputs)$")
_PER_SEQUENCE = re.compile(r"(?:^|\.)pooler\.output$")
_SHARED = re.compile(r"(?:^|\.)(?:relative\.table|relative_position_bias\.by_offset)$")
_MODULE = re.compile(r":(?:input|output)$")  # a module path's activation (nn/capture.py): its axes are not named
# how an error message names each layout
_LAYOUTS = {"head": "per head (B, H, L, ...)", "sequence": "one vector per sequence (B, C)",
            "shared": "one table every sequence shares", "token": "(B, L, ...)", "module": "a module's"}


@dataclass(frozen=True, eq=False)
class Site:
    """Where a patch function is called, handed to one that takes a second parameter (`takes_site`; TransformerLens'
    hook functions take (activation, hook) alike).

    name:           the activation's name, or a module path's ("layers.2.ffn.up:output")
    layer:          the encoder layer it belongs to (the i of "layers.i."), None outside the layers
    heads:          for a per-head activation, the head each index of its H axis is, numbered as in the unpruned
                    layer (the attention's `heads`: (0, 1, 3) once head 2 is pruned); None otherwise
    attention_mask: the forward's own, as its Encoder was called with it (None: every token attends)
    real:           (B|1, L) bool, the forward's real tokens (`real_tokens` of that mask); None: every token
    layout:         "head", "token", "sequence", "shared" or "module" (nn/interventions.py activation_layout)
    """
    name: str
    layer: int | None
    heads: tuple[int, ...] | None
    attention_mask: Tensor | None
    real: Tensor | None
    layout: str


def takes_site(fn: Callable) -> bool:
    """Whether a patch function is called fn(activation, site): its second positional parameter has no default, or is
    named `site` (a module's: its forward's). One parameter, or a second with a default, is called fn(activation)."""
    target = fn.forward if isinstance(fn, nn.Module) else fn
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: the activation alone
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 and (positional[1].default is inspect.Parameter.empty or positional[1].name == "site")


def activation_layout(name: str) -> str:
    """"head" (B, H, L, ...), "token" (B, L, ...), "sequence" (B, C) or "shared" (no batch axis), for a recorded
    name; "module" for a module path's input or output ("layers.2.ffn.up:output"), whose axes its name does not
    tell (every module of an encoder's layers reads and writes (B, L, ...))."""
    if _MODULE.search(name):
        return "module"
    if _PER_HEAD.search(name):
        return "head"
    if _PER_SEQUENCE.search(name):
        return "sequence"
    return "shared" if _SHARED.search(name) else "token"


def ablate_heads(*heads: int) -> Callable[[Tensor], Tensor]:
    """Zero these heads of a per-head activation (B, H, ...): head ablation (patch "layers.3.attention.context").
    Heads are positions on the H axis (after pruning, `Site.heads` says which head each one is)."""
    def fn(t: Tensor) -> Tensor:
        out = t.clone()
        out[:, list(heads)] = 0
        return out
    return fn


def ablate_mean(*heads: int) -> Callable[..., Tensor]:
    """Mean ablation: replace an activation by its mean over the batch and the real tokens, at every position.
    The layout is the site's (`activation_layout` of its name): a per-head one (B, H, L, ...)
    (`attention.{q,k,v,context,scores_*,probs,head_outputs}`) gets each head's own mean, of the heads named (every
    head when none is); a (B, L, ...) one (a module path's too) its mean over the batch and the real tokens (no
    head may be named); the pooler's (B, C) its mean over the batch. The real tokens are the forward's (`Site.real`,
    from its attention_mask), so the padding's values never enter a mean. Called without a site: (B, H, L, ...)
    when heads are named, else (B, L, ...), every token counting."""
    def fn(t: Tensor, site: Site | None = None) -> Tensor:
        name = site.name if site is not None else None
        layout = site.layout if site is not None else ("head" if heads else "token")
        if layout == "shared":
            raise ValueError(f"{name} has no batch axis (one table every sequence shares): there is no mean to put")
        if heads and layout != "head":
            raise ValueError(f"{name} is {'(B, C)' if layout == 'sequence' else '(B, L, ...)'}: it has no heads; "
                             f"ablate_mean() with none named takes its mean")
        out = t.clone()
        if layout == "sequence":
            out[:] = t.mean(dim=0, keepdim=True)
            return out
        axis = 2 if layout == "head" else 1  # the token axis
        part = t[:, list(heads)] if heads else t
        where = _real_tokens(site, part, axis)
        if where is None:
            mean = part.mean(dim=(0, axis), keepdim=True)
        else:
            where = where.view(where.size(0), *([1] * (axis - 1)), where.size(1), *([1] * (part.dim() - axis - 1)))
            total = torch.where(where, part, 0).sum(dim=(0, axis), keepdim=True)
            count = where.expand_as(part).sum(dim=(0, axis), keepdim=True).clamp_min(1)
            mean = (total / count).to(t.dtype)
        if heads:
            out[:, list(heads)] = mean.expand_as(part)
        else:
            out[:] = mean.expand_as(out)
        return out
    return fn


def replace_with(tensor: Tensor) -> Callable[[Tensor], Tensor]:
    """Put `tensor` (another run's activation, e.g. a clean run's capture) in place: activation patching."""
    return lambda t: tensor.to(device=t.device, dtype=t.dtype)


def steer(vector: Tensor, *, positions: Sequence[int] | Tensor | None = None,
          scale: float = 1.0) -> Callable[..., Tensor]:
    """Activation steering: add `scale * vector` (C,) to a (B, L, C) activation (the residual stream
    "layers.i.output", a module path's output) at the token `positions` of every sequence (ints, negative ones from
    the end), or, with None, at every real token of the forward (`Site.real`); the padding is left as it was.
    A per-head, per-sequence or shared activation is refused (steer a (B, L, C) one: "layers.i.attention.output"
    rather than its heads)."""
    def fn(t: Tensor, site: Site | None = None) -> Tensor:
        name = site.name if site is not None else "the activation"
        if site is not None and site.layout not in ("token", "module"):
            raise ValueError(f"steer adds a vector to each token of a (B, L, C) activation; {name} is "
                             f"{_LAYOUTS[site.layout]}")
        if t.dim() != 3 or t.size(-1) != vector.size(-1) or vector.dim() != 1:
            raise ValueError(f"steer adds a vector of shape (C,) to a (B, L, C) activation; {name} is "
                             f"{tuple(t.shape)} and the vector {tuple(vector.shape)}")
        where = _positions(positions, t) if positions is not None else _real_tokens(site, t, 1)
        added = (scale * vector).to(device=t.device, dtype=t.dtype)  # (C,)
        if where is None:
            return t + added
        return t + where.unsqueeze(-1) * added  # (B, L, 1) * (C,)
    return fn


def reconstruct(sae: Callable[[Tensor], Tensor], *, positions: Sequence[int] | Tensor | None = None,
                keep_error: bool = False, edit: Callable[[Tensor], Tensor] | None = None) -> Callable[..., Tensor]:
    """Replace a (B, L, C) activation by a sparse autoencoder's reconstruction of it, `sae(x)` (any callable or
    module mapping (..., C) to (..., C): its encode then decode), at the token `positions` or, with None, at every
    real token of the forward (`Site.real`); the padding is left as it was, so no padding enters the SAE's
    features (SAELens' HookedSAETransformer splices an SAE in alike).

    edit: a function of the SAE's features (`sae.encode(x)` -> `edit(features)` -> `sae.decode`; the SAE must have
    both methods), to ablate or steer features. keep_error=True adds back the reconstruction's error of the
    unedited features, x - sae.decode(sae.encode(x)), without a gradient (SAELens `SAE.forward` with use_error_term:
    sae_out + no_grad(x - x_reconstruct_clean); the "error node" of Marks et al. 2024's sparse feature circuits):
    without `edit` the forward's values are x's, bit for bit, and the gradient reaching x is the SAE's own (its
    features get the output's gradient); with `edit` the values are x's plus what the edit changed of the
    reconstruction, so an edit is not cancelled by the error term."""
    if edit is not None and not (callable(getattr(sae, "encode", None)) and callable(getattr(sae, "decode", None))):
        raise ValueError(f"reconstruct(edit=) edits the SAE's features: the SAE needs encode and decode methods, and "
                         f"{type(sae).__name__} lacks them")

    def fn(t: Tensor, site: Site | None = None) -> Tensor:
        name = site.name if site is not None else "the activation"
        if site is not None and site.layout not in ("token", "module") or t.dim() != 3:
            raise ValueError(f"reconstruct replaces each token of a (B, L, C) activation; {name} is {tuple(t.shape)}"
                             + (f", {_LAYOUTS[site.layout]}" if site is not None else ""))
        where = _positions(positions, t) if positions is not None else _real_tokens(site, t, 1)
        if edit is None:
            rebuilt = clean = _checked(sae(t), t, name)
        else:
            features = sae.encode(t)
            rebuilt = _checked(sae.decode(edit(features)), t, name)
            clean = _checked(sae.decode(features), t, name) if keep_error else rebuilt
        if keep_error:  # x + (edited - clean): x's value bit for bit when nothing is edited; the SAE's path in the graph
            rebuilt = t.detach() + (rebuilt - clean.detach())
        return rebuilt if where is None else torch.where(where.unsqueeze(-1), rebuilt, t)
    return fn


def _checked(rebuilt, t: Tensor, name: str) -> Tensor:
    """The SAE's reconstruction of `t` in t's dtype, or an error naming its shape."""
    if not isinstance(rebuilt, Tensor) or rebuilt.shape != t.shape:
        got = tuple(rebuilt.shape) if isinstance(rebuilt, Tensor) else type(rebuilt).__name__
        raise ValueError(f"the SAE mapped {name} {tuple(t.shape)} to {got}: it must give back its shape")
    return rebuilt.to(t.dtype)


def _real_tokens(site: Site | None, t: Tensor, axis: int) -> Tensor | None:
    """(B, L) bool, the site's real tokens for an activation whose token axis is `axis`; None: every token."""
    real = site.real if site is not None else None
    if real is None:
        return None
    if real.size(-1) != t.size(axis):
        raise ValueError(f"{site.name} has {t.size(axis)} tokens and its forward's attention_mask "
                         f"{real.size(-1)}: its real tokens cannot be told")
    return real.to(t.device).expand(t.size(0), -1)


def _positions(positions: Sequence[int] | Tensor, t: Tensor) -> Tensor:
    """(B, L) bool, True at the token positions named (ints; negative ones from the end) of every sequence."""
    where = torch.zeros(t.shape[:2], dtype=torch.bool, device=t.device)
    index = torch.as_tensor(positions, dtype=torch.long, device=t.device).reshape(-1)
    length = t.size(1)
    if index.numel() and ((index >= length) | (index < -length)).any():
        raise ValueError(f"positions {index.tolist()} fall outside the activation's {length} tokens")
    where[:, index % length] = True
    return where
