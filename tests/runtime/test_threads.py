"""runtime.threads: the threads a process may use, from its affinity and its cgroup's CPU quota (fake cgroup trees
of both versions here), never the host's core count alone."""

import os

import pytest

from minialign.runtime import threads


def _v2(tmp_path, path, cpu_max):
    directory = tmp_path / "cg" / path.lstrip("/")
    directory.mkdir(parents=True, exist_ok=True)
    if cpu_max is not None:
        (directory / "cpu.max").write_text(cpu_max + "\n")
    return directory


def _proc(tmp_path, text):
    proc = tmp_path / "proc-cgroup"
    proc.write_text(text)
    return proc


def test_v2_quota_is_the_tightest_on_the_path(tmp_path):
    _v2(tmp_path, "/", "max 100000")
    _v2(tmp_path, "/kubepods", "350000 100000")  # 3.5 CPUs
    _v2(tmp_path, "/kubepods/pod1", "150000 100000")  # 1.5 CPUs: the tightest
    _v2(tmp_path, "/kubepods/pod1/app", "max 100000")
    proc = _proc(tmp_path, "0::/kubepods/pod1/app\n")
    assert threads.cpu_quota(tmp_path / "cg", proc) == pytest.approx(1.5)


def test_no_quota_and_unreadable_files_mean_none(tmp_path):
    _v2(tmp_path, "/", "max 100000")
    _v2(tmp_path, "/user.slice", None)
    assert threads.cpu_quota(tmp_path / "cg", _proc(tmp_path, "0::/user.slice\n")) is None
    (tmp_path / "cg" / "user.slice" / "cpu.max").write_text("garbage")
    assert threads.cpu_quota(tmp_path / "cg", _proc(tmp_path, "0::/user.slice\n")) is None
    assert threads.cpu_quota(tmp_path / "missing", tmp_path / "no-proc-file") is None


def test_v1_quota(tmp_path):
    directory = tmp_path / "cg" / "cpu,cpuacct" / "docker" / "abc"
    directory.mkdir(parents=True)
    (directory / "cpu.cfs_quota_us").write_text("200000\n")
    (directory / "cpu.cfs_period_us").write_text("100000\n")
    (tmp_path / "cg" / "cpu,cpuacct" / "cpu.cfs_quota_us").write_text("-1\n")
    (tmp_path / "cg" / "cpu,cpuacct" / "cpu.cfs_period_us").write_text("100000\n")
    proc = _proc(tmp_path, "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n")
    assert threads.cpu_quota(tmp_path / "cg", proc) == pytest.approx(2.0)


def test_usable_threads_caps_the_allowed_cpus_by_the_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    proc = _proc(tmp_path, "0::/pod\n")
    _v2(tmp_path, "/", "max 100000")
    _v2(tmp_path, "/pod", "250000 100000")  # 2.5 CPUs: 3 threads, each with a CPU most of the time
    assert threads.allowed_cpus() == 8
    assert threads.usable_threads(tmp_path / "cg", proc) == 3
    _v2(tmp_path, "/pod", "50000 100000")  # half a CPU: still one thread
    assert threads.usable_threads(tmp_path / "cg", proc) == 1
    _v2(tmp_path, "/pod", "max 100000")
    assert threads.usable_threads(tmp_path / "cg", proc) == 8
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)  # taskset -c 3
    assert threads.usable_threads(tmp_path / "cg", proc) == 1


def test_on_this_machine_it_is_at_most_the_affinity():
    assert 1 <= threads.usable_threads() <= threads.allowed_cpus() <= (os.cpu_count() or 1)
