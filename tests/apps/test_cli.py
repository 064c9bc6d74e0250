"""The command line as a user meets it: where a command writes is checked before any model loads; a bad
device or destination is one line of error, never a traceback; warnings are one line; numpy is not
needed."""

import json
import subprocess
import sys

import pytest
import torch

from minialign.apps.cli import main as cli


def _alignscore(tiny_alignscore) -> list[str]:
    """The options naming the tiny AlignScore checkpoint (conftest)."""
    return ["--model", str(tiny_alignscore[0]), "--backbone", str(tiny_alignscore[1])]


@pytest.mark.parametrize("device,message", [("cuda", "not available on this machine"), ("cuda:7", "not available"),
                                            ("mps", "not available on this machine"), ("gpu0", "unknown device")])
def test_unavailable_devices_are_errors_not_tracebacks(tmp_path, tiny_alignscore, capsys, device, message):
    if torch.cuda.is_available() and device.startswith("cuda"):
        pytest.skip("this machine has CUDA")
    assert cli(["score", "--context", "A.", "--claim", "B.", "--device", device, *_alignscore(tiny_alignscore)]) == 2
    assert message in capsys.readouterr().err


def test_convert_onto_a_file_is_refused(tmp_path, save_hf, capsys):
    _, directory = save_hf("bert")
    (tmp_path / "taken").write_text("keep me")
    assert cli(["convert", str(directory), str(tmp_path / "taken")]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err
    assert (tmp_path / "taken").read_text() == "keep me"


def test_every_destination_is_checked_before_any_model_loads(tmp_path, capsys):
    """The model named does not exist: an error about the destination proves it came first."""
    model = str(tmp_path / "no-such-model")
    rows = tmp_path / "in.jsonl"
    rows.write_text(json.dumps({"id": 1, "text": "A text.", "context": "A.", "claim": "B."}) + "\n")
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


def test_cli_warnings_are_one_line_without_their_source(tmp_path, tiny_alignscore):
    (tmp_path / "empty.jsonl").write_text("")
    result = subprocess.run([sys.executable, "-m", "minialign", "score", "--input", str(tmp_path / "empty.jsonl"),
                             "--output", str(tmp_path / "out.jsonl"), *_alignscore(tiny_alignscore)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "no rows" in line or line.startswith(" ")]
    assert said == [f"warning: UserWarning: {tmp_path / 'empty.jsonl'}: no rows; the output holds none"], result.stderr


def test_rows_are_validated_before_the_model_loads(tmp_path, capsys):
    """A malformed row is reported before any model is loaded (the model named does not exist: an error about
    the row proves it came first), for every file command; --skip-invalid goes on to the model."""
    model = str(tmp_path / "no-such-model")
    (tmp_path / "in.jsonl").write_text('{"id": 1, "text": "fine", "context": "A.", "claim": "B."}\n'
                                       '{"id": 2, "txet": "typo", "context": "A.", "claim": "   "}\n')
    files = ["--input", str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "out.jsonl")]
    for command, message in ((["embed"], "line 2: field 'text' is missing"),
                             (["classify"], "line 2: field 'text' is missing"),
                             (["score"], "line 2: field 'claim' has no sentence")):
        assert cli([*command, "--model", model, *files]) == 2
        err = capsys.readouterr().err
        assert "1 malformed row(s), nothing done" in err and message in err and "no-such-model" not in err, err
    assert cli(["embed", "--model", model, *files, "--skip-invalid"]) == 2
    assert "no-such-model" in capsys.readouterr().err  # the rows pass with --skip-invalid: the model is next
    assert not (tmp_path / "out.jsonl").exists()


def test_version_and_per_command_dtype_choices(capsys):
    from minialign import __version__

    with pytest.raises(SystemExit) as done:
        cli(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"minialign {__version__}"
    with pytest.raises(SystemExit) as done:  # refused by the parser, before anything is said or loaded
        cli(["score", "--context", "a.", "--claim", "b.", "--dtype", "int8"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and "invalid choice: 'int8'" in err and "dtype int8: quantized" not in err
    for command, int8 in (("score", False), ("embed", True), ("classify", True)):
        with pytest.raises(SystemExit):
            cli([command, "--help"])
        shown = capsys.readouterr().out
        assert ("int8" in shown) == int8, command
        if command != "score":
            assert "the field holding each row's text" in shown


def test_score_truncation_warning_points_to_nothing_the_command_line_lacks(tiny_alignscore, capsys):
    """The command line has no return_details: its truncation warning says the counts only."""
    from minialign.runtime.engine import TruncationWarning

    with pytest.warns(TruncationWarning) as caught:
        assert cli(["score", *_alignscore(tiny_alignscore), "--context", "word " * 700, "--claim", "A claim."]) == 0
    (message,) = [str(w.message) for w in caught if w.category is TruncationWarning]
    assert "were cut by the 512-token window" in message and "return_details" not in message


def test_ctrl_c_in_a_file_command_says_what_is_written_and_how_to_resume(tmp_path, minilm_dir):
    """SIGINT once the first rows are written: one line (the rows in the output, the command with --resume),
    status 130, no traceback; the output is whole rows, and the printed command finishes it."""
    import shlex
    import signal
    import time

    texts = [f"sentence number {i} of a file long enough to be interrupted" for i in range(20000)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts)))
    out = tmp_path / "out.jsonl"
    args = ["embed", "--model", str(minilm_dir), "--input", str(tmp_path / "in.jsonl"), "--output", str(out),
            "--batch-size", "1", "--threads", "1"]
    process = subprocess.Popen([sys.executable, "-m", "minialign", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (out.exists() and out.read_text().count("\n") >= 8) and process.poll() is None:
            assert time.monotonic() < deadline, "no row written in 120 s"
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert "Traceback" not in err
    written = out.read_text().count("\n")
    assert 8 <= written < len(texts)
    (line,) = [line for line in err.splitlines() if "interrupted" in line]
    assert line == (f"minialign embed: interrupted: {written} row(s) are in {out}; continue with: "
                    f"{shlex.join(['minialign', *args, '--resume'])}")
    ids = [json.loads(row)["id"] for row in out.read_text().splitlines()]
    assert ids == list(range(written))
    texts = texts[:written + 3]  # the rest, shortened: the printed command resumes where the output stops
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts)))
    assert cli(shlex.split(line.split("continue with: ")[1])[1:]) == 0
    assert [json.loads(row)["id"] for row in out.read_text().splitlines()] == list(range(len(texts)))


HEAVY = ("torch", "transformers", "numpy", "safetensors", "tokenizers")


def test_help_imports_no_torch():
    """`minialign --help` and every command's --help build the parser from torch-free modules (nn/choices.py,
    products/choices.py, the product table naming runners and jobs by path): none of the heavy imports runs."""
    commands = ["score", "embed", "classify", "ner", "fill-mask", "zero-shot", "qa", "explore", "serve", "convert",
                "parity"]
    code = ("import contextlib, io, sys\n"
            "from minialign.apps.cli import main\n"
            f"for argv in [['--help'], *[[c, '--help'] for c in {commands!r}]]:\n"
            "    with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "        try:\n"
            "            main(argv)\n"
            "        except SystemExit as e:\n"
            "            assert e.code == 0, (argv, e.code)\n"
            "    assert 'usage: minialign' in out.getvalue(), argv\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout  # the heavy modules imported (none)
    import minialign.apps.products as products  # the table names each runner by path; a face reading it gets the class

    assert products.PRODUCTS["embed"].runner.__name__ == "SentenceEncoder"


def test_the_package_loads_its_names_on_first_use():
    """`import minialign` imports no torch; a public name is imported when read, and dir() / __all__ list them all."""
    code = ("import sys, minialign as ma\n"
            f"assert not [m for m in {HEAVY!r} if m in sys.modules], 'heavy at import'\n"
            "assert set(ma.__all__) <= set(dir(ma))\n"
            "from minialign.products.embeddings import SentenceEncoder\n"
            "assert ma.SentenceEncoder is SentenceEncoder and all(getattr(ma, n) is not None for n in ma.__all__)\n"
            "assert ma.Config(arch='roberta', vocab_size=10, hidden_size=8, num_layers=1, num_heads=2, "
            "intermediate_size=8).arch == 'roberta'\n")
    subprocess.run([sys.executable, "-c", code], check=True)
