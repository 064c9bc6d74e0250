"""workers=N: model processes through the batching engine; results as one process gives them, in input
order; a dead worker's batches run again once, nothing lost or duplicated."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

import minialign as ma
from minialign.apps.cli import main
from minialign.runtime.process_pool import WorkerDiedWarning, WorkerError, WorkerPool


class Doubler:
    """A picklable forward for the pool's own tests: each call logged to a file (one line per call,
    appended by whichever process runs it), and, to order, a process that exits mid-batch."""

    def __init__(self, log: Path, die_on: int | None = None, die_times: int = 0):
        self.log, self.die_on, self.die_times = log, die_on, die_times

    def __call__(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        x = batch["x"]
        with open(self.log, "a") as f:
            f.write(f"{int(x[0])}\n")
        if int(x[0]) == self.die_on and self.deaths_so_far() < self.die_times:
            with open(self.log.with_suffix(".deaths"), "a") as f:
                f.write("died\n")
            os._exit(7)
        if int(x[0]) == -1:
            raise ValueError("a forward that fails on purpose")
        return x * 2

    def deaths_so_far(self) -> int:
        deaths = self.log.with_suffix(".deaths")
        return len(deaths.read_text().splitlines()) if deaths.exists() else 0


def _batches(n: int):
    return ((key, {"x": torch.arange(key * 10, key * 10 + 3)}) for key in range(n))


def test_a_dead_worker_batch_runs_again_once_nothing_lost_or_duplicated(tmp_path):
    log = tmp_path / "calls.log"
    pool = WorkerPool(Doubler(log, die_on=50, die_times=1), 2, threads=1)
    try:
        with pytest.warns(WorkerDiedWarning, match=r"died \(exit code 7\)"):
            results = list(pool.map(_batches(12)))
        keys = [key for key, _ in results]
        assert sorted(keys) == list(range(12))  # every batch once
        for key, out in results:
            assert torch.equal(out, torch.arange(key * 10, key * 10 + 3) * 2)
        calls = [int(line) for line in log.read_text().split()]
        assert calls.count(50) == 2  # the batch that killed its worker ran again, once
        assert sorted(set(calls)) == [k * 10 for k in range(12)]
        assert len(pool.workers) == 2 and all(w.process.is_alive() for w in pool.workers)
    finally:
        pool.close()


def test_a_batch_that_kills_two_workers_raises_and_closes_the_pool(tmp_path):
    pool = WorkerPool(Doubler(tmp_path / "calls.log", die_on=30, die_times=2), 2, threads=1)
    processes = [w.process for w in pool.workers]
    with pytest.warns(WorkerDiedWarning), pytest.raises(WorkerError, match="killed two workers"):
        list(pool.map(_batches(6)))
    assert pool.workers == [] and not any(p.is_alive() for p in processes)


def test_an_exception_in_forward_is_raised_with_the_workers_traceback(tmp_path):
    pool = WorkerPool(Doubler(tmp_path / "calls.log"), 1, threads=1)
    bad = [(0, {"x": torch.tensor([-1, 0])})]
    with pytest.raises(WorkerError, match="(?s)ValueError: a forward that fails on purpose"):
        list(pool.map(bad))
    assert pool.workers == []


TEXTS = [("word " * (1 + (i * 7) % 40)) + f"number {i}" for i in range(40)] + ["a repeated text"] * 3 + ["number 3"]


def test_encoder_with_workers_equals_one_process_and_survives_a_killed_worker(minilm_dir):
    one = ma.SentenceEncoder.from_pretrained(minilm_dir, batch_size=4).encode(TEXTS)
    encoder = ma.SentenceEncoder.from_pretrained(minilm_dir, batch_size=4, workers=2)
    try:
        torch.testing.assert_close(encoder.encode(TEXTS), one, atol=1e-5, rtol=0)
        pids = encoder.engine._pool.pids
        torch.testing.assert_close(encoder.encode(TEXTS[::-1]), one.flip(0), atol=1e-5, rtol=0)
        assert encoder.engine._pool.pids == pids  # the workers stay between calls
        os.kill(pids[0], signal.SIGKILL)  # as the OOM killer would
        with pytest.warns(WorkerDiedWarning, match=f"pid {pids[0]} died"):
            again = encoder.encode(TEXTS, batch_size=3)
        torch.testing.assert_close(again, one, atol=1e-5, rtol=0)
        assert pids[0] not in encoder.engine._pool.pids
    finally:
        encoder.engine.close()


def test_workers_option_is_checked(minilm_dir):
    tokenizer = ma.Tokenizer.from_pretrained(minilm_dir)
    with pytest.raises(ValueError, match="workers must be a positive int, got 0"):
        ma.BatchEngine(tokenizer, workers=0)
    with pytest.raises(ValueError, match="workers > 1 runs CPU processes"):
        ma.BatchEngine(tokenizer, workers=2, device="meta")
    with pytest.raises(ValueError, match="compile and workers > 1 do not mix"):
        ma.AlignScorer(ma.AlignModel(ma.Config(vocab_size=99, hidden_size=8, num_layers=1, num_heads=2,
                                               intermediate_size=8)), tokenizer, compile=True, workers=2)


def test_cli_workers_writes_what_one_process_writes(tmp_path, minilm_dir):
    rows = tmp_path / "texts.jsonl"
    rows.write_text("".join(json.dumps({"id": f"t{i}", "text": t}) + "\n" for i, t in enumerate(TEXTS)))
    outputs = {}
    for workers in (1, 2):
        out = tmp_path / f"out{workers}.jsonl"
        with warnings.catch_warnings():
            warnings.simplefilter("error", WorkerDiedWarning)
            assert main(["embed", "--model", str(minilm_dir), "--input", str(rows), "--output", str(out),
                         "--batch-size", "8", "--workers", str(workers)]) == 0
        outputs[workers] = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in outputs[2]] == [f"t{i}" for i in range(len(TEXTS))]
    torch.testing.assert_close(torch.tensor([r["embedding"] for r in outputs[2]]),
                               torch.tensor([r["embedding"] for r in outputs[1]]), atol=1e-5, rtol=0)


PARENT = """
import sys, time
from pathlib import Path

import torch

from minialign.runtime.process_pool import WorkerPool


class Slow:
    def __init__(self, started):
        self.started = started

    def __call__(self, batch):
        Path(self.started).write_text("busy")
        time.sleep(2)  # the parent is killed meanwhile: the reply meets a broken pipe
        return batch["x"]


if __name__ == "__main__":
    pool = WorkerPool(Slow(sys.argv[1]), 1, threads=1)
    list(pool.map([(0, {"x": torch.zeros(2)})]))
"""


def test_a_worker_whose_parent_was_killed_exits_quietly(tmp_path):
    (tmp_path / "parent.py").write_text(PARENT)
    started = tmp_path / "started"
    parent = subprocess.Popen([sys.executable, str(tmp_path / "parent.py"), str(started)], stderr=subprocess.PIPE,
                              text=True)
    deadline = time.monotonic() + 120
    while not started.exists():
        assert parent.poll() is None and time.monotonic() < deadline, parent.stderr.read()
        time.sleep(0.05)
    os.kill(parent.pid, signal.SIGKILL)
    _, err = parent.communicate(timeout=60)  # the worker holds the same stderr: this waits for it to exit too
    assert parent.returncode == -signal.SIGKILL
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_more_workers_than_cpus_are_warned_of(minilm_dir, tmp_path, monkeypatch, capsys):
    """workers beyond the usable CPUs (threads.usable_threads: affinity and quota) run, with one warning line naming
    the count and what to pick; the command line warns so too."""
    from minialign.runtime import engine
    from minialign.runtime.engine import OversubscribedWarning

    tokenizer = ma.Tokenizer.from_pretrained(minilm_dir)
    monkeypatch.setattr(engine, "usable_threads", lambda: 2)
    with pytest.warns(OversubscribedWarning, match=r"workers=8 on 2 usable CPU\(s\) .* pick workers <= 2"):
        ma.BatchEngine(tokenizer, workers=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ma.BatchEngine(tokenizer, workers=2)
    monkeypatch.setattr(engine, "usable_threads", lambda: 1)
    with pytest.warns(OversubscribedWarning, match=r"workers=2 on 1 usable CPU\(s\)"):  # (one line: cli._warning_line)
        assert main(["embed", "--model", str(minilm_dir), "--text", "a text", "--workers", "2"]) == 0
