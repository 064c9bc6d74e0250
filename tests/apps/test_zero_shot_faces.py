"""ma.ZeroShotClassifier on every face, from its one product-table entry ("zero-shot", apps/products.py): `minialign
zero-shot` on a text and on files (jsonl / csv in, .jsonl out, --resume, --workers, rows carrying their own labels
with --candidate-labels-field), the Ray Data class on numpy and pandas batches (and, marked slow, on a local Ray with
`zero-shot --ray`), and the service (`serve --zero-shot`): POST /rows/zero-shot, HF Inference's
zero-shot-classification driven by huggingface_hub's InferenceClient on POST / and on
/pipeline/zero-shot-classification, POST / telling it from text-classification when a classifier is loaded too,
concurrent requests with different labels sharing one job, bad bodies refused by field. Every answer equals
ZeroShotClassifier.predict's exactly (the product's own parity with transformers' pipeline:
tests/products/test_zero_shot.py). One tiny BERT NLI model (all-MiniLM-L6-v2's WordPiece, a 64-token window) serves
the module; the service runs in this process on 127.0.0.1."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

import minialign as ma
from minialign.apps import raydata
from minialign.apps.cli import main as cli
from minialign.runtime.engine import TruncationWarning

NLI = ["contradiction", "neutral", "entailment"]
TEXTS = ["Angela Merkel visited Zürich and Genève, then New-York.", "Emoji 😀 and supercalifragilistic words",
         "  Several   spaces\tand\nnewlines  ", "Der Zug kam spät an."]
LABELS = ["politics", "sports", "travel", "économie"]
LONG = " ".join(["Angela Merkel visited Zürich and Genève, then New-York;"] * 6)  # over the 64-token window


@pytest.fixture(scope="module")
def nli(tmp_path_factory, wordpiece_dir):
    """(a transformers BertForSequenceClassification directory with NLI labels and MiniLM's WordPiece, 64-token
    window, weights of std 0.3 so that the labels' scores differ; the ZeroShotClassifier loaded from it)."""
    from family_builders import FAMILIES, hf_model, write_tokenizer

    directory = tmp_path_factory.mktemp("zero-shot")
    row = FAMILIES["bert"]
    vocab = write_tokenizer(row, directory, wordpiece_dir=wordpiece_dir, bpe_dir=None)
    model = hf_model(row, vocab, num_labels=len(NLI), id2label=dict(enumerate(NLI)),
                     label2id={label: i for i, label in enumerate(NLI)}, initializer_range=0.3)
    model.save_pretrained(directory)
    ours = ma.ZeroShotClassifier.from_pretrained(directory)
    scores = ours.predict(TEXTS[0], LABELS)["scores"]
    assert len(set(scores)) == len(LABELS) and max(scores) - min(scores) > 1e-3  # an order that is no coin toss
    return directory, ours


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _rows(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_zero_shot_on_a_text_and_on_files(nli, tmp_path, capsys):
    directory, ours = nli
    model = ["zero-shot", "--model", str(directory)]
    assert cli([*model, "--text", TEXTS[0], "--candidate-labels", "politics, sports,travel , économie"]) == 0
    assert json.loads(capsys.readouterr().out) == ours.predict(TEXTS[0], LABELS)  # the pipeline's dict
    assert cli([*model, "--text", TEXTS[1], "--candidate-labels", "politics,sports", "--multi-label",
                "--hypothesis-template", "The topic is {}."]) == 0
    assert json.loads(capsys.readouterr().out) == \
        ours.predict(TEXTS[1], ["politics", "sports"], multi_label=True, hypothesis_template="The topic is {}.")

    # a file: one record per row, the pipeline's dict; the long row cut (counted, warned once at the end)
    source = _jsonl(tmp_path / "in.jsonl", [{"id": f"t{i}", "body": t} for i, t in enumerate(TEXTS + [LONG])])
    out = tmp_path / "out.jsonl"
    args = [*model, "--input", str(source), "--output", str(out), "--text-field", "body", "--candidate-labels",
            ",".join(LABELS), "--hypothesis-template", "It is about {}.", "--multi-label", "--workers", "2"]
    with pytest.warns(TruncationWarning, match=f"{len(LABELS)} of {5 * len(LABELS)} \\(text, hypothesis\\) pair"):
        assert cli(args) == 0  # the long row's pairs
    assert "classified 5 row(s)" in capsys.readouterr().err
    expected = ours.predict(TEXTS + [LONG], LABELS, hypothesis_template="It is about {}.", multi_label=True,
                            warn_truncation=False)
    rows = _rows(out)
    assert [r["id"] for r in rows] == [f"t{i}" for i in range(5)]
    assert [{k: v for k, v in r.items() if k != "id"} for r in rows] == expected
    settings = json.loads((tmp_path / "out.jsonl.settings.json").read_text())["settings"]
    assert {k: settings[k] for k in ("candidate_labels", "candidate_labels_field", "hypothesis_template",
                                     "multi_label")} == \
        {"candidate_labels": LABELS, "candidate_labels_field": None, "hypothesis_template": "It is about {}.",
         "multi_label": True}

    # --resume: an interrupted output continues with the same settings, and is refused with other labels
    whole = out.read_text(encoding="utf-8")
    out.write_text("".join(whole.splitlines(keepends=True)[:2]), encoding="utf-8")
    with pytest.warns(TruncationWarning):
        assert cli([*args[:-2], "--resume"]) == 0
    assert out.read_text(encoding="utf-8") == whole
    capsys.readouterr()
    assert cli([*args[:-2], "--resume", "--candidate-labels", "politics,sports"]) == 2
    assert "candidate_labels: ['politics', 'sports', 'travel', 'économie'] then, ['politics', 'sports'] now" in \
        capsys.readouterr().err

    csv_in = tmp_path / "in.csv"
    csv_in.write_text("id,text\n1,Angela Merkel visited Zürich.\n2,Der Zug kam spät an.\n", encoding="utf-8")
    assert cli([*model, "--input", str(csv_in), "--output", str(tmp_path / "csv.jsonl"),
                "--candidate-labels", "politics,travel"]) == 0
    assert [{k: v for k, v in r.items() if k != "id"} for r in _rows(tmp_path / "csv.jsonl")] == \
        ours.predict(["Angela Merkel visited Zürich.", "Der Zug kam spät an."], ["politics", "travel"])


def test_rows_with_their_own_labels(nli, tmp_path, capsys):
    """--candidate-labels-field: a row holding the field is classified under its own labels (a comma-separated
    string), a row without it (absent, null or "") under --candidate-labels; each row's record is what
    predict gives that text with those labels."""
    directory, ours = nli
    own = ["sports, travel", None, "économie", ""]  # "": no labels of its own, as absent or null
    source = _jsonl(tmp_path / "in.jsonl", [{"id": i, "text": t, **({} if i == 1 else {"labels": o})}
                                            for i, (t, o) in enumerate(zip(TEXTS, own))])
    out = tmp_path / "out.jsonl"
    assert cli(["zero-shot", "--model", str(directory), "--input", str(source), "--output", str(out),
                "--candidate-labels-field", "labels", "--candidate-labels", "politics,travel"]) == 0
    expected = [ours.predict(t, o or "politics,travel") for t, o in zip(TEXTS, own)]
    assert [{k: v for k, v in r.items() if k != "id"} for r in _rows(out)] == expected
    assert [sorted(r["labels"]) for r in _rows(out)] == [["sports", "travel"], ["politics", "travel"], ["économie"],
                                                         ["politics", "travel"]]

    csv_in = tmp_path / "in.csv"
    csv_in.write_text('id,text,labels\n1,Angela Merkel visited Zürich.,"sports,politics"\n2,Der Zug kam spät an.,\n',
                      encoding="utf-8")
    assert cli(["zero-shot", "--model", str(directory), "--input", str(csv_in), "--output", str(tmp_path / "c.jsonl"),
                "--candidate-labels-field", "labels", "--candidate-labels", "travel"]) == 0
    assert [{k: v for k, v in r.items() if k != "id"} for r in _rows(tmp_path / "c.jsonl")] == \
        [ours.predict("Angela Merkel visited Zürich.", ["sports", "politics"]), ours.predict("Der Zug kam spät an.",
                                                                                            ["travel"])]

    # without --candidate-labels every row needs its own; the rows that lack them, or hold none, are named by line
    # (the labels field is the job's, checked once the model is loaded; an empty text is refused before: the refusals)
    bad = _jsonl(tmp_path / "bad.jsonl", [{"text": "a", "labels": "x"}, {"text": "b"}, {"text": "c", "labels": " , "},
                                          {"text": "d", "labels": ["x", "y"]}, {"text": "e", "labels": None}])
    capsys.readouterr()
    assert cli(["zero-shot", "--model", str(directory), "--input", str(bad), "--output", str(tmp_path / "b.jsonl"),
                "--candidate-labels-field", "labels"]) == 2
    err = capsys.readouterr().err
    assert "4 malformed row(s), nothing done" in err
    assert "line 2: field 'labels' is missing (or null or empty), and no candidate_labels were given" in err
    assert "line 3: field 'labels' holds no usable labels (candidate_labels is empty (' , ')" in err
    assert "line 4: field 'labels' is list, not a string" in err
    assert "line 5: field 'labels' is missing (or null or empty)" in err
    assert not (tmp_path / "b.jsonl").exists()


def test_zero_shot_refusals_name_the_flag(nli, tmp_path, capsys):
    directory, _ = nli
    model = ["zero-shot", "--model", str(directory)]
    source = _jsonl(tmp_path / "in.jsonl", [{"text": "a"}, {"text": ""}])
    for args, message in [
            (["--input", str(source), "--output", str(tmp_path / "out.csv"), "--candidate-labels", "a"],
             "--output " + str(tmp_path / "out.csv") + " has an unknown format '.csv'; name a .jsonl file"),
            (["--text", "x"], "--candidate-labels is required: the labels to choose from"),
            (["--text", "x", "--candidate-labels", " , "], "--candidate-labels is empty ([]): give at least one label"),
            (["--text", "x", "--candidate-labels", "a", "--hypothesis-template", "About it."],
             "--hypothesis-template 'About it.' has no {} for the label"),
            (["--text", "x", "--candidate-labels", "a", "--hypothesis-template", "About {topic}."],
             "--hypothesis-template 'About {topic}.' could not be formatted with a label"),
            (["--text", "", "--candidate-labels", "a"], "text is empty (a zero-shot classifier needs a text"),
            (["--input", str(source), "--output", str(tmp_path / "out.jsonl"), "--candidate-labels", "a"],
             "line 2: field 'text' is empty")]:  # before the model loads (the table's check)
        assert cli([*model, *args]) == 2, args
        assert message in capsys.readouterr().err, args
    assert not (tmp_path / "out.jsonl").exists()


def test_zero_shot_batches_on_numpy_and_pandas_batches(nli):
    """ZeroShotBatches (the table's Ray class), called as map_batches calls it: the sequence, labels and scores columns
    hold each row's (labels and scores as each row's list: Arrow's list column), equal to predict's; rows with their
    own labels too."""
    pandas = pytest.importorskip("pandas")
    directory, ours = nli
    assert raydata.batches_class("zero-shot") is raydata.ZeroShotBatches
    mapper = raydata.ZeroShotBatches(str(directory), candidate_labels=LABELS, multi_label=True)
    expected = ours.predict(TEXTS, LABELS, multi_label=True)
    batch = mapper({"id": [0, 1, 2, 3], "text": TEXTS})
    assert batch["labels"].dtype == object and batch["scores"].dtype == object
    assert [{"sequence": s, "labels": list(l), "scores": list(c)}
            for s, l, c in zip(batch["sequence"], batch["labels"], batch["scores"])] == expected
    frame = mapper(pandas.DataFrame({"id": [0, 1, 2, 3], "text": TEXTS}))
    assert frame[["sequence", "labels", "scores"]].to_dict("records") == expected

    own = raydata.ZeroShotBatches(str(directory), candidate_labels=["travel"], candidate_labels_field="labels")
    labels = ["politics,sports", None, "économie, travel", None]
    expected = [ours.predict(t, ["travel"] if o is None else o) for t, o in zip(TEXTS, labels)]
    frame = own(pandas.DataFrame({"id": [0, 1, 2, 3], "text": TEXTS, "labels": labels}))
    assert frame[["sequence", "labels", "scores"]].to_dict("records") == expected
    batch = own({"id": [0, 1, 2, 3], "text": TEXTS, "labels": labels})
    assert [list(row) for row in batch["labels"]] == [r["labels"] for r in expected]
    with pytest.raises(ValueError, match="hypothesis_template 'x' has no {}"):
        raydata.ZeroShotBatches(str(directory), candidate_labels=["a"], hypothesis_template="x")
    with pytest.raises(ValueError, match="candidate_labels is required"):
        raydata.ZeroShotBatches(str(directory))
    with pytest.raises(TypeError, match="unexpected keyword"):
        raydata.ZeroShotBatches(str(directory), labels=["a"])


@pytest.mark.slow
def test_zero_shot_on_ray_writes_each_rows_ranking(nli, tmp_path):
    """`zero-shot --ray` to parquet on a local Ray (2 CPUs): each row's labels and scores as lists, rows with their
    own labels too, equal to predict's, every id once (ZeroShotBatches on numpy and pandas batches: above, without a
    Ray runtime)."""
    ray = pytest.importorskip("ray")
    pa_parquet = pytest.importorskip("pyarrow.parquet")
    directory, ours = nli
    texts = TEXTS * 3
    own = [None, "sports, travel", None, "économie"] * 3
    expected = [ours.predict(t, LABELS if o is None else o) for t, o in zip(texts, own)]
    rows = _jsonl(tmp_path / "rows.jsonl", [{"id": f"t{i}", "text": t, "labels": o}
                                            for i, (t, o) in enumerate(zip(texts, own))])
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
             configure_logging=False)
    try:
        assert cli(["zero-shot", "--ray", "--model", str(directory), "--input", str(rows), "--output",
                    str(tmp_path / "out"), "--candidate-labels", ",".join(LABELS), "--candidate-labels-field",
                    "labels", "--shards", "2", "--batch-rows", "3"]) == 0
        written = [r for f in sorted((tmp_path / "out").rglob("*.parquet")) for r in pa_parquet.read_table(f).to_pylist()]
        assert sorted(r["id"] for r in written) == sorted(f"t{i}" for i in range(len(texts)))
        by_id = {r["id"]: r for r in written}
        assert [{k: by_id[f"t{i}"][k] for k in ("sequence", "labels", "scores")} for i in range(len(texts))] == expected
    finally:
        ray.shutdown()


# -- the service -------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def services(nli):
    """Two services in this process: (the NLI model alone, loaded as `serve --zero-shot DIR` loads it; it beside the
    same model as a 3-label classifier); their urls, and the first's Service."""
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    from test_products import running, served_as

    from minialign.apps.serve import Limits, Models, Service

    directory, _ = nli
    alone = served_as("zero-shot", str(directory))
    both = Models(classifier=ma.Classifier.from_pretrained(directory), products=dict(alone.products),
                  names={"classify": str(directory), "zero-shot": str(directory)})
    service = Service(alone, Limits())
    with running(service) as one, running(Service(both, Limits())) as two:
        yield one, two, service


def _ranked(result: dict) -> list[tuple[str, float]]:
    return list(zip(result["labels"], result["scores"]))


def test_inference_client_zero_shot_classification(services, nli, monkeypatch):
    """huggingface_hub's InferenceClient.zero_shot_classification, unchanged, on POST / (its base_url) and on
    /pipeline/zero-shot-classification: the product's labels and scores, exactly, for every option; a label holding a
    comma stays one label (the client sends a list)."""
    from test_serve import inference_client

    one, two, _ = services
    _, ours = nli
    client = inference_client(one, monkeypatch)
    for text, labels, options in [(TEXTS[0], LABELS, {}), (TEXTS[1], LABELS, {"multi_label": True}),
                                  (TEXTS[2], ["politics", "sports"], {"hypothesis_template": "The topic is {}."}),
                                  (TEXTS[3], ["science, technology", "sports"], {}),
                                  (TEXTS[0], ["travel"], {})]:
        got = client.zero_shot_classification(text, labels, **options)
        assert [(e.label, e.score) for e in got] == _ranked(ours.predict(text, labels, **options)), options
    # beside a classifier: the parameters tell the tasks apart on POST /, and each task has its own path
    for url in (two, two + "/pipeline/zero-shot-classification"):
        got = inference_client(url, monkeypatch).zero_shot_classification(TEXTS[0], LABELS, multi_label=True)
        assert [(e.label, e.score) for e in got] == _ranked(ours.predict(TEXTS[0], LABELS, multi_label=True))


def test_requests_with_different_labels_share_one_job(services, nli, monkeypatch):
    """Concurrent requests, each with its own labels: each gets what predict gives its text and labels, and the
    service holds one job per (template, multi_label), not one per set of labels."""
    from test_serve import inference_client

    one, _, service = services
    _, ours = nli
    client = inference_client(one, monkeypatch)
    cases = [(TEXTS[i % len(TEXTS)], LABELS[: 1 + i % len(LABELS)][::-1] + [f"label {i}"]) for i in range(12)]
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda case: client.zero_shot_classification(*case), cases))
    for (text, labels), got in zip(cases, answers):
        assert [(e.label, e.score) for e in got] == _ranked(ours.predict(text, labels))
    jobs = [json.loads(options) for kind, options in service.jobs if kind == "zero-shot"]  # (kind, options) -> job
    assert jobs.count({"candidate_labels_field": "candidate_labels", "multi_label": False}) == 1
    assert not any("candidate_labels" in options for options in jobs)  # the labels travel in the rows


def test_rows_route_and_info(services, nli):
    from test_serve import call

    one, two, _ = services
    directory, ours = nli
    status, body = call(one, "/rows/zero-shot", {"rows": [{"text": t} for t in TEXTS],
                                                 "options": {"candidate_labels": LABELS, "multi_label": True}})
    assert status == 200 and body["results"] == ours.predict(TEXTS, LABELS, multi_label=True)
    own = ["sports,travel", None, "économie", None]
    status, body = call(one, "/rows/zero-shot", {"rows": [{"text": t, "labels": o} for t, o in zip(TEXTS, own)],
                                                 "options": {"candidate_labels": ["politics"],
                                                             "candidate_labels_field": "labels"}})
    assert status == 200
    assert body["results"] == [ours.predict(t, ["politics"] if o is None else o) for t, o in zip(TEXTS, own)]
    routes = call(one, "/info")[1]["models"]["zero-shot"]
    assert routes["kind"] == "zero-shot" and routes["model_id"] == str(directory)
    assert routes["routes"] == ["/", "/pipeline/zero-shot-classification", "/rows/zero-shot"]
    assert "POST /pipeline/zero-shot-classification" in call(one, "/")[1]
    status, body = call(two, "/", {"inputs": TEXTS[0], "parameters": {}})  # either task's body
    assert status == 422 and "/pipeline/text-classification or /pipeline/zero-shot-classification" in body["error"]
    status, body = call(one, "/pipeline/token-classification", {"inputs": "x"})  # no token classifier here
    assert status == 404 and "start the service with --ner SRC" in body["error"]


@pytest.mark.parametrize(("path", "body", "status", "message"), [
    ("/", {"inputs": "x", "parameters": {"candidate_labels": []}}, 422,
     "`parameters.candidate_labels` is empty ([]): give at least one label"),
    ("/", {"inputs": "x", "parameters": {"candidate_labels": " , "}}, 422,
     "`parameters.candidate_labels` is empty (' , ')"),
    ("/", {"inputs": "x", "parameters": {"candidate_labels": ["a", " "]}}, 422, "`parameters.candidate_labels[1]` is empty"),
    ("/", {"inputs": "x", "parameters": {"candidate_labels": ["a", 5]}}, 422,
     "`parameters.candidate_labels[1]` is int, not a string"),
    ("/", {"inputs": "x", "parameters": {"candidate_labels": 5}}, 422,
     "`parameters.candidate_labels` must be a list of labels or a string of comma-separated labels, got int"),
    ("/", {"inputs": "x", "parameters": {"multi_label": True}}, 422, "`parameters.candidate_labels` is required"),
    ("/", {"inputs": "x", "parameters": {"candidate_labels": ["a"], "hypothesis_template": "About it."}}, 422,
     "`parameters.hypothesis_template` 'About it.' has no {} for the label"),
    ("/", {"inputs": "x", "parameters": {"candidate_labels": ["a"], "hypothesis_template": "{0} {1}"}}, 422,
     "`parameters.hypothesis_template` '{0} {1}' could not be formatted with a label"),
    ("/", {"inputs": "x", "parameters": {"candidate_labels": ["a"], "hypothesis_template": 3}}, 422,
     "`parameters.hypothesis_template` must be a string, got int"),
    ("/", {"inputs": "x", "parameters": {"candidate_labels": ["a"], "multi_label": "false"}}, 422,
     "`parameters.multi_label` must be a boolean, got str"),
    ("/", {"inputs": "x", "parameters": {"candidate_labels": ["a"], "candidate_labels_field": "labels"}}, 422,
     "`parameters` ['candidate_labels_field']: not parameters of zero-shot-classification"),
    ("/pipeline/zero-shot-classification", {"inputs": "", "parameters": {"candidate_labels": ["a"]}}, 400,
     "`inputs` cannot be empty"),
    ("/pipeline/zero-shot-classification", {"inputs": ["a", "b"], "parameters": {"candidate_labels": ["a"]}}, 422,
     "`inputs` must be a string, got list"),
    ("/pipeline/zero-shot-classification", {"inputs": LONG, "parameters": {"candidate_labels": ["a"]}}, 413,
     "`inputs` must have less than 64 tokens"),
    ("/rows/zero-shot", {"rows": [{"text": "x"}]}, 422, "`options.candidate_labels` is required"),
    ("/rows/zero-shot", {"rows": [{"text": "x"}], "options": {"candidate_labels": ["a"], "hypothesis_template": "."}},
     422, "`options.hypothesis_template` '.' has no {}"),
    ("/rows/zero-shot", {"rows": [{"text": ""}], "options": {"candidate_labels": ["a"]}}, 422,
     "`rows[0]`: field 'text' is empty"),
    ("/rows/zero-shot", {"rows": [{"text": "x", "labels": ","}], "options": {"candidate_labels_field": "labels"}}, 422,
     "`rows[0]`: field 'labels' holds no usable labels"),
])
def test_bad_requests_are_refused_by_field(services, path, body, status, message):
    from test_serve import call

    one, _, _ = services
    got, answer = call(one, path, body)
    assert got == status and message in answer["error"], answer


def test_a_long_text_is_cut_when_the_body_says_truncate(services, nli):
    from test_serve import call

    one, _, _ = services
    _, ours = nli
    status, body = call(one, "/", {"inputs": LONG, "truncate": True, "parameters": {"candidate_labels": LABELS}})
    assert status == 200
    assert [(e["label"], e["score"]) for e in body] == _ranked(ours.predict(LONG, LABELS, warn_truncation=False))
