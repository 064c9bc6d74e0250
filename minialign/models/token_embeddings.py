"""The embeddings of the rotary families, which have no position table. WordEmbeddings, the pre-norm decoder-shaped
families' (EuroBERT, Qwen 2 / 3): embed_tokens(ids) alone, no token types, no norm. TokenEmbeddings, the post-LN
families' (GTE, NomicBERT, jina-embeddings-v3): BERT's without a position table, the positions being rotary (applied in attention, nn/rotary.py): dropout(LayerNorm(word + token_type)), no token
types where the config has none (type_vocab_size 0: GTE's multilingual models). transformers models/gte
GteEmbeddings, models/nomic_bert NomicBertEmbeddings, models/jina_embeddings_v3 JinaEmbeddingsV3Embeddings: the same
forward in each.

Shapes: B batch, L tokens (a packed row: (1, T)), C hidden size.
"""

from __future__ import annotations

import torch.nn as nn
from torch import Tensor

from minialign.nn.capture import record
from minialign.nn.config import Config
from minialign.nn.inputs import sequence_positions


class TokenEmbeddings(nn.Module):
    """dropout(LayerNorm(word + token_type)): no position table; with type_vocab_size 0 no token types
    (token_type_ids ignored)."""

    def __init__(self, config: Config):
        super().__init__()
        self.word = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.token_type = nn.Embedding(config.type_vocab_size, config.hidden_size) if config.type_vocab_size else None
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def position_ids(self, input_ids: Tensor) -> Tensor:
        """(B, L): 0, 1, ..., L - 1 in every row (each model's forward), read by the rotary tables."""
        return sequence_positions(input_ids)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, position_ids: Tensor) -> Tensor:
        """(B, L) each, or a packed (1, T); positions are not added here (rotary: applied in attention)."""
        x = self.word(input_ids)
        x = record("word", x)
        if self.token_type is not None:
            token_type = self.token_type(token_type_ids)
            token_type = record("token_type", token_type)
            x = x + token_type  # (B, L, C)
        x = record("sum", x)
        x = self.norm(x)
        x = record("norm", x)
        return self.dropout(x)


class WordEmbeddings(nn.Module):
    """embed_tokens(ids) alone (EuroBertModel.embed_tokens, Qwen2Model.embed_tokens): no positions, no token types,
    no norm; the positions are rotary (applied in attention)."""

    def __init__(self, config: Config):
        super().__init__()
        self.word = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)

    def position_ids(self, input_ids: Tensor) -> Tensor:
        """(B, L): 0, 1, ..., L - 1 in every row (each model's forward without a cache), read by the rotary tables."""
        return sequence_positions(input_ids)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, position_ids: Tensor) -> Tensor:
        word = self.word(input_ids)
        word = record("word", word)
        return record("sum", word)  # the one part there is: what layer 0 reads
