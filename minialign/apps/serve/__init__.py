"""`minialign serve`: an HTTP service that existing clients use unchanged (the `serve` extra: Starlette, uvicorn).

One module per protocol over one core (the layout of TEI's router/src/http/server.rs over its core): a protocol's
module holds its handlers, functions of (the service, the request's body), and declares its routes over them;
app.py composes them.

  core.py          what is loaded, one request queue per model (requests that arrive together share model
                   calls, on a worker thread per model), the checks every route makes, the errors
  nemo.py          AlignScore's request shapes: NeMo Guardrails' POST /alignscore_base, /alignscore_large
                   {"evidence", "claim"} -> {"alignscore"}; POST /minicheck, the same body for MiniCheck;
                   minialign's POST /score {"pairs": [{"context", "claim"}], "model", "mode", "details"}
  tei.py           text-embeddings-inference: POST /embed, /similarity, /predict, /rerank, /tokenize, /decode, and
                   POST / routed by the body; errors as {"error", "error_type"}
  hf_inference.py  HF Inference's text-classification (huggingface_hub's InferenceClient), for the classifier and
                   MiniCheck, and the tasks of the table's products (token-classification: --ner), each on POST
                   /pipeline/TASK and POST /; its feature-extraction and sentence-similarity are TEI's bodies
  openai.py        OpenAI's embeddings API (the openai client): POST /v1/embeddings, GET /v1/models; its error shape
  cohere.py        Cohere's rerank API (the cohere client; Jina's body too): POST /v1/rerank, /v2/rerank; its
                   error shape
  bodies.py        every route's request and response bodies as pydantic v2 types (the handlers validate with them;
                   a mismatch is a 422 naming the field by its path, in the route's protocol's error shape)
  spec.py          GET /openapi.json: the OpenAPI 3.1 document of the routes served, made from the route table and
                   the bodies; api_page.py renders every route's document as docs/guides/service_api.md
  names.py         the names a model is served by (--served-model-name, else its own id where its files name it)
  metrics.py       GET /metrics: Prometheus' text format, per route and model
  rows.py          POST /rows/KIND: any product of the table (apps/products.py) on its file rows
  app.py           the Service: the core with every protocol's routes (PROTOCOLS); GET /, /health, /info, /metrics;
                   the ASGI app (each declared route mounted, body limits, API key); serve()

The service binds 127.0.0.1 unless told otherwise, reads no file and loads no model because of a request, and
stops on SIGTERM after answering what it has taken. What an input may be, which inputs exceed the window, how
labels and documents are ranked, what the pooling is called and every scoring option are the runners'
(products/); one loaded model serves every mode and activation a request asks for.
"""

from __future__ import annotations

from minialign.apps.serve.app import PROTOCOLS, Service, bind, serve
from minialign.apps.serve.core import VERSION, Core, Limits, Models, ServiceError, bad_request, empty
from minialign.apps.serve.nemo import ALIGNSCORE_ROUTES

__all__ = ["ALIGNSCORE_ROUTES", "PROTOCOLS", "VERSION", "Core", "Limits", "Models", "Service", "ServiceError",
           "bad_request", "bind", "empty", "serve"]
