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


# classes export_hf writes as export_hf_head does (a masked LM too: a SparseEncoder's MLMTransformer loads its head)
TOKEN_HEADS = ("ForMaskedLM", "ForTokenClassification", "ForQuestionAnswering")


def save_native(ckpt: Checkpoint, directory: str | Path, *, dtype: torch.dtype | None = None) -> Path:
    """Write config.json + model.safetensors (minialign names), any tokenizer files and a sentence-transformers
    model's module files (carry_modules), which SentenceEncoder reads as it reads the original's."""
    modules = sentence_modules(ckpt)
    directory = output_directory(directory)
    tensors = {k: cast(v, torch.device("cpu"), dtype) if dtype else v for k, v in ckpt.tensors.items()}
    convert.write_safetensors(directory / "model.safetensors", tensors, metadata={"format": "pt"})
    native = {"minialign_format": NATIVE_FORMAT, "config": ckpt.config.to_dict()}
    if ckpt.architectures:  # which head the tensors are for (models/auto.py reads it back)
        native["architectures"] = list(ckpt.architectures)
    convert.write_json(directory / "config.json", native)
    copy_tokenizer_files(ckpt.tokenizer, directory)
    carry_modules(modules, directory, dtype)
    return directory


def export_hf(ckpt: Checkpoint, directory: str | Path, *, dtype: torch.dtype | None = None) -> Path:
    """Write a transformers layout: config.json + model.safetensors (BertModel/RobertaModel names,
    loadable by AutoModel) and, when the checkpoint has them, the MLM head and AlignScore heads in
    alignscore_heads.safetensors under AlignScore's own names (mlm_head.*, bin_layer.*, ...). A checkpoint whose
    config.json names a masked-LM, token-classification or QA class is written as that class (export_hf_head). A
    sentence-transformers model's module files go beside (carry_modules): sentence-transformers loads the directory
    as it loads the original."""
    if any(name.endswith(TOKEN_HEADS) for name in ckpt.architectures):
        return export_hf_head(ckpt, directory, dtype=dtype)
    modules = sentence_modules(ckpt)
    directory = output_directory(directory)
    tensors = {k: cast(v, torch.device("cpu"), dtype) if dtype else v for k, v in ckpt.tensors.items()}
    hf = convert.minialign_to_hf(tensors, ckpt.config.format)
    backbone, heads = convert.split_hf_backbone(hf, ckpt.config.format)
    convert.write_safetensors(directory / "model.safetensors", backbone, metadata={"format": "pt"})
    if heads:
        convert.write_safetensors(directory / HEADS_FILE, heads, metadata={"format": "pt"})
    convert.write_json(directory / "config.json", ckpt.config.to_hf(classifier="classifier.out_proj.weight" in tensors))
    copy_tokenizer_files(ckpt.tokenizer, directory)
    carry_modules(modules, directory, dtype)
    return directory


def export_hf_head(ckpt: Checkpoint, directory: str | Path, *, dtype: torch.dtype | None = None) -> Path:
    """Write transformers' layout of a model with a head on every token (what AutoModelForMaskedLM /
    AutoModelForTokenClassification / AutoModelForQuestionAnswering load): config.json naming the class the checkpoint
    names (Checkpoint.architectures: "BertForTokenClassification"), model.safetensors with the backbone under the
    family's prefix (`bert.`) and the head under transformers' own names (a tied decoder left out: transformers ties
    it again). The head's tensors are those outside `encoder.` (a MaskedLMModel's mlm_head. and, where the family keeps
    them there, ModernBERT's classifier.; a token classifier's classifier.; a QA model's qa_outputs.)."""
    modules = sentence_modules(ckpt)
    directory = output_directory(directory)
    if len(ckpt.architectures) != 1:
        raise ValueError(f"{ckpt.origin}: transformers' layout of a head names one class, got {ckpt.architectures}")
    (architecture,) = ckpt.architectures
    tensors = {k: cast(v, torch.device("cpu"), dtype) if dtype else v for k, v in ckpt.tensors.items()}
    names = ckpt.config.format.names
    head = {k: v for k, v in tensors.items() if not k.startswith("encoder.")}
    backbone = {k: v for k, v in tensors.items() if k not in head}
    hf = {names.model_prefix + k: v for k, v in convert.minialign_to_hf(backbone, ckpt.config.format).items()}
    hf.update(convert.minialign_to_hf(head, ckpt.config.format,
                                      token_head=architecture.endswith("ForTokenClassification")))
    convert.write_safetensors(directory / "model.safetensors", hf, metadata={"format": "pt"})
    config = ckpt.config.to_hf()
    config["architectures"] = [architecture]
    convert.write_json(directory / "config.json", config)
    copy_tokenizer_files(ckpt.tokenizer, directory)
    carry_modules(modules, directory, dtype)
    return directory


def sentence_modules(ckpt: Checkpoint) -> convert.ModuleFiles | None:
    """The sentence-transformers module files of the directory the checkpoint was read from (convert.read_module_files:
    modules.json, sentence_bert_config.json, config_sentence_transformers.json, each module's folder), found before
    anything is written, so a module that cannot be written is refused, by type and path, first; None: none."""
    return convert.read_module_files(ckpt.modules) if ckpt.modules is not None else None


def carry_modules(modules: convert.ModuleFiles | None, directory: Path, dtype: torch.dtype | None) -> None:
    """Write the module files beside the converted weights, as they are, a Dense's weights cast as the rest are."""
    if modules is not None:
        convert.write_module_files(modules, directory, dtype=dtype)


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
