"""Safe reading of pickled checkpoints (`pytorch_model.bin`, Lightning `.ckpt`).

Everything goes through `torch.load(weights_only=True)`: tensors, containers and primitives
only. Lightning's `AttributeDict` (the type of `hyper_parameters`) is admitted under each of its
historical import paths and read as a plain dict subclass defined here, so pytorch_lightning is
not needed. A pickle naming any other global is refused before its code can run.
"""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch

from .errors import CheckpointError


class AttributeDict(dict):
    """Stand-in for Lightning's AttributeDict: a dict, nothing else."""


_LIGHTNING_PATHS = (
    "pytorch_lightning.utilities.parsing.AttributeDict",
    "lightning_fabric.utilities.data.AttributeDict",
    "lightning.fabric.utilities.data.AttributeDict",
    "lightning.pytorch.utilities.parsing.AttributeDict",
)


def load_pickle(path: str | Path) -> Any:
    """Load a torch pickle without running any code it names. Raises CheckpointError."""
    path = Path(path)
    allowed = [(AttributeDict, name) for name in _LIGHTNING_PATHS]
    mmap = zipfile.is_zipfile(path)  # only the zip format can be memory-mapped
    try:
        with torch.serialization.safe_globals(allowed):
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as e:
        first = str(e).strip().splitlines()
        detail = next((line for line in first if "GLOBAL" in line or "global" in line), first[0] if first else "")
        raise CheckpointError(f"{path}: refused to unpickle: {detail.strip()}") from None
    except (RuntimeError, EOFError, OSError, ValueError) as e:
        raise CheckpointError(f"{path}: not a readable torch checkpoint ({type(e).__name__}: {e})") from None


def as_plain(obj: Any) -> Any:
    """AttributeDict -> dict, recursively through dicts and lists."""
    if isinstance(obj, dict):
        return {k: as_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(as_plain(v) for v in obj)
    return obj
