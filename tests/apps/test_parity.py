"""apps/parity.py and `minialign parity`: the comparison against transformers, what it prints, and its
error without transformers."""

import re
import sys

import pytest

from minialign.apps.cli import main as cli


def test_parity_without_transformers_names_the_extra(tmp_path, monkeypatch, capsys, save_hf):
    _, directory = save_hf("bert")
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    assert cli(["parity", str(directory)]) == 2
    assert 'pip install -e ".[test]"' in capsys.readouterr().err


def test_parity_prints_its_header_before_any_figure(tmp_path, capsys, minilm_dir):
    from conftest import save_classifier

    save_classifier(tmp_path / "m", "bert", 3, minilm_dir)
    assert cli(["parity", str(tmp_path / "m"), "--backend", "sdpa"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"source: {tmp_path / 'm'}") and lines[0].endswith("runs: sdpa, sdpa packed")
    assert lines[1].split() == ["layer", "sdpa", "sdpa", "packed"]  # no eager run: no attention column
    assert [line.split()[0] for line in lines[2:-1]] == ["emb", "0", "1", "2", "logits"]
    assert lines[-1].endswith("over 2 run(s) (tolerance 0.0001): OK")


def test_parity_compares_every_backend_and_layout_by_default(tmp_path, capsys, save_hf, monkeypatch):
    """The command users run checks what they run: eager, sdpa and flex, padded and packed, layer by layer;
    attention probabilities from the eager padded run. A wrong packed path shows in its own column."""
    from minialign.nn import layout

    _, directory = save_hf("roberta")
    assert cli(["parity", str(directory), "--layout", "packed", "--backend", "eager"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("runs: eager packed")
    assert cli(["parity", str(directory)]) == 0
    lines = capsys.readouterr().out.splitlines()
    runs = ["eager", "eager packed", "sdpa", "sdpa packed", "flex", "flex packed"]
    assert lines[0].endswith("runs: " + ", ".join(runs)) and lines[1].endswith("attention (eager)")
    layer0 = lines[3].split()
    assert layer0[0] == "0" and len(layer0) == 1 + len(runs) + 1 and all(float(x) <= 1e-5 for x in layer0[1:])
    assert lines[-1].endswith("over 6 run(s) (tolerance 0.0001): OK")
    original = layout.Layout.unpack  # a packed path that is off by 1%: only the packed columns fail
    monkeypatch.setattr(layout.Layout, "unpack", lambda self, t: original(self, t) * (1.01 if self.packed else 1))
    assert cli(["parity", str(directory), "--backend", "sdpa"]) == 1
    lines = capsys.readouterr().out.splitlines()
    last_layer = lines[2 + 3].split()  # emb, 0, 1, 2
    assert last_layer[0] == "2" and float(last_layer[1]) <= 1e-5 < float(last_layer[2]), lines
    assert lines[-1].endswith("FAIL")
    with pytest.raises(SystemExit):
        cli(["parity", str(directory), "--backend", "flash"])


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
    assert "FAIL minialign's weights: pooler.dense.weight: 1 NaN" in out  # the weight first, then what it reaches
    assert "FAIL eager: pooled: non-finite values (reference " in out
    assert out.rstrip().endswith("FAIL (non-finite weights)")
    assert "FAIL flex packed: pooled: non-finite values" in out
    assert [line.split()[0] for line in out.splitlines() if "non-finite" in line and line.startswith(" ")] == ["pooled"]
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


def test_fail_lines_number_layers_as_the_table_does(capsys, save_hf):
    """A NaN that enters at layer 1 (the table's row "1", transformers' hidden_states[2]): the FAIL lines say
    "layer 1", the row the table marks non-finite first, never hidden_2; the attention of that layer is
    "layer 1 attention", the table's attention column on row "1"."""
    import torch

    model, directory = save_hf("bert")
    with torch.no_grad():
        model.encoder.layer[1].attention.self.query.weight[0, 0] = float("nan")  # layer 1's probabilities on
    model.save_pretrained(directory)
    assert cli(["parity", str(directory), "--backend", "eager", "--layout", "padded"]) == 1
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith(" ")}
    assert "non-finite" not in rows["0"] and "non-finite" in rows["1"]
    fails = [line for line in out.splitlines() if line.startswith("FAIL eager:")]
    assert fails[0].startswith("FAIL eager: layer 1: non-finite values"), fails
    assert "FAIL eager: layer 1 attention: non-finite values" in out
    assert not any(re.search(r"(hidden|attention)_\d", line) for line in fails), fails


def test_a_non_finite_weight_is_named_before_any_comparison(capsys, save_hf):
    """Both sides read the same file, so a NaN or infinity in a weight is the checkpoint's, named as the file
    names it and by each side, before the table; the command fails even where no output reaches the weight
    (a position past the inputs' length)."""
    import torch

    model, directory = save_hf("bert")
    with torch.no_grad():
        model.embeddings.position_embeddings.weight[-1, 0] = float("nan")  # a position no input reaches
        model.embeddings.position_embeddings.weight[-1, 1] = float("inf")
    model.save_pretrained(directory)
    assert cli(["parity", str(directory), "--backend", "sdpa"]) == 1
    lines = capsys.readouterr().out.splitlines()
    said = "embeddings.position_embeddings.weight: 1 NaN, 1 infinity"
    assert lines[1] == f"FAIL minialign's weights: {said}" and lines[2] == f"FAIL transformers' weights: {said}"
    assert lines[3].split()[0] == "layer"  # the table after them
    assert all("non-finite" not in line for line in lines[3:-1])  # no output reaches it ...
    assert lines[-1].endswith("FAIL (non-finite weights)")  # ... and still no pass
    # the check itself: floating tensors only, each named through `name`
    from minialign.apps.parity import non_finite_weights

    tensors = {"a": torch.ones(2), "ids": torch.arange(3), "b": torch.tensor([1.0, float("-inf")])}
    assert non_finite_weights(tensors) == ["b: 1 infinity"]
    assert non_finite_weights(tensors, name=lambda key: f"bert.{key}") == ["bert.b: 1 infinity"]


def test_the_help_says_what_parity_compares_and_why_its_tolerance(capsys, monkeypatch):
    """`minialign parity` compares two implementations of the same weights; its default tolerance is the one
    the CLI guide prints and docs/parity.md explains beside the tests' bound."""
    from pathlib import Path

    from minialign.apps import cli as cli_module

    seen = {}
    monkeypatch.setattr(cli_module, "run_parity", lambda args: seen.setdefault("tolerance", args.tolerance) and 0)
    cli(["parity", "somewhere"])
    default = seen["tolerance"]
    docs = Path(__file__).parents[2] / "docs"
    assert float(re.search(r"\[--tolerance ([^]]+)\]", (docs / "guides" / "cli.md").read_text())[1]) == default
    text = " ".join((docs / "parity.md").read_text().split())
    assert float(re.search(r"default tolerance is ([0-9.e-]+[0-9])", text)[1]) == default
    assert "1e-5" in text and "same weights" in text
    with pytest.raises(SystemExit):
        cli(["parity", "--help"])
    helped = " ".join(capsys.readouterr().out.split())
    assert "same weights" in helped and f"default {default:g}" in helped and "1e-5" in helped


@pytest.mark.parametrize("model_type", ["gemma3_text", "qwen3", "qwen2"])
def test_parity_on_the_newest_families(model_type, tmp_path, capsys):
    """`minialign parity` on a tiny random model of each newest family transformers saved (bidirectional Gemma 3 with
    a sliding window; causal Qwen 3 and Qwen 2): every backend and layout within the tolerance, layer by layer."""
    import torch
    import transformers

    shape = dict(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=48, pad_token_id=0)
    made = {"gemma3_text": (transformers.Gemma3TextModel, transformers.Gemma3TextConfig(
                **shape, head_dim=8, sliding_window=4, layer_types=["sliding_attention", "full_attention"],
                use_bidirectional_attention=True)),
            "qwen3": (transformers.Qwen3Model, transformers.Qwen3Config(**shape, head_dim=8)),
            "qwen2": (transformers.Qwen2Model, transformers.Qwen2Config(**shape))}
    model_class, config = made[model_type]
    torch.manual_seed(0)
    model_class(config).save_pretrained(tmp_path / model_type)
    assert cli(["parity", str(tmp_path / model_type)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[2:-1]] == ["emb", "0", "1"]
    assert lines[-1].endswith("over 6 run(s) (tolerance 0.0001): OK")
    assert max(float(x) for line in lines[2:-1] for x in line.split()[1:]) <= 1e-5
