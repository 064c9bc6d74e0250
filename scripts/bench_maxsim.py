"""MaxSim (late interaction, ColBERT's score): minialign's `maxsim` / `maxsim_pairwise` against sentence-transformers'
util.similarity functions of the same names, on random unit vectors.

    python scripts/bench_maxsim.py [--pairs 1000] [--queries 32] [--documents 1000] [--rounds 5]

A tool beside the package (the `test` extra: sentence-transformers). Query vectors per text 8-32, document vectors
20-180, dim 128 (ColBERTv2's), seeded. Each implementation is timed once per round, rounds interleaved, best kept;
the load average is printed beside. `same bits alone` says whether every score equals the one its query (and, for
the pairwise call, its document) gets scored alone: what minialign guarantees (its products run on oneDNN's packed
kernel, whose sums do not follow the shapes) and what a matmul summing by shape need not give. Speed goes in
BENCHMARKS.md, never in a test.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

DIM = 128


def vectors(count: int, lo: int, hi: int, generator: torch.Generator) -> list[torch.Tensor]:
    lengths = torch.randint(lo, hi + 1, (count,), generator=generator)
    return [torch.nn.functional.normalize(torch.randn(int(n), DIM, generator=generator), dim=-1) for n in lengths]


def implementations() -> dict:
    """name -> (maxsim, maxsim_pairwise) of each library."""
    from sentence_transformers.util import similarity

    from minialign.products import multivector

    return {"sentence-transformers": (similarity.maxsim, similarity.maxsim_pairwise),
            "minialign": (multivector.maxsim, multivector.maxsim_pairwise)}


def alone_equal(full: torch.Tensor, score_alone, count: int) -> bool:
    """Whether the first `count` rows of `full` are the bits each gets scored alone."""
    return all(torch.equal(score_alone(i), full[i]) for i in range(count))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=32)
    parser.add_argument("--documents", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--checked", type=int, default=8, help="rows whose scores are compared with scoring alone")
    args = parser.parse_args(argv)
    generator = torch.Generator().manual_seed(0)
    queries, documents = vectors(args.queries, 8, 32, generator), vectors(args.documents, 20, 180, generator)
    pair_queries, pair_documents = vectors(args.pairs, 8, 32, generator), vectors(args.pairs, 20, 180, generator)
    impls = implementations()
    calls = {}
    for name, (maxsim, pairwise) in impls.items():
        calls[("maxsim", name)] = lambda f=maxsim: f(queries, documents)
        calls[("maxsim_pairwise", name)] = lambda f=pairwise: f(pair_queries, pair_documents)
    best, outputs = {key: float("inf") for key in calls}, {}
    with torch.inference_mode():
        for key, call in calls.items():
            outputs[key] = call()  # warm-up
        for round_ in range(args.rounds):
            for key, call in (calls.items() if round_ % 2 == 0 else reversed(calls.items())):
                start = time.perf_counter()
                call()
                best[key] = min(best[key], time.perf_counter() - start)
        load = os.getloadavg()[0]
        checked = min(args.checked, args.queries, args.pairs)
        same = {}
        for name, (maxsim, pairwise) in impls.items():
            same[("maxsim", name)] = alone_equal(outputs[("maxsim", name)],
                                                 lambda i, f=maxsim: f([queries[i]], documents)[0], checked)
            same[("maxsim_pairwise", name)] = alone_equal(
                outputs[("maxsim_pairwise", name)],
                lambda i, f=pairwise: f([pair_queries[i]], [pair_documents[i]])[0], checked)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; maxsim: {args.queries} queries x "
          f"{args.documents} documents; maxsim_pairwise: {args.pairs} pairs; vectors dim {DIM}, query 8-32, document "
          f"20-180; best of {args.rounds} interleaved rounds\n")
    print("| call | implementation | best (ms) | vs sentence-transformers | max abs diff | same bits alone | load average |")
    print("|---|---|---|---|---|---|---|")
    for (call, name), seconds in best.items():
        base = best[(call, "sentence-transformers")]
        diff = (outputs[(call, name)].float() - outputs[(call, "sentence-transformers")].float()).abs().max().item()
        print(f"| {call} | {name} | {seconds * 1e3:.1f} | {base / seconds:.2f}x | {diff:.1e} | "
              f"{'yes' if same[(call, name)] else 'no'} | {load:.2f} |")


if __name__ == "__main__":
    main()
