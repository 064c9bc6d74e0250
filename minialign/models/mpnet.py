"""MPNet, as RoBERTa but for what differs (transformers models/mpnet/modeling_mpnet.py): no token
types (the embeddings are LayerNorm(word + position), RoBERTa's positions after pad_token_id), and a
T5-style relative-position bias: one learned value per head and bucket of the offset j - i, shared by
every layer (MPNetEncoder.relative_attention_bias), computed once per forward and added to every
layer's scaled scores before the mask (MPNetSelfAttention: scores / sqrt(D) + position_bias + mask).
The layers are BERT's post-LN ones under other names; the MLM head (lm_head) and the classification
head (MPNetClassificationHead: dense -> tanh on the first token) are RoBERTa's. Its config.json and
weight names: convert/families/mpnet.py.

The bias depends on offsets only, never on padding: transformers computes it from 0..L-1 whatever the
mask says, which for right-padded rows is each token's offset inside its sequence; a packed row gives
every pair in one sequence the same offset, so padded and packed agree. How each attention backend
takes it: nn/attention.py Backend (eager and sdpa: materialised into the additive bias; flex: a score_mod).

Shapes: B batch, L sequence length, H heads, C hidden size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn as nn
from torch import Tensor

from minialign.convert.families import mpnet as mpnet_format
from minialign.models.heads import Heads, TokenClassification
from minialign.models.roberta import Roberta, RobertaConfig, RobertaEmbeddings
from minialign.nn.capture import record
from minialign.nn.config import POSITIVE_INT, Config, checked, optional

# MPNetEncoder.compute_position_bias buckets with its defaults, num_buckets=32 and max_distance=128,
# whatever config.relative_attention_num_buckets says: the config's count only sizes the table.
NUM_BUCKETS, MAX_DISTANCE = 32, 128


@dataclass(frozen=True)
class MPNetConfig(RobertaConfig):
    """MPNet's config: RoBERTa's fields and the rows of its relative-position bias table
    (relative_attention_num_buckets; None: NUM_BUCKETS)."""

    format = mpnet_format.FORMAT
    arch: str = "mpnet"
    relative_attention_buckets: int | None = checked(optional(POSITIVE_INT), None)


def relative_position_bucket(offset: Tensor, num_buckets: int = NUM_BUCKETS, max_distance: int = MAX_DISTANCE) -> Tensor:
    """The bucket of each offset j - i (MPNetEncoder.relative_position_bucket, T5's rule): half the
    buckets for keys before the query, half for keys at or after it; inside each half, offsets below
    num_buckets / 4 have a bucket each, larger ones share log-spaced buckets up to max_distance and the
    half's last bucket beyond. As transformers: the log in float32, truncated toward zero (`.long()`,
    not a ceil). The log's argument is clamped to 1 where the offset is 0: transformers takes log(0)
    there, in the branch `where` then discards."""
    n = -offset
    half = num_buckets // 2
    bucket = (n < 0).long() * half
    n = n.abs()
    exact = half // 2
    log_spaced = exact + (torch.log(n.clamp(min=1).float() / exact) / math.log(max_distance / exact)
                          * (half - exact)).long()
    return bucket + torch.where(n < exact, n, log_spaced.clamp(max=half - 1))


class RelativePositionBias(nn.Module):
    """The table of one bias per bucket and head (MPNetEncoder.relative_attention_bias), read once per
    forward as one value per head and offset."""

    def __init__(self, config: Config):
        super().__init__()
        buckets = NUM_BUCKETS if config.relative_attention_buckets is None else config.relative_attention_buckets
        if buckets < NUM_BUCKETS:
            raise ValueError(f"MPNet needs relative_attention_num_buckets >= {NUM_BUCKETS} (its offsets fall in "
                             f"{NUM_BUCKETS} buckets whatever the config says), got {buckets!r}")
        self.table = nn.Embedding(buckets, config.num_heads)

    def forward(self, length: int) -> Tensor:
        """(H, 2L - 1): the bias of each offset j - i = -(L - 1) .. L - 1, for sequences up to L tokens."""
        offsets = torch.arange(1 - length, length, device=self.table.weight.device)
        by_offset = self.table(relative_position_bucket(offsets)).T  # (H, 2L - 1)
        by_offset = record("by_offset", by_offset)
        return by_offset


class MPNetEmbeddings(RobertaEmbeddings):
    """LayerNorm(word + position), then dropout (MPNetEmbeddings): no token types, RoBERTa's positions."""

    token_types = False


class MPNet(Roberta):
    config_class = MPNetConfig
    Embeddings = MPNetEmbeddings
    parts = {"relative_position_bias": RelativePositionBias}

    @classmethod
    def relative_bias(cls, encoder: nn.Module, length: int) -> Tensor:
        """MPNetEncoder.relative_attention_bias: one table of every head, added to every layer's scores (so its
        heads cannot be pruned: Encoder.prune_heads)."""
        return encoder.relative_position_bias(length)

    @classmethod
    def heads(cls, config: Config) -> Heads:
        """RoBERTa's but MPNetForTokenClassification: classifier(dropout(h)), the dropout hidden_dropout (not
        classifier_dropout)."""
        return replace(super().heads(config), token_classification=TokenClassification(dropout="hidden"))
