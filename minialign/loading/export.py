"""Write a checkpoint out: minialign's native directory, or transformers' layout."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from minialign import convert
from minialign.loading.weights import cast
from minialign.loading.checkpoints import HEADS_FILE, NATIVE_FORMAT, Checkpoint
from minialign.sources import Source
from minialign.text.tokenizer import TOKENIZER_FILES


def save_native(ckpt: Checkpoint, directory: str | Path, *, dtype: torch.dtype | None = None) -> Path:
    """Write config.json + model.safetensors (minialign names) and any tokenizer files."""
    directory = output_directory(directory)
    tensors = {k: cast(v, torch.device("cpu"), dtype) if dtype else v for k, v in ckpt.tensors.items()}
    convert.write_safetensors(directory / "model.safetensors", tensors, metadata={"format": "pt"})
    convert.write_json(directory / "config.json", {"minialign_format": NATIVE_FORMAT, "config": ckpt.config.to_dict()})
    copy_tokenizer_files(ckpt.tokenizer, directory)
    return directory


def export_hf(ckpt: Checkpoint, directory: str | Path, *, dtype: torch.dtype | None = None) -> Path:
    """Write a transformers layout: config.json + model.safetensors (BertModel/RobertaModel names,
    loadable by AutoModel) and, when the checkpoint has them, the MLM head and AlignScore heads in
    alignscore_heads.safetensors under AlignScore's own names (mlm_head.*, bin_layer.*, ...)."""
    directory = output_directory(directory)
    tensors = {k: cast(v, torch.device("cpu"), dtype) if dtype else v for k, v in ckpt.tensors.items()}
    hf = convert.minialign_to_hf(tensors, ckpt.config.format)
    backbone, heads = convert.split_hf_backbone(hf, ckpt.config.format)
    convert.write_safetensors(directory / "model.safetensors", backbone, metadata={"format": "pt"})
    if heads:
        convert.write_safetensors(directory / HEADS_FILE, heads, metadata={"format": "pt"})
    convert.write_json(directory / "config.json", ckpt.config.to_hf(classifier="classifier.out_proj.weight" in tensors))
    copy_tokenizer_files(ckpt.tokenizer, directory)
    return directory


def export_hf_masked_lm(ckpt: Checkpoint, directory: str | Path, *, dtype: torch.dtype | None = None) -> Path:
    """Write transformers' *ForMaskedLM layout (what AutoModelForMaskedLM loads): config.json naming that class,
    model.safetensors with the backbone under the family's prefix (`bert.`) and the head under transformers' own
    names (the tied decoder left out: transformers ties it again). For a MaskedLMModel's checkpoint: its head's
    tensors are those under mlm_head. and, where the family keeps them there (ModernBERT), classifier."""
    directory = output_directory(directory)
    tensors = {k: cast(v, torch.device("cpu"), dtype) if dtype else v for k, v in ckpt.tensors.items()}
    names = ckpt.config.format.names
    head = {k: v for k, v in tensors.items() if k.startswith(("mlm_head.", "classifier."))}
    backbone = {k: v for k, v in tensors.items() if k not in head}
    hf = {names.model_prefix + k: v for k, v in convert.minialign_to_hf(backbone, ckpt.config.format).items()}
    hf.update(convert.minialign_to_hf(head, ckpt.config.format))
    convert.write_safetensors(directory / "model.safetensors", hf, metadata={"format": "pt"})
    config = ckpt.config.to_hf()
    config["architectures"] = [ckpt.config.format.config.masked_lm_class]
    convert.write_json(directory / "config.json", config)
    copy_tokenizer_files(ckpt.tokenizer, directory)
    return directory


def output_directory(directory: str | Path) -> Path:
    """Create the directory a converted checkpoint goes to; refuse a path that is an existing file."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"{directory} exists and is not a directory; a converted checkpoint is a directory")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def copy_tokenizer_files(src: Source | Path | None, dst: Path) -> list[str]:
    """Copy the tokenizer files a source (or directory) has into `dst` (from the hub: fetched first)."""
    if src is None:
        return []
    files = convert.as_files(src)
    copied = []
    for name in TOKENIZER_FILES:
        found = files.file(name, optional=True)
        if found is not None and found.resolve() != (dst / name).resolve():
            shutil.copyfile(found, dst / name)
            copied.append(name)
    return copied
