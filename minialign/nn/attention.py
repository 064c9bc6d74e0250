"""Attention masks and the one attention function, over a table of backends.

Shapes: B batch, H heads, L sequence length, Lq queries (L, or 1 for the first token only),
D head dim, T tokens of a packed batch. Mask convention: True (or non-zero) = attend; see
`attention_bias` for the accepted layouts.

A backend is one row of BACKENDS (pattern: transformers' ALL_ATTENTION_FUNCTIONS): a `run`
function with the signature of `eager`, a `prepare` that turns the user's mask into what `run`
reads, and what it can do. Adding a backend is one function and one row.

  eager  the readable reference (transformers' eager path); the only one that returns probabilities
  sdpa   torch.nn.functional.scaled_dot_product_attention with an additive mask
  flex   FlexAttention compiled by torch.compile: the mask is a BlockMask (padding, document or any
         boolean mask), a floating mask a score_mod, so the kernel is generated for our masks

The fallback rule, the only one (`choose_backend`): a forward runs on the backend the model was
built with if that backend declares everything the call needs (probabilities, the score
function's form, dropout, a subset of queries); otherwise on sdpa if sdpa does; otherwise on eager,
which does everything. A packed batch on a backend that does not take packed rows runs each
sequence alone through that backend.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from minialign.nn.layout import Layout
from minialign.nn.score_functions import DENSE, DOT, OFFSET, ScaledDot
from minialign.nn.capture import capturing, record

_SCALED_DOT = ScaledDot()


# -- the user's mask ---------------------------------------------------------------------------------

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


def first_query_only(t: Tensor | None) -> Tensor | None:
    """Keep the first query row of a (B|1, H|1, L|1, L) mask or bias."""
    return t if t is None or t.size(2) == 1 else t[:, :, :1]


# -- backends ----------------------------------------------------------------------------------------

def eager(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, score: nn.Module,
          dropout_p: float) -> tuple[Tensor, Tensor]:
    """softmax(score(q, k) + bias) v, every step on its own (transformers modeling_bert.py
    eager_attention_forward: matmul, scale, add mask, softmax, dropout). Any score form."""
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


def sdpa(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, score: nn.Module,
         dropout_p: float) -> tuple[Tensor, None]:
    q, k, scale = score.project(q, k)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p, scale=scale), None


def flex(q: Tensor, k: Tensor, v: Tensor, mask: Any, score: nn.Module, dropout_p: float) -> tuple[Tensor, None]:
    from minialign.nn.flex import flex_attention

    block_mask, score_bias = (mask.block_mask, mask.score_bias) if mask is not None else (None, None)
    if score.form == OFFSET:
        return flex_attention(q, k, v, block_mask=block_mask, score_bias=score_bias,
                              location=(score.by_offset(q), score.max_distance)), None
    q, k, scale = score.project(q, k)
    return flex_attention(q, k, v, block_mask=block_mask, score_bias=score_bias, scale=scale), None


def additive_bias(mask: Tensor | None, layout: Layout, queries: str, dtype: torch.dtype, heads: int) -> Tensor | None:
    """What eager and sdpa read: an additive (B|1, H|1, Lq|1, L) bias, or None (attend everywhere)."""
    bias = attention_bias(mask, layout.batch, layout.length, dtype)
    return first_query_only(bias) if queries == "first" else bias


def flex_mask(mask: Tensor | None, layout: Layout, queries: str, dtype: torch.dtype, heads: int):
    from minialign.nn.flex import flex_mask as build

    return build(mask, layout, dtype, heads)


@dataclass(frozen=True)
class Backend:
    """A row of the table. `run(q, k, v, mask, score, dropout_p) -> (output (B, H, Lq, D),
    probabilities (B, H, Lq, L) or None)`, where `mask` is what `prepare(user_mask, layout, queries,
    dtype, num_heads)` made, or None for a sequence attending everywhere."""

    run: Callable
    prepare: Callable
    probabilities: bool = False  # returns attention probabilities
    packed: bool = False  # takes a packed row (layout.packed) as one call
    query_subset: bool = True  # takes queries="first": the first token's query against all keys
    score_forms: frozenset[str] = frozenset({DOT})  # scores.py forms it runs
    dropout: bool = True  # applies attention dropout in training


BACKENDS: dict[str, Backend] = {
    "eager": Backend(eager, additive_bias, probabilities=True, score_forms=frozenset({DOT, OFFSET, DENSE})),
    "sdpa": Backend(sdpa, additive_bias),
    "flex": Backend(flex, flex_mask, packed=True, query_subset=False, score_forms=frozenset({DOT, OFFSET}),
                    dropout=False),
}


def choose_backend(requested: str, *, probabilities: bool, score_form: str, dropout: bool,
                   query_subset: bool) -> str:
    """The first of (requested, sdpa, eager) that declares everything the call needs."""
    for name in dict.fromkeys((requested, "sdpa", "eager")):
        row = BACKENDS[name]
        if ((row.probabilities or not probabilities) and score_form in row.score_forms
                and (row.dropout or not dropout) and (row.query_subset or not query_subset)):
            return name
    raise AssertionError("eager declares every capability")


# -- one forward's mask, and the one attention function ----------------------------------------------

@dataclass(frozen=True)
class PreparedMask:
    """One forward's mask for one backend, built once and read by every layer.

    value:        what the backend's run() reads (None when `per_sequence` is set)
    record_bias:  the additive bias the eager formulas are recorded with under `capture`
    per_sequence: (query counts, key counts) of a packed row on a backend that runs sequences alone
    """

    backend: str
    value: Any = None
    record_bias: Tensor | None = None
    per_sequence: tuple[list[int], list[int]] | None = None


def prepare_mask(backend: str, mask: Tensor | None, layout: Layout, *, queries: str, dtype: torch.dtype,
                 num_heads: int) -> PreparedMask:
    row = BACKENDS[backend]
    if layout.packed and not row.packed:
        keys = layout.host_lengths
        return PreparedMask(backend, per_sequence=([1] * len(keys) if queries == "first" else keys, keys))
    value = row.prepare(mask, layout, queries, dtype, num_heads)
    record_bias = None
    if capturing() and not row.probabilities:  # the eager formulas run beside, for the record
        record_bias = additive_bias(mask, layout, queries, dtype, num_heads)
    return PreparedMask(backend, value, record_bias)


def attention(q: Tensor, k: Tensor, v: Tensor, mask: PreparedMask, *, score: nn.Module | None = None,
              dropout_p: float = 0.0) -> tuple[Tensor, Tensor | None]:
    """softmax(score(Q, K) + mask) V for q (B, H, Lq, D) and k, v (B, H, L, D), on mask.backend.

    `score` is an alignment-score function (scores.py); None is the scaled dot product.
    Returns (output (B, H, Lq, D), probabilities (B, H, Lq, L) from eager, else None).
    """
    score = score if score is not None else _SCALED_DOT
    row = BACKENDS[mask.backend]
    if mask.per_sequence is not None:
        return _per_sequence(row, q, k, v, mask.per_sequence, score, dropout_p), None
    value = mask.value
    if isinstance(value, Tensor) and value.dtype != q.dtype:  # e.g. an fp32 bias under autocast
        value = value.to(q.dtype)
    if capturing() and not row.probabilities:
        eager(q, k, v, mask.record_bias, score, 0.0)  # scores and probabilities for the record only
    return row.run(q, k, v, value, score, dropout_p)


def _per_sequence(row: Backend, q: Tensor, k: Tensor, v: Tensor, counts: tuple[list[int], list[int]],
                  score: nn.Module, dropout_p: float) -> Tensor:
    """A packed row (1, H, T, D), attended sequence by sequence: no token sees another sequence."""
    queries, keys = counts
    outputs = [row.run(qi, ki, vi, None, score, dropout_p)[0]
               for qi, ki, vi in zip(q.split(queries, dim=2), k.split(keys, dim=2), v.split(keys, dim=2))]
    return torch.cat(outputs, dim=2)
