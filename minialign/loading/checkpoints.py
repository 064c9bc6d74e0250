"""Resolve a source (HF dir, hub id, minialign dir, AlignScore .ckpt) and build a model from it.

Flow: read_checkpoint() -> Checkpoint(config, tensors under minialign names) -> load() builds the
model on the meta device and assigns the tensors (cast one by one, the mapped pages of each copied
tensor given back), so peak memory stays near one copy of the weights. Foreign names and file
formats are convert's business.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from minialign import convert
from minialign.convert import CheckpointError

from minialign.sources.hub import hub_file, looks_like_path
from minialign.nn.config import PRESETS, Config
from minialign.text.tokenizer import TOKENIZER_FILES

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
