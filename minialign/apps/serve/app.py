"""The service composed: the Core (serve/core.py) with each protocol's routes (PROTOCOLS: a module's `routes`,
whose handlers are functions of (service, body)), GET /, /health and /info; the ASGI app (Starlette) mounting them,
the body read within its limit and parsed, the API key checked, errors as TEI's {"error", "error_type"}; and `serve`,
which runs it with uvicorn (the layout of TEI's router/src/http/server.rs over its core)."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import math
import time
from typing import Any

import minialign.apps.serve.cohere as cohere
import minialign.apps.serve.hf_inference as hf_inference
import minialign.apps.serve.nemo as nemo
import minialign.apps.serve.openai as openai
import minialign.apps.serve.rows as rows
import minialign.apps.serve.spec as spec
import minialign.apps.serve.tei as tei
from minialign.apps.files.rows import parse_json
from minialign.apps import extra_hint
from minialign.apps.serve.core import VERSION, Core, Limits, Models, Route, ServiceError, bad_request
from minialign.apps.serve.metrics import RAN
from minialign.products import pooling
from minialign.products.alignscore import AlignScorer
from minialign.products.classifier import Classifier
from minialign.products.embeddings import SentenceEncoder
from minialign.products.multivector import MultiVectorEncoder
from minialign.products.runner import Runner
from minialign.products.sparse import SparseEncoder


# -- what is served: GET /, /health, /info -------------------------------------------------------------------

async def _home(service: Service, body: dict) -> str:
    served = ", ".join(f"{method} {path}" for method, path in service.served())
    return f"minialign service: {served}"


async def _health(service: Service, body: dict) -> str:
    return ""  # 200, for load balancers


async def _metrics(service: Service, body: dict) -> str:
    """Prometheus' text format (serve/metrics.py)."""
    if service.metrics is None:
        raise ServiceError(503, "Unhealthy", f"/metrics needs prometheus-client: {extra_hint('serve')}")
    return service.metrics.render()


async def _info(service: Service, body: dict) -> dict:
    """TEI's /info fields for the one model TEI would serve (the embedder, else the classifier), and under
    "models" every loaded one, each with the routes that use it."""
    m, limits = service.models, service.limits
    loaded = m.loaded()
    tei_kind = next((k for k in ("embed", "classify") if k in loaded), next(iter(loaded), None))
    info: dict[str, Any] = {"model_id": m.names.get("embed") or m.names.get("classify") or m.names.get("alignscore")
                            or next(iter(m.names.values()), None),
                            "served_model_name": m.served_name(tei_kind) if tei_kind else None,
                            "version": VERSION, "max_concurrent_requests": limits.max_queue,
                            "max_client_batch_size": limits.max_client_batch_size,
                            "max_batch_tokens": limits.max_batch_tokens, "max_batch_requests": None,
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
    info["models"] = {kind: _describe(service, kind, product, runner) for kind, (product, runner) in m.loaded().items()}
    return info


def _describe(service: Service, kind: str, product: str, runner: Runner) -> dict:
    """One loaded model for /info: what was loaded, its dtype, window and routes, and its product's own facts."""
    models = service.models
    described: dict[str, Any] = {"model_id": models.names.get(kind, models.names.get(product)),
                                 "served_model_name": models.served_name(kind),
                                 "model_dtype": runner.dtype_name, "max_input_length": runner.max_length}
    if product in models.products:  # a product the protocols do not speak: /rows/NAME
        described.update(kind=product)
    elif isinstance(runner, SentenceEncoder):
        described.update(kind="embedding", pooling=pooling.tei_name(runner.pooling), dimension=runner.dimension)
    elif isinstance(runner, Classifier):
        described.update(kind="reranker" if runner.reranker else "classifier", labels=runner.labels)
    elif isinstance(runner, AlignScorer):
        described.update(kind="alignscore", mode=runner.mode)
    elif isinstance(runner, SparseEncoder):
        described.update(kind="sparse", vocab_size=runner.dimension, prompts=runner.prompts,
                         default_prompt_name=runner.default_prompt_name)
    elif isinstance(runner, MultiVectorEncoder):
        described.update(kind="multivector", dimension=runner.dimension, prompts=runner.prompts,
                         default_prompt_name=runner.default_prompt_name)
    else:
        described.update(kind=product)  # minicheck
    described["routes"] = [route.path for route in service.routes
                           if route.kinds is not None and kind in route.kinds(models)]
    return described


def _front_routes(models: Models) -> list[Route]:
    """GET /: the routes served, as text."""
    return [Route("/", _home, method="GET", answer=str)]


def _back_routes(models: Models) -> list[Route]:
    """GET /health (open: no API key), GET /info (TEI's) and GET /metrics (Prometheus')."""
    return [Route("/health", _health, method="GET", open=True, answer=str),
            Route("/info", _info, method="GET", answer=dict[str, Any]),
            Route("/metrics", _metrics, method="GET", answer=str)]


# Each protocol's routes, in the order GET / lists them and Starlette matches them.
PROTOCOLS = (_front_routes, nemo.routes, tei.routes, hf_inference.routes, openai.routes, cohere.routes, rows.routes,
             _back_routes, spec.routes)


class Service(Core):
    """The loaded models (Models) behind every protocol's routes (PROTOCOLS), within Limits."""

    def __init__(self, models: Models, limits: Limits | None = None):
        super().__init__(models, limits)
        self.routes: list[Route] = [route for protocol in PROTOCOLS for route in protocol(models)]
        self.openapi: dict | None = None  # GET /openapi.json's document (serve/spec.py), made on its first request

    def served(self) -> list[tuple[str, str]]:
        """(method, path) of each route the loaded models answer (GET / lists them). /embed, /similarity,
        /predict and /rerank also answer without their model: TEI's 424 Backend."""
        return [(route.method, route.path) for route in self.routes if route.serves(self.models)]

    def app(self):
        """The ASGI app (Starlette)."""
        return build(self)


# -- the ASGI app ---------------------------------------------------------------------------------------------

def _finite(value: Any) -> Any:
    """JSON has no NaN / infinity: a non-finite float becomes null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


def _error(status: int, error_type: str, message: str, headers: dict | None = None, route: Route | None = None):
    """An error response: in the route's protocol's shape (Route.errors), else TEI's {"error", "error_type"}."""
    from starlette.responses import JSONResponse

    body = route.errors(status, error_type, message) if route is not None and route.errors is not None \
        else {"error": message, "error_type": error_type}
    return JSONResponse(body, status_code=status, headers=headers)


def _too_large(limits: Limits, size: str | None = None) -> ServiceError:
    """413 for a body over the limit, naming the limit and where it is set (TEI's own is --payload-limit, answered
    with axum's plain-text "length limit exceeded")."""
    said = f"request body of {size} bytes" if size else "request body"
    return ServiceError(413, "Validation", f"{said} is over the limit of {limits.max_body_bytes} bytes (set by "
                                           "`minialign serve --max-body-bytes`; Limits.max_body_bytes in Python)")


async def _body(request, limits: Limits) -> dict:
    """The request's JSON object, read up to max_body_bytes (413 past it; 422 for what is not a JSON object)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise _too_large(limits, declared)
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > limits.max_body_bytes:
            raise _too_large(limits)  # sent without a length, or more than it said
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError as e:
        raise bad_request(f"the body is not JSON: {e}") from None
    body, problem = parse_json(text)  # json's errors, and a body nested too deep or a too long integer
    if problem is not None:
        raise bad_request(f"the body is not JSON: {problem}")
    if not isinstance(body, dict):
        raise bad_request(f"the body must be a JSON object, got {type(body).__name__}")
    return body


def _endpoint(service: Service, route: Route):
    """A Starlette endpoint answering with route.handler(service, body): the API key (unless the route is open),
    the body (GET: none), errors."""
    from starlette.responses import JSONResponse, PlainTextResponse

    limits = service.limits

    async def answer(request, outcome: dict):
        if limits.api_key is not None and not route.open:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {limits.api_key}".encode()):
                outcome["error_type"] = "Unauthorized"
                return _error(401, "Unauthorized", "missing or wrong API key (Authorization: Bearer KEY)", route=route)
        try:
            body = {} if request.method in ("GET", "HEAD") else await _body(request, limits)
            result = await route.handler(service, body)
        except ServiceError as e:
            outcome["error_type"] = e.error_type
            return _error(e.status, e.error_type, e.message, route=route)
        except Exception as e:  # noqa: BLE001  (a bug on one request is its 500, not the service's end)
            outcome["error_type"] = "Backend"
            return _error(500, "Backend", f"{type(e).__name__}: {e}", route=route)
        return PlainTextResponse(result) if isinstance(result, str) else JSONResponse(_finite(result))

    if service.metrics is None or route.handler is _metrics:
        return lambda request: answer(request, {})

    async def handle(request):  # counted for /metrics: the models the request ran on (Core.run fills RAN)
        started, ran, outcome = time.perf_counter(), {}, {}
        token = RAN.set(ran)
        try:
            response = await answer(request, outcome)
        finally:
            RAN.reset(token)
        default = route.kinds(service.models) if route.kinds is not None else []
        service.metrics.observe_request(route.path, default, ran, started, outcome.get("error_type"))
        return response

    return handle


async def _not_found(request, exc: Exception):
    path = request.url.path
    missing = nemo.not_loaded(path) or hf_inference.not_loaded(path)
    if missing is not None:
        return _error(404, "NotFound", f"Not Found: {missing}; GET / lists the routes served")
    return _error(404, "NotFound", f"Not Found: {request.method} {path} is not a route of this service; "
                                   "GET / lists the routes served")


async def _not_allowed(request, exc: Exception):
    allow = exc.headers["Allow"]
    return _error(405, "MethodNotAllowed", f"Method Not Allowed: {request.method} {request.url.path}; it takes "
                                           f"{allow}", headers={"Allow": allow})


def _by_method(endpoints: dict):
    async def dispatch(request):
        return await endpoints.get(request.method, endpoints.get("GET"))(request)  # HEAD: as GET
    return dispatch


def build(service: Service):
    """The Starlette app of `service`: every route its protocols declare that is mounted with the models it has
    (the methods of one path on one Starlette route), and JSON 404 / 405 answers."""
    from starlette.applications import Starlette
    from starlette.routing import Route as StarletteRoute

    paths: dict[str, dict] = {}
    for route in service.routes:
        if route.mounted(service.models):
            paths.setdefault(route.path, {})[route.method] = _endpoint(service, route)
    routes = [StarletteRoute(path, _by_method(endpoints), methods=list(endpoints)) for path, endpoints in paths.items()]

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        await asyncio.to_thread(service.close)  # after the server stopped taking requests: finish the taken ones

    return Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: _not_found, 405: _not_allowed})


def bind(host: str = "127.0.0.1", port: int = 8000):
    """A socket bound to host:port, not yet listening (a client is refused until serve listens on it): `minialign
    serve` binds before it loads its models, so an address in use is said at once. An OSError names the address."""
    import errno
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:  # the address named (the socket module's error names none)
        sock.close()
        said = "is in use" if e.errno == errno.EADDRINUSE else f"cannot be bound: {e.strerror}"
        raise OSError(e.errno, f"{host}:{port} {said}") from None
    return sock


def serve(service: Service, *, host: str = "127.0.0.1", port: int = 8000, sock=None) -> None:
    """Run the service with uvicorn until SIGTERM / SIGINT; says where it listens on stderr (port 0:
    an ephemeral port, the one chosen is printed). sock: one `bind` made (else host:port is bound here)."""
    import sys

    import uvicorn

    sock = bind(host, port) if sock is None else sock
    with sock:
        sock.listen(2048)  # connections from now on wait in the backlog until uvicorn accepts them
        bound = sock.getsockname()[1]
        config = uvicorn.Config(service.app(), log_level="warning", timeout_graceful_shutdown=60)
        print(f"minialign serve: listening on http://{host}:{bound}", file=sys.stderr, flush=True)
        uvicorn.Server(config).run(sockets=[sock])
