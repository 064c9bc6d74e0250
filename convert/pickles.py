"""Safe reading of pickled checkpoints (`pytorch_model.bin`, Lightning `.ckpt`).

First `torch.load(weights_only=True)`, torch's own allow-list. Lightning checkpoints fail there
(their `hyper_parameters` is an `AttributeDict`, a dict subclass torch's unpickler cannot fill),
so they go through `RestrictedUnpickler`: it admits only the globals tensors need, builtin
containers and primitives, and AttributeDict (under each of its historical import paths) read
as a plain dict, with no pytorch_lightning needed. A pickle naming any other global is refused
before the global is even imported, so its code never runs.
"""

from __future__ import annotations

import pickle
import types
import zipfile
from pathlib import Path
from typing import Any

import torch

from .errors import CheckpointError


class AttributeDict(dict):
    """Stand-in for Lightning's AttributeDict: a dict, nothing else."""


_LIGHTNING_PATHS = (
    ("pytorch_lightning.utilities.parsing", "AttributeDict"),
    ("lightning_fabric.utilities.data", "AttributeDict"),
    ("lightning.fabric.utilities.data", "AttributeDict"),
    ("lightning.pytorch.utilities.parsing", "AttributeDict"),
)
# What torch.save writes for tensors, parameters and their metadata.
_TORCH_GLOBALS = {
    ("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_tensor"),
    ("torch._utils", "_rebuild_parameter"), ("torch._utils", "_rebuild_parameter_with_state"),
    ("torch._tensor", "_rebuild_from_type_v2"), ("torch", "Size"), ("torch", "device"),
    ("torch.serialization", "_get_layout"), ("torch", "Tensor"), ("torch.nn.parameter", "Parameter"),
}
_BUILTINS = {
    ("collections", "OrderedDict"), ("collections", "defaultdict"), ("builtins", "set"), ("builtins", "frozenset"),
    ("builtins", "slice"), ("builtins", "complex"), ("builtins", "bytearray"), ("_codecs", "encode"),
}


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves only allow-listed globals (see module docstring)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _LIGHTNING_PATHS:
            return AttributeDict
        if (module, name) in _TORCH_GLOBALS or (module, name) in _BUILTINS:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), (torch.dtype, torch.layout)):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"refused global {module}.{name}: not a tensor, container or primitive")


_restricted = types.ModuleType("minialign_restricted_pickle")
_restricted.Unpickler = RestrictedUnpickler
_restricted.load = lambda f, **kw: RestrictedUnpickler(f, **kw).load()
_restricted.UnpicklingError = pickle.UnpicklingError
_restricted.__name__ = "pickle"  # torch.load only inspects the name to pick the default protocol


def _not_a_checkpoint(path: Path) -> str | None:
    """Why `path` cannot be a torch checkpoint, from its first bytes, or None if it may be one. torch.save
    writes a zip archive (since torch 1.6) or, in the legacy format, a pickle of protocol 2 or more,
    which starts with the PROTO opcode 0x80."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:  # missing, a directory, unreadable: torch.load says which
        return None
    if not head:
        return f"{path} is empty, not a torch checkpoint"
    if head.startswith(b"PK"):
        return f"{path} is a damaged zip archive (truncated or corrupt), not a readable torch checkpoint"
    if head[0] != 0x80:
        return f"{path} is not a torch checkpoint (neither a zip archive nor a torch pickle; it begins {head!r})"
    return None


def load_pickle(path: str | Path) -> Any:
    """Load a torch pickle without running any code it names. Raises CheckpointError."""
    path = Path(path)
    mmap = zipfile.is_zipfile(path)  # only the zip format can be memory-mapped
    if not mmap and (problem := _not_a_checkpoint(path)):
        raise CheckpointError(problem)
    try:
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
        except pickle.UnpicklingError:  # e.g. Lightning's AttributeDict: retry with our allow-list
            return torch.load(path, map_location="cpu", weights_only=False, mmap=mmap, pickle_module=_restricted)
    except pickle.UnpicklingError as e:
        raise CheckpointError(f"{path}: refused to unpickle ({e})") from None
    except (RuntimeError, EOFError, OSError, ValueError, AttributeError, TypeError, KeyError) as e:
        raise CheckpointError(f"{path}: not a readable torch checkpoint ({type(e).__name__}: {e})") from None


def as_plain(obj: Any) -> Any:
    """AttributeDict -> dict, recursively through dicts and lists."""
    if isinstance(obj, dict):
        return {k: as_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(as_plain(v) for v in obj)
    return obj
