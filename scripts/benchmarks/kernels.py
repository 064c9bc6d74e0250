"""The Machine section's kernel table: both fp32 kernels a Linear can run on this CPU, per row count."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minialign.nn.linear import Linear

from benchmarks.machine import interleaved

KERNEL_ROWS = (1, 16, 48, 128, 512, 2048)
KERNEL_SHAPES = ((768, 3072), (3072, 768), (384, 1536))  # (in, out): roberta-base's FFN up, down; MiniLM's up
TABLE = {"rows x in -> out": "", "F.linear GFLOP/s": ".1f", "oneDNN packed GFLOP/s": ".1f", "packed / F.linear": ".2f",
         "minialign runs": ""}


def measure(*, rounds: int, echo=print) -> list[dict]:
    """torch's F.linear (MKL's sgemm) and oneDNN with a prepacked weight, interleaved, per row count
    and shape, and the one minialign's Linear picks (linear.py)."""
    rows = []
    for (k, n), m in ((shape, m) for shape in KERNEL_SHAPES for m in KERNEL_ROWS):
        x, w = torch.randn(m, k), torch.randn(n, k)
        packed = torch.ops.mkldnn._reorder_linear_weight(w, None)
        calls = {"F.linear": lambda: F.linear(x, w),
                 "oneDNN packed": lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")}
        repeat = max(1, int(2e8 // (2 * m * k * n)))
        with torch.inference_mode():
            best = interleaved({label: (lambda c=call: [c() for _ in range(repeat)]) for label, call in calls.items()},
                               rounds=rounds)
            choice = Linear(k, n, bias=False)._kernel(x)
        rate = {label: 2 * m * k * n * repeat / seconds / 1e9 for label, seconds in best.items()}
        rows.append({"rows x in -> out": f"{m} x {k} -> {n}", "F.linear GFLOP/s": rate["F.linear"],
                     "oneDNN packed GFLOP/s": rate["oneDNN packed"],
                     "packed / F.linear": rate["oneDNN packed"] / rate["F.linear"],
                     "minialign runs": "oneDNN packed" if choice == "packed" else "F.linear"})
        echo(f"kernels {rows[-1]['rows x in -> out']:18} F.linear {rate['F.linear']:6.1f}  packed "
             f"{rate['oneDNN packed']:6.1f} GFLOP/s  -> {rows[-1]['minialign runs']}")
    return rows
