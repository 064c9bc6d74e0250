"""Loading: minialign dirs, device and dtype, mapped weights, the parity command (where files come
from, a local path or the hub: test_sources.py)."""

import json
import re
import warnings

import pytest
import torch

import minialign as ma
from minialign.loading import NATIVE_FORMAT, devices
from minialign.apps.cli import main as cli


def test_device_and_dtype(save_hf):
    _, directory = save_hf("roberta")
    model = ma.Encoder.from_pretrained(directory, dtype=torch.bfloat16, device="cpu")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert not any(p.is_meta for p in model.parameters())
    out = model(torch.randint(3, 200, (2, 5)))
    assert out.last_hidden_state.dtype == torch.bfloat16
    assert not model.training


@pytest.mark.parametrize("native", [True, False])
def test_half_precision_on_a_cpu_without_it_warns(save_hf, monkeypatch, native):
    _, directory = save_hf("bert")
    monkeypatch.setattr(devices, "cpu_has_native", lambda dtype: native)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ma.Encoder.from_pretrained(directory, dtype=torch.bfloat16)
        ma.Encoder.from_pretrained(directory)  # float32: never
    emulated = [w for w in caught if "no native torch.bfloat16 matmul" in str(w.message)]
    assert len(emulated) == (0 if native else 1)


def test_native_config_round_trip(tmp_path, minilm_dir):
    assert cli(["convert", str(minilm_dir), str(tmp_path / "n")]) == 0
    data = json.loads((tmp_path / "n" / "config.json").read_text())
    assert data["minialign_format"] == NATIVE_FORMAT == 2 and data["config"]["hidden_size"] == 384
    data["minialign_format"] = 99
    (tmp_path / "n" / "config.json").write_text(json.dumps(data))
    with pytest.raises(ma.CheckpointError, match="format 99"):
        ma.Encoder.from_pretrained(tmp_path / "n")


def test_a_native_directory_of_an_older_format_is_refused_naming_convert(tmp_path, minilm_dir):
    """A directory an older minialign wrote (format 1: 0.1 and 0.2) is refused, the message naming the command that
    makes it again; as a backbone too."""
    from minialign.loading import StaleFormatError, is_current

    assert cli(["convert", str(minilm_dir), str(tmp_path / "n")]) == 0
    assert is_current(tmp_path / "n")
    data = json.loads((tmp_path / "n" / "config.json").read_text())
    (tmp_path / "n" / "config.json").write_text(json.dumps({**data, "minialign_format": 1}))
    assert not is_current(tmp_path / "n")
    with pytest.raises(StaleFormatError, match=r"format 1, written by an older minialign.*`minialign convert SOURCE "
                                               + re.escape(str(tmp_path / "n")) + "`"):
        ma.Encoder.from_pretrained(tmp_path / "n")
    from minialign.loading import resolve_backbone

    with pytest.raises(StaleFormatError, match="minialign convert"):
        resolve_backbone(str(tmp_path / "n"))


def test_loading_assigns_mapped_tensors_without_copy(minilm_dir):
    """Built on the meta device and filled with assign=True: a weight already in the target dtype
    is the very tensor read from the (memory-mapped) file, so loading holds one copy."""
    from minialign.loading import build, read_checkpoint

    ckpt = read_checkpoint(minilm_dir)
    word = ckpt.tensors["encoder.embeddings.word.weight"]
    model = build(ma.Encoder, ckpt)
    assert model.embeddings.word.weight.data_ptr() == word.data_ptr()
    halved = build(ma.Encoder, ckpt, dtype=torch.bfloat16)
    assert halved.embeddings.word.weight.dtype == torch.bfloat16


def test_parity_command(save_hf, capsys, tmp_path):
    _, directory = save_hf("bert", "mlm")
    assert cli(["parity", str(directory)]) == 0
    out = capsys.readouterr().out
    assert "pooled" in out and "OK" in out


def test_parity_command_on_alignscore_ckpt_and_failure(tmp_path, capsys):
    from conftest import write_alignscore_ckpt

    path, ref = write_alignscore_ckpt(tmp_path / "a.ckpt", "roberta")
    ref["backbone"].save_pretrained(tmp_path / "backbone")
    assert cli(["parity", str(path), "--backbone", str(tmp_path / "backbone")]) == 0
    out = capsys.readouterr().out
    assert "tri_label_logits" in out
    assert cli(["parity", str(path), "--backbone", str(tmp_path / "backbone"), "--tolerance", "-1"]) == 1
