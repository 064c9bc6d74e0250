"""The machine a run measures, and the timer of the CPU report's sections (best of interleaved rounds; the GPU
suite's method is timing.py's)."""

from __future__ import annotations

import multiprocessing
import os
import platform
import time

import torch

from minialign.nn import linear
from minialign.loading import cpu_has_native


def machine() -> dict[str, str]:
    """What the figures hold for: CPU model and features, cores, threads, library versions, the GPU,
    and the Linear kernel minialign runs on this kind of CPU."""
    cpu = platform.processor() or "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        flags = next((line for line in open("/proc/cpuinfo") if line.startswith("flags")), "")
        isa = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16") if f" {f}" in flags]
    except OSError:
        isa = []
    info = {"cpu": cpu, "cores": str(os.cpu_count()), "torch threads": str(torch.get_num_threads()),
            "cpu features": " ".join(isa) or "unknown", "torch": torch.__version__, "python": platform.python_version()}
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    info["gpu"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    if torch.cuda.is_available():
        info["cuda"] = f"{torch.version.cuda} (torch's build), driver {nvidia_driver()}"
    info["kernel kind"] = (f"{linear.cpu_kind()}, {linear.cpu_vendor()} (minialign's fp32 Linear: "
                           + ("oneDNN packed at every shape" if linear.packs_fp32() else "F.linear")
                           + f"; bf16 packed: {linear.onednn_has(torch.bfloat16)})")
    return info


def nvidia_driver() -> str:
    """The NVIDIA driver's version as nvidia-smi reports it, or "unknown"."""
    import subprocess

    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20, check=True).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


VENDORS = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}


def cpu_kind_label() -> str:
    """The CPU kind a run's figures hold for: its section of BENCHMARKS.md. The vendor is part of it: the same
    instruction set ran fp32 matmuls 2.3x apart on an AMD EPYC and an Intel Xeon of this project, and the Linear
    fastest kernel differs by vendor (BENCHMARKS.md, each section's Linear kernels table)."""
    native = cpu_has_native(torch.bfloat16, unknown=False)
    kind = {"AVX512": "AVX-512" + (" with native bf16" if native else "")}.get(linear.cpu_kind(), linear.cpu_kind())
    vendor = linear.cpu_vendor()
    return f"{kind}, {VENDORS.get(vendor, vendor)}" if vendor else kind


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def interleaved(calls: dict, *, rounds: int, warm_up: dict | None = None,
                outputs: dict | None = None, times: dict | None = None) -> dict[str, float]:
    """Best seconds of each call over `rounds` rounds, every call once per round, the order reversed
    every other round: the machine's drift hits all implementations alike (a shared VM varies by
    10-20%). First each call of `warm_up` runs once (default: each of `calls`; {}: none). `outputs`,
    when given, gets each call's last result; `times`, each call's seconds in every round (a list)."""
    for call in (calls if warm_up is None else warm_up).values():
        call()
    best = {label: float("inf") for label in calls}
    for r in range(rounds):
        for label, call in list(calls.items())[::1 if r % 2 == 0 else -1]:  # alternate the order: no seat is favoured
            sync()
            start = time.perf_counter()
            result = call()
            sync()
            seconds = time.perf_counter() - start
            best[label] = min(best[label], seconds)
            if times is not None:
                times.setdefault(label, []).append(seconds)
            if outputs is not None:
                outputs[label] = result
    return best


def _spin(deadline: float) -> None:
    while time.monotonic() < deadline:
        pass


def busy(count: int, seconds: float) -> list[multiprocessing.Process]:
    """`count` processes spinning until their deadline (bounded however the run ends): a busy machine's state for
    timings beside other work (bench_busy.py; the internals section)."""
    deadline = time.monotonic() + seconds
    procs = [multiprocessing.get_context("spawn").Process(target=_spin, args=(deadline,), daemon=True)
             for _ in range(count)]
    for p in procs:
        p.start()
    return procs
