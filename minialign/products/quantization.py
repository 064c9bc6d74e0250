"""Smaller dense embeddings: Matryoshka truncation and scalar / binary quantization, as sentence-transformers has them.

    E = emb.encode(texts, truncate_dim=256, normalize_embeddings=True)   # the first 256 dimensions, then unit length
    Q = quantize_embeddings(E, "ubinary")                                # (N, 32) uint8: one bit per dimension

Truncation (sentence-transformers util/tensor.py `truncate_embeddings`): the first `truncate_dim` dimensions, applied
before `normalize_embeddings` (SentenceTransformer._inference truncates the pipeline's output, then normalizes), so
a model whose pipeline ends in Normalize gives truncated vectors that are no longer unit length unless the call asks
for normalization: the same as sentence-transformers.

Quantization (sentence-transformers util/quantization.py `quantize_embeddings`, the same arithmetic in float32):

- "int8" / "uint8": per dimension, 256 buckets between a minimum and a maximum (`ranges`, shape (2, D)); without
  `ranges`, from `calibration_embeddings`; without those, from the embeddings themselves. A bucket is
  floor((x - min) / ((max - min) / 255)) clipped to [0, 255] (a step of 0 counts as 1); int8 subtracts 128.
  Ranges taken from the embeddings themselves make a text's code depend on what it is quantized with (and
  sentence-transformers refuses a single embedding for that reason): pass `ranges` or `calibration_embeddings` for
  codes that are the same whatever the batch.
- "binary" / "ubinary": one bit per dimension, x > 0, packed 8 to a byte with the first dimension in the highest bit
  (numpy.packbits); the last byte zero-filled; "binary" stores each byte minus 128 as int8.
- "float32": the embeddings as float32.

Returned as torch tensors (sentence-transformers returns numpy arrays; `.numpy()` gives the same values).
"""

from __future__ import annotations

import torch
from torch import Tensor

from minialign.products.choices import PRECISIONS

BUCKETS = 255  # the steps between a dimension's minimum and maximum: 256 codes


def check_precision(precision: str) -> str:
    """`precision` if it is one of PRECISIONS, else a ValueError naming it and them."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not supported, must be one of {list(PRECISIONS)}")
    return precision


def check_truncate_dim(truncate_dim: int | None, dimension: int | None = None) -> int | None:
    """A positive int (or None: no truncation); above `dimension` it keeps every dimension, as slicing does."""
    if truncate_dim is None:
        return None
    if isinstance(truncate_dim, bool) or not isinstance(truncate_dim, int) or truncate_dim <= 0:
        raise ValueError(f"truncate_dim must be a positive integer or None, got {truncate_dim!r}")
    return truncate_dim if dimension is None else min(truncate_dim, dimension)


def truncate_embeddings(embeddings: Tensor, truncate_dim: int | None) -> Tensor:
    """The first `truncate_dim` dimensions of each embedding (None: all), sentence-transformers'
    util/tensor.py `truncate_embeddings`."""
    return embeddings[..., :check_truncate_dim(truncate_dim)]


def quantization_ranges(embeddings: Tensor, precision: str, calibration_embeddings: Tensor | None = None) -> Tensor:
    """(2, D): each dimension's minimum and maximum over `calibration_embeddings`, else over `embeddings` (more than
    one of them: sentence-transformers' _get_quantization_ranges refuses a single one)."""
    if calibration_embeddings is None:
        if embeddings.dim() == 1 or embeddings.size(0) == 1:
            raise ValueError(f"cannot compute {precision} quantization ranges from a single embedding: give ranges= "
                             "or calibration_embeddings= from a representative set of embeddings")
        calibration_embeddings = embeddings
    calibration = torch.as_tensor(calibration_embeddings, dtype=torch.float32)
    if calibration.dim() != 2 or calibration.size(0) == 0:
        raise ValueError(f"calibration_embeddings must be a non-empty (N, D) matrix, got shape {tuple(calibration.shape)}")
    return torch.stack([calibration.amin(dim=0), calibration.amax(dim=0)])


def quantize_embeddings(embeddings: Tensor, precision: str, *, ranges: Tensor | None = None,
                        calibration_embeddings: Tensor | None = None) -> Tensor:
    """`embeddings` (..., D) float in `precision` (module docstring: the rule of each, sentence-transformers'
    quantize_embeddings); `ranges` (2, D) or `calibration_embeddings` (N, D) fix the int8 / uint8 buckets."""
    check_precision(precision)
    x = torch.as_tensor(embeddings)
    if not x.is_floating_point():
        raise ValueError(f"embeddings to quantize must be floating point, got {x.dtype}")
    x = x.detach().to(device="cpu", dtype=torch.float32)
    if precision == "float32":
        return x
    if precision in ("int8", "uint8"):
        if x.dim() == 2 and x.size(0) == 0 and ranges is None:  # nothing to calibrate on, nothing to code
            return torch.zeros(0, x.size(1), dtype=getattr(torch, precision))
        if ranges is None:
            ranges = quantization_ranges(x, precision, calibration_embeddings)
        ranges = torch.as_tensor(ranges, dtype=torch.float32)
        if ranges.shape != (2, x.size(-1)):
            raise ValueError(f"ranges must have shape (2, {x.size(-1)}) (each dimension's minimum and maximum), "
                             f"got {tuple(ranges.shape)}")
        starts = ranges[0]
        steps = (ranges[1] - starts) / BUCKETS
        steps = torch.where(steps == 0, torch.ones_like(steps), steps)
        codes = torch.floor((x - starts) / steps).clamp(0, BUCKETS)
        return codes.to(torch.uint8) if precision == "uint8" else (codes - 128).to(torch.int8)
    packed = pack_bits(x > 0)
    return packed if precision == "ubinary" else (packed.to(torch.int16) - 128).to(torch.int8)


def pack_bits(bits: Tensor) -> Tensor:
    """numpy.packbits(bits, axis=-1): (..., D) bool -> (..., ceil(D / 8)) uint8, the first of each 8 in the highest
    bit, the last byte filled with zeros."""
    width = bits.size(-1)
    padded = torch.nn.functional.pad(bits.to(torch.uint8), (0, -width % 8))
    weights = torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.uint8)
    return (padded.unflatten(-1, (-1, 8)) * weights).sum(dim=-1, dtype=torch.uint8)
