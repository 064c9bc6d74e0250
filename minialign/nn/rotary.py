"""Rotary position embeddings (RoFormer; transformers' rotate_half convention, as ModernBERT's
modeling_modernbert.py ModernBertRotaryEmbedding and apply_rotary_pos_emb): each head's vector is
rotated by an angle of position * theta^(-2k / D) in the plane of its dimensions k and k + D/2.

Shapes: B batch, L tokens (a packed row: (1, T)), H heads, D head dim.
"""

from __future__ import annotations

import torch
from torch import Tensor


def rotary_tables(position_ids: Tensor, dim: int, theta: float, *,
                  inv_freq: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """(cos, sin), each (B, L, D) in float32, for positions (B, L): the angles of positions * inv_freq,
    duplicated over both halves (compute_default_rope_parameters; the forward's float32 product).
    `inv_freq` (D / 2,): a scaled rope's frequencies (linear_inv_freq), instead of theta's default ones."""
    if inv_freq is None:
        inv_freq = default_inv_freq(dim, theta, device=position_ids.device)
    freqs = position_ids[..., None].float() * inv_freq.to(position_ids.device)  # (B, L, D / 2)
    angles = torch.cat((freqs, freqs), dim=-1)  # (B, L, D)
    return angles.cos(), angles.sin()


def default_inv_freq(dim: int, theta: float, *, device: torch.device | None = None) -> Tensor:
    """(D / 2,) float32: theta^(-2k / D), k = 0 .. D/2 - 1 (modeling_rope_utils.py, the default rope type)."""
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float, device=device) / dim))


def linear_inv_freq(dim: int, theta: float, factor: float, *, device: torch.device | None = None) -> Tensor:
    """(D / 2,) float32: the default frequencies divided by `factor` (modeling_rope_utils.py
    _compute_linear_scaling_rope_parameters, rope_type "linear": positions stretched by factor).

    GTE's fixed NTK scaling (Alibaba-NLP/new-impl modeling.py NTKScalingRotaryEmbedding without mixed_b:
    1 / (base * s)^(2k / D), then divided by s^(2 / D)) is this with theta = base * s and factor = s^(2 / D),
    the same operations in the same order: how transformers' GTE port writes it (model_doc/gte.md, "a linear
    RopeParameters entry whose rope_theta is the base scaled by the NTK factor"; ntk_as_linear)."""
    return default_inv_freq(dim, theta, device=device) / factor


def ntk_as_linear(base: float, factor: float, dim: int) -> tuple[float, float]:
    """A fixed NTK scaling of `base` by `factor` (rope_scaling {"type": "ntk", "factor": s}, GTE's
    NTKScalingRotaryEmbedding) as the linear rope type's (theta, factor): (base * s, s^(2 / D))."""
    return base * factor, factor ** (2 / dim)


def rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (B, L, H, D) rotated by the tables (B, L, D): x cos + rotate_half(x) sin, in float32 and
    back to x's dtype (apply_rotary_pos_emb). Written half by half, x1 cos - x2 sin and x2 cos + x1 sin into
    x cos, which are rotate_half's products and sums to the bit without its negated copy and concatenation (a
    token's q and k of a layer: a fiftieth of the passes over memory)."""
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    xf = x.float()
    half = x.size(-1) // 2
    x1, x2 = xf[..., :half], xf[..., half:]
    out = xf * cos
    out[..., :half].sub_(x2 * sin[..., :half])
    out[..., half:].add_(x1 * sin[..., half:])
    return out.to(x.dtype)
