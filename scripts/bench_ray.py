"""Ray Data throughput on this machine: the sharded `--ray` path at 1 and 2 actors against the
single-process file command on the same rows, in one run.

    python scripts/bench_ray.py [--pairs 96] [--texts 2048] [--out ray.md]

A tool beside the package (needs the test extra: ray, transformers): AlignScore scoring (roberta-base
shape, random weights, the seeded length mix of scripts/benchmarks/corpus.py) and embeddings (all-MiniLM-L6-v2,
texts of 3-200 words). A local Ray with every core of this machine, on 127.0.0.1. The Ray runs use
one shard, so each pays its actors' start (a Ray worker process, the model's load) once, as a shard
of a real run does. Each configuration runs twice, the second timed; times include Ray's scheduling
and the parquet writes, i.e. what a user's run pays.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/, beside this file

from benchmarks.corpus import mixed_texts, scoring_corpus  # noqa: E402
from benchmarks.fixtures import alignscore_fixture, minilm_dir  # noqa: E402
from benchmarks.machine import machine  # noqa: E402
from benchmarks.report import table  # noqa: E402

TABLE = {"job": "", "how": "", "rows": "", "rows/s": ".2f", "vs one process": ".2f", "first run s": ".1f"}


def _rows(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def run(*, pairs: int, texts: int, echo=print) -> list[dict]:
    import os

    import ray

    from minialign.apps.cli import main

    cores = os.cpu_count() or 1
    ray.init(num_cpus=cores, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
             configure_logging=False)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            contexts, claims = scoring_corpus(pairs)
            ckpt, backbone, _ = alignscore_fixture(tmp, contexts + claims)
            # --batch-rows: enough Ray batches that every actor gets work (a Ray batch goes to one actor)
            jobs = {"score (AlignScore, roberta-base shape)": (
                ["score", "--model", str(ckpt), "--backbone", str(backbone), "--batch-rows", "16"],
                _rows(tmp / "pairs.jsonl", [{"id": i, "context": c, "claim": q} for i, (c, q) in
                                            enumerate(zip(contexts, claims))]))}
            minilm = minilm_dir()
            if minilm is not None:
                jobs["embed (all-MiniLM-L6-v2)"] = (["embed", "--model", str(minilm), "--batch-rows", "256"], _rows(
                    tmp / "texts.jsonl", [{"id": i, "text": t} for i, t in enumerate(mixed_texts(texts, seed=5))]))
            for job, (command, source) in jobs.items():
                n = len(source.read_text().splitlines())
                configs = [("one process, file command", [], 1)] + [
                    (f"Ray, {a} actor(s) x {cores // a} CPU", ["--ray", "--actors", str(a), "--cpus-per-actor",
                                                                str(cores // a), "--shards", "1"], a)
                    for a in (1, 2) if a <= cores]
                base = None
                for label, extra, _ in configs:
                    seconds = []
                    for attempt in range(2):  # the first loads models (and starts Ray's workers)
                        out = tmp / f"out-{attempt}" / ("rows.jsonl" if not extra else "shards")
                        shutil.rmtree(out.parent, ignore_errors=True)
                        out.parent.mkdir()
                        start = time.perf_counter()
                        args = command if extra else command[:command.index("--batch-rows")]  # a Ray option
                        assert main([*args, "--input", str(source), "--output", str(out), *extra]) == 0
                        seconds.append(time.perf_counter() - start)
                    base = base or seconds[-1]
                    rows.append({"job": job, "how": label, "rows": n, "rows/s": n / seconds[-1],
                                 "vs one process": base / seconds[-1], "first run s": seconds[0]})
                    echo(f"{job:40} {label:32} {n / seconds[-1]:8.2f} rows/s  x{base / seconds[-1]:.2f}")
    finally:
        ray.shutdown()
    return rows


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="scripts/bench_ray.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=96, help="(context, claim) rows to score")
    parser.add_argument("--texts", type=int, default=2048, help="texts to embed")
    parser.add_argument("--out", help="also write the markdown table here")
    args = parser.parse_args(argv)
    rows = run(pairs=args.pairs, texts=args.texts)
    text = "Machine: " + ", ".join(f"{k} {v}" for k, v in machine().items()) + "\n\n" + table(rows, TABLE) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
