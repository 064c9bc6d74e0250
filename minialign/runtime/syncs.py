"""Counting the operations of a forward that make the host wait for the device (a "host sync").

    with count_syncs() as syncs:
        model(**batch)
    syncs.total, syncs.by_op   # e.g. 0, {} on a packed forward given the host's facts (nn/layout.py HostBatch)

A host sync drains the GPU's queue: the host stops enqueueing kernels until every one before it has run, so host
and device take turns instead of overlapping, and a CUDA graph cannot be captured across it. The operations that
need one are those whose result the host must read (a tensor's value as a Python number: `.item()`, `.tolist()`,
`bool(t)`, each through aten's `_local_scalar_dense`), or whose output size depends on the values (`nonzero`,
boolean-mask indexing, `masked_select`, `unique`, `repeat_interleave` without `output_size`), or a copy from the
device to the host, or a blocking one from the host to the device (torch's Copy.cu: memcpy_and_sync). They are
counted by op, on any device, at the dispatcher (a TorchDispatchMode sees each aten op a forward runs): on the CPU,
where a "sync" costs nothing, the count is still the number the same forward makes on a GPU, which is how a test
without a GPU checks that a path makes none (pattern: torch's `torch.cuda.set_sync_debug_mode`, which warns on the
syncs of CUDA ops only). One kind it sees only where a GPU is: a copy from the host to the device
(`torch.tensor(data, device=...)`, `.to(device)` from memory that is not pinned), which on a CPU is no copy at all;
code that may run on a GPU builds such tensors on the host and copies them through pinned memory, asynchronously
(nn/layout.py host_tensor). Compiled code (torch.compile, flex attention) does not run under the counter.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

# ops whose every call needs the host to read a value or an output size from the device; composite ones too
# (item, is_nonzero, nonzero_numpy, argwhere, allclose), which the dispatcher shows as themselves under
# inference_mode and as the op they call (_local_scalar_dense, nonzero) otherwise
ALWAYS = frozenset({aten._local_scalar_dense.default, aten.item.default, aten.is_nonzero.default,
                    aten.nonzero.default, aten.nonzero_numpy.default, aten.argwhere.default,
                    aten.masked_select.default, aten.equal.default, aten.allclose.default, aten._unique2.default,
                    aten.unique_dim.default, aten.unique_consecutive.default})


def _is_sync(func, args, kwargs) -> bool:
    if func in ALWAYS:
        return True
    packet = func.overloadpacket
    if packet is aten.repeat_interleave:  # the output's size is the sum of the repeats, unless given
        return func is not aten.repeat_interleave.self_int and kwargs.get("output_size") is None
    if packet in (aten.index, aten.index_put, aten.index_put_):  # a boolean mask among the indices: nonzero inside
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        return any(isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8) for t in indices or ())
    if packet in (aten._to_copy, aten.copy_):  # a copy from an accelerator to the host
        source = args[1] if packet is aten.copy_ else args[0]
        target = args[0].device if packet is aten.copy_ else kwargs.get("device") or source.device
        return (isinstance(source, torch.Tensor) and source.device.type not in ("cpu", "meta")
                and torch.device(target).type == "cpu")
    return False


@dataclass
class SyncCount:
    """What `count_syncs` saw: each syncing op's calls (`by_op`, keyed by the aten op's name) and their total."""

    by_op: Counter = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(self.by_op.values())


class _Counting(TorchDispatchMode):
    supports_higher_order_operators = True  # flex_attention's compiled kernel: run as it is, its inside not counted

    def __init__(self, count: SyncCount):
        super().__init__()
        self.count = count

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):
            return func(*args, **kwargs)
        if _is_sync(func, args, kwargs):
            self.count.by_op[str(func.overloadpacket.__name__)] += 1
        return func(*args, **kwargs)


class count_syncs:
    """A context manager counting the host syncs of the aten ops run inside it (module docstring); it yields a
    SyncCount filled as they run. `Tensor.tolist` is counted apart ("tolist"): on a CPU tensor it reads the memory
    without an aten op, on a GPU one it is a copy to the host."""

    def __enter__(self) -> SyncCount:
        self.count = SyncCount()
        self._mode = _Counting(self.count)
        self._tolist = torch.Tensor.tolist
        count, tolist = self.count, self._tolist

        def counted_tolist(t):
            count.by_op["tolist"] += 1
            with torch.utils._python_dispatch._disable_current_modes():  # its own copy is this one sync
                return tolist(t)

        torch.Tensor.tolist = counted_tolist
        self._mode.__enter__()
        return self.count

    def __exit__(self, *exc) -> None:
        self._mode.__exit__(*exc)
        torch.Tensor.tolist = self._tolist
