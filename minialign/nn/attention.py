"""The one attention function, over a table of backends.

Shapes: B batch, H heads, L sequence length, Lq queries (L, or 1 for the first token only),
D head dim, T tokens of a packed batch. Mask convention: True (or non-zero) = attend; the accepted
layouts and their normalisation are in masks.py (`keep_mask`, `attention_bias`).

A backend is one row of BACKENDS (pattern: transformers' ALL_ATTENTION_FUNCTIONS): a `run` function
with the signature of `eager`, a `prepare` that turns one forward's AttentionInputs (inputs.py: the user's
mask, the layout, the queries, a family's relative bias and window) into what `run` reads, once per
forward, and what it can do. Adding a backend is two functions (run, prepare; they may live in their
own module, as flex's do in flex.py) and one row.

  eager  the readable reference (transformers' eager path); the only one that returns probabilities
  sdpa   torch.nn.functional.scaled_dot_product_attention with an additive mask; on a CPU a local layer's
         queries by blocks, each against the keys in its window only (LocalBlocks)
  flex   FlexAttention compiled by torch.compile (flex.py): the mask is a BlockMask (padding, document
         or any boolean mask), a floating mask a score_mod, so the kernel is generated for our masks
  varlen flash attention over a packed row in one call per layer, from its cumulative lengths (varlen.py):
         packed half-precision batches on CUDA; any other forward it `refuses` runs on sdpa, saying why

The fallback rule, the only one (`choose_backend`): a forward runs on the backend the model was
built with if that backend declares everything the call needs (probabilities, the score
function's form, dropout, a subset of queries); otherwise on sdpa if sdpa does; otherwise on eager,
which does everything. A row may also refuse a forward for what only that forward shows (its layout, dtype,
device, a family's bias: `refuses`, read once per forward by `prepare_mask`); that forward then runs on sdpa. A packed batch on a backend that does not take packed rows runs as padded
batches, one per length bucket (layout.py, `Layout.buckets`): one call per bucket, each sequence padded
to a length of its own, so its result is the same whatever it is batched with. Under `capture` (capture.py) the rule hands out the chosen
row's recording twin (`recording`): the same row, with the eager formulas run beside it for the
record, on the padded layout and every token; so the forward itself makes no capture decisions. Under
`patch` too; where a patch replaces a score or the probabilities, the twin's output is eager's from them.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from minialign.nn import flex, varlen
from minialign.nn.capture import capturing, current, record
from minialign.nn.inputs import AttentionInputs
from minialign.nn.layout import Bucket, BucketQueries, padded
from minialign.nn.masks import attention_bias, first_query_only, keep_mask, offset_bias
from minialign.nn.reduce import row_product
from minialign.nn.score_functions import DENSE, DISENTANGLED, DOT, OFFSET, ScaledDot

_SCALED_DOT = ScaledDot()


# -- backends ----------------------------------------------------------------------------------------

def raw_scores(q: Tensor, k: Tensor, score: nn.Module) -> Tensor:
    """score(q, k): (B, H, Lq, D), (B, H, L, D) -> (B, H, Lq, L)."""
    if isinstance(score, ScaledDot):  # one query row (the first-token path): row_product, the batch's bits aside
        return row_product(q, k.transpose(-2, -1)).mul_(1.0 / math.sqrt(q.size(-1)))  # in place: memory-bound
    return score(q, k)


def eager(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, score: nn.Module,
          dropout_p: float) -> tuple[Tensor, Tensor]:
    """softmax(score(q, k) + bias) v, every step on its own (transformers modeling_bert.py
    eager_attention_forward: matmul, scale, add mask, softmax, dropout). Any score form. One query row (the
    first-token path) is multiplied by nn/reduce.py row_product, whose bits do not follow the batch."""
    scores = raw_scores(q, k, score)  # (B, H, Lq, L)
    if bias is not None:
        scores = scores.add_(bias)  # in place: memory-bound
    probs = torch.softmax(scores, dim=-1)
    if dropout_p > 0.0:
        probs = F.dropout(probs, p=dropout_p)
    return row_product(probs, v), probs


def sdpa(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | LocalBlocks | None, score: nn.Module,
         dropout_p: float) -> tuple[Tensor, None]:
    if isinstance(bias, LocalBlocks):
        q, k, scale = score.project(q, k)
        return local_sdpa(q, k, v, bias, scale, dropout_p), None
    if score.form == DISENTANGLED:  # DeBERTa's position terms depend on q and k: materialised into the bias
        terms = score.position_scores(q, k)  # (B, H, Lq, L); None for a config without relative attention
        if terms is not None:
            bias = terms if bias is None else bias + terms
    q, single = two_query_rows(q)
    q, k, scale = score.project(q, k)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p, scale=scale)
    return (out[..., :1, :] if single else out), None


# -- a local layer on sdpa: its queries by blocks, each against the keys in its reach --------------------------

# queries per block: the fastest of 32 / 64 / 128 for ModernBERT's window of 64 at 238-1024 tokens (torch 2.13's CPU
# flash kernel, 2 threads, on an AMD EPYC with AVX-512 and with AVX2 forced: at 644 tokens 2.3 / 2.9 / 4.3 ms a layer
# against 7.9 ms for the band mask over every key)
LOCAL_BLOCK = 32


@dataclass(frozen=True)
class LocalBlocks:
    """sdpa's mask for a local layer (|i - j| <= window) whose window is short against its sequences, on a CPU:
    the queries in blocks of LOCAL_BLOCK, block b's against the keys [b LOCAL_BLOCK - window, (b + 1) LOCAL_BLOCK +
    window) alone, under `bias`, instead of every key under a band mask: the same keys in each query's sum, in a
    fraction of the work (ModernBERT's local layers: 14 of 22 in the base model). Each block is an entry of one
    sdpa call's batch, computed alike whatever the rest of the batch is.

    bias:   (B * n, 1, LOCAL_BLOCK, LOCAL_BLOCK + 2 window) additive: within each block's keys, the band, the keys
            past either end of the sequence and its padding keys blocked (the dtype's most negative finite value,
            as masks.attention_bias)
    window: the layer's reach
    """

    bias: Tensor
    window: int

    @property
    def span(self) -> int:
        """The keys of a block: its queries' and the window on either side."""
        return LOCAL_BLOCK + 2 * self.window


def local_blocks(inputs: AttentionInputs) -> LocalBlocks | None:
    """A local layer's LocalBlocks where they pay (a padded batch on the CPU, every query, no causal kind, no relative
    bias, a mask of real keys at most, sequences longer than a block's keys by two blocks); None: the band mask."""
    layout, window = inputs.layout, inputs.window
    if (window is None or inputs.causal or inputs.relative is not None or inputs.queries != "all" or layout.packed
            or layout.length < 2 * window + 3 * LOCAL_BLOCK):
        return None
    keep = keep_mask(inputs.mask, layout.batch, layout.length)
    if keep is not None and (keep.is_floating_point() or keep.shape[1:3] != (1, 1)):
        return None  # an additive or a per-query mask: the band's way
    device = torch.device(keep.device if keep is not None else inputs.device or "cpu")
    if device.type != "cpu":
        return None
    B, L, n = layout.batch, layout.length, -(-layout.length // LOCAL_BLOCK)
    span = LOCAL_BLOCK + 2 * window  # LocalBlocks.span
    real = (keep.reshape(B, L) if keep is not None else torch.ones(1, L, dtype=torch.bool, device=device))
    real = F.pad(real, (window, n * LOCAL_BLOCK - L + window), value=False).unfold(1, span, LOCAL_BLOCK)  # (B|1, n, span)
    offsets = torch.arange(span, device=device)[None, :] - torch.arange(LOCAL_BLOCK, device=device)[:, None]
    band = (offsets >= 0) & (offsets <= 2 * window)  # (LOCAL_BLOCK, span): key slot j of query i, |i - j| <= window
    allowed = (real[:, :, None, :] & band).expand(B, n, LOCAL_BLOCK, span).reshape(B * n, 1, LOCAL_BLOCK, span)
    bias = torch.zeros(allowed.shape, dtype=inputs.dtype, device=device)
    return LocalBlocks(bias.masked_fill_(~allowed, torch.finfo(inputs.dtype).min), window)


def local_sdpa(q: Tensor, k: Tensor, v: Tensor, blocks: LocalBlocks, scale: float | None,
               dropout_p: float) -> Tensor:
    """softmax(q k^T scale + band) v for q, k, v (B, H, L, D), block by block (LocalBlocks): each block's keys and
    values copied out of the padded sequence (a strided view would cost sdpa a copy of its own), one sdpa call."""
    B, H, L, D = q.shape
    w, span = blocks.window, blocks.span
    n = blocks.bias.size(0) // B
    extra = n * LOCAL_BLOCK - L
    windows = lambda t: F.pad(t, (0, 0, w, extra + w)).unfold(2, span, LOCAL_BLOCK)  # noqa: E731  (B, H, n, D, span)
    kb, vb = (windows(t).permute(0, 2, 1, 4, 3).reshape(B * n, H, span, D) for t in (k, v))
    qb = F.pad(q, (0, 0, 0, extra)).view(B, H, n, LOCAL_BLOCK, D).transpose(1, 2).reshape(B * n, H, LOCAL_BLOCK, D)
    bias = blocks.bias.to(q.dtype)
    out = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=bias, dropout_p=dropout_p, scale=scale)
    return out.view(B, n, H, LOCAL_BLOCK, D).transpose(1, 2).reshape(B, H, n * LOCAL_BLOCK, D)[:, :, :L]


def sdpa_prepare(inputs: AttentionInputs) -> LocalBlocks | Tensor | None:
    """sdpa's mask: a local layer's LocalBlocks where they pay, else the additive bias."""
    blocks = local_blocks(inputs)
    return blocks if blocks is not None else additive_bias(inputs)


def two_query_rows(q: Tensor) -> tuple[Tensor, bool]:
    """(q, whether it was one query row) with a single query row (the first-token path: Lq = 1) given twice: torch's
    CPU attention runs one query row on another kernel, whose sums follow the batch (a sequence's output moved with
    the others in its batch, on an AMD EPYC); from two rows on, each sequence gets the same bits in any batch.
    The caller keeps the first row of the output."""
    if q.size(-2) != 1 or q.device.type != "cpu":
        return q, False
    return q.expand(*q.shape[:-2], 2, q.size(-1)), True


def additive_bias(inputs: AttentionInputs) -> Tensor | None:
    """What eager and sdpa read: an additive (B|1, H|1, Lq|1, L) bias, or None (attend everywhere):
    the mask's bias (with a local layer's window and a causal model's kind materialised in it) plus the relative-position bias
    materialised (masks.offset_bias)."""
    layout, dtype = inputs.layout, inputs.dtype
    bias = attention_bias(inputs.mask, layout.batch, layout.length, dtype, window=inputs.window,
                          causal=inputs.causal, device=inputs.device)
    if inputs.relative is not None:
        positions = offset_bias(inputs.relative.to(dtype), layout.length)  # (1, H, L, L)
        bias = positions if bias is None else bias + positions
    return first_query_only(bias) if inputs.queries == "first" else bias


@dataclass(frozen=True)
class Backend:
    """A row of the table. `run(q, k, v, mask, score, dropout_p) -> (output (B, H, Lq, D),
    probabilities (B, H, Lq, L) or None)`, where `mask` is what `prepare(inputs)` made of one forward's
    AttentionInputs (inputs.py), or None for a sequence attending everywhere. Every row takes every field:
    a family's relative bias by offset is added to the scores after scaling (eager and sdpa in their
    additive bias, flex in a score_mod); a local layer's window joins the user's mask (eager and sdpa
    materialise it in the bias; flex in its BlockMask, which skips the blocks out of reach)."""

    name: str
    run: Callable
    prepare: Callable[[AttentionInputs], Any]
    probabilities: bool = False  # returns attention probabilities
    packed: bool = False  # takes a packed row (layout.packed) as one call
    query_subset: bool = True  # takes queries="first" / "picked": some tokens' queries against all keys
    score_forms: frozenset[str] = frozenset({DOT})  # score_functions.py forms it runs
    dropout: bool = True  # applies attention dropout in training
    whole: bool = False  # the forward runs every token of every layer, padded (a recording row: whole maps)
    padded: bool = True  # takes padded batches (a row that does not never records: `recording` reads them)
    refuses: Callable[[AttentionInputs], str | None] | None = None  # why it cannot run a forward; None: never
    runs_on: Callable[[torch.device, torch.dtype], bool] | None = None  # whether it has a kernel there; None: always


BACKENDS: dict[str, Backend] = {
    "eager": Backend("eager", eager, additive_bias, probabilities=True,
                     score_forms=frozenset({DOT, OFFSET, DENSE, DISENTANGLED})),
    "sdpa": Backend("sdpa", sdpa, sdpa_prepare, score_forms=frozenset({DOT, DISENTANGLED})),
    "flex": Backend("flex", flex.run, flex.prepare, packed=True, query_subset=False,
                    score_forms=frozenset({DOT, OFFSET, DISENTANGLED}), dropout=False),
    "varlen": Backend("varlen", varlen.run, varlen.prepare, packed=True, dropout=False, padded=False,
                      refuses=varlen.refuses, runs_on=varlen.runs_on),
}


@functools.cache
def recording(row: Backend) -> Backend:
    """`row` under `capture`: beside its kernel, the eager formulas, each step recorded (scores_raw,
    scores_masked, probs). The output is the row's own (a capture changes no result), except where eager's
    formula makes it from the recorded probabilities (softmax(scores) @ v, dropout between as eager has it):
    where a patch (capture.patch) ran on the scores or probabilities, and under capture(detach=False), whose
    records are on the autograd graph: the recorded probabilities then get the output's gradient. Padded
    layout, every query (`whole`): every layer records full (B, H, L, L) maps."""

    def prepare(inputs: AttentionInputs):
        return row.prepare(inputs), additive_bias(inputs)

    def run(q: Tensor, k: Tensor, v: Tensor, prepared, score: nn.Module, dropout_p: float):
        value, bias = prepared if prepared is not None else (None, None)
        session = current()
        applied = session.applied if session is not None else 0
        scores = record("scores_raw", raw_scores(q, k, score))
        if bias is not None:
            scores = scores + bias.to(q.dtype)  # not in place: scores_raw is kept
        scores = record("scores_masked", scores)
        probs = record("probs", torch.softmax(scores, dim=-1))
        if session is not None and (session.applied != applied or not session.detach):
            # a patch ran on the scores / probabilities, or the records are kept on the graph (detach=False):
            # the output comes from the recorded probabilities, by eager's formula
            return torch.matmul(F.dropout(probs, p=dropout_p) if dropout_p > 0.0 else probs, v), probs
        return row.run(q, k, v, _matching(value, q), score, dropout_p)

    return replace(row, name=f"{row.name}+capture", run=run, prepare=prepare, packed=False, query_subset=False,
                   whole=True)


def choose_backend(requested: str, *, probabilities: bool, score_form: str, dropout: bool,
                   query_subset: bool) -> Backend:
    """The first row of (requested, sdpa, eager) that declares everything the call needs; under
    `capture`, that row's recording twin."""
    recording_now = capturing()
    for name in dict.fromkeys((requested, "sdpa", "eager")):
        row = BACKENDS[name]
        if ((row.probabilities or not probabilities) and score_form in row.score_forms
                and (row.dropout or not dropout) and (row.query_subset or not query_subset)
                and (row.padded or not recording_now)):
            return recording(row) if recording_now else row
    raise AssertionError("eager declares every capability")


# -- one forward's mask, and the one attention function ----------------------------------------------

class BackendFallbackWarning(UserWarning):
    """A forward asked of one attention backend ran on sdpa, the row having refused it (the message says why)."""


@dataclass(frozen=True)
class PreparedMask:
    """One forward's mask for one backend row, built once and read by every layer.

    value:        what the row's run() reads (None when `buckets` is set)
    buckets:      a packed row on a backend that takes padded batches only: each length bucket
                  (layout.Bucket) with what run() reads for it and, when its call attends some of its tokens'
                  queries only (queries="first" or "picked"), which (layout.BucketQueries; None: every token)
    head_scale:   (1, H, 1, 1), one layer's head mask (transformers v4's head_mask: each head's probabilities
                  times its entry, 0 silencing the head), or None
    """

    backend: Backend
    value: Any = None
    buckets: tuple[tuple[Bucket, Any, BucketQueries | None], ...] | None = None
    head_scale: Tensor | None = None


def prepare_mask(backend: Backend, inputs: AttentionInputs) -> PreparedMask:
    """One forward's mask on `backend`, from its AttentionInputs (inputs.py); on sdpa where the row refuses this
    forward (Backend.refuses), said once per reason unless the forward is a padded batch without padding (which
    sdpa runs as well as any row)."""
    reason = backend.refuses(inputs) if backend.refuses is not None else None
    if reason is not None:
        if inputs.layout.packed or inputs.mask is not None:
            warnings.warn(f"attn_backend={backend.name!r} ran this forward on sdpa: {reason}", BackendFallbackWarning,
                          stacklevel=4)  # the default filter shows each text once
        backend = BACKENDS["sdpa"]
    if inputs.layout.packed and not backend.packed:
        buckets = []
        calls = inputs.picked.buckets if inputs.queries == "picked" else ((b, None) for b in inputs.layout.buckets)
        for bucket, queries in calls:
            value = backend.prepare(replace(inputs, mask=bucket.keep, layout=padded(*bucket.keep.shape), picked=None))
            if inputs.queries == "first":  # each sequence's first token: q's rows are the sequences'
                queries = BucketQueries(bucket.sequences, bucket.sequences, 1)
            elif queries is not None:  # the picked tokens (layout.Layout.picked): their rows of the mask
                value = picked_rows(value, queries.positions)
            buckets.append((bucket, value, queries))
        return PreparedMask(backend, buckets=tuple(buckets))
    return PreparedMask(backend, backend.prepare(inputs))


def picked_rows(bias: Tensor | None, positions: Tensor) -> Tensor | None:
    """A bucket's additive bias (S|1, H|1, Lb|1, Lb) at its picked queries' rows, positions (S, Lq): (S, H|1, Lq, Lb);
    a bias of one row (the same for every query) as it is."""
    if bias is None or bias.size(2) == 1:
        return bias
    S, Lq = positions.shape
    bias = bias.expand(S, *bias.shape[1:])
    return bias.gather(2, positions[:, None, :, None].expand(S, bias.size(1), Lq, bias.size(3)))


def attention(q: Tensor, k: Tensor, v: Tensor, mask: PreparedMask, *, score: nn.Module | None = None,
              dropout_p: float = 0.0) -> tuple[Tensor, Tensor | None]:
    """softmax(score(Q, K) + mask) V for q (B, H, Lq, D) and k, v (B, H, L, D), on mask.backend.

    `score` is an alignment-score function (score_functions.py); None is the scaled dot product.
    Returns (output (B, H, Lq, D), probabilities (B, H, Lq, L) from eager, else None); both times the mask's
    head_scale where it has one.
    """
    score = score if score is not None else _SCALED_DOT
    row = mask.backend
    if mask.buckets is not None:
        out, probs = _by_bucket(row, q, k, v, mask, score, dropout_p), None
    else:
        out, probs = row.run(q, k, v, _matching(mask.value, q), score, dropout_p)
    if mask.head_scale is not None:
        # head_mask (transformers v4 BertSelfAttention: attention_probs * head_mask, then @ V): a head's
        # probabilities times m_h give m_h times its output, so every backend applies it to its output
        scale = mask.head_scale.to(out.dtype)
        out = out * scale
        probs = probs * scale if probs is not None else None
    return out, probs


def _matching(value: Any, q: Tensor) -> Any:
    """A prepared bias in q's dtype (e.g. an fp32 bias under autocast); anything else as it is."""
    return value.to(q.dtype) if isinstance(value, Tensor) and value.dtype != q.dtype else value


def _by_bucket(row: Backend, q: Tensor, k: Tensor, v: Tensor, mask: PreparedMask, score: nn.Module,
               dropout_p: float) -> Tensor:
    """A packed row, q (1, H, Tq, D) (Tq: T, B first tokens, or the picked ones) and k, v (1, H, T, D), attended as one padded
    batch per length bucket (layout.Bucket): no token sees another sequence. Returns (1, H, Tq, D), laid out
    token-major (as sdpa lays out its own output), so the output projection reads it without a copy."""
    _, H, Tq, D = q.shape
    tokens = lambda t: t[0].transpose(0, 1).reshape(t.size(2), H * D)  # noqa: E731  (T, H * D): a view of heads()'
    out = q.new_empty(Tq + 1, H * D)  # the last row takes the padding slots' outputs, then is dropped
    for bucket, value, queries in mask.buckets:
        S, L = bucket.keep.shape
        heads = lambda rows, n: rows.view(S, n, H, D).transpose(1, 2)  # noqa: E731  (S, H, n, D)
        kb, vb = (heads(tokens(t).index_select(0, bucket.gather), L) for t in (k, v))
        if queries is not None:  # some tokens' queries (the first, or the picked ones), into their rows of out
            qb = heads(tokens(q).index_select(0, queries.gather), queries.length)
            where = queries.scatter
        else:
            qb = heads(tokens(q).index_select(0, bucket.gather), L)
            where = bucket.scatter
        y = row.run(qb, kb, vb, _matching(value, qb), score, dropout_p)[0]  # (S, H, Lq, D)
        out.index_copy_(0, where, y.transpose(1, 2).reshape(-1, H * D))
    return out[:Tq].view(1, Tq, H, D).transpose(1, 2)
