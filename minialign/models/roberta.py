"""RoBERTa, as BERT but for what differs (transformers models/roberta/modeling_roberta.py, whose
modular_roberta.py derives it from BERT the same way): positions count real tokens from
pad_token_id + 1 (the table reserves those rows: convert/families/roberta.py), the MLM head's
activation is always exact GELU, and the classification head reads the first token through its own
dense layer, so RobertaForSequenceClassification has no pooler.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from minialign.convert.families import roberta as roberta_format
from minialign.models.bert import Bert, BertConfig, Embeddings
from minialign.models.heads import Heads, MaskedLM, SequenceClassification, head_dropout
from minialign.nn.config import Config



@dataclass(frozen=True)
class RobertaConfig(BertConfig):
    """RoBERTa's config: BERT's fields; its format reserves pad_token_id + 1 position rows."""

    format = roberta_format.FORMAT
    arch: str = "roberta"


def roberta_position_ids(input_ids: Tensor, pad_token_id: int) -> Tensor:
    """Positions count real tokens from pad_token_id + 1; pads sit at pad_token_id.
    (modeling_roberta.py create_position_ids_from_input_ids, from fairseq's make_positions)"""
    is_token = input_ids.ne(pad_token_id).int()
    return (torch.cumsum(is_token, dim=1).int() * is_token).long() + pad_token_id  # (B, L)


class RobertaEmbeddings(Embeddings):
    """BERT's embeddings with RoBERTa's positions (RobertaEmbeddings)."""

    @staticmethod
    def position_padding_idx(config: Config) -> int | None:
        return config.pad_token_id

    def position_ids(self, input_ids: Tensor) -> Tensor:
        return roberta_position_ids(input_ids, self.config.pad_token_id)


class Roberta(Bert):
    config_class = RobertaConfig
    Embeddings = RobertaEmbeddings

    @classmethod
    def heads(cls, config: Config) -> Heads:
        """BERT's but two: RobertaClassificationHead, out_proj(dropout(tanh(dense(dropout(h_0))))), no pooler;
        RobertaLMHead's activation, gelu whatever hidden_act says."""
        return replace(super().heads(config), masked_lm=MaskedLM(activation="gelu"),
                       sequence_classification=SequenceClassification(
                           pool="first", dropout_in=head_dropout(config).p, dense_activation="tanh",
                           fuse_activation=False))
