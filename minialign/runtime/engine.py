"""The batching engine every runner uses: texts in, results out in input order.

    engine = BatchEngine(tokenizer, batch_size=32, max_tokens=2048, packed=True)
    results = engine.run(inputs, forward)   # inputs: texts, or (text, pair) tuples

What it does, once for any model: identical inputs are run once; each distinct text is tokenized once
(Tokenizer.encode_ids: a long context shared by many pairs is read once; a large run's distinct inputs in a few
chunks tokenized at once, `tokenize`); inputs are sorted by length (longest first) and cut into batches of at most
`batch_size` sequences and at most `max_tokens` tokens as run (packed: real tokens; padded: rows x longest); each
batch is padded to its own longest sequence (rounded up to a multiple of `bucket`, for compiled models) on the
host, with what the host knows of it (`HostBatch`: each sequence's length, the ids' range, under "host", so the
forward asks the device for neither); `forward` gets the padded tensors on the device and returns one row of
results per sequence; the rows come back in input order, with the number of tokens each input lost to the window.
A forward whose results differ in shape from one sequence to the next (one vector per token) returns a list
instead, one entry per sequence (a tensor, or a dict of named tensors), and gets a list back in input order
(`ragged`). A sequence longer than the budget runs in a batch of its own. With workers > 1 the batches run in that
many model processes (process_pool.py) and are merged the same way. The counts of what the window cut are reported
by `Truncation` (one TruncationWarning per call, or per run of many calls).

On an accelerator the host works ahead of the device (`overlap`): a forward returns once its kernels are queued,
so the next batch is collated in a background thread (prefetch.py), into pinned memory on CUDA, and copied with
`non_blocking=True` while the device computes; the outputs stay on the device and are copied to the host together
at the end of the run (`Gathered`: the engine waits for the device once per run; a forward that reads its own
output on the host, such as the boolean indexing of the SPLADE, M3 and multi-vector forwards, still waits once per
batch). A batch there is bounded by its tokens alone (the default batch_size is the token budget). With CUDA graphs
(`cuda_graphs`, torch.compile's "reduce-overhead" and "max-autotune" modes on CUDA) each batch's rows are also
rounded up to a power of two, so that few graphs are recorded. On the CPU each batch runs and is placed in turn, as
the same bits.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from minialign.nn import capture
from minialign.nn.layout import HostBatch
from minialign.runtime.memory import release_free_memory
from minialign.runtime.prefetch import ahead
from minialign.runtime.process_pool import WorkerPool, ragged
from minialign.runtime.threads import intra_op_threads, threads_now, usable_threads
from minialign.text.tokenizer import Encoded, pad

if TYPE_CHECKING:
    from minialign.text.tokenizer import Tokenizer

CPU_BATCH_TOKENS = 2048  # default token budget on CPU, where smaller matmuls stay in cache (BENCHMARKS.md)
DEVICE_BATCH_TOKENS = 65536  # default token budget elsewhere (an accelerator: large batches keep it busy)
CPU_BATCH_SIZE = 32  # default most sequences of a batch on the CPU; on an accelerator the token budget decides
# A run's distinct inputs are tokenized in chunks at once, one thread each, when there are TOKENIZE_CHUNK of them for
# each thread: `tokenizers` spreads one call's texts over its own thread pool already (encode_batch, rayon), and
# releases the GIL meanwhile; what the chunks add is one chunk's encoding under way while another's ids are cut and
# laid out in Python (Tokenizer.encode_ids, which holds the GIL), for which a few threads are enough
TOKENIZE_CHUNK = 2048
TOKENIZE_THREADS = 4
PREFETCH = 2  # batches collated ahead of the one the device runs (overlap)
HELD_BYTES = 1 << 30  # device outputs held before they are copied to the host: one copy per run below it


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


def graph_rows(n: int) -> int:
    """The rows a batch of n sequences runs as under CUDA graphs: n rounded up to a power of two, so that a run
    records a graph for few shapes (about log2(batch_size) row counts for each length)."""
    return 1 << (n - 1).bit_length()


def twin(tokenizer: Tokenizer) -> Tokenizer:
    """A copy of the tokenizer with its own `tokenizers` backend, for another thread: one backend refuses to be
    used from two threads at once where a call changes its settings while another encodes (encode_ids turns
    truncation off first: RuntimeError "Already borrowed", huggingface/tokenizers#537)."""
    other = copy.copy(tokenizer)
    other.backend = copy.deepcopy(tokenizer.backend)
    return other


def to_device(batch: dict, device: torch.device) -> dict:
    """A collated batch's tensors on `device`, copied without waiting (on CUDA, from pinned memory: an asynchronous
    copy the device runs in its queue); its other values (the HostBatch, a run's constants) as they are."""
    if device.type == "cpu":
        return batch
    cuda = device.type == "cuda"
    return {k: v.to(device, non_blocking=cuda) if isinstance(v, Tensor) else v for k, v in batch.items()}


def _to_host(tensor: Tensor) -> Tensor:
    """A device tensor's copy on the host: where a run waits for the device (one host sync)."""
    return tensor.cpu()


def _nbytes(out: Tensor | list) -> int:
    if isinstance(out, Tensor):
        return out.numel() * out.element_size()
    return sum(t.numel() * t.element_size() for entry in out
               for t in (entry.values() if isinstance(entry, dict) else (entry,)))


def host_entries(entries: list) -> list:
    """A ragged forward's entries (each a tensor or a dict of tensors) on the host, as process_pool.ragged makes
    them (floating tensors float32, integer ones as they are), copied with one transfer per device and dtype: their
    tensors flattened and joined where they are, copied, and split again (each entry a copy of its part)."""
    leaves = [t for entry in entries for t in (entry.values() if isinstance(entry, dict) else (entry,))]
    groups: dict[tuple, list[int]] = {}
    for i, t in enumerate(leaves):
        groups.setdefault((t.device, t.dtype), []).append(i)
    host: list = [None] * len(leaves)
    for members in groups.values():
        flat = _to_host(torch.cat([leaves[i].reshape(-1) for i in members]))
        if flat.is_floating_point():
            flat = flat.float()
        for i, part in zip(members, flat.split([leaves[i].numel() for i in members])):
            host[i] = part.view(leaves[i].shape).clone()  # each entry its own memory, as on the CPU path
    placed = iter(host)
    return [{name: next(placed) for name in entry} if isinstance(entry, dict) else next(placed) for entry in entries]


class Gathered:
    """A run's results by input: each batch's output placed at its sequences' rows (float32, on the host). Held
    (`hold`: an engine that overlaps), the outputs stay where the forward made them, and are copied to the host
    together at the end (`values`), or whenever they pass HELD_BYTES: the run waits for the device once, not once
    per batch. `private`: each held output is copied where it is first (a CUDA graph's outputs are its own buffers,
    overwritten by its next replay)."""

    def __init__(self, n: int, *, hold: bool, private: bool = False):
        self.n, self.hold, self.private = n, hold, private
        self._values: Tensor | list | None = None
        self._held: list[tuple[list[int], Tensor | list]] = []
        self._held_bytes = 0

    def add(self, rows: list[int], out: Tensor | list) -> None:
        """One batch's output (one row or entry per sequence), for the inputs at `rows`."""
        if not self.hold:
            self._place(rows, [ragged(entry) for entry in out] if isinstance(out, list) else out.float().cpu())
            return
        if self.private:
            out = [_copy(entry) for entry in out] if isinstance(out, list) else out.clone()
        self._held.append((rows, out))
        self._held_bytes += _nbytes(out)
        if self._held_bytes >= HELD_BYTES:
            self.flush()

    def flush(self) -> None:
        """The held outputs, copied to the host together and placed."""
        if not self._held:
            return
        rows = [i for part, _ in self._held for i in part]
        outs = [out for _, out in self._held]
        self._held, self._held_bytes = [], 0
        if isinstance(outs[0], list):
            self._place(rows, host_entries([entry for out in outs for entry in out]))
        else:
            self._place(rows, _to_host(torch.cat(outs)).float())

    def _place(self, rows: list[int], out: Tensor | list) -> None:
        if isinstance(out, list):  # ragged: one entry per sequence
            if self._values is None:
                self._values = [None] * self.n
            for i, entry in zip(rows, out, strict=True):
                self._values[i] = entry
        else:
            if self._values is None:
                self._values = out.new_empty((self.n, *out.shape[1:]))
            self._values[rows] = out

    def values(self) -> Tensor | list | None:
        """Every input's row or entry (None: no batch ran)."""
        self.flush()
        return self._values


class OversubscribedWarning(UserWarning):
    """More worker processes than the CPUs this process may use."""


class BatchEngine:
    def __init__(self, tokenizer: Tokenizer, *, batch_size: int | None = None, max_tokens: int = DEVICE_BATCH_TOKENS,
                 packed: bool = True, bucket: int = 1, max_length: int | None = None,
                 device: str | torch.device = "cpu", truncation: str = "only_first", workers: int = 1,
                 threads: int | None = None, cuda_graphs: bool = False, vocab_size: int | None = None):
        """batch_size: the most sequences of a batch (None: CPU_BATCH_SIZE on the CPU; elsewhere the token budget,
        so that max_tokens alone decides). packed: the forward runs real tokens only (unpad=True), so the budget
        counts real tokens.
        bucket: round each batch's length up to a multiple of it (compiled models see few shapes).
        truncation: how pairs are cut to max_length (Tokenizer.encode).
        workers: model processes on the CPU (process_pool.py). threads: the forwards' intra-op threads, set for each
        batch here and restored after, or shared out among the workers (threads // workers each, at least 1);
        None (default): up to threads.usable_threads() (the CPUs this process may use), one fewer for each other
        process's runnable thread, decided before each batch (threads.threads_now; workers take a fixed share).
        cuda_graphs: the forward replays CUDA graphs (torch.compile's "reduce-overhead", "max-autotune"): each batch's
        rows rounded up to a power of two (`graph_rows`; the extra rows' results dropped), each output copied
        before the next batch. vocab_size: the model's vocabulary, each batch's ids checked against it on the host."""
        for name, value in (("max_tokens", max_tokens), ("workers", workers)):
            positive_int(name, value)
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.max_tokens, self.packed, self.bucket = max_tokens, packed, bucket
        self._batch_size = None if batch_size is None else positive_int("batch_size", batch_size)
        self.max_length = max_length or tokenizer.model_max_length
        self.truncation = truncation
        self.workers = workers
        self.cuda_graphs, self.vocab_size = cuda_graphs, vocab_size
        # whether the host works ahead of the device (the module docstring): on an accelerator, whose forward returns
        # before the device is done; on the CPU the forward is the work, and the CPUs are its own
        self.overlap = self.device.type != "cpu"
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
        self._twins: list[Tokenizer] = []  # copies of the tokenizer for the tokenizing threads (twin), made once

    @classmethod
    def for_model(cls, tokenizer: Tokenizer, model: torch.nn.Module, *, max_tokens: int | None = None,
                  **options) -> BatchEngine:
        """An engine on the model's device, with the default token budget of that device, checking ids against the
        model's vocabulary (its config's vocab_size)."""
        device = next(model.parameters()).device
        if max_tokens is None:
            max_tokens = CPU_BATCH_TOKENS if device.type == "cpu" else DEVICE_BATCH_TOKENS
        vocab_size = getattr(getattr(model, "config", None), "vocab_size", None)
        return cls(tokenizer, max_tokens=max_tokens, device=device, vocab_size=vocab_size, **options)

    @property
    def batch_size(self) -> int:
        """The most sequences of a batch: the one set, else on the CPU CPU_BATCH_SIZE, and elsewhere the token
        budget (each sequence has a token at least, so the budget decides)."""
        if self._batch_size is not None:
            return self._batch_size
        return CPU_BATCH_SIZE if self.device.type == "cpu" else self.max_tokens

    def set_budget(self, *, max_tokens: int | None = None, batch_size: int | None = None) -> None:
        """Change the most tokens and sequences of a batch (None: keep)."""
        if max_tokens is not None:
            self.max_tokens = positive_int("max_tokens", max_tokens)
        if batch_size is not None:
            self._batch_size = positive_int("batch_size", batch_size)

    def __getstate__(self) -> dict:  # what a worker process receives with its runner: no pool of its own
        return {**self.__dict__, "_pool": None, "workers": 1, "threads": max(1, self.threads // self.workers),
                "adaptive": False, "_twins": []}  # a worker keeps its share: its siblings are the other runnable
        # processes; it never tokenizes

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
                    constants: dict[str, int] | None = None, per_row: dict[str, list[int]] | None = None) -> Results:
        """`run` over sequences tokenized already (Encoded: ids, type ids, tokens each lost), each run as it is (no
        deduplication): a runner that cuts texts its own way (TokenClassifier's overlapping windows). `constants`
        join every batch as they are; `per_row`, one int per sequence under each name, joins each batch as a (B,)
        long tensor of its rows' values in its rows' order (0 for a row added to fill a CUDA graph's)."""
        ids, types = encoded.ids, encoded.type_ids
        for name, values in (per_row or {}).items():
            if len(values) != len(ids):
                raise ValueError(f"per_row[{name!r}] has {len(values)} values for {len(ids)} sequences")
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]), reverse=True)
        batches = self.batches(order, [len(t) for t in ids],
                               self.batch_size if batch_size is None else positive_int("batch_size", batch_size))
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(batches), desc=progress if isinstance(progress, str) else "batches", unit="batch",
                       leave=False)
        gathered = Gathered(len(ids), hold=self.overlap, private=self.cuda_graphs)
        extra = constants or {}

        def batch(rows: list[int]) -> dict:
            tensors = {**self.collate(rows, ids, types), **extra}
            filled = len(tensors["input_ids"]) - len(rows)
            for name, values in (per_row or {}).items():
                value = torch.tensor([values[i] for i in rows] + [0] * filled, dtype=torch.long)
                tensors[name] = value.pin_memory() if self.device.type == "cuda" else value
            return tensors

        for index, out in self.execute(forward, ((i, batch(b)) for i, b in enumerate(batches))):
            rows = batches[index]
            gathered.add(rows, out[:len(rows)] if self.cuda_graphs else out)  # a padded batch's extra rows dropped
            if bar is not None:
                bar.update()
        values = gathered.values()
        if bar is not None:
            bar.close()
        release_free_memory()  # the batches' freed tensors: a long-running process plateaus (memory.py)
        if values is None:
            return Results(torch.empty(0), torch.empty(0, dtype=torch.long))
        return Results(values, torch.tensor(encoded.truncated, dtype=torch.long))

    def execute(self, forward, batches):
        """(index, forward(batch)) for each (index, batch): here, or in the worker processes."""
        if self.workers == 1 or capture.current() is not None:
            # a capture or patch applies to the forwards of the thread that opened it (nn/capture.py): while one is
            # open here, every batch runs here, so a patched encode is patched whatever its workers
            return self._here(forward, batches)
        if self._pool is None or self._pool.forward != forward:
            self.close()
            self._pool = WorkerPool(forward, self.workers, threads=max(1, self.threads // self.workers))
        # a batch travels to a worker as tensors and numbers (process_pool.py loads it with weights_only=True), so
        # without its HostBatch: a worker's forward reads the lengths from the mask, on the CPU a sync costing nothing
        return self._pool.map((i, {k: v for k, v in batch.items() if k != "host"}) for i, batch in batches)

    def _here(self, forward, batches):
        """The batches in this process: on the CPU on the engine's threads, fixed, or by default as many as are free
        now (runtime/threads.threads_now), decided again before each batch; elsewhere (overlap) each batch collated
        ahead in a background thread and copied to the device as it is reached."""
        cpu = self.device.type == "cpu"
        with closing(ahead(batches, PREFETCH) if self.overlap else batches) as items:
            for index, batch in items:
                threads = (threads_now(self.threads) if self.adaptive else self.threads) if cpu else None
                batch = to_device(batch, self.device)
                if self.cuda_graphs:  # a new step of torch.compile's CUDA graph trees: each batch one invocation
                    torch.compiler.cudagraph_mark_step_begin()
                with intra_op_threads(threads):
                    out = forward(batch)
                yield index, out

    def tokenize(self, inputs: list, *, max_length: int | None = None) -> Encoded:
        """Encoded ids of texts or (text, pair) tuples, under the tokenizer's truncation rule, cut to
        max_length (default: the engine's window). Many inputs are tokenized in up to TOKENIZE_THREADS chunks at
        once, each thread with its own copy of the tokenizer (`twin`); the ids are those of one call."""
        # a run's own window may pass the engine's (a multi-vector encoder's document_length): its runner keeps it
        # within the model's positions
        max_length = self.max_length if max_length is None else positive_int("max_length", max_length)
        pairs = sum(isinstance(x, tuple) for x in inputs)
        if 0 < pairs < len(inputs):
            raise ValueError(f"inputs mix {pairs} (text, pair) tuples with {len(inputs) - pairs} single texts; "
                             f"run them separately")
        chunks = max(1, min(TOKENIZE_THREADS, self.threads, len(inputs) // TOKENIZE_CHUNK))
        if chunks == 1:
            return self._encode(self.tokenizer, inputs, max_length)
        while len(self._twins) < chunks - 1:
            self._twins.append(twin(self.tokenizer))
        size = -(-len(inputs) // chunks)
        parts = [inputs[i:i + size] for i in range(0, len(inputs), size)]
        with ThreadPoolExecutor(len(parts), thread_name_prefix="minialign-tokenize") as pool:
            done = list(pool.map(self._encode, [self.tokenizer, *self._twins], parts,
                                 [max_length] * len(parts)))
        return Encoded([x for e in done for x in e.ids], [x for e in done for x in e.type_ids],
                       [x for e in done for x in e.truncated])

    def _encode(self, tokenizer: Tokenizer, inputs: list, max_length: int) -> Encoded:
        if inputs and isinstance(inputs[0], tuple):
            return tokenizer.encode_ids([a for a, _ in inputs], [b for _, b in inputs], max_length=max_length,
                                        truncation=self.truncation)
        return tokenizer.encode_ids(inputs, max_length=max_length)

    def batches(self, order: list[int], lengths: list[int], batch_size: int) -> list[list[int]]:
        """Consecutive runs of `order` (longest first) within the count and the token budget (a batch under CUDA
        graphs counted at the rows it runs as, graph_rows)."""
        rows = graph_rows if self.cuda_graphs else (lambda n: n)
        batches, current, tokens = [], [], 0
        for i in order:
            n = lengths[i]
            grown = (tokens + n if self.packed
                     else max(lengths[current[0]] if current else 0, n) * rows(len(current) + 1))
            if current and (len(current) == batch_size or grown > self.max_tokens):
                batches.append(current)
                current, grown = [], n
            current.append(i)
            tokens = grown
        return batches + [current] if current else batches

    def collate(self, batch: list[int], ids: list[list[int]], types: list[list[int]]) -> dict:
        """One batch built on the host: input_ids, attention_mask (and token_type_ids) right-padded to its longest
        sequence (rounded up to a multiple of `bucket`), under cuda_graphs with rows of one pad token each up to
        graph_rows; under "host" its HostBatch (each row's length, the ids' range), the ids checked against the
        vocabulary there (HostBatch.check_vocabulary); pinned where the device is CUDA, for an asynchronous copy
        (to_device)."""
        sequences, kinds = [ids[i] for i in batch], [types[i] for i in batch]
        if self.cuda_graphs and (extra := graph_rows(len(batch)) - len(batch)):
            # rows of one token (a row with none would be empty): their results are dropped, and no other row's
            # depends on them (each row attends its own tokens only)
            sequences += [[self.tokenizer.pad_token_id]] * extra
            kinds += [[0]] * extra
        longest = max(len(s) for s in sequences)
        length = min(-(-longest // self.bucket) * self.bucket, max(self.max_length, longest))
        tensors: dict = pad(sequences, kinds, pad_id=self.tokenizer.pad_token_id, length=length,
                            token_types=self.tokenizer.return_token_type_ids)
        if all(sequences):  # a HostBatch describes rows of a token at least; else the forward reads the mask
            host = HostBatch.of(tensors["input_ids"], [len(s) for s in sequences])
            if self.vocab_size is not None:  # the ids checked before anything is copied
                host.check_vocabulary(self.vocab_size)
            tensors["host"] = host
        if self.device.type == "cuda":
            tensors = {k: v.pin_memory() if isinstance(v, Tensor) else v for k, v in tensors.items()}
        return tensors


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
