"""Read a checkpoint from a source (HF dir, hub id, minialign dir, AlignScore .ckpt).

Flow: read_checkpoint() resolves the source once (sources.resolve: a local path or a hub repo) and
reads it -> Checkpoint(config, tensors under minialign names, the source tokenizer files come from);
build.load() then builds the model on the meta device and assigns the tensors (cast one by one, the
mapped pages of each copied tensor given back), so peak memory stays near one copy of the weights.
Foreign names and file formats are convert's business; where files are, the Source's.
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

from minialign.sources import Source, resolve
from minialign.nn.config import PRESETS, Config, families
from minialign.text.tokenizer import TOKENIZER_FILES

log = logging.getLogger(__name__)

# The layout of a native directory, config.json's "minialign_format". 2 since 0.3: "config" holds the fields of
# the family `arch` names and no other (0.1 wrote every family's fields, 0.2 the family's own, both as format 1).
# An older directory is refused, naming `minialign convert` (StaleFormatError), except the converted-checkpoint
# cache, which is converted again (products/alignscore.py published_checkpoint).
NATIVE_FORMAT = 2
HEADS_FILE = "alignscore_heads.safetensors"


class StaleFormatError(CheckpointError):
    """A native directory written by an older minialign: its format number is below NATIVE_FORMAT."""


def check_native_format(data: dict, *, source: str | Path) -> None:
    """Check a native config.json's format number (NATIVE_FORMAT): an older one is a StaleFormatError naming the
    command that makes the directory again, any other one a CheckpointError."""
    found = data.get("minialign_format")
    if found == NATIVE_FORMAT and not isinstance(found, bool):
        return
    if isinstance(found, int) and not isinstance(found, bool) and found < NATIVE_FORMAT:
        directory = Path(source).parent
        raise StaleFormatError(
            f"{source}: a minialign directory of format {found}, written by an older minialign (this one reads "
            f"format {NATIVE_FORMAT}); convert the checkpoint it was made from again: `minialign convert SOURCE "
            f"{directory}` (SOURCE: the transformers directory, hub id or AlignScore .ckpt; --backbone for a .ckpt)")
    raise CheckpointError(f"{source}: minialign format {found!r} is not supported (this minialign reads format "
                          f"{NATIVE_FORMAT})")


def is_current(directory: str | Path) -> bool:
    """Whether `directory` is a native directory of the current format, with its weights (the converted-checkpoint
    cache is reused only then)."""
    directory = Path(directory)
    if not (directory / "config.json").is_file() or not (directory / "model.safetensors").is_file():
        return False
    try:
        check_native_format(convert.read_json(directory / "config.json"), source=directory / "config.json")
    except (ValueError, OSError):  # CheckpointError is a ValueError; an unreadable file is no current directory
        return False
    return True


@dataclass
class Checkpoint:
    """Weights under minialign's AlignModel names, with the config they fit."""

    config: Config
    tensors: dict[str, Tensor]
    origin: str  # the file the tensors came from, for messages
    tokenizer: Source | None = None  # where tokenizer files may be found (a .ckpt: its backbone's source)
    dropped: list[str] = field(default_factory=list)  # source names dropped on purpose
    backbone_name: str | None = None  # for a .ckpt: the backbone its configuration came from
    layout: str = "minialign"  # the names the file itself uses: "minialign", "hf" (transformers), "alignscore"
    beside: dict[str, Tensor] = field(default_factory=dict)  # read_checkpoint(beside=): another module's tensors
    # the transformers classes its config.json names ("BertForTokenClassification"): which head the tensors are for,
    # where names alone cannot tell (`classifier.weight` is a sequence or a token head's: models/auto.py)
    architectures: tuple[str, ...] = ()
    # task adapters kept apart from the weights (read_checkpoint without a task, of a checkpoint carrying them:
    # jina's), under the names of the weights they update (AlignModel's); None: none
    adapters: convert.Adapters | None = None
    # the directory whose sentence-transformers module files (modules.json's) the writers carry over beside the
    # weights (loading/export.py); None: none (an AlignScore .ckpt, a model saved by itself)
    modules: Source | None = None

    def own_name(self, name: str) -> str:
        """A weight's name (AlignModel's) as the file names it, for messages in the user's words: transformers'
        name for an HF directory (convert's family table), AlignScore's for a .ckpt; as is when not mapped."""
        mapping = {"hf": convert.minialign_to_hf, "alignscore": convert.minialign_to_alignscore}.get(self.layout)
        if mapping is None:
            return name
        try:
            (mapped,) = mapping({name: torch.empty(0)}, self.config.format)
        except (ValueError, KeyError):
            return name
        return mapped

    @property
    def tokenizer_dir(self) -> Path | None:
        """The directory holding the tokenizer files (from the hub: fetched first), or None."""
        if self.tokenizer is None or self.tokenizer.is_file:
            return None
        self.tokenizer.present(TOKENIZER_FILES)
        return self.tokenizer.path


def read_checkpoint(src: str | Path | Source, *, backbone: str | Source | None = None, revision: str | None = None,
                    cache_dir: str | Path | None = None, beside: tuple[str, ...] = (),
                    task: str | None = None) -> Checkpoint:
    """Read any supported source into a Checkpoint (no model is built). `src` is resolved once
    (sources.resolve); a resolved Source is read as it is. beside: names of a transformers directory's tensors
    that belong to another module saved in the same file (a Stanford-NLP ColBERT's linear.weight), taken out
    before its names are mapped and kept under Checkpoint.beside. task: the task adapter merged into the weights,
    for a checkpoint that carries them (jina-embeddings-v3's: convert.Foreign); None: none merged. A task for a
    checkpoint without adapters is an error."""
    source = resolve(src, revision=revision, cache_dir=cache_dir)
    if source.is_file:
        if source.path.suffix != ".ckpt":
            raise CheckpointError(f"{source.path}: a single file must be an AlignScore .ckpt; for HF weights pass "
                                  f"the directory holding config.json")
        if task is not None:
            raise CheckpointError(f"{source.path}: task {task!r}: an AlignScore .ckpt carries no task adapters")
        ckpt = _read_alignscore(source.path, backbone, revision, cache_dir)
    else:
        ckpt = _read_model(source, beside, task)
    _untie_if_needed(ckpt)
    return ckpt


def refuse_unread(data: dict, *, source: str) -> None:
    """A CheckpointError for a config.json no family reads: custom code, or a model_type no family declares (convert
    names the architecture, the native model_type of code transformers has ported, and the families there are). A
    family's own config.json is read, or refused, by Config.from_hf (its format)."""
    if data.get("model_type") not in families():
        convert.hf_config.refuse_foreign(data, supported=families(), source=source)


def _read_model(source: Source, beside: tuple[str, ...] = (), task: str | None = None) -> Checkpoint:
    """A minialign directory, or a transformers one (+ the AlignScore heads export_hf writes beside it), or another
    code base's layout of a family (convert.foreign_format: jina's XLMRobertaLoRA), `task`'s adapter merged."""
    config_path = source.file("config.json")
    data = convert.read_json(config_path)
    foreign = convert.foreign_format(data) if "minialign_format" not in data else None
    if task is not None and foreign is None:
        raise CheckpointError(f"{config_path}: task {task!r}: this checkpoint carries no task adapters (only "
                              f"another code base's layout does, such as jina-embeddings-v3's own)")
    if "minialign_format" in data:
        check_native_format(data, source=config_path)
        weights = source.file("model.safetensors", optional=True)
        if weights is None:
            raise CheckpointError(f"{source}: minialign directory without model.safetensors")
        return Checkpoint(Config.from_dict(data["config"]), convert.read_safetensors(weights), str(weights), source,
                          architectures=architectures_of(data), modules=source)
    hf = foreign.foreign.config(data) if foreign else data
    refuse_unread(hf, source=str(config_path))
    config = Config.from_hf(hf, source=str(config_path))
    weights = convert.find_weights(source)
    state_dict = convert.read_state_dict(weights)
    adapters = None
    if foreign is not None:
        try:
            if task is None and foreign.foreign.adapters is not None:
                adapters = foreign.foreign.adapters(state_dict, data)
            state_dict = foreign.foreign.state_dict(state_dict, data, task)
        except ValueError as error:
            raise CheckpointError(f"{weights}: {error}") from None
    others = {name: state_dict.pop(name) for name in beside if name in state_dict}
    tensors, dropped = convert.hf_to_minialign(state_dict, config.format, source=str(weights))
    if adapters is not None:
        adapters = _renamed(adapters, config, str(weights))
    heads = source.file(HEADS_FILE, optional=True)
    if heads is not None:
        more, more_dropped = convert.alignscore_to_minialign(convert.read_safetensors(heads), config.format,
                                                             source=str(heads))
        tensors.update(more)
        dropped += more_dropped
    return Checkpoint(config, tensors, str(weights), source, dropped, layout="hf", beside=others,
                      architectures=architectures_of(data), adapters=adapters, modules=source)


def _renamed(adapters: convert.Adapters, config: Config, origin: str) -> convert.Adapters:
    """The adapters under minialign's names of the weights they update (transformers' before)."""
    layers = {}
    for name, parts in adapters.layers.items():
        mapped, _ = convert.hf_to_minialign({name: parts[0]}, config.format, source=origin)
        if len(mapped) != 1:
            raise CheckpointError(f"{origin}: {name}: an adapter on a weight minialign splits ({sorted(mapped)})")
        (own,) = mapped
        layers[own] = parts
    return dataclasses.replace(adapters, layers=layers)


def architectures_of(data: dict) -> tuple[str, ...]:
    """A config.json's `architectures` (a list of class names; minialign's native config.json writes it too)."""
    names = data.get("architectures") or ()
    return tuple(str(name) for name in ([names] if isinstance(names, str) else names))


def _read_alignscore(path: Path, backbone: str | Source | None, revision: str | None,
                     cache_dir: str | Path | None) -> Checkpoint:
    state_dict, hparams = convert.read_alignscore_ckpt(path)
    name = backbone or hparams.get("model")
    if not name:
        raise CheckpointError(f"{path}: no backbone named in hyper_parameters['model']; pass backbone=")
    config, tokenizer = resolve_backbone(name, revision=revision, cache_dir=cache_dir)
    tensors, dropped = convert.alignscore_to_minialign(state_dict, config.format, source=str(path))
    return Checkpoint(config, tensors, str(path), tokenizer, dropped, backbone_name=str(name), layout="alignscore")


def resolve_backbone(name: str | Source, *, revision: str | None = None,
                     cache_dir: str | Path | None = None) -> tuple[Config, Source | None]:
    """Config of a backbone, and the source of its tokenizer files (None for a preset): a preset name
    (unless a local directory has that name; from the hub: the preset's config, the repo's tokenizer),
    else a directory or hub id, resolved once (sources.resolve), whose config.json is read."""
    if not isinstance(name, Source) and name in PRESETS and not Path(name).expanduser().is_dir():
        return PRESETS[name], None
    source = resolve(name, revision=revision, cache_dir=cache_dir)
    if source.is_file:
        raise FileNotFoundError(f"backbone {name}: a file; a backbone is a directory, a preset name or a hub id")
    if source.from_hub and source.name in PRESETS:
        return PRESETS[source.name], source
    config_path = source.file("config.json")
    data = convert.read_json(config_path)
    if "minialign_format" in data:
        check_native_format(data, source=config_path)
        return Config.from_dict(data["config"]), source
    refuse_unread(data, source=str(source))
    return Config.from_hf(data, source=str(source)), source


def _untie_if_needed(ckpt: Checkpoint) -> None:
    """A decoder equal to the word embeddings is the tied one and is dropped; one that differs
    (AlignScore trains its own) unties the config so nothing is lost. The decoder's own bias (BERT's
    cls.predictions.decoder.bias, RoBERTa's lm_head.decoder.bias) is the head's bias tied (transformers 4, and 5
    with tied embeddings: _tied_weights_keys) and is dropped; one that differs is the bias transformers 5's forward
    adds when tie_word_embeddings=False unties it (BertLMPredictionHead: self.decoder(x)), and is the head's."""
    decoder_bias = ckpt.tensors.pop("mlm_head.decoder.bias", None)
    if decoder_bias is not None:
        bias = ckpt.tensors.get("mlm_head.bias")
        if bias is not None and not torch.equal(bias, decoder_bias):
            ckpt.dropped.append("mlm_head.bias (untied: the decoder's own bias is the one added)")
        elif bias is not None:
            ckpt.dropped.append("mlm_head.decoder.bias (the same tensor as mlm_head.bias)")
        ckpt.tensors["mlm_head.bias"] = decoder_bias
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
