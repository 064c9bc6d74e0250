"""The tables people read, generated from the benchmark files (data.py): BENCHMARKS.md's blocks, one per kind of
machine (MARKERS: the GPU machines' and the CPU machines'), each written between its markers from every such
machine's docs/benchmarks/<machine>.json, and the GPU suite's own report. Nothing in the
block is typed by hand: a run's file replaced, the block is generated again (`python scripts/bench.py --render`);
tests/test_gpu_suite.py checks that the committed block is what the committed files give.

Per file: the machine, then one table per section (sections and rows in the file's order): the case and impl, one
ratio column per peer a row of the section is measured against ("vs <baseline>"), then each figure some row of
the section has (data.FIGURES' columns, in their order; p10 and p90 as one spread column), "-" where a row lacks
it; below, what each column shown means."""

from __future__ import annotations

from pathlib import Path

from benchmarks import data

BEGIN = "<!-- generated from docs/benchmarks/*.json: do not edit -->"
END = "<!-- end generated -->"
# each kind of machine's block in BENCHMARKS.md: its markers (the GPU block's were the first, kept as they were)
MARKERS = {"gpu": (BEGIN, END),
           "cpu": ("<!-- generated from docs/benchmarks/*.json, CPU machines: do not edit -->",
                   "<!-- end generated, CPU machines -->")}
SPREAD = "p10-p90 ms"  # p10_ms and p90_ms in one column, after median_ms
RATIO_SPEC = ".2f"


def _cell(value, spec: str) -> str:
    if value is None:
        return "-"
    return format(value, spec) if spec else str(value)


def table(rows: list[dict]) -> tuple[str, list[str]]:
    """(a markdown table of one section's rows, the FIGURES keys it shows)."""
    baselines = list(dict.fromkeys(r["baseline"] for r in rows if r["baseline"]))
    shown = [key for key, figure in data.FIGURES.items() if figure.label and any(key in r for r in rows)]
    columns = [(data.FIGURES["commit"].label, lambda r: r.get("commit", "-"))] if "commit" in shown else []
    columns += [("case", lambda r: r["case"]), ("impl", lambda r: r["impl"])]
    columns += [(f"vs {b}", lambda r, b=b: _cell(r["ratio"], RATIO_SPEC) if r["baseline"] == b else "-")
                for b in baselines]
    for key in shown:
        if key != "commit":
            columns.append((data.FIGURES[key].label, lambda r, k=key: _cell(r.get(k), data.FIGURES[k].spec)))
        if key == "median_ms" and any("p10_ms" in r and "p90_ms" in r for r in rows):
            columns.append((SPREAD, lambda r: f"{r['p10_ms']:.2f}-{r['p90_ms']:.2f}" if "p10_ms" in r else "-"))
    lines = ["| " + " | ".join(head for head, _ in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row) for _, cell in columns) + " |" for row in rows]
    return "\n".join(lines), shown


def sections(rows: list[dict], level: str = "###") -> tuple[str, list[str]]:
    """(each section's heading and table, the FIGURES keys shown in any of them)."""
    parts, shown = [], []
    for section in dict.fromkeys(r["section"] for r in rows):
        text, keys = table([r for r in rows if r["section"] == section])
        parts.append(f"{level} {section}\n\n{text}")
        shown += [k for k in keys if k not in shown]
    return "\n\n".join(parts), shown


def _value(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {_value(v)}" for k, v in value.items()) or "none recorded"
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return str(value)


def clocks(samples: list[dict]) -> str:
    """The clock samples as one line each."""
    absent = [s for s in samples if "absent" in s]
    if absent:
        return "absent (" + absent[0]["absent"] + ")"
    return "; ".join(f"{s['at']} {s.get('time', '')}: " + ", ".join(f"{k} {s[k]}" for k in data.CLOCK_KEYS if k in s)
                     for s in samples)


def machine(entry: dict) -> str:
    """The machine entry as a list: every key of data.MACHINE ("not recorded" where a transcribed file lacks it),
    then the extras it has."""
    lines = [f"- {key}: {_value(entry[key]) if key in entry else 'not recorded'}" for key in data.MACHINE
             if key != "name"]
    for key in data.MACHINE_EXTRAS:
        if key in entry:
            lines.append(f"- {'GPU clocks' if key == 'clocks' else key}: "
                         + (clocks(entry[key]) if key == "clocks" else _value(entry[key])))
    return "\n".join(lines)


def legend(keys: list[str]) -> str:
    """What each column shown means (data.FIGURES)."""
    meanings = [f"{data.FIGURES[k].label}: {data.FIGURES[k].meaning}" for k in keys]
    if "median_ms" in keys:
        meanings.insert(keys.index("median_ms") + 1, f"{SPREAD}: its 10th to 90th percentile")
    return "Columns: vs <baseline>: the baseline's time over the row's (above 1: faster); " + "; ".join(meanings) + "."


def report(files: list[tuple[str, dict]], level: str = "##") -> str:
    """Each (display name, file) as a heading with its machine and its sections' tables, then the columns' legend."""
    parts, shown = [], []
    for name, content in files:
        tables, keys = sections(content["rows"], level + "#")
        parts.append(f"{level} {content['machine']['name']} ({name})\n\n{machine(content['machine'])}\n\n{tables}")
        shown += [k for k in keys if k not in shown]
    return "\n\n".join(parts + [legend(shown)])


def machine_files(kind: str, folder: Path = data.DOCS) -> list[tuple[str, dict]]:
    """Every file in `folder` of a machine of this kind ("gpu", "cpu"; a dry run's left out), by name, as (path from
    the repository's top, content)."""
    top = data.DOCS.parents[1]
    found = []
    for path in sorted(Path(folder).glob("*.json")):
        content = data.read(path)
        if content["machine"]["kind"] == kind and not content["machine"].get("dry_run"):
            found.append((str(path.relative_to(top)) if path.is_relative_to(top) else path.name, content))
    return found


def update(text: str, files: list[tuple[str, dict]], kind: str = "gpu") -> str:
    """`text` (BENCHMARKS.md) with the block of this kind of machine (between its MARKERS) generated from `files`."""
    begin, end = MARKERS[kind]
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"BENCHMARKS.md needs one {begin} and one {end} after it")
    head, tail = text[:text.index(begin)], text[text.index(end) + len(end):]
    return f"{head}{begin}\n{report(files)}\n{end}{tail}"
