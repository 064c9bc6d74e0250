"""What each command of `minialign` runs (cli.py builds the parser and hands the parsed arguments here): a product's
command on one input, a file or a Ray dataset (`run_product`), and the tools `convert`, `explore` and `parity`.
Importing it imports no torch; each command imports what it runs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from minialign.apps import extra_hint
from minialign.nn.choices import TORCH_DTYPE_NAMES

DTYPES = tuple(TORCH_DTYPE_NAMES)  # --dtype's names (nn/config.DTYPES maps each to its torch dtype)


THREADS_HELP = ("intra-op threads of the forwards (default: the CPUs this process may use, by its affinity and its "
                "container's CPU quota, not the host's count; fewer can be faster on a busy machine: the speed guide)")


ADAPTER_HELP = ("for a checkpoint carrying task adapters (jina-embeddings-v3's own layout): the task whose LoRA adapter "
                "is merged into the weights at load, e.g. retrieval.query (embed: its prompt becomes the default)")


def dtype_choice(args: argparse.Namespace):
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
        precision = choice.precision_on(resolve_device(args.device))
        which = ("Q/K/V, attention output, FFN up and down projections" if precision.layers == "all"
                 else "attention output and FFN down projections")
        print(f"dtype {choice}: " + (f"bf16 matmuls with fp32 weights ({which}; the rest fp32; bf16 is native here)"
                                     if precision.compute_dtype is not None else "fp32 (no native bf16 here)"),
              file=sys.stderr)
    return choice


def loading_options(args: argparse.Namespace) -> dict:
    return {"device": args.device, "dtype": dtype_choice(args), "batch_size": args.batch_size,
            "max_tokens": args.max_tokens, "workers": args.workers, "threads": args.threads, "adapter": args.adapter}


def _named(args: argparse.Namespace, *flags: str) -> str:
    """The model as the command named it, recorded with file outputs (for --resume)."""
    return " ".join(f"--{flag} {getattr(args, flag)}" for flag in flags if getattr(args, flag, None))


def _files(args: argparse.Namespace) -> bool:
    """Whether the command runs on files (--input/--output) rather than on text arguments."""
    if (args.input is None) != (args.output is None):
        raise ValueError("--input and --output go together")
    return args.input is not None


INTERRUPTED = 130  # a shell's status for a command ended by SIGINT (128 + 2)


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

    options = {**options, **loading_options(args), "id_field": args.id_field}
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


def product_of(args: argparse.Namespace):
    """The product a command runs (apps/products.py): its --method, or the command's one product."""
    from minialign.apps.products import by_command

    products = by_command()[args.command]
    return next(p for p in products if p.name == getattr(args, "method", products[0].name))


def _refuse_others_options(product, args: argparse.Namespace) -> None:
    """An option another --method of the command declares, given away from its default, is refused by name (the
    chosen product would not read it)."""
    from minialign.apps.products import by_command

    offered = {o.name: o for p in by_command()[args.command] for o in (*p.load, *p.options)}
    own = {o.name for o in (*product.load, *product.options)}
    if stray := [o.flag for name, o in offered.items() if name not in own and getattr(args, name) != o.default]:
        raise ValueError(f"{', '.join(stray)}: not an option of --method {product.name}")


def run_product(args: argparse.Namespace) -> int:
    """A product's command (score, embed, classify, and any other the table declares): one input given by flags
    (printed), a file (--input/--output), or a dataset on Ray Data (--ray)."""
    from minialign.products.runner import OptionError

    product = product_of(args)
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
    runner = product.load_runner(args.model, **load, **loading_options(args))
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


def run_convert(args: argparse.Namespace) -> int:
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


def run_explore(args: argparse.Namespace) -> int:
    from minialign.nn import masks
    from minialign.apps.explore.data import explore
    from minialign.loading import build, read_checkpoint
    from minialign.models.auto import model_class
    from minialign.nn.score_swap import SEED, with_score_function
    from minialign.text.tokenizer import Tokenizer

    from minialign.models.encoder import Encoder

    ckpt = read_checkpoint(args.model, backbone=args.backbone)
    model = build(model_class(ckpt), ckpt)
    tokenizer = Tokenizer.from_pretrained(args.tokenizer or ckpt.tokenizer_dir or args.model)
    if args.seed is not None and not args.score_fn:
        raise ValueError("--seed draws the parameters of --score-fn's function: give --score-fn too")
    if args.corrupted_pair is not None and args.corrupted is None:
        raise ValueError("--corrupted-pair is the corrupted input's pair: give --corrupted too")
    if args.corrupted is not None and (args.mask or args.score_fn):
        raise ValueError("--corrupted is the page's second run: it does not mix with --mask or --score-fn")
    metric, metric_name = None, None  # default: patching.metric_for (AlignScore's probability, mean-pooled cosine)
    if args.corrupted is not None and type(model) is Encoder and _sentence_modules(args.model):
        metric, metric_name = _pooled_metric(args, model, tokenizer)
    seed = SEED if args.seed is None else args.seed
    compare_model = with_score_function(model, args.score_fn, seed=seed) if args.score_fn else None
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
                   labels=labels, max_length=args.max_length, corrupted=args.corrupted,
                   corrupted_pair=args.corrupted_pair, metric=metric, metric_name=metric_name)
    if page.cut_note:  # one line, never the text: the page shows what the model saw
        print(f"explore: {page.cut_note}", file=sys.stderr)
    path = page.save(args.output)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB); open it in a browser", file=sys.stderr)
    return 0


def _sentence_modules(model: str) -> bool:
    """Whether `model` is a sentence-transformers directory (a modules.json SentenceEncoder reads)."""
    from minialign import convert
    from minialign.sources import resolve

    try:
        return convert.read_modules(resolve(model)) is not None
    except (convert.CheckpointError, OSError, ValueError):  # a single checkpoint file, or modules it cannot read
        return False


def _pooled_metric(args: argparse.Namespace, model, tokenizer):
    """explore --corrupted on a sentence-transformers directory: the cosine of its own embedding (its pooling, dense
    layers and normalisation: products/probes.py pooled_cosine) of the patched run against the clean run's."""
    import torch

    from minialign.products import probes
    from minialign.products.embeddings import SentenceEncoder
    from minialign.text.tokenizer import pad

    runner = SentenceEncoder.from_pretrained(args.model, tokenizer=tokenizer)
    runner.model = model  # the page's own model: the patches apply to it
    window = min(args.max_length or tokenizer.model_max_length, model.config.max_seq_len)
    encoded = tokenizer.encode_ids([args.text], None if args.pair is None else [args.pair], max_length=window)
    clean = pad(encoded.ids, encoded.type_ids, pad_id=tokenizer.pad_token_id,
                token_types=tokenizer.return_token_type_ids)
    with torch.no_grad():
        reference = probes.embedding_of(runner, model(**clean), clean["attention_mask"])
    steps = [f"{'+'.join(runner.pooling)} pooling", *(f"Dense to {d.linear.out_features}" for d in runner.dense),
             *(["Normalize"] if runner.normalize else [])]
    said = (f"the cosine between the clean run's sentence embedding and the patched run's, as the model's "
            f"sentence-transformers modules make it ({', '.join(steps)})")
    return probes.pooled_cosine(runner, reference, clean["attention_mask"]), said


def run_parity(args: argparse.Namespace) -> int:
    from minialign.apps.parity import run_parity

    from minialign.apps.parity import BACKENDS, LAYOUTS

    worst = run_parity(args.src, backbone=args.backbone, tolerance=args.tolerance,
                       backends=BACKENDS if args.backend == "all" else (args.backend,),
                       layouts=tuple(LAYOUTS) if args.layout == "all" else (args.layout,))
    return 0 if worst <= args.tolerance else 1
