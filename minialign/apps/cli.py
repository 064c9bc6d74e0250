"""`minialign score | embed | classify | ner | fill-mask | zero-shot | qa | explore | serve | convert | parity` (also `python -m minialign ...`). The
benchmark is a script beside the package: `python scripts/bench.py`."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

from minialign.apps import extra_hint
from minialign.nn.choices import SCORE_FUNCTIONS, TORCH_DTYPE_NAMES

# The parser is built from torch-free modules only (nn/choices.py, products/choices.py, the product table), so
# `minialign --help` and `minialign COMMAND --help` import no torch; each command imports what it runs.
DTYPES = tuple(TORCH_DTYPE_NAMES)  # --dtype's names (nn/config.DTYPES maps each to its torch dtype)


def _convert(args: argparse.Namespace) -> int:
    from minialign.loading import export_hf, read_checkpoint, save_native
    from minialign.nn import config

    ckpt = read_checkpoint(args.src, backbone=args.backbone)
    _validate(ckpt)
    write = export_hf if args.to == "hf" else save_native
    out = write(ckpt, args.dst, dtype=config.DTYPES[args.dtype] if args.dtype else None)
    print(f"wrote {args.to} checkpoint ({len(ckpt.tensors)} tensors, arch {ckpt.config.arch}) to {out}")
    if ckpt.dropped:
        print(f"dropped on purpose: {', '.join(ckpt.dropped)}")
    return 0


def _validate(ckpt) -> None:
    """Every tensor must fit the config (names and shapes), before anything is written: checked against
    the class the checkpoint is for, and an Encoder's checkpoint holding an MLM head (a pretraining
    checkpoint's; convert writes it too) against AlignModel, which reads that head besides every weight."""
    from minialign.loading import check_tensors, own_tensors
    from minialign.models.auto import model_class
    from minialign.models.encoder import Encoder
    from minialign.models.head_models import AlignModel
    from minialign.nn.init import shapes_only

    cls = model_class(ckpt)
    if cls is Encoder and any(name.startswith("mlm_head.") for name in ckpt.tensors):
        cls = AlignModel
    with shapes_only():
        model = cls(ckpt.config)
    check_tensors(model, own_tensors(cls, ckpt), ckpt.origin)


def _dtype(args: argparse.Namespace):
    """--dtype parsed once, as from_pretrained takes it (loading.parse_dtype: a DtypeChoice); "auto" also says on
    stderr what it will pick, "int8" that the results will be quantized."""
    from minialign.loading import parse_dtype, resolve_device
    from minialign.nn.precision import INT8

    if args.dtype is None:
        return None  # from_pretrained's default (fp32)
    choice = parse_dtype(args.dtype)
    if choice.precision == INT8:
        print("dtype int8: quantized (int8 products in every encoder layer's Linear layers, weights per output "
              "channel, inputs per token, smoothed by a calibration on loading; embeddings, attention, LayerNorm "
              "and heads fp32): results differ from "
              "fp32 (BENCHMARKS.md, int8)", file=sys.stderr)
    elif choice.auto:
        compute = choice.precision_on(resolve_device(args.device)).compute_dtype
        print("dtype auto: " + ("bf16 matmuls with fp32 weights (attention output and FFN down projections; "
                                "the rest fp32; bf16 is native here)"
                                if compute is not None else "fp32 (no native bf16 here)"), file=sys.stderr)
    return choice


THREADS_HELP = ("intra-op threads of the forwards (default: the CPUs this process may use, by its affinity and its "
                "container's CPU quota, not the host's count; fewer can be faster on a busy machine: the speed guide)")


ADAPTER_HELP = ("for a checkpoint carrying task adapters (jina-embeddings-v3's own layout): the task whose LoRA adapter "
                "is merged into the weights at load, e.g. retrieval.query (embed: its prompt becomes the default)")


def _loading(args: argparse.Namespace) -> dict:
    return {"device": args.device, "dtype": _dtype(args), "batch_size": args.batch_size,
            "max_tokens": args.max_tokens, "workers": args.workers, "threads": args.threads, "adapter": args.adapter}


def _named(args: argparse.Namespace, *flags: str) -> str:
    """The model as the command named it, recorded with file outputs (for --resume)."""
    return " ".join(f"--{flag} {getattr(args, flag)}" for flag in flags if getattr(args, flag, None))


def _files(args: argparse.Namespace) -> bool:
    """Whether the command runs on files (--input/--output) rather than on text arguments."""
    if (args.input is None) != (args.output is None):
        raise ValueError("--input and --output go together")
    return args.input is not None


def _run_file(job, args: argparse.Namespace, verb: str) -> int:
    from minialign.apps.files.run import Interrupted, run_file

    try:
        n = run_file(job, Path(args.input), Path(args.output), id_field=args.id_field, resume=args.resume,
                     skip_invalid=args.skip_invalid)
    except Interrupted as e:  # one line, no traceback: what is done and how to go on (run.run_file's promise)
        print(f"minialign {args.command}: interrupted: {e.written} row(s) are in {e.output}; continue with: "
              f"{_resume_command(args)}", file=sys.stderr)
        return INTERRUPTED
    print(f"{verb} {n} row(s) into {args.output}", file=sys.stderr)
    return 0


INTERRUPTED = 130  # a shell's status for a command ended by SIGINT (128 + 2)


def _resume_command(args: argparse.Namespace) -> str:
    """The command as it was given, with --resume: what continues an interrupted file run."""
    import shlex

    argv = [*args.argv, *([] if args.resume else ["--resume"])]
    return shlex.join(["minialign", *argv])


def _run_ray(product, options: dict, args: argparse.Namespace) -> int:
    """--ray: the product's file job on Ray Data, sharded (raydata.run_sharded)."""
    if args.input is None or args.output is None:
        raise ValueError("--ray needs --input (a file or directory) and --output (a directory of shards)")
    try:
        import ray
    except ImportError:
        raise ValueError(f"--ray needs the ray extra, {extra_hint('ray')}") from None
    from minialign.apps import raydata

    options = {**options, **_loading(args), "id_field": args.id_field}
    _quiet_ray_data()
    if not ray.is_initialized():
        local = args.ray == "local"
        # a local Ray we start: its workers' output (per-task logs) stays in its session's logs, and its own
        # INFO lines unsaid; errors still reach us as exceptions
        ray.init(address=None if local else args.ray, **({"log_to_driver": False, "logging_level": "WARNING"}
                                                         if local else {}))
    verb = product.verb
    counts = raydata.run_sharded(raydata.batches_class(product.name), options, input=Path(args.input),
                                 output=Path(args.output), id_field=args.id_field, shards=args.shards, output_format=args.output_format,
                                 actors=args.actors, batch_rows=args.batch_rows, cpus_per_actor=args.cpus_per_actor,
                                 gpus_per_actor=args.gpus_per_actor, echo=lambda line: print(line, file=sys.stderr))
    print(f"{verb} {counts['written']} shard(s) into {args.output} ({counts['skipped']} already there, skipped)",
          file=sys.stderr)
    return 0


def _quiet_ray_data() -> None:
    """Ray Data's INFO lines (each dataset's plan, progress logged line by line when stdout is not a
    terminal, "execution finished") go to its session log file only, not to this command's stderr: its
    console handler shows warnings and errors. A terminal still gets the live progress bars."""
    import logging

    import ray.data  # noqa: F401  (configures the "ray.data" logger)

    for handler in logging.getLogger("ray.data").handlers:
        if handler.get_name() == "console":  # the handler Ray Data's logging config names so
            handler.setLevel(logging.WARNING)


def _product(args: argparse.Namespace):
    """The product a command runs (apps/products.py): its --method, or the command's one product."""
    from minialign.apps.products import commands

    products = commands()[args.command]
    return next(p for p in products if p.name == getattr(args, "method", products[0].name))


def _refuse_others_options(product, args: argparse.Namespace) -> None:
    """An option another --method of the command declares, given away from its default, is refused by name (the
    chosen product would not read it)."""
    from minialign.apps.products import commands

    offered = {o.name: o for p in commands()[args.command] for o in (*p.load, *p.options)}
    own = {o.name for o in (*product.load, *product.options)}
    if stray := [o.flag for name, o in offered.items() if name not in own and getattr(args, name) != o.default]:
        raise ValueError(f"{', '.join(stray)}: not an option of --method {product.name}")


def _run_product(args: argparse.Namespace) -> int:
    """A product's command (score, embed, classify, and any other the table declares): one input given by flags
    (printed), a file (--input/--output), or a dataset on Ray Data (--ray)."""
    from minialign.products.runner import OptionError

    product = _product(args)
    _refuse_others_options(product, args)
    args.model = args.model or product.model
    load = {o.name: getattr(args, o.name) for o in product.load}
    fields = {f"{i.role}_field": getattr(args, f"{i.role}_field") for i in product.inputs}
    options = {o.name: getattr(args, o.name) for o in product.options if getattr(args, o.name) is not None}
    if args.ray is not None:  # (an option left unset is not recorded: an output begun without it resumes)
        return _run_ray(product, {"model": args.model or product.model, **load, **fields, **options}, args)
    required = [i for i in product.inputs if not i.optional]
    files, given = _files(args), [getattr(args, i.role) is not None for i in required]
    if files == any(given):
        optional = "".join(f" (and --{i.role})" for i in product.inputs if i.optional)
        raise ValueError(f"give either {' and '.join(f'--{i.role}' for i in required)}{optional}, "
                         "or --input and --output")
    if not files and not all(given):
        raise ValueError(f"{' and '.join(f'--{i.role}' for i in required)} go together")
    runner = product.load_runner(args.model, **load, **_loading(args))
    # the model as the command named it: its source and the options that name files (those with a default, such as
    # --mode, are recorded by the runner's settings)
    named = [o.name for o in product.load if o.default is None]
    try:
        job = product.make_job(runner, model=_named(args, *(["method"] if hasattr(args, "method") else []), "model",
                                                    *named), **fields, **options)
    except OptionError as e:  # named by its flag
        raise ValueError(f"--{e.option.replace('_', '-')} {e.problem}") from None
    if files:
        return _run_file(job, args, product.verb)
    from minialign.apps.files.rows import Row

    (record,) = job.run([Row(None, 0, {i.role: getattr(args, i.role) for i in product.inputs})])
    job.finish()
    print(json.dumps(next(iter(record.values())) if len(record) == 1 else record, ensure_ascii=False))
    return 0


def _serve(args: argparse.Namespace) -> int:
    """Bind, load, then serve until SIGTERM or Ctrl-C. Ctrl-C (while loading too) ends with one line and status 130
    (INTERRUPTED: a script sees it stopped); an address refused is one line naming it and the flag to change (status
    2, main), said before any model loads."""
    import errno

    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise ValueError(f"minialign serve needs the serve extra, {extra_hint('serve')}") from None
    from minialign.apps.products import PRODUCTS
    from minialign.apps.serve import Limits, Models, Service, bind, serve
    from minialign.products.runner import refuse_int8

    wanted = [(PRODUCTS[name], spec) for name, specs in args.products.items() for spec in specs]
    for product, _ in wanted:  # refused before anything is announced or loaded
        if not product.int8:
            refuse_int8(args.dtype, f"{product.runner.__name__} (--{product.name})")
    hints = {errno.EADDRINUSE: "pick another with --port (0: any free port)",
             errno.EADDRNOTAVAIL: "--host must be an address of this machine (127.0.0.1; 0.0.0.0: all of them)",
             errno.EACCES: "ports below 1024 need privileges: pick another with --port"}
    try:
        try:  # bound before the models load: an address in use is said at once (serve/app.py bind names it)
            sock = bind(args.host, args.port)
        except OSError as e:
            if e.errno not in hints:
                raise
            raise ValueError(f"{e.strerror}; {hints[e.errno]}") from None
        with sock:
            models = Models()
            for product, spec in wanted:
                _serve_load(models, product, spec, args)
            limits = Limits(max_batch_tokens=args.max_batch_tokens, max_wait_ms=args.max_wait_ms,
                            max_queue=args.max_queue, max_body_bytes=args.max_body_bytes,
                            max_client_batch_size=args.max_client_batch_size, api_key=args.api_key)
            serve(Service(models, limits), host=args.host, sock=sock)
    except KeyboardInterrupt:  # uvicorn stops gracefully on SIGINT (answers what it took), then raises it again
        print("\nminialign serve: stopped (Ctrl-C)", file=sys.stderr)
        return INTERRUPTED
    return 0


def _serve_load(models, product, spec: str, args: argparse.Namespace) -> None:
    """Load one model the service was told to (--NAME SPEC) where its protocols find it (serve/core.Models)."""
    from minialign.apps.serve import ALIGNSCORE_ROUTES

    loading = {"device": args.device, "dtype": _dtype(args), "threads": args.threads, "adapter": args.adapter}
    if product.serve_as == "alignscore":  # NeMo Guardrails' route names: --alignscore [NAME=]SRC
        name, _, src = spec.rpartition("=")
        name = name or ("large" if src == "AlignScore-large" else "base")
        if name not in ALIGNSCORE_ROUTES:
            raise ValueError(f"--alignscore {spec}: the route name must be one of {ALIGNSCORE_ROUTES} (NAME=SRC)")
        if name in models.alignscore:
            raise ValueError(f"--alignscore: two models for /alignscore_{name}")
        models.alignscore[name] = product.load_runner(src, backbone=args.backbone, **loading)
        models.names["alignscore"] = src
        models.names[f"alignscore_{name}"] = src  # each route's own, for /info
        return
    runner = product.load_runner(spec, **loading)
    if product.serve_as is not None:
        setattr(models, product.serve_as, runner)
    else:
        models.products[product.name] = runner
    models.names[product.name] = spec


class _ProductSpec(argparse.Action):
    """--NAME SRC of `serve`: collected into args.products (name -> the sources given, in order); only AlignScore
    takes several (one per NeMo Guardrails route name)."""

    def __init__(self, *args, repeatable: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.repeatable = repeatable

    def __call__(self, parser, namespace, values, option_string=None):
        products = dict(getattr(namespace, "products", None) or {})
        name = self.dest
        if products.get(name) and not self.repeatable:
            raise argparse.ArgumentError(self, "given twice: the service runs one model of it")
        products[name] = [*products.get(name, []), values]
        namespace.products = products


def _serve_parser(sub) -> None:
    from minialign.apps.products import PRODUCTS

    p = sub.add_parser("serve", help="an HTTP service: NeMo Guardrails' AlignScore API, TEI's API, HF Inference's "
                                     "text-classification, /score, /rows (needs the serve extra)")
    for product in PRODUCTS.values():  # --alignscore [NAME=]SRC (repeatable), --minicheck [SRC], --embed SRC, ...
        named = product.serve_as == "alignscore"
        optional = product.model is not None and not named
        p.add_argument(f"--{product.name}", dest=product.name, action=_ProductSpec, help=product.serve_help,
                       nargs="?" if optional else None, const=product.model if optional else None,
                       metavar="[NAME=]SRC" if named else "SRC", repeatable=named)
    p.set_defaults(products={})
    p.add_argument("--backbone", help="for an AlignScore .ckpt: backbone dir or hub id")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")

    def port(value: str) -> int:
        if not value.isdigit() or int(value) > 65535:
            raise argparse.ArgumentTypeError(f"{value!r}: a port is a number from 0 to 65535 (0: any free port)")
        return int(value)

    p.add_argument("--port", type=port, default=8000, help="port (0: any free port, printed at start)")
    p.add_argument("--max-batch-tokens", type=int, default=None, help="token budget of one model call")
    p.add_argument("--max-wait-ms", type=float, default=5.0, help="how long a call waits to merge requests")
    p.add_argument("--max-queue", type=int, default=512, help="requests in flight per model before 429")
    p.add_argument("--max-body-bytes", type=int, default=2 * 2**20, help="larger request bodies get 413")
    p.add_argument("--max-client-batch-size", type=int, default=1024, help="inputs in one request")
    p.add_argument("--api-key", help="require Authorization: Bearer KEY on every route but /health")
    p.add_argument("--device", default=None)
    p.add_argument("--dtype", choices=(*DTYPES, "auto", "int8"),
                   help="as the file commands' --dtype; int8 for --embed and --classify only")
    p.add_argument("--threads", type=int, default=None, help=THREADS_HELP + "; each loaded model's forwards use them")
    p.add_argument("--adapter", default=None, metavar="TASK", help=ADAPTER_HELP + "; every loaded model")
    p.set_defaults(run=_serve)


def _common(p: argparse.ArgumentParser, *, batch: str, int8: bool = True) -> None:
    """Options every model command shares: files, resume, device, precision, batching. int8: whether the
    command's --dtype offers int8 (the scorers do not: products/runner.py refuse_int8)."""
    p.add_argument("--input", help="a .jsonl, .csv or .tsv file of rows")
    p.add_argument("--output", help="where the results go (one row per input row, with its id)")
    p.add_argument("--id-field", default="id", help="row id field (default: id; else the line number)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run after its last row")
    p.add_argument("--skip-invalid", action="store_true", help="skip malformed rows instead of stopping")
    p.add_argument("--batch-size", type=int, default=32, help=f"most {batch} in one forward pass")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="most tokens in one forward pass (default: 2048 on CPU, 65536 on GPU)")
    p.add_argument("--device", default=None, help="cpu (default), cuda, cuda:N or mps")
    p.add_argument("--dtype", choices=(*DTYPES, "auto", *(("int8",) if int8 else ())),
                   help="weights' dtype (default fp32); auto: fp32 weights, the attention output and FFN down "
                        "matmuls in bf16 where bf16 is native" + ("; int8: quantized products on CPU (never chosen "
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
    p.set_defaults(run=_run_product)


MASKS = ("left-only", "segment")  # explore --mask: the second run's mask (masks.py)


def _explore(args: argparse.Namespace) -> int:
    from minialign.nn import masks
    from minialign.apps.explore.data import explore, with_score_function
    from minialign.loading import build, read_checkpoint
    from minialign.models.auto import model_class
    from minialign.text.tokenizer import Tokenizer

    ckpt = read_checkpoint(args.model, backbone=args.backbone)
    model = build(model_class(ckpt), ckpt)
    tokenizer = Tokenizer.from_pretrained(args.tokenizer or ckpt.tokenizer_dir or args.model)
    compare_model = with_score_function(model, args.score_fn) if args.score_fn else None
    compare_mask, labels = None, None
    if args.mask:
        batch = tokenizer([args.text], None if args.pair is None else [args.pair],
                          max_length=min(args.max_length or tokenizer.model_max_length, model.config.max_seq_len))
        padding = batch["attention_mask"].bool()
        if args.mask == "left-only":
            compare_mask = masks.left_only_mask(padding)[0]
        else:  # a tokenizer without token types (RoBERTa's, MPNet's): the segments from the first text's end
            segments = batch.get("token_type_ids")
            if segments is None:
                segments = masks.pair_segments(batch["input_ids"], tokenizer.backend.token_to_id(tokenizer.end_token))
            compare_mask = masks.segment_mask(segments, padding)[0]
    if args.mask or args.score_fn:
        labels = (f"bidirectional, {model.config.score_fn}",
                  f"{args.mask or 'bidirectional'}, {args.score_fn or model.config.score_fn}")
    page = explore(model, tokenizer, args.text, pair=args.pair, compare_model=compare_model, compare_mask=compare_mask,
                   labels=labels, max_length=args.max_length)
    if page.cut_note:  # one line, never the text: the page shows what the model saw
        print(f"explore: {page.cut_note}", file=sys.stderr)
    path = page.save(args.output)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB); open it in a browser", file=sys.stderr)
    return 0


def _parity(args: argparse.Namespace) -> int:
    from minialign.apps.parity import run_parity

    from minialign.apps.parity import BACKENDS, LAYOUTS

    worst = run_parity(args.src, backbone=args.backbone, tolerance=args.tolerance,
                       backends=BACKENDS if args.backend == "all" else (args.backend,),
                       layouts=tuple(LAYOUTS) if args.layout == "all" else (args.layout,))
    return 0 if worst <= args.tolerance else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="minialign", description=__doc__)
    from minialign import __version__

    parser.add_argument("--version", action="version", version=f"minialign {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    from minialign.apps.products import commands

    for command, products in commands().items():
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
    p.add_argument("--max-length", type=int, default=None, help="token window (default: the model's)")
    p.add_argument("--output", default="explore.html")
    p.set_defaults(run=_explore)

    _serve_parser(sub)

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
    p.add_argument("--backend", choices=("all", "eager", "sdpa", "flex"), default="all",
                   help="minialign's attention backend(s) to compare (default: all three)")
    p.add_argument("--layout", choices=("all", "padded", "packed"), default="all",
                   help="a padded batch, or packed (unpad=True), or both (default)")
    p.set_defaults(run=_parity)

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
    elif args.run is _run_product and args.output is not None:
        if args.input is not None and not Path(args.input).exists():
            raise InputError(f"--input {args.input}: no such file or directory")
        check_output(args.output, formats=None if args.ray is not None else _product(args).outputs,
                     input=args.input, resume=args.resume)


def _check_rows(args: argparse.Namespace) -> None:
    """A file command's every input row, checked before any model is loaded (files.rows.validate_input: the
    same refusal the run makes, without the wait for the model; the product's pre-load check, such as
    AlignScore's claim with a sentence). --ray reads its rows on the cluster."""
    from minialign.apps.files.rows import validate_input

    if args.run is not _run_product or args.input is None or args.output is None or args.ray is not None:
        return
    product = _product(args)
    fields = product.fields(**{f"{i.role}_field": getattr(args, f"{i.role}_field") for i in product.inputs})
    validate_input(args.input, fields, id_field=args.id_field, skip_invalid=args.skip_invalid)


if __name__ == "__main__":
    sys.exit(main())
