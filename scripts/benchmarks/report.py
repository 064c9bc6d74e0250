"""The report of a full CPU run (`python scripts/bench.py --out REPORT.md`): markdown tables, the prose of report.md
filled in, one section per kind of CPU. BENCHMARKS.md itself is generated whole from docs/benchmarks/*.json (render.py).

report.md holds one block per part of the report, each after a line `<!-- name -->`, with `{field}`
placeholders (str.format). A line indented by two spaces continues the line above it (joined with one
space), so the template wraps while the report keeps a paragraph on one line."""

from __future__ import annotations

import re
from pathlib import Path

TEMPLATE = Path(__file__).with_name("report.md")
MARKER = re.compile(r"^<!-- ([\w-]+) -->$", flags=re.M)


def blocks(path: Path = TEMPLATE) -> dict[str, str]:
    """The template's blocks by name, continuation lines joined."""
    parts = MARKER.split(path.read_text(encoding="utf-8"))
    return {name: re.sub(r"\n  (?=\S)", " ", body.strip("\n")) for name, body in zip(parts[1::2], parts[2::2])}


def render(name: str, **fields) -> str:
    """One block of report.md with its fields filled in."""
    return blocks()[name].format(**fields)


def table(rows: list[dict], columns: dict[str, str]) -> str:
    """A markdown table of `rows`: columns maps each column (a row key) to its format spec ("" as is)."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(format(row[c], spec) for c, spec in columns.items()) + " |")
    return "\n".join(lines)


def write_section(path: Path, label: str, body: str) -> None:
    """Put one CPU kind's report in the report file `path`, keeping every other kind's section (the figures of a
    run hold for the kind of CPU it ran on)."""
    start, end = f"<!-- bench: {label} -->", f"<!-- /bench: {label} -->"
    block = f"{start}\n# Machine kind: {label}\n\n{body}\n{end}"
    text = path.read_text(encoding="utf-8") if path.exists() else render("file")
    if start in text and end in text:
        text = text[:text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text, encoding="utf-8")
