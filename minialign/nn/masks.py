"""Masks for experiments. Convention: True = attend; shapes the Encoder accepts.

    padding_mask(lengths, L)               (B, L)     real tokens
    left_only_mask(padding)                (B, L, L)  query i sees keys j <= i (causal), real keys only
    bidirectional_mask(padding)            (B, L, L)  every real key (the default, as a 3-D mask)
    segment_mask(token_type_ids, padding)  (B, L, L)  attention within a segment only
    custom_mask(fn, B, L)                  (B, L, L)  fn(b, i, j) -> bool, any rule
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor


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


def custom_mask(fn: Callable[[int, int, int], bool], batch: int, length: int) -> Tensor:
    """Any rule, written per (sequence, query, key): fn(b, i, j) -> True to attend."""
    return torch.tensor([[[bool(fn(b, i, j)) for j in range(length)] for i in range(length)]
                         for b in range(batch)], dtype=torch.bool)
