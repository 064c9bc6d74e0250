"""The past runs BENCHMARKS.md held as hand-written tables, converted into the benchmark files' schema (data.py): each
table whose rows carry a speed ratio against a peer becomes rows (section: the heading; case: the columns before the
implementation; impl; baseline: the row of the case at 1.00, else the peer the ratio column names; ratio; the figures
the schema declares), each row with its run's commit and date and a `source` naming the BENCHMARKS.md it came from.
Tables without a ratio (quality, memory, parity, goal summaries) are not converted: git history keeps them.

    python scripts/benchmarks/convert_history.py [--commit C] [--dry-run]

Run once, from the last commit whose BENCHMARKS.md was written by hand (HISTORY_COMMIT); a second run replaces the
rows the first added (the rows of a file whose `source` begins with SOURCE) and leaves every other row as it is.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import data  # noqa: E402

HISTORY_COMMIT = "2566b0e"  # the last BENCHMARKS.md written by hand
SOURCE = "transcribed from BENCHMARKS.md at "


@dataclass(frozen=True)
class Run:
    """Where a stretch of the hand-written file came from: the machine file its rows go to, the run's commit, date."""

    machine: str
    commit: str
    date: str


AMD_AVX512, AMD_AVX2, INTEL_AVX512 = "cpu-amd-epyc-avx512.json", "cpu-amd-epyc-avx2.json", "cpu-intel-xeon-avx512.json"
# Each hand-written block (its first line) -> its run, as the block's own reading says; a heading of the block
# (its start) -> a later run named there.
BLOCKS = {
    "<!-- bench: AVX-512 with native bf16, AMD -->": Run(AMD_AVX512, "159ee9c", "2026-11-27"),
    "<!-- bench: AVX2, AMD -->": Run(AMD_AVX2, "bb17a41", "2026-11-23"),
    "<!-- retrieval:": Run(INTEL_AVX512, "55e9340", "2026-11-27"),
    "<!-- heads:": Run(INTEL_AVX512, "c95e8a9", "2026-11-27"),
    "<!-- avx2-forced:": Run(AMD_AVX512, "0891a2a", "2026-11-27"),
    "<!-- maxsim:": Run(AMD_AVX512, "4f41595", "2026-11-27"),
    "<!-- busy:": Run(INTEL_AVX512, "55e9340", "2026-11-27"),
    "### The same run on an AMD EPYC": Run(AMD_AVX512, "c451517", "2026-11-27"),
    "# Encoder families on an Intel AVX-512 CPU": Run(INTEL_AVX512, "eb19517", "2026-11-27"),
}
LATER_RUNS = {  # (block's machine, heading's start) -> the run its reading names
    (AMD_AVX512, "## int8"): Run(AMD_AVX512, "0891a2a", "2026-11-27"),
    (AMD_AVX2, "## Encoder families"): Run(AMD_AVX2, "9eb2543", "2026-11-23"),
    (AMD_AVX2, "## int8"): Run(AMD_AVX2, "d899650", "2026-11-24"),
}
SKIPPED = ("<!-- generated from",)  # blocks already generated from the files
BLOCK_END = re.compile(r"^<!-- (/|end generated)")

# The files' machine entries for machines no run file existed for (what the hand-written blocks say of them)
MACHINES = {
    AMD_AVX2: {"name": "AMD EPYC avx2", "kind": "cpu", "cores": 2, "driver": "none (a CPU)", "torch": "2.13.0+cpu",
               "commit": "bb17a41, 9eb2543, d899650", "date": "2026-11-23",
               "versions": {"transformers": "5.23.0"},
               "note": "an AMD EPYC VM (Zen 3), AVX2 only, 2 threads; minialign's fp32 Linear: oneDNN packed up to "
                       "48 rows, F.linear above, at those commits"},
    INTEL_AVX512: {"name": "Intel Xeon avx512", "kind": "cpu", "cores": 2, "driver": "none (a CPU)",
                   "torch": "2.13.0+cpu", "commit": "55e9340, c95e8a9, eb19517", "date": "2026-11-27",
                   "versions": {"transformers": "5.24.0", "sentence_transformers": "6.2.0"},
                   "note": "an Intel Xeon VM, AVX-512 with VNNI, native bf16 and AMX, 2 vCPUs, a shared VM whose "
                           "quiet speed drifted by up to 30% within hours"},
}

RATIOS = ("vs hf sdpa", "speed-up", "minialign / transformers", "packed / F.linear", "vs one at a time", "vs peer",
          "vs minialign fp32", "speed vs fp32", "throughput x", "vs 1 process", "vs sentence-transformers")
IMPLS = ("impl", "implementation", "recipe", "clients", "processes x threads", "PRECISION_LAYERS[Int8Linear]")
CASE_AFTER_IMPL = ("mode",)  # a column after the implementation's that still tells the cases apart
PERCENT = "percent"
# a column -> (its figure, how its cell is read)
FIGURE_COLUMNS = {
    "tokens/s": ("tokens_per_s", float), "items/s": ("texts_per_s", float), "texts/s": ("texts_per_s", float),
    "pairs/s": ("pairs_per_s", float), "GFLOP/s": ("gflop_s", float), "of ceiling": ("of_ceiling", PERCENT),
    "of fp32 ceiling": ("of_ceiling", PERCENT), "max abs diff": ("deviation", float),
    "max score diff": ("deviation", float), "max abs dev": ("deviation", float), "texts": ("inputs", int), "inputs": ("inputs", int),
    "weights": ("weights", str), "best (ms)": ("min_ms", float), "best (s)": ("min_ms", 1000.0),
}


@dataclass
class Table:
    machine: str
    run: Run
    heading: str
    header: list[str]
    lines: list[list[str]] = field(default_factory=list)


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def number(text: str) -> float | None:
    text = text.strip().rstrip("x%").replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def tables(text: str) -> list[Table]:
    """Every hand-written table of the file, with the machine, run and heading it sits under."""
    found, run, heading, skipping, table = [], None, "", False, None
    for line in text.splitlines():
        start = next((key for key in BLOCKS if line.startswith(key)), None)
        if line.startswith(SKIPPED):
            skipping = True
        elif BLOCK_END.match(line):
            skipping, run = False, None if not line.startswith("<!-- end generated") else run
        elif start:  # a block's start, or a later run's heading inside one (its section stays the block's)
            run, heading = BLOCKS[start], heading if line.startswith("###") else line.lstrip("#").strip()
        if skipping or run is None:
            table = None
            continue
        if line.startswith("#") and not line.startswith("### The same run"):
            heading = line.lstrip("#").strip()
        if line.startswith("|"):
            if table is None:
                later = next((r for (m, h), r in LATER_RUNS.items() if m == run.machine and f"## {heading}".startswith(h)),
                             None)
                table = Table(run.machine, later or run, heading, cells(line))
                found.append(table)
            elif not set(line.replace("|", "").strip()) <= {"-"}:
                table.lines.append(cells(line))
        else:
            table = None
    return found


def section(heading: str) -> str:
    """The heading, less a command in parentheses at its end."""
    return re.sub(r"\s*\(`[^)]*\)?[^)]*\)\s*$", "", heading).strip()


def heading_detail(heading: str) -> str:
    """The heading's parenthetical (what a table without case columns measured), else the heading."""
    found = re.search(r"\(([^`][^)]*)\)\s*$", heading)
    return found.group(1) if found else heading


def _figure(column: str, cell: str):
    key, kind = FIGURE_COLUMNS[column]
    value = number(cell)
    if cell in ("-", "") or (kind is not str and value is None):
        return key, None
    if kind is PERCENT:
        return key, value / 100
    if kind is int:
        return key, int(value)
    if isinstance(kind, float):
        return key, value * kind
    return key, cell if kind is str else value


def _stamp(table: Table, source: str, **row) -> dict:
    return {**row, "commit": table.run.commit, "date": table.run.date, "source": source}


def linear_kernels(table: Table, source: str) -> list[dict]:
    """| rows x in -> out | F.linear GFLOP/s | oneDNN packed GFLOP/s | packed / F.linear | minialign runs |: two impls."""
    rows = []
    for line in table.lines:
        shape, linear, packed, ratio, runs = line
        name = "Linear kernels (fp32)"
        for impl, gflops, ratio_ in (("F.linear", linear, 1.0), ("oneDNN packed", packed, number(ratio))):
            rows.append(data.row(name, shape, impl, baseline="F.linear", ratio=ratio_,
                                 **_stamp(table, source, gflop_s=number(gflops),
                                          note=f"minialign runs {runs}" if runs == impl else None)))
    return rows


def families(table: Table, source: str) -> list[dict]:
    """| family | shape | transformers attention | transformers tokens/s | minialign path | minialign tokens/s |
    minialign / transformers | goal | max abs diff |: the peer's row and minialign's."""
    rows = []
    for family, shape, attention, theirs, path, ours, ratio, goal, diff in table.lines:
        case, peer = f"{family} ({shape})", f"transformers {attention}"
        rows.append(data.row(section(table.heading), case, peer, baseline=peer, ratio=1.0,
                             **_stamp(table, source, tokens_per_s=number(theirs))))
        rows.append(data.row(section(table.heading), case, f"minialign {path}", baseline=peer,
                             ratio=number(ratio), **_stamp(table, source, tokens_per_s=number(ours),
                                                           deviation=number(diff), deviation_from=peer,
                                                           note=f"goal {goal}")))
    return rows


def generic(table: Table, source: str) -> list[dict] | None:
    """A table with an implementation column and a ratio column; None where it has not both."""
    header = table.header
    impl_at = next((i for i, h in enumerate(header) if h in IMPLS), None)
    ratio_at = next((i for i, h in enumerate(header) if h in RATIOS), None)
    if impl_at is None or ratio_at is None:
        return None
    case_at = [i for i, h in enumerate(header) if (i < impl_at and h not in RATIOS) or h in CASE_AFTER_IMPL]
    named = header[impl_at] not in ("impl", "implementation")
    parsed = []
    for line in table.lines:
        parts = [f"{line[i]} {header[i]}" if header[i] in FIGURE_COLUMNS or number(line[i]) is not None else line[i]
                 for i in case_at]
        case = ", ".join(parts) or heading_detail(table.heading)
        impl = f"{header[impl_at]}: {line[impl_at]}" if named else line[impl_at]
        figures, notes = {}, []
        for i, (column, cell) in enumerate(zip(header, line)):
            if i in case_at and column not in FIGURE_COLUMNS or i in (impl_at, ratio_at):
                continue
            if column in FIGURE_COLUMNS:
                key, value = _figure(column, cell)
                if value is not None and key not in figures:
                    figures[key] = value
            elif cell not in ("-", ""):
                notes.append(f"{column} {cell}")
        if notes:
            figures["note"] = "; ".join(notes)
        parsed.append((case, impl, number(line[ratio_at]), figures))
    fallback = header[ratio_at][3:] if header[ratio_at].startswith("vs ") else None
    rows = []
    for case, impl, ratio, figures in parsed:
        baseline = next((i for c, i, r, _ in parsed if c == case and r == 1.0), fallback)
        if baseline is None or ratio is None:
            baseline, ratio = None, None
        if "deviation" in figures and baseline:
            figures["deviation_from"] = baseline
        rows.append(data.row(section(table.heading), case, impl, baseline=baseline, ratio=ratio,
                             **_stamp(table, source, **figures)))
    return rows


def convert(text: str, commit: str) -> tuple[dict[str, list[dict]], list[str]]:
    """(machine file -> its rows, what was not converted: one line per table)."""
    source, by_machine, dropped = SOURCE + commit, {}, []
    for table in tables(text):
        if table.header[:2] == ["rows x in -> out", "F.linear GFLOP/s"]:
            rows = linear_kernels(table, source)
        elif table.header[:3] == ["family", "shape", "transformers attention"]:
            rows = families(table, source)
        else:
            rows = generic(table, source)
        if rows is None:
            dropped.append(f"{table.machine}: {section(table.heading)}: | {' | '.join(table.header)} | "
                           f"({len(table.lines)} rows)")
            continue
        by_machine.setdefault(table.machine, []).extend(rows)
    return by_machine, dropped


def merge(path: Path, rows: list[dict], machine: dict | None) -> dict:
    """The file at `path` (else a transcribed one of `machine`) with its earlier transcribed rows replaced by `rows`."""
    if path.exists():
        content = data.read(path)
    else:
        content = {"machine": {**machine, "transcribed": "from the hand-written tables of BENCHMARKS.md "
                                                         "(each row's commit, date and source say which run)"},
                   "rows": []}
    kept = [r for r in content["rows"] if not str(r.get("source", "")).startswith(SOURCE)]
    return {"machine": content["machine"], "rows": kept + rows}


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="scripts/benchmarks/convert_history.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commit", default=HISTORY_COMMIT, help="the commit whose BENCHMARKS.md is read")
    parser.add_argument("--folder", default=str(data.DOCS), help="the machine files' folder")
    parser.add_argument("--dry-run", action="store_true", help="say what would be written, write nothing")
    args = parser.parse_args(argv)
    root = data.DOCS.parents[1]
    text = subprocess.run(["git", "-C", str(root), "show", f"{args.commit}:BENCHMARKS.md"], capture_output=True,
                          text=True, check=True).stdout
    by_machine, dropped = convert(text, args.commit)
    for name, rows in by_machine.items():
        path = Path(args.folder) / name
        content = merge(path, rows, MACHINES.get(name))
        print(f"{path}: {len(rows)} transcribed rows, {len(content['rows'])} in all")
        if not args.dry_run:
            data.write(path, content)
    print("not converted (no ratio against a peer; kept in git history):")
    print("\n".join(f"- {line}" for line in dropped))
    return 0


if __name__ == "__main__":
    sys.exit(main())
