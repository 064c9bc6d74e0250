"""Rotary position embeddings (RoFormer; transformers' rotate_half convention, as ModernBERT's
modeling_modernbert.py ModernBertRotaryEmbedding and apply_rotary_pos_emb): each head's vector is
rotated by an angle of position * theta^(-2k / D) in the plane of its dimensions k and k + D/2.

Shapes: B batch, L tokens (a packed row: (1, T)), H heads, D head dim.
"""

from __future__ import annotations

import torch
from torch import Tensor


def rotary_tables(position_ids: Tensor, dim: int, theta: float) -> tuple[Tensor, Tensor]:
    """(cos, sin), each (B, L, D) in float32, for positions (B, L): the angles of positions * inv_freq,
    duplicated over both halves (compute_default_rope_parameters; the forward's float32 product)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float, device=position_ids.device) / dim))
    freqs = position_ids[..., None].float() * inv_freq  # (B, L, D / 2)
    angles = torch.cat((freqs, freqs), dim=-1)  # (B, L, D)
    return angles.cos(), angles.sin()


def rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (B, L, H, D) rotated by the tables (B, L, D): x cos + rotate_half(x) sin, in float32 and
    back to x's dtype (apply_rotary_pos_emb)."""
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    xf = x.float()
    return (xf * cos + rotate_half(xf) * sin).to(x.dtype)
