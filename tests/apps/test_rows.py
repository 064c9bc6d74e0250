"""apps/files/ (rows.py, run.py, writer.py, settings.py), files in and out: every input row validated first, each
problem named by its file, line and field; outputs written row by row and resumed after the last complete one; the
settings record that a run continuing an output must match. Hostile files get a clear error or a documented result,
and nothing is lost."""

import csv
import json
import os

import pytest
from conftest import CORPUS

from minialign.apps.cli import main as cli
from minialign.apps.files.formats import InputError
from minialign.apps.files.run import run_file
from minialign.apps.files.settings import read_settings, settings_record


@pytest.fixture
def model_args(tiny_alignscore):  # noqa: F811
    path, backbone, _ = tiny_alignscore
    return ["--model", str(path), "--backbone", str(backbone)]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")  # ensure_ascii: \ud83d stays escaped
    return path


def _score(tmp_path, model_args, *extra, input_name="in.jsonl", output_name="out.jsonl"):
    return cli(["score", "--input", str(tmp_path / input_name), "--output", str(tmp_path / output_name),
                *model_args, *extra])


def _ids(path):
    if path.suffix == ".csv":
        with open(path, newline="", encoding="utf-8") as f:
            return [r["id"] for r in csv.DictReader(f)]
    return [json.loads(line)["id"] for line in path.read_text(encoding="utf-8").split("\n") if line]


def test_lone_surrogate_is_named_and_skippable(tmp_path, model_args, capsys):
    rows = [{"id": i, "context": c, "claim": h} for i, (c, h) in enumerate(CORPUS[:4])]
    rows[2]["claim"] = "A broken emoji \ud83d here."
    rows[3]["context"] = "\ud800"
    _jsonl(tmp_path / "in.jsonl", rows)
    assert _score(tmp_path, model_args) == 2
    err = capsys.readouterr().err
    assert "line 3: field 'claim' holds a lone surrogate (U+D83D" in err and "line 4: field 'context'" in err
    assert not (tmp_path / "out.jsonl").exists()
    assert _score(tmp_path, model_args, "--skip-invalid") == 0
    assert _ids(tmp_path / "out.jsonl") == [0, 1]
    assert _score(tmp_path, model_args, "--skip-invalid", "--resume") == 0  # nothing left, nothing crashes
    assert _ids(tmp_path / "out.jsonl") == [0, 1]


def test_csv_with_byte_order_mark_keeps_its_ids(tmp_path, model_args):
    with open(tmp_path / "in.csv", "w", newline="", encoding="utf-8-sig") as f:  # Excel's "CSV UTF-8"
        writer = csv.writer(f)
        writer.writerow(["id", "context", "claim"])
        writer.writerows([f"row-{i}", c, h] for i, (c, h) in enumerate(CORPUS[:3]))
    assert _score(tmp_path, model_args, input_name="in.csv", output_name="out.csv") == 0
    assert _ids(tmp_path / "out.csv") == ["row-0", "row-1", "row-2"]


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_resume_with_line_separators_and_newlines_in_ids(tmp_path, model_args, fmt):
    ids = ["a\u2028b", "c\u0085d", "e\nf", 'g"\nh', "plain"]
    rows = [{"id": i, "context": c, "claim": h} for i, (c, h) in zip(ids, CORPUS)]
    if fmt == "jsonl":
        _jsonl(tmp_path / "in.jsonl", rows)
    else:
        with open(tmp_path / "in.csv", "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=["id", "context", "claim"])
            writer.writeheader()
            writer.writerows(rows)
    names = dict(input_name=f"in.{fmt}", output_name=f"out.{fmt}")
    out = tmp_path / f"out.{fmt}"
    assert _score(tmp_path, model_args, **names) == 0
    whole = out.read_bytes()
    assert _ids(out) == ids
    cut = whole.index(b"e\nf" if fmt == "csv" else b"e\\nf") + 2  # interrupted inside the third record
    out.write_bytes(whole[:cut])
    assert _score(tmp_path, model_args, "--resume", **names) == 0
    assert out.read_bytes() == whole and _ids(out) == ids


def test_resume_refuses_other_settings(tmp_path, model_args, capsys):
    _jsonl(tmp_path / "in.jsonl", [{"id": i, "context": c, "claim": h} for i, (c, h) in enumerate(CORPUS[:3])])
    assert _score(tmp_path, model_args) == 0
    before = (tmp_path / "out.jsonl").read_bytes()
    (tmp_path / "out.jsonl").write_bytes(before.split(b"\n")[0] + b"\n")  # one row done
    assert _score(tmp_path, model_args, "--resume", "--mode", "bin_sp") == 2
    err = capsys.readouterr().err
    assert "refusing to resume" in err and "other settings (mode: 'nli_sp' then, 'bin_sp' now)" in err
    os.remove(tmp_path / "out.jsonl.settings.json")  # a file of unknown origin
    assert _score(tmp_path, model_args, "--resume") == 2
    assert "no record of the settings" in capsys.readouterr().err
    assert (tmp_path / "out.jsonl").read_bytes() == before.split(b"\n")[0] + b"\n"  # untouched


def test_output_equal_to_input_and_foreign_outputs(tmp_path, model_args, capsys):
    data = _jsonl(tmp_path / "in.jsonl", [{"id": 1, "context": "A context.", "claim": "A claim."}]).read_bytes()
    assert _score(tmp_path, model_args, output_name="in.jsonl") == 2
    assert "is the input file" in capsys.readouterr().err and (tmp_path / "in.jsonl").read_bytes() == data
    (tmp_path / "dir.jsonl").mkdir()
    assert _score(tmp_path, model_args, output_name="dir.jsonl") == 2
    assert "is a directory" in capsys.readouterr().err
    (tmp_path / "foreign.jsonl").write_text('{"name": "not ours"}\n')
    (tmp_path / "foreign.jsonl.settings.json").write_bytes((tmp_path / "in.jsonl").read_bytes())  # garbage
    assert _score(tmp_path, model_args, "--resume", output_name="foreign.jsonl") == 2
    assert "foreign.jsonl.settings.json: unreadable settings record" in capsys.readouterr().err


def test_foreign_output_rows_are_named(tmp_path, model_args, capsys):
    _jsonl(tmp_path / "in.jsonl", [{"id": 1, "context": "A context.", "claim": "A claim."}])
    assert _score(tmp_path, model_args) == 0
    (tmp_path / "out.jsonl").write_text('{"name": "not ours"}\n')
    assert _score(tmp_path, model_args, "--resume") == 2
    assert "out.jsonl: line 1 is not a row minialign wrote" in capsys.readouterr().err


def test_wrong_field_names_said_once_with_the_fields_found(tmp_path, model_args, capsys):
    _jsonl(tmp_path / "in.jsonl", [{"premise": c, "hypothesis": h} for c, h in CORPUS] * 40)
    assert _score(tmp_path, model_args) == 2
    err = capsys.readouterr().err
    assert "no row has the field 'context'; fields found: 'premise', 'hypothesis'" in err
    assert "--context-field" in err and len(err.splitlines()) <= 2
    _jsonl(tmp_path / "in.jsonl", [{"context": "A context.", "claim": 5}] * 50)  # every row bad
    assert _score(tmp_path, model_args, "--skip-invalid") == 2
    err = capsys.readouterr().err
    assert "every row" in err and "... and 30 more" in err and not (tmp_path / "out.jsonl").exists()


def test_non_utf8_null_and_empty_inputs(tmp_path, model_args, capsys):
    good = json.dumps({"context": "A context.", "claim": "A claim."}).encode()
    (tmp_path / "in.jsonl").write_bytes(good + b"\n" + b'{"context": "caf\xe9", "claim": "x."}\n'
                                        + b'{"context": null, "claim": "x."}\n')
    assert _score(tmp_path, model_args) == 2
    err = capsys.readouterr().err
    assert "line 2: not UTF-8 text (byte 0xe9" in err and "line 3: field 'context' is null" in err
    (tmp_path / "in.csv").write_bytes(b"context,claim\nA context.,A claim.\ncaf\xe9,x.\n")
    assert _score(tmp_path, model_args, input_name="in.csv", output_name="out.csv") == 2
    assert "in.csv: line 3: field 'context' is not UTF-8 text" in capsys.readouterr().err
    for name, expected in (("empty.jsonl", ""), ("empty.csv", "id,score\n")):
        (tmp_path / name).write_text("")
        with pytest.warns(UserWarning, match="no rows; the output holds none"):
            assert _score(tmp_path, model_args, input_name=name, output_name=f"out-{name}") == 0
        assert (tmp_path / f"out-{name}").read_text() == expected


def _lengths_job():
    """A job with no model: the length of each row's text."""
    from minialign.apps.files.run import Job

    return Job(fields={"text": "text"}, flags={"text": "--text-field"}, settings={"model": "len"},
               run=lambda rows: [{"n": len(r.values["text"])} for r in rows])


def test_json_errors_are_whole_and_malformed_rows_come_in_input_order(tmp_path):
    lines = ['{"id": 1, "text": "fine"}', '{"id": 2, "text": "fine"}', '{"id": 3, "text": "fine"}',
             '{"id": 4}', '{"id": 5, "text": "a\x00b"}', '{"id": 6, "text": "fine"}', '{"id": 7, "text": "fine"}',
             '{"id": 8, "text": null}', '{"id": 9, "text": "fine"}', '{"id": 10, "text": "unclosed}']
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(InputError) as error:
        run_file(_lengths_job(), tmp_path / "in.jsonl", tmp_path / "out.jsonl", progress=False)
    listed = [line.split(": ", 1)[1] for line in str(error.value).splitlines()[1:]]
    assert [int(line.split(":")[0].removeprefix("line ")) for line in listed] == [4, 5, 8, 10]
    assert listed[1] == ("line 5: invalid JSON at column 21: invalid control character (a raw NUL; "
                         "write it as \\u0000)")
    assert listed[3] == ("line 10: invalid JSON at column 20: a string starts there and is never closed on this line "
                         "(a raw newline inside it? write it as \\n)")


def test_no_row_is_silently_merged_into_another(tmp_path):
    """A quote never closed would swallow every later row into one field; a row with more or fewer values than
    the header, text after a closing quote, a NUL byte (a UTF-16 file read as UTF-8), a raw newline inside a
    JSON string: each an error naming the line where the row starts, nothing done. A quoted field that spans
    lines is CSV (RFC 4180; spreadsheets and pandas write one for a text with newlines): one row."""
    cases = {
        b'id,text\n1,hello\n2,"oops unterminated\n3,third row\n4,fourth row\n':
            ["line 3: a quoted field starts on this line and its quote is never closed: the 2 line(s) after it "
             "would have become part of it"],
        b'id,text\n1,a\x00b\n2,c\n': ["line 2: field 'text' holds a NUL byte (a UTF-16 file? save it as UTF-8)"],
        b'id,text\n1,"abc"def\n2,ok\n': ["line 2: not CSV (',' expected after '\"': text after a quoted field's "
                                        "closing quote; a quote inside a quoted field is written \"\")"],
        b'id,text\n1,one\n2\n3,three,extra\n': ["line 3: 1 values for 2 columns (id, text)",
                                                 "line 4: 3 values for 2 columns (id, text)"],
    }
    for data, expected in cases.items():
        (tmp_path / "in.csv").write_bytes(data)
        with pytest.raises(InputError) as error:
            run_file(_lengths_job(), tmp_path / "in.csv", tmp_path / "out.jsonl", progress=False)
        assert str(error.value).splitlines()[1:] == [f"{tmp_path / 'in.csv'}: {line}" for line in expected], data
        assert not (tmp_path / "out.jsonl").exists()
    (tmp_path / "in.jsonl").write_bytes(b'{"id": 1, "text": "a\nb"}\n{"id": 2, "text": "fine"}\n')
    with pytest.raises(InputError, match="line 1: invalid JSON at column 19: a string starts there and is never closed"):
        run_file(_lengths_job(), tmp_path / "in.jsonl", tmp_path / "out.jsonl", progress=False)
    (tmp_path / "in.csv").write_bytes(b'id,text\n1,"two\nlines"\n2,"a ""quoted"" word"\n3,last\n')
    assert run_file(_lengths_job(), tmp_path / "in.csv", tmp_path / "out.jsonl", progress=False) == 3
    assert [json.loads(line) for line in (tmp_path / "out.jsonl").open()] == \
        [{"id": "1", "n": 9}, {"id": "2", "n": 15}, {"id": "3", "n": 4}]


def test_repeated_ids_are_malformed_rows(tmp_path, capsys):
    """An id names one row: refused, each repeat named with the line of the first; --skip-invalid keeps
    the first (so --resume, which resumes by position, sees the same rows every run)."""
    ids = ["a", "b", "a", "c", "b", "d"]
    _jsonl(tmp_path / "in.jsonl", [{"id": i, "text": "x" * n} for n, i in enumerate(ids)])
    with pytest.raises(InputError) as error:
        run_file(_lengths_job(), tmp_path / "in.jsonl", tmp_path / "out.jsonl", progress=False)
    message = str(error.value)
    assert message.startswith("2 malformed row(s), nothing done")
    assert "line 3: id 'a' is also the id of line 1" in message and "line 5: id 'b' is also the id of line 2" in message
    assert not (tmp_path / "out.jsonl").exists()
    assert run_file(_lengths_job(), tmp_path / "in.jsonl", tmp_path / "out.jsonl", skip_invalid=True,
                    progress=False) == 4
    assert [(row["id"], row["n"]) for row in map(json.loads, (tmp_path / "out.jsonl").open())] == \
        [("a", 0), ("b", 1), ("c", 3), ("d", 5)]
    capsys.readouterr()


def test_the_settings_record_is_written_once_then_matched_both_ways(tmp_path):
    """One record for file outputs (beside them) and --ray directories (inside): written when the output
    begins, then every setting of either side compared, each difference named with both values."""
    record, output = tmp_path / "out.jsonl.settings.json", tmp_path / "out.jsonl"
    settings = {"model": "m", "fields": {"text": "text"}, "shape": (2, 3)}
    settings_record(record, settings, output=output, begun=False)
    assert read_settings(record) == {"model": "m", "fields": {"text": "text"}, "shape": [2, 3]}
    assert not list(tmp_path.glob(".*.tmp"))  # written beside, then renamed
    settings_record(record, settings, output=output, begun=True)  # the same settings: continues
    with pytest.raises(InputError, match=r"other settings \(extra: None then, 1 now; model: 'm' then, 'n' now\)"):
        settings_record(record, {**settings, "model": "n", "extra": 1}, output=output, begun=True)
    with pytest.raises(InputError, match=r"other settings \(shape: \[2, 3\] then, None now\)"):
        settings_record(record, {"model": "m", "fields": {"text": "text"}}, output=output, begun=True)
    directory = tmp_path / "shards"
    directory.mkdir()
    with pytest.raises(InputError, match="has no record of the settings that made it"):
        settings_record(directory / "_minialign.json", settings, output=directory, begun=True)
    (directory / "_minialign.json").write_text('{"mapper": "EmbedBatches", "shards": 3}')  # the flat layout of before
    assert read_settings(directory / "_minialign.json") == {"mapper": "EmbedBatches", "shards": 3}
    (directory / "_minialign.json").write_text("[1, 2]")
    with pytest.raises(InputError, match=f"_minialign.json: unreadable settings record; remove {directory} to start"):
        settings_record(directory / "_minialign.json", settings, output=directory, begun=True)


def test_a_long_quoted_field_stays_one_field(tmp_path):
    """A quoted text over the csv module's 128 KiB field limit, with a line inside that looks like a row: one
    field, not an error followed by rows made of its lines."""
    long = "\n".join(["x,y,z"] + ["word " * 40] * 1000)  # ~200 KB, its first line shaped like a row
    (tmp_path / "in.csv").write_text(f'id,text\n1,"{long}"\n2,short\n', encoding="utf-8")
    assert run_file(_lengths_job(), tmp_path / "in.csv", tmp_path / "out.jsonl", progress=False) == 2
    assert [json.loads(line) for line in (tmp_path / "out.jsonl").open()] == [{"id": "1", "n": len(long)},
                                                                             {"id": "2", "n": 5}]


def test_tsv_input_and_a_csv_in_another_delimiter_is_named(tmp_path):
    """.tsv is CSV's rules with a tab between fields (a quoted field may hold a tab or a newline); a .csv whose
    header is one column holding a semicolon or a tab was written with that delimiter, and the error says so."""
    (tmp_path / "in.tsv").write_bytes(b'id\ttext\n1\ta, b; c\n2\t"tab\there\nand a line"\n')
    assert run_file(_lengths_job(), tmp_path / "in.tsv", tmp_path / "out.jsonl", progress=False) == 2
    assert [json.loads(line) for line in (tmp_path / "out.jsonl").open()] == [{"id": "1", "n": 7},
                                                                             {"id": "2", "n": 19}]
    for data, looks, fix in ((b"id;text\n1;hello\n", "semicolon", "save it with commas (or tabs, as .tsv)"),
                             (b"id\ttext\n1\thello\n", "tab", "name it .tsv")):
        (tmp_path / "in.csv").write_bytes(data)
        with pytest.raises(InputError) as error:
            run_file(_lengths_job(), tmp_path / "in.csv", tmp_path / "other.jsonl", progress=False)
        assert f"holding a {looks}: the file looks {looks}-separated, and minialign reads .csv as comma-separated; " \
               f"{fix}" in str(error.value)
    (tmp_path / "in.tsv").write_bytes(b"id,text\n1,hello\n")
    with pytest.raises(InputError, match="looks comma-separated, and minialign reads .tsv as tab-separated; name it"):
        run_file(_lengths_job(), tmp_path / "in.tsv", tmp_path / "other.jsonl", progress=False)
    (tmp_path / "in.csv").write_bytes(b"id,body\n1,hello\n")  # another field name: no delimiter said
    with pytest.raises(InputError) as error:
        run_file(_lengths_job(), tmp_path / "in.csv", tmp_path / "other.jsonl", progress=False)
    assert "separated" not in str(error.value)


def test_resume_with_a_shorter_input_says_so_and_leaves_the_output(tmp_path):
    """An output with more rows than the input it is resumed with: refused with both counts and both files, and
    the output untouched (a partial last row included: it is cut only when the run goes on)."""
    _jsonl(tmp_path / "in.jsonl", [{"id": i, "text": "x" * i} for i in range(5)])
    out = tmp_path / "out.jsonl"
    assert run_file(_lengths_job(), tmp_path / "in.jsonl", out, progress=False) == 5
    with out.open("a") as f:
        f.write('{"id": 5, "n"')  # a row cut by an interruption
    before = out.read_bytes()
    _jsonl(tmp_path / "short.jsonl", [{"id": i, "text": "x" * i} for i in range(3)])
    with pytest.raises(InputError) as error:
        run_file(_lengths_job(), tmp_path / "short.jsonl", out, resume=True, progress=False)
    assert str(error.value).startswith(f"cannot resume: the output {out} has more rows (5) than the input "
                                       f"{tmp_path / 'short.jsonl'} (3 row(s))")
    assert out.read_bytes() == before
    _jsonl(tmp_path / "other.jsonl", [{"id": i, "text": "x"} for i in (0, 1, 9, 3, 4, 5)])
    with pytest.raises(InputError, match=r"does not hold the first 5 rows of .*other.jsonl \(its row 3 has id '2', "
                                         r"the input's 9\)"):
        run_file(_lengths_job(), tmp_path / "other.jsonl", out, resume=True, progress=False)
    assert out.read_bytes() == before
    _jsonl(tmp_path / "more.jsonl", [{"id": i, "text": "x" * i} for i in range(7)])
    assert run_file(_lengths_job(), tmp_path / "more.jsonl", out, resume=True, progress=False) == 2
    assert [json.loads(line)["id"] for line in out.open()] == list(range(7))


def test_an_interrupted_run_says_how_many_rows_it_wrote(tmp_path):
    """Ctrl-C in the middle of a file: run.Interrupted (a KeyboardInterrupt) with the complete rows in the output,
    which --resume continues."""
    from minialign.apps.files.run import Interrupted, Job

    def run(rows):
        if rows[0].id >= 4:
            raise KeyboardInterrupt
        return [{"n": len(r.values["text"])} for r in rows]

    job = Job(fields={"text": "text"}, flags={"text": "--text-field"}, settings={"model": "len"}, run=run)
    _jsonl(tmp_path / "in.jsonl", [{"id": i, "text": "x" * i} for i in range(10)])
    with pytest.raises(Interrupted) as stopped:
        run_file(job, tmp_path / "in.jsonl", tmp_path / "out.jsonl", block_rows=2, progress=False)
    assert (stopped.value.written, stopped.value.output) == (4, tmp_path / "out.jsonl")
    assert run_file(_lengths_job(), tmp_path / "in.jsonl", tmp_path / "out.jsonl", resume=True, progress=False) == 6
    assert [json.loads(line) for line in (tmp_path / "out.jsonl").open()] == [{"id": i, "n": i} for i in range(10)]
