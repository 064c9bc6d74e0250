"""How many threads this process may really use, decided once: the CPUs it is allowed to run on and its container's
CPU quota, not the host's core count (which torch's default reads).

  allowed_cpus()       the CPUs of this process's affinity mask (os.sched_getaffinity: taskset, cpusets, a
                       scheduler's pinning), or os.cpu_count() where the platform has no affinity call
  cpu_quota()          the CPU time its cgroup may use per unit of wall time (cgroup v2 `cpu.max`, "200000 100000"
                       -> 2.0; v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`), the tightest along its cgroup's path up
                       to the root; None where there is no quota (a bare machine, "max")
  usable_threads()     min(allowed_cpus, quota rounded up), at least 1: the intra-op threads a forward should use
  others_running()     the runnable threads of other processes right now (/proc/loadavg's running count less this
                       process's running threads): what a busy machine is
  threads_now(most)    the adaptive policy (a runner's default, threads=None): `most` threads, less one for each
                       other runnable thread, at least 1; decided again before each batch
  intra_op_threads(n)  torch's intra-op threads set to n for a block, and set back after (the engine's runs)

Why fewer threads on a busy machine: every operator of a forward is a parallel region whose threads meet at a
barrier; when another process holds one of the cores, the thread that shares it is parked by the scheduler and
the others wait for it at every barrier, thousands of times per batch. One thread fewer than the cores left idle
runs without waiting (measured in BENCHMARKS.md, "Busy machines": on 2 cores beside one busy process, 1 thread was
1.3-1.6x faster than 2), and on a quiet machine the rule keeps every thread.

Pattern: the JVM's and Go's container awareness (cgroup quota as the CPU count; Go's GOMAXPROCS via
uber-go/automaxprocs), and `os.process_cpu_count()` of Python 3.13 (the affinity part). A thread beyond these has
no CPU to run on: every parallel region then waits at its barrier for a thread the scheduler has parked.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

CGROUP_ROOT = Path("/sys/fs/cgroup")


def allowed_cpus() -> int:
    """The CPUs this process may run on (its affinity mask), or every CPU where that cannot be read."""
    if hasattr(os, "sched_getaffinity"):
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except OSError:
            pass
    return max(1, os.cpu_count() or 1)


def cpu_quota(root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")) -> float | None:
    """CPUs' worth of time this process's cgroup may use (the smallest quota on its path to the root), or None."""
    quotas = [q for directory in _cgroup_directories(root, proc_cgroup) if (q := _quota_in(directory)) is not None]
    return min(quotas) if quotas else None


def usable_threads(root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")) -> int:
    """The intra-op threads a forward should use: the allowed CPUs, capped by the cgroup quota rounded up."""
    threads = allowed_cpus()
    quota = cpu_quota(root, proc_cgroup)
    if quota is not None:
        threads = min(threads, max(1, math.ceil(quota - 1e-9)))
    return max(1, threads)


def others_running(loadavg: Path = Path("/proc/loadavg"), tasks: Path = Path("/proc/self/task")) -> int | None:
    """Runnable threads of other processes at this moment: the running count of /proc/loadavg's fourth field
    ("3/412": every CPU's run queue, this process's running threads included) less this process's threads in
    state R (/proc/self/task/*/stat); None where there is no /proc (then the policy keeps every thread)."""
    try:
        running = int(loadavg.read_text().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return None
    own = 0
    for stat in tasks.glob("*/stat"):
        try:
            own += stat.read_text().rsplit(")", 1)[1].split()[0] == "R"  # after "(comm)": the state
        except (OSError, IndexError):
            continue
    return max(0, running - own)


def threads_now(most: int, others: int | None = None) -> int:
    """The adaptive policy: `most` threads less one for each other runnable thread (others_running() unless
    given), at least 1."""
    others = others_running() if others is None else others
    return most if others is None else max(1, most - others)


@contextmanager
def intra_op_threads(threads: int | None) -> Iterator[None]:
    """torch's intra-op threads set to `threads` for the block (None: left as they are), then set back. torch keeps
    the count per calling thread under OpenMP, so a service's model threads each keep their own."""
    before = torch.get_num_threads()
    if threads is None or threads == before:
        yield
        return
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _cgroup_directories(root: Path, proc_cgroup: Path) -> list[Path]:
    """The cgroup directories whose limits apply to this process, its own first, up to the mount's root."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return [root] if root.is_dir() else []
    found = []
    for line in lines:  # "0::/user.slice/..." (v2); "4:cpu,cpuacct:/docker/..." (v1)
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers and "cpu" not in controllers.split(","):
            continue
        bases = [root] if not controllers else [root / name for name in ("cpu,cpuacct", "cpu", "cpuacct,cpu")]
        for base in bases:
            if not base.is_dir():
                continue
            directory = base / path.lstrip("/")
            while True:  # a container sees its own cgroup as the root when the namespace hides the rest
                if directory.is_dir():
                    found.append(directory)
                if directory == base:
                    break
                directory = directory.parent
    return list(dict.fromkeys(found)) or ([root] if root.is_dir() else [])


def _quota_in(directory: Path) -> float | None:
    """The quota one cgroup directory sets, in CPUs, or None: v2 `cpu.max` ("max 100000": none), v1
    `cpu.cfs_quota_us` (-1: none) over `cpu.cfs_period_us`."""
    try:
        text = (directory / "cpu.max").read_text().split()
        if len(text) == 2 and text[0] != "max":
            quota, period = int(text[0]), int(text[1])
            return quota / period if quota > 0 and period > 0 else None
        return None
    except (OSError, ValueError):
        pass
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text())
        period = int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None
