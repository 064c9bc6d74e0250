"""The service's routes (serve/app.py, nemo.py, tei.py, hf_inference.py, openai.py, rows.py) under property-based
tests (hypothesis), in process (starlette's TestClient: no socket), on tiny models: every body, JSON or not, is
answered below 500; a 4xx is a JSON body in the route's protocol's error shape whose message names the field (or
says the body is not JSON); a 2xx holds one result per input. Bodies are each route's well-formed body with fields
dropped, replaced by any JSON value or added, or any JSON value, or any bytes. Bounded (max_examples, a generous
deadline) and derandomized, so CI is deterministic."""

import json
import re
from datetime import timedelta

import pytest
from conftest import save_classifier, save_filler, save_tagger

import minialign as ma

pytest.importorskip("hypothesis")
pytest.importorskip("starlette")
pytest.importorskip("httpx")  # starlette's TestClient
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

BOUNDED = settings(max_examples=25, deadline=timedelta(seconds=20), derandomize=True,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

NLI = ["entailment", "neutral", "contradiction"]


@pytest.fixture(scope="module")
def clients(tmp_path_factory, tiny_alignscore, minilm_dir, minicheck_dir, retrieval_dirs, wordpiece_dir):
    """Two services: one with a model behind every route family (AlignScore, MiniCheck, an embedder, a 3-label NLI
    classifier, SPLADE, a multi-vector encoder; ner, fill-mask and zero-shot as products), one with a reranker
    alone (/rerank, and TEI's 424 on the routes of models it lacks); TestClients over them."""
    from family_builders import FAMILIES, hf_model, write_tokenizer
    from starlette.testclient import TestClient
    from test_products import served_as

    from minialign.apps.serve import Limits, Models, Service

    root = tmp_path_factory.mktemp("fuzz-serve")
    nli = root / "nli"
    row = FAMILIES["bert"]
    vocab = write_tokenizer(row, nli, wordpiece_dir=wordpiece_dir, bpe_dir=None)
    hf_model(row, vocab, num_labels=3, id2label=dict(enumerate(NLI)),
             label2id={label: i for i, label in enumerate(NLI)}).save_pretrained(nli)
    save_classifier(root / "reranker", "bert", 1, minilm_dir)
    path, backbone, _ = tiny_alignscore
    products = {**served_as("ner", save_tagger(root / "ner", wordpiece_dir)).products,
                **served_as("fill-mask", save_filler(root / "fill", wordpiece_dir)).products,
                **served_as("zero-shot", nli).products}
    every = Models(alignscore={"base": ma.AlignScorer.from_pretrained(path, backbone=str(backbone))},
                   minicheck=ma.MiniCheckScorer.from_pretrained(minicheck_dir),
                   embedder=ma.SentenceEncoder.from_pretrained(minilm_dir),
                   classifier=ma.Classifier.from_pretrained(nli),
                   sparse=ma.SparseEncoder.from_pretrained(retrieval_dirs["sparse"]),
                   multivector=ma.MultiVectorEncoder.from_pretrained(retrieval_dirs["multivector"]),
                   products=products, names={"embed": "tiny-embed"})
    reranker = Models(classifier=ma.Classifier.from_pretrained(root / "reranker"), names={"classify": "reranker"})
    limits = Limits(max_wait_ms=0, max_client_batch_size=8, max_body_bytes=20_000)
    services = [Service(every, limits), Service(reranker, limits)]
    with TestClient(services[0].app(), raise_server_exceptions=False) as one, \
            TestClient(services[1].app(), raise_server_exceptions=False) as two:
        yield {"one": (one, services[0], BODIES), "two": (two, services[1], RERANK_BODIES)}


# Each POST route's well-formed body, and how many results its 2xx answer holds for it (None: not counted)
TEXT = "The Eiffel Tower is in Paris."
BODIES = {
    "/alignscore_base": ({"evidence": TEXT, "claim": "It is in Paris."}, None),
    "/minicheck": ({"evidence": [TEXT, "More."], "claim": "It is in Paris."}, None),
    "/score": ({"pairs": [{"context": TEXT, "claim": "Paris."}, {"context": "b", "claim": "c."}], "mode": "bin",
                "details": True}, lambda b: len(b["pairs"])),
    "/embed": ({"inputs": [TEXT, "b"], "normalize": True, "truncate": True, "dimensions": 8},
               lambda b: 1 if isinstance(b["inputs"], str) else len(b["inputs"])),
    "/embed_sparse": ({"inputs": [TEXT, "b"], "task": "query", "truncate": True},
                      lambda b: 1 if isinstance(b["inputs"], str) else len(b["inputs"])),
    "/embed_all": ({"inputs": [TEXT], "model": "multivector", "truncate": True},
                   lambda b: 1 if isinstance(b["inputs"], str) else len(b["inputs"])),
    "/similarity": ({"inputs": {"source_sentence": TEXT, "sentences": ["a", "b", "c"]},
                     "parameters": {"truncate": True}}, lambda b: len(b["inputs"]["sentences"])),
    "/predict": ({"inputs": [[TEXT], ["a", "b"]], "raw_scores": False},
                 lambda b: len(b["inputs"]) if all(isinstance(v, list) for v in b["inputs"]) else None),
    "/": ({"inputs": TEXT}, None),
    "/v1/embeddings": ({"input": [TEXT, "b"], "model": "tiny-embed", "encoding_format": "float"},
                       lambda b: 1 if isinstance(b["input"], str) else len(b["input"])),
    "/rows/embed": ({"rows": [{"id": 1, "text": TEXT}, {"text": "b"}], "options": {"normalize": True}},
                    lambda b: len(b["rows"])),
    "/rows/classify": ({"rows": [{"text": TEXT, "pair": "b"}], "options": {"activation": "softmax"}},
                       lambda b: len(b["rows"])),
    "/rows/alignscore_base": ({"rows": [{"context": TEXT, "claim": "Paris."}]}, lambda b: len(b["rows"])),
    "/rows/ner": ({"rows": [{"id": "a", "text": TEXT}]}, lambda b: len(b["rows"])),
    "/rows/zero-shot": ({"rows": [{"text": TEXT}], "options": {"candidate_labels": ["a", "b"]}},
                        lambda b: len(b["rows"])),
    "/pipeline/token-classification": ({"inputs": TEXT, "parameters": {"aggregation_strategy": "simple"}}, None),
    "/pipeline/fill-mask": ({"inputs": "Paris is [MASK].", "parameters": {"top_k": 2}}, None),
    "/pipeline/zero-shot-classification": ({"inputs": TEXT, "parameters": {"candidate_labels": ["a", "b"]}},
                                           None),
    "/pipeline/text-classification": ({"inputs": TEXT, "parameters": {"top_k": 2}}, None),
    "/tokenize": ({"inputs": [TEXT, "b"], "add_special_tokens": True},
                  lambda b: 1 if isinstance(b["inputs"], str) else len(b["inputs"])),
    "/decode": ({"ids": [[101, 2000, 102], [101]], "skip_special_tokens": True},
                lambda b: len(b["ids"]) if all(isinstance(v, list) for v in b["ids"]) else None),
    "/rows/minicheck": ({"rows": [{"context": TEXT, "claim": "Paris."}]}, lambda b: len(b["rows"])),
    "/rows/sparse": ({"rows": [{"text": TEXT}], "options": {"task": "query"}}, lambda b: len(b["rows"])),
    "/rows/multivector": ({"rows": [{"text": TEXT}, {"text": "b"}]}, lambda b: len(b["rows"])),
    "/rows/fill-mask": ({"rows": [{"text": "Paris is [MASK]."}]}, lambda b: len(b["rows"])),
}
# the reranker's service
RERANK_BODIES = {
    "/rerank": ({"query": TEXT, "texts": ["a", "b", TEXT], "return_text": True}, lambda b: len(b["texts"])),
    "/v1/rerank": ({"query": TEXT, "documents": ["a", {"text": "b"}], "return_documents": True},
                   lambda b: len(b["documents"]) if b.get("top_n") is None else None),
    "/v2/rerank": ({"model": "reranker", "query": TEXT, "documents": ["a", "b"]},
                   lambda b: len(b["documents"]) if b.get("top_n") is None else None),
    "/rows/classify": ({"rows": [{"text": TEXT, "pair": "b"}]}, lambda b: len(b["rows"])),
    "/predict": ({"inputs": [TEXT, "b"], "raw_scores": True}, None),
    "/": ({"query": TEXT, "texts": ["a", "b"]}, lambda b: len(b["texts"])),
    "/pipeline/text-classification": ({"inputs": TEXT}, None),
    "/tokenize": ({"inputs": TEXT}, lambda b: 1 if isinstance(b["inputs"], str) else len(b["inputs"])),
    "/decode": ({"ids": [101, 2000, 102]}, None),
}
FIELD_NAMES = sorted({key for table in (BODIES, RERANK_BODIES) for body, _ in table.values() for key in body} | {
    "context", "claim", "source_sentence", "sentences", "question", "query", "texts", "top_k", "prompt_name", "user",
    "id_field", "return_text", "truncation_direction", "candidate_labels", "text", "pair", "id", "model", "top_n",
    "max_tokens_per_doc", "rank_fields", "max_chunks_per_doc"})

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10**20) | st.floats(allow_nan=True) | st.sampled_from(
        ["", TEXT, "\ud800", "a\0b", "[MASK]", "bin", "query", "left", "base64", "tiny-embed", "😀" * 3, "x" * 600]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.sampled_from(FIELD_NAMES), children,
                                                                      max_size=4),
    max_leaves=12)


@st.composite
def bodies(draw, path: str, table: dict = BODIES):
    """The route's well-formed body, then a few changes: a field dropped, replaced by any JSON value (nested: one
    of its items or fields), or added; or, rarely, any JSON value as the whole body."""
    body = json.loads(json.dumps(table[path][0]))
    if draw(st.integers(0, 9)) == 0:
        return draw(JSON)
    for _ in range(draw(st.integers(0, 3))):
        if not isinstance(body, dict):
            break
        key = draw(st.sampled_from(sorted(body) + FIELD_NAMES))
        change = draw(st.sampled_from(["drop", "set", "nested", "item"]))
        if change == "drop":
            body.pop(key, None)
        elif change == "item" and isinstance(body.get(key), list) and body[key] and isinstance(body[key][0], dict):
            item = body[key][draw(st.integers(0, len(body[key]) - 1))]  # a field of one row, pair or document
            item[draw(st.sampled_from(sorted(item) + FIELD_NAMES))] = draw(JSON)
        elif change == "nested" and isinstance(body.get(key), (list, dict)) and body[key]:
            inner = body[key]
            where = draw(st.sampled_from(range(len(inner)) if isinstance(inner, list) else sorted(inner)))
            inner[where] = draw(JSON)
        else:
            body[key] = draw(JSON)
    return body


def _message(answer: dict) -> str:
    """An error body's message: TEI's {"error": str, "error_type"}, OpenAI's {"error": {"message", ...}}, Cohere's
    {"message"}."""
    if isinstance(answer.get("error"), str):
        assert isinstance(answer["error_type"], str)
        return answer["error"]
    if isinstance(answer.get("error"), dict):
        assert answer["error"]["type"] and "code" in answer["error"]
        return answer["error"]["message"]
    return answer["message"]


def _check_answer(service, table: dict, path: str, response, body) -> None:
    """Below 500; a 4xx in the route's protocol's shape naming the field; a 2xx with one result per input."""
    assert response.status_code < 500, (path, body, response.text)
    if response.status_code >= 400:
        answer = response.json()
        route = next((r for r in service.routes if r.path == path and r.method == "POST"), None)
        if route is not None and route.errors is not None:  # the protocol's own shape, keys and all
            assert set(answer) == set(route.errors(400, "Validation", "m")), (path, answer)
        message = _message(answer)
        if response.status_code in (400, 422):
            assert re.search(r"`[^`]+`", message) or message.startswith("the body "), (path, body, message)
        return
    count = table[path][1]
    expected = count(body) if count is not None else None
    if expected is None:
        return
    answer = response.json()
    results = (answer["scores"] if path == "/score" else answer["data"] if path.startswith("/v1/embeddings")
               else answer["results"] if isinstance(answer, dict) and "results" in answer else answer)
    assert len(results) == expected, (path, body)


@pytest.mark.parametrize("which", ["one", "two"])
def test_every_route_has_a_well_formed_body(clients, which):
    """The well-formed bodies are answered 200 (so the bodies derived from them reach the routes' work), and the
    tables cover every POST route the services serve."""
    client, service, table = clients[which]
    posts = {route.path for route in service.routes if route.method == "POST" and route.serves(service.models)}
    assert posts <= set(table), posts - set(table)
    for path in sorted(posts):
        response = client.post(path, json=table[path][0])
        assert response.status_code == 200, (path, response.text)
        _check_answer(service, table, path, response, table[path][0])


ROUTES = [("one", path) for path in sorted(BODIES)] + [("two", path) for path in sorted(RERANK_BODIES)]


@pytest.mark.parametrize("which, path", ROUTES, ids=[f"{w}{p}" for w, p in ROUTES])
def test_bodies_are_answered_below_500_by_field(clients, which, path):
    client, service, table = clients[which]

    @BOUNDED
    @given(body=bodies(path, table))
    def check(body):
        _check_answer(service, table, path, client.post(path, content=json.dumps(body).encode()), body)

    check()


@BOUNDED
@given(data=st.binary(max_size=200) | st.sampled_from([b"", b"null", b"[]", b'"x"', b"{", b"\xff{}", b"\xef\xbb\xbf{}"]),
       route=st.sampled_from(ROUTES))
def test_bytes_that_are_not_a_json_object_are_named(clients, data, route):
    which, path = route
    client, service, table = clients[which]
    response = client.post(path, content=data)
    assert 400 <= response.status_code < 500
    _check_answer(service, table, path, response, data)


@BOUNDED
@given(path=st.sampled_from(["/embed", "/embed_sparse", "/embed_all", "/similarity", "/predict", "/score",
                             "/v1/embeddings", "/tokenize", "/pipeline/fill-mask", "/"]),
       body=bodies("/embed"))
def test_a_service_without_the_routes_model_answers_by_name(clients, path, body):
    """The reranker alone: TEI's routes of other models answer 424 (JSON), the others a JSON 404 or their answer."""
    client, _, _ = clients["two"]
    response = client.post(path, json=body)
    assert response.status_code < 500 and response.headers["content-type"].startswith("application/json")


# The service answers these 500 (serve/app.py's _body catches json's JSONDecodeError, not the RecursionError and
# ValueError json raises past Python's limits); files/rows.parse_json names both. Strict: passes once _body does.
@pytest.mark.parametrize("raw", [b"[" * 5000 + b"]" * 5000, b'{"inputs": ' + b"1" * 5000 + b"}"],
                         ids=["nested-past-the-recursion-limit", "integer-past-the-digit-limit"])
def test_json_past_pythons_limits_is_a_422(clients, raw):
    """A body Python's json cannot take whole (nested deeper than the recursion limit; an integer of more digits
    than int() reads) is a malformed body, named as one."""
    client, _, _ = clients["one"]
    response = client.post("/embed", content=raw)
    assert response.status_code == 422, response.text
    assert response.json()["error"].startswith("the body ")


@pytest.mark.parametrize("row_id", ["\ud800", {"a": ["\udfff"]}])
def test_a_row_id_that_is_not_text_is_a_422(clients, row_id):
    """An id the answer could not hold (a lone surrogate, anywhere in it) is a 422 naming the row and the id, as a
    file's row is refused (files/rows.id_problem)."""
    client, _, _ = clients["one"]
    response = client.post("/rows/embed", content=json.dumps({"rows": [{"id": row_id, "text": "a"}]}).encode())
    assert response.status_code == 422, response.text
    assert "`rows[0]`" in response.json()["error"] and "id" in response.json()["error"]
