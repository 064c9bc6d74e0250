"""convert.mapped: our safetensors reader (validation, private mapping, page release) and how loading uses it."""

import json
import struct

import pytest
import torch
from safetensors.torch import load_file, save_file

from minialign import convert
import minialign as ma
from minialign.convert.mapped import MappedSafetensors

TENSORS = {
    "f32": torch.randn(3, 5), "f16": torch.randn(4).half(), "bf16": torch.randn(300, 300).bfloat16(),
    "i64": torch.arange(7), "i8": torch.tensor([-1, 2], dtype=torch.int8), "bool": torch.tensor([True, False]),
    "empty": torch.zeros(0, 4), "scalar": torch.tensor(2.5),
}


def _raw(header: dict, data: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def test_reads_every_dtype_and_metadata(tmp_path):
    save_file(TENSORS, tmp_path / "x.safetensors", metadata={"format": "pt"})
    mapped = MappedSafetensors(tmp_path / "x.safetensors")
    assert mapped.metadata == {"format": "pt"} and set(mapped.tensors) == set(TENSORS)
    for name, expected in TENSORS.items():
        got = mapped.tensors[name]
        assert got.dtype == expected.dtype and got.shape == expected.shape and torch.equal(got, expected), name


def test_writes_stay_private_and_released_pages_read_back(tmp_path):
    path = tmp_path / "x.safetensors"
    big = torch.randn(512, 1024)  # 2 MB: whole pages to give back
    save_file({"big": big, "small": torch.ones(3)}, path)
    tensors = convert.read_safetensors(path)
    tensors["small"].add_(1)  # copy-on-write: the file keeps its bytes
    assert torch.equal(load_file(path)["small"], torch.ones(3))
    convert.release(tensors["big"])
    assert torch.equal(tensors["big"], big)  # read again from the file
    convert.release(torch.randn(4))  # not mapped: nothing happens


def test_unaligned_data_is_copied(tmp_path):
    data = b"\x00" + torch.arange(4, dtype=torch.float32).numpy().tobytes()
    path = tmp_path / "x.safetensors"
    path.write_bytes(_raw({"pad": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                           "x": {"dtype": "F32", "shape": [4], "data_offsets": [1, 17]}}, data))
    assert torch.equal(convert.read_safetensors(path)["x"], torch.arange(4.0))


@pytest.mark.parametrize("header, data, problem", [
    ({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}, bytes(16), "needs 16 bytes"),
    ({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, bytes(8), "needs 16 bytes"),
    ({"x": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}}, bytes(8), "unsupported dtype C64 for tensor 'x'"),  # a valid file, a dtype we do not load
    ({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, bytes(4), "bad entry"),
    ({"x": {"dtype": "F32", "shape": [2]}}, bytes(8), "bad entry"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12), "overlap"),
    ([1, 2], b"", "not a JSON object"),
])
def test_bad_headers_are_named(tmp_path, header, data, problem):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(_raw(header, data))
    with pytest.raises(ma.CheckpointError, match=problem):
        convert.read_safetensors(path)


def test_header_size_beyond_the_file(tmp_path):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", 10**6) + b"{}")
    with pytest.raises(ma.CheckpointError, match="does not fit"):
        convert.read_safetensors(path)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_loading_gives_back_exactly_the_copied_tensors(save_hf, monkeypatch, dtype):
    _, directory = save_hf("roberta")
    released = []
    monkeypatch.setattr(convert, "release", lambda t: released.append(t.data_ptr()))
    ckpt = ma.loading.read_checkpoint(directory)
    model = ma.loading.build(ma.Encoder, ckpt, dtype=dtype)
    params = {p.data_ptr() for p in model.parameters()}
    fused = {k for k in ckpt.tensors if k.rsplit(".", 2)[-2] in ("query", "key", "value")}
    copied = {k for k, t in ckpt.tensors.items() if k.startswith("encoder.")
              and (k in fused or t.dtype != dtype)}
    assert {k for k, t in ckpt.tensors.items() if t.data_ptr() in released} >= copied
    assert not params & set(released)  # never a page a parameter still reads
    if dtype == torch.float32:  # unfused weights are the mapped views themselves
        assert model.embeddings.word.weight.data_ptr() == ckpt.tensors["encoder.embeddings.word.weight"].data_ptr()


def test_overwriting_a_mapped_file_keeps_loaded_weights(save_hf, tmp_path):
    """Converting a directory into itself: the new file is renamed into place, the old mapping stays valid."""
    _, directory = save_hf("bert")
    ckpt = ma.loading.read_checkpoint(directory)
    before = {k: v.clone() for k, v in ckpt.tensors.items()}
    ma.loading.save_native(ckpt, directory)
    for name, tensor in ckpt.tensors.items():
        assert torch.equal(tensor, before[name]), name
    again = ma.loading.read_checkpoint(directory)
    assert all(torch.equal(again.tensors[k], before[k]) for k in before)
    assert not list(directory.glob(".*partial"))
