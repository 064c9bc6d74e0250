"""DynamicBatcher on its own: requests arriving together share a call, each gets its own slice,
a failing call fails only its requests, a full queue refuses, close() finishes what it took."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from minialign.runtime.request_queue import Closed, DynamicBatcher, Overloaded


def test_concurrent_requests_are_merged_and_answered_in_their_own_order():
    calls = []

    def run(items):
        calls.append(len(items))
        time.sleep(0.01)
        return [x * 10 for x in items]

    batcher = DynamicBatcher(run, max_wait=0.05, max_items=1000)
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda i: batcher.submit([i, i + 1000]).result(timeout=10), range(64)))
    assert results == [[i * 10, (i + 1000) * 10] for i in range(64)]
    assert sum(calls) == 128 and len(calls) < 64  # merged
    batcher.close()


def test_a_failing_call_fails_its_requests_and_the_worker_goes_on():
    def run(items):
        if "boom" in items:
            raise ValueError("bad item")
        return items

    batcher = DynamicBatcher(run, max_wait=0.0)
    with pytest.raises(ValueError, match="bad item"):
        batcher.submit(["boom"]).result(timeout=10)
    assert batcher.submit(["fine"]).result(timeout=10) == ["fine"]
    batcher.close()


def test_full_queue_refuses_and_close_finishes_what_it_took():
    release = threading.Event()

    def run(items):
        release.wait(10)
        return items

    batcher = DynamicBatcher(run, max_wait=0.0, max_requests=2)
    first, second = batcher.submit([1]), batcher.submit([2])
    with pytest.raises(Overloaded):
        batcher.submit([3])
    closer = threading.Thread(target=batcher.close)
    closer.start()
    time.sleep(0.05)
    with pytest.raises(Closed):
        batcher.submit([4])
    release.set()
    closer.join(10)
    assert first.result(timeout=1) == [1] and second.result(timeout=1) == [2]
