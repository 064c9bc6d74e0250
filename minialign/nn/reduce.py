"""Reductions over a sequence's tokens that give a row the same bits whatever padding its batch adds.

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
