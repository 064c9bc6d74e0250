"""Alignment-score functions: how much query i attends key j, before the mask and the softmax.

Each maps per-head queries and keys q, k (B, H, L, D) to raw scores e (B, H, Lq, L), has its own
parameters (one set per head), and is chosen per model by `Config.score_fn`. Pretrained BERT and
RoBERTa weights use the scaled dot product; the others are for models trained from scratch.

  scaled_dot  e_ij = q_i . k_j / sqrt(D)                      (Vaswani et al. 2017)
  (Dot)       e_ij = q_i . k_j, unscaled                      (T5's; a family's own, not a Config.score_fn name)
  general     e_ij = q_i^T W k_j                              (Luong et al. 2015, "general")
  bilinear    e_ij = (W q_i)^T (W k_j)                        (one W for both sides)
  additive    e_ij = v^T tanh(W1 q_i + W2 k_j)                (Bahdanau et al. 2015)
  location    e_ij = w_r^T q_i, r = clip(j - i, -R, R)        (Luong et al. 2015 "location",
                                                               made relative: one w per offset)

Each declares its `form`, which attention backends read to know whether they can run it:
  DOT     a dot product of transformed queries and keys (scaled_dot, general, bilinear): `project`
          gives (q', k', scale), so every backend runs it as ordinary attention
  OFFSET  a lookup by (query, clipped offset) (location): `by_offset`; flex runs it as a score_mod
  DENSE   a vector per (i, j) pair (additive): only the eager formula computes it
  DISENTANGLED  a dot product plus terms looked up by (token, bucket of the offset i - j), DeBERTa's
          content-to-position and position-to-content scores (models/deberta_v2.py): `project` gives
          the content part as DOT does, `position_scores(q, k)` the other terms materialised (B, H, Lq, L)
          (sdpa adds them to its bias), `position_tables(q, k)` them by bucket (flex's score_mod)
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
from torch import Tensor

from minialign.nn.choices import SCORE_FUNCTIONS  # noqa: F401  (Config.score_fn's names: re-exported)
from minialign.nn.reduce import row_product, token_sum

DOT, OFFSET, DENSE, DISENTANGLED = "dot", "offset", "dense", "disentangled"


class _DotOfProjections(nn.Module):
    """A score that is a dot product of transformed queries and keys: `project` gives (q', k', scale)."""

    form = DOT

    def project(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor, float]:
        raise NotImplementedError

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        q, k, scale = self.project(q, k)
        return row_product(q, k.transpose(-2, -1)) * scale


class ScaledDot(_DotOfProjections):
    """e_ij = q_i . k_j / sqrt(D). No parameters."""

    def project(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor, float]:
        return q, k, 1.0 / math.sqrt(q.size(-1))


class Dot(_DotOfProjections):
    """e_ij = q_i . k_j, unscaled (T5Attention: `self.scaling = 1.0`, the scale folded into the query weights'
    initialisation). No parameters; a family's own (models/t5.py), not a Config.score_fn choice."""

    def project(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor, float]:
        return q, k, 1.0


class General(_DotOfProjections):
    """e_ij = q_i^T W k_j, W (D, D) per head."""

    def __init__(self, heads: int, head_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(heads, head_dim, head_dim))

    def project(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor, float]:
        return row_product(q, self.weight), k, 1.0  # (q^T W) . k


class Bilinear(_DotOfProjections):
    """e_ij = (W q_i)^T (W k_j), W (D, D) per head, shared by queries and keys."""

    def __init__(self, heads: int, head_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(heads, head_dim, head_dim))

    def project(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor, float]:
        w = self.weight.transpose(-2, -1)  # row vectors: (W x)^T = x^T W^T
        return row_product(q, w), torch.matmul(k, w), 1.0


class Additive(nn.Module):
    """e_ij = v^T tanh(W1 q_i + W2 k_j), W1, W2 (A, D) and v (A,) per head, A = D."""

    form = DENSE

    def __init__(self, heads: int, head_dim: int):
        super().__init__()
        self.w_query = nn.Parameter(torch.empty(heads, head_dim, head_dim))
        self.w_key = nn.Parameter(torch.empty(heads, head_dim, head_dim))
        self.v = nn.Parameter(torch.empty(heads, head_dim))

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        wq = row_product(q, self.w_query.transpose(-2, -1))  # (B, H, Lq, A)
        wk = torch.matmul(k, self.w_key.transpose(-2, -1))  # (B, H, L, A)
        hidden = torch.tanh(wq[:, :, :, None, :] + wk[:, :, None, :, :])  # (B, H, Lq, L, A)
        # v . hidden summed over A in order (token_sum), not by einsum's batched product: the first-token path's
        # one query row got other bits as its batch grew that way
        return token_sum(hidden * self.v[:, None, None, :], dim=-1)


class Location(nn.Module):
    """e_ij = w_r^T q_i with r = clip(j - i, -R, R): depends on the query and the relative position
    only, not on the key's content. W (2R + 1, D) per head."""

    form = OFFSET

    def __init__(self, heads: int, head_dim: int, max_distance: int):
        super().__init__()
        self.max_distance = max_distance
        self.weight = nn.Parameter(torch.empty(heads, 2 * max_distance + 1, head_dim))

    def by_offset(self, q: Tensor) -> Tensor:
        """(B, H, Lq, 2R + 1): the score of query i for each clipped offset."""
        table = self.weight.transpose(-2, -1)  # (H, D, 2R + 1), small: one copy per sequence, not broadcast (torch's
        # matmul against a table broadcast over the batch gave a sequence other bits as its batch changed)
        return row_product(q, table.expand(*q.shape[:-2], *table.shape[-2:]).contiguous())

    def offsets(self, q_len: int, k_len: int, device) -> Tensor:
        i = torch.arange(q_len, device=device)[:, None]
        j = torch.arange(k_len, device=device)[None, :]
        return (j - i).clamp(-self.max_distance, self.max_distance) + self.max_distance  # (Lq, L)

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        table = self.by_offset(q)
        index = self.offsets(q.size(2), k.size(2), q.device).expand(*table.shape[:2], -1, -1)
        return torch.gather(table, -1, index)


# one module per name of choices.SCORE_FUNCTIONS, in its order (tests/nn/test_internals.py holds them equal)
SCORE_CLASSES: dict[str, type[nn.Module]] = {"scaled_dot": ScaledDot, "general": General, "bilinear": Bilinear,
                                              "additive": Additive, "location": Location}


def score_class(name: str) -> type[nn.Module]:
    try:
        return SCORE_CLASSES[name]
    except KeyError:
        raise ValueError(f"unknown score function {name!r}; choose from {SCORE_FUNCTIONS}") from None


def score_form(name: str) -> str:
    """The form of the score function `name` (what the attention backends read to know whether they run it)."""
    return score_class(name).form


def make_score_function(name: str, heads: int, head_dim: int, max_distance: int) -> nn.Module:
    cls = score_class(name)
    if cls is ScaledDot:
        return ScaledDot()
    if cls is Location:
        return Location(heads, head_dim, max_distance)
    return cls(heads, head_dim)
