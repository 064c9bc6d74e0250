"""Classifier: sequence classifiers, NLI models and cross-encoder rerankers from
*ForSequenceClassification checkpoints (transformers, sentence-transformers CrossEncoder dirs).

    clf = Classifier.from_pretrained("path/or/hub-id")
    clf.predict(["premise", ...], ["hypothesis", ...])    # (N, num_labels), or (N,) for one label
    clf.rerank("query", ["doc 1", "doc 2"])                # [(index, score), ...] best first

Pairs are cut to the window longest-first, as transformers' tokenizers (truncation=True) and
CrossEncoder do, and the cut is reported as by every runner (products/runner.py). Batches go through
the shared batching engine (deduplicated, sorted by length, packed). One call may mix single texts
and pairs (pairs[i] None); rows come back in input order. The activation is chosen per call;
`activate`, `label_ranking` and `rank` turn logits into the answers predict and rerank give.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Unpack

import torch
from torch import Tensor

from minialign import convert
from minialign.nn.activations import ACTIVATIONS as FUNCTIONS, TORCH_MODULES
from minialign.products.choices import CLASSIFIER_ACTIVATION as ACTIVATION  # predict's default
from minialign.products.choices import CLASSIFIER_ACTIVATIONS as ACTIVATIONS  # what predict applies
from minialign.products.runner import LoadOptions, Loading, Runner, inputs_of
from minialign.runtime.engine import Results, Truncation
from minialign.sources import resolve
from minialign.loading import build, read_checkpoint
from minialign.models.head_models import ClassifierModel
from minialign.text.tokenizer import Tokenizer
from minialign.text.validation import check_texts, value_problem

# The weights predictions read, which a checkpoint must hold (loading.weights.build refuses it otherwise).
TRAINED = ("encoder.pooler.", "classifier.")
NO_HEAD = ("A Classifier needs a fine-tuned *ForSequenceClassification or CrossEncoder checkpoint; this looks like a "
           "plain encoder (a backbone or an embedding model: use SentenceEncoder / `minialign embed` for that). "
           "To fine-tune a new head, load ma.ClassifierModel, whose new head starts the same in every run.")


def apply_activation(logits: Tensor, activation: str) -> Tensor:
    """One of ACTIVATIONS (but "auto", which Classifier.activation resolves) on logits (N, num_labels)."""
    return FUNCTIONS[activation](logits)


def pipeline_activation(num_labels: int, problem_type: str | None) -> str:
    """transformers' TextClassificationPipeline default (function_to_apply): none for regression,
    sigmoid for multi-label or one label, softmax otherwise."""
    if problem_type == "regression":
        return "none"
    if problem_type == "multi_label_classification" or num_labels == 1:
        return "sigmoid"
    return "softmax"


def crossencoder_activation(path: str | None) -> str | None:
    """Ours for a CrossEncoder's saved activation; None when none is saved. As CrossEncoder does,
    a path outside torch (custom code, not trusted) falls back to its default."""
    if path is None or not path.startswith("torch."):
        return None
    if TORCH_MODULES.get(path) not in ACTIVATIONS:
        supported = [module for module, name in TORCH_MODULES.items() if name in ACTIVATIONS]
        raise ValueError(f"CrossEncoder activation {path!r} is not supported; supported: {', '.join(supported)}")
    return TORCH_MODULES[path]


class Classifier(Runner):
    truncation_unit, truncation_like = "text(s) or pair(s)", "a transformers tokenizer with truncation=True"
    progress_label = "classifying"
    calibration_pairs = True  # rerankers and pair classifiers read pairs

    def __init__(self, model: ClassifierModel, tokenizer: Tokenizer, *, batch_size: int | None = None,
                 max_tokens: int | None = None, max_length: int | None = None, unpad: bool | None = None,
                 saved_activation: str | None = None, workers: int = 1, compile: bool | str = False,
                 threads: int | None = None):
        """saved_activation: the activation a sentence-transformers CrossEncoder saved with the model
        (its class path), used by activation="auto". The other options: Runner._start."""
        self.saved_activation = crossencoder_activation(saved_activation)
        self._start(model, tokenizer, max_length=max_length, batch_size=batch_size, max_tokens=max_tokens,
                    unpad=unpad, compile=compile, workers=workers, threads=threads,
                    truncation="longest_first")

    @classmethod
    def from_pretrained(cls, src: str | Path, *, max_length: int | None = None,
                        **keywords: Unpack[Loading]) -> Classifier:
        """A transformers *ForSequenceClassification directory or hub id (a CrossEncoder dir too),
        or a minialign directory of one. The keywords every runner takes are products/runner.py's (Loading)."""
        load = LoadOptions.of(keywords, f"{cls.__name__}.from_pretrained")
        source = resolve(src, revision=load.revision, cache_dir=load.cache_dir)  # every file below is read from it
        ckpt = read_checkpoint(source, task=load.adapter)
        model = build(ClassifierModel, ckpt, require=TRAINED, advice=NO_HEAD, **load.only("device", "dtype",
                                                                                            "attn_backend"))
        tokenizer = load.open_tokenizer(source, ckpt.tokenizer)
        saved = convert.crossencoder_activation(source)  # a CrossEncoder's saved activation, if any
        classifier = cls(model, tokenizer, max_length=max_length, saved_activation=saved, **load.engine())
        classifier.source = str(src)
        return classifier

    @property
    def labels(self) -> list[str]:
        """Label names by index (id2label)."""
        return list(self.model.config.labels)

    def activation(self, activation: str = ACTIVATION) -> str:
        """The activation `predict` applies: "auto" is the CrossEncoder's saved one when the model
        carries it, else transformers' text-classification pipeline rule."""
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        if activation != "auto":
            return activation
        return self.saved_activation or pipeline_activation(len(self.labels), self.model.config.problem_type)

    @property
    def reranker(self) -> bool:
        """A one-label model: a cross-encoder reranker (or a regressor), which `rerank` takes."""
        return len(self.labels) == 1

    def settings(self, *, activation: str = ACTIVATION) -> dict:
        return {**super().settings(), "activation": self.activation(activation)}

    def predict(self, texts: Sequence[str] | str, pairs: Sequence[str | None] | str | None = None, *,
                activation: str = ACTIVATION, progress: bool = False, warn_truncation: bool | None = None,
                tally: Truncation | None = None) -> Tensor:
        """(N, num_labels) float32 scores of texts, or text pairs, or both in one call (pairs[i] None:
        texts[i] alone), row i for input i; (N,) for a one-label model. One text (and one pair text) as
        strings gives that input's row alone: (num_labels,), or a 0-d score for a one-label model (as
        CrossEncoder.predict does for one pair). Text cut by the window is reported as by every runner
        (warn_truncation, tally: products/runner.py)."""
        if isinstance(texts, str):
            if pairs is not None and not isinstance(pairs, str):
                raise ValueError(f"texts is one string, so pairs must be one string or None, got {type(pairs).__name__}")
            return self.predict([texts], None if pairs is None else [pairs], activation=activation, progress=progress,
                                warn_truncation=warn_truncation, tally=tally)[0]
        function = self.activation(activation)
        texts = check_texts("texts", texts)
        if pairs is not None:  # None items are single texts: checked as "" for the others' indices
            check_texts("pairs", pairs if isinstance(pairs, str) or not isinstance(pairs, Sequence)
                        else ["" if p is None else p for p in pairs])
            if len(pairs) != len(texts):
                raise ValueError(f"texts and pairs must have equal length, got {len(texts)} and {len(pairs)}")
        results = self._logits(inputs_of(texts, pairs), progress)
        self._count(results.truncated, warn_truncation, tally)
        return self.activate(results.values, function)

    def _logits(self, inputs: list, progress: bool = False) -> Results:
        if not inputs:
            return Results(torch.empty(0, len(self.labels)), torch.empty(0, dtype=torch.long))
        return self.run(inputs, progress=progress)

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        """float32 logits of one padded batch (what the batching engine calls)."""
        return self.model(**batch, unpad=self.unpad).logits.float()

    logits = forward  # its name before the runner contract

    def activate(self, logits: Tensor, activation: str = ACTIVATION) -> Tensor:
        """Scores from logits (N, num_labels): the activation applied (see `activation`); (N,) for a
        one-label model."""
        scores = apply_activation(logits, self.activation(activation))
        return scores[:, 0] if self.reranker else scores

    def label_ranking(self, scores: Tensor, *, top_k: int | None = None) -> list[list[tuple[str, float]]]:
        """Per row of scores (N, num_labels) or (N,), every label and its score, best first (the top_k;
        ties in label order)."""
        rows = scores.reshape(scores.size(0), len(self.labels)).tolist()
        return [[(self.labels[i], s) for i, s in self.rank(row, top_k=top_k)] for row in rows]

    @staticmethod
    def rank(scores: Sequence[float], *, top_k: int | None = None) -> list[tuple[int, float]]:
        """(index, score) best first, the top_k of them; ties keep their order."""
        ranked = sorted(enumerate(scores), key=lambda item: item[1], reverse=True)
        return ranked if top_k is None else ranked[:top_k]

    def rerank(self, query: str, documents: Sequence[str], *, top_k: int | None = None, activation: str = ACTIVATION,
               warn_truncation: bool | None = None, tally: Truncation | None = None) -> list[tuple[int, float]]:
        """(index, score) of each document for the query, best first (a one-label model: a reranker)."""
        if not self.reranker:
            raise ValueError(f"rerank needs a one-label model (a cross-encoder reranker); this one has "
                             f"{len(self.labels)} labels: use predict")
        if problem := value_problem(query):
            raise ValueError(f"invalid input: query {problem}")
        function = self.activation(activation)
        results = self._logits([(query, d) for d in check_texts("documents", documents)])
        self._count(results.truncated, warn_truncation, tally)
        return self.rank(self.activate(results.values, function).tolist(), top_k=top_k)
