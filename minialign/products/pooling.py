"""Pooling: token states -> one vector per sequence. Every mode, its formula, and its name in TEI.

The modes are sentence-transformers' (sentence_transformers/models/Pooling.py, `pooling_mode`), with
its formulas; several modes are concatenated in the order given. convert/sbert.py only reads the
names from a Pooling module's config.json; this module says which it knows and what each computes.
A Pooling module with include_prompt=false leaves the prompt's tokens out: `pool(..., prompt_length=n)`
takes the first n positions out of the mask before any mode runs, as its `_exclude_prompt_from_mask`
does (how n is counted is products/embeddings.py's `prompt_length`).
TEI reports the pooling of an embedding model in GET /info under its own names
(text-embeddings-inference router/src/lib.rs, Pool: cls, mean, splade, last_token).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import Tensor

from minialign import convert
from minialign.nn.reduce import token_sum


def _cls(hidden: Tensor, mask: Tensor) -> Tensor:  # the first token the mask keeps (none kept: the first)
    return hidden[torch.arange(hidden.size(0), device=hidden.device), mask.int().argmax(dim=1)]


def _max(hidden: Tensor, mask: Tensor) -> Tensor:
    return hidden.masked_fill(mask.unsqueeze(-1) == 0, float("-inf")).max(dim=1).values


def _mean(hidden: Tensor, mask: Tensor, *, sqrt: bool = False) -> Tensor:
    keep = mask.unsqueeze(-1).to(hidden.dtype)  # (B, L, 1)
    count = keep.sum(dim=1).clamp(min=1e-9)  # whole numbers: exact in any order
    return token_sum(hidden * keep) / (count.sqrt() if sqrt else count)


def _weighted_mean(hidden: Tensor, mask: Tensor) -> Tensor:  # token i (1-based) weighs i
    positions = torch.arange(1, hidden.size(1) + 1, device=hidden.device, dtype=hidden.dtype)
    weights = mask.unsqueeze(-1).to(hidden.dtype) * positions[None, :, None]  # (B, L, 1)
    return token_sum(hidden * weights) / weights.sum(dim=1).clamp(min=1e-9)


def _last_token(hidden: Tensor, mask: Tensor) -> Tensor:  # the last token the mask keeps (none kept: zeros)
    kept, from_end = mask.flip(1).max(dim=1)  # (B,), (B,)
    last = torch.where(kept == 0, 0, hidden.size(1) - 1 - from_end)
    rows = torch.arange(hidden.size(0), device=hidden.device)
    return hidden[rows, last] * mask[rows, last].unsqueeze(-1).to(hidden.dtype)


# mode -> (B, C) from token states (B, L, C) under a right-padded (B, L) mask of real tokens
MODES: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "cls": _cls,
    "max": _max,
    "mean": _mean,
    "mean_sqrt_len_tokens": lambda hidden, mask: _mean(hidden, mask, sqrt=True),
    "weightedmean": _weighted_mean,
    "lasttoken": _last_token,
}
TEI_NAMES = {"cls": "cls", "mean": "mean", "lasttoken": "last_token"}  # the modes TEI has, by its names


def check(modes: Sequence[str]) -> list[str]:
    """The modes as a list, or a ValueError naming the unknown ones."""
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise ValueError(f"pooling mode(s) {unknown or '(none)'} not supported; supported: {', '.join(MODES)}")
    return list(modes)


def read(where: str | Path | convert.Files, folder: str = "") -> list[str]:
    """The modes of a sentence-transformers Pooling module (convert.read_pooling's arguments), in the
    order their outputs are concatenated; a mode this module lacks is a CheckpointError naming it."""
    modes = convert.read_pooling(where, folder)
    try:
        return check(modes)
    except ValueError as e:
        raise convert.CheckpointError(f"Pooling module {folder or '.'} of {where}: {e}") from None


def pool(hidden: Tensor, mask: Tensor, modes: Sequence[str], *, prompt_length: int = 0) -> Tensor:
    """(B, C x len(modes)): each mode's vector, concatenated in order. prompt_length: the first tokens
    of every row (a prompt and the special token before it) are left out; a row with nothing left
    pools as sentence-transformers' padded path does (cls: the first token; mean, lasttoken: zeros)."""
    if prompt_length:
        mask = mask.clone()
        mask[:, :prompt_length] = 0  # right padding: a row's tokens start at position 0
    return torch.cat([MODES[mode](hidden, mask) for mode in modes], dim=-1)


def final_tokens(modes: Sequence[str], *, prompt_length: int = 0) -> str:
    """What the encoder's last layer must compute (Encoder.forward final_tokens): CLS pooling reads
    the first token only, unless a prompt is left out (then it reads the first token after it)."""
    return "first" if list(modes) == ["cls"] and not prompt_length else "all"


def tei_name(modes: Sequence[str]) -> str:
    """The pooling as TEI's /info names it; modes TEI lacks keep their own name, several join with +."""
    return "+".join(TEI_NAMES.get(mode, mode) for mode in modes)
