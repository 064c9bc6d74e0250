"""Caches of activations: a capture saved to one safetensors file and loaded back, stacked by layer, cut to its real
tokens, and a dataset's activations streamed to shards of tokens for probes and sparse autoencoders.

    save(cap, "run.safetensors", real_only=True)     # one file: tensors by name, the masks, what they are
    cap = load("run.safetensors")                     # a Capture holding the same bits
    stacked(cap, "layers.*.output")                   # (layers, B, L, C), layers.10 after layers.9
    residual_stream(cap)                              # (layers + 1, B, L, C): each layer's input, the last output
    real_rows(cap, "layers.3.output")                 # (T, C): the real tokens of every text, in order

    cache_dataset(model, batches, ["layers.*.output"], "acts/", shard_size=65536)
    acts = Activations("acts/")                       # read shard by shard (safetensors' safe_open)
    for rows in acts.iter("layers.3.output", 1024, shuffle_seed=0): ...   # (n, C) to train a probe or an SAE

The anchors: TransformerLens' `ActivationCache` (transformer_lens/ActivationCache.py: `stack_activation` stacks one
activation over layers; here `stacked` takes any pattern of `capture.matches`) and SAELens' cached activations
(sae_lens/cache_activations_runner.py: a model run once over a dataset, each hook's activations per token written to
disk, then read in shuffled batches by the training store; here safetensors shards beside an index.json).

The token axis of an activation is read from its name (interventions.activation_layout): (B, L, ...) and per head
(B, H, L, ...) have one; the pooler's (B, C) and the tables every sequence shares do not, and are kept whole. Real
tokens are those of the forward's attention_mask (capture.real_tokens: `cap.reals`, one mask per forward); a
per-head activation's real tokens are (T, H, ...). Attention maps (B, H, L, L) keep their key axis whole (padded
keys included): (T, H, L).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import torch
import torch.nn as nn
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor

from minialign import __version__
from minialign.nn.capture import Capture, capture, matches
from minialign.nn.interventions import activation_layout

RESERVED = "__"  # names starting with it are the file's own (masks, token indices), never an activation's
CAPTURE_FORMAT = "minialign.capture"  # a saved capture's metadata "format"
SHARDS_FORMAT = "minialign.activations"  # a cache_dataset directory's index.json "format", and its shards'
INDEX = "index.json"
REAL = "__real__.{}"  # a saved capture's mask of forward {} ((B|1, L) bool)
TOKENS = "__tokens__"  # a shard's (n, 2) int64: each row's document (counted over the dataset) and position


def _base(name: str) -> str:
    """The activation's name without its call number ("layers.0.output#2" -> "layers.0.output")."""
    return name.split("#", 1)[0]


def _call(name: str) -> int:
    """Which forward recorded `name`: "x" the first (0), "x#n" the n-th after it (a capture numbers repeats)."""
    return int(name.split("#", 1)[1]) if "#" in name else 0


def _token_axis(name: str) -> int | None:
    """The token axis of an activation, from its name: 1 for (B, L, ...) (and a module path's record, "x:output",
    read as one: every module of an encoder's layers reads and writes (B, L, ...)), 2 per head (B, H, L, ...), None
    without (the pooler's, the shared tables)."""
    return {"token": 1, "module": 1, "head": 2}.get(activation_layout(_base(name)))


def _mask(real: Tensor | None, tensor: Tensor, axis: int, name: str) -> Tensor:
    """(B, L) bool: `real` for `tensor`'s batch, every token where it is None."""
    batch, length = tensor.size(0), tensor.size(axis)
    if real is None:
        return torch.ones(batch, length, dtype=torch.bool, device=tensor.device)
    if real.size(-1) != length or real.size(0) not in (1, batch):
        raise ValueError(f"{name} is {tuple(tensor.shape)}, with {length} tokens on its token axis ({axis}), and the "
                         f"attention_mask of its forward {tuple(real.shape)}: its real tokens cannot be told")
    return real.to(tensor.device).expand(batch, length)


def _cut(tensor: Tensor, axis: int, mask: Tensor) -> Tensor:
    """The rows of `mask`'s tokens: (B, L, ...) -> (T, ...); per head (B, H, L, ...) -> (T, H, ...)."""
    return tensor.movedim(axis, 1)[mask] if axis == 2 else tensor[mask]


def _get(cap: Capture, name: str) -> Tensor:
    if name not in cap.tensors:
        close = difflib.get_close_matches(name, list(cap.tensors), n=5, cutoff=0.5)
        raise KeyError(f"the capture holds no {name!r}" + (f"; close: {', '.join(close)}" if close else ""))
    return cap.tensors[name]


def _real_of(cap: Capture, name: str) -> Tensor | None:
    reals, n = cap.reals, _call(name)
    if n >= len(reals):
        raise ValueError(f"{name} is the record of forward {n} and the capture holds {len(reals)} forwards' masks")
    return reals[n]


def real_rows(cap: Capture, name: str) -> Tensor:
    """The real tokens of one activation: (B, L, ...) -> (T, ...), per head (B, H, L, ...) -> (T, H, ...), text by
    text and in position order, T the real tokens of the forward that recorded it ("name#n": the n-th forward after
    the first; its mask in `cap.reals`). An activation without a token axis (pooler.output, relative.table) is an
    error. `token_index` says which document and position each row is."""
    tensor = _get(cap, name)
    axis = _token_axis(name)
    if axis is None:
        raise ValueError(f"{name} has no token axis ({activation_layout(_base(name))} layout): it has no real "
                         f"tokens to take")
    return _cut(tensor, axis, _mask(_real_of(cap, name), tensor, axis, name))


def token_index(cap: Capture, name: str) -> Tensor:
    """(T, 2) int64, the document (row of the batch) and position of each row of `real_rows(cap, name)`."""
    tensor = _get(cap, name)
    axis = _token_axis(name)
    if axis is None:
        raise ValueError(f"{name} has no token axis")
    return _mask(_real_of(cap, name), tensor, axis, name).nonzero().cpu()


def matching(cap: Capture, pattern: str) -> list[str]:
    """The names of `cap` that match `pattern` (capture.matches), in layer order: numbers compared as numbers
    (layers.10 after layers.9). None is an error naming the close ones."""
    names = [name for name in cap.tensors if matches(name, pattern)]
    if not names:
        close = difflib.get_close_matches(pattern, list(cap.tensors), n=5, cutoff=0.5)
        raise ValueError(f"no name of the capture matches {pattern!r}" + (f"; close: {', '.join(close)}" if close
                                                                          else f" (it holds {len(cap.tensors)})"))
    return sorted(names, key=lambda name: [(0, int(part), "") if part.isdigit() else (1, 0, part)
                                           for part in re.split(r"[.#]", name)])


def stacked(cap: Capture, pattern: str = "layers.*.output") -> Tensor:
    """Every activation matching `pattern` stacked in layer order (`matching`): (layers, ...), as TransformerLens'
    `ActivationCache.stack_activation`. Shapes that differ are an error naming the first two."""
    names = matching(cap, pattern)
    first = cap.tensors[names[0]]
    for name in names[1:]:
        if cap.tensors[name].shape != first.shape:
            raise ValueError(f"{pattern!r} matches activations of different shapes: {names[0]} "
                             f"{tuple(first.shape)}, {name} {tuple(cap.tensors[name].shape)}")
    return torch.stack([cap.tensors[name] for name in names])


def residual_stream(cap: Capture, *, prefix: str = "") -> Tensor:
    """The residual stream entering each layer and leaving the last: (layers + 1, ...), TransformerLens'
    `ActivationCache.accumulated_resid` (each block's resid_pre, then the last resid_post; no final norm applied).
    Read from the names every family records: `layers.{i}.input`, then the last layer's `output` (DeBERTa-v2's
    `layers.0.conv.output` where a one-layer model's convolution ends it). prefix: the encoder's path in a head
    model ("encoder."). Capture "layers.*.input" and "layers.*.output" (or every name) for it."""
    inputs = matching(cap, f"{prefix}layers.*.input")
    last = inputs[-1].removesuffix(".input")
    end = next((name for name in (f"{last}.conv.output", f"{last}.output") if name in cap.tensors), None)
    if end is None:
        raise ValueError(f"the capture holds no {last}.output: capture the last layer's output too")
    return torch.stack([cap.tensors[name] for name in [*inputs, end]])


# -- one capture, one file ----------------------------------------------------------------------------------------

def _owned(tensor: Tensor, storages: set[int]) -> Tensor:
    """A CPU tensor owning its memory alone (safetensors refuses tensors sharing it: a layer's output is often the
    next one's input)."""
    tensor = tensor.detach().cpu().contiguous()
    storage = tensor.untyped_storage()
    if storage.data_ptr() in storages or storage.nbytes() != tensor.numel() * tensor.element_size():
        tensor = tensor.clone()
    storages.add(tensor.untyped_storage().data_ptr())
    return tensor


def save(cap: Capture, path: str | Path, *, real_only: bool = False) -> None:
    """Write a capture to one safetensors file: each activation under its name (on the CPU, contiguous, detached:
    a capture(detach=False)'s graph is not saved, its values are; the metadata keeps its detach flag), each
    forward's real-token mask under "__real__.{i}", and in the metadata (str -> str, JSON) the names in order, each
    one's shape and layout, the detach flag, the minialign version and the model's class.
    real_only: each activation with a token axis is stored as its real tokens only (`real_only`: (T, ...), per
    head (T, H, ...)); the masks kept beside them say which document and position each row is, so `load` rebuilds
    the padded tensor. One without a token axis is stored whole."""
    path = Path(path)
    storages: set[int] = set()
    tensors: dict[str, Tensor] = {}
    shapes, layouts, cut_names = {}, {}, []
    for name, tensor in cap.tensors.items():
        if name.startswith(RESERVED):
            raise ValueError(f"{name}: names starting with {RESERVED!r} are the file's own")
        shapes[name], layouts[name] = list(tensor.shape), activation_layout(_base(name))
        if real_only and _token_axis(name) is not None:
            axis = _token_axis(name)
            tensor = _cut(tensor, axis, _mask(_real_of(cap, name), tensor, axis, name))
            cut_names.append(name)
        tensors[name] = _owned(tensor, storages)
    reals = cap.reals
    for i, real in enumerate(reals):
        if real is not None:
            tensors[REAL.format(i)] = _owned(real.to(torch.bool), storages)
    metadata = {"format": CAPTURE_FORMAT, "version": __version__, "names": json.dumps(list(cap.tensors)),
                "model": type(cap.model).__name__ if cap.model is not None else "", "detach": json.dumps(cap.detach),
                "shapes": json.dumps(shapes), "layouts": json.dumps(layouts), "real_only": json.dumps(cut_names),
                "reals": json.dumps([real is not None for real in reals])}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata=metadata)


def _open_file(path: Path, want: str):
    """safe_open of a file this module wrote in format `want`; a missing, corrupt or foreign file named."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        handle = safe_open(str(path), framework="pt")
    except (SafetensorError, OSError, ValueError) as e:
        raise ValueError(f"{path}: not a safetensors file ({e})") from None
    got = (handle.metadata() or {}).get("format")
    if got != want:
        raise ValueError(f"{path}: not a file of {want} (its metadata format is {got!r})")
    return handle


def load(path: str | Path) -> Capture:
    """A saved capture: the same names in the same order, equal bits, each forward's mask (`cap.reals`, `cap.real`
    the last). An activation saved real_only is rebuilt padded, (B, L, ...) with zeros at the padding: the loaded
    capture reads as the one saved (`real_rows(load(path), name)` gives back the saved rows bit for bit); its
    padding's values were not saved. The records hold no graph (`detach` is True; `info(path)` says what the
    saved capture's was, and the model's class)."""
    path = Path(path)
    with _open_file(path, CAPTURE_FORMAT) as f:
        meta = f.metadata()
        names, shapes = json.loads(meta["names"]), json.loads(meta["shapes"])
        cut = set(json.loads(meta["real_only"]))
        reals = [f.get_tensor(REAL.format(i)) if present else None
                 for i, present in enumerate(json.loads(meta["reals"]))]
        tensors = {}
        for name in names:
            tensor = f.get_tensor(name)
            if name in cut:
                full = torch.zeros(shapes[name], dtype=tensor.dtype)
                axis = _token_axis(name)
                mask = _mask(reals[_call(name)], full, axis, name)
                (full.movedim(axis, 1) if axis == 2 else full)[mask] = tensor
                tensor = full
            tensors[name] = tensor
    cap = Capture(detach=True, tensors=tensors)
    cap.reals = reals
    cap.real = reals[-1] if reals else None
    return cap


def info(path: str | Path) -> dict:
    """What a saved capture's file says of itself, without reading its tensors: format, version, model (its class),
    detach, names (in order), shapes and layouts (as recorded), real_only (the names stored as real tokens only),
    reals (whether each forward had a mask)."""
    path = Path(path)
    with _open_file(path, CAPTURE_FORMAT) as f:
        meta = f.metadata()
    return {key: value if key in ("format", "version", "model") else json.loads(value) for key, value in meta.items()}


# -- a dataset's activations, streamed to shards ------------------------------------------------------------------

def _device(model: nn.Module) -> torch.device:
    for tensor in model.parameters():
        return tensor.device
    return torch.device("cpu")


def cache_dataset(model: nn.Module, batches: Iterable[Mapping[str, Tensor]], names: Sequence[str],
                  directory: str | Path, *, real_only: bool = True, shard_size: int = 65536,
                  dtype: torch.dtype | None = None) -> Path:
    """Run `model` over a dataset and write the per-token activations `names` (names or patterns, as capture's) to
    `directory`/shard-00000.safetensors, ... beside an index.json; returns the directory (read it with
    `Activations`).
    batches: model inputs, one dict per batch as the tokenizer makes them (`tokenizer(texts)`: input_ids,
    attention_mask, token_type_ids), each run as model(**batch) under no_grad and a capture of `names`. The model
    runs as it is: put it in eval() first (dropout would change every row).
    Each activation's rows are its real tokens (real_only, default; per head (T, H, ...)) or every token (the
    padding's too), in dataset order: document by document (documents counted over the batches), position by
    position. A shard holds exactly `shard_size` tokens (the last what is left), each name's rows for the same
    tokens, and "__tokens__" (n, 2): each row's document and position. Memory: one shard and one batch.
    dtype: the rows' dtype on disk (e.g. torch.float16); None keeps the model's. An activation without a token
    axis (pooler.output) is refused, as is one whose rows change shape from batch to batch (an attention map's key
    axis is the batch's length). The directory must be empty or new."""
    if shard_size < 1:
        raise ValueError(f"shard_size is {shard_size}: a shard holds at least one token")
    directory = Path(directory)
    if directory.exists() and any(directory.iterdir()):
        raise FileExistsError(f"{directory} is not empty: cache_dataset writes a new directory of shards")
    directory.mkdir(parents=True, exist_ok=True)
    model_name, device = type(model).__name__, _device(model)
    rows: dict[str, list[Tensor]] = {}  # name -> the chunks not yet written
    shapes: dict[str, list[int]] = {}  # name -> one row's shape
    dtypes: dict[str, str] = {}  # name -> its rows' dtype
    tokens: list[Tensor] = []
    pending, documents, shards = 0, 0, []

    def write(count: int) -> None:
        nonlocal pending
        number = len(shards)
        file = directory / f"shard-{number:05d}.safetensors"
        out = {}
        for name, chunks in [*rows.items(), (TOKENS, tokens)]:
            whole = torch.cat(chunks)
            out[name] = whole[:count].contiguous()
            chunks[:] = [whole[count:]] if whole.size(0) > count else []
        span = out[TOKENS][:, 0]
        save_file(out, str(file), metadata={"format": SHARDS_FORMAT, "model": model_name, "shard": str(number),
                                            "names": json.dumps(list(rows))})
        shards.append({"file": file.name, "tokens": count,
                       "documents": [int(span.min()), int(span.max()) + 1]})
        pending -= count

    for number, batch in enumerate(batches):
        if not isinstance(batch, Mapping):
            raise TypeError(f"batch {number} is a {type(batch).__name__}: batches are dicts of model inputs, as a "
                            f"tokenizer makes them (tokenizer(texts))")
        inputs = {key: value.to(device) if isinstance(value, Tensor) else value for key, value in batch.items()}
        with torch.no_grad(), capture(model, names=names) as cap:
            model(**inputs)
        if not rows:
            for name in cap.tensors:
                if _token_axis(name) is None:
                    raise ValueError(f"{name} has no token axis ({activation_layout(name)} layout): cache_dataset "
                                     f"writes rows per token (save one capture for it instead)")
            rows = {name: [] for name in cap.tensors}
        elif list(cap.tensors) != list(rows):
            raise ValueError(f"batch {number} recorded {list(cap.tensors)}, the first batch {list(rows)}")
        keep = None
        for name in rows:
            tensor = cap.tensors[name]
            axis = _token_axis(name)
            mask = _mask(_real_of(cap, name) if real_only else None, tensor, axis, name)
            part = _cut(tensor, axis, mask).cpu()
            part = part.to(dtype) if dtype is not None else part
            if name not in shapes:
                shapes[name], dtypes[name] = list(part.shape[1:]), str(part.dtype).removeprefix("torch.")
            elif list(part.shape[1:]) != shapes[name]:
                raise ValueError(f"{name}'s rows are {tuple(part.shape[1:])} in batch {number} and "
                                 f"{tuple(shapes[name])} before: a shard holds rows of one shape (an attention "
                                 f"map's key axis is its batch's length)")
            rows[name].append(part)
            keep = mask
        index = keep.nonzero().cpu()
        index[:, 0] += documents
        documents += keep.size(0)
        tokens.append(index)
        pending += index.size(0)
        while pending >= shard_size:
            write(shard_size)
    if pending:
        write(pending)
    index = {"format": SHARDS_FORMAT, "version": __version__, "model": model_name, "names": list(rows),
             "shapes": shapes, "dtypes": dtypes,
             "real_only": real_only, "shard_size": shard_size, "tokens": sum(s["tokens"] for s in shards),
             "documents": documents, "shards": shards}
    (directory / INDEX).write_text(json.dumps(index, indent=1))
    return directory


class Activations:
    """A cache_dataset directory, read lazily (safetensors' safe_open, one shard at a time).

    acts.names, acts.shapes (one row's shape per name), len(acts) (the tokens), acts.documents
    acts["layers.3.output"]           (N, ...) every row of one name, the shards concatenated
    acts.tokens()                     (N, 2) each row's document and position
    for name, rows in acts: ...       shard by shard, each name's rows
    acts.iter(name, batch_size, shuffle_seed=0)    batches of rows, every row once, to train a probe or an SAE

    A missing shard, or a file from another model or another run, is an error naming the file."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        index_file = self.directory / INDEX
        if not index_file.is_file():
            raise FileNotFoundError(f"{index_file}: no such file ({self.directory} is not a directory written by "
                                    f"cache_dataset)")
        index = json.loads(index_file.read_text())
        if index.get("format") != SHARDS_FORMAT:
            raise ValueError(f"{index_file}: not an index of {SHARDS_FORMAT} (format {index.get('format')!r})")
        self.index = index
        self.names: list[str] = index["names"]
        self.shapes: dict[str, tuple[int, ...]] = {name: tuple(shape) for name, shape in index["shapes"].items()}
        self.model: str = index["model"]
        self.documents: int = index["documents"]
        self.files = [self.directory / shard["file"] for shard in index["shards"]]
        for number, (file, shard) in enumerate(zip(self.files, index["shards"])):
            if not file.is_file():
                raise FileNotFoundError(f"{file}: shard {number} of {len(self.files)} listed in {index_file} "
                                        f"is missing")
            with _open_file(file, SHARDS_FORMAT) as f:
                meta = f.metadata()
                count = f.get_slice(TOKENS).get_shape()[0]
            if (meta.get("model") != self.model or meta.get("shard") != str(number)
                    or json.loads(meta.get("names", "[]")) != self.names or count != shard["tokens"]):
                raise ValueError(f"{file}: written by another run (model {meta.get('model')!r}, shard "
                                 f"{meta.get('shard')}, {count} tokens) than {index_file} lists (model "
                                 f"{self.model!r}, shard {number}, {shard['tokens']} tokens)")

    def __len__(self) -> int:
        return self.index["tokens"]

    def _check(self, name: str) -> None:
        if name not in self.shapes:
            close = difflib.get_close_matches(name, self.names, n=5, cutoff=0.5)
            raise KeyError(f"{self.directory} holds no {name!r}" + (f"; close: {', '.join(close)}" if close
                                                                      else f" (it holds {', '.join(self.names)})"))

    def _shard(self, file: Path, name: str) -> Tensor:
        with safe_open(str(file), framework="pt") as f:
            return f.get_tensor(name)

    def __getitem__(self, name: str) -> Tensor:
        self._check(name)
        return torch.cat([self._shard(file, name) for file in self.files]) if self.files else torch.empty(0)

    def tokens(self) -> Tensor:
        """(N, 2) int64: each row's document (counted over the dataset) and position."""
        if not self.files:
            return torch.empty(0, 2, dtype=torch.long)
        return torch.cat([self._shard(file, TOKENS) for file in self.files])

    def __iter__(self) -> Iterator[tuple[str, Tensor]]:
        for file in self.files:
            with safe_open(str(file), framework="pt") as f:
                for name in self.names:
                    yield name, f.get_tensor(name)

    def iter(self, name: str, batch_size: int, *, shuffle_seed: int | None = None) -> Iterator[Tensor]:
        """Batches of `batch_size` rows of `name` (the last may be smaller), every row once, one shard in memory.
        shuffle_seed: the shards in a random order and each shard's rows shuffled (torch.Generator seeded with it;
        the same seed, the same batches); None: in dataset order."""
        self._check(name)
        if batch_size < 1:
            raise ValueError(f"batch_size is {batch_size}")
        generator = torch.Generator().manual_seed(shuffle_seed) if shuffle_seed is not None else None
        order = range(len(self.files)) if generator is None else torch.randperm(len(self.files),
                                                                                 generator=generator).tolist()
        carry = None
        for number in order:
            rows = self._shard(self.files[number], name)
            if generator is not None:
                rows = rows[torch.randperm(rows.size(0), generator=generator)]
            if carry is not None:
                rows = torch.cat([carry, rows])
            full = rows.size(0) - rows.size(0) % batch_size
            yield from rows[:full].split(batch_size)
            carry = rows[full:] if full < rows.size(0) else None
        if carry is not None:
            yield carry
