"""`minialign serve` as a real process on 127.0.0.1 (an ephemeral port), driven by real HTTP clients:
answers equal to direct Python calls, TEI's and NeMo Guardrails' shapes, bad requests, a bounded
load test, SIGTERM under load. Nothing is sent anywhere but to that port."""

import base64
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from conftest import save_classifier
from conftest import CORPUS

import minialign as ma
from minialign.nn import int8

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")


PIDS: dict[str, int] = {}  # the module server's process, by its url


def start(args, env_extra=None):
    """The server as a subprocess; (process, base url) once it listens."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env_extra or {})}
    proc = subprocess.Popen([sys.executable, "-m", "minialign", "serve", "--port", "0", *args],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    deadline = time.monotonic() + 120
    lines = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            raise RuntimeError("server exited: " + "".join(lines))
        lines.append(line)
        match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        if match:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
            return proc, match.group(1)
    proc.kill()
    raise RuntimeError("server did not start: " + "".join(lines))


def call(url, path, body=None, *, headers=None, raw=None, timeout=60):
    """(status, parsed JSON or text) of one request on a fresh connection."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(url + path, data=data, method="POST" if data is not None else "GET",
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, payload = response.status, response.read()
    except urllib.error.HTTPError as e:
        status, payload = e.code, e.read()
    try:
        return status, json.loads(payload)
    except ValueError:
        return status, payload.decode()


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_alignscore, minilm_dir):  # noqa: F811
    directory = tmp_path_factory.mktemp("serve")
    save_classifier(directory / "reranker", "bert", 1, minilm_dir)
    save_classifier(directory / "nli", "bert", 3, minilm_dir)
    path, backbone, _ = tiny_alignscore
    return {"alignscore": (path, backbone), "embed": minilm_dir, "reranker": directory / "reranker",
            "nli": directory / "nli"}


@pytest.fixture(scope="module")
def server(models):
    path, backbone = models["alignscore"]
    proc, url = start(["--alignscore", f"large={path}", "--backbone", str(backbone), "--embed", str(models["embed"]),
                       "--classify", str(models["reranker"]), "--max-body-bytes", "200000"])
    PIDS[url] = proc.pid
    yield url
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


def test_nemo_guardrails_alignscore(server, models):
    path, backbone = models["alignscore"]
    scorer = ma.AlignScorer.from_pretrained(path, backbone=str(backbone))
    context, claim = CORPUS[0]
    status, body = call(server, "/alignscore_large", {"evidence": context, "claim": claim})
    assert status == 200 and abs(body["alignscore"] - scorer.score([context], [claim])[0]) <= 1e-6
    status, body = call(server, "/alignscore_large", {"evidence": [context, "More evidence."], "claim": claim})
    assert abs(body["alignscore"] - scorer.score([context + " More evidence."], [claim])[0]) <= 1e-6
    status, text = call(server, "/")
    assert status == 200 and "minialign" in text


def test_score_route_with_details(server, models):
    path, backbone = models["alignscore"]
    scorer = ma.AlignScorer.from_pretrained(path, backbone=str(backbone), mode="bin_sp")
    pairs = [{"context": c, "claim": h} for c, h in CORPUS[:3]]
    status, body = call(server, "/score", {"pairs": pairs, "mode": "bin_sp", "details": True})
    expected = scorer.score([p["context"] for p in pairs], [p["claim"] for p in pairs], return_details=True)
    assert status == 200
    assert max(abs(a - b["score"]) for a, b in zip(body["scores"], expected)) <= 1e-6
    torch.testing.assert_close(torch.tensor(body["details"][2]["aligned"]), torch.tensor(expected[2]["aligned"]),
                               atol=1e-6, rtol=0)


def test_tei_embed_rerank_info_health(server, models):
    emb = ma.SentenceEncoder.from_pretrained(models["embed"])
    texts = ["The Eiffel Tower is in Paris.", "Unicode: café 東京 😀"]
    status, body = call(server, "/embed", {"inputs": texts})
    assert status == 200 and len(body) == 2
    expected = torch.nn.functional.normalize(emb.encode(texts), dim=1)
    torch.testing.assert_close(torch.tensor(body), expected, atol=1e-6, rtol=0)
    status, single = call(server, "/embed", {"inputs": texts[0], "normalize": False})
    assert status == 200 and len(single) == 1  # a list of lists, even for one input
    status, root = call(server, "/", {"inputs": texts[0]})  # POST /: the embedding model
    assert status == 200 and torch.allclose(torch.tensor(root), expected[:1], atol=1e-6)
    clf = ma.Classifier.from_pretrained(models["reranker"])
    docs = ["A tower in Paris.", "Bananas are yellow.", "The Eiffel Tower opened in 1889."]
    status, ranked = call(server, "/rerank", {"query": "Eiffel Tower", "texts": docs, "return_text": True})
    expected = clf.predict(["Eiffel Tower"] * 3, docs, activation="sigmoid").tolist()
    assert status == 200 and [r["index"] for r in ranked] == sorted(range(3), key=lambda i: -expected[i])
    assert all(abs(r["score"] - expected[r["index"]]) <= 1e-6 and r["text"] == docs[r["index"]] for r in ranked)
    status, raw = call(server, "/rerank", {"query": "Eiffel Tower", "texts": docs, "raw_scores": True})
    logits = clf.predict(["Eiffel Tower"] * 3, docs, activation="none").tolist()
    assert all(abs(r["score"] - logits[r["index"]]) <= 1e-6 and "text" not in r for r in raw)
    status, predicted = call(server, "/predict", {"inputs": ["Eiffel Tower", docs[0]]})  # one pair
    assert status == 200 and predicted[0]["label"] == "LABEL_0"
    assert abs(predicted[0]["score"] - expected[0]) <= 1e-6
    status, info = call(server, "/info")
    assert status == 200 and info["model_type"] == {"embedding": {"pooling": "mean"}}
    assert info["max_input_length"] == 256
    # TEI's fields describe one model; "models" describes each one loaded, the classifier and scorer too
    assert set(info["models"]) == {"embed", "classify", "alignscore_large"}
    assert info["models"]["embed"] == {"model_id": str(models["embed"]),
                                       "served_model_name": "sentence-transformers/all-MiniLM-L6-v2",
                                       "model_dtype": "float32", "max_input_length": 256,
                                       "kind": "embedding", "pooling": "mean", "dimension": emb.dimension,
                                       "routes": ["/embed", "/embed_all", "/similarity", "/tokenize", "/decode", "/",
                                                  "/v1/embeddings", "/v1/models", "/rows/embed"]}
    assert info["models"]["classify"]["kind"] == "reranker" and info["models"]["classify"]["labels"] == ["LABEL_0"]
    assert info["models"]["alignscore_large"]["kind"] == "alignscore" and \
        info["models"]["alignscore_large"]["routes"] == ["/alignscore_large", "/score", "/rows/alignscore_large"]
    assert call(server, "/health")[0] == 200


def inference_client(url, monkeypatch):
    from huggingface_hub import InferenceClient, constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # the client refuses any URL offline; this one is loopback
    return InferenceClient(base_url=url)


def test_huggingface_hub_inference_client(server, models, monkeypatch):
    """POST / with an embedding model and a reranker loaded: each InferenceClient method a TEI user calls
    gets its own answer (feature_extraction, text_classification, sentence_similarity), and TEI's bodies
    still reach their routes."""
    client = inference_client(server, monkeypatch)
    emb = ma.SentenceEncoder.from_pretrained(models["embed"])
    text, others = "The Eiffel Tower is in Paris.", ["A tower in Paris.", "Bananas are yellow."]
    vector = client.feature_extraction(text)
    expected = torch.nn.functional.normalize(emb.encode([text]), dim=1)
    torch.testing.assert_close(torch.as_tensor(vector).view(1, -1).float(), expected, atol=1e-6, rtol=0)
    vectors = client.feature_extraction(others, normalize=False)
    torch.testing.assert_close(torch.as_tensor(vectors).float(), emb.encode(others), atol=1e-5, rtol=0)
    status, body = call(server, "/", {"inputs": others, "parameters": {}})  # LangChain's HuggingFaceEndpointEmbeddings
    assert status == 200
    torch.testing.assert_close(torch.tensor(body), torch.nn.functional.normalize(emb.encode(others), dim=1),
                               atol=1e-5, rtol=0)

    clf = ma.Classifier.from_pretrained(models["reranker"])
    labels = client.text_classification(text)  # HF Inference's contract: every label, best first
    assert [e.label for e in labels] == ["LABEL_0"]
    assert abs(labels[0].score - clf.predict([text]).item()) <= 1e-6  # the classifier's own default (sigmoid here)
    raw = client.text_classification(text, function_to_apply="none")
    assert abs(raw[0].score - clf.predict([text], activation="none").item()) <= 1e-5

    similarity = client.sentence_similarity(text, others)  # cosine of the embeddings, as TEI's /similarity
    cosine = torch.nn.functional.cosine_similarity(emb.encode([text]), emb.encode(others)).tolist()
    assert similarity == pytest.approx(cosine, abs=1e-5)
    status, body = call(server, "/similarity", {"inputs": {"source_sentence": text, "sentences": others}})
    assert status == 200 and body == pytest.approx(similarity, abs=1e-6)

    status, ranked = call(server, "/", {"query": "Eiffel Tower", "texts": others})  # TEI's rerank body
    assert status == 200 and ranked == call(server, "/rerank", {"query": "Eiffel Tower", "texts": others})[1]
    status, body = call(server, "/", {"inputs": [["Eiffel Tower", others[0]]]})  # a pair: only /predict takes it
    assert status == 422 and body["error_type"] == "Validation" and "/predict" in body["error"]


def test_the_openai_client_embeds_against_the_service(server, models):
    """The openai client, unchanged (base_url .../v1): embeddings.create with one text and a list, its default
    base64 encoding and "float", `dimensions` (the first ones, then unit length), usage, models.list; an unknown
    model is its NotFoundError naming the loaded one; bad fields are 422 in OpenAI's error shape."""
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0)
    emb = ma.SentenceEncoder.from_pretrained(models["embed"])
    texts = ["The Eiffel Tower is in Paris.", "Unicode: café 東京 😀", ""]
    name = str(models["embed"])
    expected = torch.nn.functional.normalize(emb.encode(texts), dim=1)
    for encoding in ({}, {"encoding_format": "float"}):  # the client asks for base64 unless told, and decodes it
        answer = client.embeddings.create(input=texts, model=name, **encoding)  # the name it was loaded by
        assert [d.index for d in answer.data] == [0, 1, 2] and answer.model == "sentence-transformers/all-MiniLM-L6-v2"
        torch.testing.assert_close(torch.tensor([d.embedding for d in answer.data]), expected, atol=1e-6, rtol=0)
    raw = client.embeddings.create(input=texts, model=name, encoding_format="base64")  # asked for: left encoded
    decoded = [torch.frombuffer(bytearray(base64.b64decode(d.embedding)), dtype=torch.float32) for d in raw.data]
    assert torch.equal(torch.stack(decoded), torch.tensor([d.embedding for d in answer.data]))
    tokens = sum(len(ids) for ids in emb.tokenizer.encode_ids(texts).ids)
    assert answer.usage.prompt_tokens == answer.usage.total_tokens == tokens
    one = client.embeddings.create(input=texts[0], model=Path(name).name, dimensions=64)  # the last part names it too
    shorter = torch.nn.functional.normalize(emb.encode(texts[:1])[:, :64], dim=1)
    torch.testing.assert_close(torch.tensor([one.data[0].embedding]), shorter, atol=1e-6, rtol=0)
    status, tei = call(server, "/embed", {"inputs": texts[:1], "dimensions": 64})  # TEI's field: the same rule
    assert status == 200 and torch.allclose(torch.tensor(tei), shorter, atol=1e-6)
    assert [m.id for m in client.models.list()] == ["sentence-transformers/all-MiniLM-L6-v2"]  # its card's id
    with pytest.raises(openai.NotFoundError, match="is not loaded; embedding models: .*all"):
        client.embeddings.create(input="x", model="text-embedding-3-small")
    for body, field in (({"input": "x", "model": name, "dimensions": 1000}, "`dimensions` 1000 is more"),
                        ({"input": [1, 2, 3], "model": name}, "token ids"),
                        ({"input": "x", "model": name, "encoding_format": "int8"}, "`encoding_format`"),
                        ({"input": [], "model": name}, "`input` cannot be empty"),
                        ({"input": "x", "model": "../../etc/passwd"}, "is not loaded")):
        status, error = call(server, "/v1/embeddings", body)
        assert status in (400, 404, 422) and field in error["error"]["message"], (body, error)
        assert error["error"]["type"] in ("invalid_request_error", "not_found_error")


@pytest.mark.parametrize("path,body,status,error_type,text", [
    ("/embed", {"inputs": 5}, 422, "Validation", "`inputs`"),
    ("/embed", {"input": "typo"}, 422, "Validation", "`inputs`"),
    ("/embed", {"inputs": ["ok", ["nested"]]}, 422, "Validation", "`inputs[1]`"),
    ("/embed", {"inputs": "\ud83d"}, 422, "Validation", "lone surrogate"),
    ("/embed", {"inputs": "word " * 400, "truncate": False}, 413, "Validation", "must have less than 256 tokens"),
    ("/embed", {"inputs": "ok", "normalize": "yes"}, 422, "Validation", "`normalize`"),
    ("/rerank", {"query": 3, "texts": ["a"]}, 422, "Validation", "`query`"),
    ("/predict", {"inputs": ["a", "b", "c"]}, 422, "Validation", "`inputs`"),
    ("/score", {"pairs": [{"context": "c"}]}, 422, "Validation", "`pairs[0].claim` is missing"),
    ("/score", {"pairs": [{"context": "c", "claim": None}]}, 422, "Validation", "`pairs[0].claim` is null"),
    ("/score", {"pairs": [{"context": "c", "claim": "x."}], "mode": "best"}, 422, "Validation", "`mode`"),
    ("/alignscore_large", {"evidence": 1, "claim": "x"}, 422, "Validation", "`evidence`"),
    ("/alignscore_large", {"evidence": "x", "claim": ""}, 400, "Empty", "`claim` cannot be empty"),
    ("/alignscore_large", {"evidence": "x", "claim": " \n "}, 422, "Validation", "`claim` has no sentence"),
    ("/alignscore_large", {"evidence": "x"}, 422, "Validation", "`claim` is missing"),
    ("/alignscore_large", {"claim": "x."}, 422, "Validation", "`evidence` is missing"),
    ("/score", {"pairs": [{"context": "c", "claim": ""}]}, 400, "Empty", "`pairs[0].claim` cannot be empty"),
    ("/score", {"pairs": []}, 400, "Empty", "`pairs` cannot be empty"),
    ("/", {"inputs": "x", "parameters": {"top_k": 0}}, 422, "Validation", "`parameters.top_k`"),
    ("/", {"inputs": "x", "parameters": {"function_to_apply": "tanh"}}, 422, "Validation", "`parameters.function_to_apply`"),
])
def test_bad_requests(server, path, body, status, error_type, text):
    got, answer = call(server, path, body)
    assert got == status and answer["error_type"] == error_type and text in answer["error"], answer


@pytest.mark.parametrize("path,body,name", [
    ("/embed", {"inputs": []}, "inputs"), ("/predict", {"inputs": []}, "inputs"), ("/", {"inputs": []}, "inputs"),
    ("/rerank", {"query": "q", "texts": []}, "texts"),
    ("/similarity", {"inputs": {"source_sentence": "q", "sentences": []}}, "inputs.sentences"),
])
def test_empty_batch_is_400_empty_on_every_route(server, path, body, name):
    status, answer = call(server, path, body)
    assert (status, answer) == (400, {"error": f"Input validation error: `{name}` cannot be empty",
                                      "error_type": "Empty"})


def test_an_empty_text_is_its_special_tokens_alone_as_on_every_face(server, models):
    """One rule for "" on every face (README, "Empty text"): embedded / classified as the special tokens alone,
    as sentence-transformers does and as Python, the CLI and the file jobs do (TEI refuses it)."""
    status, vectors = call(server, "/embed", {"inputs": ["a", ""], "normalize": False})
    assert status == 200
    embedder = ma.SentenceEncoder.from_pretrained(models["embed"])
    torch.testing.assert_close(torch.tensor(vectors), embedder.encode(["a", ""]), atol=1e-5, rtol=0)
    status, answer = call(server, "/predict", {"inputs": [["", ""], ["a"]], "raw_scores": True})
    assert status == 200 and len(answer) == 2
    expected = ma.Classifier.from_pretrained(models["reranker"]).predict(["", "a"], ["", None], activation="none")
    assert [row[0]["score"] for row in answer] == pytest.approx(expected.tolist(), abs=1e-5)
    status, ranked = call(server, "/rerank", {"query": "", "texts": ["a", ""], "raw_scores": True})
    assert status == 200 and len(ranked) == 2
    status, ranked = call(server, "/similarity", {"inputs": {"source_sentence": "", "sentences": ["", "b"]}})
    assert status == 200 and ranked[0] == pytest.approx(1.0, abs=1e-5)


def test_unknown_routes_and_methods_answer_json_and_home_lists_what_is_served(server):
    status, body = call(server, "/alignscore_base", {"evidence": "a", "claim": "b"})  # this model is not loaded
    assert status == 404 and body["error_type"] == "NotFound" and "--alignscore base=" in body["error"]
    status, body = call(server, "/no/such/route", {"inputs": "x"})
    assert status == 404 and body["error_type"] == "NotFound" and "/no/such/route" in body["error"]
    status, body = call(server, "/embed")  # GET on a POST route
    assert status == 405 and body == {"error": "Method Not Allowed: GET /embed; it takes POST",
                                      "error_type": "MethodNotAllowed"}
    status, text = call(server, "/")
    listed = re.findall(r"(GET|POST) (/[\w/.-]*)", text)
    assert {path for _, path in listed} == {"/", "/alignscore_large", "/score", "/embed", "/embed_all", "/similarity",
                                            "/predict", "/rerank", "/health", "/info", "/rows/alignscore_large",
                                            "/rows/embed",
                                            "/rows/classify", "/v1/embeddings", "/v1/models",
                                            "/pipeline/text-classification", "/tokenize", "/decode", "/metrics",
                                            "/v1/rerank", "/v2/rerank", "/openapi.json"}
    for method, path in listed:  # each one is served: an empty body is refused for what it holds, not for the route
        assert call(server, path, {} if method == "POST" else None)[0] not in (404, 405, 424), (method, path)


def test_truncate_true_and_malformed_and_oversized_bodies(server):
    status, body = call(server, "/embed", {"inputs": "word " * 400, "truncate": True})
    assert status == 200 and len(body[0]) == 384
    status, body = call(server, "/embed", raw=b'{"inputs": "unterminated')
    assert status == 422 and body["error_type"] == "Validation" and "not JSON" in body["error"]
    status, body = call(server, "/embed", raw=json.dumps({"inputs": "x" * 300_000}).encode())
    assert status == 413 and "over the limit" in body["error"]
    assert call(server, "/health")[0] == 200  # still serving


@pytest.mark.parametrize("path,body,name,given", [
    ("/embed", {"input": "typo"}, "inputs", "`input`"),
    ("/embed", {}, "inputs", "none"),
    ("/predict", {"text": "x"}, "inputs", "`text`"),
    ("/rerank", {"texts": ["a"]}, "query", "`texts`"),
    ("/rerank", {"query": "q"}, "texts", "`query`"),
    ("/similarity", {}, "inputs", "none"),
    ("/similarity", {"inputs": {"sentences": ["a"]}}, "inputs.source_sentence", "`sentences`"),
    ("/similarity", {"inputs": {"source_sentence": "a"}}, "inputs.sentences", "`source_sentence`"),
    ("/score", {"pair": []}, "pairs", "`pair`"),
    ("/score", {"pairs": [{"context": "c"}]}, "pairs[0].claim", "`context`"),
    ("/alignscore_large", {"claim": "x."}, "evidence", "`claim`"),
    ("/pipeline/text-classification", {"input": "x"}, "inputs", "`input`"),
    ("/rows/embed", {"row": [{"text": "x"}]}, "rows", "`row`"),
])
def test_a_missing_field_is_named_on_every_route(server, path, body, name, given):
    """Every route's required fields, said one way (core.missing): 422, the field's name and the fields the body has
    (TEI's router says serde's "missing field `inputs`"), never "got NoneType"."""
    status, answer = call(server, path, body)
    assert (status, answer) == (422, {"error": f"`{name}` is missing (fields given: {given})",
                                      "error_type": "Validation"})


def test_a_missing_or_null_field_in_openai_s_shape(server, models):
    for body, said in (({"model": str(models["embed"])}, f"`input` is missing (fields given: `model`)"),
                       ({"input": "x"}, "`model` is missing (fields given: `input`)"),
                       ({"input": None, "model": str(models["embed"])}, "`input` is null, not a string or a list")):
        status, answer = call(server, "/v1/embeddings", body)
        assert status == 422 and answer["error"]["type"] == "invalid_request_error", answer
        assert answer["error"]["message"].startswith(said), answer
    status, answer = call(server, "/embed", {"inputs": None})
    assert (status, answer["error"]) == (422, "`inputs` is null, not a string or a list of strings")


def test_a_body_over_the_limit_names_the_limit_and_its_flag(server):
    """413 naming the limit and where it is set, whether the body says its length or is sent in chunks."""
    import http.client

    raw = json.dumps({"inputs": "x" * 300_000}).encode()
    status, answer = call(server, "/embed", raw=raw)
    assert status == 413 and answer["error_type"] == "Validation"
    assert answer["error"].startswith(f"request body of {len(raw)} bytes is over the limit of 200000 bytes")
    assert "--max-body-bytes" in answer["error"] and "Limits.max_body_bytes" in answer["error"]
    host, port = server.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:  # no Content-Length: read until past the limit
        connection.request("POST", "/embed", body=iter([b'{"inputs": "', b"x" * 150_000, b"x" * 150_000, b'"}']),
                           headers={"Content-Type": "application/json"}, encode_chunked=True)
        response = connection.getresponse()
        answer = json.loads(response.read())
    finally:
        connection.close()
    assert response.status == 413 and "over the limit of 200000 bytes" in answer["error"]
    assert "--max-body-bytes" in answer["error"]
    assert call(server, "/health")[0] == 200


def test_rows_keep_their_ids_as_the_file_command_writes_them(server, models, tmp_path):
    """POST /rows/KIND gives each row's id back in its record, as `minialign embed --input --output` writes it
    (`id`, or the field `id_field` names, as --id-field); a row without one has none; a repeated id is refused."""
    from minialign.apps.cli import main

    rows = [{"id": "doc-1", "text": "The Eiffel Tower is in Paris."}, {"id": 7, "text": "Unicode: café 東京 😀"},
            {"id": {"shard": 2, "n": 1}, "text": ""}]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    assert main(["embed", "--model", str(models["embed"]), "--input", str(tmp_path / "in.jsonl"),
                 "--output", str(tmp_path / "out.jsonl")]) == 0
    written = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    status, body = call(server, "/rows/embed", {"rows": rows})
    assert status == 200 and [r["id"] for r in body["results"]] == [r["id"] for r in written] == [r["id"] for r in rows]
    for got, expected in zip(body["results"], written):
        assert list(got) == list(expected)  # the id first, then the record's keys, as the file's lines
        torch.testing.assert_close(torch.tensor(got["embedding"]), torch.tensor(expected["embedding"]), atol=1e-5,
                                   rtol=0)
    status, body = call(server, "/rows/embed", {"rows": [{"doc": "a", "text": "x"}, {"text": "y"}, {"doc": None,
                                                                                                    "text": "z"}],
                                                "id_field": "doc"})
    assert status == 200 and body["results"][0]["id"] == "a" and "id" not in body["results"][1]
    assert "id" not in body["results"][2]
    status, answer = call(server, "/rows/embed", {"rows": [{"id": 1, "text": "x"}, {"id": "1", "text": "y"}]})
    assert status == 422 and answer["error"].startswith("`rows[1]`: id '1' is also the id of rows[0]"), answer
    status, answer = call(server, "/rows/embed", {"rows": [{"text": "x"}], "id_field": 3})
    assert status == 422 and "`id_field` must be a string" in answer["error"], answer


def _serve_process(args):
    """`minialign serve ARGS` on 127.0.0.1 as a subprocess: (process, base url, the stderr lines up to listening)."""
    proc = subprocess.Popen([sys.executable, "-m", "minialign", "serve", "--host", "127.0.0.1", *args],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines, deadline = [], time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        lines.append(line)
        if match := re.search(r"listening on (http://127\.0\.0\.1:\d+)", line):
            return proc, match.group(1), lines
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError("server did not start: " + "".join(lines))


def test_ctrl_c_stops_with_one_line_and_status_130(models):
    """SIGINT (Ctrl-C) on a serving process: a graceful stop, one line, status 130 (128 + SIGINT, a shell's status
    for a command Ctrl-C ended), no traceback."""
    proc, url, lines = _serve_process(["--port", "0", "--embed", str(models["embed"])])
    try:
        assert call(url, "/embed", {"inputs": "x"}, timeout=30)[0] == 200
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    said = "".join(lines) + rest
    assert "Traceback" not in said and "KeyboardInterrupt" not in said, said
    assert proc.returncode == 130, said
    assert [line for line in rest.splitlines() if line.strip()] == ["minialign serve: stopped (Ctrl-C)"], said


def test_a_port_in_use_is_one_line_naming_it(models, capsys):
    """--port N with N taken (and listening) on 127.0.0.1: one line naming host:port and the flag, status 2, said
    before any model is loaded; a port out of range is argparse's error."""
    import socket

    from minialign.apps.cli import main

    taken = socket.socket()
    try:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        started = time.monotonic()
        assert main(["serve", "--port", str(port), "--embed", str(models["embed"])]) == 2
        assert time.monotonic() - started < 30
    finally:
        taken.close()
    err = capsys.readouterr().err
    assert err == f"minialign serve: error: 127.0.0.1:{port} is in use; pick another with --port (0: any free port)\n"
    with pytest.raises(SystemExit) as e:
        main(["serve", "--port", "70000", "--embed", str(models["embed"])])
    assert e.value.code == 2 and "a port is a number from 0 to 65535" in capsys.readouterr().err


def _peak_mb(pid: int) -> int:
    """A process's peak resident memory (VmHWM), MB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) // 1024


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_the_longest_pair_the_body_limit_admits_takes_bounded_memory(server):
    """A pair of two ~95,000-character texts (the most --max-body-bytes 200000 admits) on /predict and
    /rerank with truncate: answered, and the server's peak memory grows by little. `tokenizers`' own pair
    truncation is quadratic (a 300 KB body killed the server at 24 GB; 40,000 characters took 2.6 GB)."""
    t = ("lorem ipsum dolor sit amet. " * 4000)[:95_000]
    before = _peak_mb(PIDS[server])
    status, body = call(server, "/predict", {"inputs": [t, t], "truncate": True}, timeout=120)
    assert status == 200 and len(body) == 1, body
    status, body = call(server, "/rerank", {"query": t, "texts": [t], "truncate": True}, timeout=120)
    assert status == 200 and body[0]["index"] == 0, body
    assert _peak_mb(PIDS[server]) - before < 400, (before, _peak_mb(PIDS[server]))


def test_wrong_route_for_the_model_is_424(models, tmp_path, monkeypatch):
    proc, url = start(["--classify", str(models["nli"])])
    try:
        status, body = call(url, "/embed", {"inputs": "x"})
        assert status == 424 and body["error"] == "Backend error: Model is not an embedding model"
        status, body = call(url, "/rerank", {"query": "q", "texts": ["a"]})
        assert status == 424 and "not a re-ranker" in body["error"]
        status, body = call(url, "/", {"inputs": {"source_sentence": "a", "sentences": ["b"]}})
        assert status == 424 and "not an embedding model" in body["error"]
        status, body = call(url, "/score", {"pairs": [{"context": "c", "claim": "x."}]})  # no AlignScore model
        assert status == 404 and body["error_type"] == "NotFound" and "--alignscore" in body["error"]
        status, text = call(url, "/")
        assert set(re.findall(r"(?:GET|POST) /[\w/.-]*", text)) == {"GET /", "POST /", "POST /predict", "GET /health",
                                                                     "GET /info", "POST /rows/classify",
                                                                     "POST /pipeline/text-classification",
                                                                     "POST /tokenize", "POST /decode", "GET /metrics",
                                                                     "GET /openapi.json"}
        status, body = call(url, "/", {"inputs": [["A man eats.", "Someone eats."], ["Alone."]]})  # a classifier predicts
        clf = ma.Classifier.from_pretrained(models["nli"])
        expected = clf.predict(["A man eats."], ["Someone eats."], activation="softmax")[0]
        assert status == 200 and len(body) == 2
        assert {d["label"]: d["score"] for d in body[0]} == pytest.approx(dict(zip(clf.labels, expected.tolist())), abs=1e-6)
        assert [d["score"] for d in body[0]] == sorted((d["score"] for d in body[0]), reverse=True)
        status, info = call(url, "/info")
        assert info["model_type"]["classifier"]["id2label"] == {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"}
        # huggingface_hub's text_classification on a classifier alone: HF Inference's answer, top_k honoured
        top = inference_client(url, monkeypatch).text_classification("A man eats.", top_k=2)
        expected = sorted(zip(clf.labels, clf.predict(["A man eats."])[0].tolist()), key=lambda x: -x[1])[:2]
        assert [(e.label, e.score) for e in top] == [(label, pytest.approx(score, abs=1e-6)) for label, score in expected]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def test_api_key(models):
    proc, url = start(["--embed", str(models["embed"]), "--api-key", "s3cret"])
    try:
        assert call(url, "/embed", {"inputs": "x"})[0] == 401
        assert call(url, "/embed", {"inputs": "x"}, headers={"Authorization": "Bearer wrong"})[0] == 401
        assert call(url, "/embed", {"inputs": "x"}, headers={"Authorization": "Bearer s3cret"})[0] == 200
        assert call(url, "/health")[0] == 200  # open, for load balancers
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


@pytest.mark.slow
def test_load_then_sigterm_nothing_lost(models):
    """32 clients x 20 requests, each answer checked against its own request; then SIGTERM under load:
    every request the server took is answered, the rest are refused at connect, and it exits."""
    emb = ma.SentenceEncoder.from_pretrained(models["embed"])
    texts = [f"sentence number {i} about the tower" for i in range(64)]
    expected = torch.nn.functional.normalize(emb.encode(texts), dim=1)
    proc, url = start(["--embed", str(models["embed"]), "--max-wait-ms", "10"])

    def client(c):
        for r in range(20):
            i = (c * 20 + r) % len(texts)
            status, body = call(url, "/embed", {"inputs": texts[i]})
            assert status == 200 and torch.allclose(torch.tensor(body[0]), expected[i], atol=1e-5), (c, r)
        return 20

    try:
        with ThreadPoolExecutor(32) as pool:
            assert sum(pool.map(client, range(32))) == 640
        outcomes = []  # (kind, detail, when the request was sent)
        sigterm_at = [float("inf")]

        def hammer(c):
            for r in range(200):
                i = (c + r) % len(texts)
                sent = time.monotonic()
                try:
                    status, body = call(url, "/embed", {"inputs": texts[i]}, timeout=60)
                except urllib.error.URLError as e:
                    refused = isinstance(e.reason, ConnectionRefusedError)
                    outcomes.append(("refused" if refused else "lost", repr(e), sent))
                    return
                except (ConnectionResetError, ConnectionRefusedError, TimeoutError) as e:
                    refused = isinstance(e, ConnectionRefusedError)
                    outcomes.append(("refused" if refused else "lost", repr(e), sent))
                    return
                ok = status == 200 and torch.allclose(torch.tensor(body[0]), expected[i], atol=1e-5)
                outcomes.append(("answered" if ok else ("unhealthy" if status == 503 else "wrong"), status,
                                 sent))

        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(hammer, c) for c in range(8)]
            time.sleep(1.0)
            sigterm_at[0] = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            for f in futures:
                f.result()
        # Every request sent before SIGTERM is answered, correctly. One sent after it may find the listener
        # closed (refused) or, if its connection was still in the kernel's accept backlog when the listener
        # closed, be reset without the server ever having taken it.
        settled = sigterm_at[0] - 0.2  # well before the signal: certainly accepted by the server
        before = [kind for kind, _, sent in outcomes if sent < settled]
        assert "answered" in before and set(before) <= {"answered"}, outcomes[-10:]
        after = {kind for kind, _, sent in outcomes if sent >= settled}
        assert after <= {"answered", "refused", "lost", "unhealthy"} and "wrong" not in after
        assert proc.wait(timeout=60) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal after its graceful stop
    finally:
        if proc.poll() is None:
            proc.kill()


def test_in_process_failures_overload_and_merging(models, monkeypatch):
    """The Service in this process on 127.0.0.1: a request the model fails on is a 500 and the next
    one is served; a full queue answers 429; concurrent requests share model calls."""
    import socket

    import uvicorn

    from minialign.apps.serve import Limits, Models, Service

    embedder = ma.SentenceEncoder.from_pretrained(models["embed"])
    original = embedder.encode
    gate = threading.Event()
    gate.set()

    def encode(texts, **kwargs):
        gate.wait(10)
        if "boom" in texts:
            raise RuntimeError("the model failed")
        return original(texts, **kwargs)

    monkeypatch.setattr(embedder, "encode", encode)
    service = Service(Models(embedder=embedder), Limits(max_queue=4, max_wait_ms=20))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(service.app(), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        status, body = call(url, "/embed", {"inputs": "boom"})
        assert status == 500 and body["error_type"] == "Backend" and "the model failed" in body["error"]
        assert call(url, "/embed", {"inputs": "fine"})[0] == 200
        calls_before = service.batchers["embed"].calls
        with ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(lambda i: call(url, "/embed", {"inputs": f"text {i}"})[0], range(4)))
        assert statuses == [200] * 4
        gate.clear()  # the model blocks: four requests fill the queue, the fifth is refused
        with ThreadPoolExecutor(8) as pool:
            waiting = [pool.submit(call, url, "/embed", {"inputs": f"wait {i}"}) for i in range(4)]
            time.sleep(0.5)
            status, body = call(url, "/embed", {"inputs": "one too many"})
            assert status == 429 and body == {"error": "Model is overloaded", "error_type": "Overloaded"}
            gate.set()
            assert [f.result()[0] for f in waiting] == [200] * 4
        assert service.batchers["embed"].calls - calls_before < 8  # 8 requests, fewer model calls
    finally:
        gate.set()
        server.should_exit = True
        thread.join(30)


def test_one_scorer_per_model_serves_every_mode(models, monkeypatch):
    """The service keeps the one AlignScorer it was given (no scorer per mode): requests with different
    modes, merged into one model call, get what the scorer gives for each mode."""
    import asyncio

    from minialign.apps.serve import Limits, Models, Service, nemo

    path, backbone = models["alignscore"]
    scorer = ma.AlignScorer.from_pretrained(path, backbone=str(backbone))
    monkeypatch.setattr(ma.AlignScorer, "__init__", lambda *a, **k: pytest.fail("the service built a scorer"))
    service = Service(Models(alignscore={"base": scorer}), Limits(max_wait_ms=50, max_batch_tokens=777))
    assert scorer.engine.max_tokens == 777  # the budget, set through the runner
    pairs = [{"context": c, "claim": h} for c, h in CORPUS[:3]]
    modes = ["nli_sp", "bin", "reg_sp"]

    async def requests():
        return await asyncio.gather(*[nemo.score(service, {"pairs": pairs, "mode": mode}) for mode in modes])

    try:
        calls = service.batchers["alignscore_base"].calls
        answers = asyncio.run(requests())
        assert service.batchers["alignscore_base"].calls - calls < len(modes)  # merged
    finally:
        service.close()
    for mode, answer in zip(modes, answers):
        expected = scorer.score([p["context"] for p in pairs], [p["claim"] for p in pairs], mode=mode,
                                warn_truncation=False)
        assert max(abs(a - b) for a, b in zip(answer["scores"], expected)) <= 1e-6


def test_score_takes_the_name_a_scorer_is_served_by(models):
    """/score's `model`: an AlignScore route name or the name the model is served by (--served-model-name); another
    is a 422 naming the loaded ones and their served names."""
    import asyncio

    from minialign.apps.serve import Limits, Models, Service, nemo
    from minialign.apps.serve.core import ServiceError

    path, backbone = models["alignscore"]
    scorer = ma.AlignScorer.from_pretrained(path, backbone=str(backbone))
    service = Service(Models(alignscore={"base": scorer}, served={"alignscore_base": "my-alignscore"}), Limits())
    pairs = [{"context": c, "claim": h} for c, h in CORPUS[:2]]
    try:
        by_route = asyncio.run(nemo.score(service, {"pairs": pairs, "model": "base"}))
        by_served = asyncio.run(nemo.score(service, {"pairs": pairs, "model": "my-alignscore"}))
        with pytest.raises(ServiceError, match=r"`model` 'other' is not loaded; loaded: \['base'\] "
                                               r"\(served as \['my-alignscore'\]\)"):
            asyncio.run(nemo.score(service, {"pairs": pairs, "model": "other"}))
    finally:
        service.close()
    assert by_served["scores"] == by_route["scores"] and len(by_route["scores"]) == 2


@pytest.mark.skipif(not int8.available(), reason="no FBGEMM int8 kernels on this torch / CPU")
def test_int8_is_said_in_info(minilm_dir):
    """dtype int8 (opt-in, never chosen for the user) shows in TEI's /info; answers are the int8 encoder's."""
    quantized = ma.SentenceEncoder.from_pretrained(minilm_dir, dtype="int8")
    texts = ["The Eiffel Tower is in Paris.", "Unicode: café 東京 😀"]
    proc, url = start(["--embed", str(minilm_dir), "--dtype", "int8"])
    try:
        status, info = call(url, "/info")
        assert status == 200 and info["model_dtype"] == "int8"
        status, body = call(url, "/embed", {"inputs": texts, "normalize": False})
        assert status == 200
        torch.testing.assert_close(torch.tensor(body), quantized.encode(texts), atol=1e-5, rtol=0)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


# -- the retrieval products: TEI's /embed_sparse (--sparse) and /embed_all (--multivector), /rows/m3 (--m3) --------

RETRIEVAL_TEXTS = ["The Eiffel Tower is in Paris.", "", "Unicode: café 東京 😀", "word " * 40]


@pytest.fixture(scope="module")
def retrieval_server(retrieval_dirs):
    proc, url = start(["--sparse", str(retrieval_dirs["sparse"]), "--multivector", str(retrieval_dirs["multivector"]),
                       "--m3", str(retrieval_dirs["m3"])])
    yield url
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


@pytest.mark.filterwarnings("ignore::minialign.runtime.engine.TruncationWarning")  # the long text
def test_tei_embed_sparse_equals_the_sparse_encoder(retrieval_server, retrieval_dirs):
    encoder = ma.SparseEncoder.from_pretrained(retrieval_dirs["sparse"])
    for body, expected in (({"inputs": RETRIEVAL_TEXTS, "truncate": True}, encoder.encode(RETRIEVAL_TEXTS)),
                           ({"inputs": RETRIEVAL_TEXTS[:2], "prompt_name": "query"},
                            encoder.encode(RETRIEVAL_TEXTS[:2], prompt_name="query")),
                           ({"inputs": RETRIEVAL_TEXTS[:3], "task": "document"},
                            encoder.encode_document(RETRIEVAL_TEXTS[:3]))):
        status, answer = call(retrieval_server, "/embed_sparse", body)
        assert status == 200 and len(answer) == len(body["inputs"])
        for got, row in zip(answer, expected.to_dense()):
            assert [v["index"] for v in got] == row.nonzero().flatten().tolist()  # non-zero values, ascending index
            assert torch.equal(torch.tensor([v["value"] for v in got]), row[row != 0])
            assert all(set(v) == {"index", "value"} for v in got)
    status, single = call(retrieval_server, "/embed_sparse", {"inputs": "Paris"})
    assert status == 200 and len(single) == 1  # a list per input, even for one


@pytest.mark.filterwarnings("ignore::minialign.runtime.engine.TruncationWarning")  # the long text
def test_tei_embed_all_equals_the_multivector_encoder(retrieval_server, retrieval_dirs):
    encoder = ma.MultiVectorEncoder.from_pretrained(retrieval_dirs["multivector"])
    texts = RETRIEVAL_TEXTS[:3]
    for body, expected in (({"inputs": texts}, encoder.encode(texts)),
                           ({"inputs": texts, "task": "query", "truncate": True}, encoder.encode_query(texts)),
                           ({"inputs": texts, "prompt_name": "document"}, encoder.encode(texts, prompt_name="document"))):
        status, answer = call(retrieval_server, "/embed_all", body)
        assert status == 200 and len(answer) == len(texts)
        for got, vectors in zip(answer, expected):
            assert torch.equal(torch.tensor(got).reshape(-1, encoder.dimension), vectors)


def test_rows_m3_info_and_bad_requests(retrieval_server, retrieval_dirs):
    m3 = ma.M3Encoder.from_pretrained(retrieval_dirs["m3"])
    expected = m3.encode(RETRIEVAL_TEXTS[:2], return_sparse=True, return_colbert_vecs=True)
    status, body = call(retrieval_server, "/rows/m3", {"rows": [{"text": t} for t in RETRIEVAL_TEXTS[:2]],
                                                       "options": {"return_sparse": True,
                                                                   "return_colbert_vecs": True}})
    assert status == 200
    for i, record in enumerate(body["results"]):
        assert torch.equal(torch.tensor(record["dense_vecs"]), expected["dense_vecs"][i])
        assert record["lexical_weights"] == expected["lexical_weights"][i]
        assert torch.equal(torch.tensor(record["colbert_vecs"]), expected["colbert_vecs"][i])
    status, info = call(retrieval_server, "/info")
    assert info["models"]["sparse"]["routes"] == ["/embed_sparse", "/tokenize", "/decode",  # the first TEI model
                                                  "/rows/sparse"]
    assert info["models"]["multivector"]["routes"] == ["/embed_all", "/rows/multivector"]
    assert info["models"]["m3"]["routes"] == ["/rows/m3"]
    assert info["models"]["sparse"]["model_id"] == str(retrieval_dirs["sparse"])
    status, text = call(retrieval_server, "/")
    assert "POST /embed_sparse" in text and "POST /embed_all" in text
    for path, body, status_expected, named in (
            ("/embed_sparse", {"inputs": 5}, 422, "`inputs`"),
            ("/embed_sparse", {"inputs": ["a", None]}, 422, "`inputs[1]`"),
            ("/embed_sparse", {"inputs": "a", "truncate": "yes"}, 422, "`truncate`"),
            ("/embed_sparse", {"inputs": "a", "prompt_name": "nope"}, 413, "`prompt_name`"),
            ("/embed_sparse", {"inputs": "a", "task": "passage"}, 422, "`task`"),
            ("/embed_sparse", {"inputs": "a", "truncation_direction": "left"}, 422, "`truncation_direction`"),
            ("/embed_sparse", {"inputs": []}, 400, "`inputs`"),
            ("/embed_sparse", {"inputs": "word " * 200}, 413, "`inputs` must have less than"),
            ("/embed_all", {"inputs": "a", "prompt_name": 3}, 422, "`prompt_name`"),
            ("/embed_all", {"inputs": "word " * 200}, 413, "`inputs` must have less than"),
            ("/embed", {"inputs": "a"}, 424, "not an embedding model"),
            ("/embed_all", {"inputs": "a", "model": str(retrieval_dirs["sparse"])}, 200, None),  # one model: not read
            ("/rows/m3", {"rows": [{"text": "a"}], "options": {"return_dense": False}}, 422, "return_dense"),
            ("/rows/m3", {"rows": [{"txt": "a"}]}, 422, "'text' is missing")):
        status, answer = call(retrieval_server, path, body)
        assert status == status_expected, (path, body, answer)
        if named is not None:
            assert named in answer["error"], (path, body, answer)


def test_embed_sparse_and_embed_all_without_their_model_are_424(models):
    proc, url = start(["--classify", str(models["nli"])])
    try:
        for path in ("/embed_sparse", "/embed_all"):
            status, body = call(url, path, {"inputs": "x"})
            assert status == 424 and ("--sparse" if path == "/embed_sparse" else "--multivector") in body["error"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
