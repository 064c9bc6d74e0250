"""`minialign score | embed | classify | explore | serve | convert | parity` (also `python -m minialign ...`). The
benchmark is a script beside the package: `python scripts/bench.py`."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import torch

from minialign.nn.config import DTYPES
from minialign.nn.score_functions import SCORE_FUNCTIONS


def _convert(args: argparse.Namespace) -> int:
    from minialign.loading import export_hf, read_checkpoint, save_native

    ckpt = read_checkpoint(args.src, backbone=args.backbone)
    _validate(ckpt)
    write = export_hf if args.to == "hf" else save_native
    out = write(ckpt, args.dst, dtype=DTYPES[args.dtype] if args.dtype else None)
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
    from minialign.models.encoder import AlignModel, Encoder

    cls = model_class(ckpt)
    if cls is Encoder and any(name.startswith("mlm_head.") for name in ckpt.tensors):
        cls = AlignModel
    with torch.device("meta"):
        model = cls(ckpt.config)
    check_tensors(model, own_tensors(cls, ckpt), ckpt.origin)


MINICHECK_DEFAULT = "lytang/MiniCheck-RoBERTa-Large"


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


def _loading(args: argparse.Namespace) -> dict:
    return {"device": args.device, "dtype": _dtype(args), "batch_size": args.batch_size,
            "max_tokens": args.max_tokens, "workers": args.workers}


def _named(args: argparse.Namespace, *flags: str) -> str:
    """The model as the command named it, recorded with file outputs (for --resume)."""
    return " ".join(f"--{flag} {getattr(args, flag)}" for flag in flags if getattr(args, flag, None))


def _files(args: argparse.Namespace) -> bool:
    """Whether the command runs on files (--input/--output) rather than on text arguments."""
    if (args.input is None) != (args.output is None):
        raise ValueError("--input and --output go together")
    return args.input is not None


def _run_file(job, args: argparse.Namespace, verb: str) -> int:
    from minialign.apps.files.rows import run_file

    n = run_file(job, Path(args.input), Path(args.output), id_field=args.id_field, resume=args.resume,
                 skip_invalid=args.skip_invalid)
    print(f"{verb} {n} row(s) into {args.output}", file=sys.stderr)
    return 0


def _run_ray(mapper: str, options: dict, args: argparse.Namespace, verb: str) -> int:
    """--ray: the file job on Ray Data, sharded (raydata.run_sharded)."""
    if args.input is None or args.output is None:
        raise ValueError("--ray needs --input (a file or directory) and --output (a directory of shards)")
    try:
        import ray
    except ImportError:
        raise ValueError("--ray needs the ray extra: pip install 'minialign[ray]'") from None
    from minialign.apps import raydata

    options = {**options, **_loading(args), "id_field": args.id_field}
    _quiet_ray_data()
    if not ray.is_initialized():
        local = args.ray == "local"
        # a local Ray we start: its workers' output (per-task logs) stays in its session's logs, and its own
        # INFO lines unsaid; errors still reach us as exceptions
        ray.init(address=None if local else args.ray, **({"log_to_driver": False, "logging_level": "WARNING"}
                                                         if local else {}))
    counts = raydata.run_sharded(getattr(raydata, mapper), options, input=Path(args.input), output=Path(args.output),
                                 id_field=args.id_field, shards=args.shards, output_format=args.output_format,
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


def _score(args: argparse.Namespace) -> int:
    from minialign.apps.files.jobs import score_job

    if args.ray is not None:
        minicheck = args.method == "minicheck"
        options = {"model": args.model or (MINICHECK_DEFAULT if minicheck else "AlignScore-base"),
                   "tokenizer": args.tokenizer, "context_field": args.context_field, "claim_field": args.claim_field}
        options.update({"chunk_size": args.chunk_size} if minicheck else {"backbone": args.backbone, "mode": args.mode})
        return _run_ray("MiniCheckBatches" if minicheck else "AlignScoreBatches", options, args, "scored")
    files = _files(args)
    if files == (args.context is not None or args.claim is not None):
        raise ValueError("give either --context and --claim, or --input and --output")
    if not files and (args.context is None or args.claim is None):
        raise ValueError("--context and --claim go together")
    if args.method == "minicheck":
        from minialign.products.minicheck import MiniCheckScorer

        args.model = args.model or MINICHECK_DEFAULT
        scorer = MiniCheckScorer.from_pretrained(args.model, tokenizer=args.tokenizer, chunk_size=args.chunk_size,
                                                 **_loading(args))
    else:
        from minialign.products.alignscore import AlignScorer

        args.model = args.model or "AlignScore-base"
        scorer = AlignScorer.from_pretrained(args.model, backbone=args.backbone, tokenizer=args.tokenizer,
                                             mode=args.mode, **_loading(args))
    if not files:
        tally = scorer.tally(details=False)  # the command line has no return_details to point to
        print(scorer.score([args.context], [args.claim], tally=tally)[0])
        tally.warn()
        return 0
    job = score_job(scorer, context_field=args.context_field, claim_field=args.claim_field,
                    model=_named(args, "method", "model", "backbone", "tokenizer"))
    return _run_file(job, args, "scored")


def _embed(args: argparse.Namespace) -> int:
    from minialign.products.embeddings import SentenceEncoder
    from minialign.apps.files.jobs import embed_job

    prompts = {k: v for k, v in (("prompt_name", args.prompt_name), ("prompt", args.prompt)) if v is not None}
    if args.ray is not None:  # (the prompt options only when given: an output begun without them resumes)
        return _run_ray("EmbedBatches", {"model": args.model, "text_field": args.text_field,
                                         "normalize": args.normalize, **prompts}, args, "embedded")
    files = _files(args)
    if files == (args.text is not None):
        raise ValueError("give either --text, or --input and --output")
    encoder = SentenceEncoder.from_pretrained(args.model, **_loading(args))
    if not files:
        print(json.dumps(encoder.encode([args.text], normalize_embeddings=args.normalize, **prompts)[0].tolist()))
        return 0
    job = embed_job(encoder, text_field=args.text_field, normalize=args.normalize, model=_named(args, "model"),
                    **prompts)
    return _run_file(job, args, "embedded")


def _classify(args: argparse.Namespace) -> int:
    from minialign.products.classifier import Classifier
    from minialign.apps.files.jobs import classify_job

    if args.ray is not None:
        return _run_ray("ClassifyBatches", {"model": args.model, "tokenizer": args.tokenizer,
                                            "text_field": args.text_field, "pair_field": args.pair_field,
                                            "activation": args.activation}, args, "classified")
    files = _files(args)
    if files == (args.text is not None):
        raise ValueError("give either --text (and --pair), or --input and --output")
    classifier = Classifier.from_pretrained(args.model, tokenizer=args.tokenizer, **_loading(args))
    job = classify_job(classifier, text_field=args.text_field, pair_field=args.pair_field,
                       activation=args.activation, model=_named(args, "model", "tokenizer"))
    if not files:
        from minialign.apps.files.rows import Row

        (record,) = job.run([Row(None, 0, {"text": args.text, "pair": args.pair})])
        print(json.dumps(record, ensure_ascii=False))
        return 0
    return _run_file(job, args, "classified")


def _serve(args: argparse.Namespace) -> int:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise ValueError("minialign serve needs the serve extra: pip install 'minialign[serve]'") from None
    from minialign.apps.serve import ALIGNSCORE_ROUTES, Limits, Models, Service, serve
    from minialign.products.runner import refuse_int8

    if args.alignscore:  # refused before anything is announced or loaded
        refuse_int8(args.dtype, "AlignScorer (--alignscore)")
    loading = {"device": args.device, "dtype": _dtype(args)}
    models = Models()
    from minialign.products.alignscore import AlignScorer

    for spec in args.alignscore or []:
        name, _, src = spec.rpartition("=")
        name = name or ("large" if src == "AlignScore-large" else "base")
        if name not in ALIGNSCORE_ROUTES:
            raise ValueError(f"--alignscore {spec}: the route name must be one of {ALIGNSCORE_ROUTES} (NAME=SRC)")
        if name in models.alignscore:
            raise ValueError(f"--alignscore: two models for /alignscore_{name}")
        models.alignscore[name] = AlignScorer.from_pretrained(src, backbone=args.backbone, **loading)
        models.names["alignscore"] = src
        models.names[f"alignscore_{name}"] = src  # each route's own, for /info
    if args.embed:
        from minialign.products.embeddings import SentenceEncoder

        models.embedder, models.names["embed"] = SentenceEncoder.from_pretrained(args.embed, **loading), args.embed
    if args.classify:
        from minialign.products.classifier import Classifier

        models.classifier = Classifier.from_pretrained(args.classify, **loading)
        models.names["classify"] = args.classify
    limits = Limits(max_batch_tokens=args.max_batch_tokens, max_wait_ms=args.max_wait_ms, max_queue=args.max_queue,
                    max_body_bytes=args.max_body_bytes, max_client_batch_size=args.max_client_batch_size,
                    api_key=args.api_key)
    serve(Service(models, limits), host=args.host, port=args.port)
    return 0


def _common(p: argparse.ArgumentParser, *, batch: str, int8: bool = True) -> None:
    """Options every model command shares: files, resume, device, precision, batching. int8: whether the
    command's --dtype offers int8 (the scorers do not: products/runner.py refuse_int8)."""
    p.add_argument("--input", help="a .jsonl or .csv file of rows")
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
                   help="model processes on the CPU, each with cores/N threads (default 1; see BENCHMARKS.md)")
    ray = p.add_argument_group("Ray Data (the ray extra; README: Ray Data)")
    ray.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                     help="run on Ray Data: a cluster's address (auto, ray://host:10001), or none for a local Ray; "
                          "--input is then a .jsonl/.csv/.parquet file or directory, --output a directory of "
                          "shards, and a rerun skips the shards already written")
    from minialign.apps.raydata import MAX_SHARDS, SHARD_ROWS

    ray.add_argument("--shards", type=int, default=None,
                     help=f"shards of the dataset, by a hash of the row id (default: one per {SHARD_ROWS:,} rows, "
                          f"at most {MAX_SHARDS}; a rerun keeps the count its output records)")
    ray.add_argument("--actors", type=int, default=1, help="model actors (each loads the model once)")
    ray.add_argument("--batch-rows", type=int, default=256, help="rows in one Ray batch (256)")
    ray.add_argument("--output-format", choices=("parquet", "jsonl"), default="parquet")
    ray.add_argument("--cpus-per-actor", type=float, default=None)
    ray.add_argument("--gpus-per-actor", type=float, default=None, help="e.g. 1 with --device cuda")


def _texts(p: argparse.ArgumentParser, *, text: str, model: str) -> None:
    """The options of a command on texts (embed, classify): one --text, or a file's --text-field; the
    model; and every model command's (_common)."""
    p.add_argument("--text", help=text)
    p.add_argument("--text-field", default="text", help="with --input: the field holding each row's text "
                                                        "(default: text)")
    p.add_argument("--model", required=True, help=model)
    _common(p, batch="texts")


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

    p = sub.add_parser("score", help="AlignScore (or MiniCheck) a claim against a context, or a JSONL/CSV file")
    p.add_argument("--context", help="the context (premise, document) text")
    p.add_argument("--claim", help="the claim (hypothesis) text")
    p.add_argument("--context-field", default="context")
    p.add_argument("--claim-field", default="claim")
    p.add_argument("--method", default="alignscore", choices=("alignscore", "minicheck"),
                   help="alignscore (default) or minicheck (a MiniCheck RoBERTa or DeBERTa-v3 classifier as --model)")
    p.add_argument("--model", default=None,
                   help="alignscore: AlignScore-base (default) / AlignScore-large, a .ckpt, or a minialign / HF "
                        f"directory; minicheck: a classifier directory or hub id (default {MINICHECK_DEFAULT})")
    p.add_argument("--backbone", help="for a .ckpt: backbone dir (config.json + tokenizer) or hub id")
    p.add_argument("--tokenizer", help="tokenizer dir or hub id (default: beside the model or backbone)")
    p.add_argument("--mode", default="nli_sp", choices=("nli_sp", "bin_sp", "reg_sp", "nli", "bin", "reg"),
                   help="alignscore only")
    p.add_argument("--chunk-size", type=int, default=400, help="minicheck only: tokens per document chunk")
    _common(p, batch="pairs", int8=False)
    p.set_defaults(run=_score)

    p = sub.add_parser("embed", help="sentence embeddings of a text, or of a JSONL/CSV file (.jsonl or .safetensors out)")
    _texts(p, text="one text: prints its embedding as a JSON list",
           model="a sentence-transformers or HF directory, or a hub id")
    p.add_argument("--normalize", action="store_true", help="unit-length embeddings")
    prompt = p.add_mutually_exclusive_group()
    prompt.add_argument("--prompt-name", help="one of the model's prompts (config_sentence_transformers.json), put "
                                              "before every text (default: the model's default_prompt_name, if any)")
    prompt.add_argument("--prompt", help="a prompt text put before every text (\"\": none, not even the default)")
    p.set_defaults(run=_embed)

    p = sub.add_parser("classify", help="classify a text or pair, or a JSONL/CSV file (labels and scores)")
    _texts(p, text="one text: prints its label and scores as JSON",
           model="a *ForSequenceClassification directory or hub id")
    p.add_argument("--pair", help="with --text: the second text of a pair")
    p.add_argument("--pair-field", default="pair", help="rows without it are classified as single texts")
    p.add_argument("--tokenizer", help="tokenizer dir or hub id (default: beside the model)")
    p.add_argument("--activation", default="auto", choices=("auto", "none", "softmax", "sigmoid", "tanh"))
    p.set_defaults(run=_classify)

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

    p = sub.add_parser("serve", help="an HTTP service: NeMo Guardrails' AlignScore API, TEI's API, /score "
                                     "(needs the serve extra)")
    p.add_argument("--alignscore", action="append", metavar="[NAME=]SRC",
                   help="an AlignScore model for /alignscore_NAME (base or large; AlignScore-large -> large); "
                        "repeat for both")
    p.add_argument("--backbone", help="for an AlignScore .ckpt: backbone dir or hub id")
    p.add_argument("--embed", metavar="SRC", help="an embedding model for TEI's /embed (and POST /)")
    p.add_argument("--classify", metavar="SRC", help="a classifier or reranker for TEI's /predict and /rerank")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (0: any free port, printed at start)")
    p.add_argument("--max-batch-tokens", type=int, default=None, help="token budget of one model call")
    p.add_argument("--max-wait-ms", type=float, default=5.0, help="how long a call waits to merge requests")
    p.add_argument("--max-queue", type=int, default=512, help="requests in flight per model before 429")
    p.add_argument("--max-body-bytes", type=int, default=2 * 2**20, help="larger request bodies get 413")
    p.add_argument("--max-client-batch-size", type=int, default=1024, help="inputs in one request")
    p.add_argument("--api-key", help="require Authorization: Bearer KEY on every route but /health")
    p.add_argument("--device", default=None)
    p.add_argument("--dtype", choices=(*DTYPES, "auto", "int8"),
                   help="as the file commands' --dtype; int8 for --embed and --classify only")
    p.set_defaults(run=_serve)

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

    args = parser.parse_args(argv)
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
    finally:
        warnings.formatwarning = shown


def _warning_line(message, category, filename, lineno, line=None) -> str:
    """A warning as the command line shows it: one line, without the source line that raised it."""
    return f"warning: {category.__name__}: {message}\n"


def _check_paths(args: argparse.Namespace) -> None:
    """Where the command reads and writes, checked before any model is loaded or row read
    (files.rows.check_output, the one check of a destination)."""
    from minialign.apps.files.rows import InputError, check_output
    from minialign.apps.files.jobs import OUTPUT_FORMATS

    if args.command == "convert":
        check_output(args.dst, formats=None, flag="DST")
    elif args.command == "explore":
        check_output(args.output, formats=("html",))
    elif args.command in OUTPUT_FORMATS and args.output is not None:
        if args.input is not None and not Path(args.input).exists():
            raise InputError(f"--input {args.input}: no such file or directory")
        check_output(args.output, formats=None if args.ray is not None else OUTPUT_FORMATS[args.command],
                     input=args.input, resume=args.resume)


def _check_rows(args: argparse.Namespace) -> None:
    """A file command's every input row, checked before any model is loaded (files.rows.validate_input: the
    same refusal the run makes, without the wait for the model). --ray reads its rows on the cluster."""
    from minialign.apps.files import jobs
    from minialign.apps.files.rows import validate_input

    if args.command not in jobs.OUTPUT_FORMATS or args.input is None or args.output is None or args.ray is not None:
        return
    if args.command == "score":
        check = None
        if args.method == "alignscore":  # AlignScorer.check with its default splitter: a claim needs a sentence
            from minialign.products.alignscore import check_example
            from minialign.text.sentences import split_sentences

            check = lambda values: check_example(values["context"], values["claim"], split_sentences,  # noqa: E731
                                                 null="null")[0]
        fields = jobs.score_fields(context_field=args.context_field, claim_field=args.claim_field, check=check)
    elif args.command == "embed":
        fields = jobs.embed_fields(text_field=args.text_field)
    else:
        fields = jobs.classify_fields(text_field=args.text_field, pair_field=args.pair_field)
    validate_input(args.input, fields, id_field=args.id_field, skip_invalid=args.skip_invalid)


if __name__ == "__main__":
    sys.exit(main())
