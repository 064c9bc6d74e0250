"""Classifier: sequence classifiers, NLI models and cross-encoder rerankers from
*ForSequenceClassification checkpoints (transformers, sentence-transformers CrossEncoder dirs).

    clf = Classifier.from_pretrained("path/or/hub-id")
    clf.predict(["premise", ...], ["hypothesis", ...])    # (N, num_labels), or (N,) for one label
    clf.rerank("query", ["doc 1", "doc 2"])                # [(index, score), ...] best first

Pairs are cut to the window longest-first, as transformers' tokenizers (truncation=True) and
CrossEncoder do. Batches go through the shared batching engine (deduplicated, sorted by length,
packed).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from minialign import convert
from minialign.runtime.engine import BatchEngine
from minialign.sources.hub import hub_file
from minialign.loading import build, read_checkpoint
from minialign.models.encoder import ClassifierModel
from minialign.text.tokenizer import Tokenizer, check_texts, value_problem

ACTIVATIONS = ("auto", "none", "softmax", "sigmoid", "tanh")
# The weights predictions read, which a checkpoint must hold (loading.build refuses it otherwise).
TRAINED = ("encoder.pooler.", "classifier.")
NO_HEAD = ("A Classifier needs a fine-tuned *ForSequenceClassification or CrossEncoder checkpoint; this looks like a "
           "plain encoder (a backbone or an embedding model: use SentenceEncoder / `minialign embed` for that). "
           "To fine-tune a new head, load ma.ClassifierModel, whose new head starts the same in every run.")
# sentence-transformers CrossEncoder activations (the class path it saves) -> ours.
_CROSSENCODER_ACTIVATIONS = {
    "torch.nn.modules.activation.Sigmoid": "sigmoid",
    "torch.nn.modules.linear.Identity": "none",
    "torch.nn.modules.activation.Softmax": "softmax",
    "torch.nn.modules.activation.Tanh": "tanh",
}


def apply_activation(logits: Tensor, activation: str) -> Tensor:
    if activation == "softmax":
        return torch.softmax(logits, dim=-1)
    if activation == "sigmoid":
        return torch.sigmoid(logits)
    if activation == "tanh":
        return torch.tanh(logits)
    return logits


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
    if path not in _CROSSENCODER_ACTIVATIONS:
        raise ValueError(f"CrossEncoder activation {path!r} is not supported; supported: "
                         f"{', '.join(_CROSSENCODER_ACTIVATIONS)}")
    return _CROSSENCODER_ACTIVATIONS[path]


class Classifier:
    def __init__(self, model: ClassifierModel, tokenizer: Tokenizer, *, batch_size: int = 32,
                 max_tokens: int | None = None, max_length: int | None = None, unpad: bool = True,
                 saved_activation: str | None = None, workers: int = 1):
        """saved_activation: the activation a sentence-transformers CrossEncoder saved with the model
        (its class path), used by activation="auto". workers: model processes on the CPU (workers.py)."""
        self.model, self.tokenizer = model.eval(), tokenizer
        self.max_length = min(max_length or tokenizer.model_max_length, model.config.max_seq_len)
        self.unpad = unpad
        self.saved_activation = crossencoder_activation(saved_activation)
        self.engine = BatchEngine.for_model(tokenizer, model, batch_size=batch_size, packed=unpad,
                                            max_length=self.max_length, max_tokens=max_tokens,
                                            truncation="longest_first", workers=workers)

    @classmethod
    def from_pretrained(cls, src: str | Path, *, tokenizer: str | Path | Tokenizer | None = None,
                        device: str | torch.device | None = None, dtype: torch.dtype | None = None,
                        batch_size: int = 32, max_tokens: int | None = None, max_length: int | None = None,
                        attn_backend: str = "sdpa", revision: str | None = None, workers: int = 1,
                        cache_dir: str | Path | None = None) -> Classifier:
        """A transformers *ForSequenceClassification directory or hub id (a CrossEncoder dir too),
        or a minialign directory of one."""
        ckpt = read_checkpoint(src, revision=revision, cache_dir=cache_dir)
        if not Path(src).expanduser().exists():  # a hub id: CrossEncoder's saved activation, if any
            hub_file(str(src), "config_sentence_transformers.json", revision=revision, cache_dir=cache_dir,
                     optional=True)
        model = build(ClassifierModel, ckpt, device=device, dtype=dtype, attn_backend=attn_backend, require=TRAINED,
                      advice=NO_HEAD)
        if not isinstance(tokenizer, Tokenizer):
            tokenizer = Tokenizer.from_pretrained(tokenizer or ckpt.tokenizer_dir or src, revision=revision,
                                                  cache_dir=cache_dir)
        saved = convert.crossencoder_activation(ckpt.tokenizer_dir) if ckpt.tokenizer_dir else None
        return cls(model, tokenizer, batch_size=batch_size, max_tokens=max_tokens, max_length=max_length,
                   saved_activation=saved, workers=workers)

    @property
    def labels(self) -> list[str]:
        """Label names by index (id2label)."""
        return list(self.model.config.labels)

    def activation(self, activation: str = "auto") -> str:
        """The activation `predict` applies: "auto" is the CrossEncoder's saved one when the model
        carries it, else transformers' text-classification pipeline rule."""
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        if activation != "auto":
            return activation
        return self.saved_activation or pipeline_activation(len(self.labels), self.model.config.problem_type)

    @torch.inference_mode()
    def predict(self, texts: Sequence[str], pairs: Sequence[str] | None = None, *, activation: str = "auto",
                progress: bool = False) -> Tensor:
        """(N, num_labels) float32 scores of texts (or text pairs), or (N,) for a one-label model."""
        function = self.activation(activation)
        texts = check_texts("texts", texts)
        if pairs is not None:
            pairs = check_texts("pairs", pairs)
            if len(pairs) != len(texts):
                raise ValueError(f"texts and pairs must have equal length, got {len(texts)} and {len(pairs)}")
        inputs = texts if pairs is None else list(zip(texts, pairs))
        n = len(self.labels)
        if not inputs:
            return torch.empty(0) if n == 1 else torch.empty(0, n)
        logits = self.engine.run(inputs, self.logits, progress="classifying" if progress else False).values
        scores = apply_activation(logits, function)
        return scores[:, 0] if n == 1 else scores

    def logits(self, batch: dict[str, Tensor]) -> Tensor:
        """float32 logits of one padded batch (what the batching engine calls)."""
        return self.model(**batch, unpad=self.unpad).logits.float()

    def rerank(self, query: str, documents: Sequence[str], *, top_k: int | None = None,
               activation: str = "auto") -> list[tuple[int, float]]:
        """(index, score) of each document for the query, best first (a one-label model: a reranker)."""
        if len(self.labels) != 1:
            raise ValueError(f"rerank needs a one-label model (a cross-encoder reranker); this one has "
                             f"{len(self.labels)} labels: use predict")
        if problem := value_problem(query):
            raise ValueError(f"invalid input: query {problem}")
        documents = check_texts("documents", documents)
        scores = self.predict([query] * len(documents), documents, activation=activation).tolist()
        ranked = sorted(enumerate(scores), key=lambda item: item[1], reverse=True)
        return ranked if top_k is None else ranked[:top_k]
