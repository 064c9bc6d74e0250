"""convert's functions by model_type: each finds the family's format file (families/, the foreign side of the
one family registry, which the model side's config classes attach to by the same model_type) and calls the
machinery of hf_config.py / names.py with it. A family may also be given as its Format (what a minialign
config class carries: Config.format) or its Names. Weight-name errors say which other families the names
fit (every family with a format file).
"""

from __future__ import annotations

from typing import Any

import torch

from .families import format_of, model_types
from .formats import Format
from .names import Names
from .names import alignscore_to_minialign as _alignscore_to_minialign
from .names import hf_to_minialign as _hf_to_minialign
from .names import minialign_to_alignscore as _minialign_to_alignscore
from .names import minialign_to_hf as _minialign_to_hf
from .names import split_hf_backbone as _split_hf_backbone

Family = str | Format | Names  # a model_type, a family's Format, or its Names alone


def _every_family() -> dict[str, Names]:
    return {model_type: format_of(model_type).names for model_type in model_types()}


def foreign_format(hf: dict[str, Any]) -> Format | None:
    """The family whose Format.foreign recognises this config.json (another code base's layout of it, jina's
    XLMRobertaLoRA), or None: the config.json is read by its model_type."""
    for model_type in model_types():
        found = format_of(model_type)
        if found.foreign is not None and found.foreign.recognise(hf):
            return found
    return None


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

