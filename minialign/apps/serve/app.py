"""The ASGI app (Starlette) over a Service: each protocol's routes mounted as declared, the body read within its
limit and parsed, the API key checked, errors as TEI's {"error", "error_type"} (serve/core.py), and `serve`,
which runs it with uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import math
from typing import Any

from minialign.apps.serve.hf_inference import not_loaded as task_not_loaded
from minialign.apps.serve.nemo import not_loaded
from minialign.apps.serve.core import Limits, Route, ServiceError, bad_request


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
        body = json.loads(bytes(raw).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise bad_request(f"the body is not JSON: {e}") from None
    if not isinstance(body, dict):
        raise bad_request(f"the body must be a JSON object, got {type(body).__name__}")
    return body


def _endpoint(service, route: Route):
    """A Starlette endpoint answering with route.handler(service, body): the API key (unless the route is open),
    the body (GET: none), errors."""
    from starlette.responses import JSONResponse, PlainTextResponse

    limits = service.limits

    async def handle(request):
        if limits.api_key is not None and not route.open:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {limits.api_key}".encode()):
                return _error(401, "Unauthorized", "missing or wrong API key (Authorization: Bearer KEY)", route=route)
        try:
            body = {} if request.method in ("GET", "HEAD") else await _body(request, limits)
            result = await route.handler(service, body)
        except ServiceError as e:
            return _error(e.status, e.error_type, e.message, route=route)
        except Exception as e:  # noqa: BLE001  (a bug on one request is its 500, not the service's end)
            return _error(500, "Backend", f"{type(e).__name__}: {e}", route=route)
        return PlainTextResponse(result) if isinstance(result, str) else JSONResponse(_finite(result))

    return handle


async def _home(service, body: dict) -> str:
    served = ", ".join(f"{method} {path}" for method, path in service.served())
    return f"minialign service: {served}"


async def _health(service, body: dict) -> str:
    return ""  # 200, for load balancers


async def _info(service, body: dict) -> dict:
    return service.info()


def front_routes(models) -> list[Route]:
    """GET /: the routes served, as text."""
    return [Route("/", _home, method="GET")]


def back_routes(models) -> list[Route]:
    """GET /health (open: no API key) and GET /info (TEI's)."""
    return [Route("/health", _health, method="GET", open=True), Route("/info", _info, method="GET")]


async def _not_found(request, exc: Exception):
    path = request.url.path
    missing = not_loaded(path) or task_not_loaded(path)
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


def build(service):
    """The Starlette app of `service`: every route its protocols declare that is mounted with the models it has
    (the methods of one path on one Starlette route), and JSON 404 / 405 answers."""
    from starlette.applications import Starlette
    from starlette.routing import Route as StarletteRoute

    paths: dict[str, dict] = {}
    for route in service.routes():
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


def serve(service, *, host: str = "127.0.0.1", port: int = 8000, sock=None) -> None:
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
