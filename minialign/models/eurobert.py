"""EuroBERT (transformers models/eurobert/modular_eurobert.py and modeling_eurobert.py, which borrow Llama's
modules: models/llama/modeling_llama.py): a Llama-shaped encoder, bidirectional. Every difference from BERT
declared here.

  embeddings   embed_tokens(ids) alone: no position table, no token types, no norm, no dropout
               (EuroBertModel.forward)
  positions    rotary (nn/rotary.py) on queries and keys, one theta (rope_parameters' rope_theta; only the
               "default" rope type, the one the published checkpoints use) (EuroBertRotaryEmbedding)
  layers       pre-RMSNorm: x = x + o_proj(attn(input_layernorm(x))); x = x + mlp(post_attention_layernorm(x))
               (EuroBertDecoderLayer, without a cache or causal mask); RMSNorm (nn/layers.py RMSNorm:
               EuroBertRMSNorm), the projections' biases as attention_bias / mlp_bias say
  attention    grouped-query: num_key_value_heads key / value heads, each shared by num_heads / kv_heads query
               heads (EuroBertAttention, repeat_kv; nn/layers.py SelfAttention kv_heads)
  mlp          SwiGLU: down_proj(act(gate_proj(x)) * up_proj(x)), act hidden_act (EuroBertMLP; nn/layers.py
               GatedFeedForward, gate and up kept as two layers in the state dict: ffn.gate / ffn.value)
  final norm   after the stack (EuroBertModel.norm), the last hidden state included
  classifier   EuroBertForSequenceClassification: dense -> exact GELU -> classifier, on the first token
               (classifier_pooling "bos"), on the mean of the real tokens' states ("mean"), or on every token
               with the mean of the real tokens' logits taken last ("late", the default); no dropout
  masked LM    EuroBertForMaskedLM: lm_head (bias mlp_bias) on the final states, no dense or norm before it
  tokens       EuroBertForTokenClassification: classifier on every token, no dropout
               (transformers has no EuroBertForQuestionAnswering: minialign refuses that head)

Padded and packed agree: a packed row gives each token its position inside its sequence (rotary). Its
config.json and weight names: convert/families/eurobert.py.

Shapes: B batch, L sequence length (a packed batch is one row of T tokens, (1, T)), C hidden size,
I intermediate size, H query heads, KV key / value heads, D head dim.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn
from torch import Tensor

from minialign.convert.families import eurobert as eurobert_format
from minialign.models.family import Family
from minialign.models.heads import Heads, MaskedLM, SequenceClassification, TokenClassification
from minialign.models.token_embeddings import WordEmbeddings
from minialign.nn.capture import record
from minialign.nn.config import BOOL, POSITIVE_INT, POSITIVE_NUMBER, PROBABILITY, Config, checked, one_of, optional
from minialign.nn.inputs import ForwardInputs
from minialign.nn.layers import GatedFeedForward, PreNormLayer, RMSNorm, SelfAttention
from minialign.nn.rotary import rotary_tables

# what a classifier reads (EuroBertForSequenceClassification.forward): the first token, the mean of the real
# tokens' states, or every token through the head and the mean of the real tokens' logits
CLASSIFIER_POOLING = ("bos", "mean", "late")
HEAD_POOL = {"bos": "first", "mean": "mean", "late": "late"}  # heads.py SequenceClassification.pool
HEAD_ACTIVATION = "gelu"  # EuroBertForSequenceClassification.activation: nn.GELU(), exact, whatever hidden_act says


@dataclass(frozen=True)
class EuroBertConfig(Config):
    """EuroBERT's config (configuration_eurobert.py EuroBertConfig, LlamaConfig's fields; config.json:
    convert/families/eurobert.py). num_key_value_heads: the key / value heads of grouped-query attention (None:
    num_heads), dividing num_heads; rope_theta: the rotary base; whether the attention's and the MLP's Linear
    layers carry biases (attention_bias, mlp_bias: the masked-LM decoder's too); what a classifier pools:
    "bos", "mean" or "late". EuroBERT has no hidden dropout: hidden_dropout defaults to 0 here (what a head's
    dropout falls back on)."""

    format = eurobert_format.FORMAT
    arch: str = "eurobert"
    hidden_dropout: float = checked(PROBABILITY, 0.0)
    num_key_value_heads: int | None = checked(optional(POSITIVE_INT), None)
    rope_theta: float = checked(POSITIVE_NUMBER, 10000.0)
    attention_bias: bool = checked(BOOL, False)
    mlp_bias: bool = checked(BOOL, False)
    classifier_pooling: str = checked(one_of(CLASSIFIER_POOLING), "late")

    def check(self) -> None:
        if self.num_key_value_heads is not None and self.num_heads % self.num_key_value_heads:
            raise ValueError(f"Config.num_key_value_heads ({self.num_key_value_heads}) must divide num_heads "
                             f"({self.num_heads}): each key / value head serves a group of query heads")

    @property
    def kv_heads(self) -> int:
        """The key / value heads (num_key_value_heads, else num_heads)."""
        return self.num_heads if self.num_key_value_heads is None else self.num_key_value_heads


def norm(config: Config) -> RMSNorm:
    """EuroBERT's every norm: RMSNorm, eps rms_norm_eps (EuroBertRMSNorm)."""
    return RMSNorm(config.hidden_size, eps=config.layer_norm_eps)


class EuroBert(Family):
    config_class = EuroBertConfig
    Embeddings = WordEmbeddings
    parts = {"final_norm": norm}
    pooler = False

    @classmethod
    def layers(cls, config: Config) -> list[nn.Module]:
        # EuroBertDecoderLayer: pre-RMSNorm; SwiGLU (EuroBertMLP: down(act(gate(x)) * up(x)), gate_proj / up_proj
        # stacked as up's two halves)
        return [PreNormLayer(norm(config), SelfAttention(config, bias=config.attention_bias, kv_heads=config.kv_heads),
                             norm(config), GatedFeedForward(config, bias=config.mlp_bias, activated="first",
                                                            split_names=True))
                for _ in range(config.num_layers)]

    @classmethod
    def layer_inputs(cls, encoder: nn.Module, inputs: ForwardInputs) -> dict[str, object]:
        """One (cos, sin) at the positions in the forward's layout, in the weights' dtype (EuroBertRotaryEmbedding's
        cast)."""
        dtype = encoder.embeddings.word.weight.dtype
        tables = rotary_tables(inputs.position_ids, encoder.config.head_dim, float(encoder.config.rope_theta))
        return {"rotary": tuple(table.to(dtype) for table in tables)}

    @classmethod
    def finish(cls, encoder: nn.Module, x: Tensor) -> Tensor:
        x = encoder.final_norm(x)
        return record("final_norm", x)  # the last hidden state (EuroBertModel.norm)

    @classmethod
    def heads(cls, config: Config) -> Heads:
        """After the model (its final norm included): EuroBertForSequenceClassification, pooled by classifier_pooling
        ("bos": the first token, "mean": the mean of the real tokens' states, then the head; "late": the head on
        every token, then the mean of the real tokens' logits), the head classifier(gelu(dense(.))), `pooled`
        recorded after pooling; EuroBertForMaskedLM: lm_head(h), its bias as mlp_bias says;
        EuroBertForTokenClassification: classifier(h), no dropout; no question-answering head."""
        pool = HEAD_POOL[config.classifier_pooling]
        return Heads(sequence_classification=SequenceClassification(pool=pool, dense_activation=HEAD_ACTIVATION,
                                                                    record=None if pool == "late" else "pool"),
                     masked_lm=MaskedLM(transform=False, decoder_bias=config.mlp_bias),
                     token_classification=TokenClassification(dropout=None),
                     question_answering="EuroBERT has no question-answering head (transformers has no "
                                        "EuroBertForQuestionAnswering); its heads: sequence classification, token "
                                        "classification, masked LM")
