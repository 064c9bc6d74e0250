"""The causal mask kind (nn/inputs.py AttentionInputs.causal, nn/masks.py causal_keep): keys j <= i only, on top of
the user's mask and a window, on every backend row and layout; packed, causal within each sequence. The reference
is each sequence alone through torch's sdpa with is_causal=True."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from minialign.nn import layout as layouts
from minialign.nn import varlen
from minialign.nn.attention import BACKENDS, attention, prepare_mask
from minialign.nn.inputs import AttentionInputs
from minialign.nn.masks import attention_bias, causal_keep, left_only_mask

LENGTHS = [7, 3, 8, 1]
H, D, L = 2, 8, 8


def _qkv(tokens_first: int):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(tokens_first, H, L, D, generator=g) for _ in range(3)]


def _mask():
    return (torch.arange(L)[None] < torch.tensor(LENGTHS)[:, None]).long()


def _reference(q, k, v):
    """Each sequence alone, causal: (B, H, L, D) with zeros at the padding."""
    out = torch.zeros_like(q)
    for b, n in enumerate(LENGTHS):
        out[b, :, :n] = F.scaled_dot_product_attention(q[b:b + 1, :, :n], k[b:b + 1, :, :n], v[b:b + 1, :, :n],
                                                       is_causal=True)[0]
    return out


def _run(backend: str, q, k, v, *, packed: bool, queries: str = "all"):
    mask = _mask()
    layout = layouts.packed(mask) if packed else layouts.padded(*mask.shape)
    inputs = AttentionInputs(mask, layout, torch.float32, H, queries=queries, causal=True)
    prepared = prepare_mask(BACKENDS[backend], inputs)
    if not packed:
        return attention(q[:, :, :1] if queries == "first" else q, k, v, prepared)[0]
    to_row = lambda t: layout.pack(t.transpose(1, 2)).transpose(1, 2)  # noqa: E731  (1, H, T, D)
    qr = to_row(q)
    if queries == "first":
        qr = qr[:, :, layout.cu_seqlens[:-1]]
    out = attention(qr, to_row(k), to_row(v), prepared)[0]  # (1, H, Tq, D)
    if queries == "first":
        return out[0].transpose(0, 1)[:, :, None]  # (B, H, 1, D)
    rows = layout.unpack(out.transpose(1, 2).reshape(1, -1, H * D))  # (B, L, H D)
    return rows.view(len(LENGTHS), L, H, D).transpose(1, 2)


def test_the_bias_blocks_later_keys_on_top_of_the_mask_and_the_window():
    mask = _mask()
    bias = attention_bias(mask, len(LENGTHS), L, torch.float32, causal=True)
    assert torch.equal(bias == 0, left_only_mask(mask)[:, None])
    assert torch.equal(attention_bias(None, 1, L, torch.float32, causal=True)[0, 0] == 0, causal_keep(L))
    windowed = attention_bias(None, 1, L, torch.float32, causal=True, window=2)[0, 0] == 0
    i, j = torch.arange(L)[:, None], torch.arange(L)[None]
    assert torch.equal(windowed, (j <= i) & (i - j <= 2))
    assert attention_bias(mask, len(LENGTHS), L, torch.float32) is not None  # not causal: the padding alone
    assert torch.equal(attention_bias(mask, len(LENGTHS), L, torch.float32) == 0,
                       mask.bool()[:, None, None].expand(-1, 1, 1, L))


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_eager_and_sdpa_are_causal_within_each_sequence(backend, packed):
    q, k, v = _qkv(len(LENGTHS))
    got, expected = _run(backend, q, k, v, packed=packed), _reference(q, k, v)
    real = _mask().bool()
    torch.testing.assert_close(got.transpose(1, 2)[real], expected.transpose(1, 2)[real], atol=1e-6, rtol=0)


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_a_first_token_sees_itself_alone(backend, packed):
    q, k, v = _qkv(len(LENGTHS))
    got = _run(backend, q, k, v, packed=packed, queries="first")  # (B, H, 1, D)
    torch.testing.assert_close(got, v[:, :, :1], atol=1e-6, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_flex_is_causal_within_each_sequence(packed):
    q, k, v = _qkv(len(LENGTHS))
    got, expected = _run("flex", q, k, v, packed=packed), _reference(q, k, v)
    real = _mask().bool()
    torch.testing.assert_close(got.transpose(1, 2)[real], expected.transpose(1, 2)[real], atol=1e-5, rtol=0)


@pytest.fixture
def stand_in(monkeypatch):
    """The varlen kernel on every device and dtype is `per_document`; each call's mask recorded."""
    calls = []

    def kernel(device, dtype):
        def call(q, k, v, mask, scale):
            calls.append(mask)
            return varlen.per_document(q, k, v, mask, scale)
        return call

    monkeypatch.setattr(varlen, "kernel", kernel)
    return calls


def test_varlen_hands_the_kernel_its_causal_flag(stand_in):
    q, k, v = _qkv(len(LENGTHS))
    got, expected = _run("varlen", q, k, v, packed=True), _reference(q, k, v)
    assert [mask.causal for mask in stand_in] == [True]
    real = _mask().bool()
    torch.testing.assert_close(got.transpose(1, 2)[real], expected.transpose(1, 2)[real], atol=1e-6, rtol=0)


def test_varlen_refuses_the_first_tokens_of_a_causal_model(stand_in):
    mask = _mask()
    inputs = AttentionInputs(mask, layouts.packed(mask), torch.float16, H, queries="first", causal=True)
    assert "causal" in varlen.refuses(inputs)
    assert varlen.refuses(AttentionInputs(mask, layouts.packed(mask), torch.float16, H, causal=True)) is None


def test_flash_attention_gets_a_right_window_of_zero(monkeypatch):
    """flash attention's causal is window_size (left, 0) (torch.nn.attention.varlen.varlen_attn)."""
    seen = {}

    def entry(q, k, v, cu_q, cu_k, max_q, max_k, *, scale, window_size):
        seen["window"] = window_size
        return q

    monkeypatch.setattr(varlen, "_varlen_attn", lambda: entry)
    cu = torch.tensor([0, 3], dtype=torch.int32)
    t = torch.zeros(3, H, D)
    varlen.flash_varlen(t, t, t, varlen.VarlenMask(cu, cu, 3, 3, causal=True), 1.0)
    assert seen["window"] == (-1, 0)
    varlen.flash_varlen(t, t, t, varlen.VarlenMask(cu, cu, 3, 3, window=2, causal=True), 1.0)
    assert seen["window"] == (2, 0)
    varlen.flash_varlen(t, t, t, varlen.VarlenMask(cu, cu, 3, 3), 1.0)
    assert seen["window"] == (-1, -1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_torch_flash_kernel_is_causal_as_the_per_document_reference_on_cuda(dtype):
    if varlen.kernel(torch.device("cuda"), dtype) is None:
        pytest.skip("no flash attention kernel on this GPU")
    g = torch.Generator().manual_seed(0)
    T, cu = sum(LENGTHS), torch.tensor([0, 7, 10, 18, 19], dtype=torch.int32, device="cuda")
    q, k, v = (torch.randn(T, H, D, generator=g).to("cuda", dtype) for _ in range(3))
    mask = varlen.VarlenMask(cu, cu, max(LENGTHS), max(LENGTHS), causal=True)
    got = varlen.flash_varlen(q, k, v, mask, D ** -0.5)
    torch.testing.assert_close(got, varlen.per_document(q, k, v, mask, D ** -0.5), atol=2e-3, rtol=0)
