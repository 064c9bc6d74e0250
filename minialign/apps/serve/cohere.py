"""Cohere's rerank API, for a reranker (--classify with a one-label cross-encoder): the `cohere` client's
`ClientV2.rerank` and `Client.rerank` work unchanged against `minialign serve` (base_url "http://127.0.0.1:PORT").

    POST /v2/rerank  {"model": str, "query": str, "documents": [str], "top_n": int, "max_tokens_per_doc": int}
                     -> {"id", "results": [{"index", "relevance_score"}], "meta"}
    POST /v1/rerank  {"model"?: str, "query": str, "documents": [str | {"text": str, ...}], "top_n": int,
                      "return_documents": bool, "rank_fields": ["text"], "max_chunks_per_doc": 1,
                      "max_tokens_per_doc": int}
                     -> {"id", "results": [{"index", "relevance_score", "document"?: {"text", ...}}], "meta",
                         "model", "usage": {"total_tokens"}}

As cohere's SDK sends and reads them (cohere/v2/raw_client.py rerank, cohere/raw_base_client.py rerank; the types
V2RerankResponse, RerankResponse, RerankResponseResultsItem): results best first, the `top_n` of them (absent: all);
`relevance_score` the reranker's sigmoid, as TEI's /rerank; `return_documents` (v1, default false) gives each result
its document as sent (an object keeps its other fields, as Cohere's does). Documents are cut to the window, as Cohere
cuts them (no 413 for a long one), and first to `max_tokens_per_doc` tokens where given (the document's text up to the
end of its N-th token). v1's body is also Jina AI's rerank body and its answer Jina's ({"model", "usage":
{"total_tokens"}, "results": [{"index", "relevance_score", "document": {"text"}}]}), except that a document comes back
only with `return_documents` true (Jina's default; Cohere's is false, kept here). A document is ranked by its `text`:
other `rank_fields` and several chunks per document are refused (422).

`model` (required in v2, optional in v1) names the reranker: a name it is served by (serve/names.py); another is a
404 listing them. `usage.total_tokens` counts the (query, document) pairs' tokens as the model reads them. Errors come
in Cohere's shape, {"message": str}.
"""

from __future__ import annotations

import uuid
from typing import Any

import torch

import minialign.apps.serve.bodies as bodies
from minialign.apps.serve.bodies import parse
from minialign.apps.serve.core import Core, Models, Route, ServiceError, empty
from minialign.products.classifier import Classifier


def error_body(status: int, error_type: str, message: str) -> dict:
    """An error in Cohere's shape (its API's error responses: {"message"})."""
    return {"message": message}


def _reranker(service: Core, name: str | None) -> tuple[Classifier, str]:
    """The reranker and the name answers carry; `name` (the body's `model`; v1's may be None) must be one it is
    served by."""
    classifier = service.models.classifier
    if classifier is None or not classifier.reranker:
        raise ServiceError(424, "Backend", "Backend error: model is not a re-ranker model (start with --classify and "
                                           "a one-label cross-encoder)")
    names = service.models.accepted("classify")
    if name is None:
        return classifier, names[0] if names else "classify"
    if name not in names:
        raise ServiceError(404, "NotFound", f"model {name!r} not found; the reranker is served as "
                                            + ", ".join(repr(n) for n in names))
    return classifier, names[0]


def _documents(documents: list[str | bodies.Document]) -> tuple[list[str], list[dict]]:
    """(each document's text, each as v1 returns it) of the validated `documents`: strings, or (v1) objects with a
    `text` (and the other fields they came with)."""
    if not documents:
        raise empty("documents")
    returned = [{"text": d} if isinstance(d, str) else d.model_dump() for d in documents]
    return [d["text"] for d in returned], returned


def _cut(classifier: Classifier, document: str, tokens: int | None) -> str:
    """The document up to the end of its `tokens`-th token (max_tokens_per_doc), by the tokenizer's character
    offsets; the whole document when shorter or `tokens` is None."""
    if tokens is None:
        return document
    encoding = classifier.tokenizer.backend.encode(document, add_special_tokens=False)
    return document if len(encoding.ids) <= tokens else document[:encoding.offsets[tokens - 1][1]]


async def _rerank(service: Core, body: dict, *, version: int) -> dict:
    # v1's rank_fields (["text"]) and max_chunks_per_doc (1): the only values its type takes
    request = parse(bodies.RerankV1Request if version == 1 else bodies.RerankV2Request, body)
    classifier, model = _reranker(service, request.model)
    query, (documents, returned) = request.query, _documents(request.documents)
    top_n, max_tokens = request.top_n, request.max_tokens_per_doc
    service.check_batch(len(documents), "documents")
    pairs = [(query, _cut(classifier, document, max_tokens)) for document in documents]
    logits = await service.run("classify", "logits", pairs)
    scores = classifier.activate(torch.stack(logits), "sigmoid")
    results = [{"index": i, "relevance_score": score} for i, score in classifier.rank(scores.tolist(), top_k=top_n)]
    answer: dict[str, Any] = {"id": str(uuid.uuid4()), "results": results,
                              "meta": {"api_version": {"version": str(version)}}}
    if version == 1:
        if request.return_documents:
            for result in results:
                result["document"] = returned[result["index"]]
        first, second = map(list, zip(*pairs))
        tokens = sum(map(len, classifier.tokenizer.encode_ids(first, second, max_length=classifier.max_length).ids))
        answer.update(model=model, usage={"total_tokens": tokens})
    return answer


async def rerank_v1(service: Core, body: dict) -> dict:
    return await _rerank(service, body, version=1)


async def rerank_v2(service: Core, body: dict) -> dict:
    return await _rerank(service, body, version=2)


def routes(models: Models) -> list[Route]:
    """POST /v1/rerank and /v2/rerank, with a reranker loaded."""
    reranker = (lambda m: ["classify"] if m.classifier is not None and m.classifier.reranker else [])
    return [Route("/v1/rerank", rerank_v1, reranker, errors=error_body, body=bodies.RerankV1Request,
                  answer=bodies.CohereResponse),
            Route("/v2/rerank", rerank_v2, reranker, errors=error_body, body=bodies.RerankV2Request,
                  answer=bodies.CohereResponse)]
