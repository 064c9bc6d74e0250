"""Late chunking's token work, for SentenceEncoder.encode_late_chunks (embeddings.py): which tokens a character span
holds, and a document past the window cut into overlapping windows whose token states are put back together.

Late chunking (Günther et al. 2024, "Late Chunking: Contextual Chunk Embeddings Using Long-Context Embedding
Models", arXiv:2409.04701): the document runs through the encoder once, and each chunk's embedding is the model's
pooling over the final states of the chunk's tokens, so that every chunk's tokens have read the whole document.

A span's tokens: the document's tokens (never the special tokens the tokenizer's template adds) whose character
range [start, end) (the tokenizer's offsets, on the text as given: a normalizer's changes are mapped back) overlaps
the span [a, b): start < b and end > a; a token with an empty range (start == end) belongs to the span holding its
start. A token that straddles two spans belongs to both. A span that holds no token (only spaces) is a ValueError.

Past the window ("long late chunking", the paper's section 3.1): the document's tokens (less the template's special
tokens) are cut into macro chunks of the window's room (the window less the special tokens), each starting
`overlap` tokens before the one before it ends; each runs as its own sequence with the special tokens around it. A
token's state is taken from the window in which it is farthest from a cut (an edge of the window that is not an
edge of the document), the earlier window on a tie: each overlap is split at its middle, so every token keeps at
least overlap // 2 tokens of context on a cut's side. A causal model's token reads only what comes before it, so a
later cut takes nothing from it: its state is the earliest window's that holds it (the most context before it). A
prompt leads every window, as the special tokens do (each window is then the input the model was trained on: the
prompt, then text), and belongs to no span. The leading special tokens' and the prompt's states are the first
window's, the trailing ones' the last window's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Document:
    """One document tokenized whole: ids and type ids with the template's special tokens, each token's character
    range, and how many special tokens lead and trail it."""

    ids: list[int]
    type_ids: list[int]
    offsets: Tensor  # (L, 2) int64: each token's [start, end) in the text
    template: Tensor  # (L,) bool: the special tokens the template adds (not the text's own)
    lead: int
    trail: int

    @classmethod
    def of(cls, encoding) -> Document:
        """From a tokenizers Encoding of the whole text, with its special tokens (sequence_ids None: the template's)."""
        template = torch.tensor([s is None for s in encoding.sequence_ids], dtype=torch.bool)
        lead = int(template.long().cumprod(0).sum())
        trail = int(template.flip(0).long().cumprod(0).sum()) if lead < len(template) else 0
        return cls(list(encoding.ids), list(encoding.type_ids),
                   torch.tensor(encoding.offsets, dtype=torch.long).reshape(-1, 2), template, lead, trail)

    def with_prompt(self, length: int) -> Document:
        """The same document with its prompt's tokens (the first text tokens whose range lies within the prompt's
        `length` characters: an empty one at its end is the text's, as span_masks counts it) counted among the
        leading ones, so that every window repeats them."""
        ranges = self.offsets[self.lead:len(self.ids) - self.trail].tolist()
        prompt = next((i for i, (start, end) in enumerate(ranges) if start >= length or end > length), len(ranges))
        return Document(self.ids, self.type_ids, self.offsets, self.template, self.lead + prompt, self.trail)

    @property
    def content(self) -> int:
        """How many tokens lie between the leading and the trailing special tokens."""
        return len(self.ids) - self.lead - self.trail


def check_spans(spans: Sequence, length: int) -> list[tuple[int, int]]:
    """The spans as (start, end) ints with 0 <= start < end <= length (the document's characters), or a ValueError
    naming the first bad one."""
    if isinstance(spans, (str, bytes)) or not isinstance(spans, Sequence):
        raise ValueError(f"spans must be a sequence of (start, end) character ranges, got {type(spans).__name__}")
    out = []
    for i, span in enumerate(spans):
        ok = (isinstance(span, Sequence) and not isinstance(span, str) and len(span) == 2
              and all(isinstance(x, int) and not isinstance(x, bool) for x in span))
        if not ok or not 0 <= span[0] < span[1] <= length:
            raise ValueError(f"spans[{i}] must be (start, end) ints with 0 <= start < end <= {length} (the "
                             f"document's length), got {span!r}")
        out.append((span[0], span[1]))
    return out


def span_masks(document: Document, spans: list[tuple[int, int]], *, shift: int = 0) -> Tensor:
    """(S, L) bool: span s's tokens (the module docstring's rule), the spans moved `shift` characters on (a prompt put
    before the document); a span holding no token is a ValueError naming it."""
    starts, ends = document.offsets[:, 0], document.offsets[:, 1]
    ends = torch.maximum(ends, starts + 1)  # an empty range counts at its start
    bounds = torch.tensor(spans, dtype=torch.long).reshape(-1, 2) + shift
    masks = (starts[None] < bounds[:, 1:]) & (ends[None] > bounds[:, :1]) & ~document.template[None]
    if not masks.any(dim=1).all():
        i = int((~masks.any(dim=1)).nonzero()[0])
        raise ValueError(f"spans[{i}] {spans[i]} holds no token (only spaces, or characters the tokenizer drops)")
    return masks


def check_overlap(overlap: int | None, room: int) -> int:
    """The overlap of consecutive windows in tokens: `overlap`, or by default a quarter of the window's room; an int
    in [0, room) or a ValueError."""
    if overlap is None:
        return room // 4
    if not isinstance(overlap, int) or isinstance(overlap, bool) or not 0 <= overlap < room:
        raise ValueError(f"overlap must be an int in [0, {room}) (the window's room for text: the window less its "
                         f"special tokens), got {overlap!r}")
    return overlap


def window_starts(n: int, room: int, overlap: int) -> list[int]:
    """Where each window's tokens start among the document's n tokens (less the special ones): windows of `room`
    tokens, each starting `overlap` tokens before the one before it ends, the last reaching the end."""
    starts, step = [0], room - overlap
    while starts[-1] + room < n:
        starts.append(starts[-1] + step)
    return starts


def owners(n: int, starts: list[int], room: int, *, causal: bool = False) -> tuple[Tensor, Tensor]:
    """For each of the n tokens (less the special ones): the window it takes its state from (the module docstring's
    rule: farthest from a cut, the earlier on a tie; causal: the earliest holding it) and its place within that
    window's tokens."""
    best = torch.full((n,), -1, dtype=torch.long)
    window, place = torch.zeros(n, dtype=torch.long), torch.zeros(n, dtype=torch.long)
    big = n + 1  # farther than any cut: a window edge that is the document's own edge
    for k, start in enumerate(starts):
        end = min(start + room, n)
        p = torch.arange(start, end)
        left = p - start if start > 0 else torch.full_like(p, big)
        right = end - 1 - p if end < n and not causal else torch.full_like(p, big)
        distance = torch.minimum(left, right)
        better = distance > best[start:end]
        best[start:end] = torch.where(better, distance, best[start:end])
        window[start:end] = torch.where(better, k, window[start:end])
        place[start:end] = torch.where(better, p - start, place[start:end])
    return window, place


def windows(document: Document, max_length: int, overlap: int | None) -> tuple[list[list[int]], list[list[int]],
                                                                              list[int]]:
    """The sequences to run for a document (ids, type ids): itself where it fits the window, else its windows (the
    module docstring), each with the template's special tokens; and where each window's tokens start."""
    lead, trail, n = document.lead, document.trail, document.content
    room = max_length - lead - trail
    if room < 1:
        raise ValueError(f"a window of {max_length} tokens leaves no room for text beside {lead + trail} special ones")
    overlap = check_overlap(overlap, room)  # checked where the document fits too: a call's options hold for any
    if len(document.ids) <= max_length:
        return [document.ids], [document.type_ids], [0]
    starts = window_starts(n, room, overlap)
    head, tail = slice(0, lead), slice(len(document.ids) - trail, len(document.ids))
    ids, types = [], []
    for start in starts:
        body = slice(lead + start, lead + min(start + room, n))
        ids.append(document.ids[head] + document.ids[body] + document.ids[tail])
        types.append(document.type_ids[head] + document.type_ids[body] + document.type_ids[tail])
    return ids, types, starts


def assemble(document: Document, states: list[Tensor], starts: list[int], max_length: int, *,
             causal: bool = False) -> Tensor:
    """(L, C): the document's token states from its windows' (each (L_k, C)), by the module docstring's rule."""
    if len(states) == 1:
        return states[0]
    lead, trail, n = document.lead, document.trail, document.content
    window, place = owners(n, starts, max_length - lead - trail, causal=causal)
    stacked = torch.nn.utils.rnn.pad_sequence(states, batch_first=True)  # (K, L_k, C)
    body = stacked[window, lead + place]  # (n, C)
    last = states[-1]
    return torch.cat([states[0][:lead], body, last[last.size(0) - trail:]])
