"""What people read of the benchmarks, generated from the benchmark files (data.py): BENCHMARKS.md and the docs'
benchmarks page, whole, and the GPU suite's own report. Per kind of machine (MARKERS: the CPU machines', the GPU
machines'), one block between its markers; in it, per machine (docs/benchmarks/<machine>.json), its entry, one table per
section with a chart of the section's ratios against each peer (drawn by the `bench` extra's matplotlib into
docs/benchmarks/charts/), and the machine's hand-written notes (docs/benchmarks/<machine>.notes.txt: what a reading
adds; never a table). Nothing is typed into BENCHMARKS.md: a run's file replaced, everything is generated again
(`python scripts/bench.py --render`; `--render --check` says whether the committed pages are what the files give).

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
MARKERS = {"cpu": ("<!-- generated from docs/benchmarks/*.json, CPU machines: do not edit -->",
                   "<!-- end generated, CPU machines -->"),
           "gpu": (BEGIN, END)}
KIND_NAMES = {"cpu": "CPU", "gpu": "GPU"}
TOP = data.DOCS.parents[1]
PAGES = {TOP / "BENCHMARKS.md": "docs/benchmarks/", TOP / "docs" / "benchmarks.md": "benchmarks/"}  # page -> its
# path to the data folder (the charts' links)
CHARTS = "charts"  # the charts' folder in data.DOCS
NOTES = ".notes.txt"  # a machine's notes beside its file (not .md: every page under docs/ is in the site's nav)
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


def sections(rows: list[dict], level: str = "###", charts: str | None = None) -> tuple[str, list[str]]:
    """(each section's heading, where its rows came from if they were transcribed, its chart's link (under `charts`,
    the machine's charts' path stem; none without) and table; the FIGURES keys shown in any of them)."""
    parts, shown = [], []
    for section in dict.fromkeys(r["section"] for r in rows):
        chosen = [r for r in rows if r["section"] == section]
        text, keys = table(chosen)
        lines = [f"{level} {section}", transcribed(chosen)]
        if charts and chart_rows(chosen):
            lines.append(f"![{section}: ratio against each peer]({charts}--{chart_name(section)})")
        parts.append("\n\n".join(line for line in lines if line) + f"\n\n{text}")
        shown += [k for k in keys if k not in shown]
    return "\n\n".join(parts), shown


def transcribed(rows: list[dict]) -> str:
    """Where the section's copied rows came from: their runs' commits and dates and the source ("" for none)."""
    copied = [r for r in rows if r.get("source")]
    if not copied:
        return ""
    runs = ", ".join(f"{c} ({d})" if d else c for c, d in dict.fromkeys((r.get("commit", "?"), r.get("date"))
                                                                           for r in copied))
    return f"Rows of the runs at {runs}, " + "; ".join(dict.fromkeys(r["source"] for r in copied)) + "."


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


def report(files: list[tuple[str, dict]], level: str = "##", *, charts: str | None = None) -> str:
    """Each (display name, file) as a heading with its machine, its sections' tables (with their charts' links where
    `charts` gives the charts' folder as a page links it) and its notes, then the columns' legend."""
    parts, shown = [], []
    for name, content in files:
        stem = Path(name).name.removesuffix(".json")
        tables, keys = sections(content["rows"], level + "#", f"{charts}/{stem}" if charts else None)
        part = f"{level} {content['machine']['name']} ({name})\n\n{machine(content['machine'])}\n\n{tables}"
        if note := notes(name):
            part += f"\n\n{level}# Notes ({Path(name).with_name(stem + NOTES).as_posix()}, hand-written)\n\n{note}"
        parts.append(part)
        shown += [k for k in keys if k not in shown]
    return "\n\n".join(parts + [legend(shown)])


def notes(name: str) -> str:
    """The machine's notes file beside its data file (name: as machine_files gives it), "" without one."""
    path = TOP / Path(name).with_name(Path(name).name.removesuffix(".json") + NOTES)  # TOP / an absolute name: that name
    return path.read_text(encoding="utf-8").strip() if path.exists() else ""


def machine_files(kind: str, folder: Path = data.DOCS) -> list[tuple[str, dict]]:
    """Every file in `folder` of a machine of this kind ("gpu", "cpu"; a dry run's left out), by name, as (path from
    the repository's top, content)."""
    found = []
    for path in sorted(Path(folder).glob("*.json")):
        content = data.read(path)
        if content["machine"]["kind"] == kind and not content["machine"].get("dry_run"):
            found.append((_shown(path), content))
    return found


def _shown(path: Path) -> str:
    """A path as the pages name it: from the repository's top, or whole where it is elsewhere (a test's)."""
    path = Path(path).resolve()
    return path.relative_to(TOP).as_posix() if path.is_relative_to(TOP) else str(path)


def block(files: list[tuple[str, dict]]) -> str:
    """One kind of machine's generated block, as BENCHMARKS.md holds it (the charts linked from the top)."""
    return report(files, charts=f"{PAGES[TOP / 'BENCHMARKS.md']}{CHARTS}")


def update(text: str, files: list[tuple[str, dict]], kind: str = "gpu") -> str:
    """`text` (BENCHMARKS.md) with the block of this kind of machine (between its MARKERS) generated from `files`."""
    begin, end = MARKERS[kind]
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"BENCHMARKS.md needs one {begin} and one {end} after it")
    head, tail = text[:text.index(begin)], text[text.index(end) + len(end):]
    return f"{head}{begin}\n{block(files)}\n{end}{tail}"


INTRO = """# Benchmarks

Generated from the benchmark files, one per machine (docs/benchmarks/<machine>.json; the schema is
scripts/benchmarks/data.py's), by `python scripts/bench.py --render`: do not edit this page, edit or add a file (a run
writes its rows: `python scripts/bench.py --suite SECTION --data docs/benchmarks/<machine>.json`, the GPU suite
`bash scripts/gpu_suite.sh`). Per kind of machine, then per machine: its entry (CPU or GPU, cores, torch, commit,
date, load), one table per section with a chart of each row's ratio against its peer (the peer's time over the row's:
above 1, faster; drawn with the `bench` extra), and the machine's hand-written notes. A ratio holds for its machine:
which kernel is faster and by how much bf16 or int8 helps depends on the kind of CPU or GPU. Rows copied from the
hand-written tables this page held before say so under their section; the runs' full hand-written readings, and the
tables without a ratio (quality, memory, parity), are in git history (`git show 2566b0e:BENCHMARKS.md`)."""


def kind_heading(kind: str, files: list[tuple[str, dict]]) -> str:
    names = [content["machine"]["name"] for _, content in files]
    return f"# {KIND_NAMES[kind]}: " + (f"one {names[0]}" if len(names) == 1 else ", ".join(names))


def document(by_kind: dict[str, list[tuple[str, dict]]]) -> str:
    """BENCHMARKS.md, whole: the introduction, then each kind of machine's heading and generated block."""
    parts = [INTRO]
    for kind, (begin, end) in MARKERS.items():
        if files := by_kind.get(kind):
            parts.append(f"{kind_heading(kind, files)}\n\n{begin}\n{block(files)}\n{end}")
    return "\n\n".join(parts) + "\n"


def page(text: str, link: str) -> str:
    """The document as a page at another place links the data folder (`link`)."""
    ours = PAGES[TOP / "BENCHMARKS.md"]
    return text.replace(f"]({ours}", f"]({link}") if link != ours else text


# -- charts: the `bench` extra's matplotlib ------------------------------------------------------------------

def chart_name(section: str) -> str:
    return data.slug(section)[:60].strip("-") + ".svg"


def chart_rows(rows: list[dict]) -> list[dict]:
    """The rows a section's chart shows: each with a ratio against another impl."""
    return [r for r in rows if r["ratio"] is not None and r["baseline"] != r["impl"]]


def charts(files: list[tuple[str, dict]], folder: Path = data.DOCS) -> dict[Path, list[dict]]:
    """Each chart's file (in folder/charts) and the rows it draws, for these machine files."""
    found = {}
    for name, content in files:
        stem = Path(name).name.removesuffix(".json")
        for section in dict.fromkeys(r["section"] for r in content["rows"]):
            if shown := chart_rows([r for r in content["rows"] if r["section"] == section]):
                found[Path(folder) / CHARTS / f"{stem}--{chart_name(section)}"] = shown
    return found


def _label(row: dict, width: int = 90) -> str:
    text = f"{row['case']} | {row['impl']}" + (f" ({row['commit']})" if row.get("commit") else "")
    return text if len(text) <= width else text[:width - 3] + "..."


def draw(path: Path, title: str, rows: list[dict]) -> None:
    """A horizontal bar per row from 1 to its ratio against its peer (log scale), coloured by peer; an SVG with
    text as text and no date in it, so the same rows give the same file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "minialign", "font.size": 8}):
        peers = list(dict.fromkeys(r["baseline"] for r in rows))
        colours = {p: plt.get_cmap("tab10")(i % 10) for i, p in enumerate(peers)}
        figure, axes = plt.subplots(figsize=(9, 1.6 + 0.18 * len(rows) + 0.15 * len(peers)), layout="constrained")
        ys = range(len(rows))
        axes.barh(list(ys), [r["ratio"] - 1 for r in rows], left=1, color=[colours[r["baseline"]] for r in rows])
        axes.set_yticks(list(ys), [_label(r) for r in rows], fontsize=6)
        axes.invert_yaxis()
        axes.set_xscale("log")
        ratios = [r["ratio"] for r in rows]
        low, high = min(0.8, min(ratios) / 1.25), max(1.25, max(ratios) * 1.25)
        axes.set_xlim(low, high)
        axes.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        axes.xaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g") if high / low < 8
                                       else matplotlib.ticker.NullFormatter())  # over a wide range they crowd
        axes.axvline(1.0, color="black", linewidth=0.8)
        axes.set_xlabel("ratio: the peer's time over the row's (above 1: faster)")
        axes.set_title(title[:110], fontsize=9)
        for y, r in zip(ys, rows):
            axes.text(r["ratio"], y, f" {r['ratio']:.2f}", va="center", fontsize=6)
        handles = [plt.Rectangle((0, 0), 1, 1, color=colours[p]) for p in peers]
        figure.legend(handles, [f"vs {p}"[:70] for p in peers], fontsize=6, loc="outside lower center",
                      ncol=min(len(peers), 3), frameon=False)
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, format="svg", metadata={"Date": None, "Creator": None})
        plt.close(figure)


def render(*, check: bool = False, folder: Path = data.DOCS, pages: dict[Path, str] | None = None, echo=print) -> int:
    """Write the pages (default PAGES: BENCHMARKS.md and the docs' page) and the charts (into folder/charts) from the
    files in `folder`; with check, write nothing and say which page is not what the files give or which chart is
    missing (1: one is). Without matplotlib the pages are written and the charts skipped, said once."""
    by_kind = {kind: machine_files(kind, folder) for kind in MARKERS}
    text, stale = document(by_kind), []
    for path, link in (pages or PAGES).items():
        new = page(text, link)
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != new:
                stale.append(_shown(path))
        else:
            path.write_text(new, encoding="utf-8")
    drawn = {path: rows for files in by_kind.values() for path, rows in charts(files, folder).items()}
    if check:
        stale += [_shown(path) for path in drawn if not path.exists()]
        echo("the benchmark pages are " + ("current" if not stale else "stale (python scripts/bench.py --render): "
                                                                        + ", ".join(stale)))
        return int(bool(stale))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        echo("charts skipped: no matplotlib (pip install -e '.[bench]'); the pages link the charts committed")
        return 0
    for path, rows in drawn.items():
        draw(path, rows[0]["section"], rows)
    for old in (Path(folder) / CHARTS).glob("*.svg"):
        if old not in drawn:
            old.unlink()
    echo(f"wrote {', '.join(_shown(p) for p in pages or PAGES)} and {len(drawn)} charts")
    return 0
