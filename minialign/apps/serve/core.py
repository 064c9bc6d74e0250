"""The service's core, under every protocol: what is loaded, each model's request queue, the checks every route
makes (a body's values, a batch's size, the window) and the errors they raise.

Each loaded model has one queue (runtime/request_queue.DynamicBatcher) and one worker thread: requests that
arrive together are merged into model calls, off the event loop, and the batching engine inside each call
sorts, packs and bounds by tokens. An item of a queue is ((call, key), payload): the items of one call and key
run together (an embedder's texts under one prompt; a product's rows under one set of options), so every
route that reaches a model shares its queue.

Each protocol (nemo.py, tei.py, hf_inference.py, openai.py, rows.py) is a module of handlers, functions of (the
Core, the request's body), and declares its routes over them (Route); app.py composes them. The handlers parse
bodies and shape answers; what an input may be, which inputs exceed the window, how labels and documents are
ranked, what the pooling is called and every scoring option are the runners' (products/).
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import torch

from minialign.apps.serve.metrics import RAN, Metrics, payload_texts, text_tokens
from minialign.apps.serve.names import accepted, model_id
from minialign.products.alignscore import AlignScorer
from minialign.products.classifier import Classifier
from minialign.products.embeddings import SentenceEncoder
from minialign.products.minicheck import MiniCheckScorer
from minialign.products.multivector import MultiVectorEncoder
from minialign.products.runner import Input, Runner
from minialign.products.sparse import SparseEncoder
from minialign.runtime.request_queue import Closed, DynamicBatcher, Overloaded

# TEI's error bodies are {"error", "error_type"}, with these statuses (router/src/http/server.rs,
# From<&ErrorType> for StatusCode): Unhealthy 503, Backend 424, Overloaded 429, Validation 413,
# Tokenizer 422, Empty 400 (an empty batch, or a claim with no sentence). Departures, by design: an empty text
# is embedded / classified as its special tokens alone, as sentence-transformers and every other face of
# minialign do (TEI refuses an input whose texts are all empty: EncodingInput::is_empty); a malformed body (bad
# JSON, a missing field, a wrong type, a value the product refuses, such as a claim with no sentence) is a JSON
# 422 naming the field (TEI: axum's plain-text 400/422), a model call that fails is a 500, and an unknown route or
# method is a JSON 404 NotFound / 405 MethodNotAllowed (TEI: axum's empty body).
VERSION = "minialign"
# TEI's messages for a route that does not fit the model (424 Backend)
NOT_A = {"embed": "Model is not an embedding model", "classify": "Model is not a classifier model",
         "sparse": "Model is not an embedding model with splade pooling (start with --sparse)",
         "multivector": "Model is not a multi-vector embedding model (start with --multivector)"}


class ServiceError(Exception):
    def __init__(self, status: int, error_type: str, message: str):
        super().__init__(message)
        self.status, self.error_type, self.message = status, error_type, message


def bad_request(message: str) -> ServiceError:
    """A malformed body: 422, naming the field."""
    return ServiceError(422, "Validation", message)


def missing(name: str, given: dict) -> ServiceError:
    """A required field the body (or one of its objects, `given`) does not have: 422 naming it, and the fields it
    has (a typo such as "input" for "inputs" shows). The one message for every route's required fields; TEI's router
    answers its serde error there, "missing field `inputs`" (axum's Json extractor, a plain-text 422)."""
    has = ", ".join(f"`{k[:40]}`" for k in list(given)[:10]) if given else "none"
    return bad_request(f"`{name}` is missing (fields given: {has})")




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
    """What the service runs; each is optional. `products` holds the runners of other products of the table
    (apps/products.py) by name, which the service answers on POST /rows/NAME."""

    alignscore: dict[str, AlignScorer] = field(default_factory=dict)  # route name ("base" / "large") -> scorer
    embedder: SentenceEncoder | None = None
    classifier: Classifier | None = None
    minicheck: MiniCheckScorer | None = None
    sparse: SparseEncoder | None = None  # TEI's /embed_sparse
    multivector: MultiVectorEncoder | None = None  # TEI's /embed_all
    products: dict[str, Runner] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)  # kind -> what was loaded (for /info)
    served: dict[str, str] = field(default_factory=dict)  # kind -> its served name (--served-model-name; Core fills
    # in the others at start: serve/names.model_id)

    def loaded(self) -> dict[str, tuple[str, Runner]]:
        """Kind (its queue's name: "alignscore_base", "embed", "classify", "minicheck", "sparse", "multivector", a
        product's name) -> (its product in the table, the runner)."""
        kinds = {f"alignscore_{name}": ("alignscore", scorer) for name, scorer in self.alignscore.items()}
        for product, runner in (("embed", self.embedder), ("classify", self.classifier),
                                ("minicheck", self.minicheck), ("sparse", self.sparse),
                                ("multivector", self.multivector), *self.products.items()):
            if runner is not None:
                kinds[product] = (product, runner)
        return kinds

    def served_name(self, kind: str) -> str | None:
        """The name the model `kind` is served by (serve/names.py): --served-model-name, else its own id (Core
        decides it at start), else what it was loaded as."""
        return self.served.get(kind) or self.names.get(kind)

    def accepted(self, kind: str) -> list[str]:
        """The names a request's `model` may give for the model `kind`, the served one first (serve/names.py)."""
        served = self.served_name(kind)
        return accepted(served, self.names.get(kind)) if served else []


# -- the model calls (call name -> (runner, key, payloads) -> one result per payload) -------------------------

def _score_pairs(scorer, _, items: list[tuple[str | None, str, str]]) -> list[dict]:
    """Items (mode or None, context, claim) -> per-item details (every probability): one call, each item's mode
    (AlignScore's; MiniCheck has one)."""
    modes, contexts, claims = map(list, zip(*items))
    options = {"mode": modes} if isinstance(scorer, AlignScorer) else {}
    return scorer.score(contexts, claims, return_details=True, warn_truncation=False, **options)


def _encode(embedder: SentenceEncoder, prompt: str, texts: list[str]) -> list[torch.Tensor]:
    """Texts -> their embeddings, unnormalized, under one prompt text ("" for none)."""
    return list(embedder.encode(texts, prompt=prompt, warn_truncation=False))


def _logits(classifier: Classifier, _, items: list[tuple[str, str | None]]) -> list[torch.Tensor]:
    """Items (text, pair or None) -> the logits of each, singles and pairs in one call."""
    texts, pairs = map(list, zip(*items))
    return list(classifier.predict(texts, pairs, activation="none", warn_truncation=False).view(len(items), -1))


def _sparse(encoder: SparseEncoder, key: tuple[str, str | None], texts: list[str]) -> list[tuple[list, list]]:
    """Texts -> each one's (indices, values): its non-zero values, ascending index; key: (the prompt text, "" for none;
    the task)."""
    prompt, task = key
    out = encoder.encode(texts, prompt=prompt, task=task, warn_truncation=False).coalesce()  # sorted by (row, index)
    which, indices = out.indices()
    counts = torch.bincount(which, minlength=len(texts)).tolist()
    return [(i.tolist(), v.tolist()) for i, v in zip(indices.split(counts), out.values().split(counts))]


def _token_vectors(encoder: MultiVectorEncoder, key: tuple[str, str | None], texts: list[str]) -> list[torch.Tensor]:
    """Texts -> each one's token vectors (tokens, dim); key: (the prompt text, "" for none; the task)."""
    prompt, task = key
    return encoder.encode(texts, prompt=prompt, task=task, warn_truncation=False)


def _token_embeddings(embedder: SentenceEncoder, prompt: str, texts: list[str]) -> list[torch.Tensor]:
    """Texts -> each one's token embeddings (tokens, hidden), under one prompt text ("" for none)."""
    return embedder.encode(texts, prompt=prompt, output_value="token_embeddings", warn_truncation=False)


def _rows(_, __, items: list[tuple[Any, Any]]) -> list[dict]:
    """Items (a product's job, a row: files.rows.Row) -> the job's records; the items of a call share their job
    (the key is the job's: serve/rows.py)."""
    return items[0][0].run([row for _, row in items])


CALLS = {"score": _score_pairs, "encode": _encode, "logits": _logits, "sparse": _sparse,
         "token_vectors": _token_vectors, "token_embeddings": _token_embeddings, "rows": _rows}


def _model_run(runner: Runner, observe: Callable[[int], None] | None = None) -> Callable[[list], list]:
    """A queue's run: items ((call, key), payload) -> results in order, one model call per (call, key) (`observe`:
    told each call's number of items, for /metrics)."""

    def run(items: list[tuple[tuple[str, Hashable], Any]]) -> list:
        groups: dict[tuple[str, Hashable], list[int]] = {}
        for i, (call, _) in enumerate(items):
            groups.setdefault(call, []).append(i)
        out: list = [None] * len(items)
        for (name, key), where in groups.items():
            if observe is not None:
                observe(len(where))
            for i, result in zip(where, CALLS[name](runner, key, [items[i][1] for i in where])):
                out[i] = result
        return out

    return run


# -- request bodies (their types: serve/bodies.py) -----------------------------------------------------------

def dimensions(value: int | None, width: int) -> int | None:
    """A request's validated `dimensions` (TEI's /embed, OpenAI's /v1/embeddings: a positive integer): the first
    dimensions an embedding keeps, at most the model's `width` (the model's limit, which the type cannot know);
    None: all."""
    if value is not None and value > width:
        raise bad_request(f"`dimensions` {value} is more than the model's {width}")
    return value


# -- the core ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Route:
    """One route, declared once by its protocol: the ASGI app mounts it, GET / lists it, /info names it under
    each model it calls."""

    path: str
    handler: Callable[[Core, dict], Awaitable[Any]]  # (service, body) -> a JSON-able answer (str: plain text)
    kinds: Callable[[Models], list[str]] | None = None  # the loaded models it calls (None: none, always served)
    method: str = "POST"
    always: bool = False  # mounted without its models too (TEI's routes then answer 424; others are a JSON 404)
    open: bool = False  # answered without the API key (/health)
    errors: Callable[[int, str, str], dict] | None = None  # (status, type, message) -> its protocol's error body
    # (None: TEI's {"error", "error_type"}, app.py)
    body: Any = None  # its request body's type (serve/bodies.py; None: it reads none), for GET /openapi.json
    answer: Any = None  # its answer's type (str: text/plain)

    def serves(self, models: Models) -> bool:
        return self.kinds is None or bool(self.kinds(models))

    def mounted(self, models: Models) -> bool:
        return self.always or self.serves(models)


class Core:
    """The service's state, which every protocol's handlers read (functions of (service, body): tei.py, ...): the
    loaded models, the limits, one request queue per model and the product jobs made so far (serve/rows.py), with
    the checks every protocol makes. app.Service adds the routes the protocols declare over it."""

    def __init__(self, models: Models, limits: Limits | None = None):
        self.models, self.limits = models, limits or Limits()
        loaded = models.loaded()
        if not loaded:
            raise ValueError("nothing to serve: load at least one of --alignscore, --embed, --classify, --minicheck, "
                             "--sparse, --multivector or another product's --NAME")
        if self.limits.max_batch_tokens:
            for _, runner in loaded.values():
                runner.set_budget(max_tokens=self.limits.max_batch_tokens)
        for kind in loaded:  # each model's served name decided at start: no file is read because of a request
            if kind not in models.served and kind in models.names:
                models.served[kind] = model_id(models.names[kind])
        self.jobs: dict[tuple[str, str], Any] = {}  # POST /rows' product jobs, by (kind, options): serve/rows.py
        self.in_flight: dict[str, int] = dict.fromkeys(loaded, 0)  # requests queued or running, per model
        try:  # GET /metrics (serve/metrics.py), with prometheus-client
            self.metrics: Metrics | None = Metrics(lambda: dict(self.in_flight),
                                                   lambda kind: self.models.served_name(kind) or kind)
        except ImportError:
            self.metrics = None

        def observe(kind: str) -> Callable[[int], None] | None:
            return None if self.metrics is None else lambda size: self.metrics.observe_batch(kind, size)

        self.batchers: dict[str, DynamicBatcher] = {
            kind: DynamicBatcher(_model_run(runner, observe(kind)), max_wait=self.limits.max_wait_ms / 1000,
                                 max_requests=self.limits.max_queue, name=kind.replace("_", "-"))
            for kind, (_, runner) in loaded.items()}

    def close(self) -> None:
        for batcher in self.batchers.values():
            batcher.close()

    async def run(self, kind: str, call: str, payloads: list, key: Hashable = None) -> list:
        """The results of `call` (CALLS) on the model `kind` for one request's payloads, through its queue."""
        try:
            future = self.batchers[kind].submit([((call, key), payload) for payload in payloads])
        except Overloaded:
            raise ServiceError(429, "Overloaded", "Model is overloaded") from None
        except Closed:
            raise ServiceError(503, "Unhealthy", "the service is shutting down") from None
        self.in_flight[kind] += 1
        ran = RAN.get()
        if ran is not None:
            ran.setdefault(kind, 0)
        try:
            if ran is None or self.metrics is None:
                return await asyncio.wrap_future(future)
            runner = self.models.loaded()[kind][1]  # its texts' tokens counted off the event loop, meanwhile
            results, tokens = await asyncio.gather(asyncio.wrap_future(future), asyncio.to_thread(
                text_tokens, runner, payload_texts(call, payloads)))
            ran[kind] = ran.get(kind, 0) + tokens
            return results
        except Exception as e:  # noqa: BLE001  (the model failed on this call: a 500, the service goes on)
            raise ServiceError(500, "Backend", f"Backend error: {type(e).__name__}: {e}") from None
        finally:
            self.in_flight[kind] -= 1

    def require(self, kind: str) -> Runner:
        """The TEI model `kind` ("embed", "classify", "sparse", "multivector"), or TEI's 424 when it is not loaded."""
        runner = {"embed": self.models.embedder, "classify": self.models.classifier, "sparse": self.models.sparse,
                  "multivector": self.models.multivector}[kind]
        if runner is None:
            raise ServiceError(424, "Backend", f"Backend error: {NOT_A[kind]}")
        return runner

    def check_batch(self, n: int, name: str = "inputs") -> None:
        if n == 0:
            raise empty(name)
        if n > self.limits.max_client_batch_size:
            raise ServiceError(413, "Validation", f"Input validation error: batch size {n} > maximum allowed batch "
                                                  f"size {self.limits.max_client_batch_size}")

    @staticmethod
    def check_length(runner: Runner, inputs: list[Input], truncate: bool, **options: Any) -> None:
        """With truncate false, an input the runner's window would cut is refused, as TEI does (options:
        the call's, such as the embedder's prompt, which counts)."""
        if not truncate and (long := runner.over_window(inputs, **options)):
            _, total = long[0]
            raise ServiceError(413, "Validation", f"Input validation error: `inputs` must have less than "
                                                  f"{runner.max_length} tokens. Given: {total}")


def prompt_text(embedder: SentenceEncoder, name: str | None, field: str = "prompt_name", **task: str | None) -> str:
    """The prompt text a request's `prompt_name` asks for (absent or null: the model's default prompt, if any; with a
    `task`, the task's prompt first), as the embedder resolves it; "" for none. An unknown name is TEI's 413
    Validation."""
    try:
        return embedder.resolve_prompt(prompt_name=name, **task) or ""
    except ValueError as e:
        raise ServiceError(413, "Validation", f"Input validation error: `{field}`: {e}") from None
