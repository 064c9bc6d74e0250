"""Benchmarks: minialign against transformers and the original AlignScore pipeline, in one process.

    python scripts/bench.py [--quick] [--out REPORT.md] [--device cuda --models roberta-base roberta-large]
                            [--mpnet DIR] [--only families|int8|retrieval|heads|encoder|scoring|embeddings|internals]
                            [--only encoder --dtypes fp32 bf16]
    python scripts/bench.py --suite encoder|scoring|embeddings|drift|internals --data FILE [--device cuda] [--dry-run]
    python scripts/bench.py --render [--check]      # BENCHMARKS.md and its charts from docs/benchmarks/*.json
    python scripts/bench.py --render-files FILE...  # those files' tables, printed

A tool beside the package, not part of it: run it from a checkout with the `test` extra installed
(transformers). Random weights at real shapes (roberta-base); speed does not depend on the values.
Prints markdown tables; --out writes them with the machine description into the file's section for
this kind of CPU. The sections are modules of scripts/benchmarks/, the report's prose is
scripts/benchmarks/report.md. --suite is the GPU suite's method (scripts/gpu_suite.sh runs each section in its own
process): medians of interleaved repetitions with their spread, host, device and wall time, syncs and kernels per
call, written as rows of a run's file (scripts/benchmarks/data.py) as they are measured.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ and the reference scripts, beside this file

from minialign.loading import auto_compute_dtype, cpu_has_native  # noqa: E402
from minialign.nn.config import Config  # noqa: E402

from benchmarks import (data, detectors, embedders, embeddings, encoder, families, heads, int8, internals,  # noqa: E402
                        kernels, loading_memory, offered, parity, precision, rerankers, retrieval, scoring, service,
                        workers)
from benchmarks.machine import cpu_kind_label, machine  # noqa: E402
from benchmarks import render as generated  # noqa: E402  (the tables made from run files)
from benchmarks.report import render, table, write_section  # noqa: E402

# Sizes of a full run and of --quick: examples, rounds and requests per section.
SIZES = {
    False: {"kernel_rounds": 4, "encoder_reps": 4, "scoring_examples": 12, "scoring_rounds": 2, "requests": 320,
            "precision_examples": 30, "worker_examples": 12, "worker_texts": 256, "peer_sizes": (32, 256),
            "peer_reps": 3, "family_reps": 5, "family_texts": 64, "retrieval_texts": 64, "retrieval_rounds": 3,
            "retrieval_memory_texts": 256, "heads_texts": 64, "heads_rounds": 3, "internals_reps": 10},
    True: {"kernel_rounds": 2, "encoder_reps": 1, "scoring_examples": 6, "scoring_rounds": 1, "requests": 64,
           "precision_examples": 9, "worker_examples": 6, "worker_texts": 64, "peer_sizes": (32,), "peer_reps": 1,
           "family_reps": 2, "family_texts": 16, "retrieval_texts": 16, "retrieval_rounds": 1,
           "retrieval_memory_texts": 64, "heads_texts": 16, "heads_rounds": 1, "internals_reps": 3},
}
CLIENTS = 16  # concurrent clients of the service benchmark


def dtypes_for(device: str, *, quick: bool) -> tuple[list[str], list[str]]:
    """(the encoder's dtypes, the scorer's): on a GPU bf16 and fp32 (bf16 alone if quick; the scorer fp32 too,
    TF32 off as torch's default for matmuls); on a CPU fp32, and bf16
    where bf16 is native and the run is not quick (emulated bf16 is several times slower than fp32: not
    a choice to time); dtype="auto" and "auto-all" for the scorer where they mean bf16 matmuls, unless quick."""
    gpu = torch.device(device).type == "cuda"
    native = gpu or cpu_has_native(torch.bfloat16, unknown=False)
    dtypes = (["bf16"] if quick else ["bf16", "fp32"]) if gpu else ["fp32"] if quick or not native else ["fp32", "bf16"]
    scoring = ["fp32", *dtypes] if gpu else list(dtypes)
    if auto_compute_dtype(torch.device(device)) is not None and not quick:
        scoring.insert(1, "auto")  # dtype="auto": fp32 weights, some matmuls bf16 (Precision)
        if offered.dtype_word("auto-all"):
            scoring.insert(2, "auto-all")  # the same on all four projections
    return dtypes, scoring


def families_section(*, quick: bool = False, device: str = "cpu", mpnet: str | None = None, echo=print) -> str:
    """The Encoder families section (CPU only): every family against transformers, and MPNet embeddings
    against sentence-transformers where `mpnet` (or $MINIALIGN_BENCH_MPNET) is all-mpnet-base-v2's directory."""
    if torch.device(device).type != "cpu":
        return render("families-skipped", device=device)
    size = SIZES[quick]
    rows, embedding_rows, skipped = families.measure(reps=size["family_reps"], texts=size["family_texts"],
                                                     mpnet=mpnet, echo=echo)
    common = {"rounds": size["family_reps"], "goal": families.GOAL}
    embedding = render("families-embeddings-skipped", reason=skipped, **common) if skipped else \
        render("families-embeddings", texts=size["family_texts"],
               table=table(embedding_rows, families.EMBEDDING_TABLE), **common)
    lengths = families.LENGTHS
    return render("families", sequences=len(lengths), lo=families.LO, hi=families.HI, tokens=sum(lengths),
                  padded=len(lengths) * max(lengths), threads=torch.get_num_threads(),
                  table=table(rows, families.TABLE), embeddings=embedding, **common)


def int8_section(*, quick: bool = False, device: str = "cpu", echo=print) -> str:
    """The int8 section (CPU only): dtype="int8" against fp32 and the ONNX qint8 peer on the real
    all-MiniLM-L6-v2 and Python's own documentation (benchmarks/int8.py)."""
    if torch.device(device).type != "cpu":
        return render("int8-skipped", reason=f"int8 runs on CPU only; this run benchmarks {device}")
    if reason := int8.missing():
        echo(f"int8: skipped: {reason}")
        return render("int8-skipped", reason=reason)
    result = int8.measure(quick=quick, echo=echo)
    size, config, goals = result["sizes"], result["config"], result["goals"]
    onnx = (f"sentence-transformers' ONNX qint8 export (`export_dynamic_quantized_onnx_model(..., \"{config}\")`, "
            f"the config for this CPU; scripts/benchmarks/onnx_int8.py), run by ONNX Runtime" if config else
            "no ONNX qint8 peer (onnx and onnxruntime, the `bench` extra, are not installed)")
    head, tuned = result["head"], result["tuned"]
    return render(
        "int8", kind=int8.machine_kind(), threads=result["threads"], python=result["python"],
        corpus_passages=result["passages"], corpus_queries=result["queries"], passages=size["passages"],
        queries=size["queries"], texts=size["passages"] + size["queries"], layers=", ".join(int8.EncoderLayer.precision_layers[int8.Int8Linear]),
        onnx=onnx, met=sum(row["met"] == "met" for row in goals), goals=len(goals),
        goal_table=table(goals, int8.GOAL_TABLE), quality_table=table(result["quality"], int8.QUALITY_TABLE),
        tune_steps=size["tune_steps"], tune_batch=size["tune_batch"], tune_pairs=tuned["train pairs"],
        tune_held_out=tuned["held out"], tune_held_out_pairs=tuned["held-out pairs"], tune_spread=tuned["logit std"],
        head_steps=size["head_steps"], head_pairs=head["train pairs"], head_train=head["train"],
        head_held_out=head["held out"], head_held_out_pairs=head["held-out pairs"], head_spread=head["logit std"],
        rerank_queries=size["rerank_queries"], rerank_table=table(result["rerank"], int8.RERANK_TABLE),
        sensitivity_passages=size["sensitivity_passages"], sensitivity_queries=size["sensitivity_queries"],
        speed_texts=size["speed_texts"], rounds=size["rounds"],
        sensitivity_table=table(result["sensitivity"], int8.SENSITIVITY_TABLE), speed_pairs=result["speed_pairs"],
        speed_queries=size["speed_queries"], speed_table=table(result["speed"], int8.SPEED_TABLE))


# The GPU suite's sizes (--suite), and a dry run's (--dry-run): every step at toy sizes, to check the pipeline on a
# CPU in seconds (scripts/gpu_suite.sh --device cpu --dry-run; tests/test_gpu_suite.py). A dry run's figures mean
# nothing. The scorer's throughput case repeats fewer times: the original pipeline takes seconds a run.
SUITE = {"reps": 20, "corpus_reps": 3, "texts": 1000, "corpus_pairs": 1000, "latency_examples": 12}
DRY_RUN = {"reps": 2, "corpus_reps": 2, "texts": 4, "corpus_pairs": 8, "latency_examples": 1,
           "batches": {"2 x 16": [16, 16], "mixed 3": [16, 9, 4]}, "ceiling_shape": (256, 256, 256),
           "config": Config(vocab_size=500, hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128)}
SUITE_SECTIONS = ("encoder", "scoring", "embeddings", "drift", "internals", "embedders", "rerankers", "detectors")


def dry_config(config: Config) -> Config:
    """The toy config as AlignScore's roberta backbone (its positions after the padding id, 512 tokens)."""
    import dataclasses

    return dataclasses.replace(config, arch="roberta", pad_token_id=1, type_vocab_size=1, max_position_embeddings=514,
                               layer_norm_eps=1e-5)


def encoder_sections(*, quick: bool = False, device: str = "cpu", models: tuple[str, ...] = ("roberta-base",),
                     dtypes: tuple[str, ...] | None = None, echo=print) -> tuple[str, str]:
    """(the machine section with the matmul ceilings, the encoder section): each of `models` against
    transformers, per dtype of `dtypes` (None: `dtypes_for`'s), the ceiling timed in the same rounds."""
    size = SIZES[quick]
    info = machine()
    echo("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    if dtypes is None:
        dtypes, _ = dtypes_for(device, quick=quick)
    encoder_rows, ceilings = [], {}
    for name in models:
        rows, model_ceilings = encoder.measure(reps=size["encoder_reps"], dtypes=list(dtypes), model_name=name,
                                               config=Config.from_name(name), device=device, echo=echo)
        encoder_rows += rows
        for dtype_name, rates in model_ceilings.items():
            best = ceilings.setdefault(dtype_name, {})
            best.update({label: max(rate, best.get(label, 0.0)) for label, rate in rates.items()})
    m, k, n = encoder.CEILING_SHAPE[torch.device(device).type]
    machine_md = render("machine", machine="\n".join(f"- {k}: {v}" for k, v in info.items()), device=device,
                        shape=f"{m}x{k} @ {k}x{n}",
                        ceilings="; ".join(f"{dtype} " + ", ".join(f"{label} {rate:.1f} GFLOP/s"
                                                                   for label, rate in rates.items())
                                           for dtype, rates in ceilings.items()))
    return machine_md, render("encoder", models=", ".join(models), rounds=size["encoder_reps"],
                              table=table(encoder_rows, encoder.TABLE))


def scoring_section(*, quick: bool = False, device: str = "cpu", echo=print) -> str:
    """AlignScorer against the original pipeline, per dtype of `dtypes_for`."""
    size = SIZES[quick]
    _, scoring_dtypes = dtypes_for(device, quick=quick)
    rows = scoring.measure(examples=size["scoring_examples"], dtypes=scoring_dtypes, rounds=size["scoring_rounds"],
                           device=device, echo=echo)
    return render("scoring", examples=size["scoring_examples"], rounds=size["scoring_rounds"],
                  table=table(rows, scoring.TABLE))


def embeddings_section(*, quick: bool = False, device: str = "cpu", echo=print) -> str:
    """SentenceEncoder and Classifier against sentence-transformers."""
    size = SIZES[quick]
    rows = embeddings.measure(sizes=size["peer_sizes"], reps=size["peer_reps"], device=device, echo=echo)
    return render("embeddings", rounds=size["peer_reps"],
                  table=table(rows, embeddings.TABLE) if rows else render("embeddings-skipped"))


def suite(section: str, *, data_file: Path, device: str = "cuda", dry_run: bool = False,
          models: tuple[str, ...] = ("roberta-base",), dtypes: tuple[str, ...] | None = None, reps: int | None = None,
          echo=print) -> list[dict]:
    """One section of the GPU suite (SUITE_SECTIONS; scripts/gpu_suite.sh runs each in its own process): its rows,
    each case's added to `data_file` as it is measured (the file started, for this machine, where it is missing).
    encoder: each of `models` per dtype of `dtypes` (default bf16 on a GPU, fp32 on a CPU); drift: the encoder's
    64 x 512 eager / sdpa rows again (DRIFT_IMPLS), each with its speed over the encoder stage's row in the file."""
    size = {**SUITE, **(DRY_RUN if dry_run else {}), **({"reps": reps} if reps else {})}
    path = Path(data_file)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        data.write(path, {"machine": data.machine_entry(device, dry_run=dry_run), "rows": []})
    add = functools.partial(data.add, path)
    if section == "scoring":
        return scoring.suite_rows(reps=size["reps"], corpus_reps=size["corpus_reps"], device=device,
                                  latency_examples=size["latency_examples"], corpus_pairs=size["corpus_pairs"],
                                  config=dry_config(DRY_RUN["config"]) if dry_run else None, add=add, echo=echo)
    if section == "embeddings":
        return embeddings.suite_rows(reps=size["reps"], texts=size["texts"], device=device, add=add, echo=echo)
    if section == "internals":
        return internals.suite_rows(reps=size["reps"], device=device, dry_run=dry_run, add=add, echo=echo)
    if section == "rerankers":  # CPU: the 0.6B reranker, as embedders
        return rerankers.suite_rows(reps=reps or (DRY_RUN["reps"] if dry_run else embedders.REPS), device=device,
                                    dry_run=dry_run, add=add, echo=echo)
    if section == "detectors":  # CPU: the grounding detectors against their reference pipelines, as embedders
        return detectors.suite_rows(reps=reps or (DRY_RUN["reps"] if dry_run else embedders.REPS), device=device,
                                    dry_run=dry_run, add=add, echo=echo)
    if section == "embedders":  # CPU: 3 reps of the 0.6B model in fp32 take minutes (embedders.py)
        return embedders.suite_rows(reps=reps or (DRY_RUN["reps"] if dry_run else embedders.REPS), device=device,
                                    dry_run=dry_run, add=add, echo=echo)
    rows = []
    for name in models:
        model_name = f"{name} (dry run: toy size)" if dry_run else name
        config = DRY_RUN["config"] if dry_run else Config.from_name(name)
        batches = DRY_RUN["batches"] if dry_run else encoder.suite_batches(device)
        options = dict(reps=size["reps"], config=config, model_name=model_name, device=device, add=add, echo=echo,
                       ceiling_shape=DRY_RUN["ceiling_shape"] if dry_run else None)
        for dtype_name in dtypes or (["bf16"] if torch.device(device).type == "cuda" else ["fp32"]):
            if section == "encoder":
                rows += encoder.suite_rows(dtype_name=dtype_name, batches=batches,
                                           impls=encoder.DRY_RUN_IMPLS if dry_run else None, **options)
                continue
            batch = next(iter(batches))  # drift: the first case again (64 x 512)
            case = encoder.case_name(model_name, dtype_name, batch)
            first = {(batch, row["impl"]): row["median_ms"] for row in data.read(path)["rows"]
                     if row["section"] == encoder.SECTION and row["case"] == case and "median_ms" in row}
            rows += encoder.suite_rows(
                dtype_name=dtype_name, batches={batch: batches[batch]}, case_suffix=encoder.DRIFT_CASE, first=first,
                peers=[i for i in encoder.DRIFT_IMPLS if i in encoder.PEERS],
                impls=[i for i in encoder.DRIFT_IMPLS if i not in encoder.PEERS], **options)
    return rows


def render_docs(*, check: bool = False) -> int:
    """BENCHMARKS.md, the docs' benchmarks page and their charts, generated from docs/benchmarks/*.json (render.py);
    with check, only whether they are current (1: not)."""
    return generated.render(check=check)


def retrieval_section(*, quick: bool = False, device: str = "cpu", echo=print, **options) -> str:
    """Retrieval outputs: SparseEncoder and MultiVectorEncoder against sentence-transformers, M3Encoder's
    one forward against three calls, a sparse call's peak memory (benchmarks/retrieval.py). options: measure's
    (shapes, m3_vocab, corpus, texts...: a test's tiny sizes)."""
    if importlib.util.find_spec("sentence_transformers") is None:
        return render("retrieval-skipped")
    size = SIZES[quick]
    options = {"texts": size["retrieval_texts"], "memory_texts": size["retrieval_memory_texts"],
               "rounds": size["retrieval_rounds"], **options}
    result = retrieval.measure(device=device, echo=echo, **options)
    lines = retrieval.goals(result)
    memory = result["memory"][0]["texts"] if result["memory"] else options["memory_texts"]
    return render("retrieval", met=sum(line.endswith(": met)") for line in lines), goals=len(lines),
                  goal_lines="; ".join(lines), tokenizer=result["tokenizer"], texts=options["texts"],
                  token_counts=", ".join(f"{n} tokens for {model}" for model, n in result["tokens"].items()),
                  rounds=options["rounds"], table=table(result["speed"], retrieval.TABLE), m3_vocab=result["m3_vocab"],
                  m3_table=table(result["m3"], retrieval.M3_TABLE), memory_texts=memory,
                  memory_method=retrieval.MEMORY_METHOD[torch.device(device).type],
                  memory_table=table(result["memory"], retrieval.MEMORY_TABLE))


def heads_section(*, quick: bool = False, device: str = "cpu", echo=print, **options) -> str:
    """Token heads: each product against the transformers pipeline it mirrors, one text at a time and
    batched (benchmarks/heads.py). options: measure's (shapes, corpus, texts...: a test's tiny sizes)."""
    size = SIZES[quick]
    options = {"texts": size["heads_texts"], "rounds": size["heads_rounds"], **options}
    result = heads.measure(device=device, echo=echo, **options)
    lines = heads.goals(result)
    skipped = f" Skipped: {'; '.join(result['skipped'])}." if result["skipped"] else ""
    return render("heads", met=sum(line.endswith(": met)") for line in lines), goals=len(lines),
                  goal_lines="; ".join(lines), skipped=skipped, transformers4=heads.TRANSFORMERS4_ENV, tokenizer=result["tokenizer"], texts=result["texts"],
                  rounds=options["rounds"], batch=heads.BATCH, table=table(result["rows"], heads.TABLE))


def run(*, quick: bool = False, out: str | None = None, device: str = "cpu", models: tuple[str, ...] = ("roberta-base",),
        mpnet: str | None = None, echo=print) -> str:
    """The whole benchmark. On CPU: fp32 and bf16 (fp32 only with quick). On a GPU: bf16 and fp32,
    64x512 and mixed batches, each of `models` (e.g. roberta-base roberta-large). mpnet: the
    all-mpnet-base-v2 directory of the Encoder families section (default $MINIALIGN_BENCH_MPNET)."""
    size = SIZES[quick]
    kernel_rows = kernels.measure(rounds=size["kernel_rounds"], echo=echo) if device == "cpu" else []
    machine_md, encoder_md = encoder_sections(quick=quick, device=device, models=models, echo=echo)
    family_section = families_section(quick=quick, device=device, mpnet=mpnet, echo=echo)
    scoring_md = scoring_section(quick=quick, device=device, echo=echo)
    loading_rows = loading_memory.measure(echo=echo)
    parity_rows = parity.measure(echo=echo)
    service_rows = service.measure(requests=size["requests"], clients=CLIENTS, echo=echo)
    precision_rows = precision.measure(examples=size["precision_examples"], device=device, echo=echo)
    worker_rows = workers.measure(examples=size["worker_examples"], texts=size["worker_texts"], echo=echo)
    embeddings_md = embeddings_section(quick=quick, device=device, echo=echo)
    retrieval_md = retrieval_section(quick=quick, device=device, echo=echo)
    heads_md = heads_section(quick=quick, device=device, echo=echo)
    quantized = int8_section(quick=quick, device=device, echo=echo)

    sections = [machine_md]
    if kernel_rows:
        sections.append(render("kernels", table=table(kernel_rows, kernels.TABLE)))
    sections += [
        encoder_md,
        family_section,
        scoring_md,
        render("loading", table=table(loading_rows, loading_memory.TABLE)),
        embeddings_md,
        retrieval_md,
        heads_md,
        quantized,
        render("precision", examples=size["precision_examples"], trained_examples=5 * size["precision_examples"],
               table=table(precision_rows, precision.TABLE)),
        render("service", requests=size["requests"], clients=CLIENTS, cores=os.cpu_count(),
               table=table(service_rows, service.TABLE) if service_rows else render("service-skipped")),
        render("workers", table=table(worker_rows, workers.TABLE)),
        render("parity", table=table(parity_rows, parity.TABLE) if parity_rows else render("parity-skipped")),
    ]
    report = "\n\n".join(sections)
    if out:
        label = cpu_kind_label() if device == "cpu" else machine()["gpu"]
        write_section(Path(out), label, render("run") + "\n\n" + report.strip() + "\n")
    return report


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="scripts/bench.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fp32 only, fewer repetitions")
    parser.add_argument("--out", help="write the report (markdown) to this file (a run's own: BENCHMARKS.md is "
                                      "generated from docs/benchmarks/*.json, --render)")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (bf16, 64x512 and mixed batches)")
    parser.add_argument("--models", nargs="+", default=["roberta-base"],
                        help="presets to time the encoder at, e.g. roberta-base roberta-large")
    parser.add_argument("--dtypes", nargs="+", choices=["fp32", "bf16"],
                        help="with --only encoder or --suite encoder|drift: time these dtypes alone (default: fp32 and "
                             "bf16 where bf16 is native, bf16 alone with --quick on a GPU; the suite's: bf16 on a GPU)")
    parser.add_argument("--mpnet", default=None, metavar="DIR",
                        help=f"the real all-mpnet-base-v2 (sentence-transformers directory) for the Encoder families "
                             f"section's embeddings row (default ${families.MPNET_ENV}; skipped without)")
    parser.add_argument("--only", choices=["families", "int8", "retrieval", "heads", "encoder", "scoring",
                                           "embeddings", "internals"],
                        help="run this section alone and print it (not with --out: a file's section is a whole run); "
                             "encoder prints the machine section too; progress goes to stderr")
    parser.add_argument("--suite", choices=SUITE_SECTIONS,
                        help="one section of the GPU suite's method, its rows added to --data FILE as measured and "
                             "printed as tables (scripts/gpu_suite.sh)")
    parser.add_argument("--data", metavar="FILE", help="with --suite: the run's file (scripts/benchmarks/data.py)")
    parser.add_argument("--reps", type=int, help=f"with --suite: repetitions per row (default {SUITE['reps']})")
    parser.add_argument("--dry-run", action="store_true",
                        help="with --suite: every step at toy sizes, to check the pipeline (scripts/gpu_suite.sh "
                             "--dry-run); the figures mean nothing")
    parser.add_argument("--render", action="store_true",
                        help="generate BENCHMARKS.md, docs/benchmarks.md and their charts from docs/benchmarks/*.json "
                             "(with --check: only say whether they are current, exit 1 if not)")
    parser.add_argument("--check", action="store_true", help="with --render")
    parser.add_argument("--render-files", nargs="+", metavar="FILE", help="print these run files' tables")
    args = parser.parse_args(argv)
    if args.render or args.render_files:
        if args.render_files:
            print(generated.report([(Path(f).name, data.read(Path(f))) for f in args.render_files]))
            return 0
        return render_docs(check=args.check)
    try:
        import transformers  # noqa: F401
    except ImportError:
        parser.error("needs transformers: pip install -e '.[test]'")
    if args.dtypes and args.only != "encoder" and args.suite not in ("encoder", "drift"):
        parser.error("--dtypes goes with --only encoder or --suite encoder|drift")
    if (args.dry_run or args.data or args.reps) and not args.suite:
        parser.error("--dry-run, --data and --reps go with --suite")
    if args.suite:
        if not args.data:
            parser.error("--suite needs --data FILE")
        progress = functools.partial(print, file=sys.stderr, flush=True)  # stdout holds the tables alone
        rows = suite(args.suite, data_file=Path(args.data), device=args.device, dry_run=args.dry_run,
                     models=tuple(args.models), dtypes=tuple(args.dtypes) if args.dtypes else None, reps=args.reps,
                     echo=progress)
        print(generated.sections(rows)[0] if rows else f"(no {args.suite} rows)")
        return 0
    if args.only:
        if args.out:
            parser.error("--only prints one section; --out writes a whole run")
        progress = functools.partial(print, file=sys.stderr, flush=True)  # stdout holds the section alone
        options = dict(quick=args.quick, device=args.device, echo=progress)
        if args.only == "int8":
            print(int8_section(**options))
        elif args.only == "retrieval":
            print(retrieval_section(**options))
        elif args.only == "heads":
            print(heads_section(**options))
        elif args.only == "families":
            print(families_section(mpnet=args.mpnet, **options))
        elif args.only == "encoder":
            print("\n\n".join(encoder_sections(models=tuple(args.models),
                                                dtypes=tuple(args.dtypes) if args.dtypes else None, **options)))
        elif args.only == "scoring":
            print(scoring_section(**options))
        elif args.only == "internals":  # the suite's rows, printed (not written: --suite internals --data FILE)
            rows = internals.suite_rows(reps=SIZES[args.quick]["internals_reps"], device=args.device, echo=progress)
            print(generated.sections(rows)[0])
        else:
            print(embeddings_section(**options))
        return 0
    run(quick=args.quick, out=args.out, device=args.device, models=tuple(args.models), mpnet=args.mpnet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
