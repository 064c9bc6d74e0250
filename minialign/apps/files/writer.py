"""The writer of a file output (.jsonl, .csv): each row written whole and flushed, so an interrupted run leaves only
complete rows; on --resume it reads the ids of the rows already there and cuts off a trailing partial one."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from minialign.apps.files.formats import InputError, file_format
from minialign.apps.files.rows import Row, not_utf8
from minialign.apps.files.settings import settings_path, settings_record


class ResultWriter:
    """Appends (id, record) rows; each row is written whole and flushed."""

    def __init__(self, path: Path, *, resume: bool, settings: dict[str, Any], columns: list[str] | None):
        self.path, self.columns = path, columns
        self.fmt = file_format(path, ("jsonl", "csv") if columns is not None else ("jsonl",))
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
            raise InputError(f"{self.path}: {not_utf8(complete, e)}; not a file minialign wrote, not resuming") from None
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
