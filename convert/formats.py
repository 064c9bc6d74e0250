"""A family's foreign format: its config.json row (hf_config.ConfigRow) and its weight names (names.Names),
one `Format` per family file (convert/families/<family>.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .hf_config import ConfigRow, fields_from_hf, fields_to_hf
from .names import Names


@dataclass(frozen=True)
class Adapters:
    """A checkpoint's task adapters kept apart from its weights (LoRA: W + scaling * B @ A per task), under
    transformers' names of the weights they update: for each, (A, B, embedding), every task's stacked on the first
    axis in the order of `tasks`; A (task, rank, in) and B (task, out, rank) for a Linear, A (task, num, rank) and
    B (task, rank, dim) for an Embedding (jina's modeling_lora.py, its `swap`)."""

    tasks: tuple[str, ...]
    scaling: float
    layers: dict[str, tuple[Any, Any, bool]]


@dataclass(frozen=True)
class Foreign:
    """Another code base's layout of a family's checkpoints, which the family reads (jina-embeddings-v3's own, custom
    code under model_type "xlm-roberta"): `recognise` its config.json, turn it into the family's (`config`), and its
    tensors into the family's transformers names (`state_dict(tensors, config.json, task)`), merging the adapter of
    `task`, one of `tasks(config.json)`, into the weights (None: none)."""

    name: str
    recognise: Callable[[dict[str, Any]], bool]
    config: Callable[[dict[str, Any]], dict[str, Any]]
    tasks: Callable[[dict[str, Any]], tuple[str, ...]]
    state_dict: Callable[[dict[str, Any], dict[str, Any], str | None], dict[str, Any]]
    # every task's adapter kept apart (`Adapters`, or None where it has none), for a choice per call
    adapters: Callable[[dict[str, Any], dict[str, Any]], Adapters | None] | None = None


@dataclass(frozen=True)
class Format:
    """A family's foreign format: its config.json row and its weight names. What the model side reads of
    it (minialign/nn/config.py, by these methods only)."""

    config: ConfigRow
    names: Names
    foreign: Foreign | None = None  # another code base's layout the family reads too

    @property
    def model_type(self) -> str:
        return self.config.model_type

    @property
    def ported_code(self) -> tuple[str, ...]:
        """The custom code (auto_map classes) its transformers classes port (ConfigRow.ported_code)."""
        return self.config.ported_code

    @property
    def presets(self) -> dict[str, dict[str, Any]]:
        """Preset name -> the config.json it mirrors (without model_type)."""
        return self.config.presets

    def config_fields(self, hf: dict[str, Any], *, source: str = "config.json",
                      supported: tuple[str, ...] = ()) -> dict[str, Any]:
        """A config.json of this family as minialign config fields (hf_config.fields_from_hf)."""
        return fields_from_hf(hf, self.config, source=source, supported=supported)

    def hf_config(self, fields: dict[str, Any], *, classifier: bool = False) -> dict[str, Any]:
        """minialign config fields as this family's config.json (hf_config.fields_to_hf)."""
        return fields_to_hf(fields, self.config, classifier=classifier)

    def reserved_positions(self, pad_token_id: int) -> int:
        """Rows of the position table no token's position can use (ConfigRow.reserved_positions)."""
        return self.config.reserved_positions(pad_token_id)
