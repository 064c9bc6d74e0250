"""Many cores: the same jobs with one model process using every thread, and with `workers` processes
of threads / workers threads each (minialign.runtime.process_pool)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch

from benchmarks.corpus import mixed_texts, scoring_corpus
from benchmarks.fixtures import alignscore_fixture, minilm_dir
from benchmarks.machine import interleaved

TABLE = {"job": "", "processes x threads": "", "items/s": ".2f", "vs 1 process": ".2f", "first call s": ".1f"}


def measure(*, examples: int, texts: int, echo=print) -> list[dict]:
    """AlignScore scoring (roberta-base shape) and bulk embeddings (MiniLM) per split of the threads.
    Times are the best of two calls after each configuration's warm-up call, which starts its workers."""
    from minialign.products.alignscore import AlignScorer
    from minialign.products.embeddings import SentenceEncoder

    threads = torch.get_num_threads()
    splits = [(1, threads)] + [(w, threads // w) for w in (2, 4, 8) if w <= threads]
    splits.append((1, 1))  # one thread alone: how well this machine's threads scale inside one process
    contexts, claims = scoring_corpus(examples)
    corpus = mixed_texts(texts, seed=3)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, backbone, _ = alignscore_fixture(Path(tmp), contexts + claims)
        jobs = {"AlignScore nli_sp": (lambda workers: AlignScorer.from_pretrained(ckpt, backbone=str(backbone),
                                                                                 workers=workers),
                                      lambda scorer: scorer.score(contexts, claims), len(contexts))}
        minilm = minilm_dir()
        if minilm is not None:
            jobs["embed (all-MiniLM-L6-v2)"] = (lambda workers: SentenceEncoder.from_pretrained(minilm, workers=workers),
                                               lambda encoder: encoder.encode(corpus), len(corpus))
        for job, (load, call, n) in jobs.items():
            base = None
            for workers, per in splits:
                runner = load(workers)
                torch.set_num_threads(per if workers == 1 else threads)
                try:
                    start = time.perf_counter()
                    call(runner)  # warm-up; starts the workers
                    startup = time.perf_counter() - start
                    seconds = interleaved({job: lambda: call(runner)}, rounds=2, warm_up={})[job]
                finally:
                    runner.engine.close()
                    torch.set_num_threads(threads)
                base = base or seconds
                rows.append({"job": job, "processes x threads": f"{workers} x {per}", "items/s": n / seconds,
                             "vs 1 process": base / seconds, "first call s": startup})
                echo(f"{job:28} {workers} x {per}: {n / seconds:7.2f} items/s  x{base / seconds:.2f}  "
                     f"(first call {startup:.1f} s)")
    return rows
