"""Checkpoint -> model: check the tensors against what the class declares, materialise them on the
device in the dtype (peak memory near one copy of the weights), initialise what a checkpoint may
lack (devices.py makes the device and dtype decisions)."""

from __future__ import annotations

import logging
import warnings
import zlib
from pathlib import Path

import torch
from torch import Tensor, nn

from minialign import convert
from minialign.convert import CheckpointError
from minialign.loading.checkpoints import Checkpoint, read_checkpoint
from minialign.loading.devices import DtypeChoice, parse_dtype, resolve_device, warn_if_emulated
from minialign.nn.config import Config
from minialign.nn import lora
from minialign.nn.init import init_parameter, shapes_only

log = logging.getLogger(__name__)


def checkpoint_name(name: str, renames: dict[str, str]) -> str:
    """A weight's own name -> its name among a checkpoint's, by a class's checkpoint_names (module prefixes)."""
    return _rename(name, renames)


def own_name(name: str, renames: dict[str, str]) -> str:
    """The inverse: a checkpoint's name (below checkpoint_prefix) -> the class's own."""
    return _rename(name, {theirs: own for own, theirs in renames.items()})


def _rename(name: str, renames: dict[str, str]) -> str:
    for old, new in renames.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old):]
    return name


def initialisable_prefixes(model: nn.Module) -> tuple[str, ...]:
    """State-dict prefixes of the modules a checkpoint may lack, from what each module declares
    (its `initialisable` attribute, names relative to itself)."""
    prefixes = []
    for name, module in model.named_modules():
        for child in getattr(module, "initialisable", ()):
            prefixes.append(f"{name}.{child}." if name else f"{child}.")
    return tuple(prefixes)


def check_tensors(model: nn.Module, tensors: dict[str, Tensor], origin: str, *, shown_prefix: str = "") -> list[str]:
    """Compare tensors (the model's own names) with its state dict. Raises on unexpected names, shape
    mismatches and missing weights the model does not declare initialisable; returns the missing names.
    Errors name the weights with `shown_prefix` (the checkpoint's name for the model's part)."""
    expected = model.state_dict()
    mismatched = [f"{shown_prefix}{k}: checkpoint {tuple(t.shape)} vs model {tuple(expected[k].shape)}"
                  for k, t in tensors.items() if k in expected and t.shape != expected[k].shape]
    if mismatched:
        raise CheckpointError(f"{origin}: {len(mismatched)} tensor shape(s) disagree with the config: "
                              f"{_first(mismatched)}. Likely cause: the configuration describes a model of "
                              f"another size (for a .ckpt, a --backbone / backbone= other than the one it "
                              f"was trained from; for a directory, a config.json of another model)")
    unexpected = sorted(set(tensors) - set(expected))
    if unexpected:
        raise CheckpointError(f"{origin}: {len(unexpected)} unexpected weight(s): "
                              f"{_first([shown_prefix + k for k in unexpected])}")
    missing = sorted(set(expected) - set(tensors))
    fatal = [shown_prefix + k for k in missing if not k.startswith(initialisable_prefixes(model))]
    if fatal:
        raise CheckpointError(f"{origin}: {len(fatal)} missing weight(s): {_first(fatal)}")
    return missing


def _first(items: list[str], shown: int = 5) -> str:
    """The first few items of a long list, and how many more there are."""
    text = "; ".join(items[:shown])
    return text + (f"; ... and {len(items) - shown} more" if len(items) > shown else "")


def load(cls: type[nn.Module], src: str | Path, *, backbone: str | None = None, device: str | torch.device | None = None,
         dtype: torch.dtype | str | DtypeChoice | None = None, attn_backend: str = "sdpa",
         revision: str | None = None, cache_dir: str | Path | None = None, compile: bool = False,
         adapter: str | None = None) -> nn.Module:
    """Build a model class (Encoder, AlignModel, ...) from any supported source, in eval mode.

    dtype: a torch.dtype, a name ("fp32", "bf16", "fp16", "float32", "bfloat16", "float16"), "auto" or "int8"
    (devices.parse_dtype); default float32. Checkpoint weights outside the class's `checkpoint_prefix` are not used.
    compile=True wraps the forward with torch.compile (nn.Module.compile). adapter: the task whose adapter is merged
    into the weights, for a checkpoint carrying them (jina-embeddings-v3's `task`; read_checkpoint).
    """
    ckpt = read_checkpoint(src, backbone=backbone, revision=revision, cache_dir=cache_dir, task=adapter)
    model = build(cls, ckpt, device=device, dtype=dtype, attn_backend=attn_backend)
    if compile:
        model.compile()
    return model


def build(cls: type[nn.Module], ckpt: Checkpoint, *, device: str | torch.device | None = None,
          dtype: torch.dtype | str | DtypeChoice | None = None, attn_backend: str = "sdpa",
          require: tuple[str, ...] = (), advice: str = "") -> nn.Module:
    """Check, materialise, initialise: the model's declared weights from the checkpoint, on `device`
    in `dtype` (default float32), the declared-initialisable ones it lacks initialised (the same
    values in every run: `initialise`; one warning).

    require: prefixes of weights (the class's names) a product reads and must not be initialised: a
    checkpoint without them is refused before any weight is read, naming them and giving `advice`."""
    device, choice = resolve_device(device), parse_dtype(dtype)
    precision, dtype = choice.precision_on(device), choice.weights
    warn_if_emulated(device, dtype)
    refuse_other_head(cls, ckpt)
    tensors = own_tensors(cls, ckpt)
    with shapes_only():
        model = cls(ckpt.config, attn_backend=attn_backend)
    missing = check_tensors(model, tensors, ckpt.origin, shown_prefix=cls.checkpoint_prefix)
    # named as the file names them (transformers' names for an HF directory), not as minialign does
    renames = cls.checkpoint_names(ckpt.config) if hasattr(cls, "checkpoint_names") else {}
    untrained = sorted({ckpt.own_name(cls.checkpoint_prefix + checkpoint_name(k, renames))
                        for k in missing if k.startswith(require)})
    if untrained:
        raise CheckpointError(f"{ckpt.origin} has no trained {', '.join(untrained)}: it holds no such head, and "
                              f"one initialised at random would give scores that mean nothing. {advice}".rstrip())
    materialise(model, tensors, device, dtype)
    model.precision = precision  # the Linear variants each layer declares (nn/layers.py PRECISION_LAYERS)
    if ckpt.adapters is not None:  # kept apart, chosen per call (nn/lora.py)
        paths = {own.removesuffix(".weight"): ckpt.adapters.layers[name]
                 for name, own in owned_names(cls, ckpt, ckpt.adapters.layers).items() if own is not None}
        lora.attach(model, ckpt.adapters.tasks, ckpt.adapters.scaling, paths)
    if missing:
        initialise(model, missing, ckpt.config, device, dtype)
        warnings.warn(f"{ckpt.origin}: the checkpoint lacks {missing}: initialised (BERT's init, seeded by each "
                      f"weight's name, so the same in every run); they are untrained", stacklevel=3)
    return model.eval()


# transformers' heads whose weight names another's share (`classifier.*`: BERT's sequence and token heads), by class
# suffix: a checkpoint naming one is not read into another (Pretrained.architecture)
SHARED_NAME_HEADS = ("ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering")


def refuse_other_head(cls: type[nn.Module], ckpt: Checkpoint) -> None:
    """A CheckpointError where the checkpoint's config.json names a class of another of SHARED_NAME_HEADS than
    `cls`'s (a BertForTokenClassification read as a sequence classifier would run its token layer on the pooled
    state and return numbers that mean nothing)."""
    own = getattr(cls, "architecture", None)
    if own not in SHARED_NAME_HEADS:
        return
    for name in ckpt.architectures:
        other = next((suffix for suffix in SHARED_NAME_HEADS if name.endswith(suffix)), None)
        if other is not None and other != own:
            raise CheckpointError(f"{ckpt.origin}: its config.json names {name}, a *{other} head, not the *{own} "
                                  f"head {cls.__name__} runs; load it with the class for that head (models/auto.py "
                                  f"model_class picks it)")


def own_tensors(cls: type[nn.Module], ckpt: Checkpoint) -> dict[str, Tensor]:
    """The checkpoint's tensors under the modules `cls` owns (`cls.owns(config)`, below its
    `checkpoint_prefix`, under the names its `checkpoint_names` gives them there), renamed to the class's
    own names; the others are logged as not used."""
    prefix, owns = getattr(cls, "checkpoint_prefix", None), getattr(cls, "owns", None)
    if prefix is None or owns is None:
        raise TypeError(f"cannot load into {cls.__name__}: it declares no checkpoint_prefix / owns (Pretrained)")
    read: dict[str, Tensor] = {}
    unused = []
    for name, own in owned_names(cls, ckpt, ckpt.tensors).items():
        if own is None:
            unused.append(name)
        else:
            read[own] = ckpt.tensors[name]
    if unused:
        log.info("%s: weights not used by %s: %s", ckpt.origin, cls.__name__, sorted(unused))
    return read


def owned_names(cls: type[nn.Module], ckpt: Checkpoint, names) -> dict[str, str | None]:
    """Each of the checkpoint's `names` as the class `cls` names it (own_tensors' rule), None where it is not the
    class's."""
    prefix, owns = cls.checkpoint_prefix, cls.owns
    renames = cls.checkpoint_names(ckpt.config) if hasattr(cls, "checkpoint_names") else {}
    owned = tuple(f"{part}." for part in owns(ckpt.config))
    out = {}
    for name in names:
        own = own_name(name[len(prefix):], renames) if name.startswith(prefix) else None
        out[name] = own if own is not None and own.startswith(owned) else None
    return out


def materialise(model: nn.Module, tensors: dict[str, Tensor], device: torch.device, dtype: torch.dtype) -> None:
    """Assign the tensors to a meta-device model. Tensors that already have the wanted dtype and
    device become the parameters as they are (for a safetensors file: views of its memory map, read
    on first use); the mapped pages of every tensor copied instead (cast, moved, or fused into qkv)
    are given back as soon as it is."""
    prepared = {}
    for name, tensor in tensors.items():
        prepared[name] = cast(tensor, device, dtype)
        if prepared[name] is not tensor:
            convert.release(tensor)
    model.load_state_dict(prepared, strict=False, assign=True)
    kept = {t.data_ptr() for t in model.state_dict(keep_vars=True).values()}
    for tensor in tensors.values():
        if tensor.data_ptr() not in kept:
            convert.release(tensor)


def cast(t: Tensor, device: torch.device, dtype: torch.dtype) -> Tensor:
    return t.to(device=device, dtype=dtype if t.is_floating_point() else t.dtype)


def initialise(model: nn.Module, missing: list[str], config: Config, device: torch.device, dtype: torch.dtype) -> None:
    """BERT's initialisation (model.init_parameter) for each named parameter, in place of its meta tensor:
    drawn on the CPU in fp32 from a generator seeded by the weight's name (CRC-32), so a model loaded
    twice, in any process, on any device, holds the same values; the global random state is untouched."""
    for name in missing:
        owner_name, _, pname = name.rpartition(".")
        owner = model.get_submodule(owner_name)
        value = torch.empty(owner._parameters[pname].shape, dtype=torch.float32)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(zlib.crc32(name.encode()))
            init_parameter(owner, pname, value, config)
        owner._parameters[pname] = nn.Parameter(value.to(device=device, dtype=dtype))
