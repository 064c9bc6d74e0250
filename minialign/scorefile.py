"""Batch scoring of JSONL / CSV files for `minialign score --input ... --output ...`.

Every input row is validated before any scoring (fields present, strings, encodable text, a claim
with a sentence), each problem named by its line. Results are written block by block (a block is
8 x batch_size rows), each row whole and flushed, so an interrupted run leaves only complete rows.
`resume` continues after the last complete row, after checking that the output holds the first
rows of this input, made with the same settings (recorded beside the output when it is created).
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .scorer import AlignScorer, check_example, report_truncation

SETTINGS_SUFFIX = ".settings.json"  # beside the output: what produced it
SHOWN_PROBLEMS = 20  # malformed rows listed in an error; the rest are counted


_MISSING = object()  # a field the row does not have (null is a value: None)


class InputError(ValueError):
    """Malformed input or output files, named with the line."""


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


def _not_utf8(data: bytes, error: UnicodeDecodeError, offset: int = 0) -> str:
    return f"not UTF-8 text (byte 0x{data[error.start]:02x} at byte {offset + error.start})"


def read_records(path: Path) -> tuple[list[tuple[int, dict]], list[str], list[str]]:
    """(line, record) of each parsable row, problems of the others (each naming its line), and the
    field names the file has (CSV: its header; JSONL: the keys of its rows)."""
    data = path.read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):  # a byte-order mark (Excel's "CSV UTF-8")
        data = data[3:]
    records, problems, fields = [], [], {}
    if _format(path) == "jsonl":
        offset = 0
        for line_no, raw in enumerate(data.split(b"\n"), start=1):  # only \n ends a row (not U+2028)
            start, offset = offset, offset + len(raw) + 1
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                problems.append(f"line {line_no}: {_not_utf8(raw, e, start)}")
                continue
            except json.JSONDecodeError as e:
                problems.append(f"line {line_no}: invalid JSON ({e.msg})")
                continue
            if not isinstance(record, dict):
                problems.append(f"line {line_no}: expected a JSON object, found {type(record).__name__}")
                continue
            fields.update(dict.fromkeys(record))
            records.append((line_no, record))
        return records, problems, list(fields)
    text = data.decode("utf-8", errors="surrogateescape")  # bad bytes become U+DC80..U+DCFF, found per row
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None) or []
    line_no = reader.line_num + 1
    for values in reader:
        if any(values):
            record = dict(zip(header, values))
            broken = [name for name, value in record.items() if _escaped(value)]
            if broken:
                problems.append(f"line {line_no}: field {broken[0]!r} is not UTF-8 text")
            elif len(values) > len(header):
                problems.append(f"line {line_no}: {len(values)} values for {len(header)} columns")
            else:
                records.append((line_no, record))
        line_no = reader.line_num + 1
    return records, problems, header


def _escaped(value: str) -> bool:
    return any("\udc80" <= ch <= "\udcff" for ch in value)


def read_rows(path: Path, *, context_field: str, claim_field: str, id_field: str,
              splitter) -> tuple[list[Row], list[str]]:
    """(valid rows, problems) where each problem names its line number. A field that no row has
    is one error listing the fields found."""
    records, problems, fields = read_records(path)
    for flag, name in (("--context-field", context_field), ("--claim-field", claim_field)):
        if records and name not in fields:
            raise InputError(f"{path}: no row has the field {name!r}; fields found: "
                             f"{', '.join(map(repr, fields[:20])) or 'none'}. Name yours with {flag}")
    rows, names = [], {"context": context_field, "claim": claim_field}
    for line_no, record in records:
        values = {which: record.get(name, _MISSING) for which, name in names.items()}
        found, _ = check_example(*(None if values[w] is _MISSING else values[w] for w in names), splitter, null="null")
        bad = [f"field {names[which]!r} " + ("is missing" if values[which] is _MISSING else what)
               for which, what in found]
        if bad:
            problems.append(f"line {line_no}: " + "; ".join(bad))
            continue
        row_id = record.get(id_field)
        rows.append(Row(line_no if row_id is None else row_id, line_no, values["context"], values["claim"]))
    return rows, problems


def _listing(path: Path, problems: list[str]) -> str:
    shown = "\n".join(f"{path}: {p}" for p in problems[:SHOWN_PROBLEMS])
    more = len(problems) - SHOWN_PROBLEMS
    return shown + (f"\n... and {more} more" if more > 0 else "")


class ResultWriter:
    """Appends (id, score) rows; each row is written whole and flushed."""

    def __init__(self, path: Path, *, resume: bool, settings: dict[str, Any]):
        self.path, self.fmt = path, _format(path)
        if path.is_dir():
            raise InputError(f"{path} is a directory; --output names a .jsonl or .csv file")
        self.done: list[str] = []
        if path.exists() and path.stat().st_size > 0:
            if not resume:
                raise InputError(f"{path} exists; pass --resume to continue it, or remove it")
            _check_settings(path, settings)
            self.done = self._read_done()
        else:
            _write_settings(path, settings)
        self.file = open(path, "a", encoding="utf-8", newline="")
        if self.fmt == "csv" and path.stat().st_size == 0:
            self._write_line("id,score\n")

    def _read_done(self) -> list[str]:
        """Ids of the complete rows; a trailing partial record (an interrupted write) is cut off."""
        data = self.path.read_bytes()
        complete = data[:_complete_length(data, csv_quotes=self.fmt == "csv")]
        if len(complete) != len(data):
            with open(self.path, "r+b") as f:
                f.truncate(len(complete))
        try:
            text = complete.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InputError(f"{self.path}: {_not_utf8(complete, e)}; not a file minialign wrote, not resuming") from None
        if self.fmt == "csv":
            rows = list(csv.reader(io.StringIO(text, newline="")))
            if not rows or rows[0] != ["id", "score"] or any(len(r) != 2 for r in rows[1:]):
                raise InputError(f"{self.path}: not a score file minialign wrote (expected the columns id,score); "
                                 f"not resuming")
            return [r[0] for r in rows[1:]]
        ids = []
        for line_no, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                ids.append(str(row["id"]))
                float(row["score"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                raise InputError(f"{self.path}: line {line_no} is not a score row minialign wrote ({line[:80]!r}); "
                                 f"not resuming") from None
        return ids

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


def _complete_length(data: bytes, *, csv_quotes: bool) -> int:
    """Bytes of `data` up to the end of its last complete record: a newline that (in CSV) is not
    inside a quoted field."""
    if not csv_quotes:
        return data.rfind(b"\n") + 1
    end, position, quotes = 0, 0, 0
    for segment in data.split(b"\n")[:-1]:
        position += len(segment) + 1
        quotes += segment.count(b'"')
        if quotes % 2 == 0:  # outside quotes: this newline ends a record
            end = position
    return end


def settings_path(output: Path) -> Path:
    return output.with_name(output.name + SETTINGS_SUFFIX)


def _write_settings(output: Path, settings: dict[str, Any]) -> None:
    target = settings_path(output)
    staging = target.with_name(f".{target.name}.tmp")
    staging.write_text(json.dumps({"minialign_scores": 1, "settings": settings}, indent=1) + "\n", encoding="utf-8")
    os.replace(staging, target)


def _check_settings(output: Path, settings: dict[str, Any]) -> None:
    """Refuse to resume a file made with other settings (another model, mode, dtype or fields)."""
    target = settings_path(output)
    try:
        recorded = json.loads(target.read_text(encoding="utf-8"))["settings"]
    except FileNotFoundError:
        raise InputError(f"{output} has no record of the settings that made it ({target.name} is missing), so "
                         f"resuming could mix two metrics in one file; remove {output} to start over") from None
    except (ValueError, KeyError, TypeError):
        raise InputError(f"{target}: unreadable settings record; remove {output} and {target.name} to start over") \
            from None
    differ = [f"{key}: the file was made with {recorded.get(key)!r}, this run has {value!r}"
              for key, value in settings.items() if recorded.get(key) != value]
    if differ:
        raise InputError(f"refusing to resume {output}: its settings differ ({'; '.join(differ)}). Rerun with "
                         f"the same settings, or write to another --output")


def run_settings(scorer: AlignScorer, **named) -> dict[str, Any]:
    """What makes two runs' scores comparable: the model's identity (as named), mode, dtype, fields."""
    dtype = next(scorer.model.parameters()).dtype
    return {**named, "mode": scorer.mode, "dtype": str(dtype).removeprefix("torch.")}


def score_file(scorer: AlignScorer, input_path: Path, output_path: Path, *, context_field: str = "context",
               claim_field: str = "claim", id_field: str = "id", resume: bool = False, skip_invalid: bool = False,
               block_rows: int | None = None, progress: bool = True, model: str | None = None) -> int:
    """Score every valid row of input_path into output_path; returns the number of rows scored now.
    `model` names the model in the settings record (default: the checkpoint the scorer came from)."""
    input_path, output_path = Path(input_path), Path(output_path)
    if output_path.exists() and input_path.exists() and os.path.samefile(input_path, output_path):
        raise InputError(f"--output {output_path} is the input file; write the scores to another file")
    _format(output_path)
    rows, problems = read_rows(input_path, context_field=context_field, claim_field=claim_field,
                               id_field=id_field, splitter=scorer.splitter)
    if problems:
        if not skip_invalid:
            raise InputError(f"{len(problems)} malformed row(s), nothing scored (--skip-invalid skips them):\n"
                             + _listing(input_path, problems))
        if not rows:
            raise InputError(f"every row of {input_path} is malformed ({len(problems)}), nothing to score:\n"
                             + _listing(input_path, problems))
        print(f"skipping {len(problems)} malformed row(s):\n{_listing(input_path, problems)}", file=sys.stderr)
    if not rows and not problems:
        warnings.warn(f"{input_path}: no rows to score; the output holds none", stacklevel=2)
    settings = run_settings(scorer, model=model or scorer.source, context_field=context_field,
                            claim_field=claim_field, id_field=id_field)
    writer = ResultWriter(output_path, resume=resume, settings=settings)
    cut_pairs = pairs = cut_tokens = 0
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
            details = scorer.score([r.context for r in block], [r.claim for r in block], return_details=True,
                                   warn_truncation=False)
            for row, result in zip(block, details):
                writer.write(row, result["score"])
                cuts = [n for per_chunk in result["truncated"] for n in per_chunk]
                cut_pairs, pairs, cut_tokens = cut_pairs + sum(n > 0 for n in cuts), pairs + len(cuts), cut_tokens + sum(cuts)
            if bar is not None:
                bar.update(len(block))
        if bar is not None:
            bar.close()
    finally:
        writer.close()
    report_truncation(cut_pairs, pairs, cut_tokens, scorer.max_length)  # once per run
    return len(rows)
