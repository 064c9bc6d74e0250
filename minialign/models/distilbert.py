"""DistilBERT, as BERT but for what differs (transformers models/distilbert/modeling_distilbert.py):
no token types (the embeddings are LayerNorm(word + position); token_type_ids a tokenizer returns are
ignored), optionally a fixed sinusoidal position table (config.json `sinusoidal_pos_embds`), no
dropout on the attention output before its residual, no pooler, and a classification head of its own
on the first token: classifier(dropout(relu(pre_classifier(h_0)))). LayerNorm eps is 1e-12 in every
norm (hard-coded there; Config's default). Its config.json and weight names:
convert/families/distilbert.py.

Shapes: B batch, L sequence length (a packed batch is one row of T tokens, (1, T)), C hidden size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from minialign.convert.families import distilbert as distilbert_format
from minialign.models.bert import Bert, Embeddings
from minialign.models.heads import Heads, QuestionAnswering, SequenceClassification, TokenClassification
from minialign.nn.config import BOOL, Config, checked
from minialign.nn.layers import EncoderLayer


@dataclass(frozen=True)
class DistilBertConfig(Config):
    """DistilBERT's config: the shared fields and a fixed sinusoidal position table (sinusoidal_pos_embds)."""

    format = distilbert_format.FORMAT
    arch: str = "distilbert"
    sinusoidal_positions: bool = checked(BOOL, False)


def sinusoidal_table(num_positions: int, dim: int) -> Tensor:
    """(num_positions, dim): sin at even columns, cos at odd, angle pos / 10000^(2 (j // 2) / dim),
    computed in float64 and rounded to float32 (modeling_distilbert.py _create_sinusoidal_embeddings)."""
    table = torch.empty(num_positions, dim, dtype=torch.float32)
    if table.is_meta:  # a model built for a checkpoint's values (nn.init.shapes_only): nothing to compute
        return table
    pos = torch.arange(num_positions, dtype=torch.float64)[:, None]
    j = torch.arange(dim, dtype=torch.float64)
    angle = pos / torch.pow(10000.0, 2 * torch.div(j, 2, rounding_mode="floor") / dim)  # (P, dim)
    table[:, 0::2] = torch.sin(angle[:, 0::2]).float()
    table[:, 1::2] = torch.cos(angle[:, 1::2]).float()
    return table


class SinusoidalPositions(nn.Module):
    """The fixed position table, as a buffer named `weight` (transformers saves it under
    position_embeddings.weight; a buffer is not trained, and BERT's initialisation leaves it alone)."""

    def __init__(self, num_positions: int, dim: int):
        super().__init__()
        self.register_buffer("weight", sinusoidal_table(num_positions, dim))

    def forward(self, position_ids: Tensor) -> Tensor:
        return F.embedding(position_ids, self.weight)


class DistilBertEmbeddings(Embeddings):
    """LayerNorm(word + position), then dropout (modeling_distilbert.py Embeddings): BERT's without
    the token-type table; positions 0, 1, ..., L - 1 as BERT's."""

    token_types = False

    def __init__(self, config: Config):
        super().__init__(config)
        if config.sinusoidal_positions:
            self.position = SinusoidalPositions(config.max_position_embeddings, config.hidden_size)


class DistilBertLayer(EncoderLayer):
    """TransformerBlock: BERT's post-LN layer (the same parts and names) without the dropout on the
    attention output: x = LN(x + attn(x)); x = LN(x + drop(ffn(x)))."""

    def __init__(self, config: Config):
        super().__init__(config)
        self.attention_dropout = nn.Identity()


class DistilBert(Bert):
    config_class = DistilBertConfig
    Embeddings = DistilBertEmbeddings
    pooler = False

    @classmethod
    def layers(cls, config: Config) -> list[nn.Module]:
        return [DistilBertLayer(config) for _ in range(config.num_layers)]

    @classmethod
    def heads(cls, config: Config) -> Heads:
        """DistilBertForSequenceClassification on the first token: classifier(dropout(relu(pre_classifier(h_0))))
        (dropout seq_classif_dropout), no pooler; DistilBertForTokenClassification: classifier(dropout(h)), the
        dropout hidden_dropout (not classifier_dropout); DistilBertForQuestionAnswering: qa_outputs(dropout(h)), its
        dropout the config's qa_dropout, which minialign does not read (hidden_dropout stands in: both default to
        0.1; eval runs none); the MLM head BERT's (vocab_transform, vocab_layer_norm, vocab_projector)."""
        return Heads(sequence_classification=SequenceClassification(pool="first", dense_activation="relu"),
                     token_classification=TokenClassification(dropout="hidden"),
                     question_answering=QuestionAnswering(dropout="hidden"))
