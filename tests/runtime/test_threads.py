"""runtime.threads: the threads a process may use, from its affinity and its cgroup's CPU quota (fake cgroup trees
of both versions here), never the host's core count alone."""

import contextlib
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


def test_intra_op_threads_sets_and_restores():
    import torch

    before = torch.get_num_threads()
    with threads.intra_op_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with threads.intra_op_threads(None):
        assert torch.get_num_threads() == before


def test_a_runner_runs_its_forwards_on_its_threads_and_leaves_the_process_as_it_was(minilm_dir):
    """threads= on every runner (products/runner.Loading): the forwards run on that many intra-op threads, the
    process's own count is back after the call; the default is usable_threads(), not the host's core count;
    workers take threads // workers each (what a worker's engine carries)."""
    import pickle

    import torch

    import minialign as ma

    before = torch.get_num_threads()
    encoder = ma.SentenceEncoder.from_pretrained(minilm_dir, threads=1)
    seen = []
    forward = encoder.model.forward
    encoder.model.forward = lambda *a, **k: (seen.append(torch.get_num_threads()), forward(*a, **k))[1]
    one = encoder.encode(["a text", "another text, longer than the first"])
    assert seen and set(seen) == {1} and torch.get_num_threads() == before
    assert ma.SentenceEncoder.from_pretrained(minilm_dir).engine.threads == threads.usable_threads()
    engine = ma.BatchEngine(encoder.tokenizer, workers=2, threads=5)
    assert pickle.loads(pickle.dumps(engine)).threads == 2 and pickle.loads(pickle.dumps(engine)).workers == 1
    with pytest.raises(ValueError, match="threads must be a positive int, got 0"):
        ma.BatchEngine(encoder.tokenizer, threads=0)
    two = ma.SentenceEncoder.from_pretrained(minilm_dir, threads=2).encode(["a text", "another text, longer than the first"])
    assert abs(one - two).max() <= 1e-5


def test_cli_threads_flag_reaches_the_runner(minilm_dir, tmp_path, monkeypatch):
    import json

    from minialign.apps.cli import main as cli
    from minialign.runtime import engine

    made = []
    real = engine.BatchEngine.__init__

    def spy(self, *args, **kwargs):
        real(self, *args, **kwargs)
        made.append(self.threads)

    monkeypatch.setattr(engine.BatchEngine, "__init__", spy)
    (tmp_path / "in.jsonl").write_text(json.dumps({"id": "a", "text": "one text"}) + "\n")
    assert cli(["embed", "--model", str(minilm_dir), "--input", str(tmp_path / "in.jsonl"),
                "--output", str(tmp_path / "out.jsonl"), "--threads", "1"]) == 0
    assert made == [1] and len((tmp_path / "out.jsonl").read_text().splitlines()) == 1


def test_others_running_is_the_run_queue_less_this_process(tmp_path):
    (tmp_path / "loadavg").write_text("1.50 1.20 0.90 4/412 12345\n")
    tasks = tmp_path / "task"
    for tid, state in ((1, "R"), (2, "S"), (3, "R")):
        (tasks / str(tid)).mkdir(parents=True)
        (tasks / str(tid) / "stat").write_text(f"{tid} (python (worker)) {state} 1 2 3\n")  # ")" in the name
    assert threads.others_running(tmp_path / "loadavg", tasks) == 2
    assert threads.others_running(tmp_path / "missing", tasks) is None
    assert [threads.threads_now(2, others) for others in (0, 1, 2, 5)] == [2, 1, 1, 1]
    assert threads.threads_now(8, 3) == 5 and threads.threads_now(4, None) in range(1, 5)


def test_the_default_policy_decides_before_each_batch(minilm_dir, monkeypatch):
    """threads=None: each batch runs on threads_now(usable) threads, read again before each batch; a fixed count
    never asks."""
    import torch

    import minialign as ma
    from minialign.runtime import engine as engine_module

    answers = iter([1, 2, 1])
    monkeypatch.setattr(engine_module, "threads_now", lambda most: next(answers))
    encoder = ma.SentenceEncoder.from_pretrained(minilm_dir, batch_size=1)
    seen = []
    forward = encoder.model.forward
    encoder.model.forward = lambda *a, **k: (seen.append(torch.get_num_threads()), forward(*a, **k))[1]
    encoder.encode(["one", "two words", "three words here"])
    assert seen == [1, 2, 1]
    fixed = ma.SentenceEncoder.from_pretrained(minilm_dir, threads=1, batch_size=1)
    monkeypatch.setattr(engine_module, "threads_now", lambda most: pytest.fail("a fixed count asked the policy"))
    fixed.encode(["one", "two words"])


def test_int8_calibration_on_loading_follows_the_default_policy(minilm_dir, monkeypatch):
    """dtype="int8"'s calibration pass on loading runs on threads_now before each batch, as every call does (it ran
    a worker's fixed share, every thread, beside a busy process: 2.1-2.5 s for MiniLM's first load there, 1.5-1.6 s
    on the policy's one thread); a worker's copy of the engine keeps its fixed share."""
    import pickle

    import torch

    import minialign as ma
    from minialign.nn import int8
    from minialign.runtime import engine as engine_module

    if not int8.available():
        pytest.skip(int8.unavailable_reason())
    monkeypatch.setenv("MINIALIGN_CACHE_DIR", "none")
    asked, seen = [], []
    monkeypatch.setattr(engine_module, "threads_now", lambda most: asked.append(most) or 1)
    observe = int8.calibrating

    def recording(model):  # the threads each calibration forward ran on
        hook = model.register_forward_pre_hook(lambda *_: seen.append(torch.get_num_threads()))
        try:
            with observe(model):
                yield
        finally:
            hook.remove()

    monkeypatch.setattr(int8, "calibrating", contextlib.contextmanager(recording))
    encoder = ma.SentenceEncoder.from_pretrained(minilm_dir, dtype="int8", threads=None)
    assert seen and set(seen) == {1} and len(asked) >= len(seen)
    local = encoder.engine.in_this_process()
    assert local.adaptive and local.threads == encoder.engine.threads and local.workers == 1
    assert not pickle.loads(pickle.dumps(encoder.engine)).adaptive  # what a worker process gets
