"""Attention masks and the one attention function, with a backend chosen at construction.

Shapes: B batch, H heads, L sequence length, D head dim, T tokens of a packed batch.
Mask convention: True (or non-zero) = attend. See `attention_bias` for the accepted layouts.

Backends:
  eager  the readable reference (transformers' eager path); the only one that returns probabilities
  sdpa   torch.nn.functional.scaled_dot_product_attention with an additive mask
  flex   FlexAttention compiled by torch.compile: the mask is a BlockMask (padding, document or any
         boolean mask), a floating mask a score_mod, so the kernel is generated for our masks
Packed (unpadded) batches: flex uses a document BlockMask; eager and sdpa run each sequence alone.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .tracing import capturing, record
from .scores import Location, ScaledDot

BACKENDS = ("eager", "sdpa", "flex")
_SCALED_DOT = ScaledDot()


def attention_bias(mask: Tensor | None, batch: int, length: int, dtype: torch.dtype) -> Tensor | None:
    """Turn a user mask into an additive bias broadcastable to (B, H, L, L).

    Accepted layouts (True / non-zero = attend):
      (B, L)            padding mask: key j of sequence b is a real token.
      (B, L, L)         per-pair mask: query i of sequence b may attend key j.
      (B|1, H|1, L, L)  bool: True = attend; integer: non-zero = attend;
                        floating: an additive bias used as given (0 = attend, very negative = blocked).
    Blocked positions get the dtype's most negative finite value, as transformers' eager path does,
    so a fully blocked row gives a uniform distribution rather than NaN.
    """
    keep = keep_mask(mask, batch, length)
    if keep is None or keep.is_floating_point():
        return None if keep is None else keep.to(dtype)
    return torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill(~keep, torch.finfo(dtype).min)


def keep_mask(mask: Tensor | None, batch: int, length: int) -> Tensor | None:
    """The boolean (B|1, 1|H, 1|L, L) form of a user mask (a floating 4-D mask is returned as is)."""
    if mask is None:
        return None
    if not isinstance(mask, Tensor):
        raise TypeError(f"attention_mask must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dim() == 4:
        b, h, q, k = mask.shape
        if b not in (1, batch) or q != length or k != length:
            raise ValueError(f"4-D attention_mask must be (B|1, H|1, {length}, {length}) with B={batch}, "
                             f"got {tuple(mask.shape)}")
        return mask if mask.is_floating_point() else mask.bool()
    if mask.dim() == 3:
        if tuple(mask.shape) != (batch, length, length):
            raise ValueError(f"3-D attention_mask must be ({batch}, {length}, {length}), got {tuple(mask.shape)}")
        return mask.bool()[:, None, :, :]  # (B, 1, L, L)
    if mask.dim() == 2:
        if tuple(mask.shape) != (batch, length):
            raise ValueError(f"2-D attention_mask must be ({batch}, {length}), got {tuple(mask.shape)}")
        return mask.bool()[:, None, None, :]  # (B, 1, 1, L)
    raise ValueError(f"attention_mask must have 2, 3 or 4 dims, got shape {tuple(mask.shape)}")


@dataclass
class AttentionMask:
    """One forward pass's mask, prepared once for its backend.

    bias:       additive (B|1, H|1, L|1, L), for eager and sdpa; None attends everywhere.
    block_mask: a FlexAttention BlockMask, for flex.
    score_bias: an additive (B, H, L, L) view added by flex's score_mod (floating user masks).
    lengths:    the sequence lengths of a packed batch, whose tokens lie end to end in one row.
    """

    backend: str
    bias: Tensor | None = None
    block_mask: Any = None
    score_bias: Tensor | None = None
    lengths: list[int] | None = None


def attention(q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, *, score: nn.Module | None = None,
              dropout_p: float = 0.0, need_probs: bool = False) -> tuple[Tensor, Tensor | None]:
    """softmax(score(Q, K) + mask) V for q (B, H, Lq, D) and k, v (B, H, L, D).

    `score` is an alignment-score function (scores.py); None is the scaled dot product.
    Returns (output (B, H, Lq, D), probabilities (B, H, Lq, L) or None). Probabilities come only
    from the eager path, which `need_probs=True` selects.
    """
    score = score if score is not None else _SCALED_DOT
    if mask.bias is not None and mask.bias.dtype != q.dtype:  # e.g. under autocast
        mask = dataclasses.replace(mask, bias=mask.bias.to(q.dtype))
    if mask.lengths is not None and not (mask.backend == "flex" and mask.block_mask is not None):
        return _per_sequence(q, k, v, mask, score, dropout_p), None
    dense = not hasattr(score, "project") and not (mask.backend == "flex" and isinstance(score, Location))
    if need_probs or mask.backend == "eager" or dense:
        return _eager(q, k, v, mask.bias, score, dropout_p)
    if capturing():  # the record's scores and probabilities, beside the fast path
        _eager(q, k, v, mask.bias, score, 0.0)
    if mask.backend == "sdpa":
        q, k, scale = score.project(q, k)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.bias, dropout_p=dropout_p, scale=scale), None
    if mask.backend == "flex":
        from .flex import flex_attention

        if isinstance(score, Location):
            return flex_attention(q, k, v, block_mask=mask.block_mask, score_bias=mask.score_bias,
                                  location=(score.by_offset(q), score.max_distance)), None
        q, k, scale = score.project(q, k)
        return flex_attention(q, k, v, block_mask=mask.block_mask, score_bias=mask.score_bias, scale=scale), None
    raise ValueError(f"unknown attention backend {mask.backend!r}; choose from {BACKENDS}")


def _eager(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, score: nn.Module,
           dropout_p: float) -> tuple[Tensor, Tensor]:
    # transformers modeling_bert.py eager_attention_forward: matmul, scale, add mask, softmax, dropout.
    if isinstance(score, ScaledDot):
        scores = torch.matmul(q, k.transpose(-2, -1)).mul_(1.0 / math.sqrt(q.size(-1)))  # in place: memory-bound
    else:
        scores = score(q, k)  # (B, H, Lq, L)
    record("scores_raw", scores)
    if bias is not None:
        scores = scores.add_(bias) if not capturing() else scores + bias
    record("scores_masked", scores)
    probs = torch.softmax(scores, dim=-1)
    record("probs", probs)
    if dropout_p > 0.0:
        probs = F.dropout(probs, p=dropout_p)
    return torch.matmul(probs, v), probs


def _per_sequence(q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, score: nn.Module, dropout_p: float) -> Tensor:
    """A packed batch (1, H, T, D), attended sequence by sequence: no token sees another sequence."""
    alone = AttentionMask(mask.backend if mask.backend != "flex" else "sdpa")
    outputs = [attention(qi, ki, vi, alone, score=score, dropout_p=dropout_p)[0]
               for qi, ki, vi in zip(*(t.split(mask.lengths, dim=2) for t in (q, k, v)))]
    return torch.cat(outputs, dim=2)
