"""The batching engine every runner uses: texts in, results out in input order.

    engine = BatchEngine(tokenizer, batch_size=32, max_tokens=2048, packed=True)
    results = engine.run(inputs, forward)   # inputs: texts, or (text, pair) tuples

What it does, once for any model: identical inputs are run once; each distinct text is tokenized
once (Tokenizer.encode_ids: a long context shared by many pairs is read once); inputs are sorted by length (longest first) and cut into batches of at most `batch_size` sequences and at
most `max_tokens` tokens as run (packed: real tokens; padded: rows x longest); each batch is padded
to its own longest sequence (rounded up to a multiple of `bucket`, for compiled models); `forward`
gets the padded tensors on the device and returns one row of results per sequence; the rows come
back in input order, with the number of tokens each input lost to the window. A forward whose results differ
in shape from one sequence to the next (one vector per token) returns a list instead, one entry per sequence
(a tensor, or a dict of named tensors), and gets a list back in input order (`ragged`). A sequence longer
than the budget runs in a batch of its own. With workers > 1 the batches run in that many model
processes (process_pool.py) and are merged the same way. The counts of what the window cut are
reported by `Truncation` (one TruncationWarning per call, or per run of many calls).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from minialign.runtime.memory import release_free_memory
from minialign.text.tokenizer import pad
from minialign.runtime.process_pool import WorkerPool, ragged
from minialign.runtime.threads import intra_op_threads, threads_now, usable_threads

if TYPE_CHECKING:
    from minialign.text.tokenizer import Encoded, Tokenizer

CPU_BATCH_TOKENS = 2048  # default token budget on CPU, where smaller matmuls stay in cache (BENCHMARKS.md)


@dataclass
class Results:
    values: Tensor | list  # (N, ...) what forward returned for each input, in input order (float32, CPU); a
    # ragged forward's: a list of N entries (tensor or dict of tensors; floating ones float32), an input repeated
    # getting a copy of its own
    truncated: Tensor  # (N,) int64: tokens each input lost to the window


def _copy(entry):
    """A ragged forward's entry (a tensor or a dict of tensors), copied."""
    return {k: v.clone() for k, v in entry.items()} if isinstance(entry, dict) else entry.clone()


def positive_int(name: str, value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


class OversubscribedWarning(UserWarning):
    """More worker processes than the CPUs this process may use."""


class BatchEngine:
    def __init__(self, tokenizer: Tokenizer, *, batch_size: int = 32, max_tokens: int = 65536, packed: bool = True,
                 bucket: int = 1, max_length: int | None = None, device: str | torch.device = "cpu",
                 truncation: str = "only_first", workers: int = 1, threads: int | None = None):
        """packed: the forward runs real tokens only (unpad=True), so the budget counts real tokens.
        bucket: round each batch's length up to a multiple of it (compiled models see few shapes).
        truncation: how pairs are cut to max_length (Tokenizer.encode).
        workers: model processes on the CPU (process_pool.py). threads: the forwards' intra-op threads, set for each
        batch here and restored after, or shared out among the workers (threads // workers each, at least 1);
        None (default): up to threads.usable_threads() (the CPUs this process may use), one fewer for each other
        process's runnable thread, decided before each batch (threads.threads_now; workers take a fixed share)."""
        for name, value in (("batch_size", batch_size), ("max_tokens", max_tokens), ("workers", workers)):
            positive_int(name, value)
        self.tokenizer = tokenizer
        self.batch_size, self.max_tokens, self.packed, self.bucket = batch_size, max_tokens, packed, bucket
        self.max_length = max_length or tokenizer.model_max_length
        self.device = torch.device(device)
        self.truncation = truncation
        self.workers = workers
        self.adaptive = threads is None  # threads.threads_now before each batch, up to usable_threads()
        self.threads = usable_threads() if threads is None else positive_int("threads", threads)
        if workers > 1 and self.device.type != "cpu":
            raise ValueError(f"workers > 1 runs CPU processes; the model is on {self.device}")
        if workers > 1 and workers > (cpus := usable_threads()):
            # a warning, not a refusal: the count is this process's share (affinity, quota) when it starts, and a
            # user may know the machine better (a quota raised later, a measured I/O-bound load); workers beyond
            # the CPUs wait on each other at every operator's barrier (threads.py, BENCHMARKS.md "Busy machines")
            warnings.warn(f"workers={workers} on {cpus} usable CPU(s) (this process's affinity and CPU quota): the "
                          f"workers would share them and wait on each other, many times slower; pick workers <= "
                          f"{cpus} (1 with threads={cpus} is usually fastest)", OversubscribedWarning, stacklevel=2)
        self._pool: WorkerPool | None = None

    @classmethod
    def for_model(cls, tokenizer: Tokenizer, model: torch.nn.Module, *, max_tokens: int | None = None,
                  **options) -> BatchEngine:
        """An engine on the model's device, with the default token budget of that device."""
        device = next(model.parameters()).device
        if max_tokens is None:
            max_tokens = CPU_BATCH_TOKENS if device.type == "cpu" else 65536
        return cls(tokenizer, max_tokens=max_tokens, device=device, **options)

    def set_budget(self, *, max_tokens: int | None = None, batch_size: int | None = None) -> None:
        """Change the most tokens and sequences of a batch (None: keep)."""
        if max_tokens is not None:
            self.max_tokens = positive_int("max_tokens", max_tokens)
        if batch_size is not None:
            self.batch_size = positive_int("batch_size", batch_size)

    def __getstate__(self) -> dict:  # what a worker process receives with its runner: no pool of its own
        return {**self.__dict__, "_pool": None, "workers": 1, "threads": max(1, self.threads // self.workers),
                "adaptive": False}  # a worker keeps its share: its siblings are the other runnable processes

    def in_this_process(self) -> BatchEngine:
        """A copy that runs every batch in this process (one worker, no pool) on this engine's own thread policy
        (adaptive stays adaptive: a worker's fixed share, __getstate__, is for a worker)."""
        engine = copy.copy(self)
        engine.workers, engine._pool = 1, None
        engine.threads, engine.adaptive = self.threads, self.adaptive
        return engine

    def close(self) -> None:
        """Stop the worker processes, if any (a later run starts new ones)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def run(self, inputs: Sequence[Hashable], forward: Callable[[dict[str, Tensor]], Tensor | list], *,
            progress: bool | str = False, batch_size: int | None = None,
            constants: dict[str, int] | None = None, max_length: int | None = None) -> Results:
        """forward(batch) -> (b, ...) results for the b sequences of the batch, or a list of b entries (a
        ragged forward: the module docstring). Returns every input's row, in input order, on the CPU. progress:
        a tqdm bar over batches (a string is its label). batch_size: this run's most sequences per batch
        (default: the engine's). constants: values every batch of this run carries beside its tensors, under
        their names (a per-call option forward reads, such as the length of a prompt pooling leaves out); they
        travel to worker processes with it. max_length: this run's window (default: the engine's)."""
        unique: dict[Hashable, int] = {}
        where = torch.tensor([unique.setdefault(x, len(unique)) for x in inputs], dtype=torch.long)
        encoded = self.tokenize(list(unique), max_length=max_length)
        results = self.run_encoded(encoded, forward, progress=progress, batch_size=batch_size, constants=constants)
        if isinstance(results.values, list):  # an input repeated gets a copy of its entry, as indexing a tensor gives
            values, seen = [], set()
            for i in where.tolist():
                values.append(_copy(results.values[i]) if i in seen else results.values[i])
                seen.add(i)
        else:
            values = results.values[where] if len(where) else results.values
        return Results(values, results.truncated[where] if len(where) else results.truncated)

    def run_encoded(self, encoded: Encoded, forward: Callable[[dict[str, Tensor]], Tensor | list], *,
                    progress: bool | str = False, batch_size: int | None = None,
                    constants: dict[str, int] | None = None) -> Results:
        """`run` over sequences tokenized already (Encoded: ids, type ids, tokens each lost), each run as it is (no
        deduplication): a runner that cuts texts its own way (TokenClassifier's overlapping windows)."""
        ids, types = encoded.ids, encoded.type_ids
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]), reverse=True)
        batches = self.batches(order, [len(t) for t in ids],
                               self.batch_size if batch_size is None else positive_int("batch_size", batch_size))
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(batches), desc=progress if isinstance(progress, str) else "batches", unit="batch",
                       leave=False)
        results = None
        extra = constants or {}
        for index, out in self.execute(forward, ((i, {**self.collate(b, ids, types), **extra})
                                                 for i, b in enumerate(batches))):
            if isinstance(out, list):  # ragged: one entry per sequence
                if results is None:
                    results = [None] * len(ids)
                for i, entry in zip(batches[index], out, strict=True):
                    results[i] = ragged(entry)
            else:
                out = out.float().cpu()
                if results is None:
                    results = out.new_empty((len(ids), *out.shape[1:]))
                results[batches[index]] = out
            if bar is not None:
                bar.update()
        if bar is not None:
            bar.close()
        release_free_memory()  # the batches' freed tensors: a long-running process plateaus (memory.py)
        if results is None:
            return Results(torch.empty(0), torch.empty(0, dtype=torch.long))
        return Results(results, torch.tensor(encoded.truncated, dtype=torch.long))

    def execute(self, forward, batches):
        """(index, forward(batch)) for each (index, batch): here, or in the worker processes."""
        if self.workers == 1:
            return self._here(forward, batches)
        if self._pool is None or self._pool.forward != forward:
            self.close()
            self._pool = WorkerPool(forward, self.workers, threads=max(1, self.threads // self.workers))
        return self._pool.map(batches)

    def _here(self, forward, batches):
        """The batches in this process, on the engine's threads: fixed, or by default as many as are free now
        (runtime/threads.threads_now), decided again before each batch."""
        cpu = self.device.type == "cpu"
        for index, batch in batches:
            threads = (threads_now(self.threads) if self.adaptive else self.threads) if cpu else None
            with intra_op_threads(threads):
                out = forward(batch)
            yield index, out

    def tokenize(self, inputs: list, *, max_length: int | None = None):
        """Encoded ids of texts or (text, pair) tuples, under the tokenizer's truncation rule, cut to
        max_length (default: the engine's window)."""
        # a run's own window may pass the engine's (a multi-vector encoder's document_length): its runner keeps it
        # within the model's positions
        max_length = self.max_length if max_length is None else positive_int("max_length", max_length)
        pairs = sum(isinstance(x, tuple) for x in inputs)
        if 0 < pairs < len(inputs):
            raise ValueError(f"inputs mix {pairs} (text, pair) tuples with {len(inputs) - pairs} single texts; "
                             f"run them separately")
        if pairs:
            return self.tokenizer.encode_ids([a for a, _ in inputs], [b for _, b in inputs], max_length=max_length,
                                            truncation=self.truncation)
        return self.tokenizer.encode_ids(inputs, max_length=max_length)

    def batches(self, order: list[int], lengths: list[int], batch_size: int) -> list[list[int]]:
        """Consecutive runs of `order` (longest first) within the count and the token budget."""
        batches, current, tokens = [], [], 0
        for i in order:
            n = lengths[i]
            grown = tokens + n if self.packed else max(lengths[current[0]] if current else 0, n) * (len(current) + 1)
            if current and (len(current) == batch_size or grown > self.max_tokens):
                batches.append(current)
                current, grown = [], n
            current.append(i)
            tokens = grown
        return batches + [current] if current else batches

    def collate(self, batch: list[int], ids: list[list[int]], types: list[list[int]]) -> dict[str, Tensor]:
        longest = max(len(ids[i]) for i in batch)
        length = min(-(-longest // self.bucket) * self.bucket, max(self.max_length, longest))
        tensors = pad([ids[i] for i in batch], [types[i] for i in batch], pad_id=self.tokenizer.pad_token_id,
                      length=length, token_types=self.tokenizer.return_token_type_ids)
        return {k: v.to(self.device) for k, v in tensors.items()}


class TruncationWarning(UserWarning):
    """Text was cut by the model's window (as the original each runner matches cuts it)."""


@dataclass
class Truncation:
    """What the window cut: inputs cut, inputs seen, tokens lost; counted over one call or many (a file
    job adds each block's and warns once at the end). `what` names the inputs, `original` what cuts them
    the same way, `details` whether the runner's return_details holds each one's count."""

    window: int
    what: str = "(chunk, sentence) pair(s)"
    original: str = "the original AlignScore"
    details: bool = True
    cut: int = 0
    inputs: int = 0
    tokens: int = 0

    def add(self, truncated: Tensor) -> Truncation:
        """Count one run's `Results.truncated` (tokens each input lost)."""
        self.cut += int((truncated > 0).sum())
        self.inputs += truncated.numel()
        self.tokens += int(truncated.sum())
        return self

    def warn(self, *, stacklevel: int = 2) -> None:
        """One TruncationWarning with the counts, when anything was cut (stacklevel as warnings.warn's)."""
        report_truncation(self.cut, self.inputs, self.tokens, self.window, what=self.what, original=self.original,
                          details=self.details, stacklevel=stacklevel + 1)


def report_truncation(cut_pairs: int, pairs: int, cut_tokens: int, window: int, *,
                      what: str = "(chunk, sentence) pair(s)", original: str = "the original AlignScore",
                      details: bool = True, stacklevel: int = 3) -> None:
    """One warning with the counts when any input lost tokens to the window."""
    if cut_pairs:
        where = "; return_details=True gives each one's count under 'truncated'" if details else ""
        warnings.warn(f"{cut_pairs} of {pairs} {what} were cut by the {window}-token window ({cut_tokens} tokens "
                      f"in all), as {original} does{where}", TruncationWarning, stacklevel=stacklevel)
