"""Benchmarks as data: one schema for every benchmark's results, one JSON file per machine (pattern: ASV's results
per machine, MLPerf's result files), from which the tables people read are generated (render.py).

    {"machine": {"name", "kind", "cores", "driver", "torch", "commit", "date", "load", ...MACHINE_EXTRAS},
     "rows": [{"section", "case", "impl", "baseline", "ratio", ...FIGURES}, ...]}

A row is one implementation (`impl`) of one case of one section. `baseline` names the impl of the same section and
case that its `ratio` is against: the baseline's time over this row's (above 1 is faster; the baseline's own row
1.0), or null with `ratio` null where a row has no peer (a matmul ceiling). Every other key of a row is a figure
declared once in FIGURES, with its type, its meaning and the column the tables give it.

    python scripts/benchmarks/data.py start FOLDER --device cuda [--commit C] [--dry-run]   # prints the file's path
    python scripts/benchmarks/data.py clocks FILE start|middle|end    # nvidia-smi's clocks, logged in the machine entry
    python scripts/benchmarks/data.py validate FILE...

Standard library only at import (torch is imported to describe the machine): scripts/gpu_suite.sh runs it before and
between the stages.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "benchmarks"  # where a checkout keeps each machine's file


@dataclass(frozen=True)
class Figure:
    """One raw figure a row may carry: its JSON type, its column in the generated tables ("" for none: kept in the
    file only), the format spec of that column, and what it means."""

    type: type
    label: str
    spec: str
    meaning: str


FIGURES: dict[str, Figure] = {  # in the order of the tables' columns
    "commit": Figure(str, "commit", "", "the row's run, where a file holds rows of several (machine.commit: all)"),
    "date": Figure(str, "", "", "the row's run's date, where a file holds rows of several (machine.date: all)"),
    "source": Figure(str, "", "", "where a row was copied from (a report written by hand), where it was not measured "
                                  "into the file"),
    "reps": Figure(int, "reps", "d", "timed repetitions, interleaved rep by rep with the case's other impls"),
    "median_ms": Figure(float, "median ms", ".2f", "synced wall time of one call (sync, call, sync), median of reps"),
    "p10_ms": Figure(float, "", ".2f", "10th percentile of the same"),
    "p90_ms": Figure(float, "", ".2f", "90th percentile of the same"),
    "min_ms": Figure(float, "", ".2f", "fastest repetition"),
    "max_ms": Figure(float, "", ".2f", "slowest repetition"),
    "host_ms": Figure(float, "host ms", ".2f", "wall time until the call returns, before any sync (median): the "
                                                "host's enqueueing, all of the call on a CPU or where it syncs"),
    "device_ms": Figure(float, "device ms", ".2f", "CUDA-event time between records before and after the call "
                                                    "(median); absent on a CPU"),
    "tokens_per_s": Figure(float, "tokens/s", ".0f", "real tokens (no padding) per second"),
    "pairs_per_s": Figure(float, "pairs/s", ".1f", "(chunk, claim sentence) pairs scored per second"),
    "texts_per_s": Figure(float, "texts/s", ".1f", "texts (or text pairs) per second"),
    "gflop_s": Figure(float, "GFLOP/s", ".0f", "useful work (real tokens only) per second"),
    "of_ceiling": Figure(float, "of ceiling", ".0%", "gflop_s over the same dtype's matmul ceiling timed beside it"),
    "syncs": Figure(int, "syncs", "d", "host syncs in one call (minialign.runtime.syncs.count_syncs)"),
    "kernels": Figure(int, "kernels", "d", "CUDA kernels one call launches (torch.profiler); on a CPU the aten "
                                           "ops it calls (those without an aten parent)"),
    "compile_s": Figure(float, "compile s", ".1f", "warm-up seconds beyond the steady state: compiling, CUDA-graph "
                                                   "recording (compiled impls only)"),
    "recompiles": Figure(int, "recompiles", "d", "frames torch._dynamo compiled during the timed repetitions"),
    "deviation": Figure(float, "max abs dev", ".1e", "largest |difference| of the outputs from deviation_from's"),
    "deviation_from": Figure(str, "", "", "the impl (of the same case) the deviation is measured against"),
    "backend": Figure(str, "backend", "", "the attention backend the forward ran on (a refused one falls back)"),
    "vs_first": Figure(float, "vs first", ".2f", "this row's speed over the same impl's earlier in the same call"),
    "inputs": Figure(int, "inputs", "d", "inputs of one call: sequences, texts or pairs"),
    "weights": Figure(str, "weights", "", "real or random weights"),
    "shape": Figure(str, "", "", "a matmul's shape"),
    "note": Figure(str, "note", "", "anything else the row needs said"),
}
ROW_KEYS = ("section", "case", "impl", "baseline", "ratio")

# The machine entry: what every run records, then what a run may add.
MACHINE = {"name": str, "kind": str, "cores": int, "driver": str, "torch": str, "commit": str, "date": str,
           "load": dict}
MACHINE_EXTRAS = {
    "transcribed": str,  # rows copied from a report written by hand (what, from where); keys it lacks are absent
    "dry_run": bool,  # a CPU dry run at toy sizes: its figures mean nothing
    "clocks": list,  # GPU clocks logged during the run (clock_sample)
    "versions": dict,  # library versions beside torch
    "host": str,  # the host's CPU, where the machine is a GPU
    "memory": str,  # the device's memory
    "note": str,
}
KINDS = ("gpu", "cpu")
CLOCK_QUERY = ("clocks.sm", "clocks.max.sm", "temperature.gpu", "power.draw", "utilization.gpu")
CLOCK_KEYS = ("sm_mhz", "max_sm_mhz", "temperature_c", "power_w", "utilization_pct")


# -- checking -------------------------------------------------------------------------------------------

def _is(value, kind: type) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def row_problems(row: dict) -> list[str]:
    """What is wrong with one row (empty: nothing)."""
    if not isinstance(row, dict):
        return [f"a row is a JSON object, not {type(row).__name__}"]
    name = f"row {row.get('section')!r} / {row.get('case')!r} / {row.get('impl')!r}"
    problems = [f"{name}: no {key!r}" for key in ROW_KEYS if key not in row]
    problems += [f"{name}: {key!r} is not a non-empty string" for key in ("section", "case", "impl")
                 if key in row and not (isinstance(row[key], str) and row[key])]
    baseline, ratio = row.get("baseline"), row.get("ratio")
    if baseline is None and ratio is not None:
        problems.append(f"{name}: a ratio ({ratio}) without a baseline")
    if baseline is not None and not (isinstance(baseline, str) and baseline):
        problems.append(f"{name}: baseline {baseline!r} is not an impl's name")
    if ratio is not None and not (_is(ratio, float) and ratio > 0):
        problems.append(f"{name}: ratio {ratio!r} is not a positive number")
    for key, value in row.items():
        if key in ROW_KEYS:
            continue
        if key not in FIGURES:
            problems.append(f"{name}: unknown figure {key!r} (FIGURES declares them)")
        elif value is not None and not _is(value, FIGURES[key].type):
            problems.append(f"{name}: {key} = {value!r} is not {FIGURES[key].type.__name__}")
    return problems


def problems(data: dict) -> list[str]:
    """What is wrong with a run's file (empty: nothing): the machine entry complete (unless transcribed, whose
    absent keys were never recorded), every key known and of its type, every row valid, no row twice."""
    if not isinstance(data, dict) or set(data) != {"machine", "rows"}:
        return ["a run's file is {\"machine\": {...}, \"rows\": [...]}"]
    machine, rows, found = data["machine"], data["rows"], []
    if not isinstance(machine, dict) or not isinstance(rows, list):
        return ["machine is an object and rows a list"]
    if "transcribed" not in machine:
        found += [f"machine: no {key!r}" for key in MACHINE if key not in machine]
    for key, value in machine.items():
        kind = MACHINE.get(key) or MACHINE_EXTRAS.get(key)
        if kind is None:
            found.append(f"machine: unknown key {key!r}")
        elif not _is(value, kind):
            found.append(f"machine: {key} = {value!r} is not {kind.__name__}")
    if machine.get("kind") not in KINDS:
        found.append(f"machine: kind {machine.get('kind')!r} is not one of {KINDS}")
    seen = set()
    for row in rows:
        found += row_problems(row)
        if isinstance(row, dict):
            key = tuple(row.get(k) for k in ("section", "case", "impl", "commit"))
            if key in seen:
                found.append(f"row {key[:3]} twice{' for commit ' + key[3] if key[3] else ''}")
            seen.add(key)
    return found


def check(data: dict) -> dict:
    """`data`, or a ValueError listing every problem."""
    if found := problems(data):
        raise ValueError("not a benchmark file: " + "; ".join(found))
    return data


def _round(value):
    """A float to 6 significant digits (what a timing holds; the files stay readable), anything else as it is."""
    return float(f"{value:.6g}") if isinstance(value, float) else value


def row(section: str, case: str, impl: str, *, baseline: str | None, ratio: float | None, **figures) -> dict:
    """One checked row, floats to 6 significant digits; figures given as None are left out (a figure this run could
    not take)."""
    made = {"section": section, "case": case, "impl": impl, "baseline": baseline, "ratio": _round(ratio),
            **{key: _round(value) for key, value in figures.items() if value is not None}}
    if found := row_problems(made):
        raise ValueError("; ".join(found))
    return made


# -- the machine ----------------------------------------------------------------------------------------

def slug(text: str) -> str:
    """Lower-case words joined by '-': "NVIDIA H200" -> "nvidia-h200"."""
    return "-".join(re.findall(r"[a-z0-9]+", text.lower()))


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (else platform's), without trademarks, "Processor" and its clock."""
    name = platform.processor() or platform.machine() or "unknown"
    try:
        name = next(line.split(":", 1)[1] for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    name = re.sub(r"\((r|tm)\)|\bprocessor\b|\bcpu\b|@.*$", " ", name, flags=re.I)
    return " ".join(name.split())


def cpu_isa() -> str:
    """The widest vector instruction set of this CPU minialign tells apart (avx512 / avx2 / the architecture)."""
    try:
        flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    except (OSError, StopIteration):
        flags = []
    return "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else platform.machine().lower() or "unknown"


def file_name(machine: dict) -> str:
    """The machine's file: a slug of the device's name ("nvidia-h200.json"); a CPU run's "cpu-<model>-<isa>.json"."""
    return (slug(machine["name"]) if machine["kind"] == "gpu" else f"cpu-{slug(machine['name'])}") + ".json"


def _run(*command: str) -> str | None:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=20, check=True).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def git_commit() -> str | None:
    """This checkout's short commit, "+changes" where its tracked files differ from it; None outside a checkout."""
    root = str(Path(__file__).resolve().parents[2])
    commit = _run("git", "-C", root, "rev-parse", "--short", "HEAD")
    if commit is None:
        return None
    return commit + ("+changes" if _run("git", "-C", root, "status", "--porcelain", "--untracked-files=no") else "")


def load() -> dict:
    """The host's load when the run starts: its load averages over 1, 5 and 15 minutes, and the GPU's use."""
    found = {"host_loadavg": [round(x, 2) for x in os.getloadavg()]} if hasattr(os, "getloadavg") else {}
    sample = clock_sample("start")
    if "utilization_pct" in sample:
        found["gpu_utilization_pct"] = sample["utilization_pct"]
    return found


def machine_entry(device: str, *, commit: str | None = None, dry_run: bool = False) -> dict:
    """What a run holds for: the device's name and kind, host cores, driver, torch, commit, date and load."""
    import torch

    gpu = device.startswith("cuda")
    versions = {}
    for module in ("transformers", "sentence_transformers", "tokenizers"):
        try:
            versions[module] = __import__(module).__version__
        except ImportError:
            pass
    entry = {
        "name": torch.cuda.get_device_name(torch.device(device)) if gpu else f"{cpu_model()} {cpu_isa()}",
        "kind": "gpu" if gpu else "cpu",
        "cores": os.cpu_count() or 0,
        "driver": (_run("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader") or "unknown").split(
            "\n")[0] if gpu else "none (a CPU)",
        "torch": torch.__version__ + (f" (CUDA {torch.version.cuda})" if gpu and torch.version.cuda else ""),
        "commit": commit or git_commit() or "unknown (not a git checkout: give --commit)",
        "date": datetime.date.today().isoformat(),
        "load": load(),
        "versions": versions,
    }
    if gpu:
        entry["host"] = cpu_model()
        entry["memory"] = f"{torch.cuda.get_device_properties(torch.device(device)).total_memory / 2**30:.0f} GiB"
    if dry_run:
        entry["dry_run"] = True
    return entry


def clock_sample(at: str) -> dict:
    """nvidia-smi's SM clock, its maximum, temperature, power and utilization now (first GPU), under `at`; on a
    machine without nvidia-smi, {"at": at, "absent": why}."""
    line = _run("nvidia-smi", f"--query-gpu={','.join(CLOCK_QUERY)}", "--format=csv,noheader,nounits")
    sample = {"at": at, "time": datetime.datetime.now().strftime("%H:%M:%S")}
    if line is None:
        return {**sample, "absent": "no nvidia-smi here (a CPU run)"}
    values = [v.strip() for v in line.splitlines()[0].split(",")]
    for key, value in zip(CLOCK_KEYS, values):
        try:
            sample[key] = float(value)
        except ValueError:
            sample[key] = value  # "[N/A]"
    return sample


# -- the file -------------------------------------------------------------------------------------------

def read(path: Path) -> dict:
    return check(json.loads(Path(path).read_text(encoding="utf-8")))


def write(path: Path, data: dict) -> None:
    """Write `data` (checked) whole: a new file renamed over the old, so a stage cut mid-write leaves the last one."""
    path = Path(path)
    text = json.dumps(check(data), indent=1, ensure_ascii=False) + "\n"
    part = path.with_name(path.name + ".part")
    part.write_text(text, encoding="utf-8")
    part.replace(path)


def start(folder: Path, device: str, *, commit: str | None = None, dry_run: bool = False) -> Path:
    """A run's file in `folder`, named for its machine, with no rows yet (an older file of the name replaced)."""
    machine = machine_entry(device, commit=commit, dry_run=dry_run)
    path = Path(folder) / file_name(machine)
    path.parent.mkdir(parents=True, exist_ok=True)
    write(path, {"machine": machine, "rows": []})
    return path


def add(path: Path, rows: list[dict]) -> None:
    """Append rows to a run's file (each stage adds its rows as it measures them: a stage cut later keeps them)."""
    data = read(path)
    data["rows"] += rows
    write(path, data)


def log_clocks(path: Path, at: str) -> dict:
    """Add a clock sample (clock_sample) to the file's machine entry; returns it."""
    data, sample = read(path), clock_sample(at)
    data["machine"].setdefault("clocks", []).append(sample)
    write(path, data)
    return sample


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="scripts/benchmarks/data.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    begin = commands.add_parser("start", help="start a run's file in FOLDER; prints its path")
    begin.add_argument("folder")
    begin.add_argument("--device", default="cpu")
    begin.add_argument("--commit", help="the checkout's commit (default: git's, where this is a checkout)")
    begin.add_argument("--dry-run", action="store_true")
    clocks = commands.add_parser("clocks", help="log the GPU's clocks in FILE's machine entry")
    clocks.add_argument("file")
    clocks.add_argument("at", choices=("start", "middle", "end"))
    validate = commands.add_parser("validate", help="check files against the schema")
    validate.add_argument("files", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "start":
        print(start(Path(args.folder), args.device, commit=args.commit, dry_run=args.dry_run))
    elif args.command == "clocks":
        sample = log_clocks(Path(args.file), args.at)
        print("GPU clocks " + ", ".join(f"{k} {v}" for k, v in sample.items()))
    else:
        for name in args.files:
            read(Path(name))
            print(f"{name}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
