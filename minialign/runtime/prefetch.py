"""Work ahead of the caller: the next items made in a background thread while the caller uses this one.

    with closing(ahead(collated_batches)) as batches:
        for batch in batches:
            forward(batch)   # the next batch is collated meanwhile

The batching engine (engine.py) runs its collation this way on an accelerator, where a forward returns as soon
as its kernels are queued and the host is free to build the next batch while the device computes; and where a
forward does wait on the device, that wait releases the GIL, so the producer runs then too (pattern: torch's
`torch.utils.data.DataLoader` with `pin_memory=True`, whose pin-memory thread fills a bounded queue ahead of the
loop).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

_DONE = object()  # the producer's last message: every item was made


class _Failed:
    """The producer's exception, raised at the consumer at its place in the sequence."""

    def __init__(self, error: BaseException):
        self.error = error


def ahead(items: Iterable[T], depth: int = 2) -> Iterator[T]:
    """`items` in their order, each made in a background thread up to `depth` items before the consumer asks for
    it. An exception while making an item is raised to the consumer when it reaches that item; closing the
    iterator (contextlib.closing, as the engine does, or its collection) stops the producer."""
    made: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(message) -> bool:
        while not stop.is_set():
            try:
                made.put(message, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(item):
                    return
        except BaseException as error:  # noqa: BLE001 - handed to the consumer, which raises it
            put(_Failed(error))
            return
        put(_DONE)

    thread = threading.Thread(target=produce, name="minialign-ahead", daemon=True)
    thread.start()
    try:
        while True:
            message = made.get()
            if message is _DONE:
                return
            if isinstance(message, _Failed):
                raise message.error
            yield message
    finally:
        stop.set()
        thread.join()
