"""`minialign score | convert | parity` (also `python -m minialign ...`). The benchmark is a
script beside the package: `python scripts/bench.py`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from .config import DTYPES


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
    from .loading import check_tensors, own_tensors
    from .model import AlignModel, ClassifierModel

    cls = ClassifierModel if "classifier.out_proj.weight" in ckpt.tensors else AlignModel
    with torch.device("meta"):
        model = cls(ckpt.config)
    check_tensors(model, own_tensors(cls, ckpt), ckpt.origin)


def _score(args: argparse.Namespace) -> int:
    from .scorefile import score_file
    from .scorer import AlignScorer

    single = args.context is not None or args.claim is not None
    if single == (args.input is not None):
        raise ValueError("give either --context and --claim, or --input and --output")
    if single and (args.context is None or args.claim is None):
        raise ValueError("--context and --claim go together")
    if args.input is not None and args.output is None:
        raise ValueError("--input needs --output")
    scorer = AlignScorer.from_pretrained(args.model, backbone=args.backbone, tokenizer=args.tokenizer, mode=args.mode,
                                         batch_size=args.batch_size, max_tokens=args.max_tokens, device=args.device,
                                         dtype=DTYPES[args.dtype] if args.dtype else None)
    if single:
        print(scorer.score([args.context], [args.claim])[0])
        return 0
    model = " ".join(f"{flag} {value}" for flag, value in (("--model", args.model), ("--backbone", args.backbone),
                                                            ("--tokenizer", args.tokenizer)) if value)
    n = score_file(scorer, Path(args.input), Path(args.output), context_field=args.context_field,
                   claim_field=args.claim_field, id_field=args.id_field, resume=args.resume,
                   skip_invalid=args.skip_invalid, model=model)
    print(f"scored {n} row(s) into {args.output}", file=sys.stderr)
    return 0


def _parity(args: argparse.Namespace) -> int:
    from .parity import run_parity

    worst = run_parity(args.src, backbone=args.backbone, tolerance=args.tolerance)
    return 0 if worst <= args.tolerance else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="minialign", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("score", help="AlignScore a claim against a context, or a JSONL/CSV file of pairs")
    p.add_argument("--context", help="the context (premise) text")
    p.add_argument("--claim", help="the claim (hypothesis) text")
    p.add_argument("--input", help="pairs.jsonl or pairs.csv")
    p.add_argument("--output", help="scores.jsonl or scores.csv (rows: id, score)")
    p.add_argument("--context-field", default="context")
    p.add_argument("--claim-field", default="claim")
    p.add_argument("--id-field", default="id", help="row id field (default: id; else the line number)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run after its last row")
    p.add_argument("--skip-invalid", action="store_true", help="skip malformed rows instead of stopping")
    p.add_argument("--model", default="AlignScore-base",
                   help="AlignScore-base / AlignScore-large, a .ckpt, or a minialign / HF directory")
    p.add_argument("--backbone", help="for a .ckpt: backbone dir (config.json + tokenizer) or hub id")
    p.add_argument("--tokenizer", help="tokenizer dir or hub id (default: beside the model or backbone)")
    p.add_argument("--mode", default="nli_sp", choices=("nli_sp", "bin_sp", "reg_sp", "nli", "bin", "reg"))
    p.add_argument("--batch-size", type=int, default=32, help="most pairs in one forward pass")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="most tokens in one forward pass (default: 2048 on CPU, 65536 on GPU)")
    p.add_argument("--device", default=None)
    p.add_argument("--dtype", choices=tuple(DTYPES))
    p.set_defaults(run=_score)

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
    from .convert import CheckpointError

    try:
        return args.run(args)
    except (CheckpointError, OSError, ValueError) as e:
        print(f"minialign {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
