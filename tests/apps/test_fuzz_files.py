"""apps/files/ (rows.py, run.py, writer.py) under property-based tests (hypothesis): any bytes as a .jsonl, .csv or
.tsv input are read without an uncaught exception; every valid row is read once, in order, with its values, and
every invalid one is named by its line and field; a run interrupted anywhere and resumed writes every row once, in
order (none merged, none dropped). Bounded (max_examples, a generous deadline) and derandomized, so CI is
deterministic and the file stays a few seconds."""

import csv
import io
import json
import re
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from minialign.apps.files.formats import InputError  # noqa: E402
from minialign.apps.files.rows import Fields, read_records, read_rows  # noqa: E402
from minialign.apps.files.run import Interrupted, Job, run_file  # noqa: E402

BOUNDED = settings(max_examples=150, deadline=timedelta(seconds=5), derandomize=True,
                   suppress_health_check=[HealthCheck.too_slow])
FIELDS = Fields(fields={"text": "text", "pair": "pair"}, flags={"text": "--text-field", "pair": "--pair-field"},
                optional=("pair",))


def _file(data: bytes, suffix: str) -> Path:
    directory = Path(tempfile.mkdtemp(prefix="fuzz"))
    path = directory / f"in{suffix}"
    path.write_bytes(data)
    return path


# text the tokenizer takes (no lone surrogates), with what breaks naive readers: quotes, delimiters, newlines (\n,
# \r, \r\n, U+2028), a BOM inside, tabs, NUL (valid in JSON, a problem in CSV), non-ASCII
_ALPHABET = st.sampled_from(list('ab ,;"\'\t\n\r\u2028\ufeff\\{}[]é東😀') + ["\r\n"])
TEXT = st.lists(st.one_of(_ALPHABET, st.characters(blacklist_categories=("Cs",))), max_size=12).map("".join)
NUL_FREE = TEXT.map(lambda t: t.replace("\0", ""))


@BOUNDED
@given(data=st.one_of(st.binary(max_size=400),
                      st.lists(st.sampled_from([b"{", b"}", b"[", b"]", b'"', b",", b"\t", b"\n", b"\r", b"\0",
                                                b"\xef\xbb\xbf", b"\xff", b"\xed\xa0\x80", b'"text"', b'"id"', b":",
                                                b"1", b"9" * 5000, b"[" * 3000, b"null", b'"\\ud800"', b"a"]),
                               max_size=40).map(b"".join)),
       suffix=st.sampled_from([".jsonl", ".csv", ".tsv"]))
def test_any_bytes_are_read_or_refused_by_name(data, suffix):
    """Whatever the bytes: rows and problems, or an InputError naming the file; never another exception. Each
    problem names a line of the file; each row read has a line, string values and an id no other row has."""
    path = _file(data, suffix)
    lines = len(re.findall(rb"\r\n|\r|\n", data)) + 1
    try:
        records, problems, _ = read_records(path)
        rows, listed = read_rows(path, FIELDS, id_field="id")
    except InputError as e:
        assert str(path) in str(e)
        return
    assert all(1 <= line <= lines for line, _ in records + problems)
    assert [r.line for r in rows] == sorted(r.line for r in rows)
    assert len({str(r.id) for r in rows}) == len(rows)
    for row in rows:
        assert isinstance(row.values["text"], str)
        row.values["text"].encode("utf-8")  # encodable text
    assert all(re.match(r"line \d+: ", p) for p in listed)


# -- JSONL: what is written is what is read --------------------------------------------------------------------

BAD_VALUES = {"null": None, "number": 3, "list": ["a"], "surrogate": "a\ud800b"}
JSONL_ROW = st.fixed_dictionaries({
    "id": st.one_of(st.none(), st.integers(0, 6), st.sampled_from(["1", "x", "é", "\u2028", "7", "\ud800"])),
    "text": st.one_of(TEXT, st.sampled_from(["missing", *BAD_VALUES]).map(lambda k: ("bad", k))),
    "pair": st.one_of(st.none(), TEXT, st.just(("bad", "number"))),
    "garbage": st.sampled_from([None, (b"not json", "invalid JSON"), (b"[1, 2]", "expected a JSON object"),
                                (b'{"text": "x"', "invalid JSON"), (b"\xff\xfe", "not UTF-8"),
                                (b"[" * 2000, "nested deeper"), (b'{"text": ' + b"1" * 5000 + b"}", "digits")])})


def _expected(specs: list[dict], lines: list[int], *, csv_ids: bool = False) -> tuple[list, dict[int, str]]:
    """The rule of read_rows, by hand: (line, id, values) of each valid row, and line -> the field (or word) its
    problem must name."""
    rows, problems, first = [], {}, set()
    for spec, line in zip(specs, lines):
        if spec.get("problem"):
            problems[line] = spec["problem"]
            continue
        row_id = line if spec["id"] is None else spec["id"]
        if str(row_id) in first:
            problems[line] = "also the id of line"
            continue
        first.add(str(row_id))
        rows.append((line, row_id, {"text": spec["text"], "pair": spec["pair"] or None if csv_ids else spec["pair"]}))
    return rows, problems


@BOUNDED
@given(specs=st.lists(JSONL_ROW, max_size=12), bom=st.booleans(), blank=st.sampled_from(["", "\n", "  \r\n"]))
def test_jsonl_rows_read_once_in_order_with_their_values(specs, bom, blank):
    out, lines, line, shaped = [b"\xef\xbb\xbf" if bom else b""], [], 1, []
    for spec in specs:
        out.append(blank.encode())
        line += blank.count("\n")
        if spec["garbage"] is not None:  # a line that is not a JSON object: named by its line
            out.append(spec["garbage"][0] + b"\n")
            lines.append(line)
            shaped.append({"problem": spec["garbage"][1]})
            line += 1
        record = {} if spec["id"] is None else {"id": spec["id"]}
        problem = None
        if isinstance(spec["text"], tuple):
            if spec["text"][1] != "missing":
                record["text"] = BAD_VALUES[spec["text"][1]]
            problem = "'text'"
        else:
            record["text"] = spec["text"]
        if isinstance(spec["pair"], tuple):
            record["pair"], problem = 3, problem or "'pair'"
        elif spec["pair"] is not None:
            record["pair"] = spec["pair"]
        if problem is None and spec["id"] == "\ud800":  # an id no output can hold
            problem = "'id' (the id) holds a lone surrogate"
        out.append(json.dumps(record).encode() + b"\n")  # ensure_ascii: a lone surrogate stays an escape
        lines.append(line)
        shaped.append({**spec, "problem": problem})
        line += 1
    path = _file(b"".join(out), ".jsonl")
    if not any(isinstance(s.get("text"), str) for s in shaped):
        try:
            rows, problems = read_rows(path, FIELDS, id_field="id")
        except InputError as e:  # no row has the field: one error naming it
            assert "'text'" in str(e)
            return
    else:
        rows, problems = read_rows(path, FIELDS, id_field="id")
    expected_rows, expected_problems = _expected(shaped, lines)
    assert [(r.line, r.id, r.values) for r in rows] == expected_rows
    assert [int(p.split(":")[0].removeprefix("line ")) for p in problems] == sorted(expected_problems)
    for p in problems:
        assert expected_problems[int(p.split(":")[0].removeprefix("line "))] in p


# -- CSV and TSV: quoted fields over lines, ragged rows, bytes that are not UTF-8 --------------------------------

CSV_ROW = st.fixed_dictionaries({
    "id": st.sampled_from(["1", "2", "x", "é", "a,b", 'q"q', "l\nl", "7"]),
    "text": NUL_FREE, "pair": NUL_FREE,
    "fault": st.sampled_from([None, None, None, "ragged", "short", "bytes", "nul"])})


@BOUNDED
@given(specs=st.lists(CSV_ROW, max_size=12), suffix=st.sampled_from([".csv", ".tsv"]), bom=st.booleans(),
       quoting=st.sampled_from([csv.QUOTE_MINIMAL, csv.QUOTE_ALL]), ending=st.sampled_from(["\n", "\r\n"]))
def test_csv_rows_read_once_in_order_with_their_values(specs, suffix, bom, quoting, ending):
    delimiter = "," if suffix == ".csv" else "\t"

    def line_of(values) -> bytes:
        buffer = io.StringIO()
        # "\r\n" as the writer's terminator, so that it quotes a field holding either (with "\n" alone it leaves a
        # "\r" bare: a line break), then the row's own ending
        csv.writer(buffer, delimiter=delimiter, quoting=quoting, lineterminator="\r\n").writerow(values)
        return (buffer.getvalue().removesuffix("\r\n") + ending).encode("utf-8")

    chunks, shaped, lines = [b"\xef\xbb\xbf" if bom else b"", line_of(["id", "text", "pair"])], [], []
    for spec in specs:
        values = [spec["id"], spec["text"], spec["pair"]]
        problem = {"ragged": "3 columns", "short": "2 values", "bytes": "'text' is not UTF-8",
                   "nul": "'text' holds a NUL"}.get(spec["fault"])
        if spec["fault"] == "ragged":
            values.append("extra")
            problem = "4 values for 3 columns"
        elif spec["fault"] == "short":
            values = values[:2]
        elif spec["fault"] == "nul":
            values[1] += "\0"
        raw = line_of(values)
        if spec["fault"] == "bytes":  # a Latin-1 byte inside the text
            raw = line_of([spec["id"], "BYTE" + spec["text"], spec["pair"]]).replace(b"BYTE", b"\xe9", 1)
        if not any(values):
            continue
        text_before = b"".join(chunks).decode("utf-8", errors="surrogateescape")
        lines.append(len(re.findall(r"\r\n|\r|\n", text_before)) + 1)
        chunks.append(raw)
        shaped.append({"id": spec["id"], "text": spec["text"], "pair": spec["pair"], "problem": problem})
    path = _file(b"".join(chunks), suffix)
    rows, problems = read_rows(path, FIELDS, id_field="id")
    expected_rows, expected_problems = _expected(shaped, lines, csv_ids=True)
    assert [(r.line, r.id, r.values) for r in rows] == expected_rows
    assert [int(p.split(":")[0].removeprefix("line ")) for p in problems] == sorted(expected_problems)
    for p in problems:
        assert expected_problems[int(p.split(":")[0].removeprefix("line "))] in p


@BOUNDED
@given(header=st.sampled_from([b'id,"te"xt,pair', b'id,"text', b"id,text,text", b"id,pair,id,text"]),
       rows=st.lists(st.sampled_from([b"1,a,b", b"2,c,d", b'3,"e', b""]), max_size=4))
def test_csv_header_that_cannot_name_the_columns_is_refused(header, rows):
    """A header that is not CSV, or names a column the job reads twice, is one InputError naming the file and
    the header: never a data row read as the header, never one value of two kept silently."""
    path = _file(b"\n".join([header, *rows]) + b"\n", ".csv")
    with pytest.raises(InputError, match="header") as error:
        read_rows(path, FIELDS, id_field="id")
    assert str(path) in str(error.value)


# -- resume: interrupted anywhere, continued, every row once ----------------------------------------------------

class _Stop(Exception):
    pass


def _job(stop_after: int | None, *, columns):
    """A job whose record is the row's text length and its pair (no model); Ctrl-C after `stop_after` blocks."""
    calls = []

    def run(block):
        if stop_after is not None and len(calls) == stop_after:
            raise KeyboardInterrupt
        calls.append(len(block))
        return [{"n": len(r.values["text"]), "pair": r.values["pair"]} for r in block]

    return Job(fields=FIELDS.fields, flags=FIELDS.flags, optional=FIELDS.optional, run=run,
               settings={"model": "fuzz"}, columns=columns)


def _output_ids(path: Path) -> list[str]:
    if path.suffix == ".csv":
        with open(path, newline="", encoding="utf-8") as f:
            return [r["id"] for r in csv.DictReader(f)]
    return [str(json.loads(line)["id"]) for line in path.read_text(encoding="utf-8").split("\n") if line]


@settings(BOUNDED, max_examples=80)
@given(texts=st.lists(st.tuples(st.sampled_from(["1", "x", "é", "a,b", 'q"q', "l\nl", "\u2028", "7", "z"]), NUL_FREE),
                      min_size=1, max_size=10, unique_by=lambda t: t[0]),
       out_suffix=st.sampled_from([".jsonl", ".csv"]), block_rows=st.integers(1, 3), stop_after=st.integers(0, 4),
       partial=st.integers(0, 40))
def test_interrupted_run_resumes_without_merging_or_dropping_rows(texts, out_suffix, block_rows, stop_after, partial):
    directory = Path(tempfile.mkdtemp(prefix="fuzz"))
    source, output = directory / "in.jsonl", directory / f"out{out_suffix}"
    source.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in texts), encoding="utf-8")
    columns = ["n", "pair"] if out_suffix == ".csv" else None
    try:
        run_file(_job(stop_after, columns=columns), source, output, block_rows=block_rows, progress=False)
    except Interrupted:
        pass
    full = directory / f"full{out_suffix}"
    run_file(_job(None, columns=columns), source, full, progress=False)
    whole = full.read_bytes()
    done = output.read_bytes()
    assert whole.startswith(done)  # what was written before the stop is whole rows, the same bytes
    if len(done) < len(whole):  # a write cut short: part of the next row, then resumed
        with open(output, "ab") as f:
            f.write(whole[len(done):len(done) + partial % (len(whole) - len(done))])
    run_file(_job(None, columns=columns), source, output, resume=True, block_rows=block_rows, progress=False)
    assert _output_ids(output) == [i for i, _ in texts]
    assert output.read_bytes() == whole
