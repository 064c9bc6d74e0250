"""The varlen backend (nn/varlen.py): a packed row attended in one flash-attention call per layer, from its
cumulative lengths. Without a GPU its wiring is checked on the CPU with the kernel replaced by `per_document`
(the same call computed one sequence at a time by sdpa); the `cuda` cases run torch's own kernel against it."""

from __future__ import annotations

import warnings

import pytest
import torch

from family_builders import FAMILIES, random_encoder, supported
from minialign.nn import varlen
from minialign.nn.attention import BACKENDS, BackendFallbackWarning
from minialign.nn.layout import HostBatch
from minialign.runtime.syncs import count_syncs

ARCHS = [name for name in FAMILIES if supported(name)]
REFUSED = {"mpnet": "relative-position bias"}  # families the kernel cannot serve, and why
SCORE_FORM = {"deberta-v2"}  # its disentangled scores are a form the row does not declare: sdpa chosen up front
LENGTHS = [7, 3, 5, 8, 1]
L = 8
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def _batch(lengths=LENGTHS, length=L, device="cpu"):
    g = torch.Generator().manual_seed(0)
    mask = (torch.arange(length)[None] < torch.tensor(lengths)[:, None]).long()
    ids = torch.randint(5, 250, (len(lengths), length), generator=g).masked_fill(mask == 0, 1)
    return ids.to(device), mask.to(device), HostBatch.of(ids, lengths)


@pytest.fixture
def stand_in(monkeypatch):
    """The kernel on every device and dtype is `per_document`; each call's q, k, v recorded."""
    calls = []

    def kernel(device, dtype):
        def call(q, k, v, mask, scale):
            calls.append((q, k, v, mask))
            return varlen.per_document(q, k, v, mask, scale)
        return call

    monkeypatch.setattr(varlen, "kernel", kernel)
    return calls


def _pair(arch):
    ours = random_encoder(arch, "varlen")
    ref = random_encoder(arch, "sdpa")
    return ours, ref


@pytest.mark.parametrize("final", ["all", "first"])
@pytest.mark.parametrize("arch", ARCHS)
def test_a_packed_batch_on_varlen_matches_sdpa(arch, final, stand_in):
    ours, ref = _pair(arch)
    ids, mask, host = _batch()
    with torch.inference_mode(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = ours(ids, mask, unpad=True, final_tokens=final, host=host).last_hidden_state
        expected = ref(ids, mask, unpad=True, final_tokens=final).last_hidden_state
    refused = [str(w.message) for w in caught if issubclass(w.category, BackendFallbackWarning)]
    if arch in REFUSED:
        assert refused and REFUSED[arch] in refused[0] and not stand_in
        assert torch.equal(out, expected)  # on sdpa: the same bits
        return
    if arch in SCORE_FORM:
        assert not refused and not stand_in  # chosen up front by the capability rule, silently
        assert torch.equal(out, expected)
        return
    assert not refused
    layers = ours.config.num_layers
    windows = [layer.window for layer in ours.layers]
    # one kernel call per layer, except a first-token local layer (refused: the kernel's alignment rule)
    assert len(stand_in) == layers - (final == "first" and windows[-1] is not None)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_queries_keys_and_values_are_views_of_the_fused_projection(stand_in):
    ours, _ = _pair("bert")
    ids, mask, host = _batch()
    with torch.inference_mode():
        ours(ids, mask, unpad=True, host=host)
    q, k, v, m = stand_in[0]
    T = sum(LENGTHS)
    assert q.shape == (T, 4, 8) and not q.is_contiguous()  # (T, H, D) with the fused row's stride
    assert q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr() == v.untyped_storage().data_ptr()
    assert m.cu_k.dtype == torch.int32 and m.cu_k.tolist() == [0, 7, 10, 15, 23, 24]
    assert m.max_k == 8  # exact from the host's lengths


def test_the_first_token_layer_has_one_query_per_sequence(stand_in):
    ours, _ = _pair("bert")
    ids, mask, host = _batch()
    with torch.inference_mode():
        out = ours(ids, mask, unpad=True, final_tokens="first", host=host).last_hidden_state
    q, _, _, m = stand_in[-1]
    assert q.shape[0] == len(LENGTHS) and m.cu_q.tolist() == list(range(len(LENGTHS) + 1)) and m.max_q == 1
    assert out.shape == (len(LENGTHS), 1, 32)


def test_a_local_layer_passes_its_window_to_the_kernel(stand_in):
    import minialign as ma

    config = ma.Config(arch="modernbert", vocab_size=300, hidden_size=32, num_layers=3, num_heads=4,
                       intermediate_size=48, hidden_dropout=0.0, attention_dropout=0.0, rope_theta=160000.0,
                       local_rope_theta=10000.0, local_attention=4, global_attn_every_n_layers=3)
    ours, ref = (ma.Encoder(config, attn_backend=backend, seed=0).eval() for backend in ("varlen", "sdpa"))
    lengths = [16, 9, 13]
    ids, mask, host = _batch(lengths, 16)
    with torch.inference_mode():
        out = ours(ids, mask, unpad=True, host=host).last_hidden_state
        expected = ref(ids, mask, unpad=True).last_hidden_state
    windows = [m.window for *_, m in stand_in]
    assert windows == [layer.window for layer in ours.layers] and any(w is not None for w in windows)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_a_host_built_packed_forward_on_varlen_makes_no_sync(monkeypatch):
    """Everything but the kernel (a stand-in without a sync of its own here: zeros) asks the device nothing."""
    monkeypatch.setattr(varlen, "kernel", lambda device, dtype: lambda q, k, v, mask, scale: torch.zeros_like(q))
    ours, _ = _pair("modernbert")
    ids, mask, host = _batch()
    for final in ("all", "first"):
        with torch.inference_mode(), count_syncs() as syncs:
            ours(ids, mask, unpad=True, final_tokens=final, host=host)
        assert syncs.total == 0, dict(syncs.by_op)


def test_without_a_kernel_the_forward_runs_on_sdpa_and_says_why():
    ours, ref = _pair("bert")  # fp32 on the CPU: torch has no variable-length kernel here
    ids, mask, host = _batch()
    with torch.inference_mode():
        with pytest.warns(BackendFallbackWarning, match="no variable-length attention kernel for torch.float32 on cpu"):
            out = ours(ids, mask, unpad=True, host=host).last_hidden_state
        assert torch.equal(out, ref(ids, mask, unpad=True).last_hidden_state)


def test_a_padded_batch_runs_on_sdpa_and_says_why_unless_it_has_no_padding(stand_in):
    ours, _ = _pair("bert")
    ids, mask, _ = _batch()
    with torch.inference_mode():
        with pytest.warns(BackendFallbackWarning, match="the batch is padded"):
            ours(ids, mask, unpad=False)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a batch without padding: sdpa runs it as well as any row, silently
            ours(ids[:, :1], mask[:, :1], unpad=False)


def test_capture_and_attentions_run_on_a_padded_row():
    import minialign as ma

    ours, ref = _pair("bert")
    ids, mask, _ = _batch()
    with torch.inference_mode():
        with ma.capture(ours) as cap:
            ours(ids, mask, unpad=True)
        with ma.capture(ref) as expected:
            ref(ids, mask, unpad=True)
    assert torch.equal(cap["layers.0.attention.probs"], expected["layers.0.attention.probs"])
    assert BACKENDS["varlen"].padded is False


@CUDA
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("arch", ["bert", "modernbert", "eurobert", "gte"])
def test_torch_flash_kernel_matches_the_per_document_reference_on_cuda(arch, dtype):
    ours, ref = (m.to("cuda", dtype) for m in _pair(arch))
    ids, mask, host = _batch(device="cuda")
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("error", BackendFallbackWarning)  # the real kernel serves it
        for final in ("all", "first"):
            out = ours(ids, mask, unpad=True, final_tokens=final, host=host).last_hidden_state.float()
            expected = ref(ids, mask, unpad=True, final_tokens=final).last_hidden_state.float()
            torch.testing.assert_close(out, expected, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("flash, capability, expected", [(False, (9, 0), False), (True, (7, 5), False),
                                                         (True, (8, 0), True), (True, (9, 0), True)])
def test_the_kernel_needs_flash_attention_and_an_ampere_gpu(monkeypatch, flash, capability, expected):
    """torch's flash attention exists only in builds with it and runs only on Ampere or newer (flash_api.cpp); a GPU
    without it gets no kernel, so its forwards run on sdpa instead of failing."""
    monkeypatch.setattr(torch.backends.cuda, "is_flash_attention_available", lambda: flash)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: capability)
    varlen._flash_on.cache_clear()
    try:
        cuda = torch.device("cuda")
        assert (varlen.kernel(cuda, torch.bfloat16) is not None) == expected
        assert varlen.runs_on(cuda, torch.float16) == expected
        assert varlen.kernel(cuda, torch.float32) is None and not varlen.runs_on(torch.device("cpu"), torch.bfloat16)
    finally:
        varlen._flash_on.cache_clear()
