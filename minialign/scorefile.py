"""Batch scoring of JSONL / CSV files for `minialign score --input ... --output ...`.

Rows are validated before any scoring; results are appended block by block and flushed, so an
interrupted run leaves only complete rows, and `resume` continues after the last one written.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .scorer import AlignScorer


class InputError(ValueError):
    """Malformed input rows, each named by its line number."""


@dataclass
class Row:
    id: Any
    line: int
    context: str
    claim: str


def _format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    if suffix == ".csv":
        return "csv"
    raise InputError(f"{path}: unknown format {suffix!r}; use .jsonl or .csv")


def read_rows(path: Path, *, context_field: str, claim_field: str, id_field: str,
              splitter) -> tuple[list[Row], list[str]]:
    """(valid rows, problems) where each problem names its line number."""
    rows, problems = [], []
    fmt = _format(path)
    with open(path, encoding="utf-8", newline="") as f:
        if fmt == "jsonl":
            records = []
            for line_no, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    problems.append(f"line {line_no}: invalid JSON ({e.msg})")
                    continue
                if not isinstance(record, dict):
                    problems.append(f"line {line_no}: expected a JSON object")
                    continue
                records.append((line_no, record))
        else:
            reader = csv.DictReader(f)
            records = []
            for record in reader:
                records.append((reader.line_num, record))
    for line_no, record in records:
        context, claim = record.get(context_field), record.get(claim_field)
        bad = [f"field {name!r} is {'missing' if value is None else type(value).__name__}"
               for name, value in ((context_field, context), (claim_field, claim)) if not isinstance(value, str)]
        if not bad and not splitter(claim):
            bad.append(f"field {claim_field!r} has no sentence")
        if bad:
            problems.append(f"line {line_no}: " + "; ".join(bad))
            continue
        rows.append(Row(record.get(id_field, line_no), line_no, context, claim))
    return rows, problems


class ResultWriter:
    """Appends (id, score) rows; each row is written whole and flushed."""

    def __init__(self, path: Path, *, resume: bool):
        self.path, self.fmt = path, _format(path)
        self.done: list[str] = []
        if path.exists() and path.stat().st_size > 0:
            if not resume:
                raise InputError(f"{path} exists; pass --resume to continue it, or remove it")
            self.done = self._read_done()
        self.file = open(path, "a", encoding="utf-8", newline="")
        if self.fmt == "csv" and path.stat().st_size == 0:
            self._write_line("id,score\n")

    def _read_done(self) -> list[str]:
        """Ids of the complete rows; a trailing partial line (an interrupted write) is cut off."""
        data = self.path.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]
        if len(complete) != len(data):
            with open(self.path, "r+b") as f:
                f.truncate(len(complete))
        lines = complete.decode("utf-8").splitlines()
        if self.fmt == "csv":
            return [row["id"] for row in csv.DictReader(lines)]
        return [str(json.loads(line)["id"]) for line in lines if line.strip()]

    def _write_line(self, text: str) -> None:
        self.file.write(text)
        self.file.flush()

    def write(self, row: Row, score: float) -> None:
        if self.fmt == "csv":
            buffer = io.StringIO()
            csv.writer(buffer, lineterminator="\n").writerow([row.id, repr(score)])
            self._write_line(buffer.getvalue())
        else:
            self._write_line(json.dumps({"id": row.id, "score": score}, ensure_ascii=False) + "\n")

    def close(self) -> None:
        self.file.close()


def score_file(scorer: AlignScorer, input_path: Path, output_path: Path, *, context_field: str = "context",
               claim_field: str = "claim", id_field: str = "id", resume: bool = False, skip_invalid: bool = False,
               block_rows: int | None = None, progress: bool = True) -> int:
    """Score every valid row of input_path into output_path; returns the number of rows scored now."""
    rows, problems = read_rows(input_path, context_field=context_field, claim_field=claim_field,
                               id_field=id_field, splitter=scorer.splitter)
    if problems:
        report = "\n".join(f"{input_path}: {p}" for p in problems)
        if not skip_invalid:
            raise InputError(f"{len(problems)} malformed row(s), nothing scored (--skip-invalid skips them):\n{report}")
        print(f"skipping {len(problems)} malformed row(s):\n{report}", file=sys.stderr)
    writer = ResultWriter(output_path, resume=resume)
    try:
        done = writer.done
        if done:
            if len(done) > len(rows) or [str(r.id) for r in rows[: len(done)]] != done:
                raise InputError(f"{output_path} does not hold the first {len(done)} rows of {input_path}; "
                                 f"cannot resume")
            rows = rows[len(done):]
        block_rows = block_rows or scorer.engine.batch_size * 8
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(rows), desc="scoring", unit="row", file=sys.stderr)
        for start in range(0, len(rows), block_rows):
            block = rows[start:start + block_rows]
            scores = scorer.score([r.context for r in block], [r.claim for r in block])
            for row, score in zip(block, scores):
                writer.write(row, score)
            if bar is not None:
                bar.update(len(block))
        if bar is not None:
            bar.close()
    finally:
        writer.close()
    return len(rows)
