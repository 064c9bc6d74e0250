"""What broke when the project was tried as a new user would (issue 11): hostile files and
arguments get a clear error naming the file, line and field, or a documented result; nothing is lost."""

import csv
import json
import os
import struct
import subprocess
import sys

import pytest
import torch
from conftest import CORPUS

import minialign as ma
from minialign import convert
from minialign.apps.cli import main as cli


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


# -- batch scoring ----------------------------------------------------------------------------------

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
    assert "refusing to resume" in err and "mode: the file was made with 'nli_sp', this run has 'bin_sp'" in err
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


# -- everywhere else -----------------------------------------------------------------------------------

@pytest.mark.parametrize("device,message", [("cuda", "not available on this machine"), ("cuda:7", "not available"),
                                            ("mps", "not available on this machine"), ("gpu0", "unknown device")])
def test_unavailable_devices_are_errors_not_tracebacks(tmp_path, model_args, capsys, device, message):
    if torch.cuda.is_available() and device.startswith("cuda"):
        pytest.skip("this machine has CUDA")
    assert cli(["score", "--context", "A.", "--claim", "B.", "--device", device, *model_args]) == 2
    assert message in capsys.readouterr().err


def test_parity_without_transformers_names_the_extra(tmp_path, monkeypatch, capsys, save_hf):
    _, directory = save_hf("bert")
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    assert cli(["parity", str(directory)]) == 2
    assert "pip install 'minialign[test]'" in capsys.readouterr().err


def test_convert_onto_a_file_is_refused(tmp_path, save_hf, capsys):
    _, directory = save_hf("bert")
    (tmp_path / "taken").write_text("keep me")
    assert cli(["convert", str(directory), str(tmp_path / "taken")]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err
    assert (tmp_path / "taken").read_text() == "keep me"


def test_shape_mismatch_error_is_short_and_says_why(tmp_path):
    from conftest import write_alignscore_ckpt

    path, _ = write_alignscore_ckpt(tmp_path / "a.ckpt", "roberta", vocab_size=50265, max_position_embeddings=514,
                                    hidden_size=24, num_attention_heads=2, intermediate_size=30, num_hidden_layers=2)
    with pytest.raises(ma.CheckpointError) as err:
        ma.AlignModel.from_pretrained(path)  # hyper_parameters name roberta-base: 768 wide
    message = str(err.value)
    assert len(message) < 1200 and "tensor shape(s) disagree" in message and "more" in message
    assert "--backbone" in message


def test_misspelt_local_paths_are_paths(tmp_path):
    for src in ("models/my-bert/v2", "./my-bert", "~/nowhere/bert", "weights.safetensors", "C:\\models\\bert"):
        with pytest.raises(FileNotFoundError, match="no such"):
            ma.Encoder.from_pretrained(src)


def test_unreachable_hub_fails_fast_from_the_cache(tmp_path, monkeypatch):
    """Not offline, but nothing answers: one refused connection on loopback, then the cache only."""
    import socket

    from huggingface_hub import constants

    from minialign import hub

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    hub.hub_reachable.cache_clear()
    calls = []
    import huggingface_hub

    real = huggingface_hub.hf_hub_download
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda *a, **k: calls.append(k) or real(*a, **k))
    try:
        with pytest.raises(FileNotFoundError, match="cannot be reached from this machine; set HF_HUB_OFFLINE=1"):
            ma.Encoder.from_pretrained("org/some-model", cache_dir=tmp_path / "cache")
    finally:
        hub.hub_reachable.cache_clear()
    assert calls and all(k["local_files_only"] for k in calls)


def test_unsupported_safetensors_dtype_is_named(tmp_path):
    header = json.dumps({"weird": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}}).encode()
    (tmp_path / "x.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0\0")
    with pytest.raises(ma.CheckpointError, match="unsupported dtype F8_E4M3 for tensor 'weird'"):
        convert.read_safetensors(tmp_path / "x.safetensors")


def test_writers_replace_files_rather_than_truncate_them(tmp_path, save_hf):
    """A process whose weights are mapped from a file keeps valid weights when the file is rewritten
    (write beside, then rename): no SIGBUS, old values intact, the new file in place."""
    path = tmp_path / "w.safetensors"
    convert.write_safetensors(path, {"w": torch.arange(4096, dtype=torch.float32)})
    before = os.stat(path).st_ino
    mapped = convert.read_safetensors(path)["w"]
    convert.write_safetensors(path, {"w": torch.zeros(8)})
    assert os.stat(path).st_ino != before
    assert torch.equal(mapped, torch.arange(4096, dtype=torch.float32))
    assert torch.equal(convert.read_safetensors(path)["w"], torch.zeros(8))
    # the same for a converted directory written over a model that is loaded from it
    _, directory = save_hf("bert")
    native = tmp_path / "native"
    assert cli(["convert", str(directory), str(native)]) == 0
    model = ma.Encoder.from_pretrained(native)
    expected = model.embeddings.word.weight.clone()
    inode = os.stat(native / "model.safetensors").st_ino
    assert cli(["convert", str(native), str(native), "--dtype", "bf16"]) == 0  # into itself
    assert os.stat(native / "model.safetensors").st_ino != inode
    assert torch.equal(model.embeddings.word.weight, expected)


def test_a_sigbus_needs_an_in_place_truncation(tmp_path):
    """What README's loading notes warn about, shown in a child process: truncating a mapped file in
    place (as `open(path, "wb")` does) kills the reader; minialign's writers never do that."""
    path = tmp_path / "w.safetensors"
    convert.write_safetensors(path, {"w": torch.ones(1 << 16)})
    code = ("import sys, torch; from minialign import convert; "
            "t = convert.read_safetensors(sys.argv[1])['w']; open(sys.argv[1], 'wb').close(); print(float(t.sum()))")
    result = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True)
    assert result.returncode == -7  # SIGBUS



# -- issue 22: destinations checked first; whole messages ----------------------------------------------

def test_every_destination_is_checked_before_any_model_loads(tmp_path, capsys):
    """The model named does not exist: an error about the destination proves it came first."""
    model = str(tmp_path / "no-such-model")
    rows = _jsonl(tmp_path / "in.jsonl", [{"id": 1, "text": "A text.", "context": "A.", "claim": "B."}])
    (tmp_path / "x.safetensors").mkdir()
    (tmp_path / "somedir").mkdir()
    (tmp_path / "done.jsonl").write_text('{"id": 1, "score": 0.5}\n')
    (tmp_path / "a-file").write_text("keep me")
    files = ["--input", str(rows), "--output"]
    cases = [
        (["embed", "--model", model, *files, str(tmp_path / "x.safetensors")],
         f"--output {tmp_path / 'x.safetensors'} is a directory; --output names a .jsonl or .safetensors file"),
        (["score", "--model", model, *files, str(tmp_path / "somedir")],
         f"--output {tmp_path / 'somedir'} is a directory"),
        (["score", "--model", model, *files, str(tmp_path / "scores")],
         f"--output {tmp_path / 'scores'} has no extension; name a .jsonl or .csv file"),
        (["classify", "--model", model, *files, str(tmp_path / "out.parquet")],
         "has an unknown format '.parquet'; name a .jsonl or .csv file"),
        (["classify", "--model", model, *files, str(tmp_path / "missing" / "out.jsonl")],
         f"the directory {tmp_path / 'missing'} does not exist"),
        (["score", "--model", model, *files, str(rows)], f"--output {rows} is the input file"),
        (["score", "--model", model, *files, str(tmp_path / "done.jsonl")], "exists; pass --resume"),
        (["embed", "--model", model, *files, str(tmp_path / "new.safetensors"), "--resume"], "cannot be resumed"),
        (["embed", "--model", model, "--ray", *files, str(tmp_path / "a-file")],
         f"--output {tmp_path / 'a-file'} exists and is not a directory"),
        (["embed", "--model", model, "--ray", *files, str(tmp_path / "shards.jsonl")],
         "looks like a file name (.jsonl), but this command writes a directory"),
        (["embed", "--model", model, "--input", str(tmp_path / "nothing.jsonl"), "--output", str(tmp_path / "o.jsonl")],
         f"--input {tmp_path / 'nothing.jsonl'}: no such file"),
        (["convert", model, str(tmp_path / "a-file")], f"DST {tmp_path / 'a-file'} exists and is not a directory"),
        (["convert", model, str(tmp_path / "a-file" / "native")], f"{tmp_path / 'a-file'} is not a directory"),
        (["explore", "--model", model, "--text", "Hello.", "--output", str(tmp_path / "page")],
         "has no extension; name a .html file"),
    ]
    for command, message in cases:
        assert cli(command) == 2, command
        err = capsys.readouterr().err
        assert message in err and "no-such-model" not in err, (command, err)
    assert (tmp_path / "a-file").read_text() == "keep me" and (tmp_path / "done.jsonl").read_text().count("\n") == 1


def _lengths_job():
    """A job with no model: the length of each row's text."""
    from minialign.apps.files.rows import Job

    return Job(fields={"text": "text"}, flags={"text": "--text-field"}, settings={"model": "len"},
               run=lambda rows: [{"n": len(r.values["text"])} for r in rows])


def test_json_errors_are_whole_and_malformed_rows_come_in_input_order(tmp_path):
    from minialign.apps.files.rows import InputError, run_file

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
    assert listed[3] == "line 10: invalid JSON at column 20: a string starts there and is never closed"


def test_repeated_ids_are_malformed_rows(tmp_path, capsys):
    """An id names one row: refused, each repeat named with the line of the first; --skip-invalid keeps
    the first (so --resume, which resumes by position, sees the same rows every run)."""
    from minialign.apps.files.rows import InputError, run_file

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


def test_parity_prints_its_header_before_any_figure(tmp_path, capsys, minilm_dir):
    from conftest import save_classifier

    save_classifier(tmp_path / "m", "bert", 3, minilm_dir)
    assert cli(["parity", str(tmp_path / "m")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"source: {tmp_path / 'm'}") and lines[1].split() == ["layer", "hidden", "attention"]
    assert any(line.split()[0] == "logits" for line in lines[2:]) and lines[-1].endswith("OK")


# The entry point as a user runs it (`python -m minialign`), numpy hidden as if it were not installed:
# a finder ahead of every other refuses it, as an absent module is refused.
WITHOUT_NUMPY = """
import runpy, sys

class NoNumpy:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" or name.startswith("numpy."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, NoNumpy())
sys.argv = ["minialign", *sys.argv[1:]]
runpy.run_module("minialign", run_name="__main__", alter_sys=True)
"""


def test_no_numpy_warning_when_numpy_is_absent(tmp_path):
    result = subprocess.run([sys.executable, "-c", WITHOUT_NUMPY, "convert", str(tmp_path / "missing"),
                             str(tmp_path / "out")], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr == f"minialign convert: error: {tmp_path / 'missing'}: no such file or directory\n"
    check = subprocess.run([sys.executable, "-c", WITHOUT_NUMPY.replace('runpy.run_module("minialign", run_name='
                                                                        '"__main__", alter_sys=True)', "import numpy")],
                           capture_output=True, text=True)
    assert "No module named 'numpy'" in check.stderr  # the finder does hide it


def test_cli_warnings_are_one_line_without_their_source(tmp_path, model_args):
    (tmp_path / "empty.jsonl").write_text("")
    result = subprocess.run([sys.executable, "-m", "minialign", "score", "--input", str(tmp_path / "empty.jsonl"),
                             "--output", str(tmp_path / "out.jsonl"), *model_args], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "no rows" in line or line.startswith(" ")]
    assert said == [f"warning: UserWarning: {tmp_path / 'empty.jsonl'}: no rows; the output holds none"], result.stderr
