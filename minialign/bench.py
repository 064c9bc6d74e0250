"""Benchmarks: minialign against transformers and the original AlignScore pipeline, in one process.

    python scripts/bench.py [--quick] [--out BENCHMARKS.md]      (same as `minialign bench`)

Needs transformers (the `test` extra). Random weights at real shapes (roberta-base); speed does not
depend on the values. Prints markdown tables; --out writes them with the machine description.
"""

from __future__ import annotations

import dataclasses
import json
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

from .config import Config
from .model import Encoder

ROBERTA_BASE = Config.from_name("roberta-base")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


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
    return info


def interleaved(calls: dict, *, rounds: int) -> dict[str, float]:
    """Best seconds of each call over `rounds` rounds, every call once per round after one warm-up
    each: the machine's drift hits all implementations alike (a shared VM varies by 10-20%)."""
    for call in calls.values():
        call()
    best = {label: float("inf") for label in calls}
    for _ in range(rounds):
        for label, call in calls.items():
            start = time.perf_counter()
            call()
            best[label] = min(best[label], time.perf_counter() - start)
    return best


CEILING_SHAPE = (2048, 768, 3072)  # tokens x hidden -> intermediate: roberta-base's feed-forward up-projection


def matmul_rate(dtype: torch.dtype, device: str = "cpu", rounds: int = 8) -> float:
    """GFLOP/s of F.linear at the encoder's own largest matmul shape (CEILING_SHAPE, 2048 tokens),
    best of `rounds`: the practical ceiling. (A larger square matmul runs slower than this on a
    small-cache CPU, so it would understate the ceiling.)"""
    m, k, n = CEILING_SHAPE
    x = torch.randn(m, k, dtype=dtype, device=device)
    w = torch.randn(n, k, dtype=dtype, device=device)
    seconds = interleaved({"matmul": lambda: F.linear(x, w)}, rounds=rounds)["matmul"]
    return 2 * m * k * n / seconds / 1e9


def encoder_flops(config: Config, lengths: list[int]) -> float:
    """Forward FLOPs on real tokens: projections and feed-forward 2*(4C^2 + 2CI) per token, attention
    4*L*C per token, per layer (multiply-add = 2 FLOPs)."""
    c, i = config.hidden_size, config.intermediate_size
    per_token = 2 * (4 * c * c + 2 * c * i)
    return config.num_layers * sum(n * per_token + 4 * n * n * c for n in lengths)


# -- encoder forward --------------------------------------------------------------------------------

def _batches(config: Config, seed: int = 0) -> dict[str, list[int]]:
    rng = random.Random(seed)
    return {"4x128": [128] * 4, "4x512": [512] * 4,
            "mixed 8": sorted((rng.randint(24, 512) for _ in range(8)), reverse=True)}


def _inputs(config: Config, lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(config.pad_token_id + 1, config.vocab_size, (len(lengths), max(lengths)), generator=g)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    return ids.masked_fill(mask == 0, config.pad_token_id), mask


def _hf_encoder(config: Config, implementation: str, dtype: torch.dtype, state_dict: dict):
    from transformers import AutoConfig, AutoModel

    hf = AutoModel.from_config(AutoConfig.for_model(**config.to_hf()), attn_implementation=implementation)
    hf.load_state_dict(state_dict, strict=False)
    return hf.to(dtype).eval()


def bench_encoder(*, reps: int, dtypes: list[str], ceilings: dict[str, float], echo=print) -> list[dict]:
    import convert

    config = ROBERTA_BASE
    torch.manual_seed(0)
    ours = Encoder(config).eval()
    hf_weights = convert.minialign_to_hf({f"encoder.{k}": v for k, v in ours.state_dict().items()}, config.arch)
    rows = []
    for dtype_name in dtypes:
        dtype = DTYPES[dtype_name]
        ceiling = ceilings[dtype_name]
        echo(f"matmul ceiling {dtype_name}: {ceiling:.1f} GFLOP/s")
        runners = {
            "transformers eager": _hf_encoder(config, "eager", dtype, hf_weights),
            "transformers sdpa": _hf_encoder(config, "sdpa", dtype, hf_weights),
        }
        for backend in ("eager", "sdpa", "flex"):
            model = Encoder(config, attn_backend=backend)
            model.load_state_dict(ours.state_dict())
            runners[f"minialign {backend}"] = model.to(dtype).eval()
        for name, lengths in _batches(config).items():
            ids, mask = _inputs(config, lengths)
            tokens = sum(lengths)
            flops = encoder_flops(config, lengths)
            calls = {label: (lambda m=m: m(ids, attention_mask=mask)) for label, m in runners.items()}
            calls["minialign unpadded"] = lambda m=runners["minialign sdpa"]: m(ids, attention_mask=mask, unpad=True)
            calls["minialign unpadded flex"] = lambda m=runners["minialign flex"]: m(ids, attention_mask=mask,
                                                                                       unpad=True)
            with torch.inference_mode():
                results = interleaved(calls, rounds=reps if dtype_name == "fp32" else 1)
            base = results["transformers sdpa"]
            for label, seconds in results.items():
                row = {"dtype": dtype_name, "batch": name, "impl": label, "tokens/s": tokens / seconds,
                       "vs hf sdpa": base / seconds, "GFLOP/s": flops / seconds / 1e9,
                       "of ceiling": flops / seconds / 1e9 / ceiling}
                rows.append(row)
                echo(f"{dtype_name} {name:8} {label:26} {row['tokens/s']:9.0f} tok/s  x{row['vs hf sdpa']:.2f}  "
                     f"{row['GFLOP/s']:6.1f} GFLOP/s ({row['of ceiling']:.0%})")
    return rows


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


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 22))]
    return " ".join(words).capitalize() + "."


def _text(rng: random.Random, lo: int, hi: int) -> str:
    target, sentences = rng.randint(lo, hi), []
    while sum(len(s.split()) for s in sentences) < target:
        sentences.append(_sentence(rng))
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
    return directory / "AlignScore.ckpt", backbone, (base, mlm, heads)


def original_alignscore(parts, tokenizer, contexts, claims, splitter, batch_size=32) -> list[float]:
    """The original pipeline (AlignScore inference.py, nli_sp): per example, its chunk x sentence pairs
    in mini-batches padded to 512, the MLM head run on every forward."""
    base, mlm, heads = parts
    scores = []
    for context, claim in zip(contexts, claims):
        sentences = splitter(context) or [""]
        per_chunk = max(len(sentences) // (len(context.strip().split()) // 350 + 1), 1)
        chunks = [" ".join(sentences[i:i + per_chunk]) for i in range(0, len(sentences), per_chunk)]
        claim_sentences = splitter(claim)
        pre = [c for c in chunks for _ in claim_sentences]
        hyp = [h for _ in chunks for h in claim_sentences]
        probs = []
        for i in range(0, len(pre), batch_size):
            kwargs = dict(padding="max_length", max_length=512, return_tensors="pt")
            try:
                batch = tokenizer(pre[i:i + batch_size], hyp[i:i + batch_size], truncation="only_first", **kwargs)
            except Exception:
                batch = tokenizer(pre[i:i + batch_size], hyp[i:i + batch_size], truncation=True, **kwargs)
            with torch.no_grad():
                out = base(**batch)
                mlm(out.last_hidden_state)
                probs.append(torch.softmax(heads["tri_layer"](out.pooler_output), -1)[:, 0])
        matrix = torch.cat(probs).view(len(chunks), len(claim_sentences))
        scores.append(matrix.max(dim=0).values.mean().item())
    return scores


def bench_scoring(*, examples: int, dtypes: list[str], echo=print) -> list[dict]:
    from transformers import AutoTokenizer

    from .scorer import AlignScorer
    from .sentences import split_sentences

    contexts, claims = scoring_corpus(examples)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, backbone, parts = _alignscore_fixture(Path(tmp), contexts + claims)
        hf_tok = AutoTokenizer.from_pretrained(backbone, tokenizer_type="roberta")
        n_pairs = None
        start = time.perf_counter()
        reference = original_alignscore(parts, hf_tok, contexts, claims, split_sentences)
        original_seconds = time.perf_counter() - start
        for dtype_name in dtypes:
            for unpad in (False, True):
                scorer = AlignScorer.from_pretrained(ckpt, backbone=str(backbone), dtype=DTYPES[dtype_name],
                                                     unpad=unpad)
                examples_, pairs = scorer._plan(contexts, claims)
                n_pairs = sum(len(e.pair_ids) for e in examples_)
                scorer.score(contexts[:3], claims[:3])  # warm-up
                start = time.perf_counter()
                scores = scorer.score(contexts, claims)
                seconds = time.perf_counter() - start
                rows.append({"impl": f"minialign {dtype_name}{' unpadded' if unpad else ''}",
                             "pairs/s": n_pairs / seconds, "speed-up": original_seconds / seconds,
                             "max abs diff": max(abs(a - b) for a, b in zip(scores, reference))})
        rows.insert(0, {"impl": "original (transformers fp32, pad 512, MLM head)", "pairs/s": n_pairs / original_seconds,
                        "speed-up": 1.0, "max abs diff": 0.0})
    for row in rows:
        echo(f"{row['impl']:48} {row['pairs/s']:7.2f} pairs/s  x{row['speed-up']:.2f}  max|diff| {row['max abs diff']:.1e}")
    return rows


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
print(json.dumps({"before_kb": before, "after_kb": peak_kb()}))
"""


def bench_loading(echo=print) -> list[dict]:
    """Peak resident memory added by loading roberta-base-shaped fp32 weights (and touching every
    one of them), against the size of the weights file."""
    from .loading import Checkpoint, save_native

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        full, tiny = Path(tmp) / "roberta-base", Path(tmp) / "tiny"
        for directory, config in ((full, ROBERTA_BASE), (tiny, dataclasses.replace(ROBERTA_BASE, vocab_size=100, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64))):
            with torch.device("meta"):
                shapes = {f"encoder.{k}": v.shape for k, v in Encoder(config).state_dict().items()}
            save_native(Checkpoint(config, {k: torch.randn(shape) * 0.02 for k, shape in shapes.items()}, "bench"),
                        directory)
        size = (full / "model.safetensors").stat().st_size
        for dtype in ("float32", "bfloat16"):
            out = subprocess.run([sys.executable, "-c", _LOAD_PROBE, str(full), str(tiny), dtype], capture_output=True,
                                 text=True, check=True)
            probe = json.loads(out.stdout.strip().splitlines()[-1])
            added = (probe["after_kb"] - probe["before_kb"]) * 1024
            rows.append({"load as": dtype, "weights MB": size / 2**20, "peak added MB": added / 2**20,
                         "ratio": added / size})
            echo(f"loading as {dtype}: fp32 weights {size / 2**20:.0f} MB, peak RSS added {added / 2**20:.0f} MB "
                 f"({added / size:.2f}x)")
    return rows


# -- report -----------------------------------------------------------------------------------------

def _table(rows: list[dict], columns: list[str], formats: dict[str, str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(format(row[c], formats.get(c, "")) for c in columns) + " |")
    return "\n".join(lines)


def run(*, quick: bool = False, out: str | None = None, echo=print) -> str:
    info = machine()
    echo("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    ceilings = {name: matmul_rate(dtype, rounds=3 if name == "bf16" else 8) for name, dtype in DTYPES.items()}
    dtypes = ["fp32"] if quick else ["fp32", "bf16"]
    encoder_rows = bench_encoder(reps=1 if quick else 4, dtypes=dtypes, ceilings=ceilings, echo=echo)
    scoring_rows = bench_scoring(examples=6 if quick else 12, dtypes=dtypes, echo=echo)
    loading = bench_loading(echo=echo)
    report = "\n\n".join([
        "## Machine\n\n" + "\n".join(f"- {k}: {v}" for k, v in info.items())
        + "\n- matmul ceiling (F.linear %dx%d @ %dx%d, the feed-forward shape; best of 8 fp32 / 3 bf16): "
        % (CEILING_SHAPE[0], CEILING_SHAPE[1], CEILING_SHAPE[1], CEILING_SHAPE[2])
        + ", ".join(f"{k} {v:.1f} GFLOP/s" for k, v in ceilings.items()),
        "## Encoder forward (roberta-base shape, random weights, inference_mode)\n\n"
        "Each implementation is timed once per round, rounds interleaved, best of 4 rounds (fp32) or 1 "
        "(bf16, after a warm-up). "
        "tokens/s counts real tokens; `vs hf sdpa` is the speed ratio against transformers' sdpa in the same "
        "run; GFLOP/s is useful work (real tokens only) and `of ceiling` its fraction of the same dtype's "
        "matmul ceiling.\n\n"
        + _table(encoder_rows, ["dtype", "batch", "impl", "tokens/s", "vs hf sdpa", "GFLOP/s", "of ceiling"],
                 {"tokens/s": ".0f", "vs hf sdpa": ".2f", "GFLOP/s": ".1f", "of ceiling": ".0%"}),
        f"## AlignScore scoring (nli_sp, {6 if quick else 12} examples of the seeded length mix)\n\n"
        "The original pipeline pads every pair to 512 tokens, batches per example and runs the MLM head; "
        "`max abs diff` is against its scores.\n\n"
        + _table(scoring_rows, ["impl", "pairs/s", "speed-up", "max abs diff"],
                 {"pairs/s": ".2f", "speed-up": ".2f", "max abs diff": ".1e"}),
        "## Loading memory (roberta-base-shaped safetensors, Encoder.from_pretrained)\n\n"
        "Peak RSS (VmHWM) added by `Encoder.from_pretrained` and a pass touching every weight, in a "
        "fresh process that has already loaded a tiny checkpoint (so imports are not counted), against the "
        "fp32 weights file. Weights of the file's dtype stay views of its memory map (file-backed pages); "
        "copied ones (bf16 casts, the fused QKV) give their mapped pages back.\n\n"
        + _table(loading, ["load as", "weights MB", "peak added MB", "ratio"],
                 {"weights MB": ".0f", "peak added MB": ".0f", "ratio": ".2f"}),
    ])
    if out:
        Path(out).write_text("# Benchmarks\n\nWritten by `python scripts/bench.py --out BENCHMARKS.md` "
                             "(one run, one process).\n\n" + report + "\n", encoding="utf-8")
    return report
