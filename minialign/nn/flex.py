"""FlexAttention: the flex backend's row (`run`, `prepare`; attention.py's BACKENDS declares what it
can do), the compiled kernel, and the BlockMasks that describe our masks to it.

A BlockMask lists, per query block, which key blocks to visit: "full" blocks (no masking
inside, so the kernel skips the mask function) and "partial" ones (mask_mod decides per
element). Padding and document masks are built directly from the lengths in O(blocks^2) tensor
work; any other boolean mask goes through create_block_mask with a lookup mask_mod.
(torch.nn.attention.flex_attention; "FlexAttention: The Flexibility of PyTorch with the
Performance of FlashAttention", PyTorch blog, 2024.)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn.attention.flex_attention import BlockMask, create_block_mask
from torch.nn.attention.flex_attention import flex_attention as _flex_attention

from minialign.nn.layout import Layout
from minialign.nn.masks import keep_mask, right_padded_lengths
from minialign.nn.score_functions import OFFSET

BLOCK = 128
RECOMPILE_LIMIT = 64  # shapes per process before flex falls back to the unfused path


@functools.cache
def _compiled():
    # Compiled on first use, never at import: torch.compile turns flex_attention into a fused kernel.
    # Static shapes: inductor's CPU flex template fails to build with dynamic ones (torch 2.13), so
    # each new shape compiles once; callers bucket lengths to keep the shapes few.
    return torch.compile(_flex_attention, dynamic=False)


def flex_attention(q: Tensor, k: Tensor, v: Tensor, *, block_mask: BlockMask | None = None,
                   score_bias: Tensor | None = None, scale: float | None = None,
                   location: tuple[Tensor, int] | None = None, relative: Tensor | None = None) -> Tensor:
    """Fused attention for q (B, H, Lq, D), k, v (B, H, L, D) under a BlockMask and/or an additive
    bias. `location` = (scores by offset (B, H, Lq, 2R + 1), R) replaces the dot product with
    location-based scores (scores.Location), looked up by the clipped offset j - i. `relative`
    (H, 2R + 1): a relative-position bias by offset j - i (attention.Backend), added to the scores;
    in a packed row j - i is the offset inside a sequence for every pair the BlockMask keeps, and the
    clamp keeps the lookup in the table for the pairs it drops."""
    score_mod = _score_mod(location, relative, score_bias)
    with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
        return _compiled()(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)


def _score_mod(location: tuple[Tensor, int] | None, relative: Tensor | None, score_bias: Tensor | None):
    """flex_attention's score_mod for these terms; None when there are none (the plain scaled dot product)."""
    if location is None and relative is None and score_bias is None:
        return None
    table, r = location if location is not None else (None, 0)
    center = (relative.size(-1) - 1) // 2 if relative is not None else 0

    def score_mod(score, b, h, q_idx, kv_idx):
        if table is not None:
            score = table[b, h, q_idx, (kv_idx - q_idx).clamp(-r, r) + r]
        if relative is not None:
            score = score + relative[h, (kv_idx - q_idx).clamp(-center, center) + center]
        if score_bias is not None:
            score = score + score_bias[b, h, q_idx, kv_idx]
        return score
    return score_mod


@dataclass(frozen=True)
class FlexMask:
    """What the flex backend reads: a BlockMask (None: attend everywhere) and an additive bias
    added by a score_mod (floating user masks)."""

    block_mask: BlockMask | None = None
    score_bias: Tensor | None = None  # (B, H, L, L)
    relative: Tensor | None = None  # (H, 2R + 1): a relative-position bias by offset (attention.Backend)


# -- the backend's row: run and prepare, with the signatures of attention.py's Backend -------------------

def run(q: Tensor, k: Tensor, v: Tensor, mask: FlexMask | None, score: nn.Module,
        dropout_p: float) -> tuple[Tensor, None]:
    """Flex's `run`: q (B, H, Lq, D), k, v (B, H, L, D) -> (B, H, Lq, D); a DOT score as ordinary
    attention on its projected queries and keys, an OFFSET score as a score_mod (no dropout)."""
    if mask is None:
        mask = FlexMask()
    if score.form == OFFSET:
        return flex_attention(q, k, v, block_mask=mask.block_mask, score_bias=mask.score_bias,
                              location=(score.by_offset(q), score.max_distance), relative=mask.relative), None
    q, k, scale = score.project(q, k)
    return flex_attention(q, k, v, block_mask=mask.block_mask, score_bias=mask.score_bias, scale=scale,
                          relative=mask.relative), None


def prepare(mask: Tensor | None, layout: Layout, queries: str, dtype: torch.dtype, num_heads: int,
            relative: Tensor | None = None) -> FlexMask:
    """Flex's `prepare`, one forward's FlexMask (every query: flex declares no query subset): a document
    mask for a packed layout, a padding mask for a right-padded 2-D mask, a score_mod bias for a
    floating mask, a looked-up BlockMask for any other boolean one; `relative` kept for the score_mod."""
    relative = relative.to(dtype) if relative is not None else None
    if layout.packed:
        return FlexMask(document_block_mask(layout.document), relative=relative)
    B, L = layout.batch, layout.length
    keep = keep_mask(mask, B, L)
    if keep is None:
        return FlexMask(relative=relative)
    if keep.is_floating_point():
        return FlexMask(score_bias=keep.to(dtype).expand(B, num_heads, L, L), relative=relative)
    lengths = right_padded_lengths(mask) if mask.dim() == 2 else None
    if lengths is not None:
        return FlexMask(padding_block_mask(lengths, L, L), relative=relative)
    return FlexMask(boolean_block_mask(keep.expand(-1, -1, L, L), B, L), relative=relative)


def _block_mask(partial: Tensor, full: Tensor, mask_mod, q_len: int, kv_len: int) -> BlockMask:
    """From (B, 1, Qb, Kb) booleans: key blocks needing mask_mod, and key blocks fully visible."""
    def lists(blocks: Tensor) -> tuple[Tensor, Tensor]:
        count = blocks.sum(-1, dtype=torch.int32)
        order = torch.argsort((~blocks).to(torch.int8), dim=-1, stable=True).to(torch.int32)
        return count, order

    kv_num, kv_idx = lists(partial)
    full_num, full_idx = lists(full)
    return BlockMask.from_kv_blocks(kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=BLOCK, mask_mod=mask_mod,
                                    seq_lengths=(q_len, kv_len))


def _block_starts(length: int, device) -> tuple[Tensor, Tensor]:
    starts = torch.arange(0, length, BLOCK, device=device)
    return starts, starts + BLOCK  # ends may run past the sequence; such blocks count as partial


def padding_block_mask(lengths: Tensor, q_len: int, kv_len: int) -> BlockMask:
    """Key j of sequence b is visible iff j < lengths[b] (right padding), for every query."""
    lengths = lengths.to(torch.int64)

    def mask_mod(b, h, q_idx, kv_idx):
        return kv_idx < lengths[b]

    starts, ends = _block_starts(kv_len, lengths.device)
    n_q = -(-q_len // BLOCK)
    visible = starts[None, :] < lengths[:, None]  # (B, Kb)
    full = ends[None, :] <= lengths[:, None]
    expand = lambda t: t[:, None, None, :].expand(-1, 1, n_q, -1)  # noqa: E731
    return _block_mask(expand(visible & ~full), expand(full), mask_mod, q_len, kv_len)


def document_block_mask(document: Tensor) -> BlockMask:
    """A packed row of T tokens: token i sees token j iff both belong to the same sequence.
    `document` (T,) holds non-decreasing sequence indices."""
    length = document.numel()

    def mask_mod(b, h, q_idx, kv_idx):
        return document[q_idx] == document[kv_idx]

    padded = torch.nn.functional.pad(document, (0, -length % BLOCK), value=-1)  # -1: no sequence
    blocks = padded.view(-1, BLOCK)
    real = blocks >= 0
    first = torch.where(real, blocks, blocks.new_full((), 2**62)).amin(-1)
    last = blocks.amax(-1)
    overlap = (first[:, None] <= last[None, :]) & (first[None, :] <= last[:, None])  # (Qb, Kb)
    single = (first == last) & real.all(-1)  # a whole block inside one sequence
    full = single[:, None] & single[None, :] & (first[:, None] == first[None, :])
    return _block_mask((overlap & ~full)[None, None], full[None, None], mask_mod, length, length)


def boolean_block_mask(keep: Tensor, batch: int, length: int) -> BlockMask:
    """Any boolean mask (B|1, H|1, L, L): True = attend. A mask without a head axis is shared by
    every head (the BlockMask broadcasts over heads)."""
    heads = keep.size(1)
    keep = keep.expand(batch, heads, length, length)

    if heads == 1:
        def mask_mod(b, h, q_idx, kv_idx):
            return keep[b, 0, q_idx, kv_idx]
    else:
        def mask_mod(b, h, q_idx, kv_idx):
            return keep[b, h, q_idx, kv_idx]

    return create_block_mask(mask_mod, batch, heads, length, length, device=keep.device)
