"""The seam between the shared model classes and the encoder families.

A family is one file (minialign/models/<family>.py) holding one `Family` subclass: what makes its
encoder its own, declared, never branched on (pattern: huggingface/candle candle-transformers
models/ and text-embeddings-inference backends/candle/src/models/, one file per family over shared
layers; transformers' modular_<family>.py, a family derived from another by overriding only what
differs). The Encoder (encoder.py) and the models with heads (head_models.py) read these declarations
and nothing else about a family. Its config is its own class in the same file (a nn/config.py Config
subclass with only its fields), which names the family's foreign format, its config.json and weight
names (convert/families/<family>.py). Declaring `config_class` in a subclass attaches the family to that
config class, registered under its format's model_type: one registry (nn/config.py `families()`); the
Family of model_type X is `families()[X].family`.

What a family declares, ten names (the defaults are BERT's, or nothing):

  config_class        the family's config (nn/config.py Config subclass); `arch` is its model_type
  Embeddings          the module turning ids into the first hidden states (B, L, C); it owns the
                      position rule: `position_ids(input_ids)` (absolute, RoBERTa's offset, ...),
                      and its table if positions are added to the tokens
  layers(config)      the stack: one module per layer, its order of operations written out in its forward;
                      default BERT's post-LN EncoderLayer (nn/layers.py). What the Encoder reads of a layer:
                        forward(x, mask, queries, **layer_inputs) -> (x, attention probabilities or None)
                        window      how far its queries see: keys with |i - j| <= window, or None (every
                                    key); the Encoder prepares one mask per distinct window (ModernBERT's
                                    local layers)
                        attention   its SelfAttention: `score_form`, the form of the scores it computes
                                    (nn/score_functions.py; DeBERTa-v2's DISENTANGLED), which decides the
                                    backend row a forward runs on (nn/attention.py choose_backend); and
                                    `prune(heads)` (Encoder.prune_heads), which raises where it cannot
  parts               further encoder-level modules by name -> builder(config): a pre-LN family's
                      final norm, a relative-position table shared by every layer
  pooler              whether the bare model has a pooler (BertModel does)
  layer_inputs(...)   per forward, once, from the forward's ForwardInputs (nn/inputs.py: the user's mask, the
                      layout, the positions in it): keyword arguments every layer receives besides its mask
                      (ModernBERT's rotary tables, one per theta, each layer picking its own; DeBERTa-v2's
                      relative embeddings and its convolution's padding); default none
  relative_bias(...)  per forward, once: an additive relative-position bias, one value per head and
                      offset j - i (MPNet's), which every attention backend adds to the scaled scores
                      (a field of nn/inputs.py AttentionInputs, which every backend's prepare reads); default
                      none. One table for every layer's heads: a family with one cannot prune heads.
  finish(encoder, x)  after the last layer: a pre-LN family's final norm
  heads(config)       its *ForSequenceClassification, *ForMaskedLM, *ForTokenClassification and
                      *ForQuestionAnswering heads, as values (heads.py Heads: what each pools, its dense layer
                      and activation, its norm, its dropouts, where its weights sit); default BERT's. Whether
                      the classifier keeps the pooler and whose final states it reads follow from it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch.nn as nn
from torch import Tensor

from minialign.models.heads import Heads
from minialign.nn.config import Config, families
from minialign.nn.inputs import ForwardInputs
from minialign.nn.layers import EncoderLayer


class Family:
    """What an encoder family declares (module docstring). Never instantiated: a namespace of
    declarations read by the model classes."""

    arch: ClassVar[str]  # its config's model_type (set from config_class)
    config_class: ClassVar[type[Config]]
    Embeddings: ClassVar[type[nn.Module]]
    parts: ClassVar[dict[str, Callable[[Config], nn.Module]]] = {}
    pooler: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "config_class" in cls.__dict__:
            cls.arch = cls.config_class.format.model_type
            cls.config_class.family = cls  # registered with its config (nn/config.py families())

    @classmethod
    def layers(cls, config: Config) -> list[nn.Module]:
        return [EncoderLayer(config) for _ in range(config.num_layers)]

    @classmethod
    def layer_inputs(cls, encoder: nn.Module, inputs: ForwardInputs) -> dict[str, Any]:
        """The keyword arguments every layer receives besides its mask, built once per forward."""
        return {}

    @classmethod
    def relative_bias(cls, encoder: nn.Module, length: int) -> Tensor | None:
        """(H, 2L - 1): the bias of each offset j - i = -(L - 1) .. L - 1 for sequences up to `length`
        tokens, added to every layer's scaled scores; None: the family has none."""
        return None

    @classmethod
    def finish(cls, encoder: nn.Module, x: Tensor) -> Tensor:
        return x

    @classmethod
    def heads(cls, config: Config) -> Heads:
        """BERT's: BertForSequenceClassification (out_proj(dropout(pooler_output))), BertLMPredictionHead
        (decoder(LayerNorm(hidden_act(dense(h)))) + bias), BertForTokenClassification (classifier(dropout(h)), the
        dropout classifier_dropout else hidden), BertForQuestionAnswering (qa_outputs(h), no dropout)."""
        return Heads()


def family_of(config: Config) -> type[Family]:
    """The family of `config` (its config class's)."""
    family = type(config).family
    if family is None:
        raise ValueError(f"no model family for {type(config).__name__} ({config.arch!r}): no Family declares it as "
                         f"its config_class (have {tuple(families())})")
    return family
