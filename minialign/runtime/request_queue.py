"""Dynamic batching for a service: the items of requests that arrive together go to the model in
one call, on a worker thread of the model's own, and each request gets its own slice back.

    batcher = DynamicBatcher(run, max_items=256, max_wait=0.005, max_requests=512)
    future = batcher.submit(items)   # concurrent.futures.Future -> run's results for these items
    await asyncio.wrap_future(future)

`run(items) -> results` (one per item) is where the batching engine works (dedup, sort by length,
token budget, packing): the batcher only decides which requests share a call. The first waiting
request opens a window of `max_wait` seconds (or until `max_items` items are waiting); everything
queued by then is merged. At most `max_requests` requests are in flight (queued or running); one
more is refused with Overloaded (the service answers 429). A failing call fails the requests in it
and the worker goes on. `close()` stops taking requests and finishes the ones already taken.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any


class Overloaded(RuntimeError):
    """Too many requests in flight."""


class Closed(RuntimeError):
    """The batcher is shutting down and takes no more requests."""


@dataclass
class _Request:
    items: list[Any]
    future: Future = field(default_factory=Future)


_STOP = object()


class DynamicBatcher:
    def __init__(self, run: Callable[[list[Any]], list[Any]], *, max_items: int = 256, max_wait: float = 0.005,
                 max_requests: int = 512, name: str = "model"):
        if max_items < 1 or max_requests < 1 or max_wait < 0:
            raise ValueError("max_items and max_requests must be >= 1, max_wait >= 0")
        self.run, self.max_items, self.max_wait, self.max_requests = run, max_items, max_wait, max_requests
        self._queue: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._in_flight = 0
        self._closed = False
        self.calls = 0  # model calls made (a test can see that requests were merged)
        self._worker = threading.Thread(target=self._loop, name=f"batcher-{name}", daemon=True)
        self._worker.start()

    def submit(self, items: list[Any]) -> Future:
        """Queue one request's items; the future resolves to their results, in order."""
        request = _Request(list(items))
        with self._lock:  # queued under the lock: nothing taken can land behind close()'s stop marker
            if self._closed:
                raise Closed("the service is shutting down")
            if self._in_flight >= self.max_requests:
                raise Overloaded(f"{self._in_flight} requests in flight (the limit is {self.max_requests})")
            self._in_flight += 1
            self._queue.put(request)
        request.future.add_done_callback(self._done)
        return request.future

    def _done(self, _future: Future) -> None:
        with self._lock:
            self._in_flight -= 1

    def close(self, timeout: float | None = None) -> None:
        """Refuse new requests, finish the queued and running ones, stop the worker."""
        with self._lock:
            self._closed = True
        self._queue.put(_STOP)
        self._worker.join(timeout)

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is _STOP:
                return
            requests, count = [first], len(first.items)
            deadline = time.monotonic() + self.max_wait
            stop = False
            while count < self.max_items:
                try:
                    nxt = self._queue.get(timeout=max(deadline - time.monotonic(), 0.0))
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stop = True
                    break
                requests.append(nxt)
                count += len(nxt.items)
            self._call(requests)
            if stop:
                self._drain()
                return

    def _drain(self) -> None:
        """After close(): whatever was queued before the stop marker still runs."""
        leftover = []
        while True:
            try:
                leftover.append(self._queue.get_nowait())
            except queue.Empty:
                break
        leftover = [r for r in leftover if r is not _STOP]
        if leftover:
            self._call(leftover)

    def _call(self, requests: list[_Request]) -> None:
        items = [item for r in requests for item in r.items]
        self.calls += 1
        try:
            results = self.run(items)
            if len(results) != len(items):
                raise RuntimeError(f"the model gave {len(results)} results for {len(items)} items")
        except Exception as e:  # noqa: BLE001  (every request of the call learns why; the worker goes on)
            for r in requests:
                r.future.set_exception(e)
            return
        start = 0
        for r in requests:
            r.future.set_result(results[start:start + len(r.items)])
            start += len(r.items)
