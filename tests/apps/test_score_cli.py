"""`minialign score`: single pairs, JSONL/CSV round trips, resume, bad rows; published names."""

import csv
import json
import shutil

import pytest
from conftest import CORPUS, published_alignscore_cache

import minialign as ma
from minialign.apps.cli import main as cli


@pytest.fixture
def model_args(tiny_alignscore):  # noqa: F811
    path, backbone, _ = tiny_alignscore
    return ["--model", str(path), "--backbone", str(backbone)]


@pytest.fixture
def expected(tiny_alignscore):  # noqa: F811
    path, backbone, _ = tiny_alignscore
    scorer = ma.AlignScorer.from_pretrained(path, backbone=str(backbone))
    return scorer.score([c for c, _ in CORPUS], [h for _, h in CORPUS])


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def test_single_pair(model_args, expected, capsys):
    context, claim = CORPUS[0]
    assert cli(["score", "--context", context, "--claim", claim, *model_args]) == 0
    assert abs(float(capsys.readouterr().out.strip()) - expected[0]) < 1e-6


def test_jsonl_round_trip_with_ids(tmp_path, model_args, expected):
    rows = [{"id": f"ex{i}", "premise": c, "hypothesis": h} for i, (c, h) in enumerate(CORPUS)]
    _write_jsonl(tmp_path / "in.jsonl", rows)
    assert cli(["score", "--input", str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "out.jsonl"),
                "--context-field", "premise", "--claim-field", "hypothesis", *model_args]) == 0
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["id"] for r in out] == [r["id"] for r in rows]
    assert max(abs(r["score"] - e) for r, e in zip(out, expected)) < 1e-6


def test_csv_round_trip_with_line_numbers(tmp_path, model_args, expected):
    with open(tmp_path / "in.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["context", "claim"])
        writer.writeheader()
        writer.writerows({"context": c, "claim": h} for c, h in CORPUS)
    assert cli(["score", "--input", str(tmp_path / "in.csv"), "--output", str(tmp_path / "out.csv"), *model_args]) == 0
    with open(tmp_path / "out.csv", newline="") as f:
        out = list(csv.DictReader(f))
    assert [r["id"] for r in out] == [str(i + 2) for i in range(len(CORPUS))]  # line numbers after the header
    assert max(abs(float(r["score"]) - e) for r, e in zip(out, expected)) < 1e-6


def test_resume_after_interruption(tmp_path, model_args, expected, monkeypatch):
    rows = [{"id": i, "context": c, "claim": h} for i, (c, h) in enumerate(CORPUS)]
    _write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    args = ["score", "--input", str(tmp_path / "in.jsonl"), "--output", str(out), *model_args]
    assert cli(args) == 0
    # an interrupted run: three complete rows and half of a fourth (the settings record beside them)
    complete = "".join(json.dumps({"id": i, "score": expected[i]}) + "\n" for i in range(3))
    out.write_text(complete + '{"id": 3, "sco')
    assert cli(args) == 2  # refuses to touch an existing output without --resume
    assert out.read_text().endswith('"sco')
    scored = []
    original = ma.AlignScorer.score
    monkeypatch.setattr(ma.AlignScorer, "score", lambda self, c, h, **k: scored.extend(c) or original(self, c, h, **k))
    assert cli([*args, "--resume"]) == 0
    assert len(scored) == len(CORPUS) - 3
    result = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in result] == list(range(len(CORPUS)))
    assert max(abs(r["score"] - e) for r, e in zip(result, expected)) < 1e-6


def test_resume_refuses_a_different_input(tmp_path, model_args, capsys):
    _write_jsonl(tmp_path / "other.jsonl", [{"id": "zzz", "context": "x.", "claim": "y."}])
    _write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "context": "x.", "claim": "y."}])
    assert cli(["score", "--input", str(tmp_path / "other.jsonl"), "--output", str(tmp_path / "out.jsonl"),
                *model_args]) == 0
    assert cli(["score", "--input", str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "out.jsonl"),
                "--resume", *model_args]) == 2
    assert "does not hold the first 1 rows" in capsys.readouterr().err


def test_bad_rows_reported_with_line_numbers(tmp_path, model_args, capsys, monkeypatch):
    lines = ['{"context": "A context.", "claim": "Good claim."}', "not json", '{"context": "x"}',
             '{"context": "c", "claim": "   "}', '["a list"]', '{"context": 5, "claim": "Fine."}',
             '{"context": "Another.", "claim": "Also good."}']
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    args = ["score", "--input", str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "out.jsonl"), *model_args]
    monkeypatch.setattr(ma.AlignScorer, "score_pairs", lambda *a, **k: pytest.fail("scored before validation"))
    assert cli(args) == 2
    err = capsys.readouterr().err
    for number in (2, 3, 4, 5, 6):
        assert f"line {number}:" in err
    assert "line 1:" not in err and not (tmp_path / "out.jsonl").exists()
    monkeypatch.undo()
    assert cli([*args, "--skip-invalid"]) == 0
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["id"] for r in out] == [1, 7]


def test_python_m_minialign_score(tmp_path, model_args):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "minialign", "score", "--context", "Paris is in France.",
                             "--claim", "Paris is in France.", *model_args], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert 0.0 <= float(result.stdout) <= 1.0


def test_published_name_converted_once_then_reused(tmp_path, monkeypatch, tiny_alignscore):  # noqa: F811
    """AlignScore-base from a (fake) hub cache: converted to the native format once, reused offline."""
    from huggingface_hub import constants

    from minialign.products import alignscore as scorer_module

    path, backbone, _ = tiny_alignscore
    cache = published_alignscore_cache(tmp_path / "hf", tiny_alignscore)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setitem(scorer_module.PUBLISHED, "AlignScore-base", ("AlignScore-base.ckpt", "org/tiny-roberta"))
    first = ma.AlignScorer.from_pretrained("AlignScore-base", cache_dir=cache)
    native = cache / "minialign" / "AlignScore-base"
    assert (native / "model.safetensors").is_file() and (native / "vocab.json").is_file()
    shutil.rmtree(cache / "models--yzha--AlignScore")  # the converted copy is enough from now on
    second = ma.AlignScorer.from_pretrained("AlignScore-base", cache_dir=cache)
    pair = (["The tower is in Paris."], ["It is in Paris."])
    assert first.score(*pair) == second.score(*pair)
    direct = ma.AlignScorer.from_pretrained(path, backbone=str(backbone))
    assert abs(first.score(*pair)[0] - direct.score(*pair)[0]) < 1e-6


def test_an_older_format_in_the_cache_is_converted_again(tmp_path, monkeypatch, tiny_alignscore):  # noqa: F811
    """The converted-checkpoint cache carries the format number: a copy an older minialign wrote is made again from
    the published checkpoint, where any other native directory of that format is refused (test_loading.py)."""
    from huggingface_hub import constants

    from minialign.loading import NATIVE_FORMAT
    from minialign.products import alignscore

    path, backbone, _ = tiny_alignscore
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setitem(alignscore.PUBLISHED, "AlignScore-base", ("AlignScore-base.ckpt", "org/tiny-roberta"))
    cache = published_alignscore_cache(tmp_path / "hf", tiny_alignscore)
    native = alignscore.published_checkpoint("AlignScore-base", cache_dir=cache)
    config = native / "config.json"
    current = json.loads(config.read_text())
    config.write_text(json.dumps({**current, "minialign_format": NATIVE_FORMAT - 1}))
    with pytest.raises(ma.CheckpointError, match="minialign convert"):
        ma.AlignScorer.from_pretrained(native)  # the directory itself: refused
    assert alignscore.published_checkpoint("AlignScore-base", cache_dir=cache) == native
    assert json.loads(config.read_text()) == current  # converted again
    pair = (["The tower is in Paris."], ["It is in Paris."])
    direct = ma.AlignScorer.from_pretrained(path, backbone=str(backbone))
    again = ma.AlignScorer.from_pretrained("AlignScore-base", cache_dir=cache)
    assert abs(again.score(*pair)[0] - direct.score(*pair)[0]) < 1e-6


def test_published_name_offline_not_cached(tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("MINIALIGN_CACHE", str(tmp_path / "none"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "none"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "none"))
    assert cli(["score", "--context", "a.", "--claim", "b."]) == 2
    err = capsys.readouterr().err
    assert "--model path/AlignScore-base.ckpt --backbone path/roberta-base" in err
