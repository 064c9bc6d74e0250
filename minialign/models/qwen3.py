"""Qwen2 and Qwen3 (transformers models/qwen2/modeling_qwen2.py Qwen2Model, models/qwen3/modeling_qwen3.py
Qwen3Model; mixedbread's mxbai-rerank-v2 rerankers run on Qwen2, Qwen3-Embedding on Qwen3): Llama-shaped decoders read
as encoders, causal. Two families in one file, as transformers' modular_qwen3.py derives Qwen3 from Qwen2: what
every Qwen layer does is declared once, what Qwen3 changes is a flag of its attention.

  embeddings   embed_tokens(ids) alone: no position table, no token types, no norm (Qwen2Model.forward)
  positions    rotary (nn/rotary.py) on queries and keys, one theta (rope_parameters' rope_theta, the "default" rope
               type only) at positions 0, 1, ... of the batch's rows (Qwen2Model.forward's position_ids = arange:
               under left padding a real token's position counts the padding before it; rotary scores depend on
               j - i alone, so a text's states are the same up to rounding however it is padded)
  mask         causal (Qwen2Attention.is_causal, masking_utils.py create_causal_mask): query i sees keys j <= i among
               the real tokens; packed, within its own sequence (nn/masks.py causal_keep, on every backend:
               Config.causal). use_bidirectional_attention (no transformers field for Qwen2 / Qwen3; Gemma3's name)
               runs every key instead. Sliding-window layers (use_sliding_window) are refused on reading.
  layers       pre-RMSNorm: x = x + o_proj(attn(input_layernorm(x))); x = x + mlp(post_attention_layernorm(x))
               (Qwen2DecoderLayer, Qwen3DecoderLayer, without a cache); RMSNorm (nn/layers.py RMSNorm: Qwen2RMSNorm)
  attention    grouped-query (num_key_value_heads, repeat_kv). Qwen2: q_proj / k_proj / v_proj with biases, o_proj
               without (Qwen2Attention). Qwen3: heads head_dim wide whatever hidden_size / num_attention_heads is
               (q_proj C -> H D, o_proj H D -> C), an RMSNorm over each head's query and key before the rotation
               (q_norm, k_norm), attention_bias on all four projections (Qwen3Attention)
  mlp          SwiGLU: down_proj(act(gate_proj(x)) * up_proj(x)), no biases (Qwen2MLP; nn/layers.py GatedFeedForward)
  final norm   after the stack (Qwen2Model.norm), the last hidden state included
  heads        *ForSequenceClassification: `score` (no bias) on the last token that is not the pad token
               (Qwen2ForSequenceClassification's last_non_pad_token; Qwen3-Reranker-seq-cls is one). The causal LM's
               lm_head is dropped on loading (an encoder returns the final states); a LogitScore reranker reads two
               of its rows (products/classifier.py). *ForTokenClassification's `score` is not ported; no
               question-answering head.

Their config.json and weight names: convert/families/qwen2.py, convert/families/qwen3.py. Shapes: B batch,
L sequence length (a packed batch is one row of T tokens, (1, T)), C hidden size, H query heads, KV key / value heads,
D head dim.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn
from torch import Tensor

from minialign.convert.families import qwen2 as qwen2_format
from minialign.convert.families import qwen3 as qwen3_format
from minialign.models.family import Family
from minialign.models.heads import Heads, MaskedLM, SequenceClassification, TokenClassification
from minialign.models.token_embeddings import WordEmbeddings
from minialign.nn.capture import record
from minialign.nn.config import BOOL, POSITIVE_INT, POSITIVE_NUMBER, PROBABILITY, Config, checked, optional
from minialign.nn.inputs import ForwardInputs
from minialign.nn.layers import GatedFeedForward, PreNormLayer, RMSNorm, SelfAttention
from minialign.nn.rotary import rotary_tables


@dataclass(frozen=True)
class Qwen2Config(Config):
    """Qwen2's config (configuration_qwen2.py Qwen2Config; config.json: convert/families/qwen2.py).
    num_key_value_heads: the key / value heads of grouped-query attention (None: num_heads), dividing num_heads;
    rope_theta: the rotary base; use_bidirectional_attention: every key instead of the causal mask. No hidden
    dropout: hidden_dropout defaults to 0 (what a head's dropout falls back on)."""

    format = qwen2_format.FORMAT
    arch: str = "qwen2"
    hidden_dropout: float = checked(PROBABILITY, 0.0)
    attention_dropout: float = checked(PROBABILITY, 0.0)
    activation: str = "silu"
    layer_norm_eps: float = checked(POSITIVE_NUMBER, 1e-6)
    tie_word_embeddings: bool = False
    max_position_embeddings: int = checked(POSITIVE_INT, 32768)
    num_key_value_heads: int | None = checked(optional(POSITIVE_INT), None)
    rope_theta: float = checked(POSITIVE_NUMBER, 10000.0)
    use_bidirectional_attention: bool = checked(BOOL, False)
    last_token_by_pad: bool = checked(BOOL, True)  # convert/families/qwen3.py PAD_SAVED

    def check(self) -> None:
        if self.num_key_value_heads is not None and self.num_heads % self.num_key_value_heads:
            raise ValueError(f"Config.num_key_value_heads ({self.num_key_value_heads}) must divide num_heads "
                             f"({self.num_heads}): each key / value head serves a group of query heads")

    @property
    def kv_heads(self) -> int:
        """The key / value heads (num_key_value_heads, else num_heads)."""
        return self.num_heads if self.num_key_value_heads is None else self.num_key_value_heads

    @property
    def causal(self) -> bool:
        """Causal (Qwen2Attention.is_causal), unless use_bidirectional_attention says every key."""
        return not self.use_bidirectional_attention


def norm(config: Config) -> RMSNorm:
    """Every hidden-size norm: RMSNorm, eps rms_norm_eps (Qwen2RMSNorm)."""
    return RMSNorm(config.hidden_size, eps=config.layer_norm_eps)


class Qwen2(Family):
    config_class = Qwen2Config
    Embeddings = WordEmbeddings
    parts = {"final_norm": norm}
    pooler = False

    @classmethod
    def attention(cls, config: Config) -> SelfAttention:
        """Qwen2Attention: biases on q / k / v, none on o_proj, no query / key norms."""
        return SelfAttention(config, bias=True, output_bias=False, kv_heads=config.kv_heads)

    @classmethod
    def layers(cls, config: Config) -> list[nn.Module]:
        # Qwen2DecoderLayer / Qwen3DecoderLayer: pre-RMSNorm; SwiGLU (Qwen2MLP: down(act(gate(x)) * up(x)), no biases)
        return [PreNormLayer(norm(config), cls.attention(config), norm(config),
                             GatedFeedForward(config, bias=False, activated="first", split_names=True))
                for _ in range(config.num_layers)]

    @classmethod
    def layer_inputs(cls, encoder: nn.Module, inputs: ForwardInputs) -> dict[str, object]:
        """One (cos, sin) at the positions in the forward's layout, head_dim wide, in the weights' dtype
        (Qwen2RotaryEmbedding's cast)."""
        dtype = encoder.embeddings.word.weight.dtype
        tables = rotary_tables(inputs.position_ids, encoder.config.head_dim, float(encoder.config.rope_theta))
        return {"rotary": tuple(table.to(dtype) for table in tables)}

    @classmethod
    def finish(cls, encoder: nn.Module, x: Tensor) -> Tensor:
        x = encoder.final_norm(x)
        return record("final_norm", x)  # the last hidden state (Qwen2Model.norm)

    @classmethod
    def heads(cls, config: Config) -> Heads:
        """Qwen2ForSequenceClassification / Qwen3ForSequenceClassification: `score` (no bias) on the last token that is
        not the pad token. The others not transformers' (module docstring): a decoder over the final states, a token
        classifier without dropout, no question answering."""
        return Heads(sequence_classification=SequenceClassification(pool="last", out_bias=False, record="pool"),
                     masked_lm=MaskedLM(transform=False, decoder_bias=False),
                     token_classification=TokenClassification(dropout=None),
                     question_answering=f"{config.arch} has no question-answering head in minialign "
                                        f"(transformers' *ForQuestionAnswering is not ported)")


@dataclass(frozen=True)
class Qwen3Config(Qwen2Config):
    """Qwen3's config (configuration_qwen3.py Qwen3Config): Qwen2's fields, and head_dim (None: hidden_size /
    num_heads; config.json gives it) and attention_bias."""

    format = qwen3_format.FORMAT
    arch: str = "qwen3"
    head_dim: int | None = checked(optional(POSITIVE_INT), None)
    attention_bias: bool = checked(BOOL, False)

    def check(self) -> None:
        super().check()
        if self.head_dim is None:  # the heads split the hidden size (Qwen3Attention's getattr default)
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)


class Qwen3(Qwen2):
    config_class = Qwen3Config

    @classmethod
    def attention(cls, config: Config) -> SelfAttention:
        """Qwen3Attention: attention_bias on all four projections, q_norm / k_norm."""
        # Qwen3Attention: an RMSNorm over each head's query and key (q_norm, k_norm), before the rotation
        return SelfAttention(config, bias=config.attention_bias, kv_heads=config.kv_heads,
                             qk_norm=lambda width: RMSNorm(width, eps=config.layer_norm_eps))
