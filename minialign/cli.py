"""`minialign convert | parity` (also `python -m minialign ...`)."""

from __future__ import annotations

import argparse
import sys

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _convert(args: argparse.Namespace) -> int:
    from .loading import export_hf, read_checkpoint, save_native

    ckpt = read_checkpoint(args.src, backbone=args.backbone)
    _validate(ckpt)
    write = export_hf if args.to == "hf" else save_native
    out = write(ckpt, args.dst, dtype=DTYPES[args.dtype] if args.dtype else None)
    print(f"wrote {args.to} checkpoint ({len(ckpt.tensors)} tensors, arch {ckpt.config.arch}) to {out}")
    if ckpt.dropped:
        print(f"dropped on purpose: {', '.join(ckpt.dropped)}")
    return 0


def _validate(ckpt) -> None:
    """Every tensor must fit the config (names and shapes), before anything is written."""
    from .loading import check_tensors
    from .model import AlignModel

    with torch.device("meta"):
        model = AlignModel(ckpt.config)
    check_tensors(model, ckpt.tensors, ckpt.origin)


def _parity(args: argparse.Namespace) -> int:
    from .parity import run_parity

    worst = run_parity(args.src, backbone=args.backbone, tolerance=args.tolerance)
    return 0 if worst <= args.tolerance else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="minialign", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("convert", help="convert a checkpoint to minialign's format or to transformers layout")
    p.add_argument("src", help="HF dir, hub id, minialign dir, or AlignScore .ckpt")
    p.add_argument("dst", help="output directory")
    p.add_argument("--backbone", help="for a .ckpt: dir, preset or hub id giving config.json (and tokenizer)")
    p.add_argument("--to", choices=("native", "hf"), default="native")
    p.add_argument("--dtype", choices=tuple(DTYPES), help="cast floating weights (default: keep)")
    p.set_defaults(run=_convert)

    p = sub.add_parser("parity", help="compare minialign with transformers on a checkpoint")
    p.add_argument("src")
    p.add_argument("--backbone")
    p.add_argument("--tolerance", type=float, default=1e-4)
    p.set_defaults(run=_parity)

    args = parser.parse_args(argv)
    from convert import CheckpointError

    try:
        return args.run(args)
    except (CheckpointError, FileNotFoundError, ValueError) as e:
        print(f"minialign {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
