"""Which files the commands read and write, and where they may write them, declared without torch: the command
line checks its --output here first (`check_output`, the one check of where a command writes, made before any model
is loaded or row read) and builds its parser from the product table (apps/products.py), which reads OUTPUT_FORMATS."""

from __future__ import annotations

import os
from pathlib import Path


class InputError(ValueError):
    """Malformed input or output files, named with the line."""


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


def file_format(path: Path, allowed: tuple[str, ...] = INPUT_FORMATS) -> str:
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


# What each command writes (FORMATS' values); each job declares it (jobs.py).

# A record holding a list of objects per row (ner's entities) is .jsonl only: a CSV cell would hold JSON text, and no
# tensor layout fits it.
OUTPUT_FORMATS = {"score": ("jsonl", "csv"), "embed": ("jsonl", "safetensors"), "classify": ("jsonl", "csv"),
                  "ner": ("jsonl",)}
OUTPUT_FORMATS["qa"] = ("jsonl", "csv")  # csv with --top-k 1 only (qa_job: a list of answers per row is .jsonl only)
# zero-shot's record is the pipeline's dict, a ranking: the candidate labels best first and their scores, two lists
# per row, so .jsonl only, as ner. A CSV row could hold them only as JSON text in a cell, or as columns whose meaning
# changes from row to row (label_1, score_1, ...: each row's own order), or as one score column per candidate label
# (classify's layout), which exists only where every row has the same labels, not with a row field of labels. The
# best label and its score alone would drop the rest of the ranking, and with multi_label the other labels that hold.
OUTPUT_FORMATS["zero-shot"] = ("jsonl",)
# fill-mask: a list of candidates per mask, whatever the row's number of masks (a regular record)
OUTPUT_FORMATS["fill-mask"] = ("jsonl",)
