"""The seam between the shared model classes and the encoder families.

A family is one file (minialign/models/<family>.py) holding one `Family` subclass: what makes its
encoder its own, declared, never branched on (pattern: huggingface/candle candle-transformers
models/ and text-embeddings-inference backends/candle/src/models/, one file per family over shared
layers; transformers' modular_<family>.py, a family derived from another by overriding only what
differs). The model classes (encoder.py: Encoder, AlignModel, ClassifierModel, MLMHead) read these
declarations and nothing else about a family. Its config is its own class in the same file (a
nn/config.py Config subclass with only its fields), which names the family's foreign format, its
config.json and weight names (convert/families/<family>.py). Declaring `config_class` in a subclass
attaches the family to that config class, registered under its format's model_type: one registry
(nn/config.py `families()`), of which FAMILIES is a view.

What a family declares (the defaults are BERT's, or nothing):

  Embeddings          the module turning ids into the first hidden states (B, L, C); it owns the
                      position rule: `position_ids(input_ids)` (absolute, RoBERTa's offset, ...),
                      and its table if positions are added to the tokens
  layers(config)      the stack: one module per layer, called layer(x, mask, queries, **inputs)
                      and returning (x, attention probabilities or None); default BERT's post-LN
                      EncoderLayer (nn/layers.py)
  parts               further encoder-level modules by name -> builder(config): a pre-LN family's
                      final norm, a relative-position table shared by every layer
  score_form(config)  the form of the scores its layers' attention computes (nn/score_functions.py), which
                      decides the backend row a forward runs on (nn/attention.py choose_backend); default
                      the form of Config.score_fn (DeBERTa-v2's: DISENTANGLED)
  layer_inputs(...)   per forward, once, from the forward's ForwardInputs (nn/inputs.py: the user's mask, the
                      layout, the positions in it): keyword arguments every layer receives besides its mask
                      (ModernBERT's rotary tables, one per theta, each layer picking its own; DeBERTa-v2's
                      relative embeddings and its convolution's padding); default none
  attention_windows   one per layer: how far its queries see, keys with |i - j| <= window, or None
                      (every key, the default); the Encoder prepares one mask per distinct window and
                      hands each layer its own (ModernBERT's local layers)
  relative_bias(...)  per forward, once: an additive relative-position bias, one value per head and
                      offset j - i (MPNet's), which every attention backend adds to the scaled scores
                      (a field of nn/inputs.py AttentionInputs, which every backend's prepare reads); default none
  finish(encoder, x)  after the last layer: a pre-LN family's final norm
  pooler              whether the bare model has a pooler (BertModel does)
  sequence_classification(config)
                      what its *ForSequenceClassification head is, as a value (heads.py
                      SequenceClassification: what it pools, its dense layer and activation, its norm,
                      its dropouts); default BERT's, dropout -> out_proj on the pooler's output. Whether
                      the classifier keeps the pooler and whose final states it reads follow from it.
  mlm_activation      the MLM head's activation; None: the config's hidden activation
  masked_lm(config)   what its *ForMaskedLM head is, as a value (heads.py MaskedLM: its activation, the
                      width it maps onto, its biases, where its weights sit); default BERT's, with mlm_activation
  token_classification(config)
                      what its *ForTokenClassification head is (heads.py TokenClassification); default BERT's,
                      dropout -> out_proj on every token
  question_answering(config)
                      what its *ForQuestionAnswering head is (heads.py QuestionAnswering); default BERT's, qa_outputs
                      on every token
  unprunable          why its attention heads cannot be pruned (Encoder.prune_heads), or None: they can
  config_class        the family's config (nn/config.py Config subclass); `arch` is its model_type
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

import torch.nn as nn
from torch import Tensor

from minialign.models.heads import MaskedLM, QuestionAnswering, SequenceClassification, TokenClassification
from minialign.nn.config import Config, families
from minialign.nn.inputs import ForwardInputs
from minialign.nn.layers import EncoderLayer
from minialign.nn.score_functions import score_form



class _Families(Mapping):
    """model_type -> Family: a read-only view of the one registry (nn/config.py families()), each family's
    config class carrying its Family."""

    def _all(self) -> dict[str, type[Family]]:
        return {arch: config.family for arch, config in families().items() if config.family is not None}

    def __getitem__(self, arch: str) -> type[Family]:
        return self._all()[arch]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


FAMILIES: Mapping[str, type[Family]] = _Families()


class Family:
    """What an encoder family declares (module docstring). Never instantiated: a namespace of
    declarations read by the model classes."""

    arch: ClassVar[str]  # its config's model_type (set from config_class)
    config_class: ClassVar[type[Config]]
    Embeddings: ClassVar[type[nn.Module]]
    parts: ClassVar[dict[str, Callable[[Config], nn.Module]]] = {}
    pooler: ClassVar[bool] = True
    mlm_activation: ClassVar[str | None] = None
    unprunable: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "config_class" in cls.__dict__:
            cls.arch = cls.config_class.format.model_type
            cls.config_class.family = cls  # registered with its config (nn/config.py families())

    @classmethod
    def layers(cls, config: Config) -> list[nn.Module]:
        return [EncoderLayer(config) for _ in range(config.num_layers)]

    @classmethod
    def score_form(cls, config: Config) -> str:
        """The form of the scores every layer's attention computes (nn/score_functions.py DOT, OFFSET, ...)."""
        return score_form(config.score_fn)

    @classmethod
    def layer_inputs(cls, encoder: nn.Module, inputs: ForwardInputs) -> dict[str, Any]:
        """The keyword arguments every layer receives besides its mask, built once per forward."""
        return {}

    @classmethod
    def attention_windows(cls, config: Config) -> list[int | None]:
        """Each layer's window (keys with |i - j| <= window; None: every key)."""
        return [None] * config.num_layers

    @classmethod
    def sequence_classification(cls, config: Config) -> SequenceClassification:
        """BertForSequenceClassification's head: out_proj(dropout(pooler_output))."""
        return SequenceClassification(pool="pooler")

    @classmethod
    def masked_lm(cls, config: Config) -> MaskedLM:
        """BertLMPredictionHead: decoder(LayerNorm(act(dense(h)))) + bias, act the family's mlm_activation."""
        return MaskedLM(activation=cls.mlm_activation)

    @classmethod
    def token_classification(cls, config: Config) -> TokenClassification:
        """BertForTokenClassification's head: classifier(dropout(h)), the dropout classifier_dropout else hidden."""
        return TokenClassification()

    @classmethod
    def question_answering(cls, config: Config) -> QuestionAnswering:
        """BertForQuestionAnswering's head: qa_outputs(h), no dropout."""
        return QuestionAnswering()

    @classmethod
    def relative_bias(cls, encoder: nn.Module, length: int) -> Tensor | None:
        """(H, 2L - 1): the bias of each offset j - i = -(L - 1) .. L - 1 for sequences up to `length`
        tokens, added to every layer's scaled scores; None: the family has none."""
        return None

    @classmethod
    def finish(cls, encoder: nn.Module, x: Tensor) -> Tensor:
        return x


def family_of(config: Config) -> type[Family]:
    """The family of `config` (its config class's)."""
    family = type(config).family
    if family is None:
        raise ValueError(f"no model family for {type(config).__name__} ({config.arch!r}): no Family declares it as "
                         f"its config_class (have {tuple(FAMILIES)})")
    return family
