"""jina-embeddings-v3 (transformers models/jina_embeddings_v3/modular_jina_embeddings_v3.py, which derives it from
XLM-RoBERTa with Llama's rotary attention and GPT-NeoX's layer names; jina's own code: jinaai/xlm-roberta-flash-
implementation, modeling_xlm_roberta.py and mha.py): XLM-RoBERTa's encoder, every difference declared here.

  embeddings   LayerNorm(word + token_type), then dropout (JinaEmbeddingsV3Embeddings): no position table
  positions    rotary (nn/rotary.py, rotate_half) on queries and keys, one theta for every layer (rope_theta, 20000
               in the published model: JinaEmbeddingsV3RotaryEmbedding), at positions 0, 1, ... of each sequence
  layers       BERT's post-LN layer (JinaEmbeddingsV3Layer: x = LN(x + drop(attn(x))); x = LN(x + drop(fc2(act(fc1(x))))))
               with the rotary attention (JinaEmbeddingsV3Attention: biases on q, k, v, o)
  heads        XLM-RoBERTa's: a pooler on the bare model, RobertaClassificationHead, XLMRobertaLMHead, the token and
               QA heads (JinaEmbeddingsV3For* derive them unchanged)

The task adapters of the published checkpoint (one LoRA per task on every Linear and Embedding, jina's
modeling_lora.py) are merged into the weights when the checkpoint is read (convert/families/jina_embeddings_v3.py
JINA: `task=` of from_pretrained); the model itself is the plain encoder, as transformers' port is.

Padded and packed agree: a packed row gives each token its position inside its sequence, as a padded row does.
Its config.json and weight names: convert/families/jina_embeddings_v3.py.

Shapes: B batch, L sequence length (a packed batch is one row of T tokens, (1, T)), C hidden size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

from minialign.convert.families import jina_embeddings_v3 as jina_format
from minialign.models.xlm_roberta import XLMRoberta
from minialign.models.token_embeddings import TokenEmbeddings
from minialign.nn.config import POSITIVE_NUMBER, Config, checked
from minialign.nn.inputs import ForwardInputs
from minialign.nn.layers import EncoderLayer, SelfAttention
from minialign.nn.rotary import rotary_tables


@dataclass(frozen=True)
class JinaEmbeddingsV3Config(Config):
    """jina-embeddings-v3's config (configuration_jina_embeddings_v3.py; config.json: convert/families/
    jina_embeddings_v3.py): the shared fields and the rotary base, rope_theta."""

    format = jina_format.FORMAT
    arch: str = "jina_embeddings_v3"
    rope_theta: float = checked(POSITIVE_NUMBER, 20000.0)


class JinaLayer(EncoderLayer):
    """BERT's post-LN layer (EncoderLayer: the same modules, names and captures) whose attention rotates queries and
    keys (JinaEmbeddingsV3Layer with JinaEmbeddingsV3Attention), its Q, K and V one fused projection under one name,
    as the checkpoints hold it (mixer.Wqkv)."""

    def __init__(self, config: Config):
        super().__init__(config)
        self.attention = SelfAttention(config, fused_names=True)


class JinaEmbeddingsV3(XLMRoberta):
    config_class = JinaEmbeddingsV3Config
    Embeddings = TokenEmbeddings

    @classmethod
    def layers(cls, config: Config) -> list[nn.Module]:
        return [JinaLayer(config) for _ in range(config.num_layers)]

    @classmethod
    def layer_inputs(cls, encoder: nn.Module, inputs: ForwardInputs) -> dict[str, object]:
        """The rotary (cos, sin) at the positions in the forward's layout, in the weights' dtype
        (JinaEmbeddingsV3RotaryEmbedding's cast)."""
        dtype = encoder.embeddings.word.weight.dtype
        cos, sin = rotary_tables(inputs.position_ids, encoder.config.head_dim, float(encoder.config.rope_theta))
        return {"rotary": (cos.to(dtype), sin.to(dtype))}
