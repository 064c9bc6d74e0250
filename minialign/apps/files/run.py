"""Files in, files out: `minialign score | embed | classify ... --input ... --output ...`.

One engine for every command: a Job says which fields it reads (rows.Fields), how a block of rows becomes output
records, and what makes two runs comparable. Every input row is validated before any model work (rows.py). Results
are written block by block (a block is 8 x batch_size rows, at most MAX_BLOCK_ROWS), each row whole and flushed
(writer.py), so an interrupted run leaves only complete rows. `resume` continues after the last complete row, after
checking that the output holds the first rows of this input, made with the same settings (settings.py, recorded
beside the output when it is created). Outputs: .jsonl (any job), .csv (jobs with flat columns), .safetensors (jobs that say how their
records become named tensors, `Job.tensors`: written whole at the end, under a temporary name, so never half; the
layouts are tensors.py's). formats.check_output is the one check of where a command writes.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from minialign.apps.files.formats import InputError, check_output
from minialign.apps.files.rows import Fields, Row, problem_listing, read_rows, refuse_malformed
from minialign.apps.files.writer import ResultWriter


MAX_BLOCK_ROWS = 4096  # the most rows of a block, written and flushed together (8 x batch_size below it)

@dataclass(kw_only=True)
class Job(Fields):
    """What one command reads and writes: its Fields, and

    run:      a block of rows -> one output record (a dict, without the id) per row
    columns:  the record's keys in CSV order; None: no CSV output
    tensors:  for .safetensors output: the run's records, in order -> named tensors (tensors.py: `stacked`,
              `ragged`, `sparse`, or several of them: `tensor_layout`), beside `tensor_metadata` (strings)
    outputs:  the file formats it writes (formats.FORMATS' values; csv needs columns, safetensors tensors);
              formats.OUTPUT_FORMATS says the command line's, which it checks before loading a model
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
    batch_size: int = 32  # the runner's (on a GPU its token budget: a block is then MAX_BLOCK_ROWS rows)
    outputs: tuple[str, ...] | None = None  # None: jsonl, and csv with columns, safetensors with tensors
    nested: tuple[str, ...] = ()

    def __post_init__(self):
        if self.outputs is None:
            self.outputs = ("jsonl", *(("csv",) if self.columns is not None else ()),
                            *(("safetensors",) if self.tensors is not None else ()))
        if "csv" in self.outputs and self.columns is None or "safetensors" in self.outputs and self.tensors is None:
            raise ValueError(f"a job writing {self.outputs} needs columns (csv) and tensors (safetensors)")


def run_file(job: Job, input_path: Path, output_path: Path, *, id_field: str = "id", resume: bool = False,
             skip_invalid: bool = False, block_rows: int | None = None, progress: bool = True) -> int:
    """Run the job on every valid row of input_path into output_path; returns the rows done now."""
    input_path, output_path = Path(input_path), Path(output_path)
    fmt = check_output(output_path, formats=job.outputs, input=input_path, resume=resume)
    rows, problems = read_rows(input_path, job, id_field=id_field)
    refuse_malformed(input_path, rows, problems, skip_invalid=skip_invalid)
    if problems:
        print(f"skipping {len(problems)} malformed row(s):\n{problem_listing(input_path, problems)}", file=sys.stderr)
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


def _blocks(job: Job, rows: list[Row], block_rows: int | None, progress: bool):
    """(block, its records) for consecutive blocks of rows, with a progress bar over rows."""
    block_rows = block_rows or min(job.batch_size * 8, MAX_BLOCK_ROWS)
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
