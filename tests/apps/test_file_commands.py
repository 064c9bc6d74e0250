"""`minialign embed` and `minialign classify` on files, and `score --method minicheck`: the same
validation, resume and error rules as `minialign score`."""

import json

import pytest
import torch
from conftest import save_classifier
from conftest import CLAIMS, DOCS

import minialign as ma
from minialign import convert
from minialign.apps.cli import main as cli

TEXTS = ["The Eiffel Tower is in Paris.", "", "Unicode: café 東京 😀", "word " * 400, "Short."]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _rows(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_embed_jsonl_and_safetensors(tmp_path, minilm_dir, capsys):
    _jsonl(tmp_path / "in.jsonl", [{"id": f"t{i}", "text": t} for i, t in enumerate(TEXTS)])
    expected = ma.SentenceEncoder.from_pretrained(minilm_dir).encode(TEXTS)
    args = ["embed", "--model", str(minilm_dir), "--input", str(tmp_path / "in.jsonl")]
    assert cli([*args, "--output", str(tmp_path / "out.jsonl")]) == 0
    rows = _rows(tmp_path / "out.jsonl")
    assert [r["id"] for r in rows] == [f"t{i}" for i in range(len(TEXTS))]
    torch.testing.assert_close(torch.tensor([r["embedding"] for r in rows]), expected, atol=1e-6, rtol=0)
    assert cli([*args, "--output", str(tmp_path / "out.safetensors")]) == 0
    tensors = convert.read_safetensors(tmp_path / "out.safetensors")
    torch.testing.assert_close(tensors["embedding"], expected, atol=1e-6, rtol=0)
    metadata = convert.mapped.MappedSafetensors(tmp_path / "out.safetensors").metadata
    assert json.loads(metadata["ids"]) == [f"t{i}" for i in range(len(TEXTS))]
    assert cli([*args, "--output", str(tmp_path / "out.safetensors"), "--resume"]) == 2
    assert "cannot be resumed" in capsys.readouterr().err
    assert cli(["embed", "--model", str(minilm_dir), "--text", "hello"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 384


def test_embed_resume_and_bad_rows(tmp_path, minilm_dir, capsys):
    _jsonl(tmp_path / "in.jsonl", [{"text": t} for t in TEXTS] + [{"text": None}, {"body": "x"}])
    out = tmp_path / "out.jsonl"
    args = ["embed", "--model", str(minilm_dir), "--input", str(tmp_path / "in.jsonl"), "--output", str(out)]
    assert cli(args) == 2
    err = capsys.readouterr().err
    assert "line 6: field 'text' is null" in err and "line 7: field 'text' is missing" in err
    assert cli([*args, "--skip-invalid"]) == 0
    whole = out.read_text()
    out.write_text("".join(whole.splitlines(keepends=True)[:2]))
    assert cli([*args, "--skip-invalid", "--resume"]) == 0
    assert out.read_text() == whole
    assert cli([*args, "--skip-invalid", "--resume", "--normalize"]) == 2  # other settings
    assert "normalize" in capsys.readouterr().err


def test_embed_truncate_dim_and_binary_precision_in_both_formats(tmp_path, minilm_dir, capsys):
    """--truncate-dim and --precision as encode takes them: codes as ints in .jsonl and as int8 / uint8 tensors in
    .safetensors, the same whatever the block size (a row's codes never depend on its block); both are settings
    --resume compares; int8 / uint8 need --calibration (test_embed_prompts.py), saying why."""
    _jsonl(tmp_path / "in.jsonl", [{"id": f"t{i}", "text": t} for i, t in enumerate(TEXTS)])
    encoder = ma.SentenceEncoder.from_pretrained(minilm_dir)
    args = ["embed", "--model", str(minilm_dir), "--input", str(tmp_path / "in.jsonl")]
    short = encoder.encode(TEXTS, truncate_dim=32, normalize_embeddings=True, warn_truncation=False)
    assert cli([*args, "--output", str(tmp_path / "short.jsonl"), "--truncate-dim", "32", "--normalize"]) == 0
    torch.testing.assert_close(torch.tensor([r["embedding"] for r in _rows(tmp_path / "short.jsonl")]), short,
                               atol=1e-6, rtol=0)
    for precision, dtype in (("ubinary", torch.uint8), ("binary", torch.int8)):
        codes = encoder.encode(TEXTS, precision=precision, warn_truncation=False)
        assert cli([*args, "--output", str(tmp_path / f"{precision}.jsonl"), "--precision", precision,
                    "--batch-size", "2"]) == 0
        assert torch.equal(torch.tensor([r["embedding"] for r in _rows(tmp_path / f"{precision}.jsonl")]),
                           codes.long())
        assert cli([*args, "--output", str(tmp_path / f"{precision}.safetensors"), "--precision", precision]) == 0
        written = convert.read_safetensors(tmp_path / f"{precision}.safetensors")["embedding"]
        assert written.dtype == dtype and torch.equal(written, codes)
    out = tmp_path / "short.jsonl"
    out.write_text("".join(out.read_text().splitlines(keepends=True)[:2]))
    assert cli([*args, "--output", str(out), "--resume", "--truncate-dim", "64", "--normalize"]) == 2
    assert "truncate_dim" in capsys.readouterr().err
    assert cli([*args, "--output", str(tmp_path / "int8.jsonl"), "--precision", "int8"]) == 2
    assert "--calibration is needed with precision int8" in capsys.readouterr().err


def test_classify_file_labels_and_scores(tmp_path, minilm_dir):
    save_classifier(tmp_path / "nli", "bert", 3, minilm_dir)
    rows = [{"id": 1, "text": "A man eats.", "pair": "Someone eats."}, {"id": 2, "text": "Only one text."},
            {"id": 3, "text": "It rains.", "pair": "It is dry."}]
    _jsonl(tmp_path / "in.jsonl", rows)
    for out in (tmp_path / "out.jsonl", tmp_path / "out.csv"):
        assert cli(["classify", "--model", str(tmp_path / "nli"), "--input", str(tmp_path / "in.jsonl"),
                    "--output", str(out)]) == 0
    clf = ma.Classifier.from_pretrained(tmp_path / "nli")
    pairs = clf.predict(["A man eats.", "It rains."], ["Someone eats.", "It is dry."])
    single = clf.predict(["Only one text."])
    got = _rows(tmp_path / "out.jsonl")
    assert [r["id"] for r in got] == [1, 2, 3]
    for record, expected in zip(got, [pairs[0], single[0], pairs[1]]):
        scores = torch.tensor([record[f"score_{label}"] for label in clf.labels])
        torch.testing.assert_close(scores, expected, atol=1e-6, rtol=0)
        assert record["label"] == clf.labels[int(expected.argmax())]
    header = (tmp_path / "out.csv").read_text().splitlines()[0]
    assert header == "id,label," + ",".join(f"score_{label}" for label in clf.labels)


def test_score_method_minicheck(tmp_path, minicheck_dir, capsys):  # noqa: F811
    _jsonl(tmp_path / "in.jsonl", [{"id": i, "context": d, "claim": c} for i, (d, c) in enumerate(zip(DOCS, CLAIMS))])
    expected = ma.MiniCheckScorer.from_pretrained(minicheck_dir).score(DOCS, CLAIMS, warn_truncation=False)
    with pytest.warns(ma.runtime.engine.TruncationWarning, match="MiniCheck"):
        assert cli(["score", "--method", "minicheck", "--model", str(minicheck_dir), "--input",
                    str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "out.jsonl")]) == 0
    got = [r["score"] for r in _rows(tmp_path / "out.jsonl")]
    assert max(abs(a - b) for a, b in zip(got, expected)) <= 1e-6
    settings = json.loads((tmp_path / "out.jsonl.settings.json").read_text())["settings"]
    assert settings["mode"] == "minicheck" and settings["chunk_size"] == ma.products.minicheck.CHUNK_SIZE
    out = tmp_path / "out.jsonl"  # a resumed run must chunk documents the same way
    out.write_text(out.read_text().splitlines(keepends=True)[0])
    assert cli(["score", "--method", "minicheck", "--model", str(minicheck_dir), "--input",
                str(tmp_path / "in.jsonl"), "--output", str(out), "--resume", "--chunk-size", "100"]) == 2
    assert "chunk_size" in capsys.readouterr().err


def test_minicheck_rows_whose_claim_has_no_sentence_are_scored(tmp_path, minicheck_dir, tiny_alignscore, capsys):
    """MiniCheck never splits the claim: a row whose claim has no sentence is scored (the runner's own
    check, MiniCheckScorer.check); AlignScore, which splits it, refuses that row."""
    rows = [{"id": 0, "context": DOCS[0], "claim": CLAIMS[0]}, {"id": 1, "context": DOCS[1], "claim": " \n "}]
    _jsonl(tmp_path / "in.jsonl", rows)
    args = ["score", "--input", str(tmp_path / "in.jsonl")]
    assert cli([*args, "--method", "minicheck", "--model", str(minicheck_dir), "--output", str(tmp_path / "mc.jsonl")]) == 0
    expected = ma.MiniCheckScorer.from_pretrained(minicheck_dir).score([r["context"] for r in rows],
                                                                       [r["claim"] for r in rows])
    got = [r["score"] for r in _rows(tmp_path / "mc.jsonl")]
    assert max(abs(a - b) for a, b in zip(got, expected)) <= 1e-6
    path, backbone, _ = tiny_alignscore
    assert cli([*args, "--model", str(path), "--backbone", str(backbone), "--output", str(tmp_path / "as.jsonl")]) == 2
    assert "line 2: field 'claim' has no sentence" in capsys.readouterr().err


def test_a_missing_pair_is_a_single_text_on_every_face(tmp_path, minilm_dir):
    """One rule for the optional pair field: absent, null (pandas writes null for a missing value) or, in CSV
    (which has no null), empty, the row is a single text, as pairs[i] = None is in Python; the other rows run."""
    save_classifier(tmp_path / "nli", "bert", 3, minilm_dir)
    clf = ma.Classifier.from_pretrained(tmp_path / "nli")
    _jsonl(tmp_path / "in.jsonl", [{"id": 1, "text": "A man eats.", "hypothesis": "Someone eats."},
                                   {"id": 2, "text": "Only one text.", "hypothesis": None},
                                   {"id": 3, "text": "No pair field."}])
    (tmp_path / "in.csv").write_text('id,text,hypothesis\n1,A man eats.,Someone eats.\n2,Only one text.,\n'
                                     '3,No pair field.,\n', encoding="utf-8")
    expected = clf.predict(["A man eats.", "Only one text.", "No pair field."], ["Someone eats.", None, None])
    assert not torch.allclose(expected[1], clf.predict(["Only one text."], [""])[0])  # "" as a pair differs
    for name in ("in.jsonl", "in.csv"):
        out = tmp_path / f"out-{name}.jsonl"
        assert cli(["classify", "--model", str(tmp_path / "nli"), "--input", str(tmp_path / name), "--output", str(out),
                    "--pair-field", "hypothesis"]) == 0
        got = torch.tensor([[r[f"score_{label}"] for label in clf.labels] for r in _rows(out)])
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
