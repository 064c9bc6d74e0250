"""The names `ma.capture` records, per encoder family, read off the code: a tiny model of each family's preset
runs one forward under capture and its names are listed, layer indices folded to `{i}`. The docs'
"Capture names" block (docs/internals/index.md) is this script's output (tests/nn/test_capture_names.py keeps the two equal).

    python scripts/capture_names.py          # prints the markdown block
"""

from __future__ import annotations

import dataclasses
import re
import sys

import torch

import minialign as ma

# One preset per family (the one each family's tests and docs name first).
FAMILY_PRESETS = {"bert": "bert-base-uncased", "roberta": "roberta-base", "xlm-roberta": "xlm-roberta-base",
                  "camembert": "camembert-base", "electra": "electra-small-discriminator",
                  "distilbert": "distilbert-base-uncased", "mpnet": "mpnet-base", "deberta-v2": "deberta-v3-base",
                  "modernbert": "modernbert-base", "gte": "gte-base-en-v1.5",
                  "nomic_bert": "nomic-embed-text-v1.5",
                  "eurobert": "eurobert-210m",
                  "jina_embeddings_v3": "jina-embeddings-v3",
                  "gemma3_text": "embeddinggemma-300m",
                  "qwen3": "qwen3-embedding-0.6b", "qwen2": "mxbai-rerank-base-v2", "t5": "flan-t5-base"}
TINY = dict(vocab_size=120, hidden_size=16, num_layers=3, num_heads=2, intermediate_size=24)
# A family's optional modules switched on, so the table lists what they record: DeBERTa-v2's convolution after the
# first layer (conv_kernel_size > 0, as deberta-v2-xlarge's config.json; v3's presets have none), whose
# `layers.0.conv.output` is transformers' hidden_states[1]
OPTIONAL = {"deberta-v2": dict(conv_kernel_size=3),
            # Gemma 3's layer pattern for the tiny model's 3 layers (the preset's names 24), heads 8 wide
            "gemma3_text": dict(layer_types=("sliding_attention", "full_attention", "sliding_attention"), head_dim=8),
            "qwen3": dict(head_dim=8),  # the preset's heads are 128 wide
            "t5": dict(head_dim=8)}  # the preset's heads are 64 wide (d_kv)
PAIR_TYPES = 2  # the input is a pair of segments where the family has token types


def names(family: str) -> list[str]:
    """Every name one forward of a tiny `family` model records, in order: `layers.<n>.<rest>` folded to
    `layers.{i}.<rest>` where every layer records it; a name only some layers record keeps its index."""
    config = ma.Config.from_name(FAMILY_PRESETS[family])
    tiny = {**TINY, **OPTIONAL.get(family, {})}
    if getattr(config, "embedding_size", None) is not None:
        tiny["embedding_size"] = 8
    if config.pad_token_id >= tiny["vocab_size"]:
        tiny["pad_token_id"] = 1
    if getattr(config, "num_key_value_heads", None) is not None:  # grouped queries: as many key / value heads
        tiny["num_key_value_heads"] = 1
    model = ma.Encoder(dataclasses.replace(config, **tiny), seed=0).eval()
    ids = torch.arange(5, 5 + 12)[None]
    types = torch.tensor([[0] * 6 + [1] * 6]) if config.type_vocab_size >= PAIR_TYPES else None
    with torch.no_grad(), ma.capture(model) as cap:
        model(ids, token_type_ids=types)
    layers = {}  # <rest> -> the layers that record it
    for name in cap:
        if (m := re.match(r"^layers\.(\d+)\.(.*)$", name)):
            layers.setdefault(m[2], set()).add(int(m[1]))
    every = {rest for rest, seen in layers.items() if len(seen) == tiny["num_layers"]}
    return list(dict.fromkeys(re.sub(r"^layers\.\d+\.", "layers.{i}.", name)
                              if re.sub(r"^layers\.\d+\.", "", name) in every else name for name in cap))


def table() -> str:
    """The markdown block: one row per family, its names grouped by where they are recorded."""
    lines = ["| family | `embeddings.` | every layer, `layers.{i}.` (then those of one layer: `layers.<n>.`) "
             "| the encoder's own, outside the layers |",
             "|---|---|---|---|"]
    listed = lambda group: ", ".join(f"`{n}`" for n in group)  # noqa: E731
    for family in FAMILY_PRESETS:
        found = names(family)
        embeddings = [n.removeprefix("embeddings.") for n in found if n.startswith("embeddings.")]
        layers = listed(n.removeprefix("layers.{i}.") for n in found if n.startswith("layers.{i}."))
        one = {}  # layer index -> the names only it records
        for n in found:
            if (m := re.match(r"^layers\.(\d+)\.(.*)$", n)):
                one.setdefault(m[1], []).append(m[2])
        for index, own in one.items():
            options = ", ".join(f"{k} > 0" for k in OPTIONAL.get(family, {}))
            layers += f"; layer {index}" + (f" ({options})" if options else "") + f": {listed(own)}"
        rest = [n for n in found if not n.startswith(("embeddings.", "layers."))]
        cells = [listed(embeddings) or "-", layers or "-", listed(rest) or "-"]
        lines.append(f"| {family} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(print(table()))
