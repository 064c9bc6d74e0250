"""What one call does besides its result, for the GPU suite's rows: the host syncs it makes, the kernels it launches,
the frames torch.compile compiles during it, the attention backend it ran on. Each works on a CPU too (the dry run,
the tests): a sync is counted by op whatever the device (on a CPU it costs nothing, and the count is the one the
same call makes on a GPU), kernels become aten ops.

    syncs(call).total                # host syncs: runtime/syncs.py's count (the one list of syncing ops)
    kernels(call, device)            # CUDA kernels (torch.profiler); on a CPU the aten ops called from Python
    per_call(call, device)           # both, as a row's figures
    with compiles() as count: ...    # count.frames: frames torch._dynamo compiled inside (a recompile after warm-up)
    backend_of(call, "varlen")       # (result, the attention backend the forward ran on)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

from minialign.runtime.syncs import SyncCount, count_syncs


def syncs(call: Callable) -> SyncCount:
    """The host syncs of one call, by op: aten._local_scalar_dense (.item(), bool(t)), nonzero, repeat_interleave
    without output_size, is_nonzero, masked_select, unique*, boolean-mask indexing, copies to the host, .tolist()
    (minialign.runtime.syncs.count_syncs holds the list)."""
    with count_syncs() as count:
        call()
    return count


def kernels(call: Callable, device: str = "cpu") -> int:
    """Kernels one call launches on a CUDA device (the profiler's device-side activities, memory copies and sets
    left out); on a CPU the aten ops it calls from Python (those without an aten op above them)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.device(device).type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        call()
        if cuda:
            torch.cuda.synchronize()
    events = prof.events()
    if cuda:
        device_side = [e for e in events if e.device_type == DeviceType.CUDA]
        if not device_side:  # a profiler that lists them under the CPU ops that launched them instead
            device_side = [k for e in events for k in e.kernels]
        return sum(1 for e in device_side if not e.name.lower().startswith(("memcpy", "memset")))
    return sum(1 for e in events if e.name.startswith("aten::") and not _under_aten(e))


def _under_aten(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return True
        parent = parent.cpu_parent
    return False


def per_call(call: Callable, device: str = "cpu", *, compiles: bool = False, echo=print) -> dict:
    """A row's syncs and kernels for one more call (data.FIGURES), each left out where it cannot be taken (said on
    `echo`): syncs not for a call that compiles (counting runs it under a dispatch mode, for which torch.compile
    may compile the model again: tens of seconds on a GPU, and no longer the timed graph)."""
    found = {}
    counts = {"syncs": lambda: None if compiles else syncs(call).total, "kernels": lambda: kernels(call, device)}
    for key, count in counts.items():
        try:
            found[key] = count()
        except Exception as error:  # a figure missing, never the stage's rows
            echo(f"{key} not counted: {type(error).__name__}: {error}")
    return found


def frames_compiled() -> int:
    """Frames torch._dynamo has compiled in this process so far (its counters; a recompile counts as one more)."""
    from torch._dynamo.utils import counters

    return counters["frames"]["total"]


class compiles:
    """Counts the frames torch.compile compiles inside the block: `with compiles() as count: ...; count.frames`.
    After a warm-up that met every shape, a steady run compiles none (a recompile is a guard that failed)."""

    frames = 0

    def __enter__(self) -> compiles:
        self._before = frames_compiled()
        return self

    def __exit__(self, *exc) -> None:
        self.frames = frames_compiled() - self._before


def counted(call: Callable, into: dict, label: str) -> Callable:
    """`call`, adding the frames compiled during each of its runs to into[label]: per impl, in interleaved reps."""
    def run():
        with compiles() as count:
            result = call()
        into[label] = into.get(label, 0) + count.frames
        return result

    return run


def backend_of(call: Callable, requested: str):
    """(call's result, the attention backend its forwards ran on, as "name" or "a, b" when they differ): what
    attention.py's rule chose (a row may refuse a forward: BackendFallbackWarning), read by watching the Encoder's
    prepare_mask for the one call. Not for a compiled call (its graph would hold the watcher); `requested` where
    the call made no Encoder forward."""
    from minialign.models import encoder

    real, chosen = encoder.prepare_mask, []

    def watched(backend, inputs):
        prepared = real(backend, inputs)
        chosen.append(prepared.backend.name)
        return prepared

    encoder.prepare_mask = watched
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the fallback's warning: the name chosen says it
            result = call()
    finally:
        encoder.prepare_mask = real
    return result, ", ".join(dict.fromkeys(chosen)) or requested
