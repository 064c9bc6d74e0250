"""Files in, files out: `minialign score | embed | classify --input ... --output ...`.

One engine for every command (a Job says which fields it reads, how a block of rows becomes output
records, and what makes two runs comparable). Every input row is validated before any model work
(fields present, strings, encodable text, and the job's own rule, e.g. a claim with a sentence),
each problem named by its line. Results are written block by block (a block is 8 x batch_size
rows), each row whole and flushed, so an interrupted run leaves only complete rows. `resume`
continues after the last complete row, after checking that the output holds the first rows of
this input, made with the same settings (recorded beside the output when it is created).
Outputs: .jsonl (any job), .csv (jobs with flat columns), .safetensors (jobs that say how their records
become named tensors, `Job.tensors`: written whole at the end, under a temporary name, so never half; the
layouts are `stacked`, `ragged` and `sparse` below). `check_output` is the one check of where a command
writes, made before any model is loaded or row read.
An id names one row: a second row with the same id is a malformed row (--resume resumes by position
and checks the ids it finds there; an output keyed by a repeated id could not be joined back).
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from minialign.text.validation import value_problem

SETTINGS_SUFFIX = ".settings.json"  # beside the output: what produced it
SHOWN_PROBLEMS = 20  # malformed rows listed in an error; the rest are counted


_MISSING = object()  # a field the row does not have (null is a value: None)


class InputError(ValueError):
    """Malformed input or output files, named with the line."""


@dataclass
class Row:
    id: Any
    line: int
    values: dict[str, str | None]  # role -> text (None: an optional field the row does not have)


@dataclass(kw_only=True)
class Fields:
    """What a command reads from each row, known before any model is loaded (so the input is validated
    first: `validate_input`).

    fields:   role -> the input field holding it, e.g. {"context": "context", "claim": "claim"}
    flags:    role -> the command-line flag that names the field (for messages)
    optional: roles a row may leave out, or give as null (each product's documented rule: jobs.py)
    check:    extra problems of a row's values, as (role, problem)
    """

    fields: dict[str, str]
    flags: dict[str, str]
    optional: tuple[str, ...] = ()
    check: Callable[[dict[str, str | None]], list[tuple[str, str]]] = lambda values: []


@dataclass(kw_only=True)
class Job(Fields):
    """What one command reads and writes: its Fields, and

    run:      a block of rows -> one output record (a dict, without the id) per row
    columns:  the record's keys in CSV order; None: no CSV output
    tensors:  for .safetensors output: the run's records, in order -> named tensors (`stacked`, `ragged`,
              `sparse`, or several of them: `tensor_layout`), beside `tensor_metadata` (strings)
    outputs:  the file formats it writes (FORMATS' values; csv needs columns, safetensors tensors);
              jobs.OUTPUT_FORMATS says the command line's, which it checks before loading a model
    settings: what must match for --resume (model, mode, dtype, ...)
    finish:   called once after the last block (e.g. a warning with totals)
    nested:   the record's keys holding a list of JSON objects per row (ner's entities): Ray keeps each row's
              list as it is (Arrow's list of structs), where it would make other lists tensors
    """

    run: Callable[[list[Row]], list[dict[str, Any]]]
    settings: dict[str, Any]
    columns: list[str] | None = None
    tensors: Callable[[list[dict[str, Any]]], dict[str, torch.Tensor]] | None = None
    tensor_metadata: dict[str, str] = field(default_factory=dict)
    finish: Callable[[], None] = lambda: None
    batch_size: int = 32
    outputs: tuple[str, ...] | None = None  # None: jsonl, and csv with columns, safetensors with tensors
    nested: tuple[str, ...] = ()

    def __post_init__(self):
        if self.outputs is None:
            self.outputs = ("jsonl", *(("csv",) if self.columns is not None else ()),
                            *(("safetensors",) if self.tensors is not None else ()))
        if "csv" in self.outputs and self.columns is None or "safetensors" in self.outputs and self.tensors is None:
            raise ValueError(f"a job writing {self.outputs} needs columns (csv) and tensors (safetensors)")


# -- .safetensors layouts: records -> named tensors (Job.tensors) -------------------------------------------

Layout = Callable[[list[dict[str, Any]]], dict[str, torch.Tensor]]


def stacked(key: str, *, name: str | None = None, dtype: torch.dtype = torch.float32, width: int = 0) -> Layout:
    """One vector per record (record[key]) as one (N, D) tensor `name` (default: the key); no records: (0, width)."""
    def layout(records: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        rows = [torch.as_tensor(r[key], dtype=dtype) for r in records]
        return {name or key: torch.stack(rows) if rows else torch.empty(0, width, dtype=dtype)}

    return layout


def ragged(key: str, *, name: str | None = None, offsets: str = "offsets", width: int = 0) -> Layout:
    """A list of vectors per record (record[key], each text's own count) as one (total vectors, D) float32 tensor
    `name` (default: the key), the records' vectors one after the other, and `offsets` (N + 1,) int64: record i's
    vectors are rows offsets[i]:offsets[i + 1]."""
    def layout(records: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        parts = [torch.as_tensor(r[key], dtype=torch.float32).reshape(-1, width) for r in records]
        return {name or key: torch.cat(parts) if parts else torch.empty(0, width),
                offsets: _offsets([len(p) for p in parts])}

    return layout


def sparse(indices: str, values: str | None = None, *, prefix: str = "") -> Layout:
    """Sparse rows (record[indices]: ints, ascending; record[values]: their floats) as CSR's three tensors:
    `<prefix>indices` (nnz,) int64 and `<prefix>values` (nnz,) float32, the records' entries one after the other,
    and `<prefix>offsets` (N + 1,) int64: record i's entries are offsets[i]:offsets[i + 1]. values=None:
    record[indices] is a dict {index: value} (keys possibly strings, as BGE-M3's lexical weights), written by
    ascending index."""
    def layout(records: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        rows = [sorted((int(k), float(v)) for k, v in r[indices].items()) if values is None
                else list(zip(r[indices], r[values])) for r in records]
        flat = [entry for row in rows for entry in row]
        return {f"{prefix}indices": torch.tensor([i for i, _ in flat], dtype=torch.int64),
                f"{prefix}values": torch.tensor([v for _, v in flat], dtype=torch.float32),
                f"{prefix}offsets": _offsets([len(row) for row in rows])}

    return layout


def tensor_layout(*layouts: Layout) -> Layout:
    """Several layouts' tensors in one file (their names must differ)."""
    def layout(records: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        for part in layouts:
            made = part(records)
            if clash := set(made) & set(out):
                raise ValueError(f"two layouts write the tensor(s) {sorted(clash)}")
            out.update(made)
        return out

    return layout


def _offsets(counts: list[int]) -> torch.Tensor:
    return torch.tensor([0, *counts], dtype=torch.int64).cumsum(0)


FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".tsv": "tsv",
           ".safetensors": "safetensors", ".html": "html"}
INPUT_FORMATS = ("jsonl", "csv", "tsv")  # what read_records reads; tsv: CSV's rules with a tab between fields
DELIMITERS = {"csv": ",", "tsv": "\t"}
# Suffixes of files, never of the directories a command writes (convert's DST, --ray's --output).
FILE_SUFFIXES = (*FORMATS, ".parquet", ".bin", ".ckpt", ".pt", ".pth", ".htm", ".txt")


def _suffixes(allowed: tuple[str, ...]) -> str:
    """The allowed formats as their first (usual) suffixes, e.g. ".jsonl or .csv"."""
    usual = {}
    for suffix, fmt in FORMATS.items():
        usual.setdefault(fmt, suffix)
    return " or ".join(usual[fmt] for fmt in usual if fmt in allowed)


def _format(path: Path, allowed: tuple[str, ...] = INPUT_FORMATS) -> str:
    fmt = FORMATS.get(path.suffix.lower())
    if fmt not in allowed:
        raise InputError(f"{path}: unknown format {path.suffix.lower()!r}; use {_suffixes(allowed)}")
    return fmt


def check_output(path: str | Path, *, formats: tuple[str, ...] | None, input: str | Path | None = None,
                 resume: bool = False, flag: str = "--output") -> str | None:
    """Refuse a destination the run could not write, before any model is loaded or row read: the one
    check of every command's output (cli.main makes it first; run_file again for library callers).

    formats: the file formats the command writes (FORMATS' values). The destination is then a file with
             one of their extensions, in an existing, writable directory; not a directory, not the input,
             and without resume not an existing non-empty .jsonl/.csv (a .safetensors or .html output is
             written whole and replaces the old one).
             None: the destination is a directory (made with its parents), not an existing file, not the
             input, and not named like a file (x.jsonl) unless it exists.
    Returns the file's format (None for a directory). Each error names the path and `flag`."""
    path = Path(path)
    where = f"{flag} {path}"
    if formats is None:
        if path.exists() and not path.is_dir():
            raise InputError(f"{where} exists and is not a directory; this command writes a directory there")
        if not path.exists() and path.suffix.lower() in FILE_SUFFIXES:
            raise InputError(f"{where} looks like a file name ({path.suffix}), but this command writes a directory "
                             f"there; name a directory")
        _check_parent(path, where, made=True)
        if input is not None and path.exists() and Path(input).exists() and os.path.samefile(path, input):
            raise InputError(f"{where} is the input; write to another directory")
        return None
    accepted = _suffixes(formats)
    if path.is_dir():
        raise InputError(f"{where} is a directory; {flag} names a {accepted} file")
    fmt = FORMATS.get(path.suffix.lower())
    if fmt not in formats:
        said = "has no extension" if not path.suffix else f"has an unknown format {path.suffix.lower()!r}"
        raise InputError(f"{where} {said}; name a {accepted} file (the extension picks the format)")
    _check_parent(path, where, made=False)
    if input is not None and path.exists() and Path(input).exists() and os.path.samefile(path, input):
        raise InputError(f"{where} is the input file; write to another file")
    if fmt == "safetensors" and resume:
        raise InputError(f"{where}: a .safetensors output is written whole at the end and cannot be resumed; "
                         f"use .jsonl to resume")
    if fmt in ("jsonl", "csv") and not resume and path.exists() and path.stat().st_size > 0:  # resumable ones
        raise InputError(f"{where} exists; pass --resume to continue it, or remove it")
    return fmt


def _check_parent(path: Path, where: str, *, made: bool) -> None:
    """The directory a destination goes in must exist, be a directory and be writable; for a destination
    made with its parents (`made`, a directory), its nearest existing ancestor."""
    parent = path.parent
    if not made and not parent.exists():
        raise InputError(f"{where}: the directory {parent} does not exist; create it first")
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"{where}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{where}: the directory {parent} is not writable")


def _not_utf8(data: bytes, error: UnicodeDecodeError, offset: int = 0) -> str:
    return f"not UTF-8 text (byte 0x{data[error.start]:02x} at byte {offset + error.start})"


_CONTROL_NAMES = {"\0": "NUL", "\t": "tab", "\r": "carriage return"}


def _json_problem(error: json.JSONDecodeError) -> str:
    """A JSON decoding error of one line, whole: where (the character column) and why."""
    reason = error.msg.removesuffix(" at")  # json's messages that point at a position end in "at"
    reason = reason[:1].lower() + reason[1:]
    if reason == "invalid control character":
        char = error.doc[error.pos]
        reason += f" (a raw {_CONTROL_NAMES.get(char, f'U+{ord(char):04X}')}; write it as \\u{ord(char):04x})"
    elif reason == "unterminated string starting":
        reason = "a string starts there and is never closed on this line (a raw newline inside it? write it as \\n)"
    return f"invalid JSON at column {error.colno}: {reason}"


def read_records(path: Path) -> tuple[list[tuple[int, dict]], list[tuple[int, str]], list[str]]:
    """(line, record) of each parsable row, (line, problem) of the others, and the field names the
    file has (CSV: its header; JSONL: the keys of its rows)."""
    data = path.read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):  # a byte-order mark (Excel's "CSV UTF-8")
        data = data[3:]
    records, problems, fields = [], [], {}
    fmt = _format(path)
    if fmt == "jsonl":
        offset = 0
        for line_no, raw in enumerate(data.split(b"\n"), start=1):  # only \n ends a row (not U+2028)
            start, offset = offset, offset + len(raw) + 1
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                problems.append((line_no, _not_utf8(raw, e, start)))
                continue
            except json.JSONDecodeError as e:
                problems.append((line_no, _json_problem(e)))
                continue
            if not isinstance(record, dict):
                problems.append((line_no, f"expected a JSON object, found {type(record).__name__}"))
                continue
            fields.update(dict.fromkeys(record))
            records.append((line_no, record))
        return records, problems, list(fields)
    text = data.decode("utf-8", errors="surrogateescape")  # bad bytes become U+DC80..U+DCFF, found per row
    # strict: a quote where none may be is an error, not text; a quoted field may span lines (RFC 4180, as
    # spreadsheets and pandas write a text with newlines), and one never closed is an error naming the line
    # it starts on, since every row after it would otherwise be swallowed into it
    # no field-size limit (the csv module's 128 KiB default would split a long quoted text into rows): the file
    # is read whole already, so a field is bounded by it
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=DELIMITERS[fmt], strict=True)
    rows = _csv_rows(reader, problems)
    header = next(rows, (1, None))[1] or []
    for line_no, values in rows:
        if not any(values):
            continue
        record = dict(zip(header, values))
        broken = [name for name, value in record.items() if _escaped(value)]
        nul = next((name for name, value in record.items() if "\0" in value), None)
        if broken:
            problems.append((line_no, f"field {broken[0]!r} is not UTF-8 text"))
        elif nul is not None:
            problems.append((line_no, f"field {nul!r} holds a NUL byte (a UTF-16 file? save it as UTF-8)"))
        elif len(values) != len(header):
            problems.append((line_no, f"{len(values)} values for {len(header)} columns ({', '.join(header)})"))
        else:
            records.append((line_no, record))
    return records, problems, header


def _csv_rows(reader, problems: list[tuple[int, str]]):
    """(line the row starts on, its values) of each row a csv reader parses; a row it cannot parse is a
    problem named by the line it starts on, and reading goes on after it."""
    while True:
        start = reader.line_num + 1
        try:
            values = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            if str(e) == "unexpected end of data":
                problems.append((start, f"a quoted field starts on this line and its quote is never closed: the "
                                        f"{reader.line_num - start} line(s) after it would have become part of it"))
            elif "expected after" in str(e):
                problems.append((start, f"not CSV ({e}: text after a quoted field's closing quote; a quote "
                                        f"inside a quoted field is written \"\")"))
            elif "NUL" in str(e):  # Python < 3.11's csv refuses NUL itself
                problems.append((start, "holds a NUL byte (a UTF-16 file? save it as UTF-8)"))
            else:
                problems.append((start, f"not CSV ({e})"))
            continue
        yield start, values


def _escaped(value: str) -> bool:
    return any("\udc80" <= ch <= "\udcff" for ch in value)


def read_rows(path: Path, job: Fields, *, id_field: str) -> tuple[list[Row], list[str]]:
    """(valid rows, problems) where each problem names its line number, in input order. A required
    field that no row has is one error listing the fields found. A row whose id (as text, as the
    output and --resume compare ids) an earlier valid row has is a problem naming that row's line."""
    records, problems, fields = read_records(path)
    for role, name in job.fields.items():
        if records and role not in job.optional and name not in fields:
            raise InputError(f"{path}: no row has the field {name!r}; fields found: "
                             f"{', '.join(map(repr, fields[:20])) or 'none'}. Name yours with {job.flags[role]}"
                             + _delimiter_hint(path, fields))
    rows, first_line = [], {}
    csv_file = _format(path) in DELIMITERS
    for line_no, record in records:
        values, bad = record_values(record, job, empty_is_missing=csv_file)
        if bad:
            problems.append((line_no, "; ".join(bad)))
            continue
        row_id = record.get(id_field)
        row_id = line_no if row_id is None else row_id  # a row without an id is named by its line number
        if str(row_id) in first_line:
            earlier, numbered = first_line[str(row_id)]
            problems.append((line_no, f"id {row_id!r} is also the id of line {earlier}"
                                      + (" (its line number: it has no id)" if numbered else "")
                                      + " (an id names one row of the output)"))
            continue
        first_line[str(row_id)] = (line_no, record.get(id_field) is None)
        rows.append(Row(row_id, line_no, values))
    return rows, [f"line {line_no}: {problem}" for line_no, problem in sorted(problems, key=lambda p: p[0])]


def _delimiter_hint(path: Path, header: list[str]) -> str:
    """A CSV (or TSV) whose header is one column holding another delimiter was written with that one: said so,
    with what to do (a semicolon is Excel's list separator where the decimal mark is a comma)."""
    fmt = _format(path)
    if fmt not in DELIMITERS or len(header) != 1:
        return ""
    names = {";": "semicolon", "\t": "tab", ",": "comma"}
    found = next((d for d in names if d != DELIMITERS[fmt] and d in header[0]), None)
    if found is None:
        return ""
    fix = {"\t": "name it .tsv", ",": "name it .csv"}.get(found, "save it with commas (or tabs, as .tsv)")
    return (f". Its header is one column holding a {names[found]}: the file looks {names[found]}-separated, and "
            f"minialign reads {path.suffix.lower()} as {names[DELIMITERS[fmt]]}-separated; {fix}")


def record_values(record: dict, job: Fields, *, empty_is_missing: bool = False) -> tuple[dict[str, str | None], list[str]]:
    """The job's values of one input record (role -> text), and its problems (each naming the field).
    An optional field (classify's pair) that the record lacks, or holds as a missing value (JSON null,
    pandas' None or NaN), or as "" where `empty_is_missing` (a CSV field: CSV has no null, and pandas writes a
    missing value as an empty field), is None: the row is a single text, as pairs[i] = None in Python."""
    values, bad = {}, []
    for role, name in job.fields.items():
        value = record.get(name, _MISSING)
        if role in job.optional and (value is _MISSING or value is None or value != value  # NaN
                                     or (empty_is_missing and value == "")):
            values[role] = None
        elif value is _MISSING:
            bad.append(f"field {name!r} is missing")
        elif problem := value_problem(value, null="null"):
            bad.append(f"field {name!r} {problem}")
        else:
            values[role] = value
    if not bad:
        bad = [f"field {job.fields[role]!r} {problem}" for role, problem in job.check(values)]
    return values, bad


def _listing(path: Path, problems: list[str]) -> str:
    shown = "\n".join(f"{path}: {p}" for p in problems[:SHOWN_PROBLEMS])
    more = len(problems) - SHOWN_PROBLEMS
    return shown + (f"\n... and {more} more" if more > 0 else "")


class ResultWriter:
    """Appends (id, record) rows; each row is written whole and flushed."""

    def __init__(self, path: Path, *, resume: bool, settings: dict[str, Any], columns: list[str] | None):
        self.path, self.columns = path, columns
        self.fmt = _format(path, ("jsonl", "csv") if columns is not None else ("jsonl",))
        self.done: list[str] = []
        self._complete: int | None = None  # bytes of the complete rows, when a partial one follows them (trim)
        if path.exists() and path.stat().st_size > 0:
            if not resume:
                raise InputError(f"{path} exists; pass --resume to continue it, or remove it")
            settings_record(settings_path(path), settings, output=path, begun=True)
            self.done = self._read_done()
        else:
            settings_record(settings_path(path), settings, output=path, begun=False)
        self.written = len(self.done)  # complete rows in the output: those found, then each one written
        self.file = open(path, "a", encoding="utf-8", newline="")
        if self.fmt == "csv" and path.stat().st_size == 0:
            self._write_csv(["id", *columns])

    def _read_done(self) -> list[str]:
        """Ids of the complete rows; a trailing partial record (an interrupted write) is cut off by `trim`, once
        the caller has checked that the output continues (nothing is changed before that)."""
        data = self.path.read_bytes()
        complete = data[:_complete_length(data, csv_quotes=self.fmt == "csv")]
        if len(complete) != len(data):
            self._complete = len(complete)
        try:
            text = complete.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InputError(f"{self.path}: {_not_utf8(complete, e)}; not a file minialign wrote, not resuming") from None
        if self.fmt == "csv":
            rows = list(csv.reader(io.StringIO(text, newline="")))
            header = ["id", *self.columns]
            if not rows or rows[0] != header or any(len(r) != len(header) for r in rows[1:]):
                raise InputError(f"{self.path}: not a file minialign wrote for this command (expected the "
                                 f"columns {','.join(header)}); not resuming")
            return [r[0] for r in rows[1:]]
        ids = []
        for line_no, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                ids.append(str(row["id"]))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                raise InputError(f"{self.path}: line {line_no} is not a row minialign wrote ({line[:80]!r}); "
                                 f"not resuming") from None
        return ids

    def trim(self) -> None:
        """Cut off a trailing partial record (an interrupted write) found on opening, before rows are appended."""
        if self._complete is not None:
            self.file.flush()
            with open(self.path, "r+b") as f:
                f.truncate(self._complete)
            self._complete = None

    def _write_line(self, text: str) -> None:
        self.file.write(text)
        self.file.flush()

    def _write_csv(self, values: list) -> None:
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerow(values)
        self._write_line(buffer.getvalue())

    def write(self, row: Row, record: dict[str, Any]) -> None:
        if self.fmt == "csv":
            self._write_csv([row.id, *(repr(v) if isinstance(v, float) else v for v in
                                       (record[c] for c in self.columns))])
        else:
            self._write_line(json.dumps({"id": row.id, **record}, ensure_ascii=False) + "\n")
        self.written += 1

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
    """Where a file output's settings record goes: beside it (a --ray output directory holds its own)."""
    return output.with_name(output.name + SETTINGS_SUFFIX)


def read_settings(record: Path) -> dict[str, Any]:
    """The settings a record holds. FileNotFoundError when there is none; InputError when it is not a
    record minialign wrote."""
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        data = None
    if isinstance(data, dict) and isinstance(data.get("settings"), dict):
        return data["settings"]
    if isinstance(data, dict) and "mapper" in data:  # a --ray output's record as written before: flat
        return data
    raise InputError(f"{record}: unreadable settings record")


def settings_record(record: Path, settings: dict[str, Any], *, output: Path, begun: bool) -> None:
    """The one record of the settings that made an output (the model, mode, dtype, fields, ...: what
    must match for a later run to continue it). When the output is new (not `begun`) the record is
    written, whole or not at all; when a run continues an output, the record is read and compared with
    `settings`: a missing or unreadable record, or any setting that differs, refuses the run with an
    InputError naming each difference with both values."""
    settings = json.loads(json.dumps(settings, default=str))  # as the record holds them (lists, strings)
    if not begun:
        staging = record.with_name(f".{record.name}.tmp")
        staging.write_text(json.dumps({"minialign_scores": 1, "settings": settings}, indent=1, sort_keys=True) + "\n",
                           encoding="utf-8")
        os.replace(staging, record)
        return
    try:
        recorded = read_settings(record)
    except FileNotFoundError:
        raise InputError(f"{output} has no record of the settings that made it ({record.name} is missing), so "
                         f"resuming could mix two metrics in one output; remove {output} to start over") from None
    except InputError as e:
        beside = "" if record.parent == output else f" and {record.name}"
        raise InputError(f"{e}; remove {output}{beside} to start over") from None
    differ = sorted(k for k in set(recorded) | set(settings) if recorded.get(k) != settings.get(k))
    if differ:
        raise InputError(f"refusing to resume {output}: it was made with other settings ("
                         + "; ".join(f"{k}: {recorded.get(k)!r} then, {settings.get(k)!r} now" for k in differ)
                         + "). Rerun with the same settings, or write to another --output")


def run_file(job: Job, input_path: Path, output_path: Path, *, id_field: str = "id", resume: bool = False,
             skip_invalid: bool = False, block_rows: int | None = None, progress: bool = True) -> int:
    """Run the job on every valid row of input_path into output_path; returns the rows done now."""
    input_path, output_path = Path(input_path), Path(output_path)
    fmt = check_output(output_path, formats=job.outputs, input=input_path, resume=resume)
    rows, problems = read_rows(input_path, job, id_field=id_field)
    _refuse(input_path, rows, problems, skip_invalid=skip_invalid)
    if problems:
        print(f"skipping {len(problems)} malformed row(s):\n{_listing(input_path, problems)}", file=sys.stderr)
    if not rows and not problems:
        warnings.warn(f"{input_path}: no rows; the output holds none", stacklevel=2)
    settings = {**job.settings, "fields": job.fields, "id_field": id_field}
    if fmt == "safetensors":
        return _run_to_tensors(job, rows, output_path, settings, block_rows, progress)
    writer = ResultWriter(output_path, resume=resume, settings=settings, columns=job.columns)
    try:
        done = writer.done
        if done:
            _check_continues(done, rows, input_path, output_path, skipped=len(problems))
            rows = rows[len(done):]
        writer.trim()
        for block, records in _blocks(job, rows, block_rows, progress):
            for row, record in zip(block, records):
                writer.write(row, record)
    except KeyboardInterrupt:  # Ctrl-C: the rows written so far are whole and flushed; --resume continues them
        raise Interrupted(output_path, writer.written) from None
    finally:
        writer.close()
    job.finish()
    return len(rows)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during run_file: `written` complete rows are in `output` (each written whole and flushed), and
    --resume continues after them. Still a KeyboardInterrupt for callers that stop on one."""

    def __init__(self, output: Path, written: int):
        super().__init__(output, written)
        self.output, self.written = output, written


def _check_continues(done: list[str], rows: list[Row], input_path: Path, output_path: Path, *, skipped: int) -> None:
    """--resume: the output must hold the first rows of this input (by id, in order); refused otherwise, before
    the output is touched."""
    valid = f" valid row(s) ({skipped} malformed ones skipped)" if skipped else " row(s)"
    if len(done) > len(rows):
        raise InputError(f"cannot resume: the output {output_path} has more rows ({len(done)}) than the input "
                         f"{input_path} ({len(rows)}{valid}); was it made from another input? The output is left "
                         f"as it is: give its input, or write to another --output")
    mismatch = next(i for i, (r, d) in enumerate(zip(rows, done)) if str(r.id) != d) \
        if [str(r.id) for r in rows[:len(done)]] != done else None
    if mismatch is not None:
        raise InputError(f"cannot resume: the output {output_path} does not hold the first {len(done)} rows of "
                         f"{input_path} (its row {mismatch + 1} has id {done[mismatch]!r}, the input's "
                         f"{rows[mismatch].id!r}); the output is left as it is: give its input, or write to another "
                         f"--output")


def validate_input(input_path: str | Path, fields: Fields, *, id_field: str = "id", skip_invalid: bool = False) -> None:
    """Every row of the input checked against `fields` before a model is loaded (cli.main calls it first):
    the same refusal run_file makes, raised before the wait. run_file checks again with the loaded
    runner's own checks."""
    input_path = Path(input_path)
    rows, problems = read_rows(input_path, fields, id_field=id_field)
    _refuse(input_path, rows, problems, skip_invalid=skip_invalid)


def _refuse(input_path: Path, rows: list[Row], problems: list[str], *, skip_invalid: bool) -> None:
    if problems and not skip_invalid:
        raise InputError(f"{len(problems)} malformed row(s), nothing done (--skip-invalid skips them):\n"
                         + _listing(input_path, problems))
    if problems and not rows:
        raise InputError(f"every row of {input_path} is malformed ({len(problems)}), nothing to do:\n"
                         + _listing(input_path, problems))


def _blocks(job: Job, rows: list[Row], block_rows: int | None, progress: bool):
    """(block, its records) for consecutive blocks of rows, with a progress bar over rows."""
    block_rows = block_rows or job.batch_size * 8
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(rows), unit="row", file=sys.stderr)
    try:
        for start in range(0, len(rows), block_rows):
            block = rows[start:start + block_rows]
            yield block, job.run(block)
            if bar is not None:
                bar.update(len(block))
    finally:  # also when interrupted: the bar's line ends before the command's own
        if bar is not None:
            bar.close()


def _run_to_tensors(job: Job, rows: list[Row], output_path: Path, settings: dict[str, Any],
                    block_rows: int | None, progress: bool) -> int:
    """Every record, made into the job's named tensors (Job.tensors), in a .safetensors file; the ids, the settings
    and the job's tensor_metadata in its metadata."""
    from minialign import convert

    records = [record for _, block in _blocks(job, rows, block_rows, progress) for record in block]
    metadata = {**job.tensor_metadata, "ids": json.dumps([r.id for r in rows], ensure_ascii=False),
                "settings": json.dumps(settings, ensure_ascii=False)}
    convert.write_safetensors(output_path, job.tensors(records), metadata=metadata)
    job.finish()
    return len(rows)
