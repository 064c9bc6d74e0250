"""scripts/gpu_suite.sh, the one-call GPU check, run as its CPU dry run (`--device cpu --dry-run`): every stage's
command at toy sizes, so the script cannot rot on machines without a GPU. The figures mean nothing; what is
checked is that each stage runs, reports and writes its rows as data (scripts/benchmarks/data.py's schema), that a
stage out of time is cut and reported while the next ones still run, and the suite's method on its own: the timer
(timing.py), the sync, kernel and compile counters (syncs.py), the run files and the tables generated from them
(render.py), BENCHMARKS.md's GPU block included."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

import bench  # scripts/bench.py (conftest: scripts/ on the path)
from benchmarks import data, encoder, offered, render, scoring, timing
from benchmarks.syncs import backend_of, compiles, counted, kernels, syncs

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_suite.sh"
STAGES = ("install", "tests", "scoring", "embeddings", "encoder-base", "drift")


def run_suite(out: Path, *args: str, python: str = sys.executable) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": python}
    env.pop("OUT", None)
    return subprocess.run(["bash", str(SCRIPT), "--device", "cpu", "--dry-run", "--out", str(out), *args],
                          capture_output=True, text=True, env=env, timeout=600)


def stage_rows(summary: str) -> dict[str, str]:
    rows = [line.strip("| ").split(" | ") for line in summary.splitlines() if line.startswith("| ")]
    return {name: status for name, _, _, status in rows[1:]}


def run_file(out: Path) -> Path:
    files = list(out.glob("*.json"))
    assert len(files) == 1, files
    return files[0]


@pytest.mark.slow
def test_dry_run_runs_every_stage_and_writes_its_rows_as_data(tmp_path):
    done = run_suite(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = (tmp_path / "summary.md").read_text()
    assert stage_rows(summary) == {name: "ok" for name in STAGES}
    assert "Dropped to fit one call: the encoder's fp32 rows" in summary and "tests-flex" in summary
    suite = ET.parse(tmp_path / "junit-tests.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    assert int(suite.get("tests")) > 0 and int(suite.get("failures")) == int(suite.get("errors")) == 0

    path = run_file(tmp_path)
    content = data.read(path)  # the schema holds, or this raises
    machine = content["machine"]
    assert set(data.MACHINE) <= set(machine) and machine["kind"] == "cpu" and machine["dry_run"] is True
    assert path.name == data.file_name(machine) and path.name.startswith("cpu-")
    assert machine["cores"] == os.cpu_count() and machine["torch"] == torch.__version__ and machine["date"]
    assert [c["at"] for c in machine["clocks"]] == ["start", "middle", "end"]
    assert all("absent" in c for c in machine["clocks"])  # no nvidia-smi here, and the file says so
    rows = content["rows"]
    assert {r["section"] for r in rows} == {"encoder", "scoring", "embeddings"}
    timed = [r for r in rows if r["baseline"] is not None]
    for row in timed:
        assert row["reps"] == bench.DRY_RUN["reps"] and 0 < row["p10_ms"] <= row["median_ms"] <= row["p90_ms"]
        assert row["min_ms"] <= row["p10_ms"] and row["p90_ms"] <= row["max_ms"] and 0 < row["host_ms"]
        assert "device_ms" not in row  # CUDA events only
        assert row["ratio"] > 0 and any(r["impl"] == row["baseline"] and r["case"] == row["case"] for r in rows)
        if row["impl"] == row["baseline"]:
            assert row["ratio"] == 1.0
    counted_rows = [r for r in timed if "syncs" in r]
    assert all(r["syncs"] >= 0 and r["kernels"] > 0 for r in counted_rows) and len(counted_rows) > len(timed) / 2
    assert all(r["syncs"] > 0 for r in counted_rows if r["impl"].startswith("transformers"))

    encoder_rows = [r for r in rows if r["section"] == "encoder"]
    cases = {r["case"] for r in encoder_rows}
    first = encoder.case_name("roberta-base (dry run: toy size)", "fp32", "2 x 16")
    assert first in cases and f"{first}, {encoder.DRIFT_CASE}" in cases
    drift = [r for r in encoder_rows if r["case"].endswith(encoder.DRIFT_CASE) and r["baseline"]]
    assert {r["impl"] for r in drift} == set(encoder.DRIFT_IMPLS) and all(r["vs_first"] > 0 for r in drift)
    ceilings = [r for r in encoder_rows if r["impl"].startswith("matmul ceiling")]
    assert ceilings and all(r["ratio"] is None and r["gflop_s"] > 0 for r in ceilings)
    compiled = next(r for r in encoder_rows if r["impl"] == "minialign sdpa compiled")
    assert compiled["compile_s"] >= 0 and compiled["recompiles"] >= 0
    if offered.backend("varlen"):  # not chosen on a CPU: the row says which backend ran
        varlen = [r for r in rows if "varlen" in r["impl"]]
        assert varlen and all(r.get("backend", "sdpa").startswith("sdpa") for r in varlen)

    scoring_rows = [r for r in rows if r["section"] == "scoring"]
    assert {r["baseline"] for r in scoring_rows} == {scoring.ORIGINAL}
    throughput = [r for r in scoring_rows if r["inputs"] >= bench.DRY_RUN["corpus_pairs"]]
    assert throughput and all(r["deviation"] < 1e-2 and r["deviation_from"] == scoring.ORIGINAL for r in throughput)
    assert {r["reps"] for r in throughput} == {bench.DRY_RUN["corpus_reps"]}
    assert {"minialign fp32", "minialign auto"} <= {r["impl"] for r in scoring_rows}
    if offered.dtype_word("auto-all"):
        assert "minialign auto-all" in {r["impl"] for r in scoring_rows}
    assert any("compiled" in r["impl"] and "recompiles" in r and "compile_s" in r for r in scoring_rows)
    embedding_rows = [r for r in rows if r["section"] == "embeddings"]
    assert {r["baseline"] for r in embedding_rows} == {"SentenceTransformer.encode"}
    assert all(r["deviation"] < 1e-4 and r["inputs"] == bench.DRY_RUN["texts"] for r in embedding_rows)

    report = (tmp_path / "BENCHMARKS-gpu.md").read_text()
    assert "dry run" in report and "| encoder-base | 145 |" in report
    assert render.report([(path.name, content)]) in report  # the tables are the file's
    assert "== embeddings: ok" in (tmp_path / "suite.log").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["summary.md", "BENCHMARKS-gpu.md", "junit-tests.xml", "suite.log", path.name])


def test_a_stage_out_of_time_is_cut_and_the_next_still_runs(tmp_path):
    done = run_suite(tmp_path, "--stages", "tests,drift", "--budget", "tests=3")
    assert done.returncode == 1  # not every stage ok
    rows = stage_rows((tmp_path / "summary.md").read_text())
    assert rows == {"tests": "cut after 3 s", "drift": "ok"}
    report = (tmp_path / "BENCHMARKS-gpu.md").read_text()
    assert "### encoder" in report and "| tests | 3 |" in report
    assert {r["section"] for r in data.read(run_file(tmp_path))["rows"]} == {"encoder"}


def test_bad_arguments_are_refused(tmp_path):
    for args, message in ((["--device", "tpu", "--out", str(tmp_path)], "--device is cpu or cuda"),
                          (["--frobnicate"], "unknown argument --frobnicate"),
                          (["--out", str(tmp_path), "--stages", "tests,bench"], "unknown stage bench in --stages"),
                          (["--out", str(tmp_path), "--budget", "tests"], "--budget takes STAGE=SECONDS, got tests"),
                          (["--out", str(tmp_path), "--dry-run", "--write-docs"], "a dry run's figures mean nothing")):
        done = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and message in done.stderr
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2 and "no output folder" in done.stderr


def test_a_cut_benchmark_stage_keeps_the_rows_it_measured(tmp_path):
    """A bench stage that runs out of time (a CUDA compile, say) keeps the rows it added to the run's file before the
    cut, and the report's tables show them. The stage's python is a stand-in that adds one row and hangs (every other
    call goes to the real python), so the cut does not depend on this machine's speed."""
    fake = tmp_path / "python"
    fake.write_text(f"""#!/bin/sh
if [ "$1" = scripts/bench.py ] && [ "$2" = --suite ]; then
  exec {sys.executable} - "$5" <<'PY'
import sys, time
sys.path.insert(0, "scripts")
from benchmarks import data
data.add(sys.argv[1], [data.row("encoder", "a stand-in case", "minialign sdpa", baseline="transformers sdpa",
                                ratio=0.87, median_ms=1.5)])
time.sleep(60)
PY
fi
exec {sys.executable} "$@"
""")
    fake.chmod(0o755)
    out = tmp_path / "out"
    done = run_suite(out, "--stages", "encoder-base", "--budget", "encoder-base=4", python=str(fake))
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert stage_rows((out / "summary.md").read_text()) == {"encoder-base": "cut after 4 s"}
    rows = data.read(run_file(out))["rows"]
    assert [(r["case"], r["ratio"]) for r in rows] == [("a stand-in case", 0.87)]
    assert "| a stand-in case | minialign sdpa | 0.87 | 1.50 |" in (out / "BENCHMARKS-gpu.md").read_text()


# -- the method ------------------------------------------------------------------------------------------------

def test_the_sync_counter_counts_a_forward_that_syncs_and_not_a_tensor_op():
    from minialign.models.encoder import Encoder
    from minialign.nn.config import Config
    from minialign.nn.layout import HostBatch

    torch.manual_seed(0)
    model = Encoder(Config(vocab_size=50, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32)).eval()
    ids, mask = torch.randint(2, 50, (2, 5)), torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    host = HostBatch.of(ids, [5, 3])
    with torch.inference_mode():
        assert syncs(lambda: model(ids, attention_mask=mask, unpad=True)).total > 0  # reads the lengths back
        assert syncs(lambda: model(ids, attention_mask=mask, unpad=True, host=host)).total == 0  # the host's facts
        assert syncs(lambda: ids + 1).total == 0
        assert dict(syncs(lambda: ids.nonzero()).by_op) == {"nonzero": 1}
        assert syncs(lambda: torch.tensor(3.0).item()).total == 1
        assert kernels(lambda: ids + 1) == 1  # on a CPU the aten ops called from Python
        assert kernels(lambda: model(ids, attention_mask=mask)) > 10
        assert backend_of(lambda: model(ids, attention_mask=mask), "sdpa")[1] == "sdpa"
        assert backend_of(lambda: ids + 1, "flex")[1] == "flex"  # no forward: what was asked
    if offered.backend("varlen"):  # refused on a CPU: the forward ran on sdpa, and backend_of says so
        varlen = Encoder(model.config, attn_backend="varlen").eval()
        with torch.inference_mode():
            assert backend_of(lambda: varlen(ids, attention_mask=mask, unpad=True, host=host), "varlen")[1] == "sdpa"


def test_the_compile_counter_sees_a_recompile_after_warm_up():
    double = torch.compile(lambda x: x * 2 + 1, backend="eager", dynamic=False)
    with compiles() as warm:
        double(torch.ones(3))
    with compiles() as same:
        double(torch.ones(3))
    seen = {}
    counted(lambda: double(torch.ones(5)), seen, "double")()  # a new shape, a guard failed
    assert warm.frames == 1 and same.frames == 0 and seen == {"double": 1}


def test_the_timer_interleaves_rep_by_rep_and_keeps_the_spread():
    seen = []
    calls = {"a": lambda: seen.append("a") or len(seen), "b": lambda: seen.append("b") or len(seen)}
    outputs = {}
    times = timing.repeat(calls, reps=4, outputs=outputs)
    assert seen == ["a", "b", "a", "b", "b", "a", "a", "b", "b", "a"]  # a warm-up each, then reversed every other rep
    assert outputs == {"a": 10, "b": 9} and all(t.warm_up > 0 for t in times.values())
    figures = times["a"].figures()
    assert figures["reps"] == 4 and "device_ms" not in figures  # CUDA events on a CUDA device only
    assert figures["min_ms"] <= figures["p10_ms"] <= figures["median_ms"] <= figures["p90_ms"] <= figures["max_ms"]
    assert 0 < figures["host_ms"] <= figures["median_ms"]  # each rep: host time before its sync, wall after
    seen.clear()
    timing.repeat(calls, reps=1, warm_up={})
    assert seen == ["a", "b"]
    assert timing.percentile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.5
    assert timing.percentile([1.0, 2.0, 3.0], 0.1) == pytest.approx(1.2)
    assert timing.phases(["base", "x", "y compiled", "z"], "base", {"y compiled"}) == [
        ["base", "x", "z"], ["base", "y compiled"]]


def test_run_files_hold_one_schema(tmp_path):
    good = data.row("encoder", "case", "minialign sdpa", baseline="transformers sdpa", ratio=1.234567891,
                    median_ms=2.0, syncs=0, backend="sdpa", kernels=None)
    assert good["ratio"] == 1.23457 and "kernels" not in good  # 6 significant digits; None left out
    for kwargs, message in ((dict(baseline=None, ratio=2.0), "a ratio (2.0) without a baseline"),
                            (dict(baseline="x", ratio=-1.0), "is not a positive number"),
                            (dict(baseline="x", ratio=1.0, speed=3), "unknown figure 'speed'"),
                            (dict(baseline="x", ratio=1.0, syncs=1.5), "syncs = 1.5 is not int")):
        with pytest.raises(ValueError, match=re.escape(message)):
            data.row("encoder", "case", "impl", **kwargs)
    assert data.slug("NVIDIA H200") == "nvidia-h200"
    path = data.start(tmp_path, "cpu", commit="abc1234", dry_run=True)
    assert path.name == data.file_name(data.read(path)["machine"]) and path.name.endswith(f"-{data.cpu_isa()}.json")
    data.add(path, [good])
    sample = data.log_clocks(path, "start")
    content = data.read(path)
    assert content["rows"] == [good] and content["machine"]["commit"] == "abc1234"
    assert content["machine"]["clocks"] == [sample] and "absent" in sample
    with pytest.raises(ValueError, match="twice"):
        data.add(path, [good])
    raw = json.loads(path.read_text())
    del raw["machine"]["load"]
    assert data.problems(raw) == ["machine: no 'load'"]
    raw["machine"]["transcribed"] = "from a hand-written report"
    assert data.problems(raw) == []  # a transcription leaves out what was never recorded
    raw["rows"][0]["ratio"] = None
    assert data.problems(raw) == []  # a baseline named, its ratio unknown: allowed (a ceiling has neither)
    del raw["rows"][0]["impl"]
    assert any("no 'impl'" in p for p in data.problems(raw))


def test_the_tables_are_generated_from_the_files():
    rows = [data.row("s", "c", "peer", baseline="peer", ratio=1.0, median_ms=2.0, p10_ms=1.5, p90_ms=2.5),
            data.row("s", "c", "ours", baseline="peer", ratio=2.0, median_ms=1.0, syncs=0),
            data.row("s", "d", "other", baseline="another peer", ratio=0.5),
            data.row("s", "c", "ceiling", baseline=None, ratio=None, gflop_s=9.0)]
    text, shown = render.table(rows)
    lines = text.splitlines()
    assert lines[0] == "| case | impl | vs peer | vs another peer | median ms | p10-p90 ms | GFLOP/s | syncs |"
    assert lines[2:] == ["| c | peer | 1.00 | - | 2.00 | 1.50-2.50 | - | - |",
                         "| c | ours | 2.00 | - | 1.00 | - | - | 0 |",
                         "| d | other | - | 0.50 | - | - | - | - |",
                         "| c | ceiling | - | - | - | - | 9 | - |"]
    assert shown == ["median_ms", "gflop_s", "syncs"]


def test_benchmarks_md_gpu_block_is_what_the_committed_files_give():
    """The GPU block of BENCHMARKS.md is generated (`python scripts/bench.py --render`): regenerated from
    docs/benchmarks/*.json it is byte for byte what is committed, so it cannot drift from the data."""
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    files = render.machine_files("gpu")
    assert [name for name, _ in files] == ["docs/benchmarks/nvidia-h200.json"]
    assert render.update(text, files) == text
    h200 = files[0][1]
    assert h200["machine"]["transcribed"] and h200["machine"]["date"] == "2026-11-27"
    assert {r["commit"] for r in h200["rows"]} == {"c6da700", "bb6c504", "0891a2a"}
    assert text.index("# GPU: one NVIDIA H200") < text.index(render.BEGIN) < text.index(render.END)
