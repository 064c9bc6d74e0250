"""Attention masks. Convention: True (or non-zero) = attend, everywhere in minialign.

The user's mask, as every backend reads it (attention.py and flex.py both import these):

    keep_mask(mask, B, L)                  (B|1, 1|H, 1|L, L) bool: the accepted layouts, checked
    attention_bias(mask, B, L, dtype)      the same as an additive bias (0 attend, dtype's min blocked)
    window_keep(L, window, device)         (L, L) bool: key j within `window` of query i, |i - j| <= window
    causal_keep(L, device)                 (L, L) bool: key j at or before query i, j <= i (a causal model's kind)
    first_query_only(t)                    the first query row of a mask or bias
    offset_bias(by_offset, L)              (1, H, L, L) additive bias of key j for query i: by_offset[:, j - i]
    right_padded_lengths(mask)             (B,) lengths of a (B, L) mask of 1s then 0s, else None

Masks for experiments, in shapes the Encoder accepts:

    padding_mask(lengths, L)               (B, L)     real tokens
    left_only_mask(padding)                (B, L, L)  query i sees keys j <= i (causal), real keys only
    bidirectional_mask(padding)            (B, L, L)  every real key (the default, as a 3-D mask)
    segment_mask(token_type_ids, padding)  (B, L, L)  attention within a segment only
    pair_segments(input_ids, end_id)       (B, L)     0/1 segments of pairs whose token types are all 0 (RoBERTa's)
    custom_mask(fn, B, L)                  (B, L, L)  fn(b, i, j) -> bool, any rule
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor


# -- the user's mask ---------------------------------------------------------------------------------

def keep_mask(mask: Tensor | None, batch: int, length: int) -> Tensor | None:
    """The boolean (B|1, 1|H, 1|L, L) form of a user mask (a floating 4-D mask is returned as is).

    Accepted layouts (True / non-zero = attend):
      (B, L)            padding mask: key j of sequence b is a real token.
      (B, L, L)         per-pair mask: query i of sequence b may attend key j.
      (B|1, H|1, L, L)  bool: True = attend; integer: non-zero = attend;
                        floating: an additive bias used as given (0 = attend, very negative = blocked).
    """
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


def attention_bias(mask: Tensor | None, batch: int, length: int, dtype: torch.dtype, *, window: int | None = None,
                   causal: bool = False, device: torch.device | str | None = None) -> Tensor | None:
    """A user mask (any layout of `keep_mask`) as an additive bias broadcastable to (B, H, L, L).
    Blocked positions get the dtype's most negative finite value, as transformers' eager path does,
    so a fully blocked row gives a uniform distribution rather than NaN. `window`: keys farther than
    that from the query are blocked too (a local layer, `window_keep`); `causal`: keys after the query are
    blocked too (`causal_keep`); the band made on `device` (the mask's, when there is one); each position is
    blocked once, never min added twice (-inf)."""
    keep = keep_mask(mask, batch, length)
    where = keep.device if keep is not None else device
    band = None
    if window is not None and length - 1 > window:  # a window shorter than the sequence: the band blocks some
        band = window_keep(length, window, where)
    if causal and length > 1:
        band = causal_keep(length, where) if band is None else band & causal_keep(length, where)
    if band is not None:
        band = band[None, None]  # (1, 1, L, L)
        if keep is not None and keep.is_floating_point():
            return keep.to(dtype).masked_fill(~band, torch.finfo(dtype).min)
        keep = band if keep is None else keep & band
    if keep is None or keep.is_floating_point():
        return None if keep is None else keep.to(dtype)
    return torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill(~keep, torch.finfo(dtype).min)


def window_keep(length: int, window: int, device: torch.device | str | None = None) -> Tensor:
    """(L, L) bool: query i may attend key j iff |i - j| <= window (a local layer's band; ModernBERT's
    sliding_window_bidirectional_overlay in transformers masking_utils.py, window = local_attention // 2)."""
    positions = torch.arange(length, device=device)
    return (positions[None, :] - positions[:, None]).abs() <= window


def causal_keep(length: int, device: torch.device | str | None = None) -> Tensor:
    """(L, L) bool: query i may attend key j iff j <= i (transformers masking_utils.py causal_mask_function,
    the mask create_causal_mask builds for a decoder such as Qwen3Model). In a packed row each sequence is
    its own row of a bucket or its own document, so a token sees the earlier tokens of its own text only."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


def first_query_only(t: Tensor | None) -> Tensor | None:
    """Keep the first query row of a (B|1, H|1, L|1, L) mask or bias."""
    return t if t is None or t.size(2) == 1 else t[:, :, :1]


def offset_bias(by_offset: Tensor, length: int) -> Tensor:
    """The (1, H, L, L) additive bias whose entry (h, i, j) is by_offset[h, center + j - i], from one value
    per head and relative offset: by_offset (H, 2R + 1) covers offsets -R..R with R >= L - 1 (center R).
    A family's relative-position bias (MPNet's), materialised for the backends that add a bias."""
    center = (by_offset.size(-1) - 1) // 2
    positions = torch.arange(length, device=by_offset.device)
    return by_offset[:, positions[None, :] - positions[:, None] + center][None]  # (1, H, L, L)


def right_padded_lengths(mask: Tensor) -> Tensor | None:
    """Per-row lengths of a (B, L) mask whose rows are 1s then 0s (at least one 1); None for any other
    pattern. One host sync (the answer decides the layout)."""
    keep = mask.bool()
    lengths = keep.sum(1)
    prefix = torch.arange(mask.size(1), device=mask.device)[None, :] < lengths[:, None]
    return lengths if bool((keep == prefix).all() & (lengths > 0).all()) else None


# -- masks for experiments ---------------------------------------------------------------------------


def padding_mask(lengths: Sequence[int] | Tensor, length: int | None = None) -> Tensor:
    lengths = torch.as_tensor(lengths)
    length = int(lengths.max()) if length is None else length
    return torch.arange(length, device=lengths.device)[None, :] < lengths[:, None]


def bidirectional_mask(padding: Tensor) -> Tensor:
    padding = padding.bool()
    return padding[:, None, :].expand(-1, padding.size(1), -1).clone()


def left_only_mask(padding: Tensor) -> Tensor:
    """Causal: query i attends keys j <= i among real tokens. A pad query still attends the
    real keys before it, so no row is fully blocked."""
    length = padding.size(1)
    causal = torch.ones(length, length, dtype=torch.bool, device=padding.device).tril()
    return bidirectional_mask(padding) & causal


def segment_mask(token_type_ids: Tensor, padding: Tensor | None = None) -> Tensor:
    """Query i attends key j only within the same segment (e.g. chunk or claim of a pair)."""
    same = token_type_ids[:, :, None] == token_type_ids[:, None, :]
    return same & bidirectional_mask(padding) if padding is not None else same


def pair_segments(input_ids: Tensor, end_id: int) -> Tensor:
    """Segments of a pair read off its tokens, for tokenizers that type every token 0 (RoBERTa's
    `<s> A </s></s> B </s>`): 0 up to and including the first text's closing token `end_id`, 1 after it."""
    ends = (input_ids == end_id).long()
    return (ends.cumsum(1) - ends > 0).long()  # (B, L): an end token seen before this position


def custom_mask(fn: Callable[[int, int, int], bool], batch: int, length: int) -> Tensor:
    """Any rule, written per (sequence, query, key): fn(b, i, j) -> True to attend."""
    return torch.tensor([[[bool(fn(b, i, j)) for j in range(length)] for i in range(length)]
                         for b in range(batch)], dtype=torch.bool)
