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
