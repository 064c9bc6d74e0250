"""`minialign score | embed | classify | ner | fill-mask | zero-shot | qa | explore | serve | convert | parity |
evaluate` (also `python -m minialign ...`): the parser, built from the product table (apps/products.py) for the
products' commands, and the checks made before any model loads; what each command runs is commands.py's
(serve_command.py's for serve, evaluate.py's for evaluate). The benchmark is a script beside the package:
`python scripts/bench.py`."""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from minialign.apps.commands import (ADAPTER_HELP, DTYPES, INTERRUPTED, THREADS_HELP, product_of, run_convert,
                                     run_explore, run_parity, run_product)
from minialign.apps.evaluate import evaluate_parser
from minialign.apps.serve_command import serve_parser
from minialign.nn.choices import PRECISION_DTYPES, SCORE_FUNCTIONS

# The parser is built from torch-free modules only (nn/choices.py, products/choices.py, the product table), so
# `minialign --help` and `minialign COMMAND --help` import no torch; each command imports what it runs.


def _common(p: argparse.ArgumentParser, *, batch: str, int8: bool = True) -> None:
    """Options every model command shares: files, resume, device, precision, batching. int8: whether the
    command's --dtype offers int8 (the scorers do not: products/runner.py refuse_int8)."""
    p.add_argument("--input", help="a .jsonl, .csv or .tsv file of rows")
    p.add_argument("--output", help="where the results go (one row per input row, with its id)")
    p.add_argument("--id-field", default="id", help="row id field (default: id; else the line number)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run after its last row")
    p.add_argument("--skip-invalid", action="store_true", help="skip malformed rows instead of stopping")
    p.add_argument("--batch-size", type=int, default=None,
                   help=f"most {batch} in one forward pass (default: 32 on CPU; on a GPU the token budget decides)")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="most tokens in one forward pass (default: 2048 on CPU, 65536 on GPU)")
    p.add_argument("--device", default=None, help="cpu (default), cuda, cuda:N or mps")
    p.add_argument("--dtype", choices=(*DTYPES, *(word for word in PRECISION_DTYPES if int8 or word != "int8")),
                   help="weights' dtype (default fp32); auto: fp32 weights, the attention output and FFN down "
                        "matmuls in bf16 where bf16 is native; auto-all: the same on all four projections (Q/K/V, "
                        "attention output, FFN up and down)" + ("; int8: quantized products on CPU (never chosen "
                                                                "for you)" if int8 else ""))
    p.add_argument("--workers", type=int, default=1,
                   help="model processes on the CPU, each with threads/N threads (default 1; see BENCHMARKS.md)")
    p.add_argument("--threads", type=int, default=None, help=THREADS_HELP + "; with --workers, shared out among them")
    p.add_argument("--adapter", default=None, metavar="TASK", help=ADAPTER_HELP)
    ray = p.add_argument_group("Ray Data (the ray extra; README: Ray Data)")
    ray.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                     help="run on Ray Data: a cluster's address (auto, ray://host:10001), or none for a local Ray; "
                          "--input is then a .jsonl/.csv/.parquet file or directory, --output a directory of "
                          "shards, and a rerun skips the shards already written")
    from minialign.apps.shards import MAX_SHARDS, SHARD_ROWS

    ray.add_argument("--shards", type=int, default=None,
                     help=f"shards of the dataset, by a hash of the row id (default: one per {SHARD_ROWS:,} rows, "
                          f"at most {MAX_SHARDS}; a rerun keeps the count its output records)")
    ray.add_argument("--actors", type=int, default=1, help="model actors (each loads the model once)")
    ray.add_argument("--batch-rows", type=int, default=256, help="rows in one Ray batch (256)")
    ray.add_argument("--output-format", choices=("parquet", "jsonl"), default="parquet")
    ray.add_argument("--cpus-per-actor", type=float, default=None)
    ray.add_argument("--gpus-per-actor", type=float, default=None, help="e.g. 1 with --device cuda")


def _product_parser(sub, command: str, products: list) -> None:
    """A product command's parser, from the table (apps/products.py): per input --ROLE (one value) and
    --ROLE-field (a file's field); --method where several products share the command; --model; each product's
    options (its load options, then its per-call ones; an option several declare is offered once); and every
    model command's (_common)."""
    first = products[0]
    p = sub.add_parser(command, help=first.help)
    inputs = {i.role: i for product in products for i in product.inputs}
    for role, i in inputs.items():
        p.add_argument(f"--{role}", help=i.help)
        p.add_argument(i.field_flag, default=role, help=f"with --input: the field holding each row's {role} "
                                                        f"(default: {role})" + ("; rows without it are single texts"
                                                                                if i.optional else ""))
    if len(products) > 1:
        p.add_argument("--method", default=first.name, choices=[product.name for product in products],
                       help=f"{first.name} (default) or " + " or ".join(product.name for product in products[1:]))
    model_help = "; ".join(f"{product.name}: {product.model_help}" for product in products) \
        if len(products) > 1 else first.model_help
    p.add_argument("--model", required=all(product.model is None for product in products), help=model_help)
    options = {o.name: o for product in products for o in (*product.load, *product.options)}
    groups: dict[str, argparse._MutuallyExclusiveGroup] = {}
    for o in options.values():
        if o.exclusive and o.exclusive not in groups:
            groups[o.exclusive] = p.add_mutually_exclusive_group()
        where = groups[o.exclusive] if o.exclusive else p
        if isinstance(o.default, bool):  # a switch; one on by default also takes --no-NAME
            where.add_argument(o.flag, action=argparse.BooleanOptionalAction if o.default else "store_true",
                               default=o.default, help=o.help)
        else:
            where.add_argument(o.flag, default=o.default, type=o.parse if o.many else o.type, choices=o.choices,
                               help=o.help, metavar="A,B" if o.many else None)
    pairs = sum(not i.optional for i in inputs.values()) > 1
    _common(p, batch="pairs" if pairs else "texts", int8=all(product.int8 for product in products))
    p.set_defaults(run=run_product)


MASKS = ("left-only", "segment")  # explore --mask: the second run's mask (masks.py)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="minialign", description=__doc__)
    from minialign import __version__

    parser.add_argument("--version", action="version", version=f"minialign {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    from minialign.apps.products import by_command

    for command, products in by_command().items():
        _product_parser(sub, command, products)

    p = sub.add_parser("explore", help="one self-contained HTML page of a model's attention and residual stream")
    p.add_argument("--model", required=True, help="HF dir, hub id, minialign dir, or AlignScore .ckpt")
    p.add_argument("--backbone", help="for a .ckpt: backbone dir (config.json + tokenizer) or hub id")
    p.add_argument("--tokenizer", help="tokenizer dir or hub id (default: beside the model)")
    p.add_argument("--text", required=True)
    p.add_argument("--pair", help="a second text (a claim, a hypothesis)")
    p.add_argument("--mask", choices=MASKS, help="also run with this mask and show both runs and their difference")
    p.add_argument("--score-fn", choices=[s for s in SCORE_FUNCTIONS if s != "scaled_dot"],
                   help="also run with this alignment-score function (its parameters initialised: general and "
                        "bilinear start equal to the scaled dot product)")
    p.add_argument("--seed", type=int, default=None,
                   help="with --score-fn: the seed its parameters are drawn from (default: with_score_function's "
                        "fixed seed, so the page is the same every run)")
    p.add_argument("--corrupted", metavar="TEXT",
                   help="a corrupted text of the same token count: run beside the clean one, with activation "
                        "patching's maps (residual stream per layer and position, heads per layer)")
    p.add_argument("--corrupted-pair", metavar="TEXT",
                   help="with --corrupted: the corrupted input's pair (default: --pair)")
    p.add_argument("--max-length", type=int, default=None, help="token window (default: the model's)")
    p.add_argument("--output", default="explore.html")
    p.set_defaults(run=run_explore)

    serve_parser(sub)

    p = sub.add_parser("convert", help="convert a checkpoint to minialign's format or to transformers layout")
    p.add_argument("src", help="HF dir, hub id, minialign dir, or AlignScore .ckpt")
    p.add_argument("dst", help="output directory")
    p.add_argument("--backbone", help="for a .ckpt: dir, preset or hub id giving config.json (and tokenizer)")
    p.add_argument("--to", choices=("native", "hf"), default="native")
    p.add_argument("--dtype", choices=tuple(DTYPES), help="cast floating weights (default: keep)")
    p.set_defaults(run=run_convert)

    p = sub.add_parser("parity", help="compare minialign with transformers on a checkpoint",
                       description="Run one checkpoint in minialign and in transformers on the same inputs and print "
                                   "the max abs difference per layer. It compares two implementations of the same "
                                   "weights, not the weights: a perturbed or wrong weight passes by design (both "
                                   "sides compute with it); a NaN or infinity in a weight fails, named first.")
    p.add_argument("src")
    p.add_argument("--backbone")
    p.add_argument("--tolerance", type=float, default=1e-4,
                   help="largest max abs difference that passes (default %(default)g: the tests hold the small "
                        "models they name to 1e-5; a deeper, wider checkpoint's fp32 rounding adds up further; "
                        "docs/parity.md)")
    p.add_argument("--backend", choices=("all", "eager", "sdpa", "flex"), default="all",
                   help="minialign's attention backend(s) to compare (default: all three)")
    p.add_argument("--layout", choices=("all", "padded", "packed"), default="all",
                   help="a padded batch, or packed (unpad=True), or both (default)")
    p.set_defaults(run=run_parity)

    evaluate_parser(sub)

    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    args.argv = argv  # as given: an interrupted file run prints it back with --resume
    from minialign.convert import CheckpointError

    shown = warnings.formatwarning
    warnings.formatwarning = _warning_line
    try:
        _check_paths(args)
        _check_rows(args)
        return args.run(args)
    except (CheckpointError, OSError, ValueError) as e:
        print(f"minialign {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before any row was written (loading, reading): nothing to resume
        print(f"\nminialign {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED
    finally:
        warnings.formatwarning = shown


def _warning_line(message, category, filename, lineno, line=None) -> str:
    """A warning as the command line shows it: one line, without the source line that raised it."""
    return f"warning: {category.__name__}: {message}\n"


def _check_paths(args: argparse.Namespace) -> None:
    """Where the command reads and writes, checked before any model is loaded or row read
    (files.formats.check_output, the one check of a destination)."""
    from minialign.apps.files.formats import InputError, check_output

    if args.command == "convert":
        check_output(args.dst, formats=None, flag="DST")
    elif args.command == "explore":
        check_output(args.output, formats=("html",))
    elif args.run is run_product and args.output is not None:
        if args.input is not None and not Path(args.input).exists():
            raise InputError(f"--input {args.input}: no such file or directory")
        check_output(args.output, formats=None if args.ray is not None else product_of(args).outputs,
                     input=args.input, resume=args.resume)


def _check_rows(args: argparse.Namespace) -> None:
    """A file command's every input row, checked before any model is loaded (files.rows.validate_input: the
    same refusal the run makes, without the wait for the model; the product's pre-load check, such as
    AlignScore's claim with a sentence). --ray reads its rows on the cluster."""
    from minialign.apps.files.rows import validate_input

    if args.run is not run_product or args.input is None or args.output is None or args.ray is not None:
        return
    product = product_of(args)
    fields = product.fields(**{f"{i.role}_field": getattr(args, f"{i.role}_field") for i in product.inputs})
    validate_input(args.input, fields, id_field=args.id_field, skip_invalid=args.skip_invalid)


if __name__ == "__main__":
    sys.exit(main())
