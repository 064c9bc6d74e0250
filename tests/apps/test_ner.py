"""ma.TokenClassifier on every face, from its one product-table entry ("ner", apps/products.py): `minialign ner` on a
text and on files (jsonl / csv in, .jsonl out, --resume, --workers), the Ray Data class on numpy and pandas batches,
and the service (`serve --ner`): POST /rows/ner, HF Inference's token-classification driven by huggingface_hub's
InferenceClient on POST / and on /pipeline/token-classification, POST / telling it from text-classification when a
classifier is loaded too, bad bodies refused by field. Every answer equals TokenClassifier.predict's (the product's own
parity with transformers' pipeline: tests/products/test_token_classification.py). One tiny BERT token classifier
(all-MiniLM-L6-v2's WordPiece) serves the module; the service runs in this process on 127.0.0.1."""

from __future__ import annotations

import json

import pytest
from conftest import save_classifier, save_tagger

import minialign as ma
from minialign.apps import raydata
from minialign.apps.cli import main as cli

TEXTS = ["Angela Merkel visited Zürich and Genève, then New-York.", "", "Emoji 😀 and supercalifragilistic words",
         "  Several   spaces\tand\nnewlines  "]
LONG = " ".join(["Angela Merkel visited Zürich and Genève, then New-York;"] * 6)  # over the 64-token window


@pytest.fixture(scope="module")
def tagger(tmp_path_factory, wordpiece_dir):
    """(a transformers BertForTokenClassification directory with 6 labels and MiniLM's WordPiece, 64-token window:
    conftest.save_tagger; the TokenClassifier loaded from it)."""
    directory = save_tagger(tmp_path_factory.mktemp("ner"), wordpiece_dir)
    return directory, ma.TokenClassifier.from_pretrained(directory)


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _rows(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_ner_on_a_text_and_on_files(tagger, tmp_path, capsys):
    directory, ours = tagger
    model = ["ner", "--model", str(directory)]
    assert cli([*model, "--text", TEXTS[0]]) == 0  # the entities as a JSON list, the product's defaults ("none")
    assert json.loads(capsys.readouterr().out) == ours.predict(TEXTS[0])
    assert cli([*model, "--text", TEXTS[0], "--aggregation-strategy", "first", "--ignore-labels", "O,MISC"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == ours.predict(TEXTS[0], aggregation_strategy="first", ignore_labels=["O", "MISC"])
    assert printed and {e["entity_group"] for e in printed} <= {"PER", "LOC"}

    # a file: one record per row, the row's entities; CSV in, .jsonl out; stride reads the long row whole
    source = _jsonl(tmp_path / "in.jsonl", [{"id": f"t{i}", "body": t} for i, t in enumerate(TEXTS + [LONG])])
    out = tmp_path / "out.jsonl"
    args = [*model, "--input", str(source), "--output", str(out), "--text-field", "body",
            "--aggregation-strategy", "simple", "--stride", "8", "--ignore-labels", "", "--workers", "2"]
    assert cli(args) == 0
    assert "tagged 5 row(s)" in capsys.readouterr().err
    expected = ours.predict(TEXTS + [LONG], aggregation_strategy="simple", stride=8, ignore_labels=[])
    rows = _rows(out)
    assert [r["id"] for r in rows] == [f"t{i}" for i in range(5)]
    assert [r["entities"] for r in rows] == expected
    assert rows[1]["entities"] == [] and rows[-1]["entities"][-1]["end"] > len(LONG) - 10
    settings = json.loads((tmp_path / "out.jsonl.settings.json").read_text())["settings"]
    assert {k: settings[k] for k in ("aggregation_strategy", "ignore_labels", "stride")} == \
        {"aggregation_strategy": "simple", "ignore_labels": [], "stride": 8}

    # --resume: an interrupted output continues with the same settings, and is refused with others
    whole = out.read_text(encoding="utf-8")
    out.write_text("".join(whole.splitlines(keepends=True)[:2]), encoding="utf-8")
    assert cli([*args[:-2], "--resume"]) == 0
    assert out.read_text(encoding="utf-8") == whole
    capsys.readouterr()
    assert cli([*args[:-2], "--resume", "--aggregation-strategy", "max"]) == 2
    assert "aggregation_strategy: 'simple' then, 'max' now" in capsys.readouterr().err

    csv_in = tmp_path / "in.csv"
    csv_in.write_text("id,text\n1,Angela Merkel visited Zürich.\n2,\n", encoding="utf-8")
    assert cli([*model, "--input", str(csv_in), "--output", str(tmp_path / "csv.jsonl")]) == 0
    assert [r["entities"] for r in _rows(tmp_path / "csv.jsonl")] == ours.predict(["Angela Merkel visited Zürich.", ""])


def test_ner_refusals_name_the_flag(tagger, tmp_path, capsys):
    directory, _ = tagger
    model = ["ner", "--model", str(directory)]
    source = _jsonl(tmp_path / "in.jsonl", [{"text": "a"}])
    for args, message in [
            (["--input", str(source), "--output", str(tmp_path / "out.csv")],
             "--output " + str(tmp_path / "out.csv") + " has an unknown format '.csv'; name a .jsonl file"),
            (["--text", "x", "--stride", "4"], "--stride reads a text in overlapping windows"),
            (["--text", "x", "--aggregation-strategy", "simple", "--stride", "62"], "--stride must be an int >= 0"),
            (["--text", "x", "--input", str(source)], "--input and --output go together")]:
        assert cli([*model, *args]) == 2, args
        assert message in capsys.readouterr().err, args
    with pytest.raises(SystemExit):
        cli([*model, "--text", "x", "--aggregation-strategy", "mean"])
    assert "invalid choice: 'mean'" in capsys.readouterr().err


def test_ner_batches_on_numpy_and_pandas_batches(tagger):
    """NERBatches (the table's Ray class), called as map_batches calls it: the entities column holds each row's list of
    entities (Arrow's list of structs, empty lists too), equal to predict's."""
    pandas = pytest.importorskip("pandas")
    directory, ours = tagger
    assert raydata.batches_class("ner") is raydata.NERBatches
    mapper = raydata.NERBatches(str(directory), aggregation_strategy="average", ignore_labels=["O", "PER"])
    expected = ours.predict(TEXTS, aggregation_strategy="average", ignore_labels=["O", "PER"])
    batch = mapper({"id": [0, 1, 2, 3], "text": TEXTS})
    assert batch["entities"].dtype == object and [list(row) for row in batch["entities"]] == expected
    frame = mapper(pandas.DataFrame({"id": [0, 1, 2, 3], "text": TEXTS}))
    assert list(frame["entities"]) == expected
    with pytest.raises(ValueError, match="stride reads"):
        raydata.NERBatches(str(directory), stride=3)
    with pytest.raises(TypeError, match="unexpected keyword"):
        raydata.NERBatches(str(directory), aggregation="simple")


# -- the service -------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def services(tagger, tmp_path_factory, minilm_dir):
    """Two services in this process: (the token classifier alone, loaded as `serve --ner DIR` loads it; it beside a
    3-label classifier); their urls."""
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    from test_products import running, served_as

    from minialign.apps.serve import Limits, Models, Service

    directory, _ = tagger
    classifier = tmp_path_factory.mktemp("clf") / "nli"
    save_classifier(classifier, "bert", 3, minilm_dir)
    alone = served_as("ner", str(directory))
    both = Models(classifier=ma.Classifier.from_pretrained(classifier), products=dict(alone.products),
                  names={"classify": str(classifier), "ner": str(directory)})
    with running(Service(alone, Limits())) as one, running(Service(both, Limits())) as two:
        yield one, two, classifier


def _elements(elements) -> list[dict]:
    """huggingface_hub's TokenClassificationOutputElements as the pipeline's dicts."""
    keys = ("entity", "entity_group", "score", "index", "word", "start", "end")
    return [{k: getattr(e, k) for k in keys if getattr(e, k, None) is not None} for e in elements]


def _same(got: list[dict], expected: list[dict]) -> None:
    assert [{k: v for k, v in e.items() if k != "score"} for e in got] == \
        [{k: v for k, v in e.items() if k != "score"} for e in expected]
    assert [e["score"] for e in got] == pytest.approx([e["score"] for e in expected], abs=1e-6)


def test_inference_client_token_classification(services, tagger, monkeypatch):
    """huggingface_hub's InferenceClient.token_classification, unchanged, on POST / (its base_url) and on
    /pipeline/token-classification: the product's entities for every strategy, ignore_labels and stride."""
    from test_serve import inference_client

    one, two, _ = services
    _, ours = tagger
    client = inference_client(one, monkeypatch)
    _same(_elements(client.token_classification(TEXTS[0])), ours.predict(TEXTS[0]))  # "none": entity, index
    for strategy in ("simple", "first", "average", "max"):
        _same(_elements(client.token_classification(TEXTS[0], aggregation_strategy=strategy, ignore_labels=["O"])),
              ours.predict(TEXTS[0], aggregation_strategy=strategy))
    _same(_elements(client.token_classification(LONG, aggregation_strategy="max", stride=10, ignore_labels=[])),
          ours.predict(LONG, aggregation_strategy="max", stride=10, ignore_labels=[]))
    assert client.token_classification("") == []  # as the pipeline answers an empty text
    # beside a classifier: the parameters tell the tasks apart, and each has its own path
    pipeline = inference_client(two + "/pipeline/token-classification", monkeypatch)
    _same(_elements(pipeline.token_classification(TEXTS[2])), ours.predict(TEXTS[2]))
    both = inference_client(two, monkeypatch)
    _same(_elements(both.token_classification(TEXTS[0], aggregation_strategy="simple")),
          ours.predict(TEXTS[0], aggregation_strategy="simple"))


def test_post_root_tells_the_tasks_apart(services, monkeypatch):
    from test_serve import call, inference_client

    _, two, classifier = services
    clf = ma.Classifier.from_pretrained(classifier)
    expected = sorted(zip(clf.labels, clf.predict([TEXTS[0]])[0].tolist()), key=lambda x: -x[1])
    labels = inference_client(two, monkeypatch).text_classification(TEXTS[0], top_k=2)  # top_k: text-classification's
    assert [(e.label, e.score) for e in labels] == [(label, pytest.approx(s, abs=1e-6)) for label, s in expected[:2]]
    labels = inference_client(two + "/pipeline/text-classification", monkeypatch).text_classification(TEXTS[0])
    assert [e.label for e in labels] == [label for label, _ in expected]
    status, body = call(two, "/", {"inputs": TEXTS[0], "parameters": {}})  # either task's body
    assert status == 422 and "/pipeline/text-classification or /pipeline/token-classification" in body["error"]
    status, body = call(two, "/", {"inputs": TEXTS[0], "parameters": {"top_k": 1, "stride": 2}})
    assert status == 422 and "fit none of" in body["error"]
    status, body = call(two, "/", {"inputs": [TEXTS[0]]})  # TEI's /predict body still reaches the classifier
    assert status == 200 and {d["label"] for d in body} == set(clf.labels)


def test_rows_route_and_info(services, tagger):
    from test_serve import call

    one, two, _ = services
    directory, ours = tagger
    status, body = call(one, "/rows/ner", {"rows": [{"text": t} for t in TEXTS],
                                           "options": {"aggregation_strategy": "first", "ignore_labels": ["O", "MISC"]}})
    assert status == 200
    assert [r["entities"] for r in body["results"]] == \
        ours.predict(TEXTS, aggregation_strategy="first", ignore_labels=["O", "MISC"])
    routes = call(one, "/info")[1]["models"]["ner"]
    assert routes["kind"] == "ner" and routes["model_id"] == str(directory)
    assert routes["routes"] == ["/", "/pipeline/token-classification", "/rows/ner"]
    assert "POST /pipeline/token-classification" in call(one, "/")[1]
    assert "/pipeline/text-classification" in call(two, "/info")[1]["models"]["classify"]["routes"]
    status, body = call(one, "/pipeline/text-classification", {"inputs": "x"})  # no classifier here
    assert status == 404 and "start the service with --classify SRC" in body["error"]


@pytest.mark.parametrize(("path", "body", "status", "message"), [
    ("/", {"inputs": "x", "parameters": {"aggregation_strategy": "mean"}}, 422,
     "`parameters.aggregation_strategy` must be one of 'none', 'simple', 'first', 'average' or 'max', got 'mean'"),
    ("/", {"inputs": "x", "parameters": {"stride": 4}}, 422, "`parameters.stride` reads a text in overlapping windows"),
    ("/", {"inputs": "x", "parameters": {"aggregation_strategy": "simple", "stride": 62}}, 422,
     "`parameters.stride` must be an int >= 0 and below the window's room"),
    ("/", {"inputs": "x", "parameters": {"aggregation_strategy": "simple", "stride": "4"}}, 422,
     "`parameters.stride` must be an integer, got str"),
    ("/", {"inputs": "x", "parameters": {"ignore_labels": "O"}}, 422, "`parameters.ignore_labels` must be a list, got str"),
    ("/", {"inputs": "x", "parameters": {"ignore_labels": ["O", 5]}}, 422, "`parameters.ignore_labels[1]` must be a string, got int"),
    ("/", {"inputs": "x", "parameters": {"top_k": 2}}, 422, "`parameters` ['top_k']: not parameters of token-"),
    ("/", {"inputs": "x", "parameters": ["simple"]}, 422, "`parameters` must be an object"),
    ("/pipeline/token-classification", {"inputs": ["a", "b"]}, 422, "`inputs` must be a string, got list"),
    ("/pipeline/token-classification", {"text": "a"}, 422, "`inputs` is missing (fields given: `text`)"),
    ("/pipeline/token-classification", {"inputs": "a\udc80"}, 422, "`inputs`"),
    ("/pipeline/token-classification", {"inputs": LONG}, 413, "`inputs` must have less than 64 tokens"),
    ("/rows/ner", {"rows": [{"text": "x"}], "options": {"stride": 3}}, 422, "`options.stride` reads a text"),
    ("/rows/ner", {"rows": [{"text": 5}]}, 422, "`rows[0]`: field 'text' is int, not a string"),
])
def test_bad_requests_are_refused_by_field(services, path, body, status, message):
    from test_serve import call

    one, _, _ = services
    got, answer = call(one, path, body)
    assert got == status and message in answer["error"], answer


def test_a_long_text_is_cut_when_the_body_says_truncate(services, tagger):
    from test_serve import call

    one, _, _ = services
    _, ours = tagger
    status, body = call(one, "/", {"inputs": LONG, "truncate": True, "parameters": {"aggregation_strategy": "simple"}})
    assert status == 200 and body == ours.predict(LONG, aggregation_strategy="simple", warn_truncation=False)
