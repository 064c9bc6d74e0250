"""ma.QuestionAnswerer on every face, from its one product-table entry ("qa", apps/products.py): `minialign qa` on a
question and a context and on files (jsonl / csv in; .jsonl or, with --top-k 1, .csv out; --resume, --workers), the Ray
Data class on numpy and pandas batches (and, slow, `qa --ray` on a local Ray), and the service (`serve --qa`): POST
/rows/qa, HF Inference's question-answering driven by huggingface_hub's InferenceClient on POST / and on
/pipeline/question-answering, POST / telling its body from similarity, embedding and classification bodies when an
embedding model and a classifier are loaded too, bad bodies refused by field. Every answer equals
QuestionAnswerer.predict's (the product's own parity with transformers 4's pipeline:
tests/products/test_question_answering.py). One tiny BERT QA model (tests/products/data/transformers4_qa/bert: a
64-token window) serves the module; the service runs in this process on 127.0.0.1."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import save_classifier

import minialign as ma
from minialign.apps import raydata
from minialign.apps.cli import main as cli

MODEL = Path(__file__).parents[1] / "products" / "data" / "transformers4_qa" / "bert"
CONTEXT = "The Eiffel Tower was built in Paris and opened in 1889; it is 330 metres tall."
LONG = ("The tower was built in Paris and opened in 1889. La tour a été construite à Paris en 1889 — “quotes”!   "
        "Several   spaces\tand\nnewlines, emoji 😀, Supercalifragilisticexpialidocious words. ") * 3  # several windows
PAIRS = [("Where was the tower built?", CONTEXT), ("When did it open?", "It opened in 1889,  they say 😀."),
         ("Which city?", LONG), ("Wer?", "Zürich, Genève et Bâle sont des villes.")]


@pytest.fixture(scope="module")
def ours():
    return ma.QuestionAnswerer.from_pretrained(MODEL)


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _rows(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _predict(qa, pairs, **options):
    return qa.predict([q for q, _ in pairs], [c for _, c in pairs], **options)


def _job_rows(pairs):
    from minialign.apps.files.rows import Row

    return [Row(i, i, {"question": q, "context": c}) for i, (q, c) in enumerate(pairs)]


def test_qa_on_a_question_and_a_context(ours, capsys):
    model = ["qa", "--model", str(MODEL)]
    assert cli([*model, "--question", PAIRS[0][0], "--context", CONTEXT]) == 0  # the best answer's dict, as JSON
    assert json.loads(capsys.readouterr().out) == ours.predict(PAIRS[0][0], CONTEXT)
    assert cli([*model, "--question", PAIRS[0][0], "--context", CONTEXT, "--top-k", "3", "--handle-impossible-answer",
                "--no-align-to-words", "--max-answer-len", "4"]) == 0  # a list
    printed = json.loads(capsys.readouterr().out)
    assert printed == ours.predict(PAIRS[0][0], CONTEXT, top_k=3, handle_impossible_answer=True, align_to_words=False,
                                   max_answer_len=4)
    assert len(printed) == 3


def test_qa_on_files(ours, tmp_path, capsys):
    model = ["qa", "--model", str(MODEL)]
    source = _jsonl(tmp_path / "in.jsonl", [{"id": f"p{i}", "q": q, "c": c} for i, (q, c) in enumerate(PAIRS)])
    out = tmp_path / "out.jsonl"
    options = ["--doc-stride", "8", "--max-seq-len", "40", "--top-k", "2"]
    args = [*model, "--input", str(source), "--output", str(out), "--question-field", "q", "--context-field", "c",
            *options, "--workers", "2"]
    assert cli(args) == 0
    assert "answered 4 row(s)" in capsys.readouterr().err
    expected = _predict(ours, PAIRS, doc_stride=8, max_seq_len=40, top_k=2)
    rows = _rows(out)
    assert [r["id"] for r in rows] == [f"p{i}" for i in range(4)]
    assert [r["answers"] for r in rows] == expected  # top_k > 1: {"answers": [...]}, best first
    assert rows[2]["answers"][0]["end"] > 120  # the long context was read past its first window
    settings = json.loads((tmp_path / "out.jsonl.settings.json").read_text())["settings"]
    assert {k: settings[k] for k in ("top_k", "doc_stride", "max_seq_len", "max_answer_len", "align_to_words")} == \
        {"top_k": 2, "doc_stride": 8, "max_seq_len": 40, "max_answer_len": 15, "align_to_words": True}
    assert settings["fields"] == {"question": "q", "context": "c"}

    # --resume: an interrupted output continues with the same settings, and is refused with others
    whole = out.read_text(encoding="utf-8")
    out.write_text("".join(whole.splitlines(keepends=True)[:2]), encoding="utf-8")
    assert cli([*args[:-2], "--resume"]) == 0
    assert out.read_text(encoding="utf-8") == whole
    capsys.readouterr()
    assert cli([*args[:-2], "--resume", "--doc-stride", "4"]) == 2
    assert "doc_stride: 8 then, 4 now" in capsys.readouterr().err

    # top_k 1: the answer's own columns, so CSV in and CSV out (floats written as repr: read back exactly)
    csv_in = tmp_path / "in.csv"
    with open(csv_in, "w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([["id", "question", "context"], *[[i, q, c] for i, (q, c) in enumerate(PAIRS)]])
    assert cli([*model, "--input", str(csv_in), "--output", str(tmp_path / "out.csv"), "--doc-stride", "8"]) == 0
    with open(tmp_path / "out.csv", encoding="utf-8", newline="") as f:
        written = list(csv.DictReader(f))
    assert list(written[0]) == ["id", "score", "start", "end", "answer"]
    assert [{"score": float(r["score"]), "start": int(r["start"]), "end": int(r["end"]), "answer": r["answer"]}
            for r in written] == _predict(ours, PAIRS, doc_stride=8)
    assert cli([*model, "--input", str(csv_in), "--output", str(tmp_path / "one.jsonl"), "--doc-stride", "8"]) == 0
    assert [{k: v for k, v in r.items() if k != "id"} for r in _rows(tmp_path / "one.jsonl")] == \
        _predict(ours, PAIRS, doc_stride=8)


def test_qa_refusals_name_the_flag_or_the_row(tmp_path, capsys):
    model = ["qa", "--model", str(MODEL)]
    source = _jsonl(tmp_path / "in.jsonl", [{"question": "Where?", "context": "Paris."}])
    empty = _jsonl(tmp_path / "empty.jsonl", [{"question": "Where?", "context": "Paris."},
                                              {"question": "", "context": "Paris."}])
    blank = _jsonl(tmp_path / "blank.jsonl", [{"question": "Where?", "context": "   "},
                                              {"question": " ".join(["tower"] * 70), "context": LONG}])
    for args, message in [
            (["--input", str(source), "--output", str(tmp_path / "x.csv"), "--top-k", "2"],
             "x.csv has an unknown format '.csv'; name a .jsonl file"),  # a list per row: .jsonl only
            (["--input", str(source), "--output", str(tmp_path / "x.safetensors")], "name a .jsonl or .csv file"),
            (["--question", "x", "--context", "y", "--top-k", "0"], "--top-k must be an int >= 1, got 0"),
            (["--question", "x", "--context", "y", "--doc-stride", "70"],
             "--doc-stride (70) is larger than max_seq_len"),
            (["--question", "x", "--context", "y", "--max-seq-len", "65"], "--max-seq-len must be an int from 5"),
            (["--question", "x"], "--question and --context go together"),
            (["--question", "x", "--context", ""], "context[0] cannot be empty"),
            (["--input", str(empty), "--output", str(tmp_path / "e.jsonl")],  # before the model loads
             "line 2: field 'question' cannot be empty"),
            (["--input", str(blank), "--output", str(tmp_path / "b.jsonl")],  # the answerer's check, before it runs
             "line 1: field 'context' has no tokens")]:
        assert cli([*model, *args]) == 2, args
        assert message in capsys.readouterr().err, args
    assert cli([*model, "--input", str(blank), "--output", str(tmp_path / "b.jsonl")]) == 2
    assert "line 2: field 'question' has 70 tokens, which with the 3 special tokens fill the window of 64" in \
        capsys.readouterr().err
    assert not (tmp_path / "b.jsonl").exists() or (tmp_path / "b.jsonl").read_text() == ""
    with pytest.raises(SystemExit):
        cli([*model, "--question", "x", "--context", "y", "--top-k", "two"])
    assert "invalid int value: 'two'" in capsys.readouterr().err


def test_a_context_without_an_answer_is_a_record_of_nulls(ours, tmp_path, monkeypatch):
    """predict's empty result (no span of score > 0: an answer the model gives no probability) is the record with
    the same keys, null (an empty CSV cell), so a file's rows stay regular; the service answers [] as the pipeline."""
    from minialign.apps.files.run import run_file
    from minialign.apps.products import PRODUCTS

    answers = _predict(ours, PAIRS[:2])
    monkeypatch.setattr(ours, "predict", lambda *args, **options: [answers[0], []])
    job = PRODUCTS["qa"].make_job(ours)
    source = _jsonl(tmp_path / "in.jsonl",
                    [{"id": i, "question": q, "context": c} for i, (q, c) in enumerate(PAIRS[:2])])
    assert run_file(job, source, tmp_path / "out.csv", progress=False) == 2
    with open(tmp_path / "out.csv", encoding="utf-8", newline="") as f:
        written = list(csv.reader(f))
    assert written[1:] == [["0", repr(answers[0]["score"]), str(answers[0]["start"]), str(answers[0]["end"]),
                            answers[0]["answer"]], ["1", "", "", "", ""]]
    assert run_file(job, source, tmp_path / "out.jsonl", progress=False) == 2
    assert _rows(tmp_path / "out.jsonl")[1] == {"id": 1, "score": None, "start": None, "end": None, "answer": None}
    assert job.run([]) == []
    assert [r["answer"] for r in job.run(_job_rows(PAIRS[:2]))] == [answers[0]["answer"], None]


def test_qa_batches_on_numpy_and_pandas_batches(ours):
    """QABatches (the table's Ray class), called as map_batches calls it: top_k 1 adds the answer's columns, top_k > 1
    an `answers` column holding each row's list (Arrow's list of structs), equal to predict's."""
    pandas = pytest.importorskip("pandas")
    assert raydata.batches_class("qa") is raydata.QABatches
    columns = {"id": [0, 1, 2, 3], "question": [q for q, _ in PAIRS], "context": [c for _, c in PAIRS]}
    best = _predict(ours, PAIRS, doc_stride=8)
    mapper = raydata.QABatches(str(MODEL), doc_stride=8)
    batch = mapper(dict(columns))
    assert [{k: batch[k][i].item() for k in ("score", "start", "end")} | {"answer": str(batch["answer"][i])}
            for i in range(4)] == best
    frame = mapper(pandas.DataFrame(columns))
    assert frame[["score", "start", "end", "answer"]].to_dict("records") == best
    listed = raydata.QABatches(str(MODEL), top_k=3, handle_impossible_answer=True, question_field="q")
    expected = _predict(ours, PAIRS, top_k=3, handle_impossible_answer=True)
    batch = listed({"id": columns["id"], "q": columns["question"], "context": columns["context"]})
    assert batch["answers"].dtype == object and [list(row) for row in batch["answers"]] == expected
    with pytest.raises(ValueError, match="top_k must be an int >= 1, got 0"):
        raydata.QABatches(str(MODEL), top_k=0)
    with pytest.raises(TypeError, match="unexpected keyword"):
        raydata.QABatches(str(MODEL), topk=2)


@pytest.mark.slow
def test_qa_on_ray(ours, tmp_path):
    """`qa --ray` on a local Ray to parquet: top_k 1 the answer's columns, top_k > 1 each row's answers a list of
    structs, equal to predict's, every id once."""
    ray = pytest.importorskip("ray")
    parquet = pytest.importorskip("pyarrow.parquet")
    rows = _jsonl(tmp_path / "rows.jsonl", [{"id": f"p{i}", "question": q, "context": c}
                                            for i, (q, c) in enumerate(PAIRS * 2)])
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
                 configure_logging=False)
    try:
        for top_k in (3,):  # a list of structs per row; top_k 1's columns: QABatches above, without a Ray runtime
            out = tmp_path / f"out{top_k}"
            assert cli(["qa", "--ray", "--model", str(MODEL), "--input", str(rows), "--output", str(out),
                        "--top-k", str(top_k), "--doc-stride", "8", "--shards", "2", "--batch-rows", "3"]) == 0
            written = {r["id"]: r for f in sorted(out.rglob("*.parquet")) for r in parquet.read_table(f).to_pylist()}
            assert sorted(written) == sorted(f"p{i}" for i in range(len(PAIRS) * 2))
            expected = _predict(ours, PAIRS * 2, top_k=top_k, doc_stride=8)
            got = [written[f"p{i}"]["answers"] if top_k > 1 else
                   {k: written[f"p{i}"][k] for k in ("score", "start", "end", "answer")} for i in range(len(PAIRS) * 2)]
            assert got == expected
    finally:
        if started:
            ray.shutdown()


# -- the service -------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def services(tmp_path_factory, minilm_dir):
    """Two services in this process: (the QA model alone, loaded as `serve --qa DIR` loads it; it beside an embedding
    model and a 3-label classifier); their urls."""
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    from test_products import running, served_as

    from minialign.apps.serve import Limits, Models, Service

    classifier = tmp_path_factory.mktemp("clf") / "nli"
    save_classifier(classifier, "bert", 3, minilm_dir)
    alone = served_as("qa", str(MODEL))
    others = Models(embedder=ma.SentenceEncoder.from_pretrained(minilm_dir),
                    classifier=ma.Classifier.from_pretrained(classifier), products=dict(alone.products),
                    names={"embed": str(minilm_dir), "classify": str(classifier), "qa": str(MODEL)})
    with running(Service(alone, Limits())) as one, running(Service(others, Limits())) as two:
        yield one, two, classifier


def _element(element) -> dict:
    """huggingface_hub's QuestionAnsweringOutputElement as the pipeline's dict."""
    return {"score": element.score, "start": element.start, "end": element.end, "answer": element.answer}


def test_inference_client_question_answering(services, ours, monkeypatch):
    """huggingface_hub's InferenceClient.question_answering, unchanged, on POST / (its base_url) and on
    /pipeline/question-answering: the product's answer (one element) or answers (a list, top_k > 1) for each option."""
    from test_serve import inference_client

    one, two, _ = services
    client = inference_client(one, monkeypatch)
    for question, context in PAIRS:
        assert _element(client.question_answering(question, context)) == ours.predict(question, context)
    answers = client.question_answering(PAIRS[0][0], CONTEXT, top_k=3, handle_impossible_answer=True,
                                        align_to_words=False, max_answer_len=3)
    assert [_element(a) for a in answers] == ours.predict(PAIRS[0][0], CONTEXT, top_k=3, handle_impossible_answer=True,
                                                          align_to_words=False, max_answer_len=3)
    long = client.question_answering(*PAIRS[2], doc_stride=4, max_seq_len=32, max_question_len=8, top_k=2)
    assert [_element(a) for a in long] == ours.predict(*PAIRS[2], doc_stride=4, max_seq_len=32, top_k=2)
    assert _element(client.question_answering(*PAIRS[1], top_k=1)) == ours.predict(*PAIRS[1])
    # beside an embedding model and a classifier: POST / knows the body, and the task has its own path too
    for url in (two, two + "/pipeline/question-answering"):
        assert _element(inference_client(url, monkeypatch).question_answering(*PAIRS[3])) == ours.predict(*PAIRS[3])


def test_post_root_tells_question_answering_apart(services, ours, monkeypatch):
    from test_serve import call, inference_client

    _, two, classifier = services
    body = {"inputs": {"question": PAIRS[0][0], "context": CONTEXT}}  # no parameters: no TEI body has this inputs
    assert call(two, "/", body) == (200, ours.predict(PAIRS[0][0], CONTEXT))
    assert call(two, "/", {**body, "parameters": {"top_k": 2}}) == (200, ours.predict(PAIRS[0][0], CONTEXT, top_k=2))
    client = inference_client(two, monkeypatch)  # the other bodies still reach their models
    assert len(client.sentence_similarity("A tower.", ["A tower in Paris.", "Bananas."])) == 2
    assert client.feature_extraction("A tower.").shape == (1, 384)
    clf = ma.Classifier.from_pretrained(classifier)
    assert {e.label for e in client.text_classification("A tower.")} == set(clf.labels)
    status, answer = call(two, "/", {"inputs": {"question": "Where?"}})  # a QA body missing its context
    assert status == 422 and "`inputs.context` is missing (fields given: `question`)" in answer["error"]


def test_rows_route_and_info(services, ours):
    from test_serve import call

    one, _, _ = services
    rows = [{"question": q, "context": c} for q, c in PAIRS]
    status, body = call(one, "/rows/qa", {"rows": rows, "options": {"top_k": 2, "doc_stride": 8}})
    assert status == 200 and [r["answers"] for r in body["results"]] == _predict(ours, PAIRS, top_k=2, doc_stride=8)
    status, body = call(one, "/rows/qa", {"rows": rows})
    assert status == 200 and body["results"] == _predict(ours, PAIRS)
    described = call(one, "/info")[1]["models"]["qa"]
    assert described["kind"] == "qa" and described["model_id"] == str(MODEL)
    assert described["routes"] == ["/", "/pipeline/question-answering", "/rows/qa"]
    assert "POST /pipeline/question-answering" in call(one, "/")[1]


@pytest.mark.parametrize(("path", "body", "message"), [
    ("/", {"inputs": {"question": "", "context": "Paris."}}, "`inputs.question` cannot be empty"),
    ("/", {"inputs": {"question": "Where?", "context": ""}}, "`inputs.context` cannot be empty"),
    ("/", {"inputs": {"question": "Where?", "context": "   "}}, "`inputs.context` has no tokens"),
    ("/", {"inputs": {"question": " ".join(["tower"] * 70), "context": LONG}},
     "`inputs.question` has 70 tokens, which with the 3 special tokens fill the window of 64 tokens"),
    ("/", {"inputs": {"question": "Where?", "context": LONG}, "parameters": {"doc_stride": 60}},
     "`inputs.question` has 5 tokens, which with the 3 special tokens leave 56 tokens"),
    ("/", {"inputs": {"question": 5, "context": "Paris."}}, "`inputs.question` must be a string, got int"),
    ("/", {"inputs": {"question": "a\udc80", "context": "Paris."}}, "`inputs.question` holds a lone surrogate"),
    ("/", {"inputs": {"question": "Where?", "context": "Paris.", "text": "x"}}, "unknown key(s) ['text']"),
    ("/", {"inputs": {"question": "Where?", "context": "Paris."}, "parameters": {"top_k": 0}},
     "`parameters.top_k` must be an int >= 1, got 0"),
    ("/", {"inputs": {"question": "Where?", "context": "Paris."}, "parameters": {"top_k": "2"}},
     "`parameters.top_k` must be an integer, got str"),
    ("/", {"inputs": {"question": "Where?", "context": "Paris."}, "parameters": {"doc_stride": 70}},
     "`parameters.doc_stride` (70) is larger than max_seq_len (64)"),
    ("/", {"inputs": {"question": "Where?", "context": "Paris."}, "parameters": {"max_seq_len": 65}},
     "`parameters.max_seq_len` must be an int from 5"),
    ("/", {"inputs": {"question": "Where?", "context": "Paris."}, "parameters": {"align_to_words": "no"}},
     "`parameters.align_to_words` must be a boolean, got str"),
    ("/", {"inputs": {"question": "Where?", "context": "Paris."}, "parameters": {"stride": 2}},
     "`parameters` ['stride']: not parameters of question-answering"),
    ("/pipeline/question-answering", {"inputs": "Where? Paris."}, '`inputs` must be an object {"question": str, '
                                                                  '"context": str}, got str'),
    ("/pipeline/question-answering", {"inputs": [{"question": "a", "context": "b"}]}, "`inputs` must be an object"),
    ("/rows/qa", {"rows": [{"question": "Where?", "context": ""}]}, "`rows[0]`: field 'context' cannot be empty"),
    ("/rows/qa", {"rows": [{"question": "Where?", "context": "Paris."}], "options": {"max_answer_len": 0}},
     "`options.max_answer_len` must be an int >= 1, got 0"),
])
def test_bad_requests_are_refused_by_field(services, path, body, message):
    from test_serve import call

    one, _, _ = services
    status, answer = call(one, path, body)
    assert status == 422 and message in answer["error"], answer


def test_no_span_is_the_pipelines_empty_answer_on_the_service(services, monkeypatch):
    """Where predict finds no span of score > 0 (its empty result), HF Inference's answer is [] (the v4 pipeline's),
    which the client parses as an empty list, and /rows/qa's record the file's, its four keys null."""
    from test_serve import call, inference_client

    one, _, _ = services
    monkeypatch.setattr(ma.QuestionAnswerer, "predict",
                        lambda self, questions, contexts, **options: [[]] * len(questions))
    assert inference_client(one, monkeypatch).question_answering("Where?", "Paris.") == []
    assert call(one, "/rows/qa", {"rows": [{"question": "Where?", "context": "Paris."}]}) == \
        (200, {"results": [{"score": None, "start": None, "end": None, "answer": None}]})
