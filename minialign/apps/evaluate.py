"""`minialign evaluate`: a grounding method scored on the benchmark files a user has, with the metrics and the
threshold rule its authors report.

  LLM-AggreFact  a .jsonl, .csv or .parquet (pyarrow) file of rows with doc, claim, label (1 supported, 0 not) and
                 dataset (lytang/LLM-AggreFact's columns, Liyan06/MiniCheck README); the report is the balanced accuracy
                 per dataset and their mean, as MiniCheck's benchmark_evaluation_demo.ipynb computes them
                 (sklearn's balanced_accuracy_score per `df.dataset.unique()`, then the plain average)
  RAGTruth       a directory holding response.jsonl and source_info.jsonl (ParticleMedia/RAGTruth's dataset/); a
                 response is hallucinated when it has a labelled span. The report: example-level precision, recall
                 and F1 of the hallucinated class (and the balanced accuracy), per task type and overall; for a span
                 detector also the character-level precision, recall and F1 of lettucedetect's
                 models/evaluator.py evaluate_detector_char_level

A method is one entry of METHODS: its runner, what it gives (a score per (document, claim), or spans of an answer)
and its threshold rule. A score method calls a claim supported when its score is above the threshold (MiniCheck's
minicheck.py MiniCheck.score: `1 if prob > 0.5`); `--threshold` sets another, and `--dev FILE` tunes one per
dataset on a dev file of the same columns, as AggreFact tunes the metrics it compares (choose_best_threshold: the
percentiles 0, 0.2, ..., 99.8 of the dev scores, the last best balanced accuracy kept; Tang et al. 2023, the rule
LLM-AggreFact's baselines inherit).

Rows are read and checked before any model loads: a bad row is an error naming its file, line and field; every
row is scored once, in file order, none dropped and none merged (a duplicate response id or source id is refused).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import pkgutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCORES, SPANS = "scores", "spans"  # what a method gives: P(supported) per pair, or hallucinated spans of an answer
AGGREFACT_FIELDS = ("doc", "claim", "label", "dataset")
RAGTRUTH_FILES = ("response.jsonl", "source_info.jsonl")  # lettucedetect preprocess_ragtruth.py load_data
TASK_TYPES = ("QA", "Summary", "Data2txt")
SPLITS = ("test", "train", "all")
SPLIT = "test"  # the split lettucedetect and RAGTruth report


class DataError(ValueError):
    """A benchmark file that cannot be read as its format: the message names the file, the line and the field."""


# -- the methods -------------------------------------------------------------------------------------------------

def score_pairs(runner, documents: list[str], claims: list[str], *, progress: bool = False) -> list[float]:
    """A PairScorer's P(supported) per (document, claim): AlignScorer.score, MiniCheckScorer.score."""
    return list(runner.score(documents, claims, progress=progress))


def predict_spans(runner, prompts: list[str], answers: list[str], *, progress: bool = False) -> list[list[dict]]:
    """A span detector's hallucinated spans per (prompt, answer): HallucinationDetector.predict_prompt_batch, the
    call lettucedetect's evaluator makes (evaluate_detector_char_level: predict_prompt(prompt, answer,
    output_format="spans"))."""
    return runner.predict_prompt_batch(prompts, answers, "spans", progress=progress)


@dataclass(frozen=True)
class Method:
    """One grounding method: `runner` its class's import path ("module:Name", so that the parser imports no torch),
    loaded by from_pretrained(model, **keywords); `kind` SCORES or SPANS; `call` (runner, texts, texts) -> its
    results (score_pairs, predict_spans); `threshold` and `rule`: a score method's default threshold and where it
    comes from (SPANS: a response with a span is hallucinated)."""

    name: str
    runner: str
    kind: str
    rule: str
    threshold: float | None = None
    model: str | None = None
    call: Callable[..., list] = field(default=score_pairs)

    def load(self, model: str | None, **keywords: Any):
        if model is None and self.model is None:
            raise ValueError(f"evaluate --method {self.name}: --model is required")
        given = {k: v for k, v in keywords.items() if v is not None}
        return pkgutil.resolve_name(self.runner).from_pretrained(self.model if model is None else model, **given)


METHODS: dict[str, Method] = {}


def register(method: Method) -> Method:
    METHODS[method.name] = method
    return method


register(Method(
    "minicheck", "minialign.products.minicheck:MiniCheckScorer", SCORES, threshold=0.5,
    rule="0.5, fixed: MiniCheck's own (minicheck.py MiniCheck.score `1 if prob > 0.5`; the LLM-AggreFact "
         "leaderboard's MiniCheck rows)"))
register(Method(
    "alignscore", "minialign.products.alignscore:AlignScorer", SCORES, threshold=0.5,
    rule="0.5 by default; AlignScore's and AggreFact's comparisons tune it per dataset on a dev split: "
         "--dev FILE does that (choose_best_threshold)"))
register(Method(
    "factcg", "minialign.products.factcg:FactCGScorer", SCORES, threshold=0.5,
    rule="0.5, fixed: FactCG's own (derenlei/FactCG benchmark.py get_threshold \"fixed\", run_testset `p > 0.5`)"))
register(Method(
    "hhem", "minialign.products.hhem:HHEM", SCORES, threshold=0.5,
    rule="0.5: HHEM-2.1-open's model card reads a score as 0 hallucinated ... 1 consistent, halfway the cut"))
register(Method(
    "lettuce", "minialign.products.lettuce:HallucinationDetector", SPANS, call=predict_spans,
    rule="a response with a predicted span is hallucinated (lettucedetect evaluate_detector_example_level)"))


# -- the rows ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Claim:
    """One LLM-AggreFact row: where it is (line: the file's line, a CSV row's first line, a parquet row's number
    from 1), its texts, its label (1 supported) and its dataset."""

    line: int
    doc: str
    claim: str
    label: int
    dataset: str


@dataclass(frozen=True)
class Response:
    """One RAGTruth response with its source: the gold spans (start, end) and the texts each method reads."""

    line: int
    id: str
    task_type: str
    split: str
    response: str
    spans: tuple[tuple[int, int], ...]
    prompt: str  # source_info.jsonl's prompt: lettucedetect's sample prompt (preprocess_ragtruth.py create_sample)
    document: str  # the evidence alone, a score method's document (source_document)

    @property
    def hallucinated(self) -> int:
        return int(bool(self.spans))


def _records(path: Path) -> list[tuple[int, Any]]:
    """(line, record) of a .jsonl, .csv or .parquet file, in file order (a UTF-8 byte-order mark, as spreadsheets
    write one, is skipped)."""
    suffix = path.suffix.lower()
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    if suffix in (".jsonl", ".ndjson"):
        out = []
        with path.open(encoding="utf-8-sig") as f:
            for n, text in enumerate(f, 1):
                if not text.strip():
                    continue
                try:
                    out.append((n, json.loads(text)))
                except json.JSONDecodeError as e:
                    raise DataError(f"{path}, line {n}: not JSON ({e.msg}, column {e.colno})") from None
        return out
    if suffix == ".csv":
        with path.open(encoding="utf-8-sig", newline="") as f:
            reader = csv.DictReader(f)
            out, start = [], 2
            for row in reader:
                out.append((start, row))
                start = reader.line_num + 1
            return out
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise DataError(f"{path}: reading .parquet needs pyarrow (pip install pyarrow)") from None
        return list(enumerate(pq.read_table(path).to_pylist(), 1))
    raise DataError(f"{path}: unknown format {suffix or '(no extension)'!r}; name a .jsonl, .csv or .parquet file")


def _where(path: Path, line: int, name: str | None = None) -> str:
    return f"{path}, {'row' if path.suffix.lower() == '.parquet' else 'line'} {line}" + (
        f": field {name!r}" if name else "")


def _text(path: Path, line: int, record: dict, name: str, *, blank: bool = True) -> str:
    from minialign.text.validation import value_problem

    if name not in record:
        raise DataError(f"{_where(path, line, name)}: missing")
    value = record[name]
    if problem := value_problem(value, null="null"):
        raise DataError(f"{_where(path, line, name)}: {problem}")
    if not blank and not value.strip():
        raise DataError(f"{_where(path, line, name)}: is blank")
    return value


def read_aggrefact(path: str | Path) -> list[Claim]:
    """An LLM-AggreFact file's rows (doc, claim, label 0 / 1, dataset), checked; a DataError names the first bad
    one. A CSV label is the text 0 or 1; a JSON / parquet one the number (true / false taken too)."""
    path = Path(path)
    out = []
    for line, record in _records(path):
        if not isinstance(record, dict):
            raise DataError(f"{_where(path, line)}: a row must be an object with {', '.join(AGGREFACT_FIELDS)}")
        doc = _text(path, line, record, "doc")
        claim = _text(path, line, record, "claim", blank=False)
        dataset = _text(path, line, record, "dataset", blank=False)
        if "label" not in record:
            raise DataError(f"{_where(path, line, 'label')}: missing")
        label = record["label"]
        label = {"0": 0, "1": 1}.get(label.strip(), label) if isinstance(label, str) else label
        if label not in (0, 1) or isinstance(label, float) and not label.is_integer():
            raise DataError(f"{_where(path, line, 'label')}: must be 0 (not supported) or 1 (supported), "
                            f"got {record['label']!r}")
        out.append(Claim(line, doc, claim, int(label), dataset))
    if not out:
        raise DataError(f"{path}: no rows")
    return out


def source_document(task_type: str, info) -> str:
    """A RAGTruth source's evidence as one text, a score method's document: QA its passages (source_info's
    "passages"), Summary the text to summarise (source_info itself), Data2txt the structured data as JSON."""
    if task_type == "QA":
        passages = info["passages"]
        return passages if isinstance(passages, str) else "\n".join(passages)
    if task_type == "Summary":
        return info
    return json.dumps(info, ensure_ascii=False)


def _source(path: Path, line: int, record) -> tuple[str, dict]:
    if not isinstance(record, dict):
        raise DataError(f"{_where(path, line)}: a row must be an object")
    sid = _id(path, line, record, "source_id")
    task = _text(path, line, record, "task_type")
    if task not in TASK_TYPES:
        raise DataError(f"{_where(path, line, 'task_type')}: must be one of {TASK_TYPES}, got {task!r}")
    prompt = _text(path, line, record, "prompt", blank=False)
    if "source_info" not in record:
        raise DataError(f"{_where(path, line, 'source_info')}: missing")
    info = record["source_info"]
    shape = {"QA": dict, "Summary": str, "Data2txt": dict}[task]
    if not isinstance(info, shape):
        raise DataError(f"{_where(path, line, 'source_info')}: a {task} source's is a "
                        f"{'string' if shape is str else 'JSON object'}, got {type(info).__name__}")
    if task == "QA":
        passages = info.get("passages")
        if not isinstance(passages, str) and not (isinstance(passages, list)
                                                  and all(isinstance(p, str) for p in passages)):
            raise DataError(f"{_where(path, line, 'source_info.passages')}: a QA source needs its passages as a "
                            f"string (or a list of strings), got {type(passages).__name__}")
    return sid, {"task_type": task, "prompt": prompt, "document": source_document(task, info)}


def _id(path: Path, line: int, record: dict, name: str) -> str:
    value = record.get(name)
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataError(f"{_where(path, line, name)}: must be a string or an integer, got "
                        f"{'nothing' if name not in record else type(value).__name__}")
    return str(value)


def read_ragtruth(directory: str | Path, *, split: str = SPLIT) -> list[Response]:
    """RAGTruth's response.jsonl with each response's source from source_info.jsonl (matched by source_id, as
    lettucedetect preprocess_ragtruth.py main does), the responses of `split` (SPLITS; "all": every one) in file
    order. A DataError names the first bad line: a field missing or of the wrong type, a span outside its response,
    a source_id with no source or given twice, a response id given twice."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    directory = Path(directory)
    responses_path, sources_path = (directory / name for name in RAGTRUTH_FILES)
    sources: dict[str, dict] = {}
    for line, record in _records(sources_path):
        sid, source = _source(sources_path, line, record)
        if sid in sources:
            raise DataError(f"{_where(sources_path, line, 'source_id')}: {sid!r} is given twice")
        sources[sid] = source
    out, seen = [], set()
    for line, record in _records(responses_path):
        if not isinstance(record, dict):
            raise DataError(f"{_where(responses_path, line)}: a row must be an object")
        rid = _id(responses_path, line, record, "id")
        if rid in seen:
            raise DataError(f"{_where(responses_path, line, 'id')}: {rid!r} is given twice")
        seen.add(rid)
        sid = _id(responses_path, line, record, "source_id")
        if sid not in sources:
            raise DataError(f"{_where(responses_path, line, 'source_id')}: {sid!r} is not in {sources_path.name}")
        response = _text(responses_path, line, record, "response")
        row_split = _text(responses_path, line, record, "split", blank=False)
        labels = record.get("labels")
        if not isinstance(labels, list):
            raise DataError(f"{_where(responses_path, line, 'labels')}: must be a list of spans, got "
                            f"{'nothing' if 'labels' not in record else type(labels).__name__}")
        spans = []
        for i, label in enumerate(labels):
            start, end = (label.get(k) if isinstance(label, dict) else None for k in ("start", "end"))
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)) \
                    or not 0 <= start <= end <= len(response):
                raise DataError(f"{_where(responses_path, line, f'labels[{i}]')}: needs integer start <= end within "
                                f"the response's {len(response)} characters, got {label!r}")
            spans.append((start, end))
        if split == "all" or row_split == split:
            source = sources[sid]
            out.append(Response(line, rid, source["task_type"], row_split, response, tuple(spans), source["prompt"],
                                source["document"]))
    if not out:
        raise DataError(f"{responses_path}: no responses" + ("" if split == "all" else f" in split {split!r}"))
    return out


# -- the metrics -------------------------------------------------------------------------------------------------

def balanced_accuracy(labels: Sequence[int], preds: Sequence[int]) -> float:
    """The mean recall over the classes present in `labels` (sklearn.metrics.balanced_accuracy_score)."""
    recalls = []
    for c in sorted(set(labels)):
        members = [p for y, p in zip(labels, preds) if y == c]
        recalls.append(sum(p == c for p in members) / len(members))
    return sum(recalls) / len(recalls) if recalls else math.nan


def precision_recall_f1(labels: Sequence[int], preds: Sequence[int], positive: int = 1) -> dict[str, float]:
    """Precision, recall and F1 of one class, 0 where undefined (sklearn's precision_recall_fscore_support with
    zero_division=0, the hallucinated class of lettucedetect's example-level evaluation)."""
    tp = sum(y == positive and p == positive for y, p in zip(labels, preds))
    predicted, actual = sum(p == positive for p in preds), sum(y == positive for y in labels)
    precision = tp / predicted if predicted else 0.0
    recall = tp / actual if actual else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def char_level(predicted: Sequence[Sequence[dict]], gold: Sequence[Sequence[tuple[int, int]]]) -> dict[str, float]:
    """lettucedetect models/evaluator.py evaluate_detector_char_level: over all responses, the characters of every
    (predicted, gold) span pair's overlap, against the predicted spans' and the gold spans' lengths."""
    overlap = total_predicted = total_gold = 0
    for spans, golds in zip(predicted, gold):
        total_predicted += sum(s["end"] - s["start"] for s in spans)
        total_gold += sum(end - start for start, end in golds)
        overlap += sum(max(min(s["end"], end) - max(s["start"], start), 0) for s in spans for start, end in golds)
    precision = overlap / total_predicted if total_predicted else 0.0
    recall = overlap / total_gold if total_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def best_threshold(labels: Sequence[int], scores: Sequence[float]) -> float:
    """AggreFact's choose_best_threshold: among the percentiles 0, 0.2, ..., 99.8 of the scores (numpy's, linear),
    the threshold whose `score > threshold` has the best balanced accuracy, the last of equals kept."""
    import numpy as np

    best, chosen = 0.0, 0.0
    for t in (float(np.percentile(scores, p)) for p in np.arange(0, 100, 0.2)):
        value = balanced_accuracy(labels, [int(s > t) for s in scores])
        if value >= best:
            best, chosen = value, t
    return chosen


# -- the reports -------------------------------------------------------------------------------------------------

def _datasets(claims: Sequence[Claim]) -> dict[str, list[int]]:
    """Each dataset's row indices, datasets in the order they first appear (`df.dataset.unique()`)."""
    out: dict[str, list[int]] = {}
    for i, c in enumerate(claims):
        out.setdefault(c.dataset, []).append(i)
    return out


def tune_thresholds(claims: Sequence[Claim], scores: Sequence[float]) -> dict[str, float]:
    """A threshold per dataset of a dev file (best_threshold)."""
    return {name: best_threshold([claims[i].label for i in rows], [scores[i] for i in rows])
            for name, rows in _datasets(claims).items()}


def aggrefact_report(claims: Sequence[Claim], scores: Sequence[float],
                     threshold: float | dict[str, float]) -> dict:
    """Balanced accuracy per dataset and their mean; a claim is supported when its score is above its dataset's
    threshold (one for all, or one per dataset: a dataset the dict lacks is an error)."""
    if len(claims) != len(scores):
        raise ValueError(f"{len(claims)} claims but {len(scores)} scores")
    datasets = {}
    for name, rows in _datasets(claims).items():
        if isinstance(threshold, dict) and name not in threshold:
            raise ValueError(f"no threshold for dataset {name!r}: the dev file has {sorted(threshold)}")
        t = threshold[name] if isinstance(threshold, dict) else threshold
        labels = [claims[i].label for i in rows]
        datasets[name] = {"rows": len(rows), "supported": sum(labels), "threshold": t,
                          "balanced_accuracy": balanced_accuracy(labels, [int(scores[i] > t) for i in rows])}
    values = [d["balanced_accuracy"] for d in datasets.values()]
    return {"benchmark": "LLM-AggreFact", "rows": len(claims), "datasets": datasets,
            "average_balanced_accuracy": sum(values) / len(values)}


def ragtruth_report(responses: Sequence[Response], predicted: Sequence[int],
                    spans: Sequence[Sequence[dict]] | None = None) -> dict:
    """Example-level precision / recall / F1 of the hallucinated class and balanced accuracy, overall and per task
    type; with a span detector's spans also their character-level scores (char_level)."""
    if len(responses) != len(predicted):
        raise ValueError(f"{len(responses)} responses but {len(predicted)} predictions")

    def part(rows: list[int]) -> dict:
        labels, preds = [responses[i].hallucinated for i in rows], [predicted[i] for i in rows]
        out = {"rows": len(rows), "hallucinated": sum(labels), **precision_recall_f1(labels, preds),
               "balanced_accuracy": balanced_accuracy(labels, preds)}
        if spans is not None:
            out["char"] = char_level([spans[i] for i in rows], [responses[i].spans for i in rows])
        return out

    tasks: dict[str, list[int]] = {}
    for i, r in enumerate(responses):
        tasks.setdefault(r.task_type, []).append(i)
    return {"benchmark": "RAGTruth", **part(list(range(len(responses)))),
            "by_task": {name: part(rows) for name, rows in tasks.items()}}


def evaluate_aggrefact(method: Method, runner, claims: Sequence[Claim], *, threshold: float | None = None,
                       dev: Sequence[Claim] | None = None, progress: bool = False) -> tuple[dict, list[float]]:
    """A score method on LLM-AggreFact rows: the report (aggrefact_report, with the rule it used) and each row's
    score. The threshold: `threshold`, else one per dataset tuned on the `dev` rows, else the method's."""
    if method.kind != SCORES:
        raise ValueError(f"{method.name} gives spans, not a score per claim: LLM-AggreFact needs a score method "
                         f"({', '.join(m.name for m in METHODS.values() if m.kind == SCORES)})")
    if threshold is not None and dev is not None:
        raise ValueError("give a threshold or a dev file, not both")
    scores = method.call(runner, [c.doc for c in claims], [c.claim for c in claims], progress=progress)
    if dev is not None:
        chosen = tune_thresholds(dev, method.call(runner, [c.doc for c in dev], [c.claim for c in dev],
                                                  progress=progress))
        rule = "tuned per dataset on the dev file (AggreFact's choose_best_threshold)"
    else:
        chosen = method.threshold if threshold is None else threshold
        rule = method.rule if threshold is None else "given (--threshold)"
    report = aggrefact_report(claims, scores, chosen)
    return {**report, "method": method.name, "threshold_rule": rule}, scores


def evaluate_ragtruth(method: Method, runner, responses: Sequence[Response], *, threshold: float | None = None,
                      progress: bool = False) -> tuple[dict, list]:
    """A method on RAGTruth responses: the report (ragtruth_report) and each response's result (a score, or its
    spans). A score method reads (the source's evidence, the response), hallucinated when the score is not above
    the threshold; a span detector reads (the source's prompt, the response), hallucinated with a span."""
    if method.kind == SPANS:
        if threshold is not None:
            raise ValueError(f"{method.name} gives spans: it takes no threshold")
        spans = method.call(runner, [r.prompt for r in responses], [r.response for r in responses],
                            progress=progress)
        report = ragtruth_report(responses, [int(bool(s)) for s in spans], spans)
        return {**report, "method": method.name, "threshold_rule": method.rule}, spans
    t = method.threshold if threshold is None else threshold
    scores = method.call(runner, [r.document for r in responses], [r.response for r in responses], progress=progress)
    report = ragtruth_report(responses, [int(not s > t) for s in scores])
    return {**report, "method": method.name, "threshold": t,
            "threshold_rule": method.rule if threshold is None else "given (--threshold)"}, scores


def table(report: dict) -> str:
    """The report's short table, as the command prints it."""
    if report["benchmark"] == "LLM-AggreFact":
        width = max(len("Average"), *map(len, report["datasets"]))
        lines = [f"{'dataset':<{width}}  {'rows':>6}  {'BAcc':>5}"]
        lines += [f"{name:<{width}}  {d['rows']:>6}  {100 * d['balanced_accuracy']:>5.1f}"
                  for name, d in report["datasets"].items()]
        lines.append(f"{'Average':<{width}}  {report['rows']:>6}  {100 * report['average_balanced_accuracy']:>5.1f}")
        return "\n".join(lines)
    char = "char" in report
    head = f"{'task':<8}  {'rows':>6}  {'P':>5}  {'R':>5}  {'F1':>5}  {'BAcc':>5}" + (
        f"  {'charF1':>6}" if char else "")

    def row(name, d):
        return (f"{name:<8}  {d['rows']:>6}  {100 * d['precision']:>5.1f}  {100 * d['recall']:>5.1f}  "
                f"{100 * d['f1']:>5.1f}  {100 * d['balanced_accuracy']:>5.1f}"
                + (f"  {100 * d['char']['f1']:>6.1f}" if char else ""))

    return "\n".join([head, *(row(name, d) for name, d in report["by_task"].items()), row("all", report)])


# -- the command ---------------------------------------------------------------------------------------------------

def evaluate_parser(sub) -> None:
    """The `evaluate` command's parser (torch-free: the methods are named by import path)."""
    p = sub.add_parser("evaluate", help="a grounding method's scores on LLM-AggreFact or RAGTruth files",
                       description=__doc__.split("\n\n")[0])
    bench = p.add_mutually_exclusive_group(required=True)
    bench.add_argument("--aggrefact", metavar="FILE",
                       help="an LLM-AggreFact .jsonl, .csv or .parquet file (doc, claim, label, dataset)")
    bench.add_argument("--ragtruth", metavar="DIR",
                       help="a directory holding RAGTruth's " + " and ".join(RAGTRUTH_FILES))
    p.add_argument("--method", required=True, choices=tuple(METHODS),
                   help="; ".join(f"{m.name}: {m.rule}" for m in METHODS.values()))
    p.add_argument("--model", help="the method's model (directory or hub id)")
    p.add_argument("--backbone", help="alignscore with a .ckpt: its backbone directory or hub id")
    p.add_argument("--tokenizer", help="tokenizer directory or hub id (default: beside the model)")
    p.add_argument("--threshold", type=float, help="a score method's threshold: supported when the score is above it "
                                                    "(default: the method's rule, --method's help)")
    p.add_argument("--dev", metavar="FILE", help="with --aggrefact: a dev file of the same columns; a threshold per "
                                                 "dataset tuned on it (AggreFact's rule for metrics without one)")
    p.add_argument("--split", choices=SPLITS, default=SPLIT, help="with --ragtruth: the responses of this split")
    p.add_argument("--output", metavar="REPORT.json", help="where the report goes as JSON (default: stdout only)")
    p.add_argument("--predictions", metavar="FILE.jsonl",
                   help="each row's result, one line per row in file order: its line and id, score or spans, label")
    p.add_argument("--device", help="cpu (default), cuda, cuda:N or mps")
    p.add_argument("--batch-size", type=int)
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--threads", type=int)
    p.set_defaults(run=run_evaluate)


def _check_destination(path: str | None, flag: str, suffixes: tuple[str, ...]) -> None:
    if path is None:
        return
    where = Path(path)
    if where.suffix.lower() not in suffixes:
        raise ValueError(f"{flag} {path}: name a {' or '.join(suffixes)} file")
    if where.is_dir() or not where.parent.resolve().is_dir():
        raise ValueError(f"{flag} {path}: not a file in an existing directory")


def run_evaluate(args: argparse.Namespace) -> int:
    """Read and check every row, then load the model, score, and write the report (and the predictions)."""
    method = METHODS[args.method]
    _check_destination(args.output, "--output", (".json",))
    _check_destination(args.predictions, "--predictions", (".jsonl",))
    if args.dev is not None and args.aggrefact is None:
        raise ValueError("--dev goes with --aggrefact")
    if args.threshold is not None and args.dev is not None:
        raise ValueError("give --threshold or --dev, not both")
    if args.aggrefact is not None:
        rows = read_aggrefact(args.aggrefact)
        dev = read_aggrefact(args.dev) if args.dev is not None else None
        if method.kind != SCORES:
            raise ValueError(f"--method {method.name} gives spans; LLM-AggreFact needs a score method")
    else:
        rows = read_ragtruth(args.ragtruth, split=args.split)
    keywords = {"device": args.device, "batch_size": args.batch_size, "max_tokens": args.max_tokens,
                "threads": args.threads, "tokenizer": args.tokenizer}
    if args.backbone is not None:
        keywords["backbone"] = args.backbone
    runner = method.load(args.model, **keywords)
    if args.aggrefact is not None:
        report, results = evaluate_aggrefact(method, runner, rows, threshold=args.threshold, dev=dev, progress=True)
    else:
        report, results = evaluate_ragtruth(method, runner, rows, threshold=args.threshold, progress=True)
    report["model"] = args.model or method.model
    if args.output is not None:
        Path(args.output).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if args.predictions is not None:
        write_predictions(args.predictions, rows, results, report)
    print(table(report))
    if args.output is not None:
        print(f"report written to {args.output}", file=sys.stderr)
    return 0


def write_predictions(path: str | Path, rows: Sequence[Claim | Response], results: Sequence, report: dict) -> None:
    """One line per row, in file order: line (and a response's id), the score or spans, the label predicted and the
    gold one (AggreFact: 1 supported; RAGTruth: 1 hallucinated)."""
    with Path(path).open("w", encoding="utf-8") as f:
        for row, result in zip(rows, results, strict=True):
            if isinstance(row, Claim):
                t = report["datasets"][row.dataset]["threshold"]
                out = {"line": row.line, "dataset": row.dataset, "score": result, "predicted": int(result > t),
                       "label": row.label}
            elif isinstance(result, list):
                out = {"line": row.line, "id": row.id, "spans": result, "predicted": int(bool(result)),
                       "label": row.hallucinated}
            else:
                out = {"line": row.line, "id": row.id, "score": result,
                       "predicted": int(not result > report["threshold"]), "label": row.hallucinated}
            f.write(json.dumps(out, ensure_ascii=False) + "\n")
