"""Heads by kind: one declaration of what a kind of head computes, one module that computes it, and what
each family changes about it declared as a value (never one class per family).

Sequence classification (transformers *ForSequenceClassification) is, in every family, one formula whose
steps a family switches on or parameterises:

    pooled = pool(encoder output)        "pooler": BertPooler's tanh(dense(h_0)); "first": h_0; "mean": the
                                          mean of the real tokens' final states (ModernBERT's "mean" pooling)
    logits = out_proj(dropout(norm(act(dense(dropout_in(pooled))))))   each step only where declared

    or, pooled "late" (EuroBERT's default), the same steps on every token's final state and then the mean of
    the real tokens' logits (EuroBertForSequenceClassification, classifier_pooling "late")

    BERT        pooler, no dense                              (BertForSequenceClassification)
    RoBERTa     first, dropout_in, dense + tanh               (RobertaClassificationHead; MPNet, XLM-R, CamemBERT)
    ELECTRA     first, dropout_in, dense + gelu               (ElectraClassificationHead)
    DistilBERT  first, dense + relu                           (pre_classifier, classifier)
    DeBERTa-v2  first, dropout_in pooler_dropout, dense + pooler_hidden_act   (ContextPooler, classifier)
    ModernBERT  first or mean, dense + classifier_activation (bias classifier_bias), norm (bias norm_bias)
                                                              (ModernBertPredictionHead, classifier)
    EuroBERT    first (bos), mean or late, dense + exact GELU   (dense, activation, classifier)

`dropout` is classifier_dropout, else hidden_dropout (transformers' rule); weight names are the family's
(convert/families/<family>.py): `classifier.dense`, `classifier.norm`, `classifier.out_proj`.

Masked-LM (transformers *ForMaskedLM) is, in every family, one formula too (MaskedLM; its module is
MLMHead):

    logits = decoder(norm(act(dense(h))))  (+ bias)     decoder: the word embeddings unless untied

    BERT        act hidden_act                          (BertLMPredictionHead: cls.predictions)
    RoBERTa     act gelu                                (RobertaLMHead: lm_head; MPNet, XLM-R, CamemBERT)
    ELECTRA     act gelu, width embedding_size          (ElectraGeneratorPredictions, generator_lm_head)
    DistilBERT  act activation                          (vocab_transform, vocab_layer_norm, vocab_projector)
    DeBERTa-v2  act hidden_act, width embedding_size    (legacy cls.predictions, or lm_predictions.lm_head)
    ModernBERT  act classifier_activation, biases classifier_bias / norm_bias / decoder_bias, the dense and
                norm shared with the classifier's (ModernBertPredictionHead `head`, decoder)
    EuroBERT    no dense, no norm: the decoder on the final (normed) states, its bias mlp_bias (lm_head)

Token classification (transformers *ForTokenClassification) and extractive QA (*ForQuestionAnswering) are one
formula on every token's final state (TokenClassification, QuestionAnswering; their module is TokenHead):

    logits = out_proj(dropout(norm(act(dense(h)))))   (B, L, num_labels); QA: num_labels 2, split into start / end

    every family but ModernBERT   dropout -> classifier (token; the dropout is classifier_dropout else
                                  hidden_dropout, or hidden_dropout alone: DistilBERT, MPNet, DeBERTa-v2),
                                  qa_outputs (QA; DistilBERT's dropout qa_dropout is not read: eval runs none)
    ModernBERT                    head (dense + classifier_activation, norm), drop (classifier_dropout), classifier
                                  (ModernBertForTokenClassification and ModernBertForQuestionAnswering alike: QA's
                                  output layer is named `classifier` too, QuestionAnswering.at)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn as nn
from torch import Tensor

from minialign.nn.reduce import token_sum
from minialign.nn.activations import activation
from minialign.nn.capture import record
from minialign.nn.config import Config
from minialign.nn.linear import Linear


class EncodedStates(Protocol):
    """What a head reads of the encoder's output (models/encoder.py EncoderOutput is one)."""

    last_hidden_state: Tensor  # (B, L, C), or (B, 1, C) when only the first tokens were computed
    pooler_output: Tensor | None  # (B, C)

POOLS = ("pooler", "first", "mean", "late", "last")


@dataclass(frozen=True)
class SequenceClassification:
    """What a family's sequence-classification head is (module docstring's formula).

    pool:             "pooler", "first", "mean", "late" (every token through the head, then the mean of the
                      real tokens' logits) or "last" (the last real token's state: the decoders' classifiers,
                      Qwen2ForSequenceClassification's last_non_pad_token)
    out_bias:         whether the output layer has a bias (Qwen's `score` has none)
    dense_activation: the dense layer's activation (a name of nn/activations.py); None: no dense layer
    dense_bias:       whether the dense layer has a bias
    fuse_activation:  the activation applied by the dense layer's kernel (nn/linear.py, oneDNN's post-op) or
                      after it (RoBERTa's tanh, as transformers and minialign 0.2 run it: the fused form
                      rounds otherwise in fp32)
    dropout_in:       the dropout before the dense layer (None: none)
    norm_bias:        a LayerNorm after the dense layer, with a bias or not (None: no norm)
    record:           where capture records `pooled`: "pool" (the pooled states) or "dense" (the dense
                      layer's output: DeBERTa's ContextPooler output); None: nowhere
    """

    pool: str = "pooler"
    out_bias: bool = True
    dense_activation: str | None = None
    dense_bias: bool = True
    fuse_activation: bool = True
    dropout_in: float | None = None
    norm_bias: bool | None = None
    record: str | None = None

    def __post_init__(self) -> None:
        if self.pool not in POOLS:
            raise ValueError(f"SequenceClassification.pool must be one of {POOLS}, got {self.pool!r}")
        if self.record not in (None, "pool", "dense"):
            raise ValueError(f"SequenceClassification.record must be None, 'pool' or 'dense', got {self.record!r}")

    @property
    def uses_pooler(self) -> bool:
        """Whether the encoder under it keeps its pooler (BERT's head reads pooler_output)."""
        return self.pool == "pooler"

    @property
    def tokens(self) -> str:
        """Whose final states it reads (nn/layout.py FINAL_TOKENS): every token's for "mean" and "late", else the
        first's (the last layer then runs for the first tokens alone)."""
        return "all" if self.pool in ("mean", "late", "last") else "first"


@dataclass(frozen=True)
class MaskedLM:
    """What a family's masked-LM head is (module docstring's formula).

    activation:   the dense layer's activation (a name of nn/activations.py); None: the config's `activation`
    width:        "hidden" (the dense layer keeps hidden_size) or "embedding" (it maps onto the word embeddings'
                  width, embedding_size: ELECTRA's generator, DeBERTa-v2's legacy head)
    dense_bias, norm_bias, decoder_bias: whether each carries a bias (ModernBERT's flags; True elsewhere)
    at:           where its dense and norm sit among a checkpoint's names (minialign's, convert/names.py):
                  "mlm_head", or "classifier" where transformers shares them with the classifier (ModernBERT's
                  `head`, which ModernBertForMaskedLM and ModernBertForSequenceClassification both have)
    transform:    whether the dense layer and norm are there (False: the decoder reads the final states, as
                  EuroBertForMaskedLM's lm_head does)
    """

    activation: str | None = None
    width: str = "hidden"
    dense_bias: bool = True
    norm_bias: bool = True
    decoder_bias: bool = True
    at: str = "mlm_head"
    transform: bool = True

    def __post_init__(self) -> None:
        if self.width not in ("hidden", "embedding"):
            raise ValueError(f"MaskedLM.width must be 'hidden' or 'embedding', got {self.width!r}")
        if self.at not in ("mlm_head", "classifier"):
            raise ValueError(f"MaskedLM.at must be 'mlm_head' or 'classifier', got {self.at!r}")

    def features(self, config: Config) -> int:
        """The width of the dense layer's output, which the decoder maps to the vocabulary."""
        return config.embedding_width if self.width == "embedding" else config.hidden_size


@dataclass(frozen=True)
class TokenClassification:
    """What a family's token-classification head is (module docstring's second formula).

    dense_activation: the activation of a dense layer before the output layer (a name of nn/activations.py:
                      ModernBertPredictionHead's); None: no dense layer (every family but ModernBERT)
    dense_bias:       whether the dense layer has a bias
    norm_bias:        a LayerNorm after the dense layer, with a bias or not (None: no norm)
    dropout:          "classifier" (classifier_dropout, else hidden_dropout: heads.head_dropout), "hidden"
                      (hidden_dropout) or None (no dropout: BertForQuestionAnswering)
    """

    dense_activation: str | None = None
    dense_bias: bool = True
    norm_bias: bool | None = None
    dropout: str | None = "classifier"

    def __post_init__(self) -> None:
        if self.dropout not in (None, "classifier", "hidden"):
            raise ValueError(f"{type(self).__name__}.dropout must be None, 'classifier' or 'hidden', got {self.dropout!r}")


@dataclass(frozen=True)
class QuestionAnswering(TokenClassification):
    """What a family's extractive-QA head is: a token head of two outputs, start and end logits.

    at: where its layers sit among a checkpoint's names (minialign's, convert/names.py): "qa_outputs", or
        "classifier" (ModernBertForQuestionAnswering names its head and output layer as its classifiers do)
    """

    dropout: str | None = None
    at: str = "qa_outputs"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.at not in ("qa_outputs", "classifier"):
            raise ValueError(f"QuestionAnswering.at must be 'qa_outputs' or 'classifier', got {self.at!r}")


@dataclass(frozen=True)
class Heads:
    """A family's heads, one value per transformers class (Family.heads): BERT's by default. A head transformers
    has no class for in the family is a sentence saying so, which the model class that would build it raises
    (`question_answering`: GTE, NomicBERT, EuroBERT)."""

    sequence_classification: SequenceClassification = SequenceClassification()
    masked_lm: MaskedLM = MaskedLM()
    token_classification: TokenClassification = TokenClassification()
    question_answering: QuestionAnswering | str = QuestionAnswering()


def head_dropout(config: Config) -> nn.Dropout:
    """A classification head's dropout: classifier_dropout, else hidden_dropout (transformers' rule)."""
    return nn.Dropout(config.hidden_dropout if config.classifier_dropout is None else config.classifier_dropout)


def check_labels(config: Config) -> None:
    if not config.labels:
        raise ValueError("a classification head needs labels (Config.labels, from id2label / num_labels)")


class SequenceClassificationHead(nn.Module):
    """The sequence-classification head of any family, built from its declaration (SequenceClassification)."""

    def __init__(self, config: Config, kind: SequenceClassification):
        super().__init__()
        check_labels(config)
        self.kind = kind
        width = config.hidden_size
        self.dropout_in = nn.Dropout(kind.dropout_in) if kind.dropout_in is not None else None
        fused = kind.fuse_activation and kind.dense_activation is not None
        self.dense = (Linear(width, width, bias=kind.dense_bias, activation=kind.dense_activation if fused else None)
                      if kind.dense_activation is not None else None)
        self.activation = None if fused or kind.dense_activation is None else activation(kind.dense_activation)
        self.norm = (nn.LayerNorm(width, eps=config.layer_norm_eps, bias=kind.norm_bias)
                     if kind.norm_bias is not None else None)
        self.dropout = head_dropout(config)
        self.out_proj = Linear(width, len(config.labels), bias=kind.out_bias)

    def forward(self, encoded: EncodedStates, attention_mask: Tensor | None = None) -> Tensor:
        """The encoder's output -> (B, num_labels); attention_mask (B, L): the real tokens of "mean" and "late"
        pooling."""
        late = self.kind.pool == "late"
        x = encoded.last_hidden_state if late else self.pool(encoded, attention_mask)  # (B, L, C) late, else (B, C)
        if self.kind.record == "pool":
            x = record("pooled", x)
        if self.dropout_in is not None:
            x = self.dropout_in(x)
        if self.dense is not None:
            x = self.dense(x)  # activation fused, unless applied next
            if self.activation is not None:
                x = self.activation(x)
            if self.kind.record == "dense":
                x = record("pooled", x)
        if self.norm is not None:
            x = self.norm(x)
        logits = self.out_proj(self.dropout(x))
        return masked_mean(logits, attention_mask) if late else logits  # late: (B, L, K) -> (B, K)

    def pool(self, encoded: EncodedStates, attention_mask: Tensor | None) -> Tensor:
        if self.kind.pool == "pooler":
            return encoded.pooler_output
        h = encoded.last_hidden_state  # (B, L | 1, C)
        if self.kind.pool == "first":
            return h[:, 0]
        if self.kind.pool == "last":
            return last_token(h, attention_mask)
        return masked_mean(h, attention_mask)


def last_token(h: Tensor, keep: Tensor | None) -> Tensor:
    """(B, L, C) -> (B, C): each row's rightmost kept token (transformers' Qwen2ForSequenceClassification:
    `(token_indices * non_pad_mask).argmax(-1)`, padding on either side); no mask: the last position."""
    if keep is None:
        return h[:, -1]
    positions = torch.arange(keep.size(1), device=h.device)
    return h[torch.arange(h.size(0), device=h.device), (positions * keep.to(torch.long)).argmax(-1)]


def masked_mean(h: Tensor, attention_mask: Tensor | None) -> Tensor:
    """(B, L, N) -> (B, N): the mean over the real tokens (ModernBERT's "mean" pooling of states, EuroBERT's
    "late" pooling of logits: sum(h * mask) / sum(mask), as transformers); no mask: every token."""
    if attention_mask is None:
        attention_mask = torch.ones(h.shape[:2], dtype=torch.bool, device=h.device)
    if attention_mask.dim() != 2:
        raise ValueError(f"mean pooling needs a 2-D (B, L) attention_mask, got shape {tuple(attention_mask.shape)}")
    keep = attention_mask.to(h.dtype)[..., None]  # (B, L, 1)
    return token_sum(h * keep) / attention_mask.sum(dim=1, keepdim=True)  # (B, N), as transformers (in token order)


class TokenHead(nn.Module):
    """The token-classification / extractive-QA head of any family, built from its declaration (TokenClassification,
    QuestionAnswering): every token's final state (B, L, C) -> (B, L, outputs)."""

    def __init__(self, config: Config, kind: TokenClassification, outputs: int):
        super().__init__()
        self.kind = kind
        width = config.hidden_size
        act = kind.dense_activation
        self.dense = Linear(width, width, bias=kind.dense_bias, activation=act) if act is not None else None
        self.norm = (nn.LayerNorm(width, eps=config.layer_norm_eps, bias=kind.norm_bias)
                     if kind.norm_bias is not None else None)
        if kind.dropout == "classifier":
            self.dropout = head_dropout(config)
        else:
            self.dropout = nn.Dropout(config.hidden_dropout) if kind.dropout == "hidden" else None
        self.out_proj = Linear(width, outputs)

    def forward(self, x: Tensor) -> Tensor:
        """(..., C) -> (..., outputs)."""
        if self.dense is not None:
            x = self.dense(x)  # activation fused (nn/linear.py)
        if self.norm is not None:
            x = self.norm(x)
        if self.dropout is not None:
            x = self.dropout(x)
        return self.out_proj(x)


class MLMHead(nn.Module):
    """The masked-LM head of any family, built from its declaration (MaskedLM, the one its family declares):
    dense -> activation -> LayerNorm -> decoder (+ bias). The decoder is the word-embedding
    matrix unless the config unties it (AlignScore checkpoints carry their own). The activation is the
    family's: BERT's BertLMPredictionHead uses hidden_act, RobertaLMHead exact GELU."""

    def __init__(self, config: Config, kind: MaskedLM):
        super().__init__()
        self.kind = kind
        width = kind.features(config)
        self.dense = self.norm = None  # no transform (heads.py MaskedLM.transform): the decoder reads the states
        if kind.transform:
            self.dense = Linear(config.hidden_size, width, bias=kind.dense_bias,
                                activation=kind.activation or config.activation)
            self.norm = nn.LayerNorm(width, eps=config.layer_norm_eps, bias=kind.norm_bias)
        self.decoder = None if config.tie_word_embeddings else Linear(width, config.vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size)) if kind.decoder_bias else None

    def features(self, x: Tensor) -> Tensor:
        """(..., C) final states -> (..., W): what the decoder maps to the vocabulary."""
        return x if self.dense is None else self.norm(self.dense(x))

    def decode(self, features: Tensor, word_embeddings: Tensor) -> Tensor:
        """(..., W) -> (..., V) logits, on nn/linear.py's kernel for this CPU (as every Linear of the encoder: a
        row's logits then do not depend on how many rows are multiplied with it, which F.linear's do for 1-3 rows)."""
        weight = word_embeddings if self.decoder is None else self.decoder.weight
        return self._kernel(weight)(features)

    def _kernel(self, weight: Tensor) -> Linear:
        """A Linear over the decoder's weight (the word embeddings', shared, when tied) and the head's bias, kept out
        of the state dict and made again when either parameter is replaced (loading assigns new ones)."""
        kernel = self.__dict__.get("_decoder_kernel")
        if kernel is None or kernel.weight is not weight or kernel.bias is not self.bias:
            kernel = Linear(weight.size(1), weight.size(0), bias=False, device="meta")
            kernel.weight = weight if isinstance(weight, nn.Parameter) else nn.Parameter(weight, requires_grad=False)
            kernel.bias = self.bias
            self.__dict__["_decoder_kernel"] = kernel
        return kernel

    def forward(self, x: Tensor, word_embeddings: Tensor) -> Tensor:
        return self.decode(self.features(x), word_embeddings)  # (B, L, V)
