"""scripts/gpu_suite.sh, the one-call GPU check, run as its CPU dry run (`--device cpu --dry-run`): every stage's
command at toy sizes, so the script cannot rot on machines without a GPU. The figures mean nothing; what is
checked is that each stage runs, reports and writes its files, and that a stage out of time is cut and
reported while the next ones still run."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_suite.sh"


def run_suite(out: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable}
    env.pop("OUT", None)
    return subprocess.run(["bash", str(SCRIPT), "--device", "cpu", "--dry-run", "--out", str(out), *args],
                          capture_output=True, text=True, env=env, timeout=600)


def stage_rows(summary: str) -> dict[str, str]:
    rows = [line.strip("| ").split(" | ") for line in summary.splitlines() if line.startswith("| ")]
    return {name: status for name, _, _, status in rows[1:]}


@pytest.mark.slow
def test_dry_run_runs_every_stage_and_writes_the_reports(tmp_path):
    done = run_suite(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = (tmp_path / "summary.md").read_text()
    assert stage_rows(summary) == {name: "ok" for name in ("install", "tests", "tests-flex", "encoder-base",
                                                           "encoder-large", "scoring", "embeddings")}
    for name in ("junit-tests.xml", "junit-tests-flex.xml"):
        suite = ET.parse(tmp_path / name).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        assert int(suite.get("tests")) > 0 and int(suite.get("failures")) == int(suite.get("errors")) == 0
    report = (tmp_path / "BENCHMARKS-gpu.md").read_text()
    assert "dry run" in report and "## Machine" in report and "device benchmarked: cpu" in report
    assert report.count("## Encoder forward") == 2 and "roberta-large (dry run: toy size)" in report
    assert "## AlignScore scoring" in report and "## Sentence embeddings" in report
    assert "| minialign fp32 unpadded |" in report and "| SentenceEncoder.encode fp32 |" in report
    assert "== embeddings: ok" in (tmp_path / "suite.log").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["summary.md", "BENCHMARKS-gpu.md", "junit-tests.xml", "junit-tests-flex.xml", "suite.log"])


def test_a_stage_out_of_time_is_cut_and_the_next_still_runs(tmp_path):
    done = run_suite(tmp_path, "--stages", "tests,encoder-base", "--budget", "tests=3")
    assert done.returncode == 1  # not every stage ok
    rows = stage_rows((tmp_path / "summary.md").read_text())
    assert rows == {"tests": "cut after 3 s", "encoder-base": "ok"}
    report = (tmp_path / "BENCHMARKS-gpu.md").read_text()
    assert "## Encoder forward" in report and "| tests | 3 |" in report


def test_bad_arguments_are_refused(tmp_path):
    for args, message in ((["--device", "tpu", "--out", str(tmp_path)], "--device is cpu or cuda"),
                          (["--frobnicate"], "unknown argument --frobnicate"),
                          (["--out", str(tmp_path), "--stages", "tests,bench"], "unknown stage bench in --stages"),
                          (["--out", str(tmp_path), "--budget", "tests"], "--budget takes STAGE=SECONDS, got tests")):
        done = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and message in done.stderr
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2 and "no output folder" in done.stderr


def test_a_cut_benchmark_stage_keeps_the_rows_it_measured(tmp_path):
    """A bench stage that runs out of time (a CUDA flex compile, say) has no section, but the rows it printed to
    stderr before the cut go into BENCHMARKS-gpu.md under its name. The stage's python is a stand-in that prints
    two rows and hangs, so the cut does not depend on this machine's speed."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'machine: stand-in' >&2\n"
                    "echo 'roberta-base bf16 64x512   minialign sdpa   1967431 tok/s  x0.87' >&2\n"
                    "echo 'Traceback: not a row' >&2\nexec sleep 60\n")
    fake.chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": str(fake)}
    env.pop("OUT", None)
    done = subprocess.run(["bash", str(SCRIPT), "--device", "cpu", "--dry-run", "--out", str(out),
                           "--stages", "encoder-base", "--budget", "encoder-base=2"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1
    report = (out / "BENCHMARKS-gpu.md").read_text()
    assert "### encoder-base: cut after 2 s; the rows measured before" in report
    assert "minialign sdpa   1967431 tok/s" in report and "machine: stand-in" in report
    assert "Traceback" not in report and "## Encoder forward" not in report
