"""Reading .safetensors files through our own memory map, so pages of copied tensors can be given back.

Format (https://github.com/huggingface/safetensors#format): an 8-byte little-endian header size N,
N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
then the data; offsets count from the end of the header.

Tensors are views of a private (copy-on-write) mapping: reading one costs nothing until its pages
are touched, writing one never reaches the file. After a tensor has been copied (cast to another
dtype, fused, moved to a GPU), `release(tensor)` drops its pages from memory; they would be read
from the file again if the tensor were used. This is what keeps loading near one copy of the weights.
"""

from __future__ import annotations

import json
import math
import mmap
import struct
import weakref
from pathlib import Path

import torch

from .errors import CheckpointError

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}
MAX_HEADER = 100 * 2**20  # the reference implementation's limit
# data_ptr of each mapped tensor -> (its map, byte range in the file); entries of closed maps are pruned
_MAPPED: dict[int, tuple[weakref.ref, int, int]] = {}


def read_safetensors(path: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of a .safetensors file, as views of a private memory map (nothing is read until a
    tensor is used; writing to one never reaches the file)."""
    return MappedSafetensors(path).tensors


def release(tensor: torch.Tensor) -> None:
    """Drop from memory the pages holding only this mapped tensor's data; a no-op for any other
    tensor. Call it once the tensor has been copied and its view is no longer used."""
    entry = _MAPPED.get(tensor.data_ptr())
    mapping = entry[0]() if entry else None
    if mapping is None or not hasattr(mapping, "madvise"):
        return
    page = mmap.PAGESIZE
    first, last = -(-entry[1] // page) * page, entry[2] // page * page  # whole pages inside the tensor
    if last > first:
        mapping.madvise(mmap.MADV_DONTNEED, first, last - first)


class MappedSafetensors:
    """The tensors of one .safetensors file, as views of a private memory map."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        with open(self.path, "rb") as f:
            size = f.seek(0, 2)
            if size < 8:
                raise self._error(f"{size} bytes, shorter than the 8-byte header size")
            f.seek(0)
            (header_size,) = struct.unpack("<Q", f.read(8))
            if header_size > MAX_HEADER or 8 + header_size > size:
                raise self._error(f"header of {header_size} bytes does not fit the file's {size} bytes")
            try:
                header = json.loads(f.read(header_size).decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise self._error(f"unreadable header ({e})") from None
            if not isinstance(header, dict):
                raise self._error("the header is not a JSON object")
            self.metadata = header.pop("__metadata__", None) or {}
            entries = self._check(header, size - 8 - header_size)
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) if size > 8 + header_size else None
        self._start = 8 + header_size
        for ptr in [p for p, (ref, _, _) in _MAPPED.items() if ref() is None]:
            del _MAPPED[ptr]
        self.tensors = {name: self._tensor(dtype, shape, begin, end) for name, (dtype, shape, begin, end) in entries.items()}

    def _error(self, problem: str) -> CheckpointError:
        return CheckpointError(f"{self.path}: corrupt or truncated safetensors file ({problem})")

    def _check(self, header: dict, data_size: int) -> dict[str, tuple[torch.dtype, list[int], int, int]]:
        entries = {}
        for name, info in header.items():
            if isinstance(info, dict) and isinstance(info.get("dtype"), str) and info["dtype"] not in DTYPES:
                raise CheckpointError(f"{self.path}: unsupported dtype {info['dtype']} for tensor {name!r} "
                                      f"(minialign reads {', '.join(DTYPES)})")
            try:
                dtype, shape, (begin, end) = DTYPES[info["dtype"]], info["shape"], info["data_offsets"]
                if not all(isinstance(n, int) and n >= 0 for n in (*shape, begin, end)):
                    raise ValueError
            except (KeyError, TypeError, ValueError):
                raise self._error(f"bad entry for {name!r}: {info!r}") from None
            nbytes = math.prod(shape) * dtype.itemsize
            if end - begin != nbytes or end > data_size:
                raise self._error(f"{name!r}: {shape} {info['dtype']} needs {nbytes} bytes, the header gives "
                                  f"[{begin}, {end}) of {data_size}")
            entries[name] = (dtype, shape, begin, end)
        spans = sorted((begin, end, name) for name, (_, _, begin, end) in entries.items() if end > begin)
        for (_, end, name), (begin, _, other) in zip(spans, spans[1:]):
            if begin < end:
                raise self._error(f"the data of {name!r} and {other!r} overlap")
        return entries

    def _tensor(self, dtype: torch.dtype, shape: list[int], begin: int, end: int) -> torch.Tensor:
        if begin == end:
            return torch.empty(shape, dtype=dtype)
        offset = self._start + begin
        if offset % dtype.itemsize:  # unaligned data: a copy rather than a view
            raw = torch.frombuffer(self._map, dtype=torch.uint8, count=end - begin, offset=offset)
            return raw.clone().view(dtype).view(shape)
        t = torch.frombuffer(self._map, dtype=dtype, count=(end - begin) // dtype.itemsize, offset=offset).view(shape)
        _MAPPED[t.data_ptr()] = (weakref.ref(self._map), offset, offset + end - begin)
        return t
