"""Loading memory: the peak resident memory `Encoder.from_pretrained` adds for roberta-base-shaped
weights, against the size of the weights file, in a fresh process per row."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from minialign.models.encoder import Encoder

from benchmarks.fixtures import ROBERTA_BASE

TABLE = {"load as": "", "weights MB": ".0f", "peak added MB": ".0f", "ratio": ".2f"}

# VmHWM (peak RSS of this process image), not ru_maxrss, which execve inherits from the parent.
# A first load of a tiny checkpoint imports everything loading needs, so the figure is the weights' cost.
LOAD_PROBE = """
import json, re, sys, torch
import minialign as ma
def peak_kb():
    return int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1))
ma.Encoder.from_pretrained(sys.argv[2], dtype=getattr(torch, sys.argv[3]))
before = peak_kb()
model = ma.Encoder.from_pretrained(sys.argv[1], dtype=getattr(torch, sys.argv[3]))
with torch.no_grad():
    sum(float(p.sum()) for p in model.parameters())  # touch every weight: mapped pages count now
if sys.argv[4] == "forward":  # one inference pass: fp32 Linear layers make their packed copies (linear.py)
    with torch.inference_mode():
        model(torch.ones(1, 8, dtype=torch.long))
print(json.dumps({"before_kb": before, "after_kb": peak_kb()}))
"""


def measure(echo=print) -> list[dict]:
    """Peak resident memory added by loading roberta-base-shaped fp32 weights (and touching every
    one of them) as fp32, as bf16, and as fp32 after one forward, against the weights file's size."""
    from minialign.loading import Checkpoint, save_native

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        full, tiny = Path(tmp) / "roberta-base", Path(tmp) / "tiny"
        small = dataclasses.replace(ROBERTA_BASE, vocab_size=100, hidden_size=32, num_layers=1, num_heads=2,
                                    intermediate_size=64)
        for directory, config in ((full, ROBERTA_BASE), (tiny, small)):
            with torch.device("meta"):
                shapes = {f"encoder.{k}": v.shape for k, v in Encoder(config).state_dict().items()}
            save_native(Checkpoint(config, {k: torch.randn(shape) * 0.02 for k, shape in shapes.items()}, "bench"),
                        directory)
        size = (full / "model.safetensors").stat().st_size
        for label, dtype, then in (("float32", "float32", "-"), ("bfloat16", "bfloat16", "-"),
                                   ("float32, after one forward", "float32", "forward")):
            out = subprocess.run([sys.executable, "-c", LOAD_PROBE, str(full), str(tiny), dtype, then],
                                 capture_output=True, text=True, check=True)
            probe = json.loads(out.stdout.strip().splitlines()[-1])
            added = (probe["after_kb"] - probe["before_kb"]) * 1024
            rows.append({"load as": label, "weights MB": size / 2**20, "peak added MB": added / 2**20,
                         "ratio": added / size})
            echo(f"loading as {label}: fp32 weights {size / 2**20:.0f} MB, peak RSS added {added / 2**20:.0f} MB "
                 f"({added / size:.2f}x)")
    return rows
