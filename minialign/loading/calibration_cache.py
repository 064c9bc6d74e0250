"""dtype="int8"'s calibration, kept on disk: a model loaded again in int8 reads its statistics instead of running the
fp32 calibration pass (most of an int8 load: 3 of 5 s for all-MiniLM-L6-v2 on a busy 2-core machine).

What is kept: each quantized layer's `int8_input_absmax` (nn/int8.py `calibrating`: the largest |X[:, k]| its
input had over the built-in calibration text), in one safetensors file named by a digest of everything the
statistics depend on: every weight and buffer of the model (its bytes, names, shapes and dtypes), the tokenizer
(its JSON), the calibration texts, whether pairs are calibrated too, the window, the quantization SCHEME, and what
computes the fp32 pass (minialign's and torch's versions, the CPU kind and its fp32 kernel: nn/linear.py; another
kernel gives the statistics other rounding). Any change to one of them is another file, so a stale file is never
read. A read that fails (a missing, truncated or
foreign file) calibrates as before; a write that fails (a read-only cache) is skipped: the cache can only save time.

Where: $MINIALIGN_CACHE_DIR, else $XDG_CACHE_HOME/minialign, else ~/.cache/minialign; under it int8/<digest>.safetensors
(about 4 bytes per input feature of each quantized layer: 37 kB for all-MiniLM-L6-v2). MINIALIGN_CACHE_DIR=none turns
it off. The statistics read back are the bits the calibration wrote, so a model's answers are the same either way
(tested).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from minialign.nn import int8, linear

OFF = "none"


def directory() -> Path | None:
    """The cache's root (module docstring), or None when turned off."""
    chosen = os.environ.get("MINIALIGN_CACHE_DIR")
    if chosen is not None:
        return None if chosen.strip().lower() in (OFF, "") else Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "minialign"


def key(model: nn.Module, tokenizer_json: str, texts: Sequence[str], *, pairs: bool, window: int) -> str:
    """The digest naming a model's statistics (module docstring: what they depend on)."""
    from minialign import __version__

    digest = hashlib.blake2b(digest_size=20)
    digest.update(f"{int8.SCHEME}|pairs={pairs}|window={window}|".encode())
    digest.update(f"minialign={__version__}|torch={torch.__version__}|{linear.cpu_kind()}|"
                  f"packed={linear.packs_fp32()}|".encode())
    for name, tensor in sorted({**dict(model.named_parameters()), **dict(model.named_buffers())}.items()):
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{tuple(tensor.shape)}|{tensor.dtype}|".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    digest.update(tokenizer_json.encode())
    for text in texts:
        digest.update(text.encode() + b"\0")
    return digest.hexdigest()


def _path(digest: str) -> Path | None:
    root = directory()
    return None if root is None else root / "int8" / f"{digest}.safetensors"


def load(model: nn.Module, digest: str) -> bool:
    """Give each quantized layer of `model` its kept statistics; False (nothing changed) where the file is missing
    or does not hold every layer's."""
    path = _path(digest)
    if path is None or not path.is_file():
        return False
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        kept = load_file(str(path))
    except (OSError, SafetensorError, ValueError):
        return False
    layers = {name: module for name, module in model.named_modules() if isinstance(module, int8.Int8Linear)}
    if set(kept) != set(layers) or any(kept[n].shape != (layers[n].in_features,) for n in layers):
        return False
    for name, layer in layers.items():
        layer.int8_input_absmax = kept[name]
    return True


def save(model: nn.Module, digest: str) -> None:
    """Keep the quantized layers' statistics under `digest` (written whole, then renamed into place); skipped
    where the cache is off, a layer has none, or the directory cannot be written."""
    path = _path(digest)
    if path is None:
        return
    stats = {name: module.int8_input_absmax for name, module in model.named_modules()
             if isinstance(module, int8.Int8Linear)}
    if not stats or any(v is None for v in stats.values()):
        return
    from safetensors.torch import save_file

    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({name: value.contiguous() for name, value in stats.items()}, str(partial))
        os.replace(partial, path)
    except OSError:
        try:
            partial.unlink(missing_ok=True)
        except OSError:  # the directory itself could not be made
            pass
