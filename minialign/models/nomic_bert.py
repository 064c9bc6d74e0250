"""NomicBERT, nomic-embed-text v1 / v1.5 (transformers models/nomic_bert/modeling_nomic_bert.py, derived in
modular_nomic_bert.py from BERT's config and heads, JinaEmbeddingsV3's embeddings, attention and layer, Gemma's
MLP and Llama's rotary embedding; a second reading: candle candle-transformers models/nomic_bert.rs): BERT's
post-LN encoder with rotary positions and a gated feed-forward, every difference declared here.

  embeddings   LayerNorm(word + token_type), then dropout (NomicBertEmbeddings; models/token_embeddings.py): no position table
  positions    rotary (nn/rotary.py) on queries and keys, one theta for every layer (rope_theta, default 1000:
               NomicBertRotaryEmbedding, the default rope type)
  layers       post-LN as BERT's: x = norm1(x + drop(attn(x))); x = norm2(x + drop(mlp(x))) (NomicBertLayer);
               no bias in any projection (NomicBertAttention's q/k/v/o_proj, NomicBertMLP's), Wqkv fused
  mlp          SwiGLU: down(act(gate(x)) * up(x)) (NomicBertMLP, GemmaMLP's), act hidden_act (silu); nomic's
               checkpoints hold gate and up as fc12 and fc11 (nn/layers.py GatedFeedForward, split names)
  pooler       only under NomicBertForSequenceClassification (NomicBertModel's add_pooling_layer=False); its
               head is BERT's, dropout -> classifier on the pooled first token
  heads        NomicBertForMaskedLM: BERT's (its transform's norm named layer_norm); NomicBertForTokenClassification:
               BERT's. transformers has no NomicBertForQuestionAnswering: minialign's QA head here is BERT's
               qa_outputs, a layout of its own that transformers cannot load.

Padded and packed agree: a packed row gives each token its position inside its sequence (rotary). Its config.json
(transformers' names, or nomic's GPT2-style ones the Hub's files keep) and weight names:
convert/families/nomic_bert.py.

Shapes: B batch, L sequence length (a packed batch is one row of T tokens, (1, T)), C hidden size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

from minialign.convert.families import nomic_bert as nomic_bert_format
from minialign.models.family import Family
from minialign.models.token_embeddings import TokenEmbeddings
from minialign.models.heads import Heads
from minialign.nn.config import ACTIVATION, POSITIVE_INT, POSITIVE_NUMBER, PROBABILITY, Config, checked
from minialign.nn.inputs import ForwardInputs
from minialign.nn.layers import EncoderLayer, GatedFeedForward, SelfAttention
from minialign.nn.rotary import rotary_tables


@dataclass(frozen=True)
class NomicBertConfig(Config):
    """NomicBERT's config (configuration_nomic_bert.py; config.json: convert/families/nomic_bert.py): the shared
    fields (their defaults NomicBertConfig()'s: 2048 positions, silu, the gated feed-forward's, making it SwiGLU; no dropout), and
    rope_theta, the rotary base of every layer (default_theta 1000)."""

    format = nomic_bert_format.FORMAT
    arch: str = "nomic_bert"
    # NomicBertConfig()'s defaults where they differ from BERT's: 2048 positions, SwiGLU's silu, no dropout
    max_position_embeddings: int = checked(POSITIVE_INT, 2048)
    activation: str = checked(ACTIVATION, "silu")
    hidden_dropout: float = checked(PROBABILITY, 0.0)
    attention_dropout: float = checked(PROBABILITY, 0.0)
    rope_theta: float = checked(POSITIVE_NUMBER, 1000.0)

    def check(self) -> None:
        if self.head_dim % 2:
            raise ValueError(f"NomicBERT's rotary positions need an even head dim (hidden_size / num_heads), got "
                             f"{self.hidden_size} / {self.num_heads}")


class NomicBertLayer(EncoderLayer):
    """Post-LN: x = attention_norm(x + drop(attn(x))); x = ffn_norm(x + drop(ffn(x))) (NomicBertLayer): BERT's layer
    (EncoderLayer's forward, modules, names and captures) with the attention rotating queries and keys (the family's
    tables, `rotary=`), the feed-forward SwiGLU; no biases but the norms'."""

    def __init__(self, config: Config):
        super().__init__(config)
        self.attention = SelfAttention(config, bias=False, fused_names=True)  # Wqkv, out_proj
        # NomicBertMLP: down(act(gate_proj(x)) * up_proj(x)), nomic's fc12 (gate) and fc11 (value)
        self.ffn = GatedFeedForward(config, bias=False, activated="first", split_names=True)
        # post_attention_dropout and post_mlp_dropout alike: EncoderLayer's dropout on both


class NomicBert(Family):
    config_class = NomicBertConfig
    Embeddings = TokenEmbeddings
    pooler = False  # NomicBertModel(add_pooling_layer=False); its classifier keeps one (heads.py uses_pooler)

    @classmethod
    def layers(cls, config: Config) -> list[nn.Module]:
        return [NomicBertLayer(config) for _ in range(config.num_layers)]

    @classmethod
    def heads(cls, config: Config) -> Heads:
        """The sequence-classification, masked-LM and token heads are BERT's."""
        return Heads(question_answering="NomicBERT has no question-answering head in transformers (no "
                                        "NomicBertForQuestionAnswering): minialign's follows transformers' classes")

    @classmethod
    def layer_inputs(cls, encoder: nn.Module, inputs: ForwardInputs) -> dict[str, object]:
        """One (cos, sin) at the positions in the forward's layout, in the weights' dtype (NomicBertRotaryEmbedding's
        cast to the hidden states' dtype)."""
        dtype = encoder.embeddings.word.weight.dtype
        cos, sin = rotary_tables(inputs.position_ids, encoder.config.head_dim, float(encoder.config.rope_theta))
        return {"rotary": (cos.to(dtype), sin.to(dtype))}
