"""Resolve a source (HF dir, hub id, minialign dir, AlignScore .ckpt) and build a model from it.

Flow: read_checkpoint() -> Checkpoint(config, tensors under minialign names) -> load() builds the
model on the meta device and assigns the tensors (cast one by one, the mapped pages of each copied
tensor given back), so peak memory stays near one copy of the weights. Foreign names and file
formats are convert's business.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor, nn

from . import convert
from .convert import CheckpointError

from .config import PRESETS, Config
from .hub import hub_file, looks_like_path
from .linear import ONEDNN_PROBES
from .model import Encoder, init_parameter
from .tokenizer import TOKENIZER_FILES

log = logging.getLogger(__name__)

NATIVE_FORMAT = 1
HEADS_FILE = "alignscore_heads.safetensors"


@dataclass
class Checkpoint:
    """Weights under minialign's AlignModel names, with the config they fit."""

    config: Config
    tensors: dict[str, Tensor]
    origin: str  # the file the tensors came from, for messages
    tokenizer_dir: Path | None = None  # where tokenizer files may be found
    dropped: list[str] = field(default_factory=list)  # source names dropped on purpose
    backbone_name: str | None = None  # for a .ckpt: the backbone its configuration came from


def read_checkpoint(src: str | Path, *, backbone: str | None = None, revision: str | None = None,
                    cache_dir: str | Path | None = None) -> Checkpoint:
    """Read any supported source into a Checkpoint (no model is built)."""
    path = Path(src).expanduser()
    if path.is_file():
        if path.suffix != ".ckpt":
            raise CheckpointError(f"{path}: a single file must be an AlignScore .ckpt; for HF weights pass "
                                  f"the directory holding config.json")
        ckpt = _read_alignscore(path, backbone, revision, cache_dir)
    elif path.is_dir():
        ckpt = _read_dir(path)
    elif looks_like_path(str(src)):
        raise FileNotFoundError(f"{src}: no such file or directory")
    else:
        ckpt = _read_hub(str(src), revision, cache_dir)
    _untie_if_needed(ckpt)
    return ckpt


def _read_dir(directory: Path) -> Checkpoint:
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"{directory}: no config.json")
    data = convert.read_json(config_path)
    if "minialign_format" in data:
        if data["minialign_format"] != NATIVE_FORMAT:
            raise CheckpointError(f"{config_path}: minialign format {data['minialign_format']} is not supported")
        weights = directory / "model.safetensors"
        if not weights.is_file():
            raise CheckpointError(f"{directory}: minialign directory without model.safetensors")
        return Checkpoint(Config.from_dict(data["config"]), convert.read_safetensors(weights), str(weights), directory)
    config = Config.from_hf(data, source=str(config_path))
    weights = convert.find_weights(directory)
    tensors, dropped = convert.hf_to_minialign(convert.read_state_dict(weights), config.arch, source=str(weights))
    heads = directory / HEADS_FILE  # written by export_hf beside an HF backbone
    if heads.is_file():
        more, more_dropped = convert.alignscore_to_minialign(convert.read_safetensors(heads), config.arch,
                                                             source=str(heads))
        tensors.update(more)
        dropped += more_dropped
    return Checkpoint(config, tensors, str(weights), directory, dropped)


def _read_hub(repo_id: str, revision: str | None, cache_dir: str | Path | None) -> Checkpoint:
    config_path = hub_file(repo_id, "config.json", revision=revision, cache_dir=cache_dir)
    config = Config.from_hf(convert.read_json(config_path), source=f"{repo_id}/config.json")
    weights = None
    for name in convert.files.WEIGHT_FILES:
        weights = hub_file(repo_id, name, revision=revision, cache_dir=cache_dir, optional=True)
        if weights is not None:
            break
    if weights is None:
        raise CheckpointError(f"hub repo {repo_id!r} has none of {convert.files.WEIGHT_FILES}")
    for name in TOKENIZER_FILES:
        hub_file(repo_id, name, revision=revision, cache_dir=cache_dir, optional=True)
    tensors, dropped = convert.hf_to_minialign(convert.read_state_dict(weights), config.arch, source=str(weights))
    return Checkpoint(config, tensors, str(weights), weights.parent, dropped)


def _read_alignscore(path: Path, backbone: str | None, revision: str | None,
                     cache_dir: str | Path | None) -> Checkpoint:
    state_dict, hparams = convert.read_alignscore_ckpt(path)
    name = backbone or hparams.get("model")
    if not name:
        raise CheckpointError(f"{path}: no backbone named in hyper_parameters['model']; pass backbone=")
    config, tokenizer_dir = resolve_backbone(str(name), revision=revision, cache_dir=cache_dir)
    tensors, dropped = convert.alignscore_to_minialign(state_dict, config.arch, source=str(path))
    return Checkpoint(config, tensors, str(path), tokenizer_dir, dropped, backbone_name=str(name))


def resolve_backbone(name: str, *, revision: str | None = None,
                     cache_dir: str | Path | None = None) -> tuple[Config, Path | None]:
    """Config (and tokenizer dir, if any) of a backbone: a local dir, a preset name, or a hub id."""
    path = Path(name).expanduser()
    if path.is_dir():
        data = convert.read_json(path / "config.json")
        config = Config.from_dict(data["config"]) if "minialign_format" in data else Config.from_hf(data, source=str(path))
        return config, path
    if name in PRESETS:
        return PRESETS[name], None
    if looks_like_path(name):
        raise FileNotFoundError(f"backbone {name}: no such directory")
    config_path = hub_file(name, "config.json", revision=revision, cache_dir=cache_dir)
    return Config.from_hf(convert.read_json(config_path), source=f"{name}/config.json"), config_path.parent


def _untie_if_needed(ckpt: Checkpoint) -> None:
    """A decoder equal to the word embeddings is the tied one and is dropped; one that differs
    (AlignScore trains its own) unties the config so nothing is lost."""
    decoder = ckpt.tensors.get("mlm_head.decoder.weight")
    if decoder is None:
        return
    word = ckpt.tensors.get("encoder.embeddings.word.weight")
    if word is not None and decoder.shape == word.shape and torch.equal(decoder, word):
        del ckpt.tensors["mlm_head.decoder.weight"]
        ckpt.dropped.append("mlm_head.decoder.weight (tied to the word embeddings)")
        ckpt.config = dataclasses.replace(ckpt.config, tie_word_embeddings=True)
    else:
        ckpt.config = dataclasses.replace(ckpt.config, tie_word_embeddings=False)


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
         dtype: torch.dtype | None = None, attn_backend: str = "sdpa", revision: str | None = None,
         cache_dir: str | Path | None = None, compile: bool = False) -> nn.Module:
    """Build a model class (Encoder, AlignModel, ...) from any supported source, in eval mode.

    dtype defaults to float32. Checkpoint weights outside the class's `checkpoint_prefix` are not used.
    compile=True wraps the forward with torch.compile (nn.Module.compile).
    """
    ckpt = read_checkpoint(src, backbone=backbone, revision=revision, cache_dir=cache_dir)
    model = build(cls, ckpt, device=device, dtype=dtype, attn_backend=attn_backend)
    if compile:
        model.compile()
    return model


def build(cls: type[nn.Module], ckpt: Checkpoint, *, device: str | torch.device | None = None,
          dtype: torch.dtype | None = None, attn_backend: str = "sdpa", require: tuple[str, ...] = (),
          advice: str = "") -> nn.Module:
    """Check, materialise, initialise: the model's declared weights from the checkpoint, on `device`
    in `dtype` (default float32), the declared-initialisable ones it lacks initialised (the same
    values in every run: `initialise`; one warning).

    require: prefixes of weights (the class's names) a product reads and must not be initialised: a
    checkpoint without them is refused before any weight is read, naming them and giving `advice`."""
    device = resolve_device(device)
    compute_dtype = None
    if dtype == "auto":  # fp32 weights; bf16 matmuls where bf16 is native (see auto_dtype)
        dtype, compute_dtype = torch.float32, auto_compute_dtype(device)
    dtype = dtype or torch.float32
    _warn_if_emulated(device, dtype)
    tensors = own_tensors(cls, ckpt)
    with torch.device("meta"):
        model = cls(ckpt.config, attn_backend=attn_backend)
    missing = check_tensors(model, tensors, ckpt.origin, shown_prefix=cls.checkpoint_prefix)
    untrained = sorted({k.rpartition(".")[0] for k in missing if k.startswith(require)})
    if untrained:
        raise CheckpointError(f"{ckpt.origin} has no trained {', '.join(untrained)}: it holds no such head, and "
                              f"one initialised at random would give scores that mean nothing. {advice}".rstrip())
    materialise(model, tensors, device, dtype)
    for module in model.modules():
        if isinstance(module, Encoder):
            module.compute_dtype = compute_dtype
    if missing:
        initialise(model, missing, ckpt.config, device, dtype)
        warnings.warn(f"{ckpt.origin}: the checkpoint lacks {missing}: initialised (BERT's init, seeded by each "
                      f"weight's name, so the same in every run); they are untrained", stacklevel=3)
    return model.eval()


def own_tensors(cls: type[nn.Module], ckpt: Checkpoint) -> dict[str, Tensor]:
    """The checkpoint's tensors under `cls.checkpoint_prefix`, renamed to the class's own names."""
    prefix = getattr(cls, "checkpoint_prefix", None)
    if prefix is None:
        raise TypeError(f"cannot load into {cls.__name__}: it declares no checkpoint_prefix")
    skipped = cls.skipped_weights(ckpt.config)
    read = {k: v for k, v in ckpt.tensors.items() if k.startswith(prefix) and not (skipped and k.startswith(skipped))}
    unused = sorted(set(ckpt.tensors) - set(read))
    if unused:
        log.info("%s: weights not used by %s: %s", ckpt.origin, cls.__name__, unused)
    return {k[len(prefix):]: v for k, v in read.items()}


def materialise(model: nn.Module, tensors: dict[str, Tensor], device: torch.device, dtype: torch.dtype) -> None:
    """Assign the tensors to a meta-device model. Tensors that already have the wanted dtype and
    device become the parameters as they are (for a safetensors file: views of its memory map, read
    on first use); the mapped pages of every tensor copied instead (cast, moved, or fused into qkv)
    are given back as soon as it is."""
    prepared = {}
    for name, tensor in tensors.items():
        prepared[name] = _cast(tensor, device, dtype)
        if prepared[name] is not tensor:
            convert.release(tensor)
    model.load_state_dict(prepared, strict=False, assign=True)
    kept = {t.data_ptr() for t in model.state_dict(keep_vars=True).values()}
    for tensor in tensors.values():
        if tensor.data_ptr() not in kept:
            convert.release(tensor)


def auto_compute_dtype(device: torch.device) -> torch.dtype | None:
    """dtype="auto": bf16 matmuls where the hardware runs them natively (a CPU with AVX512-BF16 / AMX,
    a GPU that supports bf16), else None (fp32 throughout). BENCHMARKS.md ("Precision") has the
    score deviations of this recipe against fp32."""
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else None
    if device.type == "cpu":
        return torch.bfloat16 if cpu_has_native(torch.bfloat16, unknown=False) else None
    return None


def resolve_device(device: str | torch.device | None) -> torch.device:
    """The torch.device named, checked to exist on this machine (default: cpu)."""
    try:
        resolved = torch.device(device or "cpu")
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"unknown device {device!r} ({e}); use cpu, cuda, cuda:N or mps") from None
    if resolved.type == "cpu":
        return resolved
    if resolved.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            why = "this torch was built without CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
            raise ValueError(f"device {str(device)!r} is not available on this machine ({why}); use cpu")
        if resolved.index is not None and resolved.index >= count:
            raise ValueError(f"device {str(device)!r} does not exist: this machine has {count} CUDA device(s)")
        return resolved
    if resolved.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"device {str(device)!r} is not available on this machine (no Apple MPS); use cpu")
        return resolved
    raise ValueError(f"device {str(device)!r} is not supported; use cpu, cuda, cuda:N or mps")


def _warn_if_emulated(device: torch.device, dtype: torch.dtype) -> None:
    if device.type == "cpu" and dtype in (torch.bfloat16, torch.float16) and not cpu_has_native(dtype):
        warnings.warn(f"this CPU has no native {dtype} matmul (no AVX512-BF16/FP16 or AMX), so {dtype} is "
                      f"emulated and runs several times slower than float32 here (BENCHMARKS.md); "
                      f"float32 is the faster choice on this machine", stacklevel=4)


def cpu_has_native(dtype: torch.dtype, *, unknown: bool = True) -> bool:
    """Whether oneDNN reports hardware matmul support for bf16 / fp16 on this CPU; `unknown` for a
    torch build that cannot tell (True: do not warn; dtype="auto" asks False: do not pick it)."""
    try:
        return bool(getattr(torch.ops.mkldnn, ONEDNN_PROBES[dtype])())
    except (AttributeError, RuntimeError):
        return unknown


def _cast(t: Tensor, device: torch.device, dtype: torch.dtype) -> Tensor:
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


def save_native(ckpt: Checkpoint, directory: str | Path, *, dtype: torch.dtype | None = None) -> Path:
    """Write config.json + model.safetensors (minialign names) and any tokenizer files."""
    directory = output_directory(directory)
    tensors = {k: _cast(v, torch.device("cpu"), dtype) if dtype else v for k, v in ckpt.tensors.items()}
    convert.write_safetensors(directory / "model.safetensors", tensors, metadata={"format": "pt"})
    convert.write_json(directory / "config.json", {"minialign_format": NATIVE_FORMAT, "config": ckpt.config.to_dict()})
    copy_tokenizer_files(ckpt.tokenizer_dir, directory)
    return directory


def export_hf(ckpt: Checkpoint, directory: str | Path, *, dtype: torch.dtype | None = None) -> Path:
    """Write a transformers layout: config.json + model.safetensors (BertModel/RobertaModel names,
    loadable by AutoModel) and, when the checkpoint has them, the MLM head and AlignScore heads in
    alignscore_heads.safetensors under AlignScore's own names (mlm_head.*, bin_layer.*, ...)."""
    directory = output_directory(directory)
    tensors = {k: _cast(v, torch.device("cpu"), dtype) if dtype else v for k, v in ckpt.tensors.items()}
    hf = convert.minialign_to_hf(tensors, ckpt.config.arch)
    backbone, heads = convert.split_hf_backbone(hf, ckpt.config.arch)
    convert.write_safetensors(directory / "model.safetensors", backbone, metadata={"format": "pt"})
    if heads:
        convert.write_safetensors(directory / HEADS_FILE, heads, metadata={"format": "pt"})
    convert.write_json(directory / "config.json", ckpt.config.to_hf(classifier="classifier.out_proj.weight" in tensors))
    copy_tokenizer_files(ckpt.tokenizer_dir, directory)
    return directory


def output_directory(directory: str | Path) -> Path:
    """Create the directory a converted checkpoint goes to; refuse a path that is an existing file."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"{directory} exists and is not a directory; a converted checkpoint is a directory")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def copy_tokenizer_files(src: Path | None, dst: Path) -> list[str]:
    if src is None:
        return []
    copied = []
    for name in TOKENIZER_FILES:
        if (src / name).is_file() and (src / name).resolve() != (dst / name).resolve():
            shutil.copyfile(src / name, dst / name)
            copied.append(name)
    return copied
