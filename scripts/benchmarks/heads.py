"""Token heads: each product against the transformers pipeline it mirrors, on base-shaped models and
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

from benchmarks.encoder import ceiling_matmul, encoder_flops
from benchmarks.machine import interleaved
from benchmarks.retrieval import bert_tokenizer

SHAPES = {"bert": {}}  # transformers config overrides; {} is bert-base (BertConfig's defaults). A test passes tiny ones.
NER_LABELS = ("O", "B-MISC", "I-MISC", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC")  # dslim/bert-base-NER's
FILL_WORDS = 120  # words of each text a fill-mask query keeps (the middle one masked)
HEAD_SCALE = 40.0
QA_WINDOW, QA_STRIDE = 384, 128  # the question-answering pipeline's max_seq_len and doc_stride defaults
ZERO_SHOT_LABELS = ("software", "history", "science", "cooking", "sports")  # the candidate labels of each text  # the random head's weights times this: labels vary from token to token
BATCH = 32
GOAL = 2.0
ONE_AT_A_TIME, BATCHED = "transformers pipeline, one text at a time", f"transformers pipeline, batch_size={BATCH}"
TRANSFORMERS4_ENV = "MINIALIGN_BENCH_TRANSFORMERS4"  # the python of a transformers 4.x environment (question answering)
TABLE = {"task": "", "model": "", "impl": "", "texts": "", "texts/s": ".1f", "vs one at a time": ".2f",
         "vs batched": ".2f", "GFLOP/s": ".1f", "of ceiling": ".0%", "max score diff": ".1e", "goal": ""}


@dataclass
class Case:
    """One product against its pipeline: the calls by label (the two pipeline forms first, then minialign's), and
    how two outputs differ (inf where anything but a score differs)."""

    task: str
    model: str
    calls: dict[str, Callable]  # the pipeline one text at a time, batched, then minialign's
    diff: Callable
    work: float  # the useful FLOPs of one call: the encoder on every window's real tokens (encoder_flops)
    close: Callable = lambda: None  # what the case holds beside this process (a transformers 4.x worker)


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

@dataclass
class Setting:
    """What every case is made from."""

    root: Path  # a temporary directory for the models
    texts: list[str]  # paragraphs people wrote
    pairs: list[tuple[str, str]]  # (question, its passage): a docstring's summary and the paragraph after it
    device: str
    shape: dict  # transformers config overrides of BertConfig
    tokenizer_dir: Path  # the WordPiece tokenizer's files
    transformers4: str | None  # the python of a transformers 4.x environment (question answering's peer), or None


def _saved(setting: Setting, name: str, cls, **config):
    """A random transformers model of class `cls` at the setting's shape, its vocabulary the tokenizer's, saved with
    the tokenizer into setting.root / name: (the model, its directory, the tokenizer)."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(setting.tokenizer_dir))
    hf_config = transformers.BertConfig(**setting.shape, **config)
    hf_config.vocab_size = tokenizer.backend_tokenizer.get_vocab_size()
    torch.manual_seed(0)
    model = cls(hf_config).eval()
    directory = setting.root / name
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return model, directory, tokenizer


def _pipeline(task: str, model, tokenizer, device: str, **kwargs):
    import transformers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.pipeline(task, model=model.to(device), tokenizer=tokenizer, device=device, **kwargs)


def token_classification(setting: Setting) -> Case:
    """TokenClassifier.predict(aggregation_strategy="simple") against pipeline("token-classification")."""
    import transformers

    import minialign as ma

    model, directory, tokenizer = _saved(
        setting, "ner", transformers.BertForTokenClassification, num_labels=len(NER_LABELS),
        id2label=dict(enumerate(NER_LABELS)), label2id={label: i for i, label in enumerate(NER_LABELS)})
    with torch.no_grad():
        model.classifier.weight.mul_(HEAD_SCALE)
    model.save_pretrained(directory)
    pipe = _pipeline("token-classification", model, tokenizer, setting.device, aggregation_strategy="simple")
    ours = ma.TokenClassifier.from_pretrained(directory, device=setting.device)
    texts = setting.texts
    return Case("token classification (simple)", "bert-base shape, 9 labels", {
        ONE_AT_A_TIME: lambda: plain(pipe(texts)),
        BATCHED: lambda: plain(pipe(texts, batch_size=BATCH)),
        "minialign TokenClassifier.predict":
            lambda: ours.predict(texts, aggregation_strategy="simple", warn_truncation=False)}, score_diff,
        encoder_flops(ours.model.config, [len(ids) for ids in ours.tokenizer.encode_ids(
            texts, max_length=ours.max_length).ids]))


def masked(text: str, mask: str) -> str:
    """The text's first FILL_WORDS words with the middle one masked: a fill-mask query on real text."""
    words = text.split()[:FILL_WORDS]
    words[len(words) // 2] = mask
    return " ".join(words)


def fill_mask(setting: Setting) -> Case:
    """FillMask.predict(top_k=5) against pipeline("fill-mask"), one mask per text."""
    import transformers

    import minialign as ma

    model, directory, tokenizer = _saved(setting, "mlm", transformers.BertForMaskedLM)
    pipe = _pipeline("fill-mask", model, tokenizer, setting.device)
    ours = ma.FillMask.from_pretrained(directory, device=setting.device)
    texts = [masked(text, tokenizer.mask_token) for text in setting.texts]
    return Case("fill-mask (top 5)", "bert-base shape", {
        ONE_AT_A_TIME: lambda: plain(pipe(texts)),
        BATCHED: lambda: plain(pipe(texts, batch_size=BATCH)),
        "minialign FillMask.predict": lambda: ours.predict(texts, warn_truncation=False)}, score_diff,
        encoder_flops(ours.model.config, [len(ids) for ids in ours.tokenizer.encode_ids(
            texts, max_length=ours.max_length).ids]))


def question_answering(setting: Setting) -> Case | None:
    """QuestionAnswerer.predict against transformers 4.x's pipeline("question-answering") in a process of its own
    (Transformers4); None without a transformers 4.x environment."""
    import transformers

    import minialign as ma

    if setting.transformers4 is None:
        return None
    model, directory, _ = _saved(setting, "qa", transformers.BertForQuestionAnswering)
    with torch.no_grad():
        model.qa_outputs.weight.mul_(HEAD_SCALE)
    model.save_pretrained(directory)
    peer = Transformers4(setting.transformers4, "question-answering", directory)
    ours = ma.QuestionAnswerer.from_pretrained(directory, device=setting.device)
    questions, contexts = [q for q, _ in setting.pairs], [c for _, c in setting.pairs]
    return Case("question answering", "bert-base shape", {
        ONE_AT_A_TIME.replace("transformers", f"transformers {peer.version}"):
            lambda: peer(question=questions, context=contexts),
        BATCHED.replace("transformers", f"transformers {peer.version}"):
            lambda: peer(question=questions, context=contexts, batch_size=BATCH),
        "minialign QuestionAnswerer.predict": lambda: ours.predict(questions, contexts)}, score_diff,
        encoder_flops(ours.model.config, [len(window.ids) for q, c in setting.pairs for window in
                                          ours.tokenizer.encode_pair_windows(q, c, max_length=QA_WINDOW,
                                                                             stride=QA_STRIDE)]), peer.close)


def zero_shot(setting: Setting) -> Case:
    """ZeroShotClassifier.predict over ZERO_SHOT_LABELS against pipeline("zero-shot-classification"), an NLI
    classifier with MNLI's three labels."""
    import transformers

    import minialign as ma
    from minialign.products.zero_shot import DEFAULT_TEMPLATE

    labels = ("contradiction", "neutral", "entailment")
    model, directory, tokenizer = _saved(
        setting, "nli", transformers.BertForSequenceClassification, num_labels=3, id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)})
    pipe = _pipeline("zero-shot-classification", model, tokenizer, setting.device)
    ours = ma.ZeroShotClassifier.from_pretrained(directory, device=setting.device)
    texts, candidates = setting.texts, list(ZERO_SHOT_LABELS)
    return Case(f"zero-shot ({len(candidates)} labels)", "bert-base shape, NLI", {
        ONE_AT_A_TIME: lambda: plain(pipe(texts, candidate_labels=candidates)),
        BATCHED: lambda: plain(pipe(texts, candidate_labels=candidates, batch_size=BATCH)),
        "minialign ZeroShotClassifier.predict":
            lambda: ours.predict(texts, candidates, warn_truncation=False)}, score_diff,
        encoder_flops(ours.model.config, [len(ids) for ids in ours.tokenizer.encode_ids(
            [t for t in texts for _ in candidates], [DEFAULT_TEMPLATE.format(c) for _ in texts for c in candidates],
            max_length=ours.max_length, truncation="only_first").ids]))


CASES = (token_classification, fill_mask, zero_shot, question_answering)


# -- the section --

def measure(*, texts: int, rounds: int, device: str = "cpu", shapes: dict | None = None,
            corpus: list[str] | None = None, pairs: list[tuple[str, str]] | None = None,
            transformers4: str | None = None, echo=print) -> dict:
    """{"rows": rows of TABLE, "tokenizer": what the WordPiece is, "texts": how many, "skipped": [why, ...]}.
    texts: how many of `corpus` each call reads (default corpus: a seeded sample of human_text.passages()), and how
    many (question, passage) `pairs` question answering reads (default: human_text.query_pairs()); rounds:
    interleaved rounds, best of, after a warm-up; shapes: transformers config overrides (SHAPES: base shapes);
    transformers4: the python of a transformers 4.x environment, question answering's peer (default
    $MINIALIGN_BENCH_TRANSFORMERS4; without it that case is skipped)."""
    shapes = {**SHAPES, **(shapes or {})}
    transformers4 = transformers4 or os.environ.get(TRANSFORMERS4_ENV)
    training = corpus
    if corpus is None or pairs is None:
        from benchmarks import human_text

        if corpus is None:
            training = list(human_text.passages())
            corpus = human_text.sample(training, texts, seed=0)
        if pairs is None:
            pairs = human_text.sample(human_text.query_pairs(), texts, seed=0)
    rows, skipped = [], []
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the pipelines' advice to batch on a GPU, per call
        root = Path(tmp)
        tokenizer = bert_tokenizer(root / "wordpiece", training)
        setting = Setting(root, list(corpus[:texts]), list(pairs[:texts]), device, shapes["bert"], root / "wordpiece",
                          transformers4)
        model_name = "bert-base shape" if not shapes["bert"] else "bert (custom shape)"
        for make in CASES:
            case = make(setting)
            if case is None:
                skipped.append(f"{make.__name__.replace('_', ' ')}: no transformers 4.x environment "
                               f"(${TRANSFORMERS4_ENV})")
                continue
            try:
                rows += _timed(case, model_name, rounds, device, echo)
            finally:
                case.close()
    return {"rows": rows, "tokenizer": tokenizer, "texts": texts, "skipped": skipped}


def _timed(case: Case, model_name: str, rounds: int, device: str, echo) -> list[dict]:
    """The case's rows: each call's speed against the two pipeline calls, its useful work's GFLOP/s and share of
    the fp32 matmul ceiling (the faster of F.linear and minialign's Linear, timed in the same rounds), and its
    output against the one at a time."""
    outputs = {}
    ceiling_calls, ceiling_work = ceiling_matmul(torch.float32, device)
    with torch.inference_mode():
        best = interleaved({**case.calls, **{f"matmul {k}": c for k, c in ceiling_calls.items()}}, rounds=rounds,
                           outputs=outputs)
    ceiling = max(ceiling_work / best[f"matmul {k}"] for k in ceiling_calls) / 1e9
    one, batched, *_ = case.calls
    rows = []
    for label in case.calls:
        mine = label not in (one, batched)
        slower = min(best[one], best[batched]) / best[label]
        row = {"task": case.task, "model": case.model.replace("bert-base shape", model_name), "impl": label,
               "texts": len(outputs[label]), "texts/s": len(outputs[label]) / best[label],
               "vs one at a time": best[one] / best[label], "vs batched": best[batched] / best[label],
               "GFLOP/s": case.work / best[label] / 1e9, "of ceiling": case.work / best[label] / 1e9 / ceiling,
               "max score diff": case.diff(outputs[label], outputs[one]),
               "goal": f">= {GOAL}x both: " + ("met" if slower >= GOAL else "not met") if mine else "-"}
        rows.append(row)
        echo(f"{case.task:32} {label:52} {row['texts/s']:7.1f} texts/s  x{row['vs one at a time']:.2f} / "
             f"x{row['vs batched']:.2f}  {row['GFLOP/s']:6.1f} GFLOP/s ({row['of ceiling']:.0%} of {ceiling:.1f})  "
             f"max score diff {row['max score diff']:.1e}")
    return rows


def goals(result: dict) -> list[str]:
    """One line per minialign row: its two figures and whether they meet the goal."""
    return [f"{row['task']}: {row['vs one at a time']:.2f}x / {row['vs batched']:.2f}x ({row['goal']})"
            for row in result["rows"] if row["goal"] != "-"]
