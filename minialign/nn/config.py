"""Model configuration: the fields every encoder family has, each checked where it is declared; one
registry of the families' own configs, by model_type.

A family's config is a subclass in its own file (minialign/models/<family>.py) declaring only its
fields (ModernBERT's rotary thetas, DeBERTa's disentangled attention) and `format`, its foreign format
(config.json names, defaults, presets, reserved position rows: minialign/convert/families/<family>.py,
read here through `Format`'s methods only, never imported). The family registry is keyed by model_type:
convert/families holds the foreign side (a format file per model_type); declaring `format` attaches the
config class to its format's model_type (`families()`), where `Config(...)`, `Config.from_hf`,
`Config.from_dict` and PRESETS find it, and the family's modules hang off the class (`family`, set by
minialign/models/family.py). Nothing here names a family.

A transformers config.json becomes a Config in one place, `Config.from_hf`: the family's format maps it to
fields (convert: hf_config.fields_from_hf, which refuses custom code) and the family's class types them.

Pattern: text-embeddings-inference backends/candle/src/models/*.rs (one deserialised config per family,
an `enum Config` tagged by `model_type`, lib.rs); transformers' PretrainedConfig subclasses.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, dataclass
from typing import Any, ClassVar, Protocol

import torch

from minialign.nn.activations import ELEMENTWISE
from minialign.nn.choices import TORCH_DTYPE_NAMES
from minialign.nn.score_functions import SCORE_FUNCTIONS

ACTIVATIONS = ELEMENTWISE  # the hidden activations a layer may carry (activations.py)
# transformers PretrainedConfig.problem_type
PROBLEM_TYPES = (None, "regression", "single_label_classification", "multi_label_classification")
# Config.max_seq_len of a family without absolute positions: any length a tokenizer window (< 1e6) allows.
UNBOUNDED_POSITIONS = 1 << 20
DTYPES = {name: getattr(torch, torch_name) for name, torch_name in TORCH_DTYPE_NAMES.items()}  # --dtype's


# -- a field's rule, declared with the field -----------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    """What a field's value must be: `test(value)`, described for the error (`Config.<name> must be
    <description>, got <value>`); `normalise` turns an accepted value into the stored one (JSON's lists
    into tuples)."""

    description: str
    test: Callable[[Any], bool]
    normalise: Callable[[Any], Any] | None = None

    def __call__(self, name: str, value: Any) -> Any:
        if not self.test(value):
            raise ValueError(f"Config.{name} must be {self.description}, got {value!r}")
        return self.normalise(value) if self.normalise is not None else value


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def int_at_least(least: int, description: str | None = None) -> Rule:
    return Rule(description or ("a positive int" if least == 1 else f"an int >= {least}"),
                lambda v: _int(v) and v >= least)


def optional(rule: Rule) -> Rule:
    """None, or what `rule` accepts."""
    return Rule(f"None or {rule.description}", lambda v: v is None or rule.test(v),
                None if rule.normalise is None else (lambda v: None if v is None else rule.normalise(v)))


def one_of(choices: tuple) -> Rule:
    return Rule(f"one of {choices}", lambda v: v in choices)


POSITIVE_INT = int_at_least(1)
ANY_INT = Rule("an int", _int)
BOOL = Rule("a bool", lambda v: isinstance(v, bool))
PROBABILITY = Rule("in [0, 1)", lambda v: _number(v) and 0.0 <= v < 1.0)
POSITIVE_NUMBER = Rule("a positive number", lambda v: _number(v) and v > 0)
ACTIVATION = one_of(ACTIVATIONS)
LABELS = Rule("a sequence of label names",
              lambda v: isinstance(v, (tuple, list)) and all(isinstance(x, str) for x in v),
              tuple)


def _pruned_heads(value: Any) -> tuple[tuple[int, tuple[int, ...]], ...] | None:
    """{layer: [heads]} (JSON's keys are strings: "3") or (layer, heads) pairs, as sorted pairs of ints; None when
    it is neither."""
    items = value.items() if isinstance(value, Mapping) else value
    if not isinstance(items, (list, tuple, type({}.items()))):
        return None
    pairs: dict[int, set[int]] = {}
    for item in items:
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            return None
        layer, heads = item
        if isinstance(layer, str) and layer.isdigit():
            layer = int(layer)
        if not _int(layer) or not isinstance(heads, (list, tuple, set)) or not all(_int(h) for h in heads):
            return None
        pairs.setdefault(layer, set()).update(heads)
    return tuple((layer, tuple(sorted(heads))) for layer, heads in sorted(pairs.items()) if heads)


# transformers PretrainedConfig.pruned_heads (v4): {layer: [heads removed]}, written as {"3": [0, 2]}
PRUNED_HEADS = Rule("a mapping of layer index -> head indices ({3: [0, 2]}) or such (layer, heads) pairs",
                    lambda v: _pruned_heads(v) is not None, _pruned_heads)


def checked(rule: Rule, default: Any = MISSING) -> Any:
    """A dataclass field whose value `rule` checks (and normalises) when the config is made."""
    return dataclasses.field(default=default, metadata={"rule": rule})


class Format(Protocol):
    """What a config reads of its family's foreign format (minialign/convert/families/__init__.py Format)."""

    model_type: str
    presets: dict[str, dict[str, Any]]

    def config_fields(self, hf: dict[str, Any], *, source: str, supported: tuple[str, ...]) -> dict[str, Any]: ...
    def hf_config(self, fields: dict[str, Any], *, classifier: bool) -> dict[str, Any]: ...
    def reserved_positions(self, pad_token_id: int) -> int: ...


_FAMILIES: dict[str, type[Config]] = {}  # model_type -> the family's config class (Config.__init_subclass__)


def _registered() -> dict[str, type[Config]]:
    """The registry, its families declared: each registers as minialign.models imports its file, and the package
    imports nothing at its own import (minialign/__init__.py), so a lookup imports them first; where this runs
    while they are being imported, the ones declared so far (the import system gives the partial package)."""
    importlib.import_module("minialign.models")
    return _FAMILIES


def families() -> dict[str, type[Config]]:
    """Every family's config class, by model_type (its `format`'s), in the order they were declared."""
    return dict(_registered())


def family_config(arch: Any, *, field: str = "Config.arch") -> type[Config]:
    """The config class of the family `arch` names; a ValueError naming the registered ones otherwise."""
    if isinstance(arch, str) and arch in _registered():
        return _FAMILIES[arch]
    raise ValueError(f"{field} must be one of {tuple(_FAMILIES)}, got {arch!r}")


@dataclass(frozen=True)
class Config:
    """The fields every family has. `Config(...)` makes the config of the family `arch` names (BERT's by
    default): `Config(arch="modernbert", rope_theta=...)` is a ModernBertConfig."""

    format: ClassVar[Format | None] = None  # the family's foreign format; declaring it registers the class
    family: ClassVar[Any] = None  # the family's modules (minialign/models/family.py Family), set by it

    vocab_size: int = checked(POSITIVE_INT)
    hidden_size: int = checked(POSITIVE_INT)
    num_layers: int = checked(POSITIVE_INT)
    num_heads: int = checked(POSITIVE_INT)
    intermediate_size: int = checked(POSITIVE_INT)
    max_position_embeddings: int = checked(POSITIVE_INT, 512)
    type_vocab_size: int = checked(int_at_least(0, "an int >= 0"), 2)  # 0 token types: none (DeBERTa-v3)
    layer_norm_eps: float = checked(Rule("> 0", lambda v: _number(v) and v > 0), 1e-12)
    pad_token_id: int = 0  # checked against vocab_size (__post_init__)
    arch: str = "bert"  # the family: a model_type of the registry (families())
    hidden_dropout: float = checked(PROBABILITY, 0.1)
    attention_dropout: float = checked(PROBABILITY, 0.1)
    activation: str = checked(ACTIVATION, "gelu")  # "gelu" is the exact erf form, as BERT's hidden_act "gelu"
    initializer_range: float = 0.02
    tie_word_embeddings: bool = True  # MLM decoder shares the word-embedding matrix
    # alignment-score function (score_functions.py); pretrained weights use scaled_dot
    score_fn: str = checked(one_of(SCORE_FUNCTIONS), "scaled_dot")
    max_relative_distance: int = checked(POSITIVE_INT, 32)  # R of the location-based score: offsets clipped to [-R, R]
    # Sequence classification (transformers *ForSequenceClassification): labels by index (id2label),
    # the problem type, the head's dropout (None: hidden_dropout).
    labels: tuple[str, ...] = checked(LABELS, ())
    problem_type: str | None = checked(one_of(PROBLEM_TYPES), None)
    classifier_dropout: float | None = checked(optional(PROBABILITY), None)
    # Heads removed from layers (transformers v4's prune_heads, Encoder.prune_heads): (layer, heads) pairs, the
    # heads numbered as in the unpruned layer; a model built from the config has them removed.
    pruned_heads: tuple[tuple[int, tuple[int, ...]], ...] = checked(PRUNED_HEADS, ())

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "format" in cls.__dict__:
            _FAMILIES[cls.format.model_type] = cls

    def __new__(cls, *args, **kwargs):
        """The class of the family `arch` names (kwargs only; a family's own class keeps its own)."""
        target = cls
        if "arch" in kwargs or cls.format is None:
            target = family_config(kwargs.get("arch", "bert"))
        known = {f.name for f in dataclasses.fields(target)}
        foreign = sorted(set(kwargs) - known)
        if foreign:
            declaring = [arch for arch, other in _FAMILIES.items()
                         if set(foreign) <= {f.name for f in dataclasses.fields(other)}]
            raise ValueError(f"Config field(s) {foreign} are not fields of the {target.format.model_type} family "
                             f"({target.__name__}); the families declaring them: {declaring}")
        return object.__new__(target)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            rule = f.metadata.get("rule")
            if rule is not None:
                object.__setattr__(self, f.name, rule(f.name, getattr(self, f.name)))
        if self.arch != type(self).format.model_type:
            raise ValueError(f"Config.arch {self.arch!r} does not match {type(self).__name__} "
                             f"({type(self).format.model_type!r})")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"Config.hidden_size ({self.hidden_size}) must be divisible by num_heads "
                             f"({self.num_heads})")
        if not _int(self.pad_token_id) or not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(f"Config.pad_token_id must be in [0, vocab_size), got {self.pad_token_id!r}")
        if self.max_seq_len < 1:
            raise ValueError(f"Config.max_position_embeddings ({self.max_position_embeddings}) leaves no room "
                             f"for {self.arch} positions, which start at pad_token_id + 1")
        for layer, heads in self.pruned_heads:
            if not 0 <= layer < self.num_layers or not all(0 <= h < self.num_heads for h in heads):
                raise ValueError(f"Config.pruned_heads names layer {layer} heads {list(heads)}: layers are "
                                 f"0..{self.num_layers - 1}, heads 0..{self.num_heads - 1}")
            if len(heads) == self.num_heads:
                raise ValueError(f"Config.pruned_heads removes every head of layer {layer}; keep at least one")
        self.check()

    def kept_heads(self, layer: int) -> tuple[int, ...]:
        """The heads layer `layer` keeps (pruned_heads), numbered as in the unpruned layer."""
        pruned = dict(self.pruned_heads).get(layer, ())
        return tuple(h for h in range(self.num_heads) if h not in pruned)

    def check(self) -> None:
        """A family's checks across its fields (one field's own rule is declared with it)."""

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def causal(self) -> bool:
        """Whether every query sees the keys at and before it only (a decoder's mask kind, nn/masks.py causal_keep;
        in a packed row within its own sequence); False, every key, for an encoder. A causal family's config says
        True, from its own fields."""
        return False

    @property
    def embedding_width(self) -> int:
        """The embeddings' width (ELECTRA's and DeBERTa's embedding_size; hidden_size elsewhere)."""
        return self.hidden_size

    @property
    def max_seq_len(self) -> int:
        """Longest input the position table allows (a family whose positions start after the padding id,
        as RoBERTa's, spends pad_token_id + 1 rows: its format's reserved_positions)."""
        return self.max_position_embeddings - type(self).format.reserved_positions(self.pad_token_id)

    @classmethod
    def from_name(cls, name: str) -> Config:
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; presets: {sorted(PRESETS)}")
        return PRESETS[name]

    @classmethod
    def from_hf(cls, hf: dict[str, Any], *, source: str = "config.json") -> Config:
        """A transformers config.json's Config, dispatching on its model_type: the family's format maps it to fields
        (convert.hf_config.fields_from_hf, refusing custom code) and the family's class types them."""
        arch = hf.get("model_type") if isinstance(hf, dict) else None
        if not isinstance(arch, str) or arch not in _registered():
            named = hf.get("architectures") if isinstance(hf, dict) else None
            raise ValueError(f"{source}: model_type {arch!r} ({named or 'no architectures field'}) is not "
                             f"supported; minialign runs {', '.join(map(repr, _FAMILIES))}")
        target = _FAMILIES[arch]
        return target(**target.format.config_fields(hf, source=source, supported=tuple(_FAMILIES)))

    def to_hf(self, *, classifier: bool = False) -> dict[str, Any]:
        """A transformers config.json dict; `classifier`: its architecture is *ForSequenceClassification."""
        if self.score_fn != "scaled_dot":
            raise ValueError(f"Config.score_fn {self.score_fn!r} has no transformers equivalent (only 'scaled_dot')")
        return type(self).format.hf_config(self.to_dict(), classifier=classifier)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Config:
        """A config from to_dict's dict (the "config" of minialign's native config.json): the family `arch` names
        types it; a field the family does not declare is an error naming it."""
        target = family_config(data.get("arch", "bert"))
        unknown = sorted(set(data) - {f.name for f in dataclasses.fields(target)})
        if unknown:
            raise ValueError(f"unknown Config field(s) {unknown}: not fields of the {target.format.model_type} family "
                             f"({target.__name__})")
        return target(**data)


class _Presets(Mapping):
    """Every family's presets by exact name, each the HF config.json cited beside it in the family's
    format file; read from the registry when first asked (families register as minialign.models loads)."""

    def _all(self) -> dict[str, Config]:
        key = tuple(_registered().items())
        if getattr(self, "_key", None) != key:
            self._built = {name: Config.from_hf({"model_type": arch, **hf}, source=f"preset {name}")
                           for arch, cls in key for name, hf in cls.format.presets.items()}
            self._key = key
        return self._built

    def __getitem__(self, name: str) -> Config:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __repr__(self) -> str:
        return f"PRESETS({sorted(self._all())})"


PRESETS: Mapping[str, Config] = _Presets()
