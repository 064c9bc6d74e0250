"""The file jobs of the command line (batchfile.Job): score, embed, classify.

Each says which fields a row has, how a block of rows becomes output records, and the settings a
resumed run must share with the run that made the file.
"""

from __future__ import annotations

from typing import Any

import torch

from minialign.apps.files.rows import Job, Row
from minialign.products.classifier import Classifier
from minialign.products.embeddings import SentenceEncoder
from minialign.runtime.engine import report_truncation


# What each command writes (batchfile.FORMATS' values), known before a model is loaded: the command
# line checks its --output against it first (batchfile.check_output), and each job declares it.
OUTPUT_FORMATS = {"score": ("jsonl", "csv"), "embed": ("jsonl", "safetensors"), "classify": ("jsonl", "csv")}


def _dtype(model: torch.nn.Module) -> str:
    return str(next(model.parameters()).dtype).removeprefix("torch.")


def score_job(scorer, *, context_field: str = "context", claim_field: str = "claim", model: str | None = None) -> Job:
    """AlignScorer or MiniCheckScorer: {"score": float} per (context, claim) row."""
    totals = {"cut": 0, "inputs": 0, "tokens": 0}

    def run(rows: list[Row]) -> list[dict[str, Any]]:
        details = scorer.score([r.values["context"] for r in rows], [r.values["claim"] for r in rows],
                               return_details=True, warn_truncation=False)
        for result in details:
            cuts = [n for per_chunk in result["truncated"] for n in per_chunk]
            totals["cut"] += sum(n > 0 for n in cuts)
            totals["inputs"] += len(cuts)
            totals["tokens"] += sum(cuts)
        return [{"score": result["score"]} for result in details]

    def check(values: dict[str, str | None]) -> list[tuple[str, str]]:
        return [] if list(scorer.splitter(values["claim"])) else [("claim", "has no sentence")]

    def finish() -> None:  # one warning per run
        report_truncation(totals["cut"], totals["inputs"], totals["tokens"], scorer.max_length,
                          what=scorer.truncation_unit, original=scorer.reference_name)

    return Job(fields={"context": context_field, "claim": claim_field},
               flags={"context": "--context-field", "claim": "--claim-field"}, run=run, check=check,
               columns=["score"], finish=finish, batch_size=scorer.engine.batch_size, outputs=OUTPUT_FORMATS["score"],
               settings={"model": model or scorer.source, "mode": scorer.mode, "dtype": _dtype(scorer.model)})


def embed_job(encoder: SentenceEncoder, *, text_field: str = "text", normalize: bool = False,
              model: str | None = None) -> Job:
    """SentenceEncoder: {"embedding": [floats]} per text row (.jsonl), or one (N, D) tensor (.safetensors)."""

    def run(rows: list[Row]) -> list[dict[str, Any]]:
        vectors = encoder.encode([r.values["text"] for r in rows], normalize_embeddings=normalize)
        return [{"embedding": v} for v in vectors.tolist()]

    return Job(fields={"text": text_field}, flags={"text": "--text-field"}, run=run, tensor="embedding",
               batch_size=encoder.batch_size, outputs=OUTPUT_FORMATS["embed"],
               settings={"model": model, "normalize": normalize, "dtype": _dtype(encoder.encoder),
                         "max_seq_length": encoder.max_seq_length})


def classify_job(classifier: Classifier, *, text_field: str = "text", pair_field: str = "pair",
                 activation: str = "auto", model: str | None = None) -> Job:
    """Classifier: per row (a text, and a pair text when the row has one), the best label and every
    label's score; a one-label model (a reranker, a regressor) gives {"score"}."""
    labels = classifier.labels
    function = classifier.activation(activation)

    def run(rows: list[Row]) -> list[dict[str, Any]]:
        records: list[dict[str, Any] | None] = [None] * len(rows)
        singles = [i for i, r in enumerate(rows) if r.values["pair"] is None]
        pairs = [i for i, r in enumerate(rows) if r.values["pair"] is not None]
        for indices, with_pair in ((singles, False), (pairs, True)):
            if not indices:
                continue
            scores = classifier.predict([rows[i].values["text"] for i in indices],
                                        [rows[i].values["pair"] for i in indices] if with_pair else None,
                                        activation=function)
            for i, row_scores in zip(indices, scores.view(len(indices), -1).tolist()):
                if len(labels) == 1:
                    records[i] = {"score": row_scores[0]}
                else:
                    best = max(range(len(labels)), key=row_scores.__getitem__)
                    records[i] = {"label": labels[best], **{f"score_{label}": s for label, s in zip(labels, row_scores)}}
        return records

    columns = ["score"] if len(labels) == 1 else ["label", *(f"score_{label}" for label in labels)]
    return Job(fields={"text": text_field, "pair": pair_field}, flags={"text": "--text-field", "pair": "--pair-field"},
               optional=("pair",), run=run, columns=columns, batch_size=classifier.engine.batch_size,
               outputs=OUTPUT_FORMATS["classify"],
               settings={"model": model, "activation": function, "dtype": _dtype(classifier.model)})
