"""Variable-length attention: the varlen backend's row (`run`, `prepare`, `refuses`; attention.py's BACKENDS
declares what it can do) over flash attention's entry point for packed sequences.

A packed row (layout.py: the batch's real tokens end to end, (1, T, C)) is attended in ONE kernel call per layer:
the kernel reads the sequence boundaries from `cu_seqlens` (B + 1 cumulative lengths, int32), so no token sees
another sequence, no padding is computed, and no per-length-bucket calls are made (what eager and sdpa do with a
packed row: layout.Bucket). Queries, keys and values are the (T, H, D) views of the fused projection's output
(SelfAttention's qkv split, heads as views): nothing is copied. The first-token layer (queries="first") is one
query per sequence: cu_seqlens_q = 0, 1, ..., B. A local layer's window (ModernBERT) is the kernel's own
window_size (left, right); a causal model's kind (keys j <= i, within each sequence) is its right window of 0
(flash attention's causal, the queries aligned with the keys: one query per key here). (Dao, "FlashAttention-2",
2023, `flash_attn_varlen_func`; flash-attention's `bert_padding.py` for the packing;
torch.nn.attention.varlen.varlen_attn and aten._flash_attention_forward, the same kernel in torch.)

The kernel is torch's, and only where torch has it: CUDA, fp16 / bf16 (`kernel`; heads of at most 256, which
every family here has). Where it
is not, or a forward needs what the kernel cannot add (a relative-position bias, a custom or 3-D / 4-D mask, a
padded layout), the row `refuses` that forward, and attention.py's rule runs it on sdpa instead, saying why once
(attention.BackendFallbackWarning).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from minialign.nn.inputs import AttentionInputs

DTYPES = (torch.float16, torch.bfloat16)  # what flash attention computes in


@dataclass(frozen=True)
class VarlenMask:
    """What the varlen row's `run` reads: cumulative lengths of the queries and of the keys ((B + 1,) int32, on the
    device), the longest of each (Python ints: the kernel's grid), a local layer's window (None: every key), and
    whether it is causal (keys j <= i only)."""

    cu_q: Tensor
    cu_k: Tensor
    max_q: int
    max_k: int
    window: int | None = None
    causal: bool = False


# -- the kernel -----------------------------------------------------------------------------------------

def flash_varlen(q: Tensor, k: Tensor, v: Tensor, mask: VarlenMask, scale: float) -> Tensor:
    """torch's flash attention over packed sequences: q (Tq, H, D), k, v (Tk, H, D) -> (Tq, H, D). Through
    torch.nn.attention.varlen.varlen_attn where this torch has it with a window argument, else aten's
    _flash_attention_forward with the cumulative lengths (the function varlen_attn wraps)."""
    left = right = -1 if mask.window is None else mask.window
    if mask.causal:
        right = 0  # flash attention's causal: window_size (left, 0)
    entry = _varlen_attn()
    if entry is not None:
        return entry(q, k, v, mask.cu_q, mask.cu_k, mask.max_q, mask.max_k, scale=scale, window_size=(left, right))
    return torch.ops.aten._flash_attention_forward(
        q, k, v, mask.cu_q, mask.cu_k, mask.max_q, mask.max_k, 0.0, False, False, scale=scale,
        window_size_left=left, window_size_right=right)[0]


@functools.cache
def _varlen_attn() -> Callable | None:
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:  # torch before the public entry point
        return None
    return varlen_attn if "window_size" in inspect.signature(varlen_attn).parameters else None


def per_document(q: Tensor, k: Tensor, v: Tensor, mask: VarlenMask, scale: float) -> Tensor:
    """The same call as `flash_varlen`, computed one sequence at a time by sdpa (with the window as a boolean
    mask): the reference the kernel's wiring is tested against on a machine without it."""
    out = q.new_empty(q.shape)
    cu_q, cu_k = mask.cu_q.tolist(), mask.cu_k.tolist()
    for b in range(len(cu_q) - 1):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        keep = None
        # a query's position in its sequence: the first token's when there is one query per sequence
        rows = torch.arange(qs.stop - qs.start, device=q.device)
        cols = torch.arange(ks.stop - ks.start, device=q.device)
        if mask.window is not None:
            keep = (rows[:, None] - cols[None, :]).abs() <= mask.window
        if mask.causal:
            before = cols[None, :] <= rows[:, None]
            keep = before if keep is None else keep & before
        heads = lambda t, s: t[s].transpose(0, 1)  # noqa: E731  (H, n, D)
        y = F.scaled_dot_product_attention(heads(q, qs), heads(k, ks), heads(v, ks), attn_mask=keep, scale=scale)
        out[qs] = y.transpose(0, 1)
    return out


def kernel(device: torch.device, dtype: torch.dtype) -> Callable | None:
    """The variable-length kernel for this device and dtype, or None where torch has none: flash attention needs
    fp16 / bf16, a torch built with it, and an Ampere GPU or newer (flash_api.cpp: "FlashAttention only supports
    Ampere GPUs or newer")."""
    if device.type == "cuda" and dtype in DTYPES and _flash_on(device.index):
        return flash_varlen
    return None


@functools.cache
def _flash_on(index: int | None) -> bool:
    if not torch.backends.cuda.is_flash_attention_available():
        return False
    return torch.cuda.get_device_capability(index) >= (8, 0)


def runs_on(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the row has a kernel for a model on `device` whose states are in `dtype` (attention.Backend.runs_on)."""
    return kernel(device, dtype) is not None


# -- the backend's row: run, prepare and refuses, with the signatures of attention.py's Backend ----------

def refuses(inputs: AttentionInputs) -> str | None:
    """Why the varlen row cannot run this forward (None: it can)."""
    device = torch.device(inputs.device) if inputs.device is not None else torch.device("cpu")
    if kernel(device, inputs.dtype) is None:
        return (f"no variable-length attention kernel for {inputs.dtype} on {device.type} (torch's flash attention "
                f"runs fp16 / bf16 on CUDA)")
    if not inputs.layout.packed:
        return "the batch is padded (varlen attends packed rows: unpad=True with a 2-D padding mask)"
    if inputs.relative is not None:
        return "the family adds a relative-position bias to the scores, which the kernel cannot add"
    if inputs.queries == "picked":
        return "some tokens' queries alone (final_tokens as a mask): the bucketed rows take them"
    if inputs.queries == "first" and inputs.window is not None:
        # with fewer queries than keys the kernel aligns the queries with the last keys (flash-attention 2.1's
        # bottom-right rule for windows), while a first token's window reaches the keys from the first on
        return "the first-token queries of a local layer (the kernel would align the query with the last key)"
    if inputs.queries == "first" and inputs.causal:
        # the same bottom-right rule: the kernel's causal first query would see its sequence's every key
        return "the first-token queries of a causal model (the kernel would align the query with the last key)"
    return None


def prepare(inputs: AttentionInputs) -> VarlenMask:
    """The cumulative lengths of a packed row (layout.Layout.cu_seqlens, built without a host sync from a
    HostBatch), one query per sequence when queries="first", the window, and whether it is causal."""
    layout = inputs.layout
    if inputs.queries == "first":
        cu_q = torch.arange(layout.batch + 1, dtype=torch.int32, device=layout.cu_seqlens.device)
        max_q = 1
    else:
        cu_q, max_q = layout.cu_seqlens, layout.max_seqlen
    return VarlenMask(cu_q, layout.cu_seqlens, max_q, layout.max_seqlen, inputs.window, inputs.causal)


def run(q: Tensor, k: Tensor, v: Tensor, mask: VarlenMask, score: nn.Module,
        dropout_p: float) -> tuple[Tensor, None]:
    """q (1, H, Tq, D), k, v (1, H, T, D) of a packed row -> (1, H, Tq, D), laid out token-major (a view of the
    kernel's (Tq, H, D) output), so the output projection reads it without a copy. A DOT score on its projected
    queries and keys (score_functions.py), no dropout."""
    q, k, scale = score.project(q, k)
    tokens = lambda t: t[0].transpose(0, 1)  # noqa: E731  (T, H, D): SelfAttention's qkv split, viewed
    out = kernel_call(q.device, q.dtype)(tokens(q), tokens(k), tokens(v), mask, scale)
    return out.transpose(0, 1)[None], None


def kernel_call(device: torch.device, dtype: torch.dtype) -> Callable:
    found = kernel(device, dtype)
    if found is None:  # prepare_mask checked `refuses` before: only a direct call gets here
        raise RuntimeError(f"varlen attention has no kernel for {dtype} on {device.type}")
    return found
