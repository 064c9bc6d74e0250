"""Gemma 3's text model, bidirectional (transformers models/gemma3/modeling_gemma3.py Gemma3TextModel with
use_bidirectional_attention, EmbeddingGemma's encoder): every difference from BERT declared here.

  embeddings   embed_tokens(ids) * sqrt(hidden_size), the scale rounded to the weights' dtype
               (Gemma3TextScaledWordEmbedding): no positions, no token types, no norm
  norms        Gemma3RMSNorm: x / rms(x) * (1 + weight), in float32, then cast back (the weight starts at 0)
  positions    rotary (nn/rotary.py) on queries and keys, after their norms: base rope_theta on full layers and
               local_rope_theta on sliding ones (Gemma3RotaryEmbedding, one table per layer type; ModernBERT's
               mechanism: ModernBert.layer_inputs, each layer picking its `theta`)
  layers       x = x + post_attention_norm(attn(attention_norm(x))); x = x + post_ffn_norm(mlp(ffn_norm(x)))
               (Gemma3DecoderLayer, without a cache)
  attention    grouped-query (num_key_value_heads), head_dim its own (H * D need not be hidden_size), q_norm / k_norm
               per head before the rotation, scores scaled by query_pre_attn_scalar^-1/2 (Gemma3Attention): the
               queries are multiplied by sqrt(head_dim / query_pre_attn_scalar) after the rotation, the backends
               scaling by head_dim^-1/2 (1 for EmbeddingGemma, whose query_pre_attn_scalar is its head_dim)
  windows      layer_types: a "sliding_attention" layer's queries see keys with |i - j| <= sliding_window // 2
               (Gemma3TextModel.forward's bidirectional overlay, |i - j| < Gemma3TextConfig's sliding_window // 2 + 1,
               with the padding mask); a "full_attention" layer every key. The Encoder prepares one mask per window
               (the layer's `window`), as for ModernBERT's local layers
  mlp          down_proj(gelu_tanh(gate_proj(x)) * up_proj(x)), no biases (Gemma3MLP; nn/layers.py GatedFeedForward)
  final norm   after the stack (Gemma3TextModel.norm), the last hidden state included
  heads        minialign's own, for heads trained here (Gemma3Text.heads): transformers' Gemma3TextForSequenceClassification
               pools the last token (GenericForSequenceClassification), a decoder's head, and is refused on load;
               Gemma 3 runs here as an encoder for embeddings (products/embeddings.py SentenceEncoder)

Padded and packed agree: a packed row gives each token its position inside its sequence (rotary), and the window is
an offset inside one sequence. Its config.json and weight names: convert/families/gemma3_text.py.

Shapes: B batch, L sequence length (a packed batch is one row of T tokens, (1, T)), C hidden size, H query heads,
KV key / value heads, D head dim.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch import Tensor

from minialign.convert.families import gemma3_text as gemma3_format
from minialign.models.family import Family
from minialign.models.heads import Heads, SequenceClassification
from minialign.models.modernbert import ModernBert
from minialign.nn.attention import PreparedMask
from minialign.nn.capture import record
from minialign.nn.config import (ACTIVATION, BOOL, POSITIVE_INT, POSITIVE_NUMBER, PROBABILITY, Config, Rule, checked,
                                 int_at_least, optional)
from minialign.nn.inputs import ForwardInputs, sequence_positions
from minialign.nn.layers import PRECISION_LAYERS, GatedFeedForward, SelfAttention

LAYER_TYPES = gemma3_format.LAYER_TYPES
SLIDING = "sliding_attention"
LAYER_TYPE_LIST = Rule(f"a sequence of {LAYER_TYPES}",
                       lambda v: isinstance(v, (tuple, list)) and all(t in LAYER_TYPES for t in v), tuple)


@dataclass(frozen=True)
class Gemma3TextConfig(Config):
    """Gemma 3's text config, bidirectional (configuration_gemma3.py Gemma3TextConfig; config.json:
    convert/families/gemma3_text.py). num_key_value_heads: the key / value heads (dividing num_heads); head_dim: each
    head's width, its own (transformers' default 256); layer_types: "sliding_attention" or "full_attention" per layer;
    sliding_window: config.json's value, a sliding layer's queries seeing keys with |i - j| <= sliding_window // 2
    (None: every key); rope_theta the full layers' rotary base, local_rope_theta the sliding layers';
    query_pre_attn_scalar: scores are scaled by its inverse square root; attention_bias: whether q / k / v / o carry
    biases. No hidden dropout; norms' eps rms_norm_eps (layer_norm_eps)."""

    format = gemma3_format.FORMAT
    arch: str = "gemma3_text"
    hidden_dropout: float = checked(PROBABILITY, 0.0)
    attention_dropout: float = checked(PROBABILITY, 0.0)
    activation: str = checked(ACTIVATION, "gelu_pytorch_tanh")
    layer_norm_eps: float = checked(POSITIVE_NUMBER, 1e-6)
    num_key_value_heads: int = checked(POSITIVE_INT, 1)
    head_dim: int = checked(int_at_least(2, "an even int >= 2 (rotary pairs)"), 256)
    layer_types: tuple[str, ...] | None = checked(optional(LAYER_TYPE_LIST), None)
    sliding_window: int | None = checked(optional(POSITIVE_INT), None)
    rope_theta: float = checked(POSITIVE_NUMBER, 1_000_000.0)
    local_rope_theta: float = checked(POSITIVE_NUMBER, 10_000.0)
    query_pre_attn_scalar: float = checked(POSITIVE_NUMBER, 256)
    attention_bias: bool = checked(BOOL, False)

    def check(self) -> None:
        if self.num_heads % self.num_key_value_heads:
            raise ValueError(f"Config.num_key_value_heads ({self.num_key_value_heads}) must divide num_heads "
                             f"({self.num_heads}): each key / value head serves a group of query heads")
        if self.head_dim % 2:
            raise ValueError(f"Config.head_dim must be even (rotary pairs), got {self.head_dim}")
        if self.layer_types is not None and len(self.layer_types) != self.num_layers:
            raise ValueError(f"Config.layer_types names {len(self.layer_types)} layers, the model has num_layers "
                             f"{self.num_layers}")

    @property
    def kv_heads(self) -> int:
        """The key / value heads (SelfAttention kv_heads)."""
        return self.num_key_value_heads

    def layer_type(self, index: int) -> str:
        """Layer `index`'s type: layer_types', else the default pattern (every 6th layer full)."""
        if self.layer_types is not None:
            return self.layer_types[index]
        return SLIDING if (index + 1) % gemma3_format.SLIDING_WINDOW_PATTERN else "full_attention"


class Gemma3RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * (1 + weight), in float32 and cast back after the weight (Gemma3RMSNorm; not
    Llama's order, which casts before the weight). The weight starts at 0: the identity scale."""

    rms, unit_offset = True, True  # an RMSNorm whose scale is 1 + weight (nn/analysis.py spread_norm reads them)

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * (1.0 + self.weight.float())).type_as(x)


def norm(config: Config) -> Gemma3RMSNorm:
    """Gemma 3's every norm over the hidden states: eps rms_norm_eps."""
    return Gemma3RMSNorm(config.hidden_size, eps=config.layer_norm_eps)


class Gemma3Embeddings(nn.Module):
    """embed_tokens(ids) * sqrt(hidden_size) (Gemma3TextScaledWordEmbedding): the scale a float32 tensor cast to the
    weights' dtype (bf16 rounds sqrt(768) = 27.71 to 27.75), no positions, no token types, no norm."""

    def __init__(self, config: Config):
        super().__init__()
        self.word = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        scale = torch.tensor(config.hidden_size ** 0.5, device="cpu")  # float32, as transformers' buffer (not meta)
        self.scales = {dtype: scale.to(dtype).item() for dtype in (torch.float32, torch.bfloat16, torch.float16)}

    def position_ids(self, input_ids: Tensor) -> Tensor:
        """(B, L): 0, 1, ..., L - 1 in every row (Gemma3TextModel.forward), read by the rotary tables."""
        return sequence_positions(input_ids)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, position_ids: Tensor) -> Tensor:
        """Token types and positions are not added here (rotary positions are applied in attention)."""
        word = self.word(input_ids)
        word = record("word", word)
        x = word * self.scales[word.dtype]  # the dtype's value, exact in the product's float32 arithmetic
        return record("sum", x)  # what layer 0 reads


class Gemma3Layer(nn.Module):
    """x = x + post_attention_norm(attn(attention_norm(x))); x = x + post_ffn_norm(mlp(ffn_norm(x)))
    (Gemma3DecoderLayer). Its rotary table is the one of its theta; a sliding layer's queries see the keys within its
    window."""

    precision_layers = PRECISION_LAYERS  # EncoderLayer's: the same names, the same reasons

    def __init__(self, config: Config, index: int):
        super().__init__()
        sliding = config.layer_type(index) == SLIDING
        self.theta = float(config.local_rope_theta if sliding else config.rope_theta)
        self.window = config.sliding_window // 2 if sliding and config.sliding_window is not None else None
        self.attention_norm = norm(config)
        # Gemma3Attention: Gemma's RMSNorm over each head's query and key before the rotation, the scores scaled
        # by query_pre_attn_scalar^-1/2 (the queries times sqrt(D / query_pre_attn_scalar))
        self.attention = SelfAttention(
            config, bias=config.attention_bias, kv_heads=config.kv_heads,
            qk_norm=lambda width: Gemma3RMSNorm(width, eps=config.layer_norm_eps),
            query_scale=math.sqrt(config.head_dim / config.query_pre_attn_scalar))
        self.post_attention_norm = norm(config)
        self.ffn_norm = norm(config)
        # Gemma3MLP: down(act(gate(x)) * up(x)); gate_proj / up_proj stacked as up's two halves
        self.ffn = GatedFeedForward(config, bias=False, activated="first", split_names=True)
        self.post_ffn_norm = norm(config)

    def forward(self, x: Tensor, mask: PreparedMask, queries: Callable[[Tensor], Tensor] | None = None, *,
                rotary: dict[float, tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor | None]:
        """x (B, L, C) -> the new states of the `queries` tokens (default: all) (B, Lq, C), and the
        attention probabilities (B, H, Lq, L) when the backend gives them. rotary: (cos, sin) by theta."""
        x = record("input", x)
        normed = self.attention_norm(x)
        normed = record("attention_norm", normed)  # what the attention reads
        a, probs = self.attention(normed, mask, queries, rotary=rotary[self.theta])
        a = self.post_attention_norm(a)
        a = record("post_attention_norm", a)  # what is added to the residual
        if queries is not None:
            x = queries(x)
        x = x + a
        x = record("attention_residual", x)
        normed = self.ffn_norm(x)
        normed = record("ffn_norm", normed)  # what the feed-forward reads
        f = self.ffn(normed)
        f = self.post_ffn_norm(f)
        f = record("ffn_output", f)  # the normed update added to the residual
        x = x + f
        x = record("ffn_residual", x)
        x = record("output", x)  # the residual is the layer's output (capture's names, as EncoderLayer's)
        return x, probs


NO_HEAD = "Gemma 3's text model has no {} head (transformers has none); it runs as an encoder for embeddings"


class Gemma3Text(Family):
    config_class = Gemma3TextConfig
    Embeddings = Gemma3Embeddings
    parts = {"final_norm": norm}
    pooler = False

    @classmethod
    def layers(cls, config: Config) -> list[nn.Module]:
        return [Gemma3Layer(config, i) for i in range(config.num_layers)]

    @classmethod
    def layer_inputs(cls, encoder: nn.Module, inputs: ForwardInputs) -> dict[str, object]:
        """ModernBERT's: one (cos, sin) per distinct theta, in the weights' dtype (Gemma3RotaryEmbedding's cast), at
        the positions in the forward's layout; each layer picks its own."""
        return ModernBert.layer_inputs(encoder, inputs)

    @classmethod
    def finish(cls, encoder: nn.Module, x: Tensor) -> Tensor:
        x = encoder.final_norm(x)
        return record("final_norm", x)  # the last hidden state (Gemma3TextModel.norm)

    @classmethod
    def heads(cls, config: Config) -> Heads:
        """minialign's own, for a head trained here: out_proj on the mean of the real tokens' final states (the pooling
        EmbeddingGemma's sentence-transformers directory uses), and BERT's token and masked-LM heads. transformers'
        Gemma3TextForSequenceClassification (`score` on the last real token) is not this head: its checkpoint names
        are refused on load (convert/families/gemma3_text.py has none of them). No question-answering head."""
        return Heads(sequence_classification=SequenceClassification(pool="mean", record="pool"),
                     question_answering=NO_HEAD.format("question-answering"))
