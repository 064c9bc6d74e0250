"""The GPU suite's timer (scripts/gpu_suite.sh; the CPU report keeps machine.interleaved's best of rounds).

Every implementation of a case runs once per repetition, the order reversed every other repetition, so the
machine's drift (clocks, other tenants) reaches them alike; each call is timed three ways:

    host    wall time until the call returns, before any sync: what the host spends enqueueing (on a CUDA device
            an asynchronous forward returns before its kernels have run; a call that syncs inside returns late)
    device  CUDA-event time between an event recorded before the call and one after (torch.cuda.Event
            elapsed_time): the GPU's side, idle gaps included; absent on a CPU
    wall    synced wall time: sync, call, sync

and the figures kept are the wall time's median with its spread (p10, p90, min, max), the host and device medians
(pattern: torch.utils.benchmark's Timer, which syncs around each measurement and reports medians)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of values, linear between the two nearest ranks (numpy's default)."""
    ranked = sorted(values)
    at = q * (len(ranked) - 1)
    low = math.floor(at)
    high = min(low + 1, len(ranked) - 1)
    return ranked[low] + (ranked[high] - ranked[low]) * (at - low)


@dataclass
class Times:
    """One impl's seconds in every repetition (wall, host; device where timed) and its warm-up's."""

    wall: list[float] = field(default_factory=list)
    host: list[float] = field(default_factory=list)
    device: list[float] = field(default_factory=list)
    warm_up: float | None = None

    @property
    def median(self) -> float:
        return percentile(self.wall, 0.5)

    def figures(self) -> dict:
        """The row's timing figures (data.FIGURES): reps, median_ms with its spread, host_ms, device_ms."""
        ms = lambda values, q=0.5: round(1e3 * percentile(values, q), 4)  # noqa: E731
        found = {"reps": len(self.wall), "median_ms": ms(self.wall), "p10_ms": ms(self.wall, 0.1),
                 "p90_ms": ms(self.wall, 0.9), "min_ms": ms(self.wall, 0.0), "max_ms": ms(self.wall, 1.0),
                 "host_ms": ms(self.host)}
        if self.device:
            found["device_ms"] = ms(self.device)
        return found

    def compile_s(self) -> float:
        """The warm-up's seconds beyond one steady call: what compiling (and recording CUDA graphs) cost."""
        return round(max(0.0, (self.warm_up or 0.0) - self.median), 3)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def repeat(calls: dict[str, Callable], *, reps: int, device: str = "cpu", warm_up: dict[str, Callable] | None = None,
           outputs: dict | None = None) -> dict[str, Times]:
    """Each call's Times over `reps` interleaved repetitions, after each call of `warm_up` (default: each of
    `calls`; {}: none) ran once, its seconds kept as the Times' warm_up. `outputs`, when given, gets each call's
    last result."""
    device = torch.device(device)
    times = {label: Times() for label in calls}
    for label, call in (calls if warm_up is None else warm_up).items():
        _sync(device)
        start = time.perf_counter()
        call()
        _sync(device)
        if label in times:
            times[label].warm_up = time.perf_counter() - start
    events = device.type == "cuda"
    for r in range(reps):
        for label, call in list(calls.items())[::1 if r % 2 == 0 else -1]:  # no seat favoured
            if events:
                before, after = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            _sync(device)
            start = time.perf_counter()
            if events:
                before.record()
            result = call()
            host = time.perf_counter() - start
            if events:
                after.record()
            _sync(device)
            wall = time.perf_counter() - start
            record = times[label]
            record.wall.append(wall)
            record.host.append(host)
            if events:
                record.device.append(before.elapsed_time(after) / 1e3)
            if outputs is not None:
                outputs[label] = result
    return times


def phases(labels: list[str], baseline: str, compiled: set[str]) -> list[list[str]]:
    """The groups a case's impls are timed in: the baseline with every impl that does not compile, then the
    baseline again with each compiled impl alone. A compiled impl warms up (compiles, recompiles) in its own group,
    so a stage cut while it compiles loses its rows only."""
    return [[label for label in labels if label not in compiled]] + [[baseline, label] for label in labels
                                                                     if label in compiled]
