"""ma.FillMask on every face, from its one product-table entry ("fill-mask", apps/products.py): `minialign fill-mask` on
a text and on files (jsonl / csv in, .jsonl out: one list of candidates per mask of the row, --top-k, --targets,
--resume, --workers, bad rows named by line and field), the Ray Data class on numpy and pandas batches, and the service
(`serve --fill-mask`): POST /rows/fill-mask, HF Inference's fill-mask driven by huggingface_hub's
InferenceClient.fill_mask on POST / and on /pipeline/fill-mask, POST / with a classifier loaded too (`top_k` alone fits
both tasks: a 422 naming both paths; `targets` is fill-mask's), bad bodies refused by field. Every answer equals
FillMask.predict's (the product's own parity with transformers' pipeline: tests/products/test_fill_mask.py). One tiny
BERT masked LM (all-MiniLM-L6-v2's WordPiece, a 64-token window) serves the module; the service runs in this process on
127.0.0.1. Ray's runtime: tests/apps/test_raydata.py (slow)."""

from __future__ import annotations

import json

import pytest
from conftest import save_classifier, save_filler

import minialign as ma
from minialign.apps import raydata
from minialign.apps.cli import main as cli
from minialign.runtime.engine import TruncationWarning

TEXTS = ["Paris is the [MASK] of France.", "Café naïve résumé: the [MASK] was 😀 great!",
         "The [MASK] and the [MASK] went to Zürich, Genève.", "  Several   spaces\tand [MASK]  between   words , then ! ",
         "supercalifragilisticexpialidocious [MASK] antidisestablishmentarianism."]
LONG = "[MASK] opened in 1889. " + "The tower was built in Paris and opened in 1889. " * 6  # over the 64-token window
TARGETS = ["paris", "tower", "supercalifragilistic"]  # the last one not in the vocabulary: its first token


@pytest.fixture(scope="module")
def filler(tmp_path_factory, wordpiece_dir):
    """(a transformers BertForMaskedLM directory with MiniLM's WordPiece, 64-token window: conftest.save_filler; the
    FillMask loaded from it)."""
    directory = save_filler(tmp_path_factory.mktemp("fill-mask"), wordpiece_dir)
    return directory, ma.FillMask.from_pretrained(directory)


def _regular(result: list) -> list:
    """A text's predict result as a file row holds it: a list of candidates per mask (one mask: [its list])."""
    return result if isinstance(result[0], list) else [result]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _rows(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_fill_mask_on_a_text_and_on_files(filler, tmp_path, capsys):
    directory, ours = filler
    model = ["fill-mask", "--model", str(directory)]
    assert cli([*model, "--text", TEXTS[0]]) == 0  # the record's candidates: a list per mask, the defaults (top_k 5)
    printed = json.loads(capsys.readouterr().out)
    assert printed == [ours.predict(TEXTS[0])] and len(printed[0]) == 5
    assert cli([*model, "--text", TEXTS[2], "--top-k", "2"]) == 0  # two masks: predict's list per mask
    assert json.loads(capsys.readouterr().out) == ours.predict(TEXTS[2], top_k=2)
    with pytest.warns(UserWarning, match="Replacing with `super`"):
        assert cli([*model, "--text", TEXTS[0], "--targets", ",".join(TARGETS), "--top-k", "9"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == [ours.predict(TEXTS[0], targets=TARGETS, top_k=9)]
    assert sorted(c["token_str"] for c in printed[0]) == ["paris", "super", "tower"]  # top_k at most the targets

    # a file: one record per row, a list of candidates per mask; the long row cut by the window, as predict cuts it
    source = _jsonl(tmp_path / "in.jsonl", [{"id": f"t{i}", "body": t} for i, t in enumerate(TEXTS + [LONG])])
    out = tmp_path / "out.jsonl"
    args = [*model, "--input", str(source), "--output", str(out), "--text-field", "body", "--top-k", "3",
            "--targets", ",".join(TARGETS[:2]) + ",the,of,was", "--workers", "2"]
    with pytest.warns(TruncationWarning, match="1 of 6 text") as cut:  # reported once for the run
        assert cli(args) == 0
    assert len([w for w in cut if w.category is TruncationWarning]) == 1
    assert "filled 6 row(s)" in capsys.readouterr().err
    expected = ours.predict(TEXTS + [LONG], top_k=3, targets=TARGETS[:2] + ["the", "of", "was"], warn_truncation=False)
    rows = _rows(out)
    assert [r["id"] for r in rows] == [f"t{i}" for i in range(6)]
    assert [r["candidates"] for r in rows] == [_regular(e) for e in expected]
    assert [len(r["candidates"]) for r in rows] == [1, 1, 2, 1, 1, 1] and all(
        len(mask) == 3 and list(mask[0]) == ["score", "token", "token_str", "sequence"]
        for r in rows for mask in r["candidates"])
    settings = json.loads((tmp_path / "out.jsonl.settings.json").read_text())["settings"]
    assert {k: settings[k] for k in ("top_k", "targets", "max_length")} == \
        {"top_k": 3, "targets": ["paris", "tower", "the", "of", "was"], "max_length": 64}

    # --resume: an interrupted output continues with the same settings, and is refused with others
    whole = out.read_text(encoding="utf-8")
    out.write_text("".join(whole.splitlines(keepends=True)[:2]), encoding="utf-8")
    assert cli([*args[:-2], "--resume"]) == 0
    assert out.read_text(encoding="utf-8") == whole
    capsys.readouterr()
    assert cli([*args[:-2], "--resume", "--top-k", "4"]) == 2
    assert "top_k: 3 then, 4 now" in capsys.readouterr().err

    csv_in = tmp_path / "in.csv"
    csv_in.write_text("id,text\n1,Paris is the [MASK] of France.\n2,\"The [MASK], the [MASK].\"\n", encoding="utf-8")
    assert cli([*model, "--input", str(csv_in), "--output", str(tmp_path / "csv.jsonl")]) == 0
    assert [r["candidates"] for r in _rows(tmp_path / "csv.jsonl")] == \
        [_regular(e) for e in ours.predict(["Paris is the [MASK] of France.", "The [MASK], the [MASK]."])]


def test_bad_rows_are_named_by_file_line_and_field(filler, tmp_path, capsys):
    directory, ours = filler
    source = _jsonl(tmp_path / "in.jsonl", [{"id": 1, "text": TEXTS[0]}, {"id": 2, "text": "no mask here"},
                                            {"id": 3, "text": "Paris is the <mask> of France."},
                                            {"id": 4, "text": LONG.replace("[MASK]", "A") + " [MASK]"},
                                            {"id": 5, "text": ""}])
    args = ["fill-mask", "--model", str(directory), "--input", str(source), "--output", str(tmp_path / "out.jsonl")]
    assert cli(args) == 2
    err = capsys.readouterr().err
    assert "4 malformed row(s), nothing done" in err  # found once the model is loaded (its mask, its window)
    for line, problem in [(2, "field 'text' has no [MASK] token: mark the position to predict with '[MASK]'"),
                          (3, "field 'text' has no [MASK] token: it writes the mask as '<mask>', and this model's "
                              "mask token is '[MASK]'"),
                          (4, "field 'text' has its [MASK] tokens past the 64-token window only"),
                          (5, "field 'text' has no [MASK] token")]:
        assert f"{source}: line {line}: {problem}" in err, (line, err)
    assert not (tmp_path / "out.jsonl").exists()
    assert cli([*args, "--skip-invalid"]) == 0  # the valid row alone
    assert "skipping 4 malformed row(s)" in capsys.readouterr().err
    assert _rows(tmp_path / "out.jsonl") == [{"id": 1, "candidates": [ours.predict(TEXTS[0])]}]


def test_fill_mask_refusals_name_the_flag(filler, tmp_path, capsys):
    directory, _ = filler
    model = ["fill-mask", "--model", str(directory)]
    source = _jsonl(tmp_path / "in.jsonl", [{"text": "a [MASK]"}])
    for args, message in [
            (["--input", str(source), "--output", str(tmp_path / "out.csv")],
             "--output " + str(tmp_path / "out.csv") + " has an unknown format '.csv'; name a .jsonl file"),
            (["--text", "a [MASK]", "--top-k", "0"], "--top-k must be a positive integer, got 0"),
            (["--text", "a [MASK]", "--targets", ""], "--targets has no token of the vocabulary ([]): At least one"),
            (["--text", "no mask"], "has no [MASK] token: mark the position to predict with '[MASK]'"),
            (["--text", "x", "--input", str(source)], "--input and --output go together")]:
        assert cli([*model, *args]) == 2, args
        assert message in capsys.readouterr().err, args
    with pytest.raises(SystemExit):
        cli([*model, "--text", "a [MASK]", "--top-k", "two"])
    assert "invalid int value: 'two'" in capsys.readouterr().err


def test_fill_mask_batches_on_numpy_and_pandas_batches(filler):
    """FillMaskBatches (the table's Ray class), called as map_batches calls it: the candidates column holds each row's
    list per mask (Arrow's list of lists of structs), equal to predict's."""
    pandas = pytest.importorskip("pandas")
    directory, ours = filler
    assert raydata.batches_class("fill-mask") is raydata.FillMaskBatches
    mapper = raydata.FillMaskBatches(str(directory), top_k=2, targets=["paris", "the", "of"])
    expected = [_regular(e) for e in ours.predict(TEXTS, top_k=2, targets=["paris", "the", "of"])]
    batch = mapper({"id": list(range(len(TEXTS))), "text": TEXTS})
    assert batch["candidates"].dtype == object and [list(row) for row in batch["candidates"]] == expected
    frame = mapper(pandas.DataFrame({"id": list(range(len(TEXTS))), "text": TEXTS}))
    assert list(frame["candidates"]) == expected
    with pytest.raises(raydata.InputError, match=r"row id=1: field 'text' has no \[MASK\] token"):
        mapper({"id": [0, 1], "text": [TEXTS[0], "no mask"]})
    with pytest.raises(ValueError, match="top_k must be a positive integer"):
        raydata.FillMaskBatches(str(directory), top_k=0)
    with pytest.raises(TypeError, match="unexpected keyword"):
        raydata.FillMaskBatches(str(directory), topk=3)


# -- the service -------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def services(filler, tmp_path_factory, minilm_dir):
    """Two services in this process: (the masked LM alone, loaded as `serve --fill-mask DIR` loads it; it beside a
    3-label classifier); their urls."""
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    from test_products import running, served_as

    from minialign.apps.serve import Limits, Models, Service

    directory, _ = filler
    classifier = tmp_path_factory.mktemp("clf") / "nli"
    save_classifier(classifier, "bert", 3, minilm_dir)
    alone = served_as("fill-mask", str(directory))
    both = Models(classifier=ma.Classifier.from_pretrained(classifier), products=dict(alone.products),
                  names={"classify": str(classifier), "fill-mask": str(directory)})
    with running(Service(alone, Limits())) as one, running(Service(both, Limits())) as two:
        yield one, two, classifier


def _elements(elements) -> list:
    """huggingface_hub's FillMaskOutputElements as the pipeline's dicts (a list of such lists for several masks)."""
    if elements and isinstance(elements[0], list):
        return [_elements(row) for row in elements]
    return [{"score": e.score, "token": e.token, "token_str": e.token_str, "sequence": e.sequence} for e in elements]


def _same(got: list, expected: list) -> None:
    if expected and isinstance(expected[0], list):
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            _same(a, b)
        return
    assert [{k: v for k, v in c.items() if k != "score"} for c in got] == \
        [{k: v for k, v in c.items() if k != "score"} for c in expected]
    assert [c["score"] for c in got] == pytest.approx([c["score"] for c in expected], abs=1e-6)


def test_inference_client_fill_mask(services, filler, monkeypatch):
    """huggingface_hub's InferenceClient.fill_mask, unchanged, on POST / (its base_url) and on /pipeline/fill-mask:
    the product's candidates for top_k and targets, a list per mask for a text of two."""
    from test_serve import inference_client

    one, two, _ = services
    _, ours = filler
    client = inference_client(one, monkeypatch)
    _same(_elements(client.fill_mask(TEXTS[0])), ours.predict(TEXTS[0]))  # the pipeline's default top_k (5)
    for text in TEXTS:
        _same(_elements(client.fill_mask(text, top_k=3)), ours.predict(text, top_k=3))
    with pytest.warns(UserWarning, match="Replacing with `super`"):
        expected = ours.predict(TEXTS[1], targets=TARGETS, top_k=2)
    _same(_elements(client.fill_mask(TEXTS[1], targets=TARGETS, top_k=2)), expected)
    two_masks = client.fill_mask(TEXTS[2], top_k=2)  # the client parses a list per mask
    assert len(two_masks) == 2 and all(len(row) == 2 for row in two_masks)
    # beside a classifier: its own path, and POST / tells the tasks apart by `targets` (fill-mask's alone)
    pipeline = inference_client(two + "/pipeline/fill-mask", monkeypatch)
    _same(_elements(pipeline.fill_mask(TEXTS[0], top_k=4)), ours.predict(TEXTS[0], top_k=4))
    _same(_elements(pipeline.fill_mask(TEXTS[0])), ours.predict(TEXTS[0]))
    both = inference_client(two, monkeypatch)
    _same(_elements(both.fill_mask(TEXTS[0], targets=["paris", "the"])), ours.predict(TEXTS[0], targets=["paris", "the"]))


def test_post_root_with_top_k_alone_names_both_paths(services, monkeypatch):
    """`top_k` alone (or no parameter: InferenceClient sends `parameters: {}`) fits text-classification and fill-mask:
    with both models loaded POST / refuses it, naming each task's path (HFInferenceShapes.hf_task); each path answers."""
    from huggingface_hub.errors import HfHubHTTPError
    from test_serve import call, inference_client

    one, two, classifier = services
    both = "/pipeline/text-classification or /pipeline/fill-mask"
    for body in ({"inputs": TEXTS[0], "parameters": {"top_k": 2}}, {"inputs": TEXTS[0], "parameters": {}}):
        status, answer = call(two, "/", body)
        assert status == 422 and "cannot tell which task" in answer["error"] and both in answer["error"], answer
    with pytest.raises(HfHubHTTPError, match="422"):
        inference_client(two, monkeypatch).fill_mask(TEXTS[0], top_k=2)
    status, answer = call(two, "/", {"inputs": TEXTS[0], "parameters": {"function_to_apply": "softmax"}})
    assert status == 200 and {d["label"] for d in answer[0]} == set(ma.Classifier.from_pretrained(classifier).labels)
    status, answer = call(two, "/", {"inputs": TEXTS[0], "parameters": {"top_k": 1, "targets": ["the"]}})
    assert status == 200 and [c["token_str"] for c in answer] == ["the"]
    status, answer = call(two, "/", {"inputs": TEXTS[0], "parameters": {"targets": ["the"], "function_to_apply": "none"}})
    assert status == 422 and "fit none of text-classification, fill-mask" in answer["error"]
    status, answer = call(one, "/", {"inputs": TEXTS[0], "parameters": {"top_k": 1}})  # alone: fill-mask's
    assert status == 200 and len(answer) == 1 and answer[0]["sequence"].startswith("paris is the")
    status, answer = call(one, "/", {"inputs": TEXTS[0]})  # no parameters and no embedder or classifier: fill-mask's
    assert status == 200 and len(answer) == 5


def test_rows_route_and_info(services, filler):
    from test_serve import call

    one, _, _ = services
    directory, ours = filler
    status, body = call(one, "/rows/fill-mask", {"rows": [{"text": t} for t in TEXTS], "options": {"top_k": 2}})
    assert status == 200
    assert [r["candidates"] for r in body["results"]] == [_regular(e) for e in ours.predict(TEXTS, top_k=2)]
    routes = call(one, "/info")[1]["models"]["fill-mask"]
    assert routes["kind"] == "fill-mask" and routes["model_id"] == str(directory)
    assert routes["routes"] == ["/", "/pipeline/fill-mask", "/rows/fill-mask"]
    assert "POST /pipeline/fill-mask" in call(one, "/")[1]
    status, body = call(one, "/pipeline/token-classification", {"inputs": "x"})  # no token classifier here
    assert status == 404 and "start the service with --ner SRC" in body["error"]


@pytest.mark.parametrize(("path", "body", "status", "message"), [
    ("/", {"inputs": "no mask", "parameters": {}}, 422,
     "`inputs` has no [MASK] token: mark the position to predict with '[MASK]'"),
    ("/pipeline/fill-mask", {"inputs": "Paris is the <mask> of France."}, 422,
     "`inputs` has no [MASK] token: it writes the mask as '<mask>', and this model's mask token is '[MASK]'"),
    ("/pipeline/fill-mask", {"inputs": ""}, 422, "`inputs` has no [MASK] token"),
    ("/pipeline/fill-mask", {"inputs": LONG.replace("[MASK]", "A") + " [MASK]", "truncate": True}, 422,
     "`inputs` has its [MASK] tokens past the 64-token window only"),
    ("/pipeline/fill-mask", {"inputs": LONG}, 413, "`inputs` must have less than 64 tokens"),
    ("/", {"inputs": "a [MASK]", "parameters": {"top_k": 0}}, 422,
     "`parameters.top_k` must be a positive integer, got 0"),
    ("/", {"inputs": "a [MASK]", "parameters": {"top_k": "2"}}, 422, "`parameters.top_k` must be an integer, got str"),
    ("/", {"inputs": "a [MASK]", "parameters": {"top_k": True}}, 422, "`parameters.top_k` must be an integer, got bool"),
    ("/", {"inputs": "a [MASK]", "parameters": {"targets": "paris"}}, 422,
     "`parameters.targets` must be a list, got str"),
    ("/", {"inputs": "a [MASK]", "parameters": {"targets": []}}, 422,
     "`parameters.targets` has no token of the vocabulary ([]): At least one target must be provided"),
    ("/", {"inputs": "a [MASK]", "parameters": {"stride": 2}}, 422, "`parameters` ['stride']: not parameters of fill-"),
    ("/pipeline/fill-mask", {"inputs": ["a [MASK]", "b [MASK]"]}, 422, "`inputs` must be a string, got list"),
    ("/pipeline/fill-mask", {"text": "a [MASK]"}, 422, "`inputs` is missing (fields given: `text`)"),
    ("/rows/fill-mask", {"rows": [{"text": "a [MASK]"}, {"text": "no mask"}]}, 422,
     "`rows[1]`: field 'text' has no [MASK] token"),
    ("/rows/fill-mask", {"rows": [{"text": "a [MASK]"}], "options": {"top_k": -1}}, 422,
     "`options.top_k` must be a positive integer, got -1"),
])
def test_bad_requests_are_refused_by_field(services, path, body, status, message):
    from test_serve import call

    one, _, _ = services
    got, answer = call(one, path, body)
    assert got == status and message in answer["error"], answer


def test_a_long_text_is_cut_when_the_body_says_truncate(services, filler):
    from test_serve import call

    one, _, _ = services
    _, ours = filler
    status, body = call(one, "/", {"inputs": LONG, "truncate": True, "parameters": {"top_k": 2}})
    assert status == 200 and body == ours.predict(LONG, top_k=2, warn_truncation=False)
