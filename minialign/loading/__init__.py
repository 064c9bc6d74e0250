"""Checkpoints -> models: read a checkpoint from a resolved source, build a model class from it, write
it back out. May import: nn, sources, text, convert."""

from minialign.loading.devices import DtypeChoice, auto_compute_dtype, cpu_has_native, parse_dtype, resolve_device
from minialign.loading.weights import build, check_tensors, initialise, load, materialise, own_tensors
from minialign.loading.checkpoints import (HEADS_FILE, NATIVE_FORMAT, Checkpoint, StaleFormatError, check_native_format,
                                           is_current, read_checkpoint, resolve_backbone)
from minialign.loading.export import copy_tokenizer_files, export_hf, output_directory, save_native
from minialign.loading.pretrained import Pretrained

__all__ = ["HEADS_FILE", "NATIVE_FORMAT", "Checkpoint", "DtypeChoice", "Pretrained", "StaleFormatError",
           "auto_compute_dtype", "build", "check_native_format", "check_tensors", "copy_tokenizer_files",
           "cpu_has_native", "export_hf", "initialise", "is_current", "load", "materialise", "output_directory",
           "own_tensors", "parse_dtype", "read_checkpoint", "resolve_backbone", "resolve_device", "save_native"]


def __getattr__(name: str):  # a module of this folder read as an attribute (PEP 562)
    from minialign import submodule

    return submodule(__name__, name)
