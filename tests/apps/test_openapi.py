"""The routes' bodies declared once (serve/bodies.py) and the OpenAPI document made from them (serve/spec.py): GET
/openapi.json holds exactly the routes served, each $ref resolves, a body the service accepts validates against its
route's schema and one it refuses does not; the defaults are the runners'; the docs page is the document's rendering.
In process (starlette's TestClient), on the tiny MiniLM."""

import argparse
import inspect
import json
import sys

import pytest

import minialign as ma

pytest.importorskip("pydantic")
pytest.importorskip("starlette")
pytest.importorskip("httpx")  # starlette's TestClient
jsonschema = pytest.importorskip("jsonschema")


@pytest.fixture(scope="module")
def served(minilm_dir):
    from starlette.testclient import TestClient

    from minialign.apps.serve import Models, Service

    service = Service(Models(embedder=ma.SentenceEncoder.from_pretrained(minilm_dir), names={"embed": "tiny-embed"}))
    with TestClient(service.app(), raise_server_exceptions=False) as client:
        yield client, service


def _refs(node):
    if isinstance(node, dict):
        if "$ref" in node:
            yield node["$ref"]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _request_schema(document: dict, path: str) -> dict:
    schema = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    return {**schema, "components": document["components"]}


def _resolves(document: dict) -> None:
    for ref in _refs(document):
        assert ref.startswith("#/components/schemas/") and ref.rsplit("/", 1)[1] in document["components"]["schemas"]


def test_openapi_json_holds_the_routes_served(served):
    client, service = served
    response = client.get("/openapi.json")
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"] == "3.1.0" and document["info"]["version"] == ma.__version__
    listed = {(method.upper(), path) for path, methods in document["paths"].items() for method in methods}
    assert listed == set(service.served())  # exactly what GET / lists: no /predict without a classifier
    assert ("POST", "/embed") in listed and ("POST", "/predict") not in listed and ("GET", "/openapi.json") in listed
    _resolves(document)
    jsonschema.Draft202012Validator.check_schema(_request_schema(document, "/embed"))
    errors = document["paths"]["/v1/embeddings"]["post"]["responses"]["4XX"]["content"]["application/json"]["schema"]
    assert errors == {"$ref": "#/components/schemas/OpenAIError"}  # each protocol's own error body


@pytest.mark.parametrize("path, body", [
    ("/embed", {"inputs": ["a", "b"], "normalize": False, "dimensions": 8, "truncate": True}),
    ("/embed", {"inputs": "a", "prompt_name": None}),
    ("/similarity", {"inputs": {"source_sentence": "a", "sentences": ["b", "c"]}, "parameters": {"truncate": True}}),
    ("/v1/embeddings", {"input": ["a"], "model": "tiny-embed", "encoding_format": "base64"}),
    ("/tokenize", {"inputs": ["a", "b"], "add_special_tokens": False}),
    ("/decode", {"ids": [[101, 102], [101]]}),
    ("/rows/embed", {"rows": [{"id": 1, "text": "a"}], "options": {"normalize": True}}),
])
def test_a_body_the_service_takes_fits_its_schema(served, path, body):
    client, _ = served
    document = client.get("/openapi.json").json()
    assert client.post(path, json=body).status_code == 200
    jsonschema.validate(body, _request_schema(document, path), cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize("path, body, named", [
    ("/embed", {"inputs": 5}, "`inputs`"),
    ("/embed", {"inputs": ["a", 3]}, "`inputs[1]`"),
    ("/embed", {"inputs": "a", "normalize": 1}, "`normalize`"),
    ("/embed", {"inputs": "a", "dimensions": True}, "`dimensions`"),
    ("/similarity", {"inputs": {"source_sentence": "a", "sentences": "b"}}, "`inputs.sentences`"),
    ("/v1/embeddings", {"input": "a", "model": "tiny-embed", "encoding_format": "int8"}, "`encoding_format`"),
    ("/decode", {"ids": [[101], [1.5]]}, "`ids[1][0]`"),
])
def test_a_body_the_service_refuses_fits_no_schema(served, path, body, named):
    """The types are the validation: what the schema refuses the service refuses, with a 422 naming the field."""
    client, _ = served
    document = client.get("/openapi.json").json()
    response = client.post(path, json=body)
    message = response.json()["error"]
    assert response.status_code == 422 and named in (message if isinstance(message, str) else message["message"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(body, _request_schema(document, path), cls=jsonschema.Draft202012Validator)


def test_every_route_s_document_and_the_docs_page():
    """Every route a service can serve (a stand-in of each model) has a request and an answer schema whose $refs
    resolve; docs/guides/service_api.md is the rendering of that document, regenerated when a body changes."""
    from minialign.apps.serve import api_page, spec

    document = spec.document(api_page.every_route())
    _resolves(document)
    for path in ("/alignscore_base", "/minicheck", "/score", "/predict", "/rerank", "/v1/rerank", "/v2/rerank",
                 "/pipeline/question-answering", "/embed_sparse", "/embed_all", "/rows/ner", "/"):
        jsonschema.Draft202012Validator.check_schema(_request_schema(document, path))
    json.dumps(document)  # JSON as it is
    assert api_page.main(["--check"]) == 0, "python -m minialign.apps.serve.api_page --write"


def test_field_defaults_are_the_runners():
    """A field mirroring a runner's keyword reads its default from the runner's signature."""
    from minialign.apps.serve import bodies
    from minialign.products.alignscore import AlignScorer
    from minialign.products.classifier import Classifier
    from minialign.text.tokenizer import Tokenizer

    def default(function, name):
        return inspect.signature(function).parameters[name].default

    fields = {(bodies.ScoreRequest, "details"): (AlignScorer.score, "return_details"),
              (bodies.RerankV2Request, "top_n"): (Classifier.rank, "top_k"),
              (bodies.DecodeRequest, "skip_special_tokens"): (Tokenizer.decode, "skip_special_tokens"),
              (bodies.EmbedRequest, "dimensions"): (ma.SentenceEncoder.encode, "truncate_dim"),
              (bodies.EmbedRequest, "prompt_name"): (ma.SentenceEncoder.encode, "prompt_name")}
    for (kind, field), (function, keyword) in fields.items():
        assert kind.model_fields[field].default == default(function, keyword), (kind, field)
    assert bodies.default_of(Tokenizer.decode, "skip_special_tokens") is True


def test_a_null_is_the_default_and_types_are_strict():
    from minialign.apps.serve import bodies
    from minialign.apps.serve.core import ServiceError

    request = bodies.parse(bodies.EmbedRequest, {"inputs": "a", "normalize": None, "truncate": None, "extra": 1})
    assert (request.inputs, request.normalize, request.truncate) == (["a"], True, False)
    for body in ({"inputs": 1}, {"inputs": "a", "normalize": 0}, {"inputs": "a", "dimensions": 2.0},
                 {"inputs": "a", "dimensions": False}, {"inputs": None}):
        with pytest.raises(ServiceError) as e:
            bodies.parse(bodies.EmbedRequest, body)
        assert e.value.status == 422 and e.value.message.startswith("`")


def test_serve_without_pydantic_names_the_extra(monkeypatch):
    """pydantic is the serve extra's: `minialign serve` without it says how to install the extra."""
    from minialign.apps.serve_command import run_serve

    monkeypatch.setitem(sys.modules, "pydantic", None)  # import pydantic raises ImportError
    with pytest.raises(ValueError, match=r"needs the serve extra.*\.\[serve\]"):
        run_serve(argparse.Namespace())
