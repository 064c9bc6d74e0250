"""The runner contract: what AlignScorer, MiniCheckScorer, SentenceEncoder and Classifier share.

    load      Runner.from_pretrained(src, *, ...its product's options, **keywords: Unpack[Loading]): the keywords
              every runner takes (tokenizer, device, dtype, attn_backend, compile, unpad, batch_size, max_tokens,
              workers, threads, revision, cache_dir, adapter) typed once (Loading), their defaults once
              (LoadOptions, which each from_pretrained makes of them first)
    tokenize  the batching engine (runtime/engine.py): dedup, sort by length, batches within the
    + batch   token budget (set_budget changes it), packed; a CPU process pool with workers > 1
    forward   runner.forward(batch) -> one row per sequence: the one method the engine calls
    post      the product's own call (score / encode / predict); options chosen per call (AlignScore's
              mode, a classifier's activation, normalize), so one loaded model serves them all

Truncation is counted and reported the same way by every runner: each call warns once when the window
cut anything (TruncationWarning: how many inputs, how many tokens, who cuts the same way), unless
warn_truncation=False; tally=runner.tally() adds the counts to a running total instead, and the call
does not warn (unless warn_truncation=True): `tally.warn()` reports once for all of them (a file job
warns once per run); runners with return_details give each input's count under "truncated".
`over_window` says which inputs a call would cut, for a client that asks for no truncation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, TypedDict

import torch
from tokenizers import normalizers
from torch import Tensor, nn

from minialign.loading import parse_dtype
from minialign.loading.pretrained import check_keywords
from minialign.nn import int8, precision
from minialign.nn.attention import BACKENDS
from minialign.loading import calibration_cache
from minialign.products.choices import COMPILE_MODES, CUDA_GRAPH_MODES
from minialign.runtime.engine import BatchEngine, Results, Truncation
from minialign.text.tokenizer import Tokenizer
from minialign.text.validation import check_texts, value_problem

COMPILE_BUCKET = 64  # compiled runners round batch lengths up to a multiple of it: a handful of shapes

Input = str | tuple[str, str]  # a text, or a (text, pair) for pair models


class Loading(TypedDict, total=False):
    """The keywords every runner's from_pretrained takes beside its own, typed: `**keywords: Unpack[Loading]` in each
    signature (help(), editors and type checkers show them); each one's default and meaning: LoadOptions."""

    tokenizer: str | Path | Tokenizer | None
    device: str | torch.device | None
    dtype: torch.dtype | str | None
    attn_backend: str
    compile: bool | str
    unpad: bool | None
    batch_size: int | None
    max_tokens: int | None
    workers: int
    threads: int | None
    revision: str | None
    cache_dir: str | Path | None
    adapter: str | None


LOAD_KEYWORDS = tuple(Loading.__annotations__)  # the faces pass these through to from_pretrained (apps/raydata.py)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoadOptions:
    """A from_pretrained call's Loading keywords with their defaults (declared here once): each runner's
    from_pretrained starts with `load = LoadOptions.of(keywords, entry)` (an unknown keyword is a TypeError naming
    it, the closest accepted one and every accepted one: loading.pretrained.check_keywords)."""

    tokenizer: str | Path | Tokenizer | None = None  # a tokenizer directory or hub id (default: beside the model)
    device: str | torch.device | None = None  # cpu (default), cuda, cuda:N, mps (loading.resolve_device)
    dtype: torch.dtype | str | None = None  # the weights' dtype (loading.parse_dtype: fp32 default, "auto", "int8")
    attn_backend: str = "sdpa"  # nn/attention.py's table
    compile: bool | str = False  # torch.compile the model (batch lengths rounded to COMPILE_BUCKET): True in
    # torch.compile's default mode, or a mode of COMPILE_MODES by name (compile_mode)
    unpad: bool | None = None  # batches run packed, on real tokens only (None: packs_by_default)
    batch_size: int | None = None  # most sequences in one forward (None: 32 on the CPU, elsewhere the token budget
    # decides: runtime/engine.py BatchEngine.batch_size)
    max_tokens: int | None = None  # most tokens in one forward (default: the engine's)
    workers: int = 1  # model processes on the CPU (runtime/process_pool.py)
    threads: int | None = None  # intra-op threads of the forwards, shared out among the workers (default:
    # runtime/threads.usable_threads(), the CPUs this process may use: its affinity and its cgroup's quota)
    revision: str | None = None  # a hub revision
    cache_dir: str | Path | None = None  # the hub cache
    adapter: str | None = None  # the task adapter merged into the weights, for a checkpoint carrying them (jina's
    # `task`: not named so, since `task` is the per-call query / document choice of the retrieval products)
    # (jina-embeddings-v3's: loading.read_checkpoint); None: none

    @classmethod
    def of(cls, keywords: dict[str, Any], entry: str) -> LoadOptions:
        """The options of a call to `entry` (e.g. "SentenceEncoder.from_pretrained"), its keywords checked first."""
        check_keywords(entry, keywords, [f.name for f in dataclasses.fields(cls)])
        return cls(**keywords)

    def __post_init__(self):
        compile_mode(self.compile)  # a bad value refused before anything loads

    def engine(self) -> dict[str, Any]:
        """The keywords of the batching engine (Runner._start, each runner's constructor)."""
        return self.only("batch_size", "max_tokens", "workers", "threads", "compile", "unpad")

    def only(self, *names: str) -> dict[str, Any]:
        return {name: getattr(self, name) for name in names}

    def open_tokenizer(self, beside: str | Path, named: str | Path | None = None, *,
                       do_lower_case: bool = False) -> Tokenizer:
        """The runner's tokenizer: the one given (a Tokenizer, or a directory / hub id to open), else the one the
        checkpoint names (`named`: a Checkpoint's tokenizer), else the one `beside` the model; lowercasing input
        first where the sentence-transformers settings say do_lower_case (sentence_bert_config.json)."""
        tokenizer = self.tokenizer
        if not isinstance(tokenizer, Tokenizer):
            tokenizer = Tokenizer.from_pretrained(tokenizer or named or beside, revision=self.revision,
                                                  cache_dir=self.cache_dir)
        if do_lower_case:
            lowercase(tokenizer)
        return tokenizer


def compile_mode(compile: bool | str) -> str | None:
    """The torch.compile mode a runner's `compile` asks for: None for False, "default" for True, else the mode it
    names, one of COMPILE_MODES (torch/__init__.py torch.compile's `mode`): "reduce-overhead" replays CUDA graphs
    (compile's cudagraph trees; the batching engine then rounds each batch's rows up to a power of two, BatchEngine
    cuda_graphs), "max-autotune" tunes kernels and replays CUDA graphs, "max-autotune-no-cudagraphs" only tunes.
    Off CUDA, torch runs no graphs: the modes compile as their kernels say."""
    if compile is False or compile is True:
        return "default" if compile else None
    if isinstance(compile, str) and compile in COMPILE_MODES:
        return compile
    raise ValueError(f"compile must be False, True or one of {', '.join(map(repr, COMPILE_MODES))}, got {compile!r}")


def batch_lengths(batch: dict[str, Any]) -> list[int]:
    """Each sequence's real tokens in a right-padded batch: the host's count where the batch carries it (nn/layout.py
    HostBatch, under "host": the engine's batches), else read from the attention mask (one host sync)."""
    host = batch.get("host")
    return list(host.lengths) if host is not None else batch["attention_mask"].sum(dim=1).tolist()


def lowercase(tokenizer: Tokenizer) -> None:
    """Lowercase input first (sentence_bert_config do_lower_case), as sentence-transformers does."""
    existing = tokenizer.backend.normalizer
    parts = [normalizers.Lowercase()] + ([existing] if existing is not None else [])
    tokenizer.backend.normalizer = normalizers.Sequence(parts)


def refuse_int8(dtype, scorer: str) -> None:
    """dtype="int8" is offered where its loss is measured (embeddings, classifiers and rerankers:
    BENCHMARKS.md, "int8"); a scorer refuses it, naming why."""
    if parse_dtype(dtype).precision == precision.INT8:
        raise ValueError(f"{scorer} does not run dtype='int8': its scores are fact-checking decisions, and torch's "
                         f"dynamic int8 moved AlignScore scores by up to 3.2e-2; int8 is offered for embeddings, "
                         f"classifiers and rerankers (use fp32 or dtype='auto')")


class OptionError(ValueError):
    """A call's option refused, naming it: str(e) is "<option> <problem>", and a face names the option its own way
    (the service's `parameters.<option>` / `options.<option>`, the command line's --<option>)."""

    def __init__(self, option: str, problem: str):
        super().__init__(f"{option} {problem}")
        self.option, self.problem = option, problem


def inputs_of(texts: Sequence[str], pairs: Sequence[str | None] | None) -> list[Input]:
    """Texts, each with its pair where it has one (pairs[i] None: a single text)."""
    if pairs is None:
        return list(texts)
    return [t if p is None else (t, p) for t, p in zip(texts, pairs)]


def packs_by_default(model: nn.Module) -> bool:
    """Whether a runner packs its batches when `unpad` is not given: on the CPU always (the padding's work
    skipped: BENCHMARKS.md "Encoder forward"); on a GPU only with a backend that runs a packed row in one call
    (`Backend.packed`: flex's document mask, varlen's cumulative lengths). sdpa and eager run a packed row as one
    padded call per length bucket, which a GPU pays in launches: roberta-base, bf16, 64 texts of mixed lengths on an
    H200 (scripts/gpu_suite.sh, BENCHMARKS.md "GPU"): padded sdpa 0.95x transformers' sdpa, packed sdpa 0.38x,
    packed flex 0.99x."""
    parameter = next(model.parameters(), None)
    if parameter is None or parameter.device.type == "cpu":
        return True
    encoder = getattr(model, "encoder", model)
    row = BACKENDS.get(getattr(encoder, "attn_backend", None))
    # a row without a kernel for the model's device and dtype (varlen on fp32 weights) runs on sdpa: padded then
    return row is not None and row.packed and (row.runs_on is None or row.runs_on(parameter.device, parameter.dtype))


class Runner:
    """A model, its tokenizer and its batching engine, run under one contract (the module docstring)."""

    truncation_unit: ClassVar[str] = "input(s)"  # what the truncation warning counts
    truncation_like: ClassVar[str] = "the original"  # "as ... does": who cuts text the same way
    has_details: ClassVar[bool] = False  # whether calls take return_details (with each input's cut)
    progress_label: ClassVar[str] = "batches"
    calibration_pairs: ClassVar[bool] = False  # whether dtype="int8" calibrates on text pairs too (calibrate_int8)

    model: nn.Module
    tokenizer: Tokenizer
    engine: BatchEngine
    unpad: bool
    source: str | None = None  # what from_pretrained loaded (recorded with file outputs)

    def _start(self, model: nn.Module, tokenizer: Tokenizer, *, max_length: int | None = None,
               batch_size: int | None = None,
               max_tokens: int | None = None, unpad: bool | None = None, compile: bool | str = False,
               bucket: int = COMPILE_BUCKET, workers: int = 1, threads: int | None = None,
               truncation: str = "only_first") -> None:
        """The runner's model (in eval mode), tokenizer and engine. The window is the smallest of
        max_length, the tokenizer's and the model's. unpad: batches run packed, on real tokens only (None: where
        that is the faster layout, `packs_by_default`).
        compile: torch.compile the model (True, or a mode by name: compile_mode), batch lengths rounded up to a
        multiple of `bucket` (no packing), and under CUDA graphs each batch's rows to a power of two. workers: model
        processes on the CPU; threads: the intra-op threads of the forwards (default: the CPUs this process may use,
        runtime/threads.py), each worker taking threads / workers."""
        mode = compile_mode(compile)
        if mode and workers > 1:
            raise ValueError("compile and workers > 1 do not mix: each worker would compile its own model")
        self.model, self.tokenizer = model.eval(), tokenizer
        self.unpad = (packs_by_default(model) if unpad is None else unpad) and not mode
        window = min(max_length or tokenizer.model_max_length, model.config.max_seq_len)
        self.engine = BatchEngine.for_model(tokenizer, model, batch_size=batch_size, max_tokens=max_tokens,
                                            packed=self.unpad, bucket=bucket if mode else 1, max_length=window,
                                            truncation=truncation, workers=workers, threads=threads,
                                            cuda_graphs=mode in CUDA_GRAPH_MODES
                                            and next(model.parameters()).device.type == "cuda")
        if getattr(model, "int8", False):
            self._calibrate_on_loading()
        if mode:
            self.model.compile(mode=mode)

    def _calibrate_on_loading(self) -> None:
        """dtype="int8": the statistics of the built-in calibration text, read from the calibration cache where an
        earlier load kept them for this very model, tokenizer and window (loading/calibration_cache.py), else
        calibrated now and kept."""
        texts = int8.calibration_texts()
        digest = calibration_cache.key(self.model, self.tokenizer.backend.to_str(), texts,
                                       pairs=self.calibration_pairs, window=self.engine.max_length)
        if not calibration_cache.load(self.model, digest):
            self.calibrate_int8(texts)
            calibration_cache.save(self.model, digest)

    def calibrate_int8(self, texts: Sequence[str]) -> None:
        """dtype="int8": each quantized layer's smoothing statistics from one fp32 pass of the model over
        `texts` (nn/int8.py; on loading, its built-in calibration text), and also over consecutive pairs of
        them for a runner of pairs (`calibration_pairs`); in this process, with one worker: worker
        processes get the statistics with the model (running ones are stopped; the next call starts new)."""
        if not getattr(self.model, "int8", False):
            raise ValueError("calibrate_int8 calibrates the quantized mode: load with dtype='int8'")
        texts = check_texts("texts", texts)
        if not texts:
            raise ValueError("calibrate_int8 needs at least one text")
        kinds: list[list[Input]] = [list(texts)]
        if self.calibration_pairs:
            kinds.append(list(zip(texts[0::2], texts[1::2])))
        engine = self.engine.in_this_process()  # the load's own threads: fewer on a busy machine (threads_now)

        def forward(batch: dict[str, Tensor]) -> Tensor:
            self.calibration_module()(**batch, unpad=self.unpad)
            return batch["input_ids"].new_zeros(batch["input_ids"].size(0))

        with torch.inference_mode(), int8.calibrating(self.model):
            for inputs in kinds:  # the engine runs one kind of input at a time
                engine.run(inputs, forward)
        self.engine.close()  # workers started before hold the statistics they were given

    def calibration_module(self) -> nn.Module:
        """What calibrate_int8 runs over the texts: the model (a runner whose heads hold no quantized layer and are
        costly to run may name the part that holds them: SparseEncoder's encoder, without the vocabulary logits)."""
        return self.model

    def __getstate__(self) -> dict:  # what a worker process gets (process_pool.py): it runs batches, never splits text
        state = dict(self.__dict__)
        if "splitter" in state:
            state["splitter"] = None
        return state

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        """One padded batch on the device -> one row of results per sequence (what the engine calls)."""
        raise NotImplementedError

    # -- what callers read and set --

    @property
    def max_length(self) -> int:
        """The window: the most tokens of one sequence (special tokens included)."""
        return self.engine.max_length

    @property
    def batch_size(self) -> int:
        return self.engine.batch_size

    @property
    def dtype_name(self) -> str:
        """The weights' dtype, e.g. "float32", or "int8" for the quantized mode (loading's dtype="int8")."""
        if getattr(self.model, "int8", False):
            return "int8"
        return str(next(self.model.parameters()).dtype).removeprefix("torch.")

    def set_budget(self, *, max_tokens: int | None = None, batch_size: int | None = None) -> None:
        """Change the most tokens and sequences of one batch (None: keep)."""
        self.engine.set_budget(max_tokens=max_tokens, batch_size=batch_size)

    def settings(self, **options) -> dict:
        """What a resumed file run must share with the run that made the file (with the call's options): the weights'
        dtype and a mixed precision's recipe; for the quantized mode its scheme and calibration (nn/int8.py,
        fingerprint)."""
        if self.dtype_name == "int8":
            return {"dtype": "int8", "int8": int8.fingerprint(self.model)}
        mixed = getattr(self.model, "precision", precision.PLAIN)
        # a mixed precision (dtype="auto" / "auto-all" where bf16 is native) gives other scores than its weights'
        # dtype alone: recorded, so a file is not resumed under another
        return {"dtype": self.dtype_name, **({"precision": str(mixed)} if mixed != precision.PLAIN else {})}

    def close(self) -> None:
        """Stop the worker processes, if any (a later call starts new ones)."""
        self.engine.close()

    # -- running --

    @torch.inference_mode()
    def run(self, inputs: Sequence[Input], *, progress: bool = False, batch_size: int | None = None,
            constants: dict[str, int] | None = None, max_length: int | None = None) -> Results:
        """`forward` over the inputs through the engine: texts, (text, pair) tuples, or both (each kind
        runs on its own); rows and the tokens each input lost come back in input order. constants: what
        every batch carries beside its tensors; max_length: this call's window, within the model's positions
        (BatchEngine.run)."""
        label = self.progress_label if progress else False
        options = {"progress": label, "batch_size": batch_size, "constants": constants, "max_length": max_length}
        pairs = [i for i, x in enumerate(inputs) if isinstance(x, tuple)]
        if not pairs or len(pairs) == len(inputs):
            return self.engine.run(inputs, self.forward, **options)
        singles = [i for i, x in enumerate(inputs) if not isinstance(x, tuple)]
        parts = [(kind, self.engine.run([inputs[i] for i in kind], self.forward, **options))
                 for kind in (singles, pairs)]
        first = parts[0][1].values
        truncated = torch.empty(len(inputs), dtype=torch.long)
        if isinstance(first, list):  # a ragged forward's entries (BatchEngine.run)
            values = [None] * len(inputs)
            for kind, results in parts:
                for i, entry in zip(kind, results.values):
                    values[i] = entry
                truncated[kind] = results.truncated
            return Results(values, truncated)
        values = first.new_empty((len(inputs), *first.shape[1:]))
        for kind, results in parts:
            values[kind], truncated[kind] = results.values, results.truncated
        return Results(values, truncated)

    def over_window(self, inputs: Sequence[Input], *, window: int | None = None) -> list[tuple[int, int]]:
        """(index, tokens with the special ones) of each input longer than the window (default: the runner's),
        which a call would cut: a service refuses those when its client asks for no truncation."""
        backend, window = self.tokenizer.backend, window or self.max_length
        specials = {pair: backend.num_special_tokens_to_add(pair) for pair in (False, True)}
        parts = [(x,) if isinstance(x, str) else x for x in inputs]
        # A token covers at least one byte of UTF-8, so inputs with few enough bytes cannot be too long:
        # only the others are tokenized.
        long = [i for i, texts in enumerate(parts)
                if sum(len(t.encode()) for t in texts) + specials[len(texts) == 2] > window]
        if not long:
            return []
        firsts = self.tokenizer.token_counts([parts[i][0] for i in long])
        seconds = self.tokenizer.token_counts([parts[i][1] if len(parts[i]) == 2 else "" for i in long])
        totals = [(i, a + b + specials[len(parts[i]) == 2]) for i, a, b in zip(long, firsts, seconds)]
        return [(i, n) for i, n in totals if n > window]

    # -- truncation --

    def tally(self, *, details: bool | None = None, window: int | None = None) -> Truncation:
        """An empty running count of what this runner's window cuts (pass it as `tally=` to calls). details:
        whether its warning points to return_details (default: where the runner has them); False where the
        reader cannot reach them (the command line, a file's rows). window: the calls' own (default: the runner's)."""
        return Truncation(window or self.max_length, what=self.truncation_unit, original=self.truncation_like,
                          details=self.has_details if details is None else details and self.has_details)

    def _count(self, truncated: Tensor, warn: bool | None, tally: Truncation | None, *,
               window: int | None = None) -> None:
        """A call's truncation: added to `tally` if given; one warning if `warn` and anything was cut, naming
        `window` (a call's own; default: the runner's). warn=None (every call's default): warn unless a tally
        is given, which reports for the calls."""
        if tally is not None:
            tally.add(truncated)
        if warn is None:
            warn = tally is None
        if warn:
            self.tally(window=window).add(truncated).warn(stacklevel=4)  # the caller of the runner's method


class PairScorer(Runner):
    """A runner that scores (context, claim) pairs, one score each (AlignScorer, MiniCheckScorer):
    score(contexts, claims, *, return_details, progress, warn_truncation, tally); check(context, claim)
    says what is wrong with one pair before any model work (file rows, service bodies)."""

    has_details = True
    mode: str  # the method recorded with file outputs

    def check(self, context, claim, *, null: str = "None") -> list[tuple[str, str]]:
        """What is wrong with one (context, claim), as ("context" | "claim", problem) pairs. `null` is
        how a missing value is named (None in Python, null in JSON)."""
        return [(which, problem) for which, value in (("context", context), ("claim", claim))
                if (problem := value_problem(value, null=null))]

    def settings(self, **options) -> dict:
        return {"mode": self.mode, **super().settings()}
