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


def test_a_nan_on_either_side_fails_and_is_named(tmp_path, capsys, save_hf):
    """A NaN in one weight: every field it reaches is a failure named with its count, never 'OK' (Python's max
    drops a NaN that does not come first; the difference is inf instead)."""
    import torch

    from minialign.apps.parity import compare, difference

    model, directory = save_hf("bert")
    with torch.no_grad():
        model.pooler.dense.weight[0, 0] = float("nan")
    model.save_pretrained(directory)
    assert cli(["parity", str(directory)]) == 1
    out = capsys.readouterr().out
    assert "FAIL pooler_output: non-finite values (reference " in out and out.rstrip().endswith("FAIL")
    assert "max abs difference inf" in out
    ones = torch.ones(2, 3)
    for a, b in ((ones, ones * float("nan")), (ones * float("inf"), ones), (ones * float("nan"), ones * float("nan"))):
        problems = []
        assert difference("x", a, b, problems=problems) == float("inf") and problems[0].startswith("x: non-finite")
    assert difference("x", ones, ones + 0.5) == 0.5

    class Out:
        last_hidden_state = torch.zeros(1, 2, 3)
        pooler_output = torch.tensor([[0.0, float("nan")]])

    class Ours:
        last_hidden_state = torch.zeros(1, 2, 3)
        pooler_output = torch.zeros(1, 2)

    diffs = compare(Out, Ours, torch.ones(1, 2, dtype=torch.bool))
    assert diffs == {"last_hidden_state": 0.0, "pooler_output": float("inf")}
