"""Reading and writing weight files: safetensors (memory-mapped), torch pickles, Lightning .ckpt; and
`Files`, how every reader here finds a model's files by name (a local directory, or a hub snapshot
that minialign's sources fetch file by file)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors.torch import save_file

from .errors import CheckpointError
from .mapped import read_safetensors
from .pickles import as_plain, load_pickle

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
SHARD_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


class MissingFileError(CheckpointError, FileNotFoundError):
    """A file the checkpoint needs is not there: caught as either (the checkpoint is incomplete; a file is missing)."""


class Files(Protocol):
    """A model's files by name ("config.json", "1_Pooling/config.json"): its `file` is the path of one,
    None for a missing `optional` one, else a FileNotFoundError saying why (MissingFileError for a
    local one). `str()` names the whole for messages. Implemented by `Directory` and by minialign's
    `Source` (which fetches a hub repo's files as they are asked for)."""

    def file(self, name: str, *, optional: bool = False) -> Path | None: ...

    def files_in(self, folder: str) -> list[str] | None:
        """The names of the files under `folder` (its subfolders' too), as `file` takes them; [] for no such
        folder; None where they cannot be listed (a hub snapshot, whose files are fetched one by one)."""
        ...


@dataclass(frozen=True)
class Directory:
    """The files of a local directory."""

    path: Path

    def file(self, name: str, *, optional: bool = False) -> Path | None:
        path = self.path / name
        if path.is_file():
            return path
        if optional:
            return None
        raise MissingFileError(f"{self.path}: no {name}")

    def files_in(self, folder: str) -> list[str]:
        return sorted(p.relative_to(self.path).as_posix() for p in (self.path / folder).rglob("*") if p.is_file())

    def __str__(self) -> str:
        return str(self.path)


def as_files(where: str | Path | Files) -> Files:
    """A directory path as `Directory`; anything that already finds files by name, as it is."""
    return Directory(Path(where)) if isinstance(where, (str, Path)) else where


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """A flat name -> tensor dict from a .safetensors file or a torch pickle (.bin/.pt)."""
    path = Path(path)
    if path.suffix == ".safetensors":
        return read_safetensors(path)
    obj = load_pickle(path)
    if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
        obj = obj["state_dict"]
    return _check_flat(obj, path)


def _check_flat(obj: Any, path: Path) -> dict[str, torch.Tensor]:
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path}: expected a dict of tensors, found {type(obj).__name__}")
    bad = [k for k, v in obj.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if bad:
        raise CheckpointError(f"{path}: entries that are not named tensors: {bad[:10]}")
    return obj


def find_weights(where: str | Path | Files) -> Path:
    """The weight file of a model directory (or any `Files`), safetensors first."""
    files = as_files(where)
    for name in WEIGHT_FILES:
        if (path := files.file(name, optional=True)) is not None:
            return path
    if any(files.file(name, optional=True) for name in SHARD_INDEXES):
        raise CheckpointError(f"{files}: sharded checkpoints are not supported; merge the shards first")
    raise CheckpointError(f"{files}: no weight file (looked for {', '.join(WEIGHT_FILES)})")


def read_alignscore_ckpt(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(state_dict, hyper_parameters) of an AlignScore PyTorch Lightning checkpoint."""
    path = Path(path)
    obj = load_pickle(path)
    if not isinstance(obj, dict) or not isinstance(obj.get("state_dict"), dict):
        raise CheckpointError(f"{path}: not a Lightning checkpoint (no 'state_dict' entry)")
    hparams = as_plain(obj.get("hyper_parameters") or {})
    return _check_flat(obj["state_dict"], path), hparams


def read_json(path: str | Path, *, expect: type = dict) -> Any:
    """A JSON file's object (or, with expect=list, array); a CheckpointError naming the file otherwise."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: unreadable JSON ({e})") from None
    if not isinstance(data, expect):
        raise CheckpointError(f"{path}: expected a JSON {'object' if expect is dict else 'array'}")
    return data


def write_json(path: str | Path, data: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def write_safetensors(path: str | Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    """Write tensors; a tensor sharing storage with an earlier one is copied so safetensors accepts it.
    The file is written beside its destination and renamed into place: an interrupted write leaves
    the old file whole, and tensors still mapped from the old file stay valid."""
    seen: set[int] = set()
    out = {}
    for name, tensor in tensors.items():
        tensor = tensor.detach().contiguous()
        ptr = tensor.untyped_storage().data_ptr()
        out[name] = tensor.clone() if ptr in seen else tensor
        seen.add(ptr)
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    try:
        save_file(out, str(partial), metadata=metadata)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
