"""AlignScore scoring: minialign's AlignScorer against the original pipeline (scripts/original_alignscore.py)
on the seeded length mix, per dtype, padded and unpadded."""

from __future__ import annotations

import tempfile
from pathlib import Path

from minialign.nn.config import DTYPES

from benchmarks.corpus import scoring_corpus
from benchmarks.fixtures import alignscore_fixture
from benchmarks.machine import interleaved

TABLE = {"impl": "", "pairs/s": ".2f", "speed-up": ".2f", "max abs diff": ".1e"}


def measure(*, examples: int, dtypes: list[str], rounds: int = 2, device: str = "cpu", config=None,
            echo=print) -> list[dict]:
    """pairs/s of each implementation, its speed-up over the original and its largest score difference
    from it; each after a warm-up on three examples, rounds interleaved, the best round kept. config: the
    model's shape (default roberta-base's; a dry run's toy)."""
    from original_alignscore import OriginalAlignScore
    from transformers import AutoTokenizer

    from minialign.products.alignscore import AlignScorer
    from minialign.text.sentences import split_sentences

    contexts, claims = scoring_corpus(examples)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, backbone, parts = alignscore_fixture(Path(tmp), contexts + claims,
                                                   **({} if config is None else {"config": config}))
        hf_tok = AutoTokenizer.from_pretrained(backbone, tokenizer_type="roberta")
        original = OriginalAlignScore({name: part.to(device) for name, part in parts.items()}, hf_tok, "nli_sp",
                                      split_sentences)
        runners = {"original (transformers fp32, pad 512, MLM head)": original.score}
        for dtype_name in dtypes:
            for unpad in (False, True):
                scorer = AlignScorer.from_pretrained(ckpt, backbone=str(backbone), unpad=unpad, device=device,
                                                     dtype=DTYPES.get(dtype_name, dtype_name))
                runners[f"minialign {dtype_name}{' unpadded' if unpad else ''}"] = scorer.score
        _, pairs = scorer._plan(contexts, claims, "nli_sp")  # every example's (chunk, sentence) pairs
        scores = {}
        seconds = interleaved({name: (lambda s=score: s(contexts, claims)) for name, score in runners.items()},
                              rounds=rounds, outputs=scores,
                              warm_up={name: (lambda s=score: s(contexts[:3], claims[:3]))
                                       for name, score in runners.items()})
    reference, base = next(iter(scores.values())), next(iter(seconds.values()))
    rows = [{"impl": name, "pairs/s": len(pairs) / seconds[name], "speed-up": base / seconds[name],
             "max abs diff": max(abs(a - b) for a, b in zip(scores[name], reference))} for name in runners]
    for row in rows:
        echo(f"{row['impl']:48} {row['pairs/s']:7.2f} pairs/s  x{row['speed-up']:.2f}  "
             f"max|diff| {row['max abs diff']:.1e}")
    return rows
