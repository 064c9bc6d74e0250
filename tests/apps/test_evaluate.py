"""`minialign evaluate` on small LLM-AggreFact and RAGTruth files written here: the metrics against sklearn's
(balanced_accuracy_score, precision_recall_fscore_support) and lettucedetect's own evaluators
(models/evaluator.py, fed by its preprocess_ragtruth.py create_sample on the same rows), AggreFact's
choose_best_threshold restated; the command's report against the runners' own scores; every row once, in file order;
bad files refused by file, line and field."""

import csv
import json
import random
import re
import warnings

import numpy as np
import pytest
import torch
from family_builders import FAMILIES, hf_model, write_tokenizer
from sklearn.metrics import balanced_accuracy_score, precision_recall_fscore_support

import minialign as ma
from minialign.apps import evaluate as ev
from minialign.apps.cli import main as cli

# sklearn warns where a class is absent from a split or from the predictions (its result is still the reference)
pytestmark = [pytest.mark.filterwarnings("ignore:y_pred contains classes not in y_true:UserWarning"),
              pytest.mark.filterwarnings("ignore:A single label was found:UserWarning")]

DOC = "The tower was built in Paris. It opened in 1889. The minister said the company grew by five percent."
CLAIMS = ["The tower opened in 1889.", "The tower is in Rome.", "The company grew.", "The minister resigned.",
          "Paris has a tower.", "It opened in 1900."]
AGGREFACT = [{"doc": DOC if i % 3 else DOC + " More words here.", "claim": CLAIMS[i % len(CLAIMS)],
              "label": int(i % 4 != 1), "dataset": ("AggreFact-CNN", "RAGTruth", "Wice")[i % 3]} for i in range(12)]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _csv(path, rows):
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


# -- metrics -----------------------------------------------------------------------------------------------------

def test_the_metrics_are_sklearns():
    rng = random.Random(0)
    for n in (1, 2, 7, 40):
        labels = [rng.randint(0, 1) for _ in range(n)]
        preds = [rng.randint(0, 1) for _ in range(n)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # sklearn warns where one class is absent
            assert ev.balanced_accuracy(labels, preds) == pytest.approx(balanced_accuracy_score(labels, preds))
        p, r, f, _ = precision_recall_fscore_support(labels, preds, labels=[0, 1], average=None, zero_division=0)
        assert ev.precision_recall_f1(labels, preds) == pytest.approx({"precision": p[1], "recall": r[1], "f1": f[1]})


def _choose_best_threshold(labels, scores):
    """AggreFact's choose_best_threshold (Tang et al. 2023), restated: percentiles 0, 0.2, ..., 99.8 of the scores,
    `score > thresh`, the last best balanced accuracy."""
    best_f1, best_thresh = 0.0, 0.0
    for thresh in [np.percentile(scores, p) for p in np.arange(0, 100, 0.2)]:
        preds = [1 if score > thresh else 0 for score in scores]
        value = balanced_accuracy_score(labels, preds)
        if value >= best_f1:
            best_f1, best_thresh = value, thresh
    return best_thresh


def test_the_tuned_threshold_is_aggrefacts():
    rng = random.Random(1)
    labels = [rng.randint(0, 1) for _ in range(30)]
    scores = [min(max(0.3 * y + rng.random() * 0.7, 0), 1) for y in labels]
    assert ev.best_threshold(labels, scores) == pytest.approx(_choose_best_threshold(labels, scores))


# -- LLM-AggreFact files -----------------------------------------------------------------------------------------

def test_jsonl_csv_and_parquet_give_the_same_rows(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    rows = [dict(r, doc=r["doc"] + "\nA second line, \"quoted\", with commas.") for r in AGGREFACT]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "a.parquet")
    read = [ev.read_aggrefact(p) for p in (_jsonl(tmp_path / "a.jsonl", rows), _csv(tmp_path / "a.csv", rows),
                                           tmp_path / "a.parquet")]
    as_rows = [[(c.doc, c.claim, c.label, c.dataset) for c in claims] for claims in read]
    assert as_rows[0] == as_rows[1] == as_rows[2] == [(r["doc"], r["claim"], r["label"], r["dataset"]) for r in rows]
    assert [c.line for c in read[0]] == list(range(1, 13))
    assert [c.line for c in read[1]] == list(range(2, 2 + 2 * 12, 2))  # each CSV row spans two lines
    assert [c.line for c in read[2]] == list(range(1, 13))


@pytest.mark.parametrize("row, line, message", [
    ({"doc": DOC, "claim": "A claim.", "dataset": "Wice"}, 2, "field 'label': missing"),
    ({"doc": DOC, "claim": "A claim.", "label": "yes", "dataset": "Wice"}, 2, "field 'label': must be 0"),
    ({"doc": DOC, "claim": "A claim.", "label": 2, "dataset": "Wice"}, 2, "field 'label': must be 0"),
    ({"doc": DOC, "claim": "  ", "label": 1, "dataset": "Wice"}, 2, "field 'claim': is blank"),
    ({"doc": None, "claim": "A claim.", "label": 1, "dataset": "Wice"}, 2, "field 'doc': is null"),
    ({"doc": DOC, "claim": "A claim.", "label": 1}, 2, "field 'dataset': missing"),
    (["not", "an", "object"], 2, "a row must be an object"),
])
def test_a_bad_aggrefact_row_is_named_by_file_line_and_field(tmp_path, row, line, message):
    path = _jsonl(tmp_path / "bad.jsonl", [AGGREFACT[0], row])
    with pytest.raises(ev.DataError, match=f"bad.jsonl, line {line}: {message}"):
        ev.read_aggrefact(path)


def test_bad_files_are_refused(tmp_path):
    (tmp_path / "x.jsonl").write_text(json.dumps(AGGREFACT[0]) + "\n{not json\n")
    with pytest.raises(ev.DataError, match="x.jsonl, line 2: not JSON"):
        ev.read_aggrefact(tmp_path / "x.jsonl")
    with pytest.raises(ev.DataError, match="unknown format '.txt'"):
        ev.read_aggrefact(_jsonl(tmp_path / "x.txt", AGGREFACT))
    with pytest.raises(ev.DataError, match="no such file"):
        ev.read_aggrefact(tmp_path / "missing.csv")
    with pytest.raises(ev.DataError, match="no rows"):
        ev.read_aggrefact(_jsonl(tmp_path / "empty.jsonl", []))
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + _csv(tmp_path / "plain.csv", AGGREFACT[:2]).read_bytes())  # as Excel saves
    assert ev.read_aggrefact(bom) == ev.read_aggrefact(tmp_path / "plain.csv")
    rows = [dict(AGGREFACT[0]), dict(AGGREFACT[1], label="maybe")]
    with pytest.raises(ev.DataError, match="bad.csv, line 3: field 'label'"):
        ev.read_aggrefact(_csv(tmp_path / "bad.csv", rows))


def _report_by_hand(rows, scores, thresholds):
    out = {}
    for name in dict.fromkeys(r["dataset"] for r in rows):
        idx = [i for i, r in enumerate(rows) if r["dataset"] == name]
        t = thresholds[name] if isinstance(thresholds, dict) else thresholds
        out[name] = balanced_accuracy_score([rows[i]["label"] for i in idx], [int(scores[i] > t) for i in idx])
    return out


def test_minicheck_on_aggrefact(tmp_path, minicheck_dir, capsys):
    path = _csv(tmp_path / "test.csv", AGGREFACT)
    scores = ma.MiniCheckScorer.from_pretrained(minicheck_dir).score([r["doc"] for r in AGGREFACT],
                                                                     [r["claim"] for r in AGGREFACT])
    for threshold, flags in ((0.5, []), (float(np.median(scores)), ["--threshold", str(float(np.median(scores)))])):
        assert cli(["evaluate", "--aggrefact", str(path), "--method", "minicheck", "--model", str(minicheck_dir),
                    "--output", str(tmp_path / "r.json"), "--predictions", str(tmp_path / "p.jsonl"), *flags]) == 0
        report = json.loads((tmp_path / "r.json").read_text())
        by_hand = _report_by_hand(AGGREFACT, scores, threshold)
        assert list(report["datasets"]) == list(by_hand)  # datasets in the order they first appear
        for name, value in by_hand.items():
            assert report["datasets"][name]["balanced_accuracy"] == pytest.approx(value)
            assert report["datasets"][name]["threshold"] == threshold
        assert report["average_balanced_accuracy"] == pytest.approx(np.mean(list(by_hand.values())))
        assert report["rows"] == len(AGGREFACT) and report["method"] == "minicheck"
        predictions = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
        assert [p["line"] for p in predictions] == [2 + i for i in range(len(AGGREFACT))]  # every row, in order
        assert [p["score"] for p in predictions] == pytest.approx(scores, abs=1e-6)
        assert [p["predicted"] for p in predictions] == [int(s > threshold) for s in scores]
        assert "Average" in capsys.readouterr().out


def test_alignscore_tunes_a_threshold_per_dataset_on_a_dev_file(tmp_path, tiny_alignscore):
    path, backbone, _ = tiny_alignscore
    dev = [dict(r, claim=CLAIMS[(i + 2) % len(CLAIMS)], label=int(i % 3 != 2)) for i, r in enumerate(AGGREFACT)]
    scorer = ma.AlignScorer.from_pretrained(path, backbone=str(backbone))
    test_scores = scorer.score([r["doc"] for r in AGGREFACT], [r["claim"] for r in AGGREFACT])
    dev_scores = scorer.score([r["doc"] for r in dev], [r["claim"] for r in dev])
    thresholds = {name: _choose_best_threshold([dev[i]["label"] for i, r in enumerate(dev) if r["dataset"] == name],
                                               [dev_scores[i] for i, r in enumerate(dev) if r["dataset"] == name])
                  for name in dict.fromkeys(r["dataset"] for r in dev)}
    assert cli(["evaluate", "--aggrefact", str(_jsonl(tmp_path / "test.jsonl", AGGREFACT)), "--method", "alignscore",
                "--model", str(path), "--backbone", str(backbone), "--dev", str(_jsonl(tmp_path / "dev.jsonl", dev)),
                "--output", str(tmp_path / "r.json")]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert "dev file" in report["threshold_rule"]
    for name, value in _report_by_hand(AGGREFACT, test_scores, thresholds).items():
        assert report["datasets"][name]["threshold"] == pytest.approx(thresholds[name], abs=1e-6)
        assert report["datasets"][name]["balanced_accuracy"] == pytest.approx(value)


def test_the_command_refuses_before_loading(tmp_path, capsys):
    good = _jsonl(tmp_path / "a.jsonl", AGGREFACT)
    bad = _jsonl(tmp_path / "b.jsonl", [AGGREFACT[0], {"doc": DOC, "claim": "c", "label": 7, "dataset": "x"}])
    model = ["--model", str(tmp_path / "no-such-model")]  # never loaded: each refusal comes first
    cases = [(["--aggrefact", str(bad), "--method", "minicheck"], "b.jsonl, line 2: field 'label'"),
             (["--aggrefact", str(good), "--method", "lettuce"], "gives spans"),
             (["--aggrefact", str(good), "--method", "minicheck", "--threshold", "0.3", "--dev", str(good)],
              "not both"),
             (["--ragtruth", str(tmp_path), "--method", "minicheck", "--dev", str(good)], "--dev goes with"),
             (["--aggrefact", str(good), "--method", "minicheck", "--output", str(tmp_path / "r.csv")],
              "name a .json file")]
    for argv, message in cases:
        assert cli(["evaluate", *argv, *model]) == 2
        assert message in capsys.readouterr().err


# -- RAGTruth files ----------------------------------------------------------------------------------------------

PASSAGES = "passage 1: The tower was built in Paris and opened in 1889.\npassage 2: The company grew by 5%."
SOURCES = [
    {"source_id": "s1", "task_type": "QA", "source_info": {"question": "When did the tower open?",
                                                          "passages": PASSAGES},
     "prompt": "Briefly answer the following question:\nWhen did the tower open?\n" + PASSAGES + "\noutput:"},
    {"source_id": "s2", "task_type": "Summary", "source_info": "The minister said the market grew in the city.",
     "prompt": "Summarize the following news within 50 words:\nThe minister said the market grew in the city.\n"
               "output:"},
    {"source_id": "s3", "task_type": "Data2txt", "source_info": {"name": "Café Paris", "stars": 4.5},
     "prompt": "Write an objective overview about the following local business: {\"name\": \"Café Paris\"}"},
]
ANSWERS = ["The tower opened in 1889 in Paris.", "The tower opened in 1920, police said.",
           "The minister said the market grew.", "The minister resigned and the market fell sharply.",
           "Café Paris has 4.5 stars.", "Café Paris, open since 1850, has five stars and a garden."]


def _responses(split=("test", "test", "train", "test", "test", "test")):
    out = []
    for i, answer in enumerate(ANSWERS):
        labels = []
        if i % 2:  # the odd responses hallucinate their second half
            start = len(answer) // 2
            labels = [{"start": start, "end": len(answer), "text": answer[start:], "label_type": "Evident Conflict",
                       "meta": ""}]
        out.append({"id": str(i), "source_id": SOURCES[i // 2]["source_id"], "model": "gpt-4-0613",
                    "temperature": 0.7, "labels": labels, "split": split[i], "quality": "good", "response": answer})
    return out


def _ragtruth(directory, responses=None, sources=None):
    directory.mkdir(exist_ok=True)
    _jsonl(directory / "response.jsonl", _responses() if responses is None else responses)
    _jsonl(directory / "source_info.jsonl", SOURCES if sources is None else sources)
    return directory


def test_ragtruth_rows_are_matched_to_their_sources(tmp_path):
    directory = _ragtruth(tmp_path / "rt")
    rows = ev.read_ragtruth(directory)
    assert [r.id for r in rows] == ["0", "1", "3", "4", "5"]  # the test split, in file order
    assert [r.line for r in rows] == [1, 2, 4, 5, 6]
    assert len(ev.read_ragtruth(directory, split="all")) == 6 and len(ev.read_ragtruth(directory, split="train")) == 1
    by_id = {r.id: r for r in rows}
    assert by_id["0"].prompt == SOURCES[0]["prompt"] and by_id["0"].document == PASSAGES
    assert by_id["3"].document == SOURCES[1]["source_info"] and by_id["3"].task_type == "Summary"
    assert json.loads(by_id["5"].document) == SOURCES[2]["source_info"]
    assert [r.hallucinated for r in rows] == [0, 1, 1, 0, 1]


@pytest.mark.parametrize("change, where, message", [
    (lambda rs, ss: rs[2].update(source_id="s9"), "response.jsonl, line 3: field 'source_id'", "'s9' is not in"),
    (lambda rs, ss: rs[3].update(id="0"), "response.jsonl, line 4: field 'id'", "'0' is given twice"),
    (lambda rs, ss: rs[1]["labels"][0].update(end=999), "response.jsonl, line 2: field 'labels[0]'", "within"),
    (lambda rs, ss: rs[0].pop("response"), "response.jsonl, line 1: field 'response'", "missing"),
    (lambda rs, ss: rs[0].update(labels=None), "response.jsonl, line 1: field 'labels'", "must be a list"),
    (lambda rs, ss: ss[1].update(source_info={"text": "x"}), "source_info.jsonl, line 2: field 'source_info'",
     "a Summary source's is a string"),
    (lambda rs, ss: ss[0].update(task_type="Chat"), "source_info.jsonl, line 1: field 'task_type'", "must be one of"),
    (lambda rs, ss: ss[2].update(source_id="s1"), "source_info.jsonl, line 3: field 'source_id'", "given twice"),
    (lambda rs, ss: ss[0]["source_info"].pop("passages"), "source_info.jsonl, line 1: field 'source_info.passages'",
     "passages"),
])
def test_a_bad_ragtruth_line_is_named_by_file_line_and_field(tmp_path, change, where, message):
    responses, sources = _responses(), json.loads(json.dumps(SOURCES))
    change(responses, sources)
    directory = _ragtruth(tmp_path / "rt", responses, sources)
    with pytest.raises(ev.DataError, match=f"{re.escape(where)}: .*{message}"):
        ev.read_ragtruth(directory)


def test_minicheck_on_ragtruth(tmp_path, minicheck_dir):
    directory = _ragtruth(tmp_path / "rt")
    rows = ev.read_ragtruth(directory)
    scores = ma.MiniCheckScorer.from_pretrained(minicheck_dir).score([r.document for r in rows],
                                                                     [r.response for r in rows])
    threshold = float(np.median(scores))  # both outcomes occur
    assert cli(["evaluate", "--ragtruth", str(directory), "--method", "minicheck", "--model", str(minicheck_dir),
                "--threshold", str(threshold), "--output", str(tmp_path / "r.json")]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    labels, preds = [r.hallucinated for r in rows], [int(not s > threshold) for s in scores]
    p, r, f, _ = precision_recall_fscore_support(labels, preds, labels=[0, 1], average=None, zero_division=0)
    assert (report["precision"], report["recall"], report["f1"]) == pytest.approx((p[1], r[1], f[1]))
    assert report["balanced_accuracy"] == pytest.approx(balanced_accuracy_score(labels, preds))
    assert report["rows"] == 5 and set(report["by_task"]) == {"QA", "Summary", "Data2txt"} and "char" not in report


@pytest.fixture(scope="module")
def lettuce_dir(tmp_path_factory):
    """A tiny random ModernBertForTokenClassification of two labels, its label-1 bias set so both labels occur (as
    tests/products/test_lettuce.py builds its detectors)."""
    directory = tmp_path_factory.mktemp("lettuce-eval")
    row = FAMILIES["modernbert"]
    vocab = write_tokenizer(row, directory, wordpiece_dir=None, bpe_dir=None)
    model = hf_model(row, vocab, num_labels=2, head="ForTokenClassification", max_position_embeddings=4096)
    with torch.no_grad():
        model.classifier.weight.mul_(8)
        logits = model(input_ids=torch.arange(5, min(vocab, 200))[None]).logits[0]
        model.classifier.bias[1] -= (logits[:, 1] - logits[:, 0]).median()
    model.save_pretrained(directory)
    return directory


def test_lettuce_on_ragtruth_is_lettucedetects_evaluation(tmp_path, lettuce_dir):
    pytest.importorskip("lettucedetect", reason="the reference: pip install lettucedetect (a test extra)")
    from lettucedetect.models.evaluator import evaluate_detector_char_level, evaluate_detector_example_level
    from lettucedetect.models.inference import HallucinationDetector
    from lettucedetect.preprocess.preprocess_ragtruth import create_sample

    directory = _ragtruth(tmp_path / "rt")
    assert cli(["evaluate", "--ragtruth", str(directory), "--method", "lettuce", "--model", str(lettuce_dir),
                "--split", "all", "--output", str(tmp_path / "r.json"),
                "--predictions", str(tmp_path / "p.jsonl")]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    sources = {s["source_id"]: s for s in SOURCES}
    samples = [create_sample(r, sources[r["source_id"]]) for r in _responses()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = HallucinationDetector(method="transformer", model_path=str(lettuce_dir), device="cpu")
        char = evaluate_detector_char_level(theirs, samples)
        example = evaluate_detector_example_level(theirs, samples, verbose=False)
    assert report["char"] == pytest.approx(char)
    assert {k: report[k] for k in ("precision", "recall", "f1")} == pytest.approx(example["hallucinated"])
    predictions = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert [p["id"] for p in predictions] == [str(i) for i in range(6)]
    assert any(p["predicted"] for p in predictions)
    assert all(p["predicted"] == int(bool(p["spans"])) for p in predictions)
