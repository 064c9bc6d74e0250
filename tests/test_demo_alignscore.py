"""scripts/demo_alignscore.py: the offline route to try the main job. A few training steps here (the README's
run takes 200): the directory it writes is labelled a demo, and `minialign score` and `explore` take it."""

from __future__ import annotations

import json

import pytest

import minialign as ma
from minialign.apps.cli import main as cli


def test_the_demo_checkpoint_runs_the_main_job_and_says_what_it_is(tmp_path, minilm_dir, monkeypatch, capsys):
    import demo_alignscore
    import trained_alignscore

    monkeypatch.setattr(trained_alignscore, "CACHE", tmp_path / "cache")
    monkeypatch.setitem(trained_alignscore.RECIPE, "steps", 3)  # make_demo sets it; restored after the test
    directory = demo_alignscore.make_demo(tmp_path / "alignscore-demo", steps=3, echo=lambda *a: None)
    assert {p.name for p in directory.iterdir()} >= {"config.json", "model.safetensors", "README.md", "vocab.txt"}
    assert "DEMO AlignScore checkpoint (not a scorer to trust)" in (directory / "README.md").read_text()
    assert json.loads((directory / "config.json").read_text())["minialign_format"]
    scorer = ma.AlignScorer.from_pretrained(directory)
    (expected,) = scorer.score(["The tower was built in 1889."], ["It was built in 1889."])
    assert cli(["score", "--model", str(directory), "--context", "The tower was built in 1889.",
                "--claim", "It was built in 1889."]) == 0
    assert float(capsys.readouterr().out) == pytest.approx(expected, abs=1e-6)
    assert cli(["explore", "--model", str(directory), "--text", "The tower.", "--pair", "A tower.",
                "--output", str(tmp_path / "page.html")]) == 0
    assert (tmp_path / "page.html").stat().st_size > 0
    with pytest.raises(SystemExit):
        demo_alignscore.main(["--steps", "0"])


def test_the_demo_refuses_an_unwritable_destination_before_training(tmp_path, minilm_dir, monkeypatch):
    """The save path is checked first: a destination that is a file stops the demo before any training step."""
    import demo_alignscore
    import trained_alignscore

    monkeypatch.setattr(trained_alignscore, "trained_alignscore", lambda **k: pytest.fail("trained before the check"))
    (tmp_path / "taken").write_text("a file")
    with pytest.raises(ValueError, match="--out .*taken exists and is not a directory"):
        demo_alignscore.make_demo(tmp_path / "taken", steps=3, echo=lambda *a: None)


def test_the_demo_says_its_progress(tmp_path, minilm_dir, monkeypatch):
    """A line before training with the expected time, and one every PROGRESS_EVERY steps with the time left."""
    import demo_alignscore
    import trained_alignscore

    monkeypatch.setattr(trained_alignscore, "CACHE", tmp_path / "cache")
    monkeypatch.setitem(trained_alignscore.RECIPE, "steps", 3)
    monkeypatch.setattr(trained_alignscore, "PROGRESS_EVERY", 1)
    lines = []
    demo_alignscore.make_demo(tmp_path / "demo", steps=3, echo=lines.append)
    assert lines[0].startswith("training a DEMO AlignScore checkpoint: 3 steps")
    assert [line.split()[1] for line in lines if line.startswith("step")] == ["1/3", "2/3", "3/3"]
    assert all("s left" in line for line in lines if line.startswith("step"))
