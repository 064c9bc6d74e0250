"""Token heads (issue 44): each product against the transformers pipeline it mirrors, on base-shaped models and
real text, with the pipeline called as users call it: one text at a time (its default, batch_size=1) and batched
(batch_size=32). The goal: at least 2x the pipeline, CPU fp32.

Models: random weights at bert-base shape (dslim/bert-base-NER, the most downloaded NER checkpoint, is BERT base
with CoNLL's nine labels), the real all-MiniLM-L6-v2 tokenizer (bert-base-uncased's 30522-token WordPiece) where
its package is installed, else a WordPiece trained here; the head's weights scaled up so labels change from token
to token and entities form, as a trained head's do. Text: paragraphs people wrote (human_text.passages()). Speed
does not depend on the values; the outputs are compared all the same (every key equal, scores to the figure in
`max score diff`), so a wrong answer cannot look fast.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks.machine import interleaved
from benchmarks.retrieval import bert_tokenizer

SHAPES = {"bert": {}}  # transformers config overrides; {} is bert-base (BertConfig's defaults). A test passes tiny ones.
NER_LABELS = ("O", "B-MISC", "I-MISC", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC")  # dslim/bert-base-NER's
HEAD_SCALE = 40.0  # the random head's weights times this: labels vary from token to token
BATCH = 32
GOAL = 2.0
ONE_AT_A_TIME, BATCHED = "transformers pipeline, one text at a time", f"transformers pipeline, batch_size={BATCH}"
TABLE = {"task": "", "model": "", "impl": "", "texts": "", "texts/s": ".1f", "vs one at a time": ".2f",
         "vs batched": ".2f", "max score diff": ".1e", "goal": ""}


@dataclass
class Case:
    """One product against its pipeline: the calls by label (the two pipeline forms first, then minialign's), and
    how two outputs differ (inf where anything but a score differs)."""

    task: str
    model: str
    calls: dict[str, Callable]
    diff: Callable


class Transformers4:
    """A transformers 4.x pipeline in a process of its own (transformers4_worker.py, run by `python`, the python of
    an environment with transformers 4.x): called with the pipeline's keywords, it returns the pipeline's output.
    The parent times the call, the round trip included (a few JSON lines: microseconds against the seconds of a
    call)."""

    def __init__(self, python: str, task: str, model: Path):
        worker = Path(__file__).with_name("transformers4_worker.py")
        self.process = subprocess.Popen([python, str(worker)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"})
        self.version = self._ask({"task": task, "model": str(model)})["ready"]

    def _ask(self, request: dict) -> dict:
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the transformers 4.x worker stopped (exit status {self.process.wait()})")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"the transformers 4.x worker: {answer['error']}")
        return answer

    def __call__(self, **kwargs):
        return self._ask({"kwargs": kwargs})["output"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


# -- outputs --

def score_diff(ours, theirs) -> float:
    """Largest difference of the scores of two outputs of the same shape (nested lists and dicts, as the pipelines
    return them); inf where a key, a label, a word, an offset or a length differs."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        if list(ours) != list(theirs):
            return math.inf
        return max([0.0, *(score_diff(ours[k], theirs[k]) if k.startswith("score") or isinstance(ours[k], list)
                           else (0.0 if _same(ours[k], theirs[k]) else math.inf) for k in ours)])
    if isinstance(ours, list) and isinstance(theirs, list):
        if len(ours) != len(theirs):
            return math.inf
        return max([0.0, *(score_diff(a, b) for a, b in zip(ours, theirs))])
    if isinstance(ours, (int, float)) and isinstance(theirs, (int, float)):
        return abs(float(ours) - float(theirs))
    return 0.0 if _same(ours, theirs) else math.inf


def _same(a, b) -> bool:
    return (int(a) == int(b)) if hasattr(b, "item") or hasattr(a, "item") else a == b


def plain(outputs) -> list:
    """The pipeline's outputs with numpy scalars as Python numbers."""
    if isinstance(outputs, list):
        return [plain(o) for o in outputs]
    if isinstance(outputs, dict):
        return {k: plain(v) for k, v in outputs.items()}
    return outputs.item() if hasattr(outputs, "item") else outputs


# -- the cases --

def token_classification(root: Path, texts: list[str], device: str, shape: dict, tokenizer_dir: Path) -> Case:
    """TokenClassifier.predict(aggregation_strategy="simple") against pipeline("token-classification")."""
    import transformers

    import minialign as ma

    directory = root / "ner"
    config = transformers.BertConfig(**shape, num_labels=len(NER_LABELS), id2label=dict(enumerate(NER_LABELS)),
                                     label2id={label: i for i, label in enumerate(NER_LABELS)})
    config.vocab_size = transformers.AutoTokenizer.from_pretrained(str(tokenizer_dir)).backend_tokenizer \
        .get_vocab_size()
    torch.manual_seed(0)
    model = transformers.BertForTokenClassification(config).eval()
    with torch.no_grad():
        model.classifier.weight.mul_(HEAD_SCALE)
    model.save_pretrained(directory)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tokenizer_dir))
    tokenizer.save_pretrained(directory)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = transformers.pipeline("token-classification", model=model.to(device), tokenizer=tokenizer,
                                     device=device, aggregation_strategy="simple")
    ours = ma.TokenClassifier.from_pretrained(directory, device=device)
    return Case("token classification (simple)", "bert-base shape, 9 labels", {
        ONE_AT_A_TIME: lambda: plain(pipe(texts)),
        BATCHED: lambda: plain(pipe(texts, batch_size=BATCH)),
        "minialign TokenClassifier.predict":
            lambda: ours.predict(texts, aggregation_strategy="simple", warn_truncation=False)}, score_diff)


CASES = (token_classification,)


# -- the section --

def measure(*, texts: int, rounds: int, device: str = "cpu", shapes: dict | None = None,
            corpus: list[str] | None = None, echo=print) -> dict:
    """{"rows": rows of TABLE, "tokenizer": what the WordPiece is, "texts": how many}. texts: how many of `corpus`
    each call reads (default corpus: a seeded sample of human_text.passages()); rounds: interleaved rounds, best of,
    after a warm-up; shapes: transformers config overrides (SHAPES: base shapes)."""
    shapes = {**SHAPES, **(shapes or {})}
    training = corpus
    if corpus is None:
        from benchmarks import human_text

        training = list(human_text.passages())
        corpus = human_text.sample(training, texts, seed=0)
    sample = list(corpus[:texts])
    rows = []
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the pipelines' advice to batch on a GPU, per call
        root = Path(tmp)
        tokenizer = bert_tokenizer(root / "wordpiece", training)
        model_name = "bert-base shape" if not shapes["bert"] else "bert (custom shape)"
        for make in CASES:
            case = make(root, sample, device, shapes["bert"], root / "wordpiece")
            case.model = case.model.replace("bert-base shape", model_name)
            outputs = {}
            with torch.inference_mode():
                best = interleaved(case.calls, rounds=rounds, outputs=outputs)
            reference = outputs[ONE_AT_A_TIME]
            for label in case.calls:
                mine = label not in (ONE_AT_A_TIME, BATCHED)
                slower = min(best[ONE_AT_A_TIME], best[BATCHED]) / best[label]
                row = {"task": case.task, "model": case.model, "impl": label, "texts": len(sample),
                       "texts/s": len(sample) / best[label], "vs one at a time": best[ONE_AT_A_TIME] / best[label],
                       "vs batched": best[BATCHED] / best[label],
                       "max score diff": case.diff(outputs[label], reference),
                       "goal": f">= {GOAL}x both: " + ("met" if slower >= GOAL else "not met") if mine else "-"}
                rows.append(row)
                echo(f"{case.task:36} {label:44} {row['texts/s']:7.1f} texts/s  x{row['vs one at a time']:.2f} / "
                     f"x{row['vs batched']:.2f}  max score diff {row['max score diff']:.1e}")
            del case
    return {"rows": rows, "tokenizer": tokenizer, "texts": len(sample)}


def goals(result: dict) -> list[str]:
    """One line per minialign row: its two figures and whether they meet the goal."""
    return [f"{row['task']}: {row['vs one at a time']:.2f}x / {row['vs batched']:.2f}x ({row['goal']})"
            for row in result["rows"] if row["goal"] != "-"]
