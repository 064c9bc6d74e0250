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

from minialign.nn.inputs import AttentionInputs
from minialign.nn.masks import causal_keep, keep_mask, right_padded_lengths, window_keep
from minialign.nn.score_functions import DISENTANGLED, OFFSET

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
                   location: tuple[Tensor, int] | None = None, relative: Tensor | None = None,
                   disentangled: tuple[Tensor | None, Tensor | None, Tensor] | None = None) -> Tensor:
    """Fused attention for q (B, H, Lq, D), k, v (B, H, L, D) under a BlockMask and/or an additive
    bias. `location` = (scores by offset (B, H, Lq, 2R + 1), R) replaces the dot product with
    location-based scores (scores.Location), looked up by the clipped offset j - i. `relative`
    (H, 2R + 1): a relative-position bias by offset j - i (attention.Backend), added to the scores;
    in a packed row j - i is the offset inside a sequence for every pair the BlockMask keeps, and the
    clamp keeps the lookup in the table for the pairs it drops. `disentangled` = (by query (B, H, Lq, R'),
    by key (B, H, L, R'), row (2M + 1,)): DeBERTa's c2p / p2c terms (score_functions.DISENTANGLED), the
    query's and the key's entry at row[i - j + M] added (M >= L - 1: every pair of the row has one)."""
    score_mod = _score_mod(location, relative, score_bias, disentangled)
    head_dim, least = q.size(-1), min_head_dim(q.device)
    if head_dim < least:  # zeros added to q and k leave every dot product as it was; v's extra columns are cut off
        scale = head_dim ** -0.5 if scale is None else scale  # the kernel's default would read the padded width
        q, k, v = (nn.functional.pad(t, (0, least - head_dim)) for t in (q, k, v))
    with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
        out = _compiled()(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)
    return out[..., :head_dim] if head_dim < least else out


def min_head_dim(device: torch.device) -> int:
    """The narrowest head the compiled kernel takes on `device`: inductor's CUDA flex template refuses
    q / k / v narrower than 16 ("NYI: embedding dimension of the query, key, and value must be at least 16",
    torch/_inductor/kernel/flex/flex_attention.py; seen on an H200 with torch 2.11, scripts/gpu_suite.sh),
    so narrower heads (tiny test models, some distilled encoders) are padded to it; the CPU template has no
    such floor."""
    return 16 if device.type == "cuda" else 0


def _score_mod(location: tuple[Tensor, int] | None, relative: Tensor | None, score_bias: Tensor | None,
               disentangled: tuple[Tensor | None, Tensor | None, Tensor] | None = None):
    """flex_attention's score_mod for these terms; None when there are none (the plain scaled dot product)."""
    if location is None and relative is None and score_bias is None and disentangled is None:
        return None
    table, r = location if location is not None else (None, 0)
    center = (relative.size(-1) - 1) // 2 if relative is not None else 0
    by_query, by_key, rows = disentangled if disentangled is not None else (None, None, None)
    middle = (rows.numel() - 1) // 2 if rows is not None else 0

    def score_mod(score, b, h, q_idx, kv_idx):
        if table is not None:
            score = table[b, h, q_idx, (kv_idx - q_idx).clamp(-r, r) + r]
        if relative is not None:
            score = score + relative[h, (kv_idx - q_idx).clamp(-center, center) + center]
        if score_bias is not None:
            score = score + score_bias[b, h, q_idx, kv_idx]
        if by_query is not None:
            score = score + by_query[b, h, q_idx, rows[q_idx - kv_idx + middle]]
        if by_key is not None:
            score = score + by_key[b, h, kv_idx, rows[q_idx - kv_idx + middle]]
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
    disentangled = (*score.position_tables(q, k), score.index) if score.form == DISENTANGLED else None
    q, k, scale = score.project(q, k)
    return flex_attention(q, k, v, block_mask=mask.block_mask, score_bias=mask.score_bias, scale=scale,
                          relative=mask.relative, disentangled=disentangled), None


def prepare(inputs: AttentionInputs) -> FlexMask:
    """Flex's `prepare`, one forward's FlexMask (every query: flex declares no query subset): a document
    mask for a packed layout, a padding mask for a right-padded 2-D mask, a score_mod bias for a
    floating mask, a looked-up BlockMask for any other boolean one; the relative bias kept for the score_mod.
    The window (a local layer's |i - j| <= window) joins each BlockMask: the blocks out of its reach are
    not visited; on a floating mask it is blocked in the bias. A causal model's kind (keys j <= i) joins them
    alike (`causal_prepare`)."""
    mask, layout, dtype, window = inputs.mask, inputs.layout, inputs.dtype, inputs.window
    relative = inputs.relative.to(dtype) if inputs.relative is not None else None
    if window is not None and layout.length - 1 <= window:
        window = None  # the band covers every pair
    if inputs.causal:
        return causal_prepare(inputs, window, relative)
    if layout.packed:
        return FlexMask(document_block_mask(layout.document, window), relative=relative)
    B, L = layout.batch, layout.length
    keep = keep_mask(mask, B, L)
    if keep is None:
        return FlexMask(window_block_mask(L, window, inputs.device), relative=relative) if window is not None \
            else FlexMask(relative=relative)
    if keep.is_floating_point():
        bias = keep.to(dtype)
        if window is not None:
            bias = bias.masked_fill(~window_keep(L, window, keep.device), torch.finfo(dtype).min)
        return FlexMask(score_bias=bias.expand(B, inputs.num_heads, L, L), relative=relative)
    lengths = right_padded_lengths(mask) if mask.dim() == 2 else None
    if lengths is not None:
        return FlexMask(padding_block_mask(lengths, L, L, window), relative=relative)
    if window is not None:
        keep = keep & window_keep(L, window, keep.device)
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


def _window_blocks(q_len: int, kv_len: int, window: int, device) -> tuple[Tensor, Tensor]:
    """(Qb, Kb) booleans for the band |i - j| <= window: blocks holding some pair within it (visible), and
    blocks every pair of which is within it and inside the keys (full)."""
    q0, q_end = _block_starts(q_len, device)
    k0, k_end = _block_starts(kv_len, device)
    q1, k1 = q_end - 1, k_end - 1  # last index of each block (may run past the sequence)
    nearest = torch.maximum(k0[None, :] - q1[:, None], q0[:, None] - k1[None, :]).clamp(min=0)
    farthest = torch.maximum((k1[None, :] - q0[:, None]).abs(), (q1[:, None] - k0[None, :]).abs())
    return nearest <= window, (farthest <= window) & (k_end <= kv_len)[None, :]


def _and(first, second):
    """The mask_mod of both (second None: first)."""
    if second is None:
        return first

    def mask_mod(b, h, q_idx, kv_idx):
        return first(b, h, q_idx, kv_idx) & second(b, h, q_idx, kv_idx)
    return mask_mod


def _band_mod(window: int | None):
    """A local layer's mask_mod, |q_idx - kv_idx| <= window (masks.window_keep); None: no window."""
    if window is None:
        return None

    def mask_mod(b, h, q_idx, kv_idx):
        return within(q_idx, kv_idx, window)
    return mask_mod


def within(q_idx: Tensor, kv_idx: Tensor, window: int) -> Tensor:
    """|q_idx - kv_idx| <= window, as two comparisons: inductor's CPU flex kernel (torch 2.13) computes
    `(q_idx - kv_idx).abs()` wrongly once the mask_mod also indexes a tensor by b (tests/models/test_modernbert.py)."""
    return ((q_idx - kv_idx) <= window) & ((kv_idx - q_idx) <= window)


def window_block_mask(length: int, window: int, device) -> BlockMask:
    """Every sequence of `length` tokens: query i sees key j iff |i - j| <= window; the blocks out of
    reach are never visited."""
    visible, full = _window_blocks(length, length, window, device)
    return _block_mask((visible & ~full)[None, None], full[None, None], _band_mod(window), length, length)


def padding_block_mask(lengths: Tensor, q_len: int, kv_len: int, window: int | None = None) -> BlockMask:
    """Key j of sequence b is visible iff j < lengths[b] (right padding), for every query; with a
    `window`, only if also |i - j| <= window, for real queries: a padding query sees every real key, as
    without a window (one out of every real key's reach would see none, and flex's output for an empty
    row poisons the next layer's values; padding rows' outputs are discarded)."""
    lengths = lengths.to(torch.int64)

    def mask_mod(b, h, q_idx, kv_idx):
        return kv_idx < lengths[b]

    def near_or_padding(b, h, q_idx, kv_idx):
        return within(q_idx, kv_idx, window) | (q_idx >= lengths[b])

    starts, ends = _block_starts(kv_len, lengths.device)
    n_q = -(-q_len // BLOCK)
    visible = starts[None, :] < lengths[:, None]  # (B, Kb)
    full = ends[None, :] <= lengths[:, None]
    expand = lambda t: t[:, None, None, :].expand(-1, 1, n_q, -1)  # noqa: E731
    visible, full = expand(visible), expand(full)  # (B, 1, Qb, Kb)
    if window is None:
        return _block_mask(visible & ~full, full, mask_mod, q_len, kv_len)
    near, inside = _window_blocks(q_len, kv_len, window, lengths.device)
    q_starts, q_ends = _block_starts(q_len, lengths.device)
    padding_queries = q_ends[None, :] > lengths[:, None]  # (B, Qb): the block holds a padding query
    visible, full = visible & (near | padding_queries[:, None, :, None]), full & inside
    return _block_mask(visible & ~full, full, _and(mask_mod, near_or_padding), q_len, kv_len)


def document_block_mask(document: Tensor, window: int | None = None, *, causal: bool = False) -> BlockMask:
    """A packed row of T tokens: token i sees token j iff both belong to the same sequence (and, with a
    `window`, |i - j| <= window: a sequence's tokens are contiguous, so that is its own offset; `causal`: and
    j <= i, so a token sees the earlier tokens of its own sequence). `document` (T,) holds non-decreasing
    sequence indices."""
    length = document.numel()

    def same(b, h, q_idx, kv_idx):
        return document[q_idx] == document[kv_idx]
    mask_mod = _and(same, _band_mod(window))
    if causal:
        mask_mod = _and(mask_mod, _causal_mod)

    padded = torch.nn.functional.pad(document, (0, -length % BLOCK), value=-1)  # -1: no sequence
    blocks = padded.view(-1, BLOCK)
    real = blocks >= 0
    first = torch.where(real, blocks, blocks.new_full((), 2**62)).amin(-1)
    last = blocks.amax(-1)
    overlap = (first[:, None] <= last[None, :]) & (first[None, :] <= last[:, None])  # (Qb, Kb)
    single = (first == last) & real.all(-1)  # a whole block inside one sequence
    full = single[:, None] & single[None, :] & (first[:, None] == first[None, :])
    if window is not None:
        near, inside = _window_blocks(length, length, window, document.device)
        overlap, full = overlap & near, full & inside
    if causal:
        before, inside = _causal_blocks(length, length, document.device)
        overlap, full = overlap & before, full & inside
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


# -- the causal kind (a decoder's mask: key j <= query i) ----------------------------------------------------

def causal_prepare(inputs: AttentionInputs, window: int | None, relative: Tensor | None) -> FlexMask:
    """Flex's `prepare` for a causal model: a packed row as documents each causal within itself, no mask as the
    causal band's BlockMask, a floating mask as a bias with the later keys blocked, any other boolean mask (a
    padding mask, right or left) looked up with the later keys dropped; the window joins each. A query left with no
    key at all (a left padding query: no real key at or before it) is given itself, as flex's output for an empty
    row poisons the next layer's values (that row's output is discarded)."""
    mask, layout, dtype = inputs.mask, inputs.layout, inputs.dtype
    if layout.packed:
        return FlexMask(document_block_mask(layout.document, window, causal=True), relative=relative)
    B, L = layout.batch, layout.length
    keep = keep_mask(mask, B, L)
    device = keep.device if keep is not None else inputs.device
    band = causal_keep(L, device)
    if window is not None:
        band = band & window_keep(L, window, device)
    if keep is None:
        return FlexMask(causal_block_mask(L, window, device), relative=relative)
    if keep.is_floating_point():
        bias = keep.to(dtype).masked_fill(~band, torch.finfo(dtype).min)
        return FlexMask(score_bias=bias.expand(B, inputs.num_heads, L, L), relative=relative)
    keep = keep & band
    keep = keep | (~keep.any(-1, keepdim=True) & torch.eye(L, dtype=torch.bool, device=device))
    return FlexMask(boolean_block_mask(keep, B, L), relative=relative)


def _causal_blocks(q_len: int, kv_len: int, device) -> tuple[Tensor, Tensor]:
    """(Qb, Kb) booleans for j <= i: blocks holding some such pair (visible), and blocks every pair of which is one
    and inside the keys (full)."""
    q0, q_end = _block_starts(q_len, device)
    k0, k_end = _block_starts(kv_len, device)
    visible = k0[None, :] <= (q_end - 1)[:, None]
    full = ((k_end - 1)[None, :] <= q0[:, None]) & (k_end <= kv_len)[None, :]
    return visible, full


def _causal_mod(b, h, q_idx, kv_idx):
    return kv_idx <= q_idx


def causal_block_mask(length: int, window: int | None, device) -> BlockMask:
    """Every sequence of `length` tokens: query i sees key j iff j <= i (and |i - j| <= window, with one); the
    blocks after the diagonal are never visited."""
    visible, full = _causal_blocks(length, length, device)
    if window is not None:
        near, inside = _window_blocks(length, length, window, device)
        visible, full = visible & near, full & inside
    return _block_mask((visible & ~full)[None, None], full[None, None], _and(_causal_mod, _band_mod(window)),
                       length, length)
