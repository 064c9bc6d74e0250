"""One forward's inputs, built once and handed down as one object (pattern: transformers masking_utils.py,
`create_bidirectional_mask` once per forward, then handed on to every layer).

  AttentionInputs  what a backend's `prepare` reads to build one forward's mask (attention.py Backend): the
                   user's mask, the layout, the queries, and what a family adds to the scores (a relative bias
                   by offset, a local layer's window). A new need of one family is a field here, never another
                   parameter of every backend.
  ForwardInputs    what a family's `layer_inputs` reads to build the keyword arguments of its layers (rotary
                   tables, DeBERTa's relative embeddings and convolution mask): the user's mask, the layout and
                   the positions in it.

Shapes: B batch, L sequence length (a packed batch is one row of T tokens), H heads, R the largest offset.
Mask convention: True / 1 = attend (masks.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from minialign.nn.layout import QUERIES, Layout, Picked


@dataclass(frozen=True)
class AttentionInputs:
    """One forward's mask request, for one layer (or all the layers sharing a window).

    mask:      the user's mask, any layout of masks.keep_mask (None: every token attends every key)
    layout:    padded or packed (layout.py)
    dtype:     the dtype of the scores a bias is added to
    num_heads: H
    queries:   "all"; "first": each sequence's first token alone; "picked": the tokens of `picked` alone (a packed row's:
               layout.Layout.picked)
    relative:  a family's relative-position bias, one value per head and offset j - i ((H, 2R + 1), offsets
               -R..R, R >= L - 1), added to the scores after scaling (MPNet's); None: none
    window:    a local layer's reach, keys j with |i - j| <= window only, on top of the mask; None: every key
    causal:    a causal model's kind: keys j <= i only, on top of the mask and the window (masks.causal_keep); in a
               packed row causal within each sequence
    device:    where a mask made from nothing but the window lives (the batch's)
    """

    mask: Tensor | None
    layout: Layout
    dtype: torch.dtype
    num_heads: int
    queries: str = "all"
    relative: Tensor | None = None
    window: int | None = None
    device: torch.device | None = None
    causal: bool = False
    picked: Picked | None = None  # queries="picked" on a packed row: the picked tokens, each bucket's queries over them
    # (a bucket's own padded batch is prepared with queries="picked" and no `picked`: every row of its mask)

    def __post_init__(self):
        if self.queries not in QUERIES:
            raise ValueError(f"queries must be one of {QUERIES}, got {self.queries!r}")


@dataclass(frozen=True)
class ForwardInputs:
    """One forward's batch as the Encoder holds it once its decisions are made (models/encoder.py), what a
    family's `layer_inputs` reads.

    attention_mask: the user's mask (None: no padding)
    layout:         padded (B, L) or packed (1, T)
    position_ids:   in the layout: (B, L) padded, (1, T) packed
    """

    attention_mask: Tensor | None
    layout: Layout
    position_ids: Tensor


def sequence_positions(input_ids: Tensor) -> Tensor:
    """(B, L): 0, 1, ..., L - 1 in every row, the positions of a right-padded batch (every family's default
    position_ids: BERT's position_ids buffer, the rotary families' forward)."""
    return torch.arange(input_ids.size(1), device=input_ids.device).expand_as(input_ids)
