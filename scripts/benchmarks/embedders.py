"""Embedders at the published shapes: SentenceEncoder against sentence-transformers on Qwen3-Embedding-0.6B
(convert/families/qwen3.py's preset; Transformer -> Pooling lasttoken -> Normalize, padded on the left) and
EmbeddingGemma-300m (convert/families/gemma3_text.py's preset; Transformer -> Pooling mean -> Dense 768 -> 3072 ->
Dense 3072 -> 768 -> Normalize, as google/embeddinggemma-300m's modules.json), random weights, on CPU.

Both sides read one sentence-transformers directory saved here: a transformers model built from the preset's config
(minialign's Config.to_hf), its vocabulary cut to a byte-level BPE tokenizer trained here on the timed text (the
embedding lookup's cost does not depend on the vocabulary's size; the published 151669 / 262144 rows would only
take memory), the special tokens each model's tokenizer adds (Qwen3-Embedding: `A <|endoftext|>`, padding on the
left; EmbeddingGemma: `<bos> A <eos>`). Texts people wrote (human_text.py: Python's documentation) of WORDS words,
Embedder.texts of them per call, cut to WINDOW tokens by both sides alike.

Impls, timed rep by rep interleaved (timing.repeat, after a warm-up call on two texts) with the matmul ceilings:
SentenceTransformer.encode fp32 (the baseline, its default batch of 32), minialign fp32, int8 (dtype="int8":
dynamic per-token int8 with its calibration, nn/int8.py) and bf16 where the CPU has native bf16. The ceilings: a
layer's products at the model's own shapes on the texts' tokens (layer_shapes) per dtype, the faster of
F.linear and minialign's Linear for fp32, minialign's Linear for bf16, Int8Linear for int8; `of ceiling` is a row's
useful GFLOP/s (real tokens: `flops`) over its own dtype's ceiling. The goal (GOAL): a minialign row GOAL times
sentence-transformers' speed; where that is above what the machine allows in fp32 (the peer already above 1 / GOAL
of the fp32 ceiling), fp32 at CEILING_SHARE of its ceiling meets it too (`verdict`). int8's quality against
minialign fp32, MiniLM's goals (int8.GOALS: worst cosine, top-10 neighbour overlap), on QUALITY passages and queries
cut to QUALITY_WORDS words. Rows of data (data.py), never a test.

    python scripts/bench.py --suite embedders --data docs/benchmarks/cpu-<machine>.json --device cpu
    python scripts/bench.py --suite embedders --data /tmp/x.json --device cpu --dry-run     # toy sizes
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

SECTION = "embedders"
WINDOW = 256  # tokens: both sides cut there
WORDS = (6, 190)  # words per timed text: about 8-256 tokens of the tokenizer trained here
QUALITY = (36, 12)  # (passages, queries) int8's quality is measured on
QUALITY_WORDS = 32  # each cut to its first words: a cheap forward
GOAL = 2.0  # minialign's speed over sentence-transformers fp32
CEILING_SHARE = 0.9  # the ceiling rule: where GOAL is above the fp32 ceiling, this share of it meets it
TOKENIZER_VOCAB = 4000
REPS = 3  # interleaved repetitions (after one warm-up of each call)
# FLOPs of one timed ceiling call (the product repeated): a fraction of a second, as long as contention from other
# processes averages out over it as over a model's call (one product alone, tens of ms, is hit or missed by it);
# a dry run's
CEILING_WORK, DRY_CEILING_WORK = 2e11, 1e8
PEER = "SentenceTransformer.encode fp32"
# a dry run's shapes (the preset's layout at toy size): every step in seconds, figures meaningless
DRY_SHAPE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
             "head_dim": 32, "intermediate_size": 96}


@dataclass(frozen=True)
class Embedder:
    """A published embedder's layout: minialign's preset of its config, its sentence-transformers modules after the
    Transformer (pooling, Dense widths), and what its tokenizer adds."""

    name: str
    preset: str
    pooling: str
    dense: tuple[int, ...]  # the Dense modules' output widths (no bias, identity activation), the last = hidden
    specials: tuple[str, ...]  # the tokenizer's special tokens, ids 0, 1, ...
    template: str  # its post-processor's single-text template
    pad: str
    padding_side: str
    texts: int  # timed texts per call: what 2 cores time in the suite's 10 minutes (sentence-transformers pads them)


MODELS = (
    # https://huggingface.co/Qwen/Qwen3-Embedding-0.6B (tokenizer_config.json: padding_side "left", pad and appended
    # token "<|endoftext|>"; modules.json: Transformer, Pooling lasttoken, Normalize)
    Embedder("Qwen3-Embedding-0.6B", "qwen3-embedding-0.6b", "lasttoken", (), ("<|endoftext|>",),
             "$A:0 <|endoftext|>:0", "<|endoftext|>", "left", 8),
    # https://huggingface.co/google/embeddinggemma-300m (modules.json: Transformer, Pooling mean, Dense 768 -> 3072,
    # Dense 3072 -> 768, Normalize; <pad> 0, <eos> 1, <bos> 2)
    Embedder("EmbeddingGemma-300m", "embeddinggemma-300m", "mean", (3072, 768), ("<pad>", "<eos>", "<bos>"),
             "<bos>:0 $A:0 <eos>:0", "<pad>", "right", 16),
)


# -- pure parts ------------------------------------------------------------------------------------------

def flops(config, lengths: list[int], dense: tuple[int, ...] = ()) -> float:
    """Forward FLOPs on real tokens of a pre-norm decoder-born encoder (multiply-add = 2): per token and layer the
    query / key / value projections C x (H + 2 KV) D, the output H D x C, the gated feed-forward 3 C x I; per
    sequence of n tokens and layer the scores and the weighted values 2 * 2 n^2 H D (every key counted, causal or
    not, as torch's flop counter counts attention); per text the Dense modules after pooling."""
    c, i, d = config.hidden_size, config.intermediate_size, config.head_dim
    h, kv = config.num_heads, config.kv_heads
    per_token = 2 * (c * (h + 2 * kv) * d + h * d * c + 3 * c * i)
    widths = (c, *dense)
    per_text = sum(2 * a * b for a, b in zip(widths, widths[1:]))
    return config.num_layers * sum(n * per_token + 4 * n * n * h * d for n in lengths) + per_text * len(lengths)


def verdict(ratios: dict[str, float], *, fp32_share: float, peer_share: float, goal: float = GOAL) -> str:
    """Whether minialign meets GOAL x sentence-transformers fp32: `ratios` each minialign impl's speed over the
    peer's, `fp32_share` minialign fp32's share of the fp32 ceiling, `peer_share` the peer's. The ceiling rule:
    where GOAL x the peer's speed is above the ceiling (peer_share * GOAL > 1), fp32 at CEILING_SHARE of it meets
    it; either way a precision past GOAL meets it outright (`goal`: another section's GOAL)."""
    best = max(ratios, key=ratios.get)
    if ratios[best] >= goal:
        return f"goal {goal:g}x: met ({best} {ratios[best]:.2f}x)"
    if peer_share * goal > 1:
        state = "met" if fp32_share >= CEILING_SHARE else "not met"
        return (f"goal {goal:g}x is above the fp32 ceiling ({peer_share * goal:.0%} of it): ceiling rule, fp32 at "
                f"{fp32_share:.0%} of it ({CEILING_SHARE:.0%} meets it): {state}; best {best} {ratios[best]:.2f}x")
    return f"goal {goal:g}x: not met (best {best} {ratios[best]:.2f}x; fp32 at {fp32_share:.0%} of its ceiling)"


# -- the models ------------------------------------------------------------------------------------------

def tokenizer(directory: Path, embedder: Embedder, corpus: list[str], *, window: int = WINDOW) -> int:
    """A byte-level BPE tokenizer trained on `corpus` with the embedder's special tokens and template, written as a
    transformers fast tokenizer into `directory` (made); its vocabulary's size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    directory.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=TOKENIZER_VOCAB, special_tokens=list(embedder.specials),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=embedder.template,
                                      special_tokens=[(t, i) for i, t in enumerate(embedder.specials)
                                                      if t in embedder.template])])
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": window, "pad_token": embedder.pad,
        "eos_token": embedder.specials[min(1, len(embedder.specials) - 1)], "padding_side": embedder.padding_side,
        "model_input_names": ["input_ids", "attention_mask"]}))
    return tok.get_vocab_size()


def build(root: Path, embedder: Embedder, corpus: list[str], *, dry_run: bool = False) -> Path:
    """The embedder's sentence-transformers directory under `root`: a random transformers model at the preset's
    shape (DRY_SHAPE's for a dry run), the vocabulary the tokenizer's, then its modules."""
    import transformers
    from sentence_transformers import SentenceTransformer, models

    from minialign.nn.config import Config

    base = root / f"{embedder.preset}-base"
    vocab = tokenizer(base, embedder, corpus)
    hf = {**Config.from_name(embedder.preset).to_hf(), "vocab_size": vocab, "pad_token_id": 0}
    if dry_run:
        hf.update(DRY_SHAPE)
        if "layer_types" in hf:
            hf["layer_types"] = hf["layer_types"][:DRY_SHAPE["num_hidden_layers"]]
    hf.pop("architectures", None)
    config = transformers.AutoConfig.for_model(hf.pop("model_type"), **hf)
    torch.manual_seed(0)
    transformers.AutoModel.from_config(config).eval().save_pretrained(base)
    width = config.hidden_size
    modules = [models.Transformer(str(base), max_seq_length=WINDOW),
               models.Pooling(width, pooling_mode=embedder.pooling)]
    widths = (width, *((DRY_SHAPE["hidden_size"] * 4, width) if dry_run and embedder.dense else embedder.dense))
    modules += [models.Dense(a, b, bias=False, activation_function=torch.nn.Identity())
                for a, b in zip(widths, widths[1:])]
    directory = root / f"{embedder.preset}-st"
    SentenceTransformer(modules=[*modules, models.Normalize()], device="cpu").save(str(directory))
    return directory


def layer_shapes(config) -> list[tuple[int, int]]:
    """(in, out) of a layer's products as minialign runs them: the fused query / key / value, the output, the fused
    gate and value of the feed-forward, its down projection."""
    c, i, d, h, kv = (config.hidden_size, config.intermediate_size, config.head_dim, config.num_heads,
                      config.kv_heads)
    return [(c, (h + 2 * kv) * d), (h * d, c), (c, 2 * i), (i, c)]


def ceilings(config, tokens: int, dtypes: list[str], *, work: float = CEILING_WORK
             ) -> tuple[dict[str, callable], float, str]:
    """({"<dtype> (<kernel>)": call}, FLOPs of one call, the shapes): a layer's products (layer_shapes) on `tokens`
    rows, repeated to about `work` FLOPs a call, per dtype: F.linear and minialign's Linear (fp32), Linear (bf16),
    Int8Linear (int8, uncalibrated: the same kernel). The machine's best time for the model's FLOPs at its shapes."""
    import torch.nn.functional as F

    from minialign.nn.int8 import Int8Linear
    from minialign.nn.linear import Linear

    shapes = layer_shapes(config)
    once = sum(2.0 * tokens * k * n for k, n in shapes)
    times = max(1, round(work / once))
    inputs = {k: torch.randn(tokens, k) for k, _ in shapes}
    fp32 = [Linear(k, n, bias=False) for k, n in shapes]
    kernels = {"fp32 (F.linear)": [(lambda x, w=layer.weight: F.linear(x, w)) for layer in fp32],
               "fp32 (minialign Linear)": fp32}
    if "bf16" in dtypes:
        inputs.update({(k, "bf16"): x.to(torch.bfloat16) for k, x in list(inputs.items())})
        kernels["bf16 (minialign Linear)"] = [Linear(k, n, bias=False).to(torch.bfloat16) for k, n in shapes]
    if "int8" in dtypes:
        int8 = [Int8Linear(k, n, bias=False) for k, n in shapes]
        for layer, source in zip(int8, fp32):
            layer.weight.data.copy_(source.weight)
        kernels["int8 (minialign Int8Linear)"] = int8

    def call(label: str, products: list) -> callable:
        xs = [inputs[(k, "bf16")] if label.startswith("bf16") else inputs[k] for k, _ in shapes]
        return lambda: [product(x) for _ in range(times) for product, x in zip(products, xs)]

    shape = ", ".join(f"{k}->{n}" for k, n in shapes)
    return ({label: call(label, products) for label, products in kernels.items()}, once * times,
            f"{tokens} rows x ({shape}), {times} times a call")


def impls(dtypes: list[str]) -> dict[str, dict]:
    """minialign's SentenceEncoder runs: each from_pretrained's keywords."""
    table = {"fp32": {"dtype": torch.float32}, "int8": {"dtype": "int8"}, "bf16": {"dtype": torch.bfloat16}}
    return {f"SentenceEncoder.encode {name}": table[name] for name in dtypes}


def texts_for(count: int, *, seed: int, words: tuple[int, int] = WORDS) -> list[str]:
    """`count` texts of a seeded words[0]..words[1] words each: consecutive passages of human_text.py (from a seeded
    start) joined and cut there, so the lengths spread over the window whatever the passages' own lengths."""
    import random

    from benchmarks import human_text

    rng, passages = random.Random(seed), human_text.passages()
    found = []
    for _ in range(count):
        target, at, taken = rng.randint(*words), rng.randrange(len(passages)), []
        while len(taken) < target:
            taken += passages[at % len(passages)].split()
            at += 1
        found.append(" ".join(taken[:target]))
    return found


def suite_rows(*, reps: int, device: str = "cpu", dry_run: bool = False, add=lambda rows: None,
               echo=print, models: tuple[Embedder, ...] = MODELS, quality: tuple[int, int] = QUALITY) -> list[dict]:
    """The section's rows (data.py), added to `add` per model as measured (module docstring)."""
    from sentence_transformers import SentenceTransformer

    from minialign.loading import cpu_has_native
    from minialign.nn import int8 as int8_kernel
    from minialign.products.embeddings import SentenceEncoder

    from benchmarks import data, human_text
    from benchmarks.encoder import row_line
    from benchmarks.int8 import GOALS, embedding_quality
    from benchmarks.timing import repeat

    if torch.device(device).type != "cpu":
        raise ValueError(f"the embedders section runs on CPU (int8, the ceiling rule); not {device}")
    dtypes = ["fp32", *(["int8"] if int8_kernel.available() else []),
              *(["bf16"] if cpu_has_native(torch.bfloat16, unknown=False) else [])]
    passages, queries = quality
    cut = lambda t: " ".join(t.split()[:QUALITY_WORDS])  # noqa: E731
    judged = [cut(t) for t in human_text.sample(human_text.passages(), passages, seed=1)]
    judged += [cut(t) for t in human_text.sample(human_text.queries(), queries, seed=1)]
    commit = data.git_commit()
    rows = []
    for embedder in models:
        timed = texts_for(embedder.texts, seed=0)
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        echo(f"{SECTION} | {embedder.name}: building (load {load}; {torch.get_num_threads()} threads)")
        with tempfile.TemporaryDirectory() as tmp:
            directory = build(Path(tmp), embedder, list(human_text.passages()), dry_run=dry_run)
            peer = SentenceTransformer(str(directory), device="cpu")
            ours = {name: SentenceEncoder.from_pretrained(directory, **keywords)
                    for name, keywords in impls(dtypes).items()}
            fp32 = ours["SentenceEncoder.encode fp32"]
            lengths = [len(ids) for ids in fp32.tokenizer.encode_ids(timed, max_length=fp32.max_length).ids]
            work = flops(fp32.model.config, lengths, embedder.dense if not dry_run else ())
            ceiling_calls, ceiling_work, shape = ceilings(fp32.model.config, sum(lengths), dtypes,
                                                          work=DRY_CEILING_WORK if dry_run else CEILING_WORK)
            calls = {PEER: lambda: peer.encode(timed, batch_size=32, convert_to_tensor=True)}
            calls.update({name: (lambda r=runner: r.encode(timed, warn_truncation=False))
                          for name, runner in ours.items()})
            calls.update({f"matmul ceiling {label}": call for label, call in ceiling_calls.items()})
            shape_name = "toy size (dry run)" if dry_run else "published shape"
            case = (f"{embedder.name} ({shape_name}, random weights), {len(timed)} texts, {min(lengths)}-"
                    f"{max(lengths)} tokens ({sum(lengths)})")
            echo(f"{SECTION} | {case}: timing {len(calls)} calls ({reps} reps after a warm-up; load {load})")
            outputs = {}
            with torch.inference_mode():
                # the warm-up (first-call allocations, packing) on two texts: a whole call of the peer takes a minute
                warm = {name: (lambda r=runner: r.encode(timed[:2], warn_truncation=False))
                        for name, runner in ours.items()}
                warm[PEER] = lambda: peer.encode(timed[:2], batch_size=32)
                times = repeat(calls, reps=reps, device=device, outputs=outputs,
                               warm_up={**warm, **{n: c for n, c in calls.items() if n.startswith("matmul")}})
            rate = {label: ceiling_work / times[f"matmul ceiling {label}"].median / 1e9 for label in ceiling_calls}
            best = {dtype: max(r for label, r in rate.items() if label.startswith(dtype)) for dtype in dtypes}
            reference = outputs[PEER].float().cpu()
            model_rows = [data.row(SECTION, case, f"matmul ceiling {label}", baseline=None, ratio=None,
                                   **times[f"matmul ceiling {label}"].figures(), gflop_s=r, shape=shape,
                                   commit=commit) for label, r in rate.items()]
            gflop_s = {name: work / times[name].median / 1e9 for name in (PEER, *ours)}
            dtype_of = {PEER: "fp32", **{name: name.rsplit(" ", 1)[1] for name in ours}}
            ratios = {name.rsplit(" ", 1)[1]: times[PEER].median / times[name].median for name in ours}
            goal = verdict(ratios, fp32_share=gflop_s["SentenceEncoder.encode fp32"] / best["fp32"],
                           peer_share=gflop_s[PEER] / best["fp32"])
            for name in (PEER, *ours):
                t = times[name]
                model_rows.append(data.row(
                    SECTION, case, name, baseline=PEER, ratio=times[PEER].median / t.median, **t.figures(),
                    tokens_per_s=sum(lengths) / t.median, texts_per_s=len(timed) / t.median, gflop_s=gflop_s[name],
                    of_ceiling=gflop_s[name] / best[dtype_of[name]], inputs=len(timed), weights="random",
                    deviation=(outputs[name].float().cpu() - reference).abs().max().item() if name != PEER else None,
                    deviation_from=PEER if name != PEER else None, commit=commit,
                    note=f"load {load}" + ("; " + goal if name == "SentenceEncoder.encode fp32" else "")))
            if "SentenceEncoder.encode int8" in ours:  # int8's quality against minialign fp32
                with torch.inference_mode():
                    ref = fp32.encode(judged)
                    got = ours["SentenceEncoder.encode int8"].encode(judged)
                found = embedding_quality(ref, got, passages)
                checks = {"embedding worst cosine": found["cosine worst"],
                          "top-10 overlap mean": found["top-10 overlap mean"]}
                note = "; ".join(f"{key} {value:.4f} (goal {GOALS[key]}: {'met' if value >= GOALS[key] else 'not met'})"
                                 for key, value in checks.items())
                model_rows.append(data.row(
                    SECTION, f"{embedder.name} int8 quality, {passages} passages + {queries} queries of <= "
                             f"{QUALITY_WORDS} words", "SentenceEncoder.encode int8", baseline=None, ratio=None,
                    inputs=len(judged), weights="random", deviation=(got - ref).abs().max().item(),
                    deviation_from="SentenceEncoder.encode fp32", commit=commit,
                    note=f"cosine mean {found['cosine mean']:.4f}; {note}"))
            peer = ours = fp32 = calls = outputs = None  # the next model is built with these freed
        for made in model_rows:
            echo(row_line(made))
        add(model_rows)
        rows += model_rows
    return rows
