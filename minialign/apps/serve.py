"""`minialign serve`: an HTTP service that existing clients use unchanged.

Routes (needs the `serve` extra: Starlette and uvicorn):
  NeMo Guardrails' AlignScore API   POST /alignscore_base, /alignscore_large   {"evidence", "claim"} -> {"alignscore"}
                                    GET /   the routes served, as text
  text-embeddings-inference (TEI)   POST /embed, /rerank, /predict, /similarity, and POST / routed by the body
                                    (Service.root); GET /health, GET /info; errors as {"error", "error_type"}
  minialign's own                   POST /score   {"pairs": [{"context", "claim"}], "mode", "details"}

Requests that arrive together are merged into model calls (runtime/request_queue.DynamicBatcher),
which run on a worker thread per model, off the event loop; the batching engine inside each call
sorts, packs and bounds by tokens. The service binds 127.0.0.1 unless told otherwise, reads no file
and loads no model because of a request, and stops on SIGTERM after answering what it has taken.

This module speaks the protocols only: it parses bodies, calls the runners (products/), shapes their
answers and maps errors to statuses. What an input may be, which inputs exceed the window, how
labels and documents are ranked, what the pooling is called and every scoring option are the
runners' (one loaded model serves every mode and activation a request asks for).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from minialign.products import pooling
from minialign.products.alignscore import COLUMNS, MODES, AlignScorer
from minialign.products.classifier import Classifier
from minialign.products.embeddings import SentenceEncoder
from minialign.products.runner import Input, Runner, inputs_of
from minialign.runtime.request_queue import Closed, DynamicBatcher, Overloaded
from minialign.text.validation import text_problem

# TEI's error bodies are {"error", "error_type"}, with these statuses (router/src/http/server.rs,
# From<&ErrorType> for StatusCode): Unhealthy 503, Backend 424, Overloaded 429, Validation 413,
# Tokenizer 422, Empty 400 (an empty batch, or a claim with no sentence). Departures, by design: an empty text
# is embedded / classified as its special tokens alone, as sentence-transformers and every other face of
# minialign do (TEI refuses an input whose texts are all empty: EncodingInput::is_empty); a malformed body (bad JSON, a wrong type, a value the product refuses, such as a claim with no sentence)
# is a JSON 422 naming the field (TEI: axum's plain-text 400/422), a model call that fails is a 500, and an
# unknown route or method is a JSON 404 NotFound / 405 MethodNotAllowed (TEI: axum's empty body).
ALIGNSCORE_ROUTES = ("base", "large")  # NeMo Guardrails posts to /alignscore_base or /alignscore_large
VERSION = "minialign"


class ServiceError(Exception):
    def __init__(self, status: int, error_type: str, message: str):
        super().__init__(message)
        self.status, self.error_type, self.message = status, error_type, message


def bad_request(message: str) -> ServiceError:
    """A malformed body: 422, naming the field."""
    return ServiceError(422, "Validation", message)


def empty(name: str) -> ServiceError:
    """Empty input, TEI's 400 Empty (router: "`inputs` cannot be empty"; core/src/tokenization.rs)."""
    return ServiceError(400, "Empty", f"Input validation error: `{name}` cannot be empty")


@dataclass
class Limits:
    max_batch_tokens: int | None = None  # each model call's token budget (default: the engine's)
    max_wait_ms: float = 5.0  # how long the first request of a call waits for others
    max_queue: int = 512  # requests in flight per model before 429
    max_body_bytes: int = 2 * 2**20  # larger bodies get 413
    max_client_batch_size: int = 1024  # inputs in one request
    api_key: str | None = None


@dataclass
class Models:
    """What the service runs; each is optional."""

    alignscore: dict[str, AlignScorer] = field(default_factory=dict)  # route name ("base" / "large") -> scorer
    embedder: SentenceEncoder | None = None
    classifier: Classifier | None = None
    names: dict[str, str] = field(default_factory=dict)  # kind -> what was loaded (for /info)


# -- the model calls each batcher makes (the requests' items merged; the client's settings apply after) --

def _alignscore_run(scorer: AlignScorer) -> Callable[[list], list]:
    """Items (mode, context, claim) -> per-item details (every probability): one call, each item's mode."""

    def run(items: list[tuple[str, str, str]]) -> list[dict]:
        modes, contexts, claims = map(list, zip(*items))
        return scorer.score(contexts, claims, mode=modes, return_details=True, warn_truncation=False)

    return run


def _embed_run(embedder: SentenceEncoder) -> Callable[[list], list]:
    """Items (prompt, text) -> their embeddings, unnormalized: one call per prompt among the items (each
    request's prompt text, resolved by the embedder when the request came in; "" for none)."""

    def run(items: list[tuple[str, str]]) -> list[torch.Tensor]:
        by_prompt: dict[str, list[int]] = {}
        for i, (prompt, _) in enumerate(items):
            by_prompt.setdefault(prompt, []).append(i)
        out: list[torch.Tensor] = [None] * len(items)  # type: ignore[list-item]
        for prompt, where in by_prompt.items():
            vectors = embedder.encode([items[i][1] for i in where], prompt=prompt, warn_truncation=False)
            for i, vector in zip(where, vectors):
                out[i] = vector
        return out

    return run


def _classify_run(classifier: Classifier) -> Callable[[list], list]:
    """Items (text, pair or None) -> the logits of each, singles and pairs in one call."""

    def run(items: list[tuple[str, str | None]]) -> list[torch.Tensor]:
        texts, pairs = map(list, zip(*items))
        logits = classifier.predict(texts, pairs, activation="none", warn_truncation=False)
        return list(logits.view(len(items), -1))

    return run


# -- request bodies -----------------------------------------------------------------------------------

def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise bad_request(f"`{name}` must be a string, got {type(value).__name__}")
    if problem := text_problem(value):
        raise bad_request(f"`{name}` {problem}")
    return value


def _flag(body: dict, name: str, default: bool) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad_request(f"`{name}` must be a boolean, got {type(value).__name__}")
    return value


def _parameters(body: dict) -> dict:
    """HF Inference's task options (`parameters`), an object when given."""
    parameters = body.get("parameters")
    if parameters is None:
        return {}
    if not isinstance(parameters, dict):
        raise bad_request(f"`parameters` must be an object, got {type(parameters).__name__}")
    return parameters


def _texts(value: Any, name: str) -> list[str]:
    if isinstance(value, str):
        return [_text(value, name)]
    if not isinstance(value, list):
        raise bad_request(f"`{name}` must be a string or a list of strings, got {type(value).__name__}")
    return [_text(v, f"{name}[{i}]") for i, v in enumerate(value)]


def _predict_inputs(value: Any) -> tuple[list[tuple[str, str | None]], bool]:
    """TEI's PredictInput: a text, a pair [a, b], or a batch of either ([[a], [b, c]]); (items, batched)."""
    def sequence(v: Any, name: str) -> tuple[str, str | None]:
        if isinstance(v, str):
            return _text(v, name), None
        if isinstance(v, list) and len(v) == 1:
            return _text(v[0], f"{name}[0]"), None
        if isinstance(v, list) and len(v) == 2:
            return _text(v[0], f"{name}[0]"), _text(v[1], f"{name}[1]")
        raise bad_request(f"`{name}` must be a text, a pair [text, text], or a list of those")

    if isinstance(value, list) and all(isinstance(v, list) for v in value):  # [] too: an empty batch
        return [sequence(v, f"inputs[{i}]") for i, v in enumerate(value)], True
    return [sequence(value, "inputs")], False


# -- the service ---------------------------------------------------------------------------------------

class Service:
    def __init__(self, models: Models, limits: Limits | None = None):
        self.models, self.limits = models, limits or Limits()
        if not (models.alignscore or models.embedder or models.classifier):
            raise ValueError("nothing to serve: load at least one of --alignscore, --embed, --classify")
        wait = self.limits.max_wait_ms / 1000
        make = lambda run, name: DynamicBatcher(run, max_wait=wait, max_requests=self.limits.max_queue,  # noqa: E731
                                                name=name)
        if self.limits.max_batch_tokens:
            for runner in (*models.alignscore.values(), models.embedder, models.classifier):
                if runner is not None:
                    runner.set_budget(max_tokens=self.limits.max_batch_tokens)
        self.batchers: dict[str, DynamicBatcher] = {f"alignscore_{name}": make(_alignscore_run(s), f"alignscore-{name}")
                                                    for name, s in models.alignscore.items()}
        if models.embedder is not None:
            self.batchers["embed"] = make(_embed_run(models.embedder), "embed")
        if models.classifier is not None:
            self.batchers["classify"] = make(_classify_run(models.classifier), "classify")

    def close(self) -> None:
        for batcher in self.batchers.values():
            batcher.close()

    async def _run(self, batcher: str, items: list) -> list:
        try:
            future = self.batchers[batcher].submit(items)
        except Overloaded:
            raise ServiceError(429, "Overloaded", "Model is overloaded") from None
        except Closed:
            raise ServiceError(503, "Unhealthy", "the service is shutting down") from None
        try:
            return await asyncio.wrap_future(future)
        except Exception as e:  # noqa: BLE001  (the model failed on this call: a 500, the service goes on)
            raise ServiceError(500, "Backend", f"Backend error: {type(e).__name__}: {e}") from None

    def _check_batch(self, n: int, name: str = "inputs") -> None:
        if n == 0:
            raise empty(name)
        if n > self.limits.max_client_batch_size:
            raise ServiceError(413, "Validation", f"Input validation error: batch size {n} > maximum allowed batch "
                                                  f"size {self.limits.max_client_batch_size}")

    @staticmethod
    def _check_length(runner: Runner, inputs: list[Input], truncate: bool, **options: Any) -> None:
        """With truncate false, an input the runner's window would cut is refused, as TEI does (options:
        the call's, such as the embedder's prompt, which counts)."""
        if not truncate and (long := runner.over_window(inputs, **options)):
            _, total = long[0]
            raise ServiceError(413, "Validation", f"Input validation error: `inputs` must have less than "
                                                  f"{runner.max_length} tokens. Given: {total}")

    # -- handlers (body: the parsed JSON; they return JSON-able values) --

    def _example(self, model: str, body: dict, names: dict[str, str], context: Any = None) -> tuple[str, str]:
        """(context, claim) of `body` (its fields named by `names`: "context"/"claim" -> field; `context`: one the
        route has already read) once the scorer's own check (AlignScorer.check) takes them: an absent field is a
        422 saying so, an empty claim is empty input (400 Empty), any other problem a 422 naming the field."""
        for which in ("context", "claim"):
            if names[which].rpartition(".")[2] not in body:
                raise bad_request(f"`{names[which]}` is missing")
        context = body[names["context"].rpartition(".")[2]] if context is None else context
        claim = body[names["claim"].rpartition(".")[2]]
        if claim == "":
            raise empty(names["claim"])
        problems = self.models.alignscore[model].check(context, claim, null="null")
        if problems:
            raise bad_request("; ".join(f"`{names[which]}` {problem}" for which, problem in problems))
        return context, claim

    async def alignscore(self, name: str, body: dict) -> dict:
        evidence = body.get("evidence")
        if isinstance(evidence, list):
            evidence = " ".join(_text(e, f"evidence[{i}]") for i, e in enumerate(evidence))
        context, claim = self._example(name, body, {"context": "evidence", "claim": "claim"}, evidence)
        (details,) = await self._run(f"alignscore_{name}", [("nli_sp", context, claim)])
        return {"alignscore": details["score"]}

    async def score(self, body: dict) -> dict:
        pairs, mode = body.get("pairs"), body.get("mode", "nli_sp")
        name = body.get("model") or next(iter(self.models.alignscore))
        if f"alignscore_{name}" not in self.batchers:
            raise bad_request(f"`model` {name!r} is not loaded; loaded: {sorted(self.models.alignscore)}")
        if mode not in MODES:
            raise bad_request(f"`mode` must be one of {MODES}, got {mode!r}")
        if not isinstance(pairs, list):
            raise bad_request("`pairs` must be a list of {\"context\", \"claim\"} objects")
        self._check_batch(len(pairs), "pairs")
        items = []
        for i, pair in enumerate(pairs):
            if not isinstance(pair, dict):
                raise bad_request(f"`pairs[{i}]` must be an object with `context` and `claim`")
            names = {"context": f"pairs[{i}].context", "claim": f"pairs[{i}].claim"}
            items.append((mode, *self._example(name, pair, names)))
        details = await self._run(f"alignscore_{name}", items)
        out: dict[str, Any] = {"scores": [d["score"] for d in details]}
        if _flag(body, "details", False):
            out["details"] = [{k: d[k] for k in ("score", "chunks", "sentences", *COLUMNS, "truncated")} for d in details]
        return out

    @staticmethod
    def _prompt(embedder: SentenceEncoder, name: Any, field: str = "prompt_name") -> str:
        """The prompt text a request's `prompt_name` asks for (absent or null: the model's default prompt,
        if any), as the embedder resolves it; "" for none. An unknown name is TEI's 413 Validation."""
        if name is not None and not isinstance(name, str):
            raise bad_request(f"`{field}` must be a string, got {type(name).__name__}")
        try:
            return embedder.resolve_prompt(prompt_name=name) or ""
        except ValueError as e:
            raise ServiceError(413, "Validation", f"Input validation error: `{field}`: {e}") from None

    async def embed(self, body: dict) -> list:
        embedder = self._require("embed")
        texts = _texts(body.get("inputs"), "inputs")
        self._check_batch(len(texts))
        prompt = self._prompt(embedder, body.get("prompt_name"))
        self._check_length(embedder, texts, _flag(body, "truncate", False), prompt=prompt)
        vectors = await self._run("embed", [(prompt, t) for t in texts])
        if _flag(body, "normalize", True):
            vectors = [torch.nn.functional.normalize(v, dim=0) for v in vectors]
        return [v.tolist() for v in vectors]

    async def predict(self, body: dict) -> list:
        classifier = self._require("classify")
        items, batched = _predict_inputs(body.get("inputs"))
        self._check_batch(len(items))
        self._check_length(classifier, inputs_of(*zip(*items)), _flag(body, "truncate", False))
        logits = await self._run("classify", items)
        # TEI's scores: the raw logits, or sigmoid for one label and softmax for several
        activation = "none" if _flag(body, "raw_scores", False) else "sigmoid" if classifier.reranker else "softmax"
        ranked = classifier.label_ranking(classifier.activate(torch.stack(logits), activation))
        answers = [[{"label": label, "score": score} for label, score in row] for row in ranked]
        return answers if batched else answers[0]

    async def rerank(self, body: dict) -> list:
        query, texts = _text(body.get("query"), "query"), body.get("texts")
        if not isinstance(texts, list):
            raise bad_request("`texts` must be a list of strings")
        texts = _texts(texts, "texts")
        if not texts:
            raise empty("texts")
        classifier = self._require("classify")
        if not classifier.reranker:
            raise ServiceError(424, "Backend", "Backend error: model is not a re-ranker model")
        self._check_batch(len(texts), "texts")
        self._check_length(classifier, [(query, t) for t in texts], _flag(body, "truncate", False))
        logits = await self._run("classify", [(query, t) for t in texts])
        scores = classifier.activate(torch.stack(logits), "none" if _flag(body, "raw_scores", False) else "sigmoid")
        with_text = _flag(body, "return_text", False)
        return [{"index": i, "score": score, **({"text": texts[i]} if with_text else {})}
                for i, score in classifier.rank(scores.tolist())]

    async def similarity(self, body: dict) -> list:
        """TEI's /similarity, huggingface_hub's sentence_similarity: {"inputs": {"source_sentence",
        "sentences"}, "parameters": {"truncate", "prompt_name"}} -> the cosine similarity of each sentence to the source
        (router/src/http/server.rs, similarity: 1 - cosine distance of the unnormalized embeddings)."""
        embedder = self._require("embed")
        inputs, parameters = body.get("inputs"), _parameters(body)
        if not isinstance(inputs, dict):
            raise bad_request('`inputs` must be an object {"source_sentence": str, "sentences": [str, ...]}')
        source = _text(inputs.get("source_sentence"), "inputs.source_sentence")
        if not isinstance(inputs.get("sentences"), list):
            raise bad_request("`inputs.sentences` must be a list of strings")
        sentences = _texts(inputs["sentences"], "inputs.sentences")
        if not sentences:
            raise empty("inputs.sentences")
        self._check_batch(len(sentences) + 1, "inputs.sentences")  # the source counts, as in TEI
        prompt = self._prompt(embedder, parameters.get("prompt_name"), "parameters.prompt_name")
        self._check_length(embedder, [source, *sentences], _flag(parameters, "truncate", False), prompt=prompt)
        vectors = torch.stack(await self._run("embed", [(prompt, t) for t in [source, *sentences]])).float()
        return torch.nn.functional.cosine_similarity(vectors[:1], vectors[1:]).tolist()

    async def text_classification(self, body: dict) -> list:
        """HF Inference's text-classification task, as huggingface_hub's text_classification posts it:
        {"inputs": str, "parameters": {"top_k", "function_to_apply"}} -> [[{"label", "score"}, ...]] (one list
        per input, every label best first, or the top_k), scored by the classifier's own default (transformers'
        pipeline rule, Classifier.activation) unless function_to_apply names sigmoid, softmax or none."""
        classifier, parameters = self._require("classify"), _parameters(body)
        top_k, function = parameters.get("top_k"), parameters.get("function_to_apply")
        if top_k is not None and (type(top_k) is not int or top_k < 1):
            raise bad_request(f"`parameters.top_k` must be a positive integer, got {top_k!r}")
        if function not in (None, "sigmoid", "softmax", "none"):
            raise bad_request(f"`parameters.function_to_apply` must be sigmoid, softmax or none, got {function!r}")
        text = _text(body.get("inputs"), "inputs")
        self._check_length(classifier, [text], _flag(body, "truncate", False))
        logits = await self._run("classify", [(text, None)])
        (ranked,) = classifier.label_ranking(classifier.activate(torch.stack(logits), function or "auto"), top_k=top_k)
        return [[{"label": label, "score": score} for label, score in ranked]]

    async def root(self, body: dict) -> Any:
        """POST /. TEI routes it by the one model it serves (router/src/http/server.rs: an embedding model
        embeds, a classifier predicts, a reranker reranks); here two can be loaded, so the body decides,
        by the first rule that fits:
          1. a `query`                                  -> /rerank (TEI's rerank body)
          2. `inputs` an object (source_sentence, ...)  -> /similarity (huggingface_hub's sentence_similarity)
          3. `inputs` a string with `parameters`, and a classifier loaded
                                                        -> text classification (huggingface_hub's text_classification)
          4. any other `inputs`                         -> /embed if an embedding model is loaded (feature_extraction,
                                                           LangChain), else /predict
        With both models loaded, rule 4 refuses `inputs` holding a list (a pair or a batch of pairs, or
        ["a", "b"] meant as one pair): /predict and /embed read those differently, so the client names one."""
        inputs, models = body.get("inputs"), self.models
        if "query" in body:
            return await self.rerank(body)
        if isinstance(inputs, dict):
            return await self.similarity(body)
        if isinstance(inputs, str) and "parameters" in body and models.classifier is not None:
            return await self.text_classification(body)
        if models.embedder is not None:
            if models.classifier is not None and isinstance(inputs, list) and any(isinstance(v, list) for v in inputs):
                raise bad_request("POST / sends `inputs` to the embedding model when a classifier is loaded too, and "
                                  "the embedding model takes no pairs: post pairs to /predict (texts to /embed)")
            return await self.embed(body)
        if models.classifier is not None:
            return await self.predict(body)
        raise ServiceError(424, "Backend", "Backend error: no TEI model is loaded (start with --embed or --classify; "
                                           "GET / lists the routes served)")

    def _require(self, batcher: str):
        runner = {"embed": self.models.embedder, "classify": self.models.classifier}[batcher]
        if runner is None:  # TEI's messages for a route that does not fit the model
            message = {"embed": "Model is not an embedding model", "classify": "Model is not a classifier model"}
            raise ServiceError(424, "Backend", f"Backend error: {message[batcher]}")
        return runner

    def served(self) -> list[tuple[str, str]]:
        """(method, path) of each route the loaded models answer (GET / lists them). /embed, /similarity,
        /predict and /rerank also answer without their model: TEI's 424 Backend."""
        m = self.models
        routes = [("GET", "/")]
        if m.embedder is not None or m.classifier is not None:
            routes.append(("POST", "/"))
        routes += [("POST", f"/alignscore_{name}") for name in m.alignscore]
        if m.alignscore:
            routes.append(("POST", "/score"))
        if m.embedder is not None:
            routes += [("POST", "/embed"), ("POST", "/similarity")]
        if m.classifier is not None:
            routes += [("POST", "/predict"), *[("POST", "/rerank")] * m.classifier.reranker]
        return routes + [("GET", "/health"), ("GET", "/info")]

    def info(self) -> dict:
        m = self.models
        info: dict[str, Any] = {"model_id": m.names.get("embed") or m.names.get("classify") or m.names.get("alignscore"),
                                "version": VERSION, "max_concurrent_requests": self.limits.max_queue,
                                "max_client_batch_size": self.limits.max_client_batch_size,
                                "max_batch_tokens": self.limits.max_batch_tokens, "max_batch_requests": None,
                                "model_sha": None, "auto_truncate": False, "tokenization_workers": 1,
                                "alignscore": sorted(m.alignscore)}
        if m.embedder is not None:
            info.update(model_dtype=m.embedder.dtype_name,
                        model_type={"embedding": {"pooling": pooling.tei_name(m.embedder.pooling)}},
                        max_input_length=m.embedder.max_length, prompts=m.embedder.prompts,
                        default_prompt_name=m.embedder.default_prompt_name)
        elif m.classifier is not None:
            labels = m.classifier.labels
            kind = "reranker" if m.classifier.reranker else "classifier"
            info.update(model_dtype=m.classifier.dtype_name,
                        model_type={kind: {"id2label": {str(i): l for i, l in enumerate(labels)},
                                           "label2id": {l: i for i, l in enumerate(labels)}}},
                        max_input_length=m.classifier.max_length)
        # TEI's fields above describe one model; every loaded one, each under the routes that use it:
        loaded = {"embed": m.embedder, "classify": m.classifier,
                  **{f"alignscore_{name}": scorer for name, scorer in m.alignscore.items()}}
        info["models"] = {kind: self._describe(kind, runner) for kind, runner in loaded.items() if runner is not None}
        return info

    def _describe(self, kind: str, runner: Runner) -> dict:
        """One loaded model for /info: what was loaded, its dtype, window and routes, and its product's own facts."""
        source = self.models.names.get(kind, self.models.names.get(kind.partition("_")[0]))
        described: dict[str, Any] = {"model_id": source, "model_dtype": runner.dtype_name,
                                     "max_input_length": runner.max_length}
        if isinstance(runner, SentenceEncoder):
            described.update(kind="embedding", pooling=pooling.tei_name(runner.pooling), dimension=runner.dimension,
                             routes=["/embed", "/similarity", "/"])
        elif isinstance(runner, Classifier):
            described.update(kind="reranker" if runner.reranker else "classifier", labels=runner.labels,
                             routes=["/predict", "/rerank", "/"] if runner.reranker else ["/predict", "/"])
        else:
            described.update(kind="alignscore", mode=runner.mode, routes=[f"/{kind}", "/score"])
        return described

    # -- the ASGI app --

    def app(self):
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse, PlainTextResponse, Response
        from starlette.routing import Route

        limits = self.limits

        def error(status: int, error_type: str, message: str) -> JSONResponse:
            return JSONResponse({"error": message, "error_type": error_type}, status_code=status)

        async def body_of(request: Request) -> dict:
            declared = request.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
                raise ServiceError(413, "Validation", f"request body of {declared} bytes is over the limit of "
                                                      f"{limits.max_body_bytes}")
            raw = bytearray()
            async for chunk in request.stream():
                raw += chunk
                if len(raw) > limits.max_body_bytes:
                    raise ServiceError(413, "Validation", f"request body over the limit of {limits.max_body_bytes} bytes")
            try:
                body = json.loads(bytes(raw).decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise bad_request(f"the body is not JSON: {e}") from None
            if not isinstance(body, dict):
                raise bad_request(f"the body must be a JSON object, got {type(body).__name__}")
            return body

        def endpoint(handler: Callable[[dict], Any]):
            async def handle(request: Request) -> Response:
                if limits.api_key is not None:
                    given = request.headers.get("authorization", "")
                    if not hmac.compare_digest(given.encode(), f"Bearer {limits.api_key}".encode()):
                        return error(401, "Unauthorized", "missing or wrong API key (Authorization: Bearer KEY)")
                try:
                    if request.method == "GET":
                        result = handler({})
                    else:
                        result = await handler(await body_of(request))
                except ServiceError as e:
                    return error(e.status, e.error_type, e.message)
                except Exception as e:  # noqa: BLE001  (a bug on one request is its 500, not the service's end)
                    return error(500, "Backend", f"{type(e).__name__}: {e}")
                if isinstance(result, str):
                    return PlainTextResponse(result)
                return JSONResponse(_finite(result))
            return handle

        async def health(request: Request) -> Response:
            return Response(status_code=200)

        async def home(request: Request) -> Response:
            if request.method == "GET":
                served = ", ".join(f"{method} {path}" for method, path in self.served())
                return await endpoint(lambda _: f"minialign service: {served}")(request)
            return await endpoint(self.root)(request)

        async def not_found(request: Request, exc: Exception) -> Response:
            path = request.url.path
            name = path.removeprefix("/alignscore_")
            if name in ALIGNSCORE_ROUTES or path == "/score":
                flag = f"--alignscore {name}=SRC" if name in ALIGNSCORE_ROUTES else "--alignscore [NAME=]SRC"
                return error(404, "NotFound", f"Not Found: no AlignScore model is loaded for {path} (start the "
                                              f"service with {flag}); GET / lists the routes served")
            return error(404, "NotFound", f"Not Found: {request.method} {path} is not a route of this service; "
                                          "GET / lists the routes served")

        async def not_allowed(request: Request, exc: Exception) -> Response:
            allow = exc.headers["Allow"]
            return JSONResponse({"error": f"Method Not Allowed: {request.method} {request.url.path}; it takes {allow}",
                                 "error_type": "MethodNotAllowed"}, status_code=405, headers={"Allow": allow})

        routes = [Route("/", home, methods=["GET", "POST"]), Route("/health", health, methods=["GET"]),
                  Route("/info", endpoint(lambda _: self.info()), methods=["GET"]),
                  Route("/embed", endpoint(self.embed), methods=["POST"]),
                  Route("/similarity", endpoint(self.similarity), methods=["POST"]),
                  Route("/predict", endpoint(self.predict), methods=["POST"]),
                  Route("/rerank", endpoint(self.rerank), methods=["POST"])]
        if self.models.alignscore:  # otherwise a JSON 404 that names the flag to load one
            routes.append(Route("/score", endpoint(self.score), methods=["POST"]))
        for name in self.models.alignscore:
            routes.append(Route(f"/alignscore_{name}", endpoint(lambda body, n=name: self.alignscore(n, body)),
                                methods=["POST"]))
        @contextlib.asynccontextmanager
        async def lifespan(app):
            yield
            await asyncio.to_thread(self.close)  # after the server stopped taking requests: finish the taken ones

        return Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: not_found, 405: not_allowed})


def _finite(value: Any) -> Any:
    """JSON has no NaN / infinity: a non-finite float becomes null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


def serve(service: Service, *, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run the service with uvicorn until SIGTERM / SIGINT; says where it listens on stderr (port 0:
    an ephemeral port, the one chosen is printed)."""
    import socket
    import sys

    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)  # connections from now on wait in the backlog until uvicorn accepts them
    bound = sock.getsockname()[1]
    config = uvicorn.Config(service.app(), log_level="warning", timeout_graceful_shutdown=60)
    print(f"minialign serve: listening on http://{host}:{bound}", file=sys.stderr, flush=True)
    uvicorn.Server(config).run(sockets=[sock])
