"""A .safetensors output's layouts: a job's records -> named tensors (run.Job.tensors). `stacked` (one vector per
record), `ragged` (a list of vectors per record, with offsets) and `sparse` (CSR's indices, values and offsets);
`tensor_layout` puts several in one file."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

TensorLayout = Callable[[list[dict[str, Any]]], dict[str, torch.Tensor]]


def stacked(key: str, *, name: str | None = None, dtype: torch.dtype = torch.float32, width: int = 0) -> TensorLayout:
    """One vector per record (record[key]) as one (N, D) tensor `name` (default: the key); no records: (0, width)."""
    def layout(records: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        rows = [torch.as_tensor(r[key], dtype=dtype) for r in records]
        return {name or key: torch.stack(rows) if rows else torch.empty(0, width, dtype=dtype)}

    return layout


def ragged(key: str, *, name: str | None = None, offsets: str = "offsets", width: int = 0) -> TensorLayout:
    """A list of vectors per record (record[key], each text's own count) as one (total vectors, D) float32 tensor
    `name` (default: the key), the records' vectors one after the other, and `offsets` (N + 1,) int64: record i's
    vectors are rows offsets[i]:offsets[i + 1]."""
    def layout(records: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        parts = [torch.as_tensor(r[key], dtype=torch.float32).reshape(-1, width) for r in records]
        return {name or key: torch.cat(parts) if parts else torch.empty(0, width),
                offsets: _offsets([len(p) for p in parts])}

    return layout


def sparse(indices: str, values: str | None = None, *, prefix: str = "") -> TensorLayout:
    """Sparse rows (record[indices]: ints, ascending; record[values]: their floats) as CSR's three tensors:
    `<prefix>indices` (nnz,) int64 and `<prefix>values` (nnz,) float32, the records' entries one after the other,
    and `<prefix>offsets` (N + 1,) int64: record i's entries are offsets[i]:offsets[i + 1]. values=None:
    record[indices] is a dict {index: value} (keys possibly strings, as BGE-M3's lexical weights), written by
    ascending index."""
    def layout(records: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        rows = [sorted((int(k), float(v)) for k, v in r[indices].items()) if values is None
                else list(zip(r[indices], r[values])) for r in records]
        flat = [entry for row in rows for entry in row]
        return {f"{prefix}indices": torch.tensor([i for i, _ in flat], dtype=torch.int64),
                f"{prefix}values": torch.tensor([v for _, v in flat], dtype=torch.float32),
                f"{prefix}offsets": _offsets([len(row) for row in rows])}

    return layout


def tensor_layout(*layouts: TensorLayout) -> TensorLayout:
    """Several layouts' tensors in one file (their names must differ)."""
    def layout(records: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        for part in layouts:
            made = part(records)
            if clash := set(made) & set(out):
                raise ValueError(f"two layouts write the tensor(s) {sorted(clash)}")
            out.update(made)
        return out

    return layout


def _offsets(counts: list[int]) -> torch.Tensor:
    return torch.tensor([0, *counts], dtype=torch.int64).cumsum(0)
