"""convert/files.py: safetensors files read (an unknown dtype named) and written (a file rewritten is
replaced, never truncated under a process that maps it)."""

import json
import os
import struct

import pytest
import torch

import minialign as ma
from minialign import convert
from minialign.apps.cli import main as cli


def test_unsupported_safetensors_dtype_is_named(tmp_path):
    header = json.dumps({"weird": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}}).encode()
    (tmp_path / "x.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0\0")
    with pytest.raises(ma.CheckpointError, match="unsupported dtype F8_E4M3 for tensor 'weird'"):
        convert.read_safetensors(tmp_path / "x.safetensors")


def test_writers_replace_files_rather_than_truncate_them(tmp_path, save_hf):
    """A process whose weights are mapped from a file keeps valid weights when the file is rewritten
    (write beside, then rename): no SIGBUS, old values intact, the new file in place."""
    path = tmp_path / "w.safetensors"
    convert.write_safetensors(path, {"w": torch.arange(4096, dtype=torch.float32)})
    before = os.stat(path).st_ino
    mapped = convert.read_safetensors(path)["w"]
    convert.write_safetensors(path, {"w": torch.zeros(8)})
    assert os.stat(path).st_ino != before
    assert torch.equal(mapped, torch.arange(4096, dtype=torch.float32))
    assert torch.equal(convert.read_safetensors(path)["w"], torch.zeros(8))
    # the same for a converted directory written over a model that is loaded from it
    _, directory = save_hf("bert")
    native = tmp_path / "native"
    assert cli(["convert", str(directory), str(native)]) == 0
    model = ma.Encoder.from_pretrained(native)
    expected = model.embeddings.word.weight.clone()
    inode = os.stat(native / "model.safetensors").st_ino
    assert cli(["convert", str(native), str(native), "--dtype", "bf16"]) == 0  # into itself
    assert os.stat(native / "model.safetensors").st_ino != inode
    assert torch.equal(model.embeddings.word.weight, expected)
