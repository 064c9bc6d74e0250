"""Ray Data: score, embed (dense, sparse, multi-vector, BGE-M3), classify, ner, fill-mask, zero-shot and qa datasets
beyond one machine (the `ray` extra).

    import ray
    from minialign.apps.raydata import AlignScoreBatches

    ds = ray.data.read_json("pairs/")                       # rows with "id", "context", "claim"
    scored = ds.map_batches(AlignScoreBatches, fn_constructor_kwargs={"model": "AlignScore-base"},
                            compute=ray.data.ActorPoolStrategy(size=4), batch_size=256, num_gpus=1)

Each class loads its model once per actor (Ray constructs it once per actor) and maps a batch of rows
(Ray's default dict of columns, or a pandas DataFrame) to the same columns plus the results: the
records the file commands write (jobs.py), computed through the batching engine inside the batch.
Rows are validated as the file commands validate them; a batch with a malformed row raises an
InputError naming the row's id and field (Ray reports it and stops the dataset).

`run_sharded` is `minialign score|embed|classify|ner|zero-shot --ray`: the dataset is cut into shards by a stable
hash of each row's id, each shard is mapped and written on its own (to a temporary directory, renamed
when complete), so a rerun skips the shards already written. Unless told, it picks the number of
shards from the input's rows (`choose_shards`) and records it, so a rerun picks the same.
"""

from __future__ import annotations

import math
import os
import shutil
import time
import warnings
import zlib
from pathlib import Path
from typing import Any

from minialign.apps.files.formats import InputError
from minialign.apps.files.rows import Row, record_values
from minialign.apps.files.run import Job
from minialign.apps.files.settings import read_settings, settings_record
from minialign.apps.shards import MAX_SHARDS, SHARD_ROWS  # (the policy: shards.py)
from minialign.products.runner import LOAD_KEYWORDS

SETTINGS_FILE = "_minialign.json"  # in the output directory: what produced the shards
READERS = {".jsonl": "json", ".json": "json", ".ndjson": "json", ".csv": "csv", ".parquet": "parquet"}
WRITERS = {"parquet": "write_parquet", "jsonl": "write_json"}
# Reading, sharding and writing reserve no CPU: they are light, and tasks that wait for a CPU the model
# actors hold would never run (Ray Data reserves the actors' CPUs first; seen here: a run with actors on
# every CPU waited forever for its read task).
IO_TASK_CPUS = 0


def _null(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _plain(value):
    """A column value as Python: numpy scalars to Python scalars (strings stay strings)."""
    return value.item() if hasattr(value, "item") and not isinstance(value, str) else value


class JobBatches:
    """Maps batches through a Job (jobs.py). Subclasses build the runner and its job once per actor."""

    def __init__(self, job: Job, *, id_field: str = "id"):
        self.job, self.id_field = job, id_field

    def __call__(self, batch):
        frame = None if isinstance(batch, dict) else batch  # a pandas DataFrame: its missing values as None
        columns = ({name: list(batch[name]) for name in batch} if frame is None else
                   {name: [v if present else None for v, present in zip(frame[name], frame[name].notna())]
                    for name in frame.columns})
        size = len(next(iter(columns.values()))) if columns else 0
        optional = {self.job.fields[role] for role in self.job.optional}
        rows, problems = [], []
        for i in range(size):
            record = {name: _plain(values[i]) for name, values in columns.items()
                      if not (name in optional and _null(_plain(values[i])))}
            values, bad = record_values(record, self.job)
            row_id = record.get(self.id_field, i)
            if bad:
                problems.append(f"row {self.id_field}={row_id!r}: " + "; ".join(bad))
            rows.append(Row(row_id, i, values))
        if problems:
            more = f" (and {len(problems) - 20} more)" if len(problems) > 20 else ""
            raise InputError("malformed rows in a batch: " + " | ".join(problems[:20]) + more)
        records = self.job.run(rows) if rows else []
        results = {key: [r.get(key) for r in records] for key in (records[0] if records else [])}
        nested = set(self.job.nested)
        if frame is not None:
            return frame.assign(**{key: _column(values, pandas=True, nested=key in nested)
                                   for key, values in results.items()})
        out = dict(batch)
        for key, values in results.items():
            out[key] = _column(values, nested=key in nested)
        return out


def _column(values: list, *, pandas: bool = False, nested: bool = False):
    """A column of a record key's values. A dict per row (BGE-M3's lexical weights: each row its own keys, which
    Arrow would make one struct of every row's keys) is its JSON text. A list of objects per row (`nested`, Job.nested:
    ner's entities, the same keys in every object of a run) stays each row's list, Arrow's list of structs (an object
    array of the lists, for a numpy batch), empty lists too. Else, for a pandas batch, the values as they are; for a
    numpy batch: vectors (lists of floats, all one length) as a (rows, D) float32 array, Ray's tensor column; ragged
    values (lists of differing lengths: token vectors, sparse indices) as an object array of one float32 / int64
    array per row, Ray's variable-shaped tensor column; anything else as numpy makes it (scores, labels)."""
    import json

    import numpy as np

    if values and all(isinstance(v, dict) for v in values):
        texts = [json.dumps(v) for v in values]
        return texts if pandas else np.asarray(texts)
    if pandas:
        return values
    if nested:
        column = np.empty(len(values), dtype=object)
        for i, row in enumerate(values):  # one by one: numpy would try to make the rows one array
            column[i] = row
        return column
    if values and all(isinstance(v, list) for v in values):
        rows = [np.asarray(v) for v in values]
        rows = [r.astype(np.float32) if r.dtype.kind == "f" else r for r in rows]
        if len({r.shape for r in rows}) == 1 and rows[0].size:
            return np.stack(rows)
        column = np.empty(len(rows), dtype=object)
        for i, row in enumerate(rows):  # one by one: numpy would try to make the rows one array
            column[i] = row
        return column
    return np.asarray(values)


class ProductBatches(JobBatches):
    """Adds a product's results (its file job's records: apps/products.py) to rows with its inputs. The product is
    the class's `product` (one class per product, named as the table says: AlignScoreBatches, ...), or the
    `product` keyword. Options: the fields (<role>_field), the job's per-call options, and from_pretrained's
    keywords (the product's own and products/runner.Loading's); None means the default."""

    product: str | None = None

    def __init__(self, model: str | None = None, *, id_field: str = "id", product: str | None = None,
                 **options: Any):
        from minialign.apps.products import PRODUCTS

        entry = PRODUCTS[product or self.product]
        model = entry.model if model is None else model
        loading = {k: v for k, v in options.items() if k in LOAD_KEYWORDS or k in {o.name for o in entry.load}}
        job_keywords = {f"{i.role}_field" for i in entry.inputs} | {o.name for o in entry.options}
        if unknown := sorted(set(options) - set(loading) - job_keywords):
            raise TypeError(f"{type(self).__name__}: unexpected keyword(s) {unknown} for {entry.name}")
        runner = entry.load_runner(model, **loading)
        super().__init__(entry.make_job(runner, model=str(model), **options), id_field=id_field)


# One class per product of the table (its `ray` name), importable and pickled by reference as Ray needs; a test
# holds each to its table entry (tests/apps/test_raydata.py).

class AlignScoreBatches(ProductBatches):
    """Adds AlignScore's `score` to rows with context and claim (AlignScorer)."""

    product = "alignscore"


class MiniCheckBatches(ProductBatches):
    """Adds MiniCheck's `score`, P(supported), to rows with context and claim (MiniCheckScorer)."""

    product = "minicheck"


class FactCGBatches(ProductBatches):
    """Adds FactCG's `score`, P(supported), to rows with context and claim (FactCGScorer)."""

    product = "factcg"


class HHEMBatches(ProductBatches):
    """Adds HHEM-2.1-open's `score`, P(consistent), to rows with context and claim (HHEM)."""

    product = "hhem"


class LettuceBatches(ProductBatches):
    """Adds each row's hallucinated `spans` (or `tokens`) of its answer to rows with context, answer and an optional
    question (HallucinationDetector)."""

    product = "lettuce"


class EmbedBatches(ProductBatches):
    """Adds each row's `embedding` to rows with text (SentenceEncoder)."""

    product = "embed"


class ClassifyBatches(ProductBatches):
    """Adds the label and each label's score to rows with text and an optional pair (Classifier)."""

    product = "classify"


class SparseBatches(ProductBatches):
    """Adds each row's sparse (SPLADE) `indices` and `values` to rows with text (SparseEncoder)."""

    product = "sparse"


class MultiVectorBatches(ProductBatches):
    """Adds each row's token `vectors` to rows with text (MultiVectorEncoder)."""

    product = "multivector"


class M3Batches(ProductBatches):
    """Adds BGE-M3's dense, lexical and multi-vector outputs, as asked, to rows with text (M3Encoder)."""

    product = "m3"


class NERBatches(ProductBatches):
    """Adds each row's `entities` to rows with text (TokenClassifier)."""

    product = "ner"


class FillMaskBatches(ProductBatches):
    """Adds each row's `candidates`, a list per mask, to rows with text (FillMask)."""

    product = "fill-mask"


class QABatches(ProductBatches):
    """Adds each row's answer to rows with question and context (QuestionAnswerer)."""

    product = "qa"


class ZeroShotBatches(ProductBatches):
    """Adds `sequence`, `labels` and `scores` to rows with text (ZeroShotClassifier)."""

    product = "zero-shot"


CLASSES = (AlignScoreBatches, MiniCheckBatches, FactCGBatches, HHEMBatches, LettuceBatches, EmbedBatches, ClassifyBatches, SparseBatches, MultiVectorBatches,
           M3Batches, NERBatches, FillMaskBatches, QABatches, ZeroShotBatches)


def batches_class(product: str) -> type[ProductBatches]:
    """The map_batches class of a product of the table: this module's (CLASSES), or, for a product registered
    after it was written (products.register), a subclass named as its entry's `ray` says."""
    from minialign.apps.products import PRODUCTS

    entry = PRODUCTS[product]
    for cls in CLASSES:
        if cls.product == product:
            return cls

    class Batches(ProductBatches):
        __doc__ = f"Adds {entry.name}'s results to rows with {', '.join(i.role for i in entry.inputs)}."

    Batches.product = entry.name
    Batches.__name__ = Batches.__qualname__ = entry.ray or f"{entry.name}Batches"
    return Batches


def shard_of(row_id, shards: int) -> int:
    """A row's shard: a stable hash of its id (the same in every process and run, unlike hash())."""
    return zlib.crc32(str(_plain(row_id)).encode("utf-8")) % shards


def choose_shards(rows: int) -> int:
    """The number of shards for `rows` input rows: one per SHARD_ROWS, at least 1, at most MAX_SHARDS."""
    return max(1, min(MAX_SHARDS, math.ceil(rows / SHARD_ROWS)))


def _input_files(path: Path) -> tuple[list[Path], str]:
    """The input's files (a file, or a directory's files but hidden and _-prefixed ones) and their kind
    (READERS' values; the first file's suffix decides)."""
    files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith((".", "_"))) \
        if path.is_dir() else [path]
    if not files:
        raise InputError(f"{path}: no input files")
    kind = READERS.get(files[0].suffix.lower())
    if kind is None:
        raise InputError(f"{files[0]}: unknown format {files[0].suffix!r}; use {', '.join(READERS)}")
    return files, kind


def count_rows(path: Path) -> int:
    """The input's rows as choose_shards counts them, without Ray: Parquet's row counts; JSONL's lines;
    CSV's lines less each file's header (a newline inside a quoted CSV field counts as a row: near enough
    for choosing a number of shards, and the same on every run over the same input)."""
    files, kind = _input_files(path)
    if kind == "parquet":
        import pyarrow.parquet as pq

        return sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    rows = 0
    for f in files:
        lines, last = 0, b"\n"
        with open(f, "rb") as stream:
            while chunk := stream.read(1 << 24):
                lines, last = lines + chunk.count(b"\n"), chunk[-1:]
        lines += last != b"\n"  # a last line without its newline
        rows += max(0, lines - 1) if kind == "csv" else lines
    return rows


def read_dataset(path: Path):
    """A Ray dataset of a .jsonl / .csv / .parquet file, or a directory of them (the first file's
    suffix decides). CSV columns are read as text, as the file commands read them."""
    import ray

    files, kind = _input_files(path)
    if kind == "csv":
        import csv

        import pyarrow as pa
        import pyarrow.csv as pacsv

        with open(files[0], encoding="utf-8-sig", newline="") as f:
            header = next(csv.reader(f), [])
        types = {name: pa.string() for name in header}
        return ray.data.read_csv([str(f) for f in files], num_cpus=IO_TASK_CPUS,
                                 convert_options=pacsv.ConvertOptions(column_types=types, strings_can_be_null=False))
    return getattr(ray.data, f"read_{kind}")([str(f) for f in files], num_cpus=IO_TASK_CPUS)


def _shards(shards: int | None, input: Path, output: Path) -> tuple[int, str]:
    """(the number of shards, a line saying how it was chosen): `shards` if given; else the count the
    run that began `output` recorded; else choose_shards of the input's rows."""
    if shards is not None:
        if not isinstance(shards, int) or isinstance(shards, bool) or shards < 1:
            raise ValueError(f"shards must be a positive int, got {shards!r}")
        return shards, f"{shards} shard(s), as --shards says"
    recorded = _recorded(output).get("shards")
    if isinstance(recorded, int) and recorded >= 1:
        return recorded, f"{recorded} shard(s), as {output / SETTINGS_FILE} records (the run that began this output)"
    rows = count_rows(input)
    shards = choose_shards(rows)
    return shards, (f"{rows:,} row(s): {shards} shard(s), one per {SHARD_ROWS:,} rows (at most {MAX_SHARDS}). A shard "
                    f"is what a rerun resumes by, and each pays a pass over the input and its own actors' start "
                    f"(seconds each); --shards N sets the count")


ACTOR_RETRIES = 3  # restarts of a dead actor, and reruns of its batch, before the run fails


def run_sharded(mapper: type, options: dict[str, Any], *, input: Path, output: Path, id_field: str = "id",
                shards: int | None = None, output_format: str = "parquet", actors: int = 1, batch_rows: int = 256,
                cpus_per_actor: float | None = None, gpus_per_actor: float | None = None,
                settings: dict[str, Any] | None = None, echo=print) -> dict[str, int]:
    """Map `input` through `mapper(**options)` in `shards` shards written under `output`
    (shard-00000-of-00016/ ...: Ray's files of that shard); shards already there are skipped.
    shards=None: the count recorded in `output` by the run that began it, else choose_shards of the
    input's rows. A dead actor is restarted and its batch rerun, up to ACTOR_RETRIES times (Ray Data's
    default has no limit: a batch that kills every actor, out of memory, would be retried forever).
    Returns {"written": ..., "skipped": ...}. Ray must be initialised (ray.init) by the caller."""
    import ray

    if output_format not in WRITERS:
        raise ValueError(f"output format must be one of {tuple(WRITERS)}, got {output_format!r}")
    shards, how = _shards(shards, input, output)
    echo(how)
    record = {"mapper": mapper.__name__, "options": options, "id_field": id_field, "shards": shards,
              "format": output_format, **(settings or {})}
    output.mkdir(parents=True, exist_ok=True)
    begun = (output / SETTINGS_FILE).exists() or any(output.glob("shard-*"))
    settings_record(output / SETTINGS_FILE, record, output=output, begun=begun)
    finals = [output / f"shard-{shard:05d}-of-{shards:05d}" for shard in range(shards)]
    counts = {"written": 0, "skipped": sum(final.is_dir() for final in finals)}
    if counts["skipped"] == shards:  # nothing left to do: not even a read
        return counts
    dataset = read_dataset(input)
    names = dataset.schema().names
    if id_field not in names:
        raise InputError(f"{input}: no column {id_field!r} (--id-field); a sharded run needs an id per row to "
                         f"name its results and its shard. Columns: {', '.join(map(repr, names[:20]))}")
    for shard, final in enumerate(finals):
        if final.is_dir():
            continue
        start = time.perf_counter()
        partial = output / f".partial-{final.name}"
        shutil.rmtree(partial, ignore_errors=True)
        with warnings.catch_warnings():  # Ray's advice to filter by an expression: a CRC-32 of the id is none
            warnings.filterwarnings("ignore", message="Use 'expr' instead of 'fn'", category=UserWarning)
            part = dataset.filter(lambda row, s=shard: shard_of(row[id_field], shards) == s, num_cpus=IO_TASK_CPUS)
        with warnings.catch_warnings():  # Ray 2.60 takes actor retries only as (deprecated) remote args
            warnings.filterwarnings("ignore", message="`ray_remote_args` is deprecated")
            mapped = part.map_batches(mapper, fn_constructor_kwargs=options, batch_size=batch_rows,
                                      compute=ray.data.ActorPoolStrategy(size=actors), num_cpus=cpus_per_actor,
                                      num_gpus=gpus_per_actor, max_restarts=ACTOR_RETRIES,
                                      max_task_retries=ACTOR_RETRIES)
        getattr(mapped, WRITERS[output_format])(str(partial), ray_remote_args={"num_cpus": IO_TASK_CPUS})
        partial.mkdir(exist_ok=True)  # an empty shard is complete too
        os.replace(partial, final)
        counts["written"] += 1
        echo(f"shard {shard + 1}/{shards} written ({time.perf_counter() - start:.1f} s)")
    return counts


def _recorded(output: Path) -> dict:
    """The settings the run that began `output` recorded ({} if none or unreadable: settings_record says why)."""
    try:
        return read_settings(output / SETTINGS_FILE)
    except (OSError, InputError):
        return {}
