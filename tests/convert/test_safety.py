"""Bad files: malicious pickles, corrupt or truncated safetensors, wrong shapes, missing keys."""

import os
import re

import pytest
import torch
from conftest import write_alignscore_ckpt

from minialign import convert
import minialign as ma


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.ckpt"])
def test_malicious_pickle_refused_and_never_run(tmp_path, name, save_hf):
    marker = tmp_path / "PWNED"
    _, directory = save_hf("bert")
    sd = convert.read_safetensors(directory / "model.safetensors")
    payload = {"state_dict": sd, "hyper_parameters": {"model": str(directory)}, "evil": _Evil(marker)}
    if name.endswith(".bin"):
        (directory / "model.safetensors").unlink()
        payload = {**sd, "evil": _Evil(marker)}
    target = directory / name
    torch.save(payload, target)
    with pytest.raises(ma.CheckpointError, match="refused.*system"):
        if name.endswith(".bin"):
            ma.Encoder.from_pretrained(directory)
        else:
            ma.AlignModel.from_pretrained(target)
    assert not marker.exists()


def test_restricted_unpickler_refuses_unknown_class(tmp_path):
    torch.save({"state_dict": {}, "x": torch.optim.SGD}, tmp_path / "a.ckpt")
    with pytest.raises(ma.CheckpointError, match="torch.optim"):
        convert.read_alignscore_ckpt(tmp_path / "a.ckpt")


def test_lightning_ckpt_reads_without_pytorch_lightning(tmp_path):
    import importlib.util

    assert importlib.util.find_spec("pytorch_lightning") is None
    path, _ = write_alignscore_ckpt(tmp_path / "a.ckpt", "roberta", backbone_name="roberta-base")
    state_dict, hparams = convert.read_alignscore_ckpt(path)
    assert type(hparams) is dict and hparams["model"] == "roberta-base"
    assert "tri_layer.weight" in state_dict


def test_bin_loads_through_weights_only(save_hf, tmp_path):
    hf, directory = save_hf("roberta")
    (directory / "model.safetensors").unlink()
    torch.save(hf.state_dict(), directory / "pytorch_model.bin")
    model = ma.Encoder.from_pretrained(directory)
    ids = torch.randint(3, 200, (1, 5))
    with torch.no_grad():
        torch.testing.assert_close(model(ids).last_hidden_state, hf(ids).last_hidden_state, atol=1e-5, rtol=0)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_corrupt_safetensors(save_hf, damage):
    _, directory = save_hf("bert")
    path = directory / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes({"truncate": data[: len(data) // 2], "garbage": b"\x00\xff" * 100, "empty": b""}[damage])
    with pytest.raises(ma.CheckpointError, match=r"model\.safetensors: corrupt or truncated"):
        ma.Encoder.from_pretrained(directory)


def test_corrupt_pickle(tmp_path):
    (tmp_path / "a.ckpt").write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(ma.CheckpointError, match="a.ckpt"):
        ma.AlignModel.from_pretrained(tmp_path / "a.ckpt")


@pytest.mark.parametrize("data,message", [
    (b"just some text\n", r"x\.ckpt is not a torch checkpoint \(neither a zip archive nor a torch pickle; "
                          r"it begins b'just some text\\n'\)"),
    (b"", r"x\.ckpt is empty, not a torch checkpoint"),
    (b"PK\x03\x04" + b"\0" * 40, r"x\.ckpt is a damaged zip archive \(truncated or corrupt\)"),
])
def test_a_file_that_is_no_checkpoint_says_what_it_is_not(tmp_path, data, message):
    (tmp_path / "x.ckpt").write_bytes(data)
    with pytest.raises(ma.CheckpointError, match=f"^{re.escape(str(tmp_path))}/{message}"):
        convert.read_alignscore_ckpt(tmp_path / "x.ckpt")


def test_shape_mismatch_names_file_key_and_shapes(save_hf):
    _, directory = save_hf("bert")
    import json

    config = json.loads((directory / "config.json").read_text())
    config["intermediate_size"] = 54
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(ma.CheckpointError) as err:
        ma.Encoder.from_pretrained(directory)
    message = str(err.value)
    assert "model.safetensors" in message and "layers.0.ffn.up.weight" in message
    assert "(53, 36)" in message and "(54, 36)" in message


def test_missing_backbone_weight_is_an_error(save_hf):
    from safetensors.torch import save_file

    _, directory = save_hf("bert")
    sd = convert.read_safetensors(directory / "model.safetensors")
    del sd["encoder.layer.1.output.dense.weight"]
    save_file(dict(sd), directory / "model.safetensors")
    with pytest.raises(ma.CheckpointError, match=r"1 missing weight\(s\): encoder\.layers\.1\.ffn\.down\.weight$"):
        ma.Encoder.from_pretrained(directory)


def test_extra_layer_is_unexpected(save_hf):
    from safetensors.torch import save_file

    _, directory = save_hf("bert")
    sd = dict(convert.read_safetensors(directory / "model.safetensors"))
    sd["encoder.layer.7.output.dense.bias"] = torch.zeros(36)
    save_file(sd, directory / "model.safetensors")
    with pytest.raises(ma.CheckpointError, match=r"1 unexpected weight\(s\): encoder\.layers\.7\.ffn\.down\.bias$"):
        ma.Encoder.from_pretrained(directory)


def test_non_tensor_state_dict(tmp_path):
    torch.save({"state_dict": {"a": 1}}, tmp_path / "x.ckpt")
    with pytest.raises(ma.CheckpointError, match="not named tensors"):
        convert.read_alignscore_ckpt(tmp_path / "x.ckpt")


def test_unsupported_model_type(save_hf):
    import json

    _, directory = save_hf("bert")
    config = json.loads((directory / "config.json").read_text())
    config["model_type"] = "gpt2"
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="model_type 'gpt2'"):
        ma.Encoder.from_pretrained(directory)


@pytest.mark.parametrize("path", ["../outside", "/etc", "1_Pooling/../../outside", "~/x", "..\\outside"])
def test_a_module_folder_outside_the_model_is_refused(tmp_path, path):
    """modules.json names each module's folder; one that leads out of the model is never read."""
    import json

    (tmp_path / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": path, "type": "sentence_transformers.models.Pooling"}]))
    with pytest.raises(ma.CheckpointError, match="module 1 has path .* not a folder of the model"):
        convert.read_modules(tmp_path)


def test_missing_files_are_named(tmp_path, save_hf):
    """A directory without config.json, a model without weights, a sharded one: each named, as a
    CheckpointError (and, for the missing file, a FileNotFoundError)."""
    with pytest.raises(ma.CheckpointError, match=f"^{re.escape(str(tmp_path))}: no config.json$") as missing:
        ma.Encoder.from_pretrained(tmp_path)
    assert isinstance(missing.value, FileNotFoundError)
    _, directory = save_hf("bert")
    (directory / "model.safetensors").rename(directory / "model-00001-of-00002.safetensors")
    with pytest.raises(ma.CheckpointError, match="no weight file"):
        ma.Encoder.from_pretrained(directory)
    (directory / "model.safetensors.index.json").write_text("{}")
    with pytest.raises(ma.CheckpointError, match="sharded checkpoints are not supported"):
        ma.Encoder.from_pretrained(directory)
