"""T5's encoder (transformers models/t5/modeling_t5.py T5EncoderModel, the encoder stack of T5ForConditionalGeneration
and T5ForTokenClassification; flan-t5's, HHEM-2.1-open's foundation): every difference from BERT declared here.

  embeddings   shared(ids) alone, then dropout (T5Stack.forward: embed_tokens is `shared`): no position table, no
               token types, no norm, no scale; no padding row (HHEM's template starts with a real <pad> token)
  positions    a relative-position bias: one learned value per head and bucket of the offset j - i
               (T5Attention.compute_bias, _relative_position_bucket: bidirectional in the encoder), the table in
               layer 0's attention alone (has_relative_attention_bias=bool(i == 0)) and its bias handed to every
               later layer (T5Stack.forward's position_bias): computed once per forward (T5.relative_bias) and added
               to every layer's scores before the mask, on every backend (nn/attention.py AttentionInputs.relative)
  attention    q / k / v / o without biases, heads d_kv wide whatever d_model / num_heads is, scores NOT scaled by
               1 / sqrt(D) (T5Attention.scaling = 1.0: nn/score_functions.py Dot)
  layers       pre-norm: x = x + dropout(attn(layer_norm(x))); x = x + dropout(ff(layer_norm(x))) (T5LayerSelfAttention,
               T5LayerFF), float16 states clamped after each sublayer where one overflowed (T5Block.forward)
  norms        T5LayerNorm: weight * x / sqrt(mean(x^2) + eps), the mean in float32, no bias (nn/layers.py RMSNorm)
  mlp          feed_forward_proj "relu": wo(relu(wi(x))) (T5DenseActDense); "gated-{act}": wo(act(wi_0(x)) * wi_1(x))
               (T5DenseGatedActDense; "gated-gelu" runs gelu_new, flan-t5's), no biases. The relu form has no dropout
               between wi and wo here (transformers' has, in training only)
  final norm   final_layer_norm after the stack, then dropout (T5Stack.forward): the last hidden state
  heads        T5ForTokenClassification's (dropout(classifier_dropout) -> classifier on every token) is read;
               T5ForSequenceClassification and T5ForQuestionAnswering run the decoder and are not ported (their
               names are refused); a classifier built here reads the first token. No masked-LM head (T5's lm_head
               is the decoder's, dropped on loading).

The decoder's first step (MiniCheck-Flan-T5's score, at the end of this file): T5ForConditionalGeneration's decoder
run from its start token for one position, over the encoder's last hidden state, and lm_head's rows of a few tokens
(T5DecoderStep; T5LabelLogits the two together). At one position the causal self-attention has one key, itself,
so no bias table is read; the cross-attention has none. `relative_position_bucket(..., bidirectional=False)` is the
decoder's causal rule, for a step past the first. mt5 / umt5 are other model_types and refused (umt5 has a table
per layer).

Padded and packed agree: the bias depends on j - i inside one sequence. Its config.json and weight names:
convert/families/t5.py. Shapes: B batch, L sequence length (a packed batch is one row of T tokens, (1, T)),
C hidden size (d_model), H heads, D head dim (d_kv), I intermediate size (d_ff).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from minialign.convert.families import t5 as t5_format
from minialign.models.family import Family
from minialign.models.heads import Heads, MaskedLM, SequenceClassification, TokenClassification
from minialign.nn.activations import ELEMENTWISE
from minialign.nn.attention import PreparedMask, two_query_rows
from minialign.nn.capture import record
from minialign.nn.config import (POSITIVE_INT, POSITIVE_NUMBER, PROBABILITY, UNBOUNDED_POSITIONS, Config, Rule, checked,
                                 int_at_least, optional)
from minialign.nn.inputs import sequence_positions
from minialign.nn.layers import PRECISION_LAYERS, FeedForward, GatedFeedForward, RMSNorm, SelfAttention
from minialign.nn.layout import HostBatch, bucket_length
from minialign.nn.linear import Linear
from minialign.nn.score_functions import Dot


def feed_forward_activation(proj: str) -> tuple[bool, str]:
    """(gated, activation) of a feed_forward_proj (T5Config.__post_init__: "gated-{act}" or "{act}", "gated-gelu"
    running gelu_new); a ValueError naming it where the form or the activation is not one minialign runs."""
    parts = proj.split("-") if isinstance(proj, str) else []
    gated = len(parts) == 2 and parts[0] == "gated"
    if not (len(parts) == 1 or gated) or parts[-1] not in ELEMENTWISE:
        raise ValueError(f"Config.feed_forward_proj must be '{{act}}' or 'gated-{{act}}' with act one of "
                         f"{tuple(ELEMENTWISE)}, got {proj!r}")
    return gated, "gelu_new" if proj == "gated-gelu" else parts[-1]


FEED_FORWARD_PROJ = Rule("'{act}' or 'gated-{act}'", lambda v: isinstance(v, str) and bool(v))


@dataclass(frozen=True)
class T5Config(Config):
    """T5's config (configuration_t5.py T5Config; config.json: convert/families/t5.py). head_dim: d_kv, each head's
    width, its own (H * D need not be d_model); relative_attention_buckets / relative_attention_max_distance: the
    bias table's rows and the offset from which every bucket is the last; feed_forward_proj: "relu", "gated-gelu"
    or "[gated-]{act}", which sets `activation`; hidden_dropout: dropout_rate, which attention_dropout follows
    unless given. No position table (max_seq_len unbounded), no token types."""

    format = t5_format.FORMAT
    arch: str = "t5"
    type_vocab_size: int = 0
    max_position_embeddings: int = checked(POSITIVE_INT, UNBOUNDED_POSITIONS)
    layer_norm_eps: float = checked(POSITIVE_NUMBER, 1e-6)
    hidden_dropout: float = checked(PROBABILITY, 0.1)
    attention_dropout: float | None = checked(optional(PROBABILITY), None)
    head_dim: int = checked(POSITIVE_INT, 64)
    relative_attention_buckets: int = checked(int_at_least(4, "an int >= 4 (two halves, each with exact buckets)"),
                                              32)
    relative_attention_max_distance: int = checked(POSITIVE_INT, 128)
    feed_forward_proj: str = checked(FEED_FORWARD_PROJ, "relu")

    def check(self) -> None:
        _, act = feed_forward_activation(self.feed_forward_proj)
        object.__setattr__(self, "activation", act)  # the feed-forward's, from feed_forward_proj alone
        if self.attention_dropout is None:  # T5Attention's dropout is dropout_rate
            object.__setattr__(self, "attention_dropout", self.hidden_dropout)
        if self.score_fn != "scaled_dot":
            raise ValueError(f"Config.score_fn {self.score_fn!r}: T5 runs its own unscaled dot product "
                             f"(T5Attention.scaling = 1.0); leave score_fn at 'scaled_dot'")
        if self.relative_attention_max_distance <= self.relative_attention_buckets // 4:
            raise ValueError(f"Config.relative_attention_max_distance ({self.relative_attention_max_distance}) must "
                             f"exceed the exact offsets of a half, relative_attention_buckets // 4 "
                             f"({self.relative_attention_buckets // 4})")

    @property
    def gated(self) -> bool:
        """Whether the feed-forward is gated (T5Config.is_gated_act)."""
        return feed_forward_activation(self.feed_forward_proj)[0]


def relative_position_bucket(offset: Tensor, num_buckets: int, max_distance: int, *,
                             bidirectional: bool = True) -> Tensor:
    """The bucket of each offset j - i (T5Attention._relative_position_bucket). Bidirectional (the encoder): half the
    buckets for keys after the query, half for keys at or before it; causal (a decoder's self-attention): every
    bucket for keys at or before it (a later key's offset counts as 0). Inside a half, offsets below num_buckets / 4
    (a quarter: half of a half) have a bucket each, larger ones share log-spaced buckets up to max_distance and the
    last bucket beyond. As transformers: the log in float32, truncated toward zero (`.to(torch.long)`). The log's
    argument is clamped to 1 where the offset is 0: transformers takes log(0) there, in the branch `where` discards."""
    buckets = torch.zeros_like(offset)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (offset > 0).long() * num_buckets
        n = offset.abs()
    else:
        n = -offset.clamp(max=0)
    exact = num_buckets // 2
    log_spaced = exact + (torch.log(n.clamp(min=1).float() / exact) / math.log(max_distance / exact)
                          * (num_buckets - exact)).long()
    return buckets + torch.where(n < exact, n, log_spaced.clamp(max=num_buckets - 1))


class RelativePositionBias(nn.Module):
    """One bias per bucket and head (layer 0's T5Attention.relative_attention_bias), read once per forward as one
    value per head and offset. `bidirectional`: the encoder's buckets (False: a decoder's causal ones)."""

    def __init__(self, config: Config, *, bidirectional: bool = True):
        super().__init__()
        self.table = nn.Embedding(config.relative_attention_buckets, config.num_heads)
        self.max_distance, self.bidirectional = config.relative_attention_max_distance, bidirectional

    def forward(self, length: int) -> Tensor:
        """(H, 2L - 1): the bias of each offset j - i = -(L - 1) .. L - 1, for sequences up to L tokens."""
        offsets = torch.arange(1 - length, length, device=self.table.weight.device)
        buckets = relative_position_bucket(offsets, self.table.num_embeddings, self.max_distance,
                                           bidirectional=self.bidirectional)
        by_offset = self.table(buckets).T  # (H, 2L - 1)
        return record("by_offset", by_offset)


def norm(config: Config) -> RMSNorm:
    """Every norm: T5LayerNorm, eps layer_norm_epsilon."""
    return RMSNorm(config.hidden_size, eps=config.layer_norm_eps)


def feed_forward(config: Config) -> FeedForward:
    """T5DenseGatedActDense: wo(dropout(act(wi_0(x)) * wi_1(x))); T5DenseActDense: wo(act(wi(x))). No biases."""
    if config.gated:
        return GatedFeedForward(config, bias=False, activated="first", split_names=True, dropout=config.hidden_dropout)
    return FeedForward(config, bias=False)


class T5Attention(SelfAttention):
    """T5Attention: q / k / v / o without biases, H heads D wide, the unscaled dot product (Dot)."""

    def __init__(self, config: Config):
        super().__init__(config, bias=False)

    def own_score(self, config: Config) -> nn.Module:
        return Dot()


class T5Embeddings(nn.Module):
    """dropout(shared(ids)) (T5Stack.forward): no positions, no token types, no norm, no padding row."""

    def __init__(self, config: Config):
        super().__init__()
        self.word = nn.Embedding(config.vocab_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def position_ids(self, input_ids: Tensor) -> Tensor:
        """(B, L): 0, 1, ..., L - 1 (read by nothing: the positions are relative, by offset)."""
        return sequence_positions(input_ids)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, position_ids: Tensor) -> Tensor:
        word = self.word(input_ids)
        word = record("word", word)
        x = record("sum", word)  # the one part there is: what layer 0 reads
        return self.dropout(x)


def clamp_overflow(x: Tensor) -> Tensor:
    """float16 states kept finite (T5Block.forward, after each sublayer): clamped to +-(max - 1000) where any value
    is infinite, else to +-max (a no-op on finite values). Other dtypes as they are."""
    if x.dtype != torch.float16:
        return x
    top = torch.finfo(torch.float16).max
    bound = torch.where(torch.isinf(x).any(), top - 1000, top)
    return torch.clamp(x, min=-bound, max=bound)


class T5Layer(nn.Module):
    """x = x + dropout(attn(attention_norm(x))); x = x + dropout(ffn(ffn_norm(x))) (T5Block of T5LayerSelfAttention
    and T5LayerFF), float16 overflow clamped after each. Every key is attended (`window` None)."""

    precision_layers = PRECISION_LAYERS  # EncoderLayer's: the same names, the same reasons
    window: int | None = None

    def __init__(self, config: Config):
        super().__init__()
        self.attention_norm = norm(config)
        self.attention = T5Attention(config)
        self.ffn_norm = norm(config)
        self.ffn = feed_forward(config)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, x: Tensor, mask: PreparedMask,
                queries: Callable[[Tensor], Tensor] | None = None) -> tuple[Tensor, Tensor | None]:
        """x (B, L, C) -> the new states of the `queries` tokens (default: all) (B, Lq, C), and the attention
        probabilities (B, H, Lq, L) when the backend gives them."""
        x = record("input", x)
        normed = self.attention_norm(x)
        normed = record("attention_norm", normed)  # pre-norm: what the attention reads
        a, probs = self.attention(normed, mask, queries)
        if queries is not None:
            x = queries(x)
        x = clamp_overflow(x + self.dropout(a))
        x = record("attention_residual", x)
        normed = self.ffn_norm(x)
        normed = record("ffn_norm", normed)  # pre-norm: what the feed-forward reads
        f = self.ffn(normed)
        f = record("ffn_output", f)
        x = clamp_overflow(x + self.dropout(f))
        x = record("ffn_residual", x)
        x = record("output", x)  # pre-norm: the residual is the layer's output (capture's names, as EncoderLayer's)
        return x, probs


class T5(Family):
    config_class = T5Config
    Embeddings = T5Embeddings
    parts = {"relative_position_bias": RelativePositionBias, "final_norm": norm}
    pooler = False

    @classmethod
    def layers(cls, config: Config) -> list[nn.Module]:
        return [T5Layer(config) for _ in range(config.num_layers)]

    @classmethod
    def relative_bias(cls, encoder: nn.Module, length: int) -> Tensor:
        """Layer 0's table, its bias handed to every layer (T5Stack.forward's position_bias); so its heads cannot be
        pruned (Encoder.prune_heads)."""
        return encoder.relative_position_bias(length)

    @classmethod
    def finish(cls, encoder: nn.Module, x: Tensor) -> Tensor:
        x = encoder.final_norm(x)
        x = record("final_norm", x)  # the last hidden state (T5Stack.final_layer_norm)
        return F.dropout(x, encoder.config.hidden_dropout, encoder.training)  # T5Stack's dropout after it

    @classmethod
    def heads(cls, config: Config) -> Heads:
        """T5ForTokenClassification's token head (classifier(dropout(h)), the dropout classifier_dropout); not
        transformers' for the rest (module docstring): a classifier on the first token (no dense), a decoder over the
        final states, no question answering."""
        return Heads(sequence_classification=SequenceClassification(pool="first", record="pool"),
                     masked_lm=MaskedLM(transform=False, decoder_bias=False),
                     token_classification=TokenClassification(dropout="classifier"),
                     question_answering="t5 has no question-answering head in minialign (transformers' "
                                        "T5ForQuestionAnswering runs the decoder)")


# -- The decoder's first position (MiniCheck-Flan-T5's score: T5ForConditionalGeneration run for one decoder step) --


class T5CrossAttention(nn.Module):
    """T5LayerCrossAttention's EncDecAttention for one query per sequence: q from the decoder's state, k / v from the
    encoder's last hidden state, no biases, no position bias (has_relative_attention_bias=False: its position_bias is
    zeros plus the encoder's mask), the unscaled dot product (T5Attention.scaling 1.0), softmax over the sequence's
    real tokens. Run as the encoder's packed attention is (nn/layout.py, length buckets): one call per bucket of
    sequences, each padded to bucket_length of its own length, its query row given twice (nn/attention.py
    two_query_rows), so a sequence's scores are the same bits whatever else its batch holds."""

    def __init__(self, config: Config):
        super().__init__()
        inner = config.num_heads * config.head_dim
        self.heads, self.head_dim = config.num_heads, config.head_dim
        self.query = Linear(config.hidden_size, inner, bias=False)
        self.key = Linear(config.hidden_size, inner, bias=False)
        self.value = Linear(config.hidden_size, inner, bias=False)
        self.output = Linear(inner, config.hidden_size, bias=False)

    def forward(self, x: Tensor, memory: Tensor, lengths: Sequence[int]) -> Tensor:
        """x (B, 1, C); memory (B, L, C), right-padded, sequence i's real tokens its first lengths[i] -> (B, 1, C)."""
        B, L, C = memory.shape
        H, D = self.heads, self.head_dim
        q, single = two_query_rows(self.query(x).view(B, 1, H, D).transpose(1, 2))  # (B, H, 1|2, D)
        groups: dict[int, list[int]] = {}
        for i, n in enumerate(lengths):
            groups.setdefault(bucket_length(n), []).append(i)
        span = max(groups)
        if span > L:  # a bucket past the batch's length: zero keys, masked
            memory = F.pad(memory, (0, 0, 0, span - L))
        out = q.new_empty(B, H, q.size(2), D)
        for length, rows in groups.items():
            index = torch.tensor(rows, device=memory.device)
            own = torch.tensor([lengths[i] for i in rows], device=memory.device)
            keep = (torch.arange(length, device=memory.device) < own[:, None])[:, None, None, :]  # (S, 1, 1, length)
            states = memory.index_select(0, index)[:, :length]  # (S, length, C)
            k, v = (proj(states).view(len(rows), length, H, D).transpose(1, 2) for proj in (self.key, self.value))
            out[index] = F.scaled_dot_product_attention(q.index_select(0, index), k, v, attn_mask=keep, scale=1.0)
        out = out[..., :1, :] if single else out
        return self.output(out.transpose(1, 2).reshape(B, 1, H * D))


class T5DecoderLayer(nn.Module):
    """T5Block of the decoder (T5LayerSelfAttention, T5LayerCrossAttention, T5LayerFF), pre-norm, at the first
    position alone: its self-attention has one key, itself, whose softmax weight is 1 whatever its score and causal
    bias, so the sublayer is output(value(norm(x))) (q, k and the bias table are not read); float16 overflow clamped
    after each sublayer (T5Block.forward)."""

    def __init__(self, config: Config):
        super().__init__()
        inner = config.num_heads * config.head_dim
        self.self_attention_norm = norm(config)
        self.self_value = Linear(config.hidden_size, inner, bias=False)
        self.self_output = Linear(inner, config.hidden_size, bias=False)
        self.cross_attention_norm = norm(config)
        self.cross_attention = T5CrossAttention(config)
        self.ffn_norm = norm(config)
        self.ffn = feed_forward(config)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, x: Tensor, memory: Tensor, lengths: Sequence[int]) -> Tensor:
        """x (B, 1, C): the decoder's state at its first position; memory (B, L, C): the encoder's last hidden state,
        sequence i's real tokens its first lengths[i]."""
        x = clamp_overflow(x + self.dropout(self.self_output(self.self_value(self.self_attention_norm(x)))))
        x = clamp_overflow(x + self.dropout(self.cross_attention(self.cross_attention_norm(x), memory, lengths)))
        return clamp_overflow(x + self.dropout(self.ffn(self.ffn_norm(x))))


class T5DecoderStep(nn.Module):
    """T5ForConditionalGeneration's decoder for one step from its start token, and lm_head's rows of some tokens
    alone: the logits of those tokens at the first position (what MiniCheck-Flan-T5's score reads). `start`: the
    start token's embedding (shared(decoder_start_token_id), then dropout: T5Stack.forward); the decoder layers;
    final_layer_norm and dropout; the state scaled by d_model ** -0.5 where the config says so (`scale`:
    convert/families/t5.py decoder_step_config); `label_rows` (N, C): lm_head's rows of the N tokens. Its weights'
    names: convert/families/t5.py DECODER_STEP."""

    def __init__(self, config: Config, *, num_layers: int, labels: int, scale: bool):
        super().__init__()
        self.start = nn.Parameter(torch.zeros(config.hidden_size))
        self.layers = nn.ModuleList(T5DecoderLayer(config) for _ in range(num_layers))
        self.final_norm = norm(config)
        self.label_rows = Linear(config.hidden_size, labels, bias=False)
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.scale = config.hidden_size ** -0.5 if scale else None

    @classmethod
    def from_tensors(cls, config: Config, tensors: dict[str, Tensor], *, shared: Tensor, start_id: int,
                     label_ids: Sequence[int], scale: bool) -> T5DecoderStep:
        """The step from the decoder's tensors under DECODER_STEP's names (layers.{i}.*, final_norm, lm_head where the
        file has one of its own, else `shared`: transformers ties them) and the shared embedding; strict (a missing
        or unexpected name is an error naming it)."""
        if not 0 <= start_id < shared.size(0) or not all(0 <= i < shared.size(0) for i in label_ids):
            raise ValueError(f"token ids {start_id}, {list(label_ids)} must be within the vocabulary "
                             f"({shared.size(0)})")
        tensors = dict(tensors)
        lm_head = tensors.pop("lm_head.weight", shared)
        layers = {int(name.split(".")[1]) for name in tensors if name.startswith("layers.")}
        step = cls(config, num_layers=len(layers), labels=len(label_ids), scale=scale)
        state = {**tensors, "start": shared[start_id], "label_rows.weight": lm_head[list(label_ids)]}
        step.load_state_dict({k: v.to(shared.dtype) for k, v in state.items()}, strict=True)
        return step.to(shared.device)

    def forward(self, memory: Tensor, lengths: Sequence[int]) -> Tensor:
        """memory (B, L, C): the encoder's last hidden state, right-padded, sequence i's real tokens its first
        lengths[i] -> (B, N): the label tokens' logits at the decoder's first position."""
        B = memory.size(0)
        x = self.dropout(self.start.to(memory.dtype).expand(B, 1, -1))  # (B, 1, C)
        for layer in self.layers:
            x = layer(x, memory, lengths)
        x = self.dropout(self.final_norm(x))
        if self.scale is not None:
            x = x * self.scale  # T5ForConditionalGeneration.forward: scale_decoder_outputs
        return self.label_rows(x)[:, 0]


class T5LabelLogits(nn.Module):
    """The encoder and the decoder's first step: (B, N) logits of the step's label tokens for each sequence
    (T5ForConditionalGeneration(input_ids, attention_mask, decoder_input_ids=[[start]]).logits[:, 0, label_ids])."""

    def __init__(self, encoder: nn.Module, decoder: T5DecoderStep):
        super().__init__()
        self.encoder, self.decoder, self.config = encoder, decoder, encoder.config

    @property
    def precision(self):
        """The encoder's (loading's dtype): the step runs in the weights' dtype."""
        return self.encoder.precision

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                position_ids: Tensor | None = None, *, unpad: bool = False, host: HostBatch | None = None) -> Tensor:
        """input_ids, attention_mask (B, L), right-padded -> (B, N) float32 logits. unpad, host: Encoder.forward's."""
        memory = self.encoder(input_ids, attention_mask, unpad=unpad, host=host).last_hidden_state
        if host is not None:
            lengths = list(host.lengths)
        elif attention_mask is not None:
            lengths = attention_mask.sum(dim=1).tolist()  # one host sync
        else:
            lengths = [input_ids.size(1)] * input_ids.size(0)
        return self.decoder(memory, lengths).float()
