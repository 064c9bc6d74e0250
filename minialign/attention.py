"""Attention masks and the one attention function, with a backend chosen at construction.

Shapes: B batch, H heads, L sequence length, D head dim.
Mask convention: True (or non-zero) = attend. See `attention_bias` for the accepted layouts.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

BACKENDS = ("eager", "sdpa")


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
    if mask is None:
        return None
    if not isinstance(mask, Tensor):
        raise TypeError(f"attention_mask must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dim() == 4:
        b, h, q, k = mask.shape
        if b not in (1, batch) or q != length or k != length:
            raise ValueError(f"4-D attention_mask must be (B|1, H|1, {length}, {length}) with B={batch}, "
                             f"got {tuple(mask.shape)}")
        if mask.is_floating_point():
            return mask.to(dtype)
        keep = mask.bool()
    elif mask.dim() == 3:
        if tuple(mask.shape) != (batch, length, length):
            raise ValueError(f"3-D attention_mask must be ({batch}, {length}, {length}), got {tuple(mask.shape)}")
        keep = mask.bool()[:, None, :, :]  # (B, 1, L, L)
    elif mask.dim() == 2:
        if tuple(mask.shape) != (batch, length):
            raise ValueError(f"2-D attention_mask must be ({batch}, {length}), got {tuple(mask.shape)}")
        keep = mask.bool()[:, None, None, :]  # (B, 1, 1, L)
    else:
        raise ValueError(f"attention_mask must have 2, 3 or 4 dims, got shape {tuple(mask.shape)}")
    return torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill(~keep, torch.finfo(dtype).min)


def attention(
    q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, *,
    backend: str = "sdpa", dropout_p: float = 0.0, need_probs: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """softmax(Q K^T / sqrt(D) + bias) V, for q, k, v of shape (B, H, L, D).

    Returns (output (B, H, L, D), probabilities (B, H, L, L) or None). Probabilities come only from
    the eager backend, which is what `need_probs=True` selects.
    """
    scale = 1.0 / math.sqrt(q.size(-1))
    if need_probs or backend == "eager":
        # transformers modeling_bert.py eager_attention_forward: matmul, scale, add mask, softmax, dropout.
        scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # (B, H, L, L)
        if bias is not None:
            scores = scores + bias
        probs = torch.softmax(scores, dim=-1)
        if dropout_p > 0.0:
            probs = F.dropout(probs, p=dropout_p)
        return torch.matmul(probs, v), probs
    if backend == "sdpa":
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p, scale=scale)
        return out, None
    raise ValueError(f"unknown attention backend {backend!r}; choose from {BACKENDS}")
