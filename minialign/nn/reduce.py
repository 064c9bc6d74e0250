"""Reductions over a sequence's tokens that give a row the same bits whatever padding its batch adds, and the
one-row product whose bits do not follow the batch either.

Shapes: B batch, L tokens (right-padded), C features.
"""

from __future__ import annotations

import torch
from torch import Tensor


def token_sum(x: Tensor, dim: int = 1) -> Tensor:
    """(B, L, C) -> (B, C): each row's sum over its tokens (the axis `dim`; MaxSim's per-query-token maxima: the last),
    in token order, so that a row's sum does not depend on
    how much padding its batch gives it (padding rows of x are zeros). `x.sum(dim=1)` does depend on it: torch's
    CPU reduction splits the L axis into a tree whose shape follows L, and a row summed alone and the same row
    padded to a longer batch got other bits (1 ulp, 14 of 50 random rows; the rotary families' batch tests caught
    it in mean pooling). The CPU cumsum is a serial scan, in which the padding's zeros come after the last real
    token and change nothing (a GPU's scan is parallel: no such promise there). Half-precision rows are summed in
    float32 and rounded once, as torch's sum accumulates them (a bf16 scan rounds at every token: EuroBERT's "late"
    pooling in bf16 on an H200 was 7x transformers' own error that way)."""
    if x.dtype in (torch.bfloat16, torch.float16):
        return x.float().cumsum(dim=dim).select(dim, -1).to(x.dtype)
    return x.cumsum(dim=dim).select(dim, -1)


def row_product(a: Tensor, b: Tensor) -> Tensor:
    """a @ b; where `a` is one row per matrix on the CPU, (..., 1, K) @ (..., K, N), each element summed over K in
    order (a serial scan, as token_sum), so a sequence gets the same bits whatever else its batch holds. torch's
    batched CPU matmul of one- or two-row operands does not promise that: a DeBERTa-v2 sequence's first-token
    attention (the classifier path's last layer, query rows 1-2, keys 56) got other bits in a bucket of 5 sequences
    than alone (its content scores and, with the position table broadcast, its c2p terms; tests/products/
    test_zero_shot.py caught it). Costs one (..., K, N) temporary: a key-sized tensor for attention's scores.
    Half precision is summed in float32 and rounded once. Other shapes, or another device: torch.matmul."""
    if a.size(-2) != 1 or a.device.type != "cpu":
        return torch.matmul(a, b)
    terms = a.transpose(-1, -2) * b  # (..., K, N)
    if terms.dtype in (torch.bfloat16, torch.float16):
        return terms.float().cumsum(dim=-2)[..., -1:, :].to(terms.dtype)
    return terms.cumsum(dim=-2)[..., -1:, :]  # (..., 1, N)
