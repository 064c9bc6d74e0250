"""GTE, Alibaba's gte-v1.5 / gte-multilingual encoder ("transformer++": BERT + RoPE + GLU; transformers
models/gte/modeling_gte.py, whose modular_gte.py borrows JinaEmbeddingsV3's layers, Gemma's MLP and Llama's
rotary embedding; the original: Alibaba-NLP/new-impl modeling.py NewModel), every difference from BERT
declared here.

  embeddings   LayerNorm(word + token_type), then dropout (GteEmbeddings; models/token_embeddings.py): no position table; no token types
               with type_vocab_size 0 (gte-base-en-v1.5)
  positions    rotary (nn/rotary.py) on queries and keys, theta rope_theta, the default or the linear rope type
               (GteRotaryEmbedding; the published models' fixed NTK scaling is the linear type, rotary.py
               ntk_as_linear), every layer the same tables
  layers       post-LN as BERT's: x = LN(x + attn(x)); x = LN(x + mlp(x)) (GteLayer: post_attention_layernorm,
               post_mlp_layernorm)
  mlp          GLU: down(drop(act(gate_proj(x)) * up_proj(x))), gate and up without bias, down with one (GteMLP);
               the original stacks them as up_gate_proj = [up; gate], the second half activated
  pooler       none in the bare model (GteModel's add_pooling_layer=False); GteForSequenceClassification's
               BertPooler-like tanh(dense(h_0)), then dropout, classifier (BertForSequenceClassification's head)
  masked LM    GteLMHead: decoder(layer_norm(gelu(dense(h)))), exact GELU whatever hidden_act says
  tokens       GteForTokenClassification: BERT's (dropout, classifier); transformers has no GTE QA head

Padded and packed agree: a packed row gives each token its position inside its sequence. Its config.json and
weight names (transformers' and the original's): convert/families/gte.py.

Shapes: B batch, L sequence length (a packed batch is one row of T tokens, (1, T)), C hidden size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

from minialign.convert.families import gte as gte_format
from minialign.models.family import Family
from minialign.models.token_embeddings import TokenEmbeddings
from minialign.models.heads import Heads, MaskedLM
from minialign.nn.config import (POSITIVE_INT, POSITIVE_NUMBER, PROBABILITY, Config, checked, int_at_least, one_of,
                                 optional)
from minialign.nn.inputs import ForwardInputs
from minialign.nn.layers import EncoderLayer, GatedFeedForward
from minialign.nn.rotary import linear_inv_freq, rotary_tables


@dataclass(frozen=True)
class GteConfig(Config):
    """GTE's config (configuration_gte.py; config.json: convert/families/gte.py). rope_theta: the rotary base
    (rope_parameters' rope_theta); rope_type "default", or "linear" with rope_factor (the frequencies divided by
    it, modeling_rope_utils.py _compute_linear_scaling_rope_parameters). type_vocab_size 0: no token types."""

    format = gte_format.FORMAT
    arch: str = "gte"
    type_vocab_size: int = checked(int_at_least(0, "an int >= 0"), 1)  # configuration_gte.py's defaults
    pad_token_id: int = 1
    attention_dropout: float = checked(PROBABILITY, 0.0)
    max_position_embeddings: int = checked(POSITIVE_INT, 8192)
    rope_theta: float = checked(POSITIVE_NUMBER, gte_format.DEFAULT_THETA)
    rope_type: str = checked(one_of(gte_format.ROPE_TYPES), "default")
    rope_factor: float | None = checked(optional(POSITIVE_NUMBER), None)

    def check(self) -> None:
        if (self.rope_type == "linear") != (self.rope_factor is not None):
            raise ValueError(f"Config.rope_factor is the linear rope type's factor: set it with rope_type 'linear' "
                             f"and only then (rope_type {self.rope_type!r}, rope_factor {self.rope_factor!r})")


class GteLayer(EncoderLayer):
    """Post-LN: x = LN(x + drop(attn(x))); x = LN(x + drop(glu(x))) (GteLayer): BERT's layer (EncoderLayer's forward,
    modules, names and captures) with rotary queries and keys (the family's tables, `rotary=`) and a GLU."""

    def __init__(self, config: Config):
        super().__init__(config)
        # GteMLP: act(gate_proj(x)) * up_proj(x), dropped out, down_proj; the original's up_gate_proj = [up; gate]
        self.ffn = GatedFeedForward(config, bias=True, up_bias=False, activated="second", split_names=True,
                                    dropout=config.hidden_dropout)
        # post_attention_dropout and post_mlp_dropout: EncoderLayer's dropout on both


class Gte(Family):
    config_class = GteConfig
    Embeddings = TokenEmbeddings
    pooler = False  # GteModel(add_pooling_layer=False); the classifier keeps one (heads)

    @classmethod
    def layers(cls, config: Config) -> list[nn.Module]:
        return [GteLayer(config) for _ in range(config.num_layers)]

    @classmethod
    def layer_inputs(cls, encoder: nn.Module, inputs: ForwardInputs) -> dict[str, object]:
        """The (cos, sin) tables at the positions in the forward's layout, in the weights' dtype
        (GteRotaryEmbedding's cast), the linear rope type's frequencies where the config scales them."""
        config = encoder.config
        dtype = encoder.embeddings.word.weight.dtype
        inv_freq = None
        if config.rope_type == "linear":
            inv_freq = linear_inv_freq(config.head_dim, float(config.rope_theta), config.rope_factor,
                                       device=inputs.position_ids.device)
        tables = rotary_tables(inputs.position_ids, config.head_dim, float(config.rope_theta), inv_freq=inv_freq)
        return {"rotary": tuple(table.to(dtype) for table in tables)}

    @classmethod
    def heads(cls, config: Config) -> Heads:
        """GteForSequenceClassification and GteForTokenClassification, BERT's (the classifier on pooler_output);
        GteLMHead: decoder(layer_norm(gelu(dense(h)))) + the decoder's bias, exact GELU (modeling_gte.py gelu)."""
        return Heads(masked_lm=MaskedLM(activation="gelu"),
                     question_answering="GTE has no question-answering head in transformers (no "
                                        "GteForQuestionAnswering): minialign's follows transformers' classes")
