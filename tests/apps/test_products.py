"""The product table (apps/products.py) read by every face: a throwaway product registered once is on the
command line (one text and a file), on Ray Data (its map_batches class), and on the service (--NAME, POST
/rows/NAME, GET /, /info); MiniCheck on the service, on AlignScore's request shapes and on HF Inference's
text-classification (huggingface_hub's InferenceClient). Servers run in this process on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time

import pytest
import torch
from conftest import CORPUS

import minialign as ma
from minialign.apps import products, raydata
from minialign.apps.cli import main as cli
from minialign.apps.files.jobs import make_job

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
from test_serve import call, inference_client  # noqa: E402


def norm_job(encoder, fields, *, model=None, scale=1.0):
    """The throwaway product's job: {"norm": scale * |embedding|} per text row (of `fields`: the table's roles)."""

    def run(rows, totals):
        vectors = encoder.encode([r.values["text"] for r in rows], tally=totals)
        return [{"norm": scale * v} for v in vectors.norm(dim=1).tolist()]

    return make_job(encoder, fields, outputs=("jsonl", "csv"), model=model, settings={"scale": scale}, run=run,
                    columns=["norm"])


@pytest.fixture
def norm_product():
    product = products.register(products.Product(
        name="norm", runner=ma.SentenceEncoder, command="norm", job=norm_job, verb="measured",
        help="the length of a text's embedding", model_help="a sentence-transformers directory",
        serve_help="an embedding model for /rows/norm",
        options=(products.Option("scale", 1.0, help="a factor", type=float),),
        inputs=(products.Role("text", "one text: prints its norm"),), ray="NormBatches"))
    yield product
    products.unregister("norm")


def test_each_option_default_is_declared_once():
    """A face passing no value gets the table's default: the job's keyword and the runner's call take the same one,
    each declared once in products/choices.py (which the table reads without torch)."""
    import inspect

    for product in products.PRODUCTS.values():
        keywords = inspect.signature(product.job).parameters
        for option in product.options:
            if option.default is not None and option.name in keywords:
                assert keywords[option.name].default == option.default, (product.name, option.name)
    calls = [("fill-mask", "top_k", "predict", None), ("ner", "aggregation_strategy", "predict", None),
             ("zero-shot", "hypothesis_template", "predict", None), ("zero-shot", "multi_label", "predict", None),
             ("classify", "activation", "predict", None), ("qa", "top_k", "predict", None),
             ("qa", "max_answer_len", "predict", None), ("qa", "max_question_len", "predict", None),
             ("qa", "handle_impossible_answer", "predict", None), ("qa", "align_to_words", "predict", None),
             ("m3", "return_dense", "encode", None), ("m3", "return_sparse", "encode", None),
             ("m3", "return_colbert_vecs", "encode", None), ("embed", "normalize", "encode", "normalize_embeddings")]
    for name, option, method, parameter in calls:
        product = products.PRODUCTS[name]
        declared = next(o.default for o in product.options if o.name == option)
        runner_default = inspect.signature(getattr(product.runner, method)).parameters[parameter or option].default
        assert runner_default == declared, (name, option)


def served_as(name: str, directory):
    """The Models `minialign serve --NAME DIRECTORY` loads (its parser and its loading), the product alone."""
    import argparse

    from minialign.apps.serve_command import load_served, serve_parser
    from minialign.apps.products import PRODUCTS
    from minialign.apps.serve import Models

    parser = argparse.ArgumentParser().add_subparsers(dest="command")
    serve_parser(parser)
    args = parser.choices["serve"].parse_args([f"--{name}", str(directory)])
    assert args.products == {name: [str(directory)]}
    models = Models()
    load_served(models, PRODUCTS[name], str(directory), args)
    return models


@contextlib.contextmanager
def running(service):
    """The service's app on 127.0.0.1 (an ephemeral port) in a thread; its base url."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(service.app(), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)


def test_a_registered_product_is_on_every_face(norm_product, minilm_dir, tmp_path, capsys):
    from minialign.apps.serve import Limits, Models, Service

    encoder = ma.SentenceEncoder.from_pretrained(minilm_dir)
    texts = ["The Eiffel Tower is in Paris.", "Bananas are yellow.", ""]
    expected = (2 * encoder.encode(texts).norm(dim=1)).tolist()
    # the command line: one text, and a file
    assert cli(["norm", "--model", str(minilm_dir), "--text", texts[0], "--scale", "2"]) == 0
    assert float(capsys.readouterr().out) == pytest.approx(expected[0], abs=1e-5)
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"id": i, "body": t}) + "\n" for i, t in enumerate(texts)))
    assert cli(["norm", "--model", str(minilm_dir), "--input", str(tmp_path / "in.jsonl"), "--output",
                str(tmp_path / "out.jsonl"), "--text-field", "body", "--scale", "2"]) == 0
    assert "measured 3 row(s)" in capsys.readouterr().err
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == [0, 1, 2]
    assert [r["norm"] for r in rows] == pytest.approx(expected, abs=1e-5)
    # Ray Data: the class map_batches constructs once per actor, on a batch of columns
    mapper = raydata.batches_class("norm")
    assert mapper.__name__ == "NormBatches"
    batch = mapper(str(minilm_dir), text_field="body", scale=2.0)({"id": [0, 1, 2], "body": texts})
    assert list(batch["id"]) == [0, 1, 2] and batch["norm"].tolist() == pytest.approx(expected, abs=1e-5)
    with pytest.raises(TypeError, match="unexpected keyword"):
        mapper(str(minilm_dir), scael=2.0)
    # the service: its flag, POST /rows/norm, GET / and /info
    with pytest.raises(SystemExit):
        cli(["serve", "--help"])
    assert "--norm SRC" in capsys.readouterr().out
    service = Service(Models(products={"norm": encoder}, names={"norm": str(minilm_dir)}), Limits())
    with running(service) as url:
        status, body = call(url, "/rows/norm", {"rows": [{"text": t} for t in texts], "options": {"scale": 2.0}})
        assert status == 200 and [r["norm"] for r in body["results"]] == pytest.approx(expected, abs=1e-5)
        status, body = call(url, "/rows/norm", {"rows": [{"txet": "typo"}]})
        assert (status, body["error"]) == (422, "`rows[0]`: field 'text' is missing")
        status, body = call(url, "/rows/norm", {"rows": [{"text": "a"}], "options": {"scale": "big"}})
        assert status == 422 and "`options.scale` must be a number" in body["error"]
        assert "POST /rows/norm" in call(url, "/")[1]
        info = call(url, "/info")[1]["models"]["norm"]
        assert info["kind"] == "norm" and info["routes"] == ["/rows/norm"] and info["model_id"] == str(minilm_dir)


def test_rows_route_answers_what_the_file_command_writes(minilm_dir):
    from minialign.apps.serve import Limits, Models, Service, rows

    embedder = ma.SentenceEncoder.from_pretrained(minilm_dir)
    service = Service(Models(embedder=embedder), Limits(max_wait_ms=50))
    bodies = [{"rows": [{"text": "a tower"}, {"text": "Paris"}], "options": {"normalize": True}},
              {"rows": [{"text": "a banana"}], "options": {"normalize": True}}]

    async def requests():
        return await asyncio.gather(*[rows.rows(service, "embed", body) for body in bodies])

    try:
        calls = service.batchers["embed"].calls
        answers = asyncio.run(requests())
        assert service.batchers["embed"].calls - calls == 1  # same options: one model call
    finally:
        service.close()
    expected = embedder.encode(["a tower", "Paris", "a banana"], normalize_embeddings=True)
    got = [r["embedding"] for answer in answers for r in answer["results"]]
    torch.testing.assert_close(torch.tensor(got), expected, atol=1e-6, rtol=0)


@pytest.fixture(scope="module")
def minicheck_url(minicheck_dir):
    from minialign.apps.serve import Limits, Models, Service

    scorer = ma.MiniCheckScorer.from_pretrained(minicheck_dir)
    with running(Service(Models(minicheck=scorer, names={"minicheck": str(minicheck_dir)}), Limits())) as url:
        yield url, scorer


def test_minicheck_on_alignscores_request_shapes(minicheck_url):
    url, scorer = minicheck_url
    (document, claim), (other, second) = CORPUS[0], CORPUS[1]
    expected = scorer.score([document, other], [claim, second], return_details=True)
    status, body = call(url, "/minicheck", {"evidence": document, "claim": claim})
    assert status == 200 and body == {"minicheck": pytest.approx(expected[0]["score"], abs=1e-6)}
    status, body = call(url, "/score", {"pairs": [{"context": document, "claim": claim},
                                                  {"context": other, "claim": second}], "details": True})
    assert status == 200 and body["scores"] == pytest.approx([d["score"] for d in expected], abs=1e-6)
    assert body["details"][1]["chunks"] == expected[1]["chunks"] and set(body["details"][1]) == \
        {"score", "chunks", "supported", "truncated"}
    assert call(url, "/score", {"pairs": [{"context": document, "claim": claim}], "model": "minicheck"})[0] == 200
    for path, request, status, text in [
            ("/minicheck", {"evidence": document, "claim": ""}, 400, "`claim` cannot be empty"),
            ("/minicheck", {"evidence": document}, 422, "`claim` is missing"),
            ("/score", {"pairs": [{"context": "c", "claim": "x."}], "mode": "bin"}, 422, "`mode` is AlignScore's"),
            ("/score", {"pairs": [{"context": "c", "claim": "x."}], "model": "base"}, 422, "'base' is not loaded"),
            ("/alignscore_base", {"evidence": "c", "claim": "x."}, 404, "--alignscore base=")]:
        got, answer = call(url, path, request)
        assert got == status and text in answer["error"], (path, answer)
    info = call(url, "/info")[1]["models"]["minicheck"]
    assert info["routes"] == ["/minicheck", "/score", "/", "/rows/minicheck"] and info["max_input_length"] == 512


def test_minicheck_on_hf_inference_text_classification(minicheck_url, monkeypatch):
    """huggingface_hub's text_classification sends `inputs` as given: a {"text", "text_pair"} is MiniCheck's
    (document, claim), at /minicheck (the client's base_url) or POST /."""
    url, scorer = minicheck_url
    document, claim = CORPUS[0]
    supported = scorer.score([document], [claim])[0]
    expected = sorted([("supported", supported), ("unsupported", 1 - supported)], key=lambda x: -x[1])
    labels = inference_client(url + "/minicheck", monkeypatch).text_classification(
        {"text": document, "text_pair": claim})
    assert [(e.label, e.score) for e in labels] == [(label, pytest.approx(s, abs=1e-6)) for label, s in expected]
    status, body = call(url, "/", {"inputs": {"text": document, "text_pair": claim}, "parameters": {"top_k": 1}})
    assert status == 200 and body == [[{"label": expected[0][0], "score": pytest.approx(expected[0][1], abs=1e-6)}]]
    for request, text in [({"inputs": document}, "`inputs` must be {\"text\": document"),
                          ({"inputs": {"text": document, "text_pair": claim},
                            "parameters": {"function_to_apply": "sigmoid"}}, "a softmax")]:
        status, body = call(url, "/minicheck", request)
        assert status == 422 and text in body["error"], body


def test_serve_minicheck_flag_takes_the_default_model():
    import argparse

    from minialign.apps.serve_command import serve_parser
    from minialign.products.minicheck import DEFAULT_MODEL

    sub = argparse.ArgumentParser().add_subparsers(dest="command")
    serve_parser(sub)
    args = sub.choices["serve"].parse_args(["--minicheck", "--alignscore", "a", "--alignscore", "large=b"])
    assert args.products == {"minicheck": [DEFAULT_MODEL], "alignscore": ["a", "large=b"]}
    with pytest.raises(SystemExit):
        sub.choices["serve"].parse_args(["--embed", "a", "--embed", "b"])
