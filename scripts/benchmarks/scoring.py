"""AlignScore scoring: minialign's AlignScorer against the original pipeline (scripts/original_alignscore.py)
on the seeded length mix, per dtype, padded and unpadded."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

from minialign.nn.config import DTYPES

from benchmarks.corpus import scoring_corpus
from benchmarks.fixtures import alignscore_fixture
from benchmarks.machine import interleaved

TABLE = {"impl": "", "pairs/s": ".2f", "speed-up": ".2f", "max abs diff": ".1e"}


def measure(*, examples: int, dtypes: list[str], rounds: int = 2, device: str = "cpu", config=None,
            echo=print) -> list[dict]:
    """pairs/s of each implementation, its speed-up over the original and its largest score difference
    from it; each after a warm-up on three examples, rounds interleaved, the best round kept. config: the
    model's shape (default roberta-base's; a dry run's toy)."""
    from original_alignscore import OriginalAlignScore
    from transformers import AutoTokenizer

    from minialign.products.alignscore import AlignScorer
    from minialign.text.sentences import split_sentences

    contexts, claims = scoring_corpus(examples)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, backbone, parts = alignscore_fixture(Path(tmp), contexts + claims,
                                                   **({} if config is None else {"config": config}))
        hf_tok = AutoTokenizer.from_pretrained(backbone, tokenizer_type="roberta")
        original = OriginalAlignScore({name: part.to(device) for name, part in parts.items()}, hf_tok, "nli_sp",
                                      split_sentences)
        runners = {"original (transformers fp32, pad 512, MLM head)": original.score}
        for dtype_name in dtypes:
            for unpad in (False, True):
                scorer = AlignScorer.from_pretrained(ckpt, backbone=str(backbone), unpad=unpad, device=device,
                                                     dtype=DTYPES.get(dtype_name, dtype_name))
                runners[f"minialign {dtype_name}{' unpadded' if unpad else ''}"] = scorer.score
        _, pairs = scorer._plan(contexts, claims, "nli_sp")  # every example's (chunk, sentence) pairs
        scores = {}
        seconds = interleaved({name: (lambda s=score: s(contexts, claims)) for name, score in runners.items()},
                              rounds=rounds, outputs=scores,
                              warm_up={name: (lambda s=score: s(contexts[:3], claims[:3]))
                                       for name, score in runners.items()})
    reference, base = next(iter(scores.values())), next(iter(seconds.values()))
    rows = [{"impl": name, "pairs/s": len(pairs) / seconds[name], "speed-up": base / seconds[name],
             "max abs diff": max(abs(a - b) for a, b in zip(scores[name], reference))} for name in runners]
    for row in rows:
        echo(f"{row['impl']:48} {row['pairs/s']:7.2f} pairs/s  x{row['speed-up']:.2f}  "
             f"max|diff| {row['max abs diff']:.1e}")
    return rows


# -- the GPU suite's rows (scripts/gpu_suite.sh: bench.py --suite scoring; the method: timing.py) ------------------

SECTION = "scoring"
ORIGINAL = "original (transformers fp32, pad 512, MLM head)"
LATENCY_EXAMPLES = 12  # the latency case: 12 examples of the seeded mix, 57 (chunk, sentence) pairs
CORPUS_PAIRS = 1000  # the throughput case: the seeded mix grown until its examples hold at least this many pairs


def suite_impls(low: str) -> dict[str, dict]:
    """minialign's scorers of the suite, each AlignScorer.from_pretrained's keywords: fp32, `low` (bf16 on a GPU;
    fp32 on a CPU, where it is the same row), dtype="auto" and "auto-all" (mixed: fp32 weights, projections in bf16
    where native), packed varlen, and compiled (CUDA graphs with "reduce-overhead" where runners take it), each
    where this checkout offers it (offered.py)."""
    from benchmarks import offered

    impls = {"minialign fp32": {"dtype": "fp32"}, f"minialign {low}": {"dtype": low},
             "minialign auto": {"dtype": "auto"}}
    if offered.dtype_word("auto-all"):
        impls["minialign auto-all"] = {"dtype": "auto-all"}
    if offered.backend("varlen"):
        impls[f"minialign {low} packed varlen"] = {"dtype": low, "attn_backend": "varlen", "unpad": True}
    mode = "reduce-overhead" if offered.compile_mode("reduce-overhead") else None
    impls[f"minialign {low} compiled" + (f" {mode}" if mode else "")] = {"dtype": low, "compile": mode or True}
    return impls


def corpus_of(pairs_wanted: int, plan) -> tuple[list[str], list[str], int]:
    """(contexts, claims, pairs): the seeded length mix, grown 10% at a time until `plan(contexts, claims)` (the
    scorer's (chunk, sentence) pairs) holds at least pairs_wanted."""
    n = max(3, pairs_wanted // 5)
    while True:
        contexts, claims = scoring_corpus(n)
        pairs = len(plan(contexts, claims))
        if pairs >= pairs_wanted:
            return contexts, claims, pairs
        n = max(n + 1, int(n * 1.1))


def suite_rows(*, reps: int, corpus_reps: int, device: str = "cuda", latency_examples: int = LATENCY_EXAMPLES,
               corpus_pairs: int = CORPUS_PAIRS, config=None, add=lambda rows: None, echo=print) -> list[dict]:
    """The section's rows (data.py), each case's passed to `add` once measured: the original pipeline and each of
    suite_impls on the latency case (`latency_examples`, `reps` repetitions) and the throughput case (at least
    `corpus_pairs` pairs, `corpus_reps` repetitions: the original takes seconds a run), interleaved
    (timing.repeat) in timing.phases' groups. A compiled scorer first meets every batch shape of both cases (its
    compile_s: that warm-up on the throughput case beyond a steady run), then counts the frames it compiles while
    timed (recompiles: none expected). Each row's deviation is its largest |score difference| from the original's
    (fp32); syncs, kernels and the attention backend come from one latency call each. config: the model's shape
    (default roberta-base's)."""
    from original_alignscore import OriginalAlignScore
    from transformers import AutoTokenizer

    from minialign.products.alignscore import AlignScorer
    from minialign.text.sentences import split_sentences

    from benchmarks import data
    from benchmarks.encoder import row_line
    from benchmarks.syncs import backend_of, counted, per_call
    from benchmarks.timing import phases, repeat

    low = "bf16" if device.startswith("cuda") else "fp32"
    impls = suite_impls(low)
    latency = scoring_corpus(latency_examples)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, backbone, parts = alignscore_fixture(Path(tmp), sum(scoring_corpus(20 * latency_examples), []),
                                                   **({} if config is None else {"config": config}))
        hf_tok = AutoTokenizer.from_pretrained(backbone, tokenizer_type="roberta")
        original = OriginalAlignScore({name: part.to(device) for name, part in parts.items()}, hf_tok, "nli_sp",
                                      split_sentences)
        scorers = {name: AlignScorer.from_pretrained(ckpt, backbone=str(backbone), device=device,
                                                     dtype=DTYPES.get(keywords["dtype"], keywords["dtype"]),
                                                     **{k: v for k, v in keywords.items() if k != "dtype"})
                   for name, keywords in impls.items()}
        plan = lambda contexts, claims: scorers["minialign fp32"]._plan(contexts, claims, "nli_sp")[1]  # noqa: E731
        corpus = corpus_of(corpus_pairs, plan)
        cases = {f"roberta-base nli_sp, {latency_examples} examples": (*latency, len(plan(*latency)), reps),
                 f"roberta-base nli_sp, {len(corpus[0])} examples": (*corpus, corpus_reps)}
        runners = {ORIGINAL: original.score, **{name: functools.partial(scorer.score, warn_truncation=False)
                                                for name, scorer in scorers.items()}}
        compiled = {name for name, keywords in impls.items() if keywords.get("compile")}
        for index, group in enumerate(phases(list(runners), ORIGINAL, compiled)):
            echo(f"{SECTION}: warming up {', '.join(group)} (a compiled one on every shape of both cases)")
            warm = {}  # a compiled scorer meets every batch shape of both cases before any timing
            for case, (contexts, claims, _, _) in reversed(cases.items()):
                whole = {name: (lambda s=runners[name], c=contexts, k=claims: s(c, k)) for name in group}
                warm[case] = repeat(whole, reps=0, device=device, warm_up={
                    name: whole[name] if name in compiled else (lambda s=runners[name], c=contexts[:3], k=claims[:3]:
                                                                s(c, k)) for name in group})
            for case, (contexts, claims, pairs, case_reps) in cases.items():
                recompiles, scores = {}, {}
                calls = {name: (lambda s=runners[name], c=contexts, k=claims: s(c, k)) for name in group}
                timed = {name: counted(call, recompiles, name) if name in compiled else call
                         for name, call in calls.items()}
                times = repeat(timed, reps=case_reps, device=device, warm_up={}, outputs=scores)
                base, reference, case_rows = times[ORIGINAL], scores[ORIGINAL], []
                latency_case = case == next(iter(cases))
                for name, t in times.items():
                    if name == ORIGINAL and index > 0:
                        continue  # the baseline's row is its first group's
                    backend = None
                    if latency_case and name in impls and name not in compiled:
                        _, backend = backend_of(calls[name], impls[name].get("attn_backend", "sdpa"))
                    case_rows.append(data.row(
                        SECTION, case, name, baseline=ORIGINAL, ratio=base.median / t.median, **t.figures(),
                        pairs_per_s=pairs / t.median, inputs=pairs,
                        deviation=max(abs(a - b) for a, b in zip(scores[name], reference)), deviation_from=ORIGINAL,
                        **(per_call(calls[name], device, compiles=name in compiled, echo=echo) if latency_case else {}),
                        backend=backend,
                        compile_s=round(max(0.0, warm[case][name].warm_up - t.median), 3)
                        if name in compiled and not latency_case else None,
                        recompiles=recompiles.get(name, 0) if name in compiled else None))
                for row in case_rows:
                    echo(row_line(row))
                add(case_rows)
                rows += case_rows
    return rows
