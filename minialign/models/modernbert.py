"""ModernBERT (transformers models/modernbert/modeling_modernbert.py; a second reading: candle
candle-transformers models/modernbert.rs): BERT's encoder rebuilt, every difference declared here.

  embeddings   LayerNorm(tok_embeddings(ids)), then dropout: no position table, no token types
  positions    rotary (nn/rotary.py) on queries and keys, theta rope_theta on global layers and
               local_rope_theta on local ones (ModernBertRotaryEmbedding, one table per layer type)
  layers       pre-LN: x = x + Wo(attn(attn_norm(x))); x = x + mlp(mlp_norm(x)) (ModernBertEncoderLayer),
               attn_norm an Identity on layer 0; the projections' biases (attention_bias, mlp_bias) and
               the norms' (norm_bias) as the config says
  mlp          GeGLU: Wi -> (input, gate), Wo(drop(act(input) * gate)) (ModernBertMLP)
  windows      layer i is global when i % global_attn_every_n_layers == 0, else local: its queries see
               keys with |i - j| <= local_attention // 2 (masking_utils.py sliding_window_bidirectional_overlay,
               config.sliding_window), together with the padding mask; the Encoder prepares one mask per
               window (the layer's `window`), each backend takes it as nn/attention.py Backend says
  final norm   after the stack (ModernBertModel.final_norm), the last hidden state included
  classifier   ModernBertForSequenceClassification: pool (the first token, or the mean over real tokens:
               classifier_pooling "cls" | "mean"), head = norm(act(dense(.))), dropout, classifier

Padded and packed agree: a packed row gives each token its position inside its sequence (rotary) and
the window is an offset inside one sequence. Its config.json and weight names:
convert/families/modernbert.py. The masked-LM head (ModernBertForMaskedLM: `head`, then `decoder`) shares its
dense and norm with the classifier's (ModernBertPredictionHead, `head.*` in both classes), so among a
checkpoint's names they are the classifier's and the MaskedLMModel reads them there (ModernBert.masked_lm).

Shapes: B batch, L sequence length (a packed batch is one row of T tokens, (1, T)), C hidden size,
I intermediate size, D head dim.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch.nn as nn
from torch import Tensor

from minialign.convert.families import modernbert as modernbert_format
from minialign.models.family import Family
from minialign.models.heads import Heads, MaskedLM, QuestionAnswering, SequenceClassification, TokenClassification
from minialign.nn.attention import PreparedMask
from minialign.nn.capture import record
from minialign.nn.config import (ACTIVATION, BOOL, POSITIVE_INT, POSITIVE_NUMBER, PROBABILITY, Config, checked,
                                 int_at_least, one_of, optional)
from minialign.nn.inputs import ForwardInputs, sequence_positions
from minialign.nn.layers import PRECISION_LAYERS, GatedFeedForward, SelfAttention
from minialign.nn.rotary import rotary_tables


CLASSIFIER_POOLING = ("cls", "mean")  # what a classifier reads: the first token, or the mean of real ones


@dataclass(frozen=True)
class ModernBertConfig(Config):
    """ModernBERT's config (configuration_modernbert.py; config.json: convert/families/modernbert.py).
    rope_theta: the rotary base of the global layers (None: unset, refused when the layers are built);
    local_rope_theta that of the local layers (None: rope_theta). local_attention: a local layer's whole
    window, keys with |i - j| <= local_attention // 2 (None: every layer global); every layer whose index
    % global_attn_every_n_layers != 0 is local. Which Linear / LayerNorm layers carry a bias
    (attention_bias, mlp_bias, norm_bias, classifier_bias: its prediction head's dense layer; decoder_bias: the
    masked-LM decoder's), the MLP's
    dropout (None: hidden_dropout), the prediction head's activation (None: activation) and what a
    classifier pools: "cls" (the first token) or "mean" (the mean over real tokens)."""

    format = modernbert_format.FORMAT
    arch: str = "modernbert"
    rope_theta: float | None = checked(optional(POSITIVE_NUMBER), None)
    local_rope_theta: float | None = checked(optional(POSITIVE_NUMBER), None)
    local_attention: int | None = checked(optional(int_at_least(2, "an int >= 2 (a window of |i - j| <= "
                                                                     "local_attention // 2)")), None)
    global_attn_every_n_layers: int = checked(POSITIVE_INT, 1)
    attention_bias: bool = checked(BOOL, True)
    mlp_bias: bool = checked(BOOL, True)
    norm_bias: bool = checked(BOOL, True)
    classifier_bias: bool = checked(BOOL, True)
    decoder_bias: bool = checked(BOOL, True)
    mlp_dropout: float | None = checked(optional(PROBABILITY), None)
    classifier_activation: str | None = checked(optional(ACTIVATION), None)
    classifier_pooling: str = checked(one_of(CLASSIFIER_POOLING), "cls")


def norm(config: Config) -> nn.LayerNorm:
    """ModernBERT's every LayerNorm: norm_eps, a bias only with norm_bias."""
    return nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps, bias=config.norm_bias)


def is_local(config: Config, index: int) -> bool:
    """Layer `index` attends a window (configuration_modernbert.py layer_types: sliding_attention iff
    index % global_attn_every_n_layers != 0); with no local_attention every layer is global."""
    return config.local_attention is not None and index % config.global_attn_every_n_layers != 0


def theta(config: Config, index: int) -> float:
    """The rotary base of layer `index`: local_rope_theta on local layers, rope_theta on global ones."""
    if is_local(config, index) and config.local_rope_theta is not None:
        return float(config.local_rope_theta)
    return float(config.rope_theta)


class ModernBertEmbeddings(nn.Module):
    """dropout(LayerNorm(tok_embeddings(ids))) (ModernBertEmbeddings): no positions, no token types."""

    def __init__(self, config: Config):
        super().__init__()
        self.word = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.norm = norm(config)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def position_ids(self, input_ids: Tensor) -> Tensor:
        """(B, L): 0, 1, ..., L - 1 in every row (ModernBertModel.forward), read by the rotary tables."""
        return sequence_positions(input_ids)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, position_ids: Tensor) -> Tensor:
        """Token types and positions are not added here (rotary positions are applied in attention)."""
        word = self.word(input_ids)
        word = record("word", word)
        word = record("sum", word)  # the one part there is (capture's embeddings.sum: what the norm reads)
        x = self.norm(word)
        x = record("norm", x)
        return self.dropout(x)


class ModernBertLayer(nn.Module):
    """Pre-LN: x = x + attn(attn_norm(x)); x = x + mlp(mlp_norm(x)) (ModernBertEncoderLayer); attn_norm is an
    Identity on layer 0 (the embeddings' norm precedes it). Its rotary table is the one of its theta; a local
    layer's queries see the keys within its window."""

    precision_layers = PRECISION_LAYERS  # EncoderLayer's: the same names, the same reasons

    def __init__(self, config: Config, index: int):
        super().__init__()
        self.theta = theta(config, index)
        self.window = config.local_attention // 2 if is_local(config, index) else None  # keys with |i - j| <= window
        self.attention_norm = nn.Identity() if index == 0 else norm(config)
        self.attention = SelfAttention(config, bias=config.attention_bias, fused_names=True)
        self.attention_dropout = nn.Dropout(config.attention_dropout)  # ModernBertAttention.out_drop
        self.ffn_norm = norm(config)
        # GeGLU (ModernBertMLP): Wi -> (input, gate), Wo(drop(act(input) * gate)): the activated half first
        self.ffn = GatedFeedForward(config, bias=config.mlp_bias, activated="first",
                                    dropout=config.hidden_dropout if config.mlp_dropout is None else config.mlp_dropout)

    def forward(self, x: Tensor, mask: PreparedMask, queries: Callable[[Tensor], Tensor] | None = None, *,
                rotary: dict[float, tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor | None]:
        """x (B, L, C) -> the new states of the `queries` tokens (default: all) (B, Lq, C), and the
        attention probabilities (B, H, Lq, L) when the backend gives them. rotary: (cos, sin) by theta."""
        x = record("input", x)
        normed = self.attention_norm(x)
        normed = record("attention_norm", normed)  # pre-LN: what the attention reads (layer 0: the input itself)
        a, probs = self.attention(normed, mask, queries, rotary=rotary[self.theta])
        if queries is not None:
            x = queries(x)
        x = x + self.attention_dropout(a)
        x = record("attention_residual", x)
        normed = self.ffn_norm(x)
        normed = record("ffn_norm", normed)  # pre-LN: what the feed-forward reads
        f = self.ffn(normed)
        f = record("ffn_output", f)
        x = x + f
        x = record("ffn_residual", x)  # pre-LN: the residual is the layer's output (capture's names, as EncoderLayer's)
        x = record("output", x)
        return x, probs


class ModernBert(Family):
    config_class = ModernBertConfig
    Embeddings = ModernBertEmbeddings
    parts = {"final_norm": norm}
    pooler = False

    @classmethod
    def layers(cls, config: Config) -> list[nn.Module]:
        if config.rope_theta is None:
            raise ValueError("ModernBERT needs Config.rope_theta (config.json global_rope_theta): its positions "
                             "are rotary")
        return [ModernBertLayer(config, i) for i in range(config.num_layers)]

    @classmethod
    def layer_inputs(cls, encoder: nn.Module, inputs: ForwardInputs) -> dict[str, object]:
        """One (cos, sin) per distinct theta, in the weights' dtype (ModernBertRotaryEmbedding's cast), at the
        positions in the forward's layout."""
        dtype = encoder.embeddings.word.weight.dtype
        thetas = dict.fromkeys(layer.theta for layer in encoder.layers)
        dim = encoder.config.head_dim
        return {"rotary": {t: tuple(table.to(dtype) for table in rotary_tables(inputs.position_ids, dim, t))
                           for t in thetas}}

    @classmethod
    def finish(cls, encoder: nn.Module, x: Tensor) -> Tensor:
        x = encoder.final_norm(x)
        x = record("final_norm", x)  # the last hidden state (transformers' hidden_states[-1]), after the last layer's output
        return x

    @classmethod
    def heads(cls, config: Config) -> Heads:
        """After the model (final_norm included), each through ModernBertPredictionHead (`head`: norm(act(dense(.))),
        the activation classifier_activation, the biases as the config says), which every head shares:
        ModernBertForSequenceClassification pools (classifier_pooling: "cls" the first token, "mean" the mean over
        real tokens), then the head, dropout, out_proj, `pooled` recorded after pooling; ModernBertForMaskedLM:
        decoder(head(h)); ModernBertForTokenClassification: classifier(drop(head(h))), drop classifier_dropout;
        ModernBertForQuestionAnswering: the token head's layers and names (`head`, `classifier`), two outputs."""
        act = config.classifier_activation or config.activation
        head = dict(dense_activation=act, dense_bias=config.classifier_bias, norm_bias=config.norm_bias)
        return Heads(sequence_classification=SequenceClassification(
                         pool="mean" if config.classifier_pooling == "mean" else "first", record="pool", **head),
                     masked_lm=MaskedLM(activation=act, dense_bias=config.classifier_bias, norm_bias=config.norm_bias,
                                        decoder_bias=config.decoder_bias, at="classifier"),
                     token_classification=TokenClassification(**head),
                     question_answering=QuestionAnswering(**head, dropout="classifier", at="classifier"))
