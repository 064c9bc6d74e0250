"""GET /metrics: the service's figures in Prometheus' text format (prometheus-client, in the `serve` extra), as TEI
serves its own (router/src/http/server.rs, metrics; its te_request_count / te_request_success / te_request_failure,
te_request_duration, te_batch_next_size, te_queue_size), per route and per model:

    minialign_requests_total{route, model}                      requests answered (every status)
    minialign_request_failures_total{route, model, error_type}  those answered with an error (4xx or 5xx)
    minialign_request_duration_seconds{route, model}            a histogram of the time to answer
    minialign_request_tokens_total{route, model}                tokens of the texts the model read for them (as its
                                                                tokenizer splits them; special tokens and prompts
                                                                not counted, nor what the window cuts)
    minialign_batch_size{model}                                 a histogram of the items of each model call
    minialign_queue_size{model}                                 requests in flight (queued or running) now

`route` is the route's path (GET /metrics itself is not counted); `model` is the served name (serve/names.py) of
each model the request ran on, joined with "," (none: the route's one model, else ""). Each Service has its own
registry. Without prometheus-client, GET /metrics is a 503 naming the extra (the rest of the service runs).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable

# the models a request ran on and the tokens they read, filled by Core.run during one request
RAN: contextvars.ContextVar[dict[str, int] | None] = contextvars.ContextVar("ran", default=None)


def text_tokens(runner, texts: list[str]) -> int:
    """Tokens of `texts` as the runner's tokenizer splits them (no special tokens, no window)."""
    tokenizer = getattr(runner, "tokenizer", None)
    if tokenizer is None or not texts:
        return 0
    return sum(len(e.ids) for e in tokenizer.backend.encode_batch(texts, add_special_tokens=False))


def payload_texts(call: str, payloads: list) -> list[str]:
    """The texts of a model call's payloads (serve/core.CALLS): a text; (text, pair or None); (mode, context, claim).
    A product's rows are not counted."""
    if call == "rows":
        return []
    if call == "score":
        return [t for _, context, claim in payloads for t in (context, claim)]
    if call == "logits":
        return [t for pair in payloads for t in pair if t is not None]
    return [p for p in payloads if isinstance(p, str)]


class Metrics:
    """The service's Prometheus collectors, in a registry of their own."""

    def __init__(self, in_flight: Callable[[], dict[str, int]], served: Callable[[str], str]):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
        from prometheus_client.core import GaugeMetricFamily

        self.registry, self.served = CollectorRegistry(), served
        route = ("route", "model")
        self.requests = Counter("minialign_requests", "requests answered", route, registry=self.registry)
        self.failures = Counter("minialign_request_failures", "requests answered with an error",
                                (*route, "error_type"), registry=self.registry)
        self.duration = Histogram("minialign_request_duration_seconds", "time to answer a request", route,
                                  registry=self.registry)
        self.tokens = Counter("minialign_request_tokens", "tokens of the texts the models read", route,
                              registry=self.registry)
        self.batch = Histogram("minialign_batch_size", "items of each model call", ("model",),
                               buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024), registry=self.registry)

        class Queue:  # read when scraped
            def collect(self):
                family = GaugeMetricFamily("minialign_queue_size", "requests in flight (queued or running)",
                                           labels=("model",))
                for kind, n in in_flight().items():
                    family.add_metric((served(kind),), n)
                yield family

        self.registry.register(Queue())

    def observe_batch(self, kind: str, size: int) -> None:
        self.batch.labels(self.served(kind)).observe(size)

    def observe_request(self, path: str, default: list[str], ran: dict[str, int], started: float,
                        error_type: str | None) -> None:
        """One answered request: its route, the models it ran on (`ran`: kind -> tokens; none: `default`, the
        route's models when it has one), the time since `started`, the error it ended with."""
        kinds = list(ran) or (default if len(default) == 1 else [])
        model = ",".join(self.served(kind) for kind in kinds)
        self.requests.labels(path, model).inc()
        self.duration.labels(path, model).observe(time.perf_counter() - started)
        if tokens := sum(ran.values()):
            self.tokens.labels(path, model).inc(tokens)
        if error_type is not None:
            self.failures.labels(path, model, error_type).inc()

    def render(self) -> str:
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode("utf-8")
