"""convert's functions by model_type: each finds the family's format file (families/) and calls the
machinery of hf_config.py / names.py with it. A family may also be given as its Format (what a minialign
config class carries: Config.format) or its Names. Weight-name errors say which other families the names
fit (every family with a format file).

Also the views by model_type: FAMILIES (config rows), NAMES, TABLES, MODEL_PREFIX, MLM_PREFIX (formerly module
constants of hf_config.py and names.py, where the families' rows and tables lived).
"""

from __future__ import annotations

from typing import Any

import torch

from .families import format_of, model_types
from .formats import Format
from .hf_config import refuse_foreign
from .names import Names
from .names import alignscore_to_minialign as _alignscore_to_minialign
from .names import hf_to_minialign as _hf_to_minialign
from .names import minialign_to_alignscore as _minialign_to_alignscore
from .names import minialign_to_hf as _minialign_to_hf
from .names import split_hf_backbone as _split_hf_backbone

Family = str | Format | Names  # a model_type, a family's Format, or its Names alone


def _every_family() -> dict[str, Names]:
    return {model_type: format_of(model_type).names for model_type in model_types()}


def config_from_hf(hf: dict[str, Any], *, source: str = "config.json") -> dict[str, Any]:
    """Map an HF config dict to minialign field names. Dispatches on `model_type`, never on a name."""
    arch = hf.get("model_type") if isinstance(hf, dict) else None
    ported = format_of(arch).ported_code if isinstance(arch, str) and arch in model_types() else ()
    refuse_foreign(hf, source=source, supported=model_types(), ported=ported)
    return format_of(hf["model_type"], source=source).config_fields(hf, source=source, supported=model_types())


def foreign_format(hf: dict[str, Any]) -> Format | None:
    """The family whose Format.foreign recognises this config.json (another code base's layout of it, jina's
    XLMRobertaLoRA), or None: the config.json is read by its model_type."""
    for model_type in model_types():
        found = format_of(model_type)
        if found.foreign is not None and found.foreign.recognise(hf):
            return found
    return None


def config_to_hf(fields: dict[str, Any], *, classifier: bool = False) -> dict[str, Any]:
    """Map minialign config fields back to an HF config dict that transformers' AutoConfig reads;
    `classifier`: the weights are a *ForSequenceClassification's."""
    return format_of(fields["arch"]).hf_config(fields, classifier=classifier)


def presets() -> dict[str, dict[str, Any]]:
    """Every family's presets as minialign config fields, by exact name."""
    return {name: config_from_hf({"model_type": arch, **hf}, source=f"preset {name}")
            for arch in model_types() for name, hf in format_of(arch).presets.items()}


def hf_to_minialign(state_dict: dict[str, torch.Tensor], family: Family, *,
                    source: str = "checkpoint") -> tuple[dict[str, torch.Tensor], list[str]]:
    """convert.names.hf_to_minialign for `family` (a model_type, Format or Names)."""
    return _hf_to_minialign(state_dict, _fam(family), source=source, others=_every_family())


def alignscore_to_minialign(state_dict: dict[str, torch.Tensor], family: Family, *,
                            source: str = "checkpoint") -> tuple[dict[str, torch.Tensor], list[str]]:
    """convert.names.alignscore_to_minialign for `family` (a model_type, Format or Names)."""
    return _alignscore_to_minialign(state_dict, _fam(family), source=source, others=_every_family())


def minialign_to_hf(state_dict: dict[str, torch.Tensor], family: Family, *,
                    token_head: bool = False) -> dict[str, torch.Tensor]:
    return _minialign_to_hf(state_dict, _fam(family), token_head=token_head)


def minialign_to_alignscore(state_dict: dict[str, torch.Tensor], family: Family) -> dict[str, torch.Tensor]:
    return _minialign_to_alignscore(state_dict, _fam(family))


def split_hf_backbone(hf_state_dict: dict[str, torch.Tensor], family: Family) -> tuple[dict, dict]:
    return _split_hf_backbone(hf_state_dict, _fam(family))


def _fam(family: Family) -> Format | Names:
    """The family as names.py takes it: a model_type becomes its Format."""
    return format_of(family) if isinstance(family, str) else family


_VIEWS = {"FAMILIES": lambda f: f.config, "NAMES": lambda f: f.names, "TABLES": lambda f: f.names.table,
          "MODEL_PREFIX": lambda f: f.names.model_prefix, "MLM_PREFIX": lambda f: f.names.mlm_prefix}


def __getattr__(name: str):
    """FAMILIES, NAMES, TABLES, MODEL_PREFIX, MLM_PREFIX: model_type -> its row / names / table / prefixes."""
    if name in _VIEWS:
        return {model_type: _VIEWS[name](format_of(model_type)) for model_type in model_types()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
