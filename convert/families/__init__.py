"""One file per encoder family's foreign format: its config.json (a hf_config.ConfigRow) and its weight
names (a names.Names), as `FORMAT` in convert/families/<model_type with '-' as '_'>.py. Adding a family
adds its file here; nothing else in convert/ lists the families: `format_of` finds a file by the
model_type's name and `model_types` lists the files. This is the foreign side of the one family registry by
model_type: the model side (minialign/models/<family>.py) declares which format its family reads, and its config
class attaches to the same key (minialign/nn/config.py families()).
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from ..formats import Format


def module_name(model_type: str) -> str:
    """The file of a model_type's format: "deberta-v2" -> deberta_v2."""
    return model_type.replace("-", "_")


@cache
def model_types() -> tuple[str, ...]:
    """Every model_type with a format file here, in file-name order."""
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        found.append(importlib.import_module(f"{__name__}.{info.name}").FORMAT.model_type)
    return tuple(found)


__all__ = ["Format", "format_of", "model_types", "module_name"]


def format_of(model_type: str, *, source: str = "config") -> Format:
    """The format of `model_type` (its file here); a ValueError naming it and the known families otherwise."""
    files = {m.name for m in pkgutil.iter_modules(__path__)}
    if not isinstance(model_type, str) or module_name(model_type) not in files:
        raise ValueError(f"{source}: model_type {model_type!r} is not supported (expected one of "
                         f"{', '.join(map(repr, model_types()))})")
    found = importlib.import_module(f"{__name__}.{module_name(model_type)}").FORMAT
    if found.model_type != model_type:
        raise ValueError(f"convert/families/{module_name(model_type)}.py holds the format of {found.model_type!r}, "
                         f"not {model_type!r}")
    return found
