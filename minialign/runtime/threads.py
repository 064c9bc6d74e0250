"""How many threads this process may really use, decided once: the CPUs it is allowed to run on and its container's
CPU quota, not the host's core count (which torch's default reads).

  allowed_cpus()       the CPUs of this process's affinity mask (os.sched_getaffinity: taskset, cpusets, a
                       scheduler's pinning), or os.cpu_count() where the platform has no affinity call
  cpu_quota()          the CPU time its cgroup may use per unit of wall time (cgroup v2 `cpu.max`, "200000 100000"
                       -> 2.0; v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`), the tightest along its cgroup's path up
                       to the root; None where there is no quota (a bare machine, "max")
  usable_threads()     min(allowed_cpus, quota rounded up), at least 1: the intra-op threads a forward should use

Pattern: the JVM's and Go's container awareness (cgroup quota as the CPU count; Go's GOMAXPROCS via
uber-go/automaxprocs), and `os.process_cpu_count()` of Python 3.13 (the affinity part). A thread beyond these has
no CPU to run on: every parallel region then waits at its barrier for a thread the scheduler has parked.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

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
