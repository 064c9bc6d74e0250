"""Swap the attention score function in a tiny model and train each briefly on a synthetic task.

    python examples/score_functions.py [STEPS]

Task: does the sequence hold more of token A than of token B? The pooled first token has to
gather evidence from every position. Content-based scores (dot product, general, bilinear,
additive) can pick the two tokens out; the location-based score is blind to content, yet solves
it too, by averaging the values by position. Prints the loss and held-out accuracy per score function; writes
score_functions.png when matplotlib is installed.
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import minialign as ma

VOCAB, LENGTH = 24, 12


def make_batch(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(4, VOCAB, (n, LENGTH), generator=generator)
    a = torch.rand(n, LENGTH, generator=generator) < 0.25
    b = ~a & (torch.rand(n, LENGTH, generator=generator) < 0.33)
    ids[a], ids[b] = 2, 3  # token A = 2, token B = 3
    ids[:, 0] = 1  # a [CLS]-like first token
    labels = ((ids == 2).sum(1) > (ids == 3).sum(1)).long()
    return ids, labels


def train(score_fn: str, steps: int) -> tuple[list[float], float]:
    config = ma.Config(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                       max_position_embeddings=LENGTH, hidden_dropout=0.0, attention_dropout=0.0,
                       score_fn=score_fn, max_relative_distance=LENGTH)
    encoder = ma.Encoder(config, attn_backend="eager", seed=0)
    torch.manual_seed(0)  # the same head for every score function: only the score function differs
    head = nn.Linear(32, 2)
    params = list(encoder.parameters()) + list(head.parameters())
    optimiser = torch.optim.AdamW(params, lr=3e-3)
    g = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(steps):
        ids, labels = make_batch(64, g)
        loss = F.cross_entropy(head(encoder(ids, final_tokens="first").pooler_output), labels)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    ids, labels = make_batch(512, torch.Generator().manual_seed(1))
    with torch.no_grad():
        accuracy = (head(encoder.eval()(ids).pooler_output).argmax(-1) == labels).float().mean().item()
    return losses, accuracy


def main(steps: int = 150) -> None:
    curves = {}
    for score_fn in ma.SCORE_FUNCTIONS:
        losses, accuracy = train(score_fn, steps)
        curves[score_fn] = losses
        print(f"{score_fn:>10}: loss {losses[0]:.3f} -> {sum(losses[-10:]) / 10:.3f}, held-out accuracy {accuracy:.2f}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: skipping score_functions.png")
        return
    for name, losses in curves.items():
        plt.plot(losses, label=name)
    plt.xlabel("step")
    plt.ylabel("loss")
    plt.legend()
    plt.savefig("score_functions.png", dpi=100, bbox_inches="tight")
    print("wrote score_functions.png")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 150)
