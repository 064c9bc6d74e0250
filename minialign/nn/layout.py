"""How a batch's tokens lie in memory during one forward: padded (B, L) or packed into one row.

Built once per forward from the attention mask, then read by the embeddings, every layer and the
outputs (pattern: flash-attention `bert_padding.py`, `unpad_input` / `pad_input` computed once,
`cu_seqlens` handed down). A packed layout keeps `cu_seqlens` and the token indices on the
batch's device. Built from the mask alone, packing waits on the device (a host sync) a few times per forward,
each once: checking that the mask is right-padded (`masks.right_padded_lengths`), finding the real tokens
(`indices`: nonzero's output size), and only for the backends that read them, the lengths as Python
ints (`host_lengths`: eager and sdpa, which attend a packed row by length buckets, `buckets`) or each
token's sequence (`document`: flex's BlockMask). The Encoder adds its own, padded or packed: the
vocabulary check of the ids and, for a 2-D mask, whether it has any padding at all. Built from what the host
knows of a batch it collated (`HostBatch`: the lengths and the ids' range), none of these waits: every size is
known on the host, the lengths reach the device by one asynchronous copy, and the indices are computed there
(runtime/syncs.py counts the syncs of a forward; the tests count zero on this path).

Length buckets: a backend that takes padded batches but not packed rows (eager, sdpa) attends a packed
row in one call per bucket of sequences of about the same length, each sequence padded (its keys
masked) to `bucket_length` of its own length, never to its neighbours': so the number of calls does not
grow with the number of sequences (one per bucket, at most ~8 per doubling of length), and a sequence's
attention is the same computation, bit for bit, whatever it is batched with (pattern: flash-attention's
varlen entry point takes cu_seqlens; torch's CPU kernels have none, so the batch is regrouped instead).

Shapes: B batch, L padded length, T real tokens of the batch, C hidden size.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from minialign.nn.masks import right_padded_lengths

FINAL_TOKENS = ("all", "first")  # which tokens' final states a forward computes (Encoder.forward; or a (B, L) mask)
QUERIES = (*FINAL_TOKENS, "picked")  # a layer's queries (AttentionInputs.queries): "picked", a mask's tokens


def bucket_length(n: int) -> int:
    """The length a packed sequence of n tokens is attended at on a backend without packed rows (module
    docstring): n rounded up to a multiple of 8 below 128, then to one of 8 sizes per doubling (multiples of
    16 up to 256, of 32 up to 512, ...): at most 7 padding keys, or 12.5% of its length. A function of n
    alone, so the computation for a sequence never depends on the rest of its batch."""
    step = 1 << max(3, n.bit_length() - 4)
    return -(-n // step) * step


@dataclass(frozen=True)
class Bucket:
    """The sequences of a packed row attended in one call, each padded to `length` (bucket_length).

    sequences  (S,) their indices in the batch, ascending
    keep       (S, length) bool: True at a sequence's real tokens (its padding keys are masked)
    gather     (S * length,) the packed row's token at each slot; a padding slot reads its sequence's last
               token (any real value would do: it is masked, and its query's output is dropped)
    scatter    (S * length,) where each slot's output goes in the packed row: its token, or for a padding
               slot T (one row past the T tokens, dropped)
    """

    length: int
    sequences: Tensor
    keep: Tensor
    gather: Tensor
    scatter: Tensor


@dataclass(frozen=True)
class BucketQueries:
    """The queries a bucket's call attends when they are not its every token: each sequence's Lq query rows,
    the last repeated past its own (their outputs dropped).

    gather     (S * Lq,) each slot's row of the layer's queries (q's rows: the picked tokens, or the first ones)
    scatter    (S * Lq,) where each slot's output goes: its query's row, or one past the queries (dropped)
    positions  (S, Lq) each slot's position in its sequence (which row of the bucket's mask it reads); None for
               the first tokens (their mask's one row: masks.first_query_only)
    """

    gather: Tensor
    scatter: Tensor
    length: int  # Lq
    positions: Tensor | None = None


def host_tensor(values: Sequence[int], device: torch.device, dtype: torch.dtype = torch.long) -> Tensor:
    """Python ints as a tensor on `device`, copied without waiting: through pinned memory, asynchronously, to a
    CUDA device (a plain copy from pageable memory waits for the device's queue to drain)."""
    t = torch.tensor(values, dtype=dtype)
    if torch.device(device).type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def _bucket(length: int, sequences: list[int], lengths: list[int], starts: list[int], device) -> Bucket:
    own = host_tensor([lengths[i] for i in sequences], device)[:, None]  # (S, 1)
    first = host_tensor([starts[i] for i in sequences], device)[:, None]
    positions = torch.arange(length, device=device)[None, :]  # (1, length)
    keep = positions < own
    gather = first + torch.minimum(positions, own - 1)
    scatter = gather.masked_fill(~keep, starts[-1] + lengths[-1])
    return Bucket(length, host_tensor(sequences, device), keep, gather.flatten(), scatter.flatten())


@dataclass(frozen=True)
class HostBatch:
    """What the host knows of a right-padded (B, L) batch it built before copying it to the device (the batching
    engine, runtime/engine.py, collates on the CPU): each sequence's length and the range of the batch's ids. Given
    to the Encoder's forward (`host=`), the forward takes the layout (padded, or packed: `packed(mask, host)`), the
    packing indices, the cumulative lengths and the vocabulary check from these facts, and asks the device
    nothing: no host sync on a packed or padded forward (each sync drains the GPU's queue, and one makes CUDA
    graphs impossible).

    lengths:   (B,) real tokens of each sequence, each at least 1 (the mask's row i is lengths[i] ones, then zeros)
    ids_range: (lowest, highest) id of the (B, L) input_ids, padding included
    """

    lengths: tuple[int, ...]
    ids_range: tuple[int, int]

    @classmethod
    def of(cls, input_ids: Tensor, lengths: Sequence[int]) -> HostBatch:
        """The facts of a batch built on the CPU: `input_ids` (B, L) a CPU tensor (its min and max read there, no
        device involved), `lengths` each sequence's real tokens."""
        if input_ids.device.type != "cpu":
            raise ValueError(f"HostBatch.of reads the ids on the host: input_ids is on {input_ids.device}")
        lengths = tuple(int(n) for n in lengths)
        if len(lengths) != input_ids.size(0) or any(n < 1 or n > input_ids.size(1) for n in lengths):
            raise ValueError(f"HostBatch: lengths {lengths} do not fit a batch of shape {tuple(input_ids.shape)} "
                             f"(one per row, each 1..{input_ids.size(1)})")
        lo, hi = torch.aminmax(input_ids) if input_ids.numel() else (torch.tensor(0), torch.tensor(0))
        return cls(lengths, (int(lo), int(hi)))

    def check_vocabulary(self, vocab_size: int) -> None:
        """A ValueError naming an id outside [0, vocab_size), if the batch holds one (check_id_range)."""
        check_id_range(*self.ids_range, vocab_size)


def check_id_range(lo: int, hi: int, vocab_size: int) -> None:
    """A ValueError naming an id outside [0, vocab_size), for ids from lo to hi: the one wording of the vocabulary
    check (the Encoder's, models/encoder.py check_input_ids, and the engine's before its copy)."""
    if lo < 0 or hi >= vocab_size:
        raise ValueError(f"input_ids hold {lo if lo < 0 else hi}, outside the vocabulary [0, {vocab_size})")


class Layout:
    """A padded batch (B, L), or its real tokens packed end to end into one row (1, T)."""

    def __init__(self, batch: int, length: int, *, lengths: Tensor | None = None,
                 host: tuple[int, ...] | None = None):
        self.batch, self.length = batch, length
        self.lengths = lengths  # (B,) real tokens per sequence; None: padded layout
        self.host = host  # the same lengths as the host knows them (HostBatch.lengths), or None: read when needed
        if lengths is not None:
            self.cu_seqlens = torch.nn.functional.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0))  # (B + 1,)
            self.max_seqlen = max(host) if host else length  # exact from the host; else an upper bound, no sync
            self.tokens = sum(host) if host else None  # T, where the host knows it

    @property
    def packed(self) -> bool:
        return self.lengths is not None

    @property
    def span(self) -> int:
        """The most keys a query is attended against: the padded length, or for a packed row the longest
        bucket a sequence may be padded to (bucket_length of the padded length)."""
        return bucket_length(self.length) if self.packed else self.length

    @functools.cached_property
    def keep(self) -> Tensor:
        """(B, L) bool: True at real tokens (packed layouts only)."""
        positions = torch.arange(self.length, device=self.lengths.device)
        return positions[None, :] < self.lengths[:, None]

    @functools.cached_property
    def indices(self) -> Tensor:
        """(T,) positions of the real tokens in the flattened (B * L) batch: computed on the device from the
        host's T (token t of sequence b lies at b L + t - cu_seqlens[b]), or without it with one host sync
        (nonzero's output size); then every gather and scatter with it needs none."""
        if self.tokens is None:
            return torch.nonzero(self.keep.flatten(), as_tuple=True)[0]
        within = torch.arange(self.tokens, device=self.lengths.device) - self.cu_seqlens[self.document]
        return self.document * self.length + within

    @functools.cached_property
    def host_lengths(self) -> list[int]:
        """Sequence lengths as Python ints, for backends that split a packed row (one sync, unless the host
        gave them)."""
        return list(self.host) if self.host is not None else self.lengths.tolist()

    @functools.cached_property
    def buckets(self) -> tuple[Bucket, ...]:
        """The packed row's sequences grouped by bucket_length (module docstring), shortest bucket first."""
        lengths = self.host_lengths
        starts = [0]
        for n in lengths[:-1]:
            starts.append(starts[-1] + n)
        groups: dict[int, list[int]] = {}
        for i, n in enumerate(lengths):
            groups.setdefault(bucket_length(n), []).append(i)
        device = self.lengths.device
        return tuple(_bucket(length, groups[length], lengths, starts, device) for length in sorted(groups))

    @functools.cached_property
    def document(self) -> Tensor:
        """(T,) the sequence each packed token belongs to (one host sync: repeat_interleave's size, unless the
        host gave T)."""
        return torch.repeat_interleave(torch.arange(self.batch, device=self.lengths.device), self.lengths,
                                       output_size=self.tokens)

    def pack(self, t: Tensor) -> Tensor:
        """(B, L, ...) -> (1, T, ...) for a packed layout; unchanged for a padded one."""
        return t.flatten(0, 1)[self.indices][None] if self.packed else t

    def unpack(self, t: Tensor) -> Tensor:
        """(1, T, C) -> (B, L, C) with zeros at the padding; unchanged for a padded layout."""
        if not self.packed:
            return t
        out = t.new_zeros(self.batch * self.length, t.size(-1))
        return out.index_copy_(0, self.indices, t[0]).view(self.batch, self.length, -1)

    def picked(self, wanted: Tensor) -> Picked | None:
        """A packed row's tokens where `wanted` (B, L) bool is True, and their queries in calls of their own
        (Picked): what a last layer computing those tokens alone reads (Encoder.forward final_tokens as a mask).
        A sequence's queries are padded to bucket_length of their count and attended beside the sequences of its
        key bucket with as many (a call's query length a function of each sequence alone: torch's CPU attention
        gives a row other bits under another query length); a sequence with none wanted is in no call. None
        where no token is wanted. Read on the host (a sync per sequence: the CPU's path)."""
        lengths = self.host_lengths
        chosen = [torch.nonzero(row[:n], as_tuple=True)[0].tolist() for row, n in zip(wanted.bool(), lengths)]
        counts = [len(c) for c in chosen]
        if not any(counts):
            return None
        device = self.lengths.device
        first_row = [0, *itertools.accumulate(counts)][:-1]  # each sequence's first picked row
        first_token = [0, *itertools.accumulate(lengths)][:-1]  # each sequence's first token in the packed row
        groups: dict[tuple[int, int], list[int]] = {}
        for i, (n, c) in enumerate(zip(lengths, counts)):
            if c:
                groups.setdefault((bucket_length(n), bucket_length(c)), []).append(i)
        calls, dropped = [], sum(counts)  # the row past the picked ones: a padding slot's output
        for (length, queries), sequences in sorted(groups.items()):
            gather = [first_row[i] + min(j, counts[i] - 1) for i in sequences for j in range(queries)]
            scatter = [first_row[i] + j if j < counts[i] else dropped for i in sequences for j in range(queries)]
            positions = [chosen[i][min(j, counts[i] - 1)] for i in sequences for j in range(queries)]
            calls.append((_bucket(length, sequences, lengths, first_token, device),
                          BucketQueries(host_tensor(gather, device), host_tensor(scatter, device), queries,
                                        host_tensor(positions, device).view(len(sequences), queries))))
        tokens = host_tensor([first_token[i] + p for i, c in enumerate(chosen) for p in c], device)
        return Picked(tokens, tuple(calls))

    def first_tokens(self, t: Tensor) -> Tensor:
        """Each sequence's first token: (B, L, ...) -> (B, 1, ...); packed (1, T, ...) -> (1, B, ...)."""
        return t[:, self.cu_seqlens[:-1]] if self.packed else t[:, :1]

    def batch_first(self, t: Tensor) -> Tensor:
        """The output of `first_tokens` as (B, 1, ...), whatever the layout."""
        return t.transpose(0, 1) if self.packed else t


@dataclass(frozen=True)
class Picked:
    """Layout.picked: the picked tokens' rows of the packed row (Tq,), ascending, and the calls that attend their
    queries: each a bucket of sequences (Bucket: their keys) and its queries (BucketQueries)."""

    tokens: Tensor
    buckets: tuple[tuple[Bucket, BucketQueries], ...]

    def __call__(self, t: Tensor) -> Tensor:
        """(1, T, ...) -> the picked tokens (1, Tq, ...) (a layer's `queries`)."""
        return t[:, self.tokens]


def padded(batch: int, length: int) -> Layout:
    return Layout(batch, length)


def packed(attention_mask: Tensor, host: HostBatch | None = None) -> Layout:
    """The packed layout of a right-padded (B, L) mask (each row 1s then 0s, at least one 1); from the host's
    lengths of it where given (HostBatch: no host sync), else read from the mask."""
    if host is not None:
        return Layout(*attention_mask.shape, lengths=host_tensor(host.lengths, attention_mask.device),
                      host=host.lengths)
    lengths = right_padded_lengths(attention_mask) if attention_mask.dim() == 2 else None
    if lengths is None:
        raise ValueError("unpad=True needs a 2-D right-padded attention_mask (each row 1s then 0s)")
    return Layout(*attention_mask.shape, lengths=lengths)

