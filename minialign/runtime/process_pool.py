"""Model processes for many-core CPUs: N workers with cores/N threads each.

The matmuls of one batch scale poorly over many threads; N processes with fewer threads each run N
batches at once. The parent tokenizes, batches and merges in input order (batching.BatchEngine); a
worker only runs `forward` on a batch's tensors. The forward (a runner's bound method, with its model)
goes to each worker once when it starts, its weights in shared memory (torch.multiprocessing), not
copied. Batches and results travel as torch.save bytes, read back with weights_only=True.

A worker whose parent died (killed, even by SIGKILL) exits quietly when its pipe closes or breaks.
A worker that dies (killed, out of memory) is reported with a WorkerDiedWarning and the batches it
held are sent again, once, to a new worker; a batch that kills a second worker raises WorkerError.
Results are keyed by batch, so nothing is lost or duplicated. An exception inside `forward` is not
retried: it raises WorkerError with the worker's traceback.

Workers are started with "spawn": a script that uses workers > 1 needs the usual
`if __name__ == "__main__":` guard.
"""

from __future__ import annotations

import io
import itertools
import pickle
import signal
import traceback
import warnings
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import wait

import torch
import torch.multiprocessing as mp  # registers the reductions that put tensors in shared memory
from torch import Tensor

from minialign.runtime.memory import release_free_memory

IN_FLIGHT = 2  # batches sent ahead to each worker, so it never waits for the parent


class WorkerDiedWarning(UserWarning):
    """A model process died; its batches were sent again to a new one."""


class WorkerError(RuntimeError):
    """A batch could not be run by the workers."""


def threads_per_worker(workers: int) -> int:
    """This process's intra-op threads (by default the machine's cores) shared out among the workers."""
    return max(1, torch.get_num_threads() // workers)


def _dump(message: dict) -> bytes:
    buffer = io.BytesIO()
    torch.save(message, buffer)
    return buffer.getvalue()


def _load(data: bytes) -> dict:
    return torch.load(io.BytesIO(data), weights_only=True)


def _worker_main(forward: Callable[[dict[str, Tensor]], Tensor], conn, threads: int) -> None:
    """Serve batches until the pipe to the parent closes or breaks: the parent closed the pool, or died
    (even by SIGKILL); then exit quietly, with nothing on stderr. Ctrl-C is the parent's to handle: it
    closes the pool, and a worker that also raised KeyboardInterrupt would only print a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(threads)
    while True:
        try:
            message = _load(conn.recv_bytes())
        except (EOFError, OSError):  # OSError: ConnectionResetError and the like, a pipe broken mid-read
            return
        try:
            with torch.inference_mode():
                out = forward(message["batch"])  # a tensor, or a list of one per sequence (ragged rows)
                reply = {"task": message["task"], "out": [t.cpu() for t in out] if isinstance(out, list) else out.cpu()}
        except Exception:
            reply = {"task": message["task"], "error": traceback.format_exc()}
        try:
            conn.send_bytes(_dump(reply))
        except OSError:  # BrokenPipeError: the parent is gone, and its result with it
            return
        del message, reply
        release_free_memory()  # a worker lives as long as its pool: bounded like the parent (memory.py)


@dataclass
class _Worker:
    process: mp.Process
    conn: object  # the parent's end of the pipe
    tasks: list[int] = field(default_factory=list)  # task ids sent and not yet answered, oldest first
    answered: int = 0


@dataclass
class _Task:
    key: Hashable
    data: bytes
    deaths: int = 0


class WorkerPool:
    def __init__(self, forward: Callable[[dict[str, Tensor]], Tensor], workers: int, *, threads: int | None = None):
        """`forward` must pickle (a bound method of a runner does); threads: each worker's intra-op threads
        (default: this process's threads divided among the workers)."""
        self.forward = forward
        self.threads = threads or threads_per_worker(workers)
        self._context = mp.get_context("spawn")
        self.workers = [self._start() for _ in range(workers)]

    def _start(self) -> _Worker:
        parent, child = self._context.Pipe()
        process = self._context.Process(target=_worker_main, args=(self.forward, child, self.threads), daemon=True,
                                        name="minialign-worker")
        try:
            process.start()
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            raise WorkerError(f"the model's forward cannot be sent to a worker process ({e}); workers > 1 needs "
                              f"a runner that pickles") from e
        finally:
            child.close()
        return _Worker(process, parent)

    @property
    def pids(self) -> list[int]:
        return [w.process.pid for w in self.workers]

    def map(self, batches: Iterable[tuple[Hashable, dict[str, Tensor]]]) -> Iterator[tuple[Hashable, Tensor]]:
        """(key, forward(batch)) for every (key, batch), in the order they finish. Batches are read
        lazily: at most IN_FLIGHT per worker are held. On any error the pool is closed."""
        source = iter(batches)
        tasks: dict[int, _Task] = {}  # sent and not yet answered
        counter = itertools.count()
        done = False
        try:
            while True:
                for worker in self.workers:
                    while len(worker.tasks) < IN_FLIGHT:
                        item = next(source, None)
                        if item is None:
                            break
                        key, batch = item
                        task_id = next(counter)
                        tasks[task_id] = _Task(key, _dump({"task": task_id, "batch": batch}))
                        self._send(worker, task_id, tasks[task_id])
                if not tasks:
                    done = True
                    return
                for conn in wait([w.conn for w in self.workers]):
                    worker = next(w for w in self.workers if w.conn is conn)
                    try:
                        reply = _load(conn.recv_bytes())
                    except (EOFError, ConnectionError):
                        self._replace(worker, tasks)
                        continue
                    task = tasks.pop(reply["task"])
                    worker.tasks.remove(reply["task"])
                    worker.answered += 1
                    if "error" in reply:
                        raise WorkerError(f"forward failed in worker pid {worker.process.pid}:\n{reply['error']}")
                    yield task.key, reply["out"]
        finally:
            if not done:
                self.close()

    def _send(self, worker: _Worker, task_id: int, task: _Task) -> None:
        worker.tasks.append(task_id)
        try:
            worker.conn.send_bytes(task.data)
        except (BrokenPipeError, ConnectionError):
            pass  # the worker is dead: its EOF is read next, and this task is sent again with the others

    def _replace(self, dead: _Worker, tasks: dict[int, _Task]) -> None:
        """Report a dead worker, start another in its place and give it the dead one's batches."""
        dead.process.join(timeout=5)
        dead.conn.close()
        if dead.answered == 0 and dead.process.exitcode == 1:  # Python failed before serving: a restart fails alike
            raise WorkerError("a worker process failed to start (its traceback is on stderr above); workers "
                              "are spawned, so the main script must be importable and guarded by "
                              "`if __name__ == \"__main__\":`")
        held = [tasks[t] for t in dead.tasks]
        for task in held:
            task.deaths += 1
            if task.deaths > 1:
                raise WorkerError(f"batch {task.key!r} killed two workers (last exit code {dead.process.exitcode}); "
                                  f"giving up")
        warnings.warn(f"model worker pid {dead.process.pid} died (exit code {dead.process.exitcode}) holding "
                      f"{len(held)} batch(es); running them again in a new worker", WorkerDiedWarning, stacklevel=3)
        fresh = self._start()
        self.workers[self.workers.index(dead)] = fresh
        for task_id in dead.tasks:
            self._send(fresh, task_id, tasks[task_id])

    def close(self) -> None:
        """Stop every worker (they exit when their pipe closes; stragglers are terminated)."""
        for worker in self.workers:
            worker.conn.close()
        for worker in self.workers:
            worker.process.join(timeout=5)
            if worker.process.is_alive():
                worker.process.terminate()
                worker.process.join()
        self.workers = []

