"""AlignScorer: AlignScore's factual-consistency score, same numbers, fewer dependencies, faster.

The algorithm is the original's (AlignScore src/alignscore/inference.py, Inferencer):
  1. split the context into sentences and group them into chunks: n = words // 350 + 1,
     sentences per chunk = max(len(sentences) // n, 1), consecutive groups joined by a space
     (an empty context is one empty chunk); split the claim into sentences;
  2. score every (chunk, sentence) pair, tokenized as (chunk, sentence) with max_length 512,
     the chunk truncated first;
  3. score = mean over claim sentences of the max over chunks.
Modes: nli_sp (default) / bin_sp / reg_sp do the above with P(aligned) = softmax(tri)[:, 0],
P(aligned) = softmax(bin)[:, 1], or the regression output; nli / bin / reg score the whole pair.

What differs is only how the work is done: the pairs of all examples go through the batching
engine together (runtime/engine.py: deduplicated, sorted by length, batched within a token budget,
run packed); the MLM head is never run; everything runs under torch.inference_mode. The forward
computes every head's probabilities, so the mode is chosen per call (score(..., mode=)): one loaded
scorer serves all six. The runner contract (from_pretrained keywords, truncation reports) is
products/runner.py's.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Unpack

import torch

from minialign.products.choices import ALIGNSCORE_MODE as DEFAULT_MODE, ALIGNSCORE_MODEL as DEFAULT_MODEL
from minialign.products.choices import ALIGNSCORE_MODES as MODES
from minialign.products.runner import LoadOptions, Loading, PairScorer, refuse_int8
from minialign.runtime.engine import Results, Truncation, TruncationWarning  # noqa: F401  (TruncationWarning: re-exported)
from minialign.sources import HubUnavailableError, resolve
from minialign.loading import build, is_current, read_checkpoint, save_native
from minialign.models.head_models import AlignModel
from minialign.text.sentences import split_sentences
from minialign.text.tokenizer import TOKENIZER_FILES, Tokenizer
from minialign.text.validation import one_pair, value_problem

HUB_REPO = "yzha/AlignScore"
# name -> (file in HUB_REPO, backbone); AlignScore README "Checkpoints".
PUBLISHED = {
    "AlignScore-base": ("AlignScore-base.ckpt", "roberta-base"),
    "AlignScore-large": ("AlignScore-large.ckpt", "roberta-large"),
}
WORDS_PER_CHUNK = 350
# The weights scoring reads, which a checkpoint must hold (loading.weights.build refuses it otherwise).
TRAINED = ("encoder.pooler.", "tri_layer.", "bin_layer.", "reg_layer.")
NO_HEADS = ("AlignScore scores need a trained AlignScore checkpoint: AlignScore-base / AlignScore-large, their .ckpt "
            "with backbone=, or a directory `minialign convert` made from one.")
# Columns of the per-pair result: the three tri_layer probabilities, bin P(aligned), reg output.
COLUMNS = ("aligned", "neutral", "contradiction", "bin", "reg")
_MODE_COLUMN = {"nli": 0, "bin": 3, "reg": 4}


def chunk_context(context: str, sentences: list[str]) -> list[str]:
    """Group context sentences into chunks of about 350 words (AlignScore's rule, verbatim)."""
    sentences = sentences or [""]
    n_chunks = len(context.strip().split()) // WORDS_PER_CHUNK + 1
    per_chunk = max(len(sentences) // n_chunks, 1)
    return [" ".join(sentences[i:i + per_chunk]) for i in range(0, len(sentences), per_chunk)]


@dataclass
class Example:
    """One (context, claim) as pairs: chunks x sentences (whole-pair modes: 1 x 1)."""

    chunks: list[str]
    sentences: list[str]
    pair_ids: list[int]  # row-major chunks x sentences, indices into the pairs of all examples
    mode: str = DEFAULT_MODE


def check_mode(mode) -> str:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    return mode


class AlignScorer(PairScorer):
    truncation_unit, truncation_like = "(chunk, sentence) pair(s)", "the original AlignScore"
    progress_label = "scoring"

    def __init__(self, model: AlignModel, tokenizer: Tokenizer, *, mode: str = DEFAULT_MODE, batch_size: int | None = None,
                 splitter: Callable[[str], list[str]] | None = None, unpad: bool | None = None, compile: bool | str = False,
                 bucket: int = 64, max_tokens: int | None = None, workers: int = 1,
                 threads: int | None = None):
        """A batch holds at most batch_size pairs and at most max_tokens tokens (default: 2048 on CPU,
        where smaller matmuls stay in cache and their buffers are reused, 65536 elsewhere;
        BENCHMARKS.md has the measurements).
        unpad: run each batch packed, on real tokens only (see Encoder.forward); default (None): packed on the
        CPU, and on a GPU with the flex backend only (products/runner.py packs_by_default).
        compile: torch.compile the model; batch lengths are then rounded up to a multiple of
        `bucket` so a run compiles a handful of shapes, not one per batch.
        workers: model processes on the CPU (process_pool.py); threads: the forwards' intra-op threads (default: the
        CPUs this process may use, runtime/threads.py), shared out among the workers.
        mode: the default of score's `mode`."""
        self.mode = check_mode(mode)
        self.splitter = splitter or split_sentences
        self._start(model, tokenizer, batch_size=batch_size, max_tokens=max_tokens, unpad=unpad, compile=compile,
                    bucket=bucket, workers=workers, threads=threads)

    @classmethod
    def from_pretrained(cls, src: str | Path = DEFAULT_MODEL, *, backbone: str | None = None, mode: str = DEFAULT_MODE,
                        splitter: Callable[[str], list[str]] | None = None, **keywords: Unpack[Loading]) -> AlignScorer:
        """`src`: anything AlignModel.from_pretrained takes, or `AlignScore-base` / `AlignScore-large`
        (downloaded from the hub once, converted to minialign's format in the cache, then reused).
        The keywords every runner takes are products/runner.py's (Loading)."""
        load = LoadOptions.of(keywords, f"{cls.__name__}.from_pretrained")
        refuse_int8(load.dtype, "AlignScorer")
        if str(src) in PUBLISHED and not Path(src).exists():
            src = published_checkpoint(str(src), cache_dir=load.cache_dir)
        ckpt = read_checkpoint(src, backbone=backbone, revision=load.revision, cache_dir=load.cache_dir,
                               task=load.adapter)
        model = build(AlignModel, ckpt, require=TRAINED, advice=NO_HEADS,
                      **load.only("device", "dtype", "attn_backend"))
        tokenizer = load.tokenizer
        if not isinstance(tokenizer, Tokenizer):
            tokenizer = _find_tokenizer(tokenizer, ckpt, backbone, load.cache_dir)
        scorer = cls(model, tokenizer, mode=mode, splitter=splitter, **load.engine())
        scorer.source = str(src)
        return scorer

    def score(self, contexts: Sequence[str] | str, claims: Sequence[str] | str, *,
              mode: str | Sequence[str] | None = None, return_details: bool = False, progress: bool = False,
              warn_truncation: bool | None = None, tally: Truncation | None = None) -> list[float] | list[dict]:
        """One score per (context, claim); one context and one claim as strings give that example's score alone
        (a float, or its dict), as the other runners take one input. mode: one of MODES (default: the scorer's),
        or one per example; the model runs the same, only the column read and the splitting differ. With
        return_details, one dict per example: the score, the chunks and sentences, chunk x sentence
        matrices of every probability (COLUMNS), and `truncated`: the tokens of each pair cut by the
        window (the chunk's tail, as the original does; both texts when the sentence alone does not
        fit). Text cut anywhere in the call gives one TruncationWarning with the counts, unless
        warn_truncation=False or a tally (self.tally()) is given, which adds the counts to a running total
        that reports once (products/runner.py)."""
        if one_pair(contexts, claims, ("contexts", "claims")):
            return self.score([contexts], [claims], mode=mode, return_details=return_details, progress=progress,
                              warn_truncation=warn_truncation, tally=tally)[0]
        examples, pairs = self._plan(contexts, claims, mode)
        results = self.score_pairs(pairs, progress=progress)
        self._count(results.truncated, warn_truncation, tally)
        out = []
        for ex in examples:
            shape = (len(ex.chunks), len(ex.sentences))
            table = results.values[ex.pair_ids].view(*shape, len(COLUMNS))
            score = table[..., _MODE_COLUMN[ex.mode.removesuffix("_sp")]].max(dim=0).values.mean().item()
            if not return_details:
                out.append(score)
                continue
            details = {"score": score, "chunks": ex.chunks, "sentences": ex.sentences}
            details.update({name: table[..., i].tolist() for i, name in enumerate(COLUMNS)})
            details["truncated"] = results.truncated[ex.pair_ids].view(shape).tolist()
            out.append(details)
        return out

    def _plan(self, contexts: Sequence[str], claims: Sequence[str],
              mode: str | Sequence[str] | None) -> tuple[list[Example], list[tuple[str, str]]]:
        """Validate everything first, then split and chunk: every example's (chunk, sentence) pairs."""
        split_claims = validate_inputs(contexts, claims, self.splitter)
        modes = [mode or self.mode] * len(contexts) if mode is None or isinstance(mode, str) else list(mode)
        if len(modes) != len(contexts):
            raise ValueError(f"mode: give one, or one per example ({len(contexts)}), got {len(modes)}")
        for m in dict.fromkeys(modes):
            check_mode(m)
        examples, pairs = [], []
        for context, claim, sentences, m in zip(contexts, claims, split_claims, modes):
            if m.endswith("_sp"):
                chunks = chunk_context(context, self.splitter(context))
            else:
                chunks, sentences = [context], [claim]
            start = len(pairs)
            pairs += [(c, s) for c in chunks for s in sentences]
            examples.append(Example(chunks, sentences, list(range(start, len(pairs))), m))
        return examples, pairs

    def check(self, context, claim, *, null: str = "None") -> list[tuple[str, str]]:
        """What is wrong with one (context, claim), as ("context" | "claim", problem) pairs: texts the
        tokenizer refuses, a claim with no sentence (check_example)."""
        return check_example(context, claim, self.splitter, null=null)[0]

    def settings(self, *, mode: str | None = None) -> dict:
        return {**super().settings(), "mode": mode or self.mode}

    def score_pairs(self, pairs: list[tuple[str, str]], *, progress: bool = False) -> Results:
        """For each (chunk, sentence) pair: values (N, 5) float32, the COLUMNS, and truncated (N,),
        the tokens the window cut; identical pairs run once."""
        if not pairs:
            return Results(torch.empty(0, len(COLUMNS)), torch.empty(0, dtype=torch.long))
        return self.run(pairs, progress=progress)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The COLUMNS of each pair of one batch: every head's probability, whatever the mode."""
        out = self.model(**batch, unpad=self.unpad)
        tri = torch.softmax(out.tri_label_logits.float(), dim=-1)
        bin_ = torch.softmax(out.seq_relationship_logits.float(), dim=-1)[:, 1:]
        return torch.cat([tri, bin_, out.reg_label_logits.float()], dim=-1)


def validate_inputs(contexts: Sequence[str], claims: Sequence[str],
                    splitter: Callable[[str], list[str]]) -> list[list[str]]:
    """Check every input before any model work; returns each claim's sentences.
    Raises ValueError naming every offending index."""
    for name, value in (("contexts", contexts), ("claims", claims)):
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise ValueError(f"{name} must be a sequence of strings (a list), got {type(value).__name__}")
    if len(contexts) != len(claims):
        raise ValueError(f"contexts and claims must have equal length, got {len(contexts)} and {len(claims)}")
    problems, split = [], []
    for i, (context, claim) in enumerate(zip(contexts, claims)):
        found, sentences = check_example(context, claim, splitter)
        problems += [f"{which}s[{i}] {what}" for which, what in found]
        split.append(sentences)
    if problems:
        raise ValueError("invalid input: " + "; ".join(problems))
    return split


def check_example(context, claim, splitter: Callable[[str], list[str]], *,
                  null: str = "None") -> tuple[list[tuple[str, str]], list[str]]:
    """What is wrong with one (context, claim), as ("context" | "claim", problem) pairs, and the
    claim's sentences. Catches every text the tokenizer would refuse (tokenizer.value_problem).
    `null` is how a missing value is named (None in Python, null in JSON)."""
    problems = []
    for which, value in (("context", context), ("claim", claim)):
        if problem := value_problem(value, null=null):
            problems.append((which, problem))
    sentences = []
    if not any(which == "claim" for which, _ in problems):
        sentences = list(splitter(claim))
        if not sentences:
            problems.append(("claim", "has no sentence"))
    return problems, sentences


def _find_tokenizer(tokenizer, ckpt, backbone, cache_dir) -> Tokenizer:
    """tokenizer= if given; else the checkpoint's tokenizer source (a .ckpt's: its backbone's, the only
    place to look); else the backbone named (backbone=, or a .ckpt's preset: from the hub)."""
    if tokenizer is not None:
        return Tokenizer.from_pretrained(tokenizer, cache_dir=cache_dir)
    source, name = ckpt.tokenizer, backbone or ckpt.backbone_name
    try:
        if source is not None and (ckpt.backbone_name or source.present(TOKENIZER_FILES)):
            return Tokenizer.from_source(source)
        if name:
            return Tokenizer.from_pretrained(name, cache_dir=cache_dir)
    except FileNotFoundError as e:  # HubUnavailableError too
        raise FileNotFoundError(f"no tokenizer for {ckpt.origin}: {e} Pass tokenizer= (a directory "
                                f"with tokenizer.json or vocab.json + merges.txt).") from None
    raise FileNotFoundError(f"no tokenizer files found for {ckpt.origin}; pass tokenizer=")


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """Where converted published checkpoints live: $MINIALIGN_CACHE, else $HF_HOME/minialign."""
    if cache_dir is not None:
        return Path(cache_dir) / "minialign"
    if os.environ.get("MINIALIGN_CACHE"):
        return Path(os.environ["MINIALIGN_CACHE"])
    from huggingface_hub import constants

    return Path(constants.HF_HOME) / "minialign"


def published_checkpoint(name: str, *, cache_dir: str | Path | None = None) -> Path:
    """The minialign directory of a published AlignScore checkpoint, converting it once, and again where the cached
    copy is of another format (loading/checkpoints.py NATIVE_FORMAT)."""
    filename, backbone = PUBLISHED[name]
    native = cache_root(cache_dir) / name
    if is_current(native):
        return native
    try:
        ckpt_path = resolve(HUB_REPO, cache_dir=cache_dir).file(filename)
        tokenizer = resolve(backbone, cache_dir=cache_dir)  # the backbone's config (unless a preset) and tokenizer
        tokenizer.present(TOKENIZER_FILES)
    except HubUnavailableError as e:
        raise HubUnavailableError(
            f"{name} is not in the cache and could not be downloaded ({e}). Offline, pass local files: "
            f"the checkpoint (https://huggingface.co/{HUB_REPO}/blob/main/{filename}) and a {backbone} "
            f"directory holding config.json and the tokenizer files, as "
            f"`--model path/{filename} --backbone path/{backbone}` (Python: "
            f"AlignScorer.from_pretrained('path/{filename}', backbone='path/{backbone}'))."
        ) from None
    ckpt = read_checkpoint(ckpt_path, backbone=tokenizer, cache_dir=cache_dir)
    native.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=native.parent, prefix=f".{name}-"))
    try:
        save_native(ckpt, staging)
        shutil.rmtree(native, ignore_errors=True)  # a leftover from an interrupted conversion
        os.replace(staging, native)  # complete or absent, never half-written
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return native
