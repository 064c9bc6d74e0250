"""Rows in: a .jsonl, .csv or .tsv file read into rows, every row validated before any model work (fields present,
strings, encodable text, and the job's own rule, e.g. a claim with a sentence), each problem named by its line.
An id names one row: a second row with the same id is a malformed row (--resume resumes by position and checks the
ids it finds there; an output keyed by a repeated id could not be joined back)."""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minialign.apps.files.formats import DELIMITERS, InputError, file_format
from minialign.text.validation import value_problem

SHOWN_PROBLEMS = 20  # malformed rows listed in an error; the rest are counted


_MISSING = object()  # a field the row does not have (null is a value: None)


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


def not_utf8(data: bytes, error: UnicodeDecodeError, offset: int = 0) -> str:
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


def parse_json(text: str) -> tuple[Any, str | None]:
    """(value, None) of a JSON text, or (None, why not). Beyond json's own errors: a value nested deeper than
    Python's recursion limit (json raises RecursionError) and an integer of more digits than
    sys.get_int_max_str_digits() allows (json raises ValueError), each a problem of the text, not a crash."""
    try:
        return json.loads(text), None
    except json.JSONDecodeError as e:
        return None, _json_problem(e)
    except RecursionError:
        return None, f"invalid JSON: nested deeper than {sys.getrecursionlimit()} arrays or objects"
    except ValueError:  # int("9" * 5000): "Exceeds the limit (4300 digits) for integer string conversion"
        return None, (f"invalid JSON: an integer of more than {sys.get_int_max_str_digits()} digits (Python's limit "
                      f"on integer text; write it as a string)")


def id_problem(value: Any, name: str) -> str | None:
    """Why a row's id (field `name`) cannot be written to an output, or None: any JSON value can, except text that
    is not encodable (a lone surrogate, from a JSON escape such as "\\ud800"), anywhere in it; the output is
    UTF-8 (files/writer.py, the service's JSON)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return f"field {name!r} (the id) holds a lone surrogate, which is not encodable text"
    return None


def read_records(path: Path) -> tuple[list[tuple[int, dict]], list[tuple[int, str]], list[str]]:
    """(line, record) of each parsable row, (line, problem) of the others, and the field names the
    file has (CSV: its header; JSONL: the keys of its rows)."""
    data = path.read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):  # a byte-order mark (Excel's "CSV UTF-8")
        data = data[3:]
    records, problems, fields = [], [], {}
    fmt = file_format(path)
    if fmt == "jsonl":
        offset = 0
        for line_no, raw in enumerate(data.split(b"\n"), start=1):  # only \n ends a row (not U+2028)
            start, offset = offset, offset + len(raw) + 1
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                problems.append((line_no, not_utf8(raw, e, start)))
                continue
            record, problem = parse_json(text)
            if problem is not None:
                problems.append((line_no, problem))
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
    header = next((values for _, values in rows if values), [])  # blank lines before the header are skipped
    if problems:  # the header itself is not CSV: every row would be read under the wrong names
        line_no, problem = problems[0]
        raise InputError(f"{path}: line {line_no} (the header): {problem}")
    if _escaped("".join(header)) or "\0" in "".join(header):
        raise InputError(f"{path}: the header is not UTF-8 text or holds a NUL byte (a UTF-16 file? save "
                         f"it as UTF-8)")
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
    for name in dict.fromkeys([*job.fields.values(), id_field]):
        if (count := fields.count(name)) > 1:  # CSV: dict(zip(header, values)) would keep the last one's value
            where = ", ".join(str(i + 1) for i, f in enumerate(fields) if f == name)
            raise InputError(f"{path}: the header names the column {name!r} {count} times (columns {where}); which "
                             f"one is meant? Rename the others")
    for role, name in job.fields.items():
        if records and role not in job.optional and name not in fields:
            raise InputError(f"{path}: no row has the field {name!r}; fields found: "
                             f"{', '.join(map(repr, fields[:20])) or 'none'}. Name yours with {job.flags[role]}"
                             + _delimiter_hint(path, fields))
    rows, first_line = [], {}
    csv_file = file_format(path) in DELIMITERS
    for line_no, record in records:
        values, bad = record_values(record, job, empty_is_missing=csv_file)
        if bad:
            problems.append((line_no, "; ".join(bad)))
            continue
        row_id = record.get(id_field)
        if problem := id_problem(row_id, id_field):
            problems.append((line_no, problem))
            continue
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
    fmt = file_format(path)
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


def problem_listing(path: Path, problems: list[str]) -> str:
    shown = "\n".join(f"{path}: {p}" for p in problems[:SHOWN_PROBLEMS])
    more = len(problems) - SHOWN_PROBLEMS
    return shown + (f"\n... and {more} more" if more > 0 else "")


def validate_input(input_path: str | Path, fields: Fields, *, id_field: str = "id", skip_invalid: bool = False) -> None:
    """Every row of the input checked against `fields` before a model is loaded (cli.main calls it first):
    the same refusal run_file makes, raised before the wait. run_file checks again with the loaded
    runner's own checks."""
    input_path = Path(input_path)
    rows, problems = read_rows(input_path, fields, id_field=id_field)
    refuse_malformed(input_path, rows, problems, skip_invalid=skip_invalid)


def refuse_malformed(input_path: Path, rows: list[Row], problems: list[str], *, skip_invalid: bool) -> None:
    if problems and not skip_invalid:
        raise InputError(f"{len(problems)} malformed row(s), nothing done (--skip-invalid skips them):\n"
                         + problem_listing(input_path, problems))
    if problems and not rows:
        raise InputError(f"every row of {input_path} is malformed ({len(problems)}), nothing to do:\n"
                         + problem_listing(input_path, problems))
