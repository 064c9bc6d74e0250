"""Model configuration: one frozen dataclass, presets by exact name, HF config.json in and out.

Which families exist, their config.json names and defaults, their presets and how many rows of the
position table they reserve are rows of convert/hf_config.py (FAMILIES): nothing here names a family."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from minialign import convert
from minialign.convert.hf_config import FAMILIES
from minialign.nn.activations import ELEMENTWISE
from minialign.nn.score_functions import SCORE_FUNCTIONS

ACTIVATIONS = ELEMENTWISE  # the hidden activations a layer may carry (activations.py)
# transformers PretrainedConfig.problem_type
PROBLEM_TYPES = (None, "regression", "single_label_classification", "multi_label_classification")
# Config.max_seq_len of a family without absolute positions: any length a tokenizer window (< 1e6) allows.
UNBOUNDED_POSITIONS = 1 << 20
POSITION_TERMS = ("c2p", "p2c")  # DeBERTa's pos_att_type: content-to-position, position-to-content
CLASSIFIER_POOLING = ("cls", "mean")  # what a classifier reads: the first token, or the mean of real ones
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}  # names on the command line


@dataclass(frozen=True)
class Config:
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_position_embeddings: int = 512
    sinusoidal_positions: bool = False  # a fixed sinusoidal position table (DistilBERT's sinusoidal_pos_embds)
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    arch: str = "bert"  # the encoder family: a key of convert/hf_config.py FAMILIES
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    activation: str = "gelu"  # "gelu" is the exact erf form, as BERT's hidden_act "gelu"
    initializer_range: float = 0.02
    tie_word_embeddings: bool = True  # MLM decoder shares the word-embedding matrix
    score_fn: str = "scaled_dot"  # alignment-score function (scores.py); pretrained weights use scaled_dot
    max_relative_distance: int = 32  # R of the location-based score: offsets clipped to [-R, R]
    # Sequence classification (transformers *ForSequenceClassification): labels by index (id2label),
    # the problem type, the head's dropout (None: hidden_dropout). Ignored by the other models.
    labels: tuple[str, ...] = ()
    problem_type: str | None = None
    classifier_dropout: float | None = None
    # The embeddings' width when it differs from hidden_size (ELECTRA: a projection follows). None: hidden_size.
    embedding_size: int | None = None
    # Rows of a relative-position bias table shared by every layer (MPNet's relative_attention_num_buckets).
    # None: the family has none.
    relative_attention_buckets: int | None = None
    # Rotary positions and local attention (ModernBERT, configuration_modernbert.py). rope_theta: the
    # rotary base of the global layers (None: no rotary positions); local_rope_theta that of the local
    # layers (None: rope_theta). local_attention: a local layer's whole window, keys with |i - j| <=
    # local_attention // 2 (None: every layer global); every layer whose index % global_attn_every_n_layers
    # != 0 is local.
    rope_theta: float | None = None
    local_rope_theta: float | None = None
    local_attention: int | None = None
    global_attn_every_n_layers: int = 1
    # Which Linear / LayerNorm layers carry a bias (ModernBERT's attention_bias, mlp_bias, norm_bias,
    # classifier_bias: its prediction head's dense layer), the MLP's dropout (None: hidden_dropout), the
    # prediction head's activation (None: activation) and what a classifier pools: "cls" (the first token)
    # or "mean" (the mean over real tokens; ModernBERT's classifier_pooling).
    attention_bias: bool = True
    mlp_bias: bool = True
    norm_bias: bool = True
    classifier_bias: bool = True
    mlp_dropout: float | None = None
    classifier_activation: str | None = None
    classifier_pooling: str = "cls"
    # DeBERTa-v2/v3's disentangled attention (configuration_deberta_v2.py, models/deberta_v2.py): content-to-
    # position / position-to-content terms ("c2p", "p2c") from a relative-embedding table of 2 * span rows
    # (span: position_buckets when > 0, else max_relative_positions, itself max_position_embeddings when < 1),
    # LayerNorm'd when norm_rel_ebd says "layer_norm", projected by each layer's own query / key projections
    # when share_att_key; absolute positions added to the embeddings only when position_biased_input; a
    # convolution after the first layer when conv_kernel_size > 0; the classifier's ContextPooler activation
    # and dropout (pooler_hidden_act, pooler_dropout).
    relative_attention: bool = False
    pos_att_type: tuple[str, ...] = ()
    max_relative_positions: int = -1
    position_buckets: int = -1
    share_att_key: bool = False
    norm_rel_ebd: str = "none"
    position_biased_input: bool = True
    conv_kernel_size: int = 0
    conv_groups: int = 1
    conv_act: str = "tanh"
    pooler_activation: str = "gelu"
    pooler_dropout: float = 0.0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                     "max_position_embeddings", "type_vocab_size"):
            value = getattr(self, name)
            least = 0 if name == "type_vocab_size" else 1  # 0 token types: none (DeBERTa-v3)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"Config.{name} must be {'a positive int' if least else 'an int >= 0'}, got {value!r}")
        for name in ("embedding_size", "relative_attention_buckets"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"Config.{name} must be None or a positive int, got {value!r}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"Config.hidden_size ({self.hidden_size}) must be divisible by num_heads ({self.num_heads})")
        if not isinstance(self.arch, str) or self.arch not in FAMILIES:
            raise ValueError(f"Config.arch must be one of {tuple(FAMILIES)}, got {self.arch!r}")
        if not isinstance(self.pad_token_id, int) or not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(f"Config.pad_token_id must be in [0, vocab_size), got {self.pad_token_id!r}")
        if self.max_seq_len < 1:
            raise ValueError(f"Config.max_position_embeddings ({self.max_position_embeddings}) leaves no room "
                             f"for {self.arch} positions, which start at pad_token_id + 1")
        for name in ("hidden_dropout", "attention_dropout"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ValueError(f"Config.{name} must be in [0, 1), got {value!r}")
        if not isinstance(self.layer_norm_eps, (int, float)) or self.layer_norm_eps <= 0:
            raise ValueError(f"Config.layer_norm_eps must be > 0, got {self.layer_norm_eps!r}")
        if self.score_fn not in SCORE_FUNCTIONS:
            raise ValueError(f"Config.score_fn must be one of {SCORE_FUNCTIONS}, got {self.score_fn!r}")
        if not isinstance(self.max_relative_distance, int) or self.max_relative_distance < 1:
            raise ValueError(f"Config.max_relative_distance must be a positive int, got {self.max_relative_distance!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"Config.activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if not isinstance(self.labels, (tuple, list)) or not all(isinstance(x, str) for x in self.labels):
            raise ValueError(f"Config.labels must be a sequence of label names, got {self.labels!r}")
        object.__setattr__(self, "labels", tuple(self.labels))  # from JSON: a list
        if self.problem_type not in PROBLEM_TYPES:
            raise ValueError(f"Config.problem_type must be one of {PROBLEM_TYPES}, got {self.problem_type!r}")
        if self.classifier_dropout is not None and not (isinstance(self.classifier_dropout, (int, float))
                                                        and 0.0 <= self.classifier_dropout < 1.0):
            raise ValueError(f"Config.classifier_dropout must be None or in [0, 1), got {self.classifier_dropout!r}")
        if not isinstance(self.sinusoidal_positions, bool):
            raise ValueError(f"Config.sinusoidal_positions must be a bool, got {self.sinusoidal_positions!r}")
        for name in ("rope_theta", "local_rope_theta"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
                raise ValueError(f"Config.{name} must be None or a positive number, got {value!r}")
        if self.local_attention is not None and (not isinstance(self.local_attention, int)
                                                 or isinstance(self.local_attention, bool) or self.local_attention < 2):
            raise ValueError(f"Config.local_attention must be None or an int >= 2 (a window of |i - j| <= "
                             f"local_attention // 2), got {self.local_attention!r}")
        if (not isinstance(self.global_attn_every_n_layers, int) or isinstance(self.global_attn_every_n_layers, bool)
                or self.global_attn_every_n_layers < 1):
            raise ValueError(f"Config.global_attn_every_n_layers must be a positive int, "
                             f"got {self.global_attn_every_n_layers!r}")
        for name in ("attention_bias", "mlp_bias", "norm_bias", "classifier_bias"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"Config.{name} must be a bool, got {getattr(self, name)!r}")
        if self.mlp_dropout is not None and not (isinstance(self.mlp_dropout, (int, float))
                                                 and 0.0 <= self.mlp_dropout < 1.0):
            raise ValueError(f"Config.mlp_dropout must be None or in [0, 1), got {self.mlp_dropout!r}")
        if self.classifier_activation is not None and self.classifier_activation not in ACTIVATIONS:
            raise ValueError(f"Config.classifier_activation must be None or one of {ACTIVATIONS}, "
                             f"got {self.classifier_activation!r}")
        if self.classifier_pooling not in CLASSIFIER_POOLING:
            raise ValueError(f"Config.classifier_pooling must be one of {CLASSIFIER_POOLING}, "
                             f"got {self.classifier_pooling!r}")
        self._check_disentangled()

    def _check_disentangled(self) -> None:
        """DeBERTa's fields (pos_att_type from JSON: a list, or transformers' "p2c|c2p" string)."""
        kinds = self.pos_att_type
        kinds = [x.strip() for x in kinds.lower().split("|") if x.strip()] if isinstance(kinds, str) else kinds
        if not isinstance(kinds, (tuple, list)) or not set(kinds) <= set(POSITION_TERMS):
            raise ValueError(f"Config.pos_att_type must name terms among {POSITION_TERMS}, got {self.pos_att_type!r}")
        object.__setattr__(self, "pos_att_type", tuple(kinds))
        for name in ("relative_attention", "share_att_key", "position_biased_input"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"Config.{name} must be a bool, got {getattr(self, name)!r}")
        for name in ("max_relative_positions", "position_buckets", "conv_kernel_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"Config.{name} must be an int, got {value!r}")
        norms = ([x.strip() for x in self.norm_rel_ebd.lower().split("|")] if isinstance(self.norm_rel_ebd, str)
                 else None)
        if norms is None or not set(norms) <= {"none", "layer_norm"}:
            raise ValueError(f"Config.norm_rel_ebd must be 'none', 'layer_norm' or both joined by '|', "
                             f"got {self.norm_rel_ebd!r}")
        if self.conv_kernel_size > 0 and self.conv_kernel_size % 2 == 0:
            raise ValueError(f"Config.conv_kernel_size must be odd (padding (k - 1) // 2 keeps the length), "
                             f"got {self.conv_kernel_size!r}")
        if (not isinstance(self.conv_groups, int) or isinstance(self.conv_groups, bool) or self.conv_groups < 1
                or self.hidden_size % self.conv_groups):
            raise ValueError(f"Config.conv_groups must be a positive int dividing hidden_size ({self.hidden_size}), "
                             f"got {self.conv_groups!r}")
        for name in ("conv_act", "pooler_activation"):
            if getattr(self, name) not in ACTIVATIONS:
                raise ValueError(f"Config.{name} must be one of {ACTIVATIONS}, got {getattr(self, name)!r}")
        if not isinstance(self.pooler_dropout, (int, float)) or not 0.0 <= self.pooler_dropout < 1.0:
            raise ValueError(f"Config.pooler_dropout must be in [0, 1), got {self.pooler_dropout!r}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def max_seq_len(self) -> int:
        """Longest input the position table allows (a family whose positions start after the padding
        id, as RoBERTa's, spends pad_token_id + 1 rows: convert/hf_config.py ConfigRow.reserved_positions).
        Without absolute positions (DeBERTa's position_biased_input false: relative buckets only) there is no
        table to run out of and transformers takes any length (MiniCheck runs DeBERTa-v3 at 2048 tokens):
        UNBOUNDED_POSITIONS, the runners' window then being the tokenizer's model_max_length."""
        if not self.position_biased_input:
            return UNBOUNDED_POSITIONS
        return self.max_position_embeddings - FAMILIES[self.arch].reserved_positions(self.pad_token_id)

    @classmethod
    def from_name(cls, name: str) -> Config:
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; presets: {sorted(PRESETS)}")
        return PRESETS[name]

    @classmethod
    def from_hf(cls, hf: dict[str, Any], *, source: str = "config.json") -> Config:
        """Build from a transformers config.json dict (dispatch on its model_type)."""
        fields = convert.config_from_hf(hf, source=source)
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in fields.items() if k in known})

    def to_hf(self, *, classifier: bool = False) -> dict[str, Any]:
        """A transformers config.json dict (BertConfig / RobertaConfig); `classifier`: its
        architecture is *ForSequenceClassification."""
        if self.score_fn != "scaled_dot":
            raise ValueError(f"Config.score_fn {self.score_fn!r} has no transformers equivalent (only 'scaled_dot')")
        return convert.config_to_hf(dataclasses.asdict(self), classifier=classifier)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Config:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown Config field(s) {unknown}")
        return cls(**data)



# Every family's presets by exact name, each the HF config.json cited beside it in convert/hf_config.py.
PRESETS: dict[str, Config] = {name: Config(**fields) for name, fields in convert.hf_config.presets().items()}
