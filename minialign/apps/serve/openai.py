"""OpenAI's embeddings API, for the embedder: the `openai` client's `client.embeddings.create` works unchanged against
`minialign serve --embed ...` (base_url "http://127.0.0.1:PORT/v1").

    POST /v1/embeddings  {"input": str | [str], "model": str, "encoding_format": "float" | "base64",
                          "dimensions": int, "user": str}
                         -> {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [float] | str}],
                             "model": str, "usage": {"prompt_tokens": int, "total_tokens": int}}
    GET  /v1/models      -> {"object": "list", "data": [{"id", "object": "model", "created": 0, "owned_by": "minialign"}]}

As OpenAI's API and TEI's /v1/embeddings (router/src/http/server.rs, openai_embed) give them: each embedding unit
length; `dimensions` keeps the first dimensions before that normalization (a Matryoshka model's shorter embedding,
products/quantization.py); "base64" is the float32 values' little-endian bytes (what the openai client asks for by
default and decodes). The texts run under the model's default prompt, if it has one (TEI's rule); `prompt_name`
and `truncate` (false: an input over the window is refused, 413) are TEI's extra fields, through the client's
`extra_body`. `usage` counts each input's tokens as the model reads them (special tokens included, within the
window).

`model` names the embedding model: its served name (`--served-model-name`, else the model's own id where its files
name it: serve/names.py), the name it was loaded by (`--embed SRC`), or the last part of either (SRC
"/models/all-MiniLM-L6-v2" is also "all-MiniLM-L6-v2"); anything else is a 404 listing the names. Answers and GET
/v1/models carry the served name. The request's text is only ever compared with those names, never opened as a path.
Token-id inputs (OpenAI's [int] form) are refused (422): the service reads text. Errors come in OpenAI's shape, {"error": {"message", "type",
"param", "code"}}.
"""

from __future__ import annotations

import base64
import torch

import minialign.apps.serve.bodies as bodies
from minialign.apps.serve.bodies import parse
from minialign.apps.serve.core import Core, Models, Route, ServiceError, prompt_text
from minialign.apps.serve.core import dimensions as core_dimensions

# OpenAI's error types by status (its API reference, "Error codes")
ERROR_TYPES = {401: "authentication_error", 404: "not_found_error", 429: "rate_limit_error"}


def error_body(status: int, error_type: str, message: str) -> dict:
    """An error in OpenAI's shape; `error_type` (the service's own, core.py) is kept as the code's name."""
    kind = ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": error_type}}


def _model(service: Core, name: str) -> str:
    """The served name a request's `model` selects (the module docstring), or a 404 listing them."""
    names = service.models.accepted("embed") if service.models.embedder is not None else []
    if name not in names:
        loaded = ", ".join(repr(n) for n in names) or "none (start with --embed)"
        raise ServiceError(404, "NotFound", f"The model {name!r} is not loaded; embedding models: {loaded}")
    return names[0]


async def embeddings(service: Core, body: dict) -> dict:
    request = parse(bodies.EmbeddingsRequest, body)  # `input` and `model` required by OpenAI's API reference
    model = _model(service, request.model)
    embedder, given, encoding = service.models.embedder, request.input, request.encoding_format
    service.check_batch(len(given), "input")
    dimensions = core_dimensions(request.dimensions, embedder.dimension)
    prompt = prompt_text(embedder, request.prompt_name)
    service.check_length(embedder, given, request.truncate, prompt=prompt)
    vectors = torch.stack(await service.run("embed", "encode", given, key=prompt))[:, :dimensions]
    vectors = torch.nn.functional.normalize(vectors.float(), dim=1)
    tokens = sum(len(ids) for ids in embedder.tokenizer.encode_ids(
        [prompt + text for text in given], max_length=embedder.max_length).ids)
    data = [{"object": "embedding", "index": i,
             "embedding": vector.tolist() if encoding == "float"
             else base64.b64encode(vector.numpy().astype("<f4").tobytes()).decode("ascii")}
            for i, vector in enumerate(vectors)]
    return {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


async def list_models(service: Core, body: dict) -> dict:
    names = service.models.accepted("embed")[:1] if service.models.embedder is not None else []
    return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "minialign"}
                                       for name in names]}


def routes(models: Models) -> list[Route]:
    """POST /v1/embeddings and GET /v1/models, with an embedding model loaded."""
    embed = (lambda m: ["embed"] if m.embedder is not None else [])
    return [Route("/v1/embeddings", embeddings, embed, errors=error_body, body=bodies.EmbeddingsRequest,
                  answer=bodies.EmbeddingsResponse),
            Route("/v1/models", list_models, embed, method="GET", errors=error_body, answer=bodies.ModelList)]
