"""apps/parity.py and `minialign parity`: the comparison against transformers, what it prints, and its
error without transformers."""

import sys

from minialign.apps.cli import main as cli


def test_parity_without_transformers_names_the_extra(tmp_path, monkeypatch, capsys, save_hf):
    _, directory = save_hf("bert")
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    assert cli(["parity", str(directory)]) == 2
    assert "pip install 'minialign[test]'" in capsys.readouterr().err


def test_parity_prints_its_header_before_any_figure(tmp_path, capsys, minilm_dir):
    from conftest import save_classifier

    save_classifier(tmp_path / "m", "bert", 3, minilm_dir)
    assert cli(["parity", str(tmp_path / "m")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"source: {tmp_path / 'm'}") and lines[1].split() == ["layer", "hidden", "attention"]
    assert any(line.split()[0] == "logits" for line in lines[2:]) and lines[-1].endswith("OK")
