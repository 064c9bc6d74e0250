"""BERT, the family the others derive from (transformers models/bert/modeling_bert.py): absolute
positions, token types, the shared post-LN layers (nn/layers.py), a pooler, and a classification
head on the pooled first token. Its config.json and weight names:
convert/families/bert.py.

Shapes: B batch, L sequence length (a packed batch is one row of T tokens, (1, T)), C hidden size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn
from torch import Tensor

from minialign.convert.families import bert as bert_format
from minialign.models.family import Family
from minialign.nn.capture import record
from minialign.nn.config import Config
from minialign.nn.inputs import sequence_positions



@dataclass(frozen=True)
class BertConfig(Config):
    """BERT's config: the shared fields alone (its config.json: convert/families/bert.py)."""

    format = bert_format.FORMAT


class Embeddings(nn.Module):
    """LayerNorm(word + position + token_type), then dropout (BertEmbeddings); a family without token
    types (`token_types = False`: DistilBERT, MPNet) has no table and ignores token_type_ids."""

    token_types = True

    def __init__(self, config: Config):
        super().__init__()
        self.config = config
        width = self.width(config)
        self.word = nn.Embedding(config.vocab_size, width, padding_idx=config.pad_token_id)
        self.position = nn.Embedding(config.max_position_embeddings, width,
                                     padding_idx=self.position_padding_idx(config))
        self.token_type = nn.Embedding(config.type_vocab_size, width) if self.token_types else None
        self.norm = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)

    @staticmethod
    def width(config: Config) -> int:
        """The tables' and the norm's width (ELECTRA's embedding_size; BERT: hidden_size)."""
        return config.hidden_size

    @staticmethod
    def position_padding_idx(config: Config) -> int | None:
        """The position table's padding row (None: none)."""
        return None

    def position_ids(self, input_ids: Tensor) -> Tensor:
        """(B, L) -> (B, L): 0, 1, ..., L - 1 in every row (BertEmbeddings' position_ids buffer)."""
        return sequence_positions(input_ids)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, position_ids: Tensor) -> Tensor:
        """(B, L) each, or a packed (1, T); the Encoder fills token types and positions once."""
        word, position = self.word(input_ids), self.position(position_ids)
        word = record("word", word)
        position = record("position", position)
        x = word
        if self.token_type is not None:
            token_type = self.token_type(token_type_ids)
            token_type = record("token_type", token_type)
            x = x + token_type
        x = x + position  # (B, L, C), summed in BertEmbeddings' order
        x = record("sum", x)
        x = self.norm(x)
        x = record("norm", x)
        return self.dropout(x)


class Bert(Family):
    config_class = BertConfig
    Embeddings = Embeddings
