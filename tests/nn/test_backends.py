"""Attention backends (eager, sdpa, flex), unpadded execution, fused QKV, the last layer for the
first tokens only, autocast and compilation: all against transformers or the eager reference."""


import pytest
import torch
from conftest import hf_model, pad_batch

import minialign as ma

from minialign.loading import devices
from minialign.nn.config import families

TOL = dict(atol=1e-5, rtol=0)


@pytest.fixture(params=["bert", "roberta"])
def pair(request, tmp_path):
    hf = hf_model(request.param, "base")
    hf.save_pretrained(tmp_path / "m")
    return hf, tmp_path / "m"


def _batch(config, lengths=(37, 20, 5)):
    ids = torch.randint(config.pad_token_id + 1, config.vocab_size, (len(lengths), max(lengths)))
    return pad_batch(ids, list(lengths), config.pad_token_id)


@pytest.mark.parametrize("backend", ["eager", "sdpa", pytest.param("flex", marks=pytest.mark.slow)])
def test_unpadded_equals_transformers(pair, backend):
    hf, directory = pair
    model = ma.Encoder.from_pretrained(directory, attn_backend=backend)
    ids, mask = _batch(hf.config)
    real = mask.bool()
    with torch.no_grad():
        theirs = hf(ids, attention_mask=mask, output_hidden_states=True)
        padded = model(ids, attention_mask=mask)
        packed = model(ids, attention_mask=mask, unpad=True, output_hidden_states=True)
        pooled = model(ids, attention_mask=mask, unpad=True, final_tokens="first")
        padded_first = model(ids, attention_mask=mask, final_tokens="first")
    for out in (padded, packed):
        torch.testing.assert_close(out.last_hidden_state[real], theirs.last_hidden_state[real], **TOL)
        torch.testing.assert_close(out.pooler_output, theirs.pooler_output, **TOL)
    for ours, ref in zip(packed.hidden_states, theirs.hidden_states):
        torch.testing.assert_close(ours[real], ref[real], **TOL)
    assert (packed.last_hidden_state[~real] == 0).all()  # pad rows of the unpacked output
    for first in (pooled, padded_first):
        assert first.last_hidden_state.shape == (ids.shape[0], 1, hf.config.hidden_size)
        torch.testing.assert_close(first.last_hidden_state[:, 0], theirs.last_hidden_state[:, 0], **TOL)
        torch.testing.assert_close(first.pooler_output, theirs.pooler_output, **TOL)


@pytest.mark.slow
def test_flex_masks_equal_eager(tmp_path):
    hf = hf_model("roberta", "base")
    hf.save_pretrained(tmp_path / "m")
    flex = ma.Encoder.from_pretrained(tmp_path / "m", attn_backend="flex")
    eager = ma.Encoder.from_pretrained(tmp_path / "m", attn_backend="eager")
    ids, mask = _batch(hf.config)
    L = ids.shape[1]
    left_only = mask[:, None, :] * torch.tril(torch.ones(L, L, dtype=torch.long))
    additive = (1.0 - left_only[:, None].float()) * -1e9
    real = mask.bool()
    with torch.no_grad():
        for m in (mask, left_only, additive, None):
            a = flex(ids, attention_mask=m).last_hidden_state
            b = eager(ids, attention_mask=m).last_hidden_state
            torch.testing.assert_close(a[real], b[real], **TOL)


@pytest.mark.parametrize("unpad", [False, True])
def test_final_tokens_first_runs_the_last_layer_for_the_first_token(pair, unpad):
    hf, directory = pair
    model = ma.Encoder.from_pretrained(directory)
    ids, mask = _batch(hf.config)
    calls = []
    handle = model.layers[-1].ffn.register_forward_hook(lambda m, i, o: calls.append(i[0].shape))
    with torch.no_grad():
        fast = model(ids, attention_mask=mask, final_tokens="first", unpad=unpad)
        full = model(ids, attention_mask=mask)
    handle.remove()
    # (B, 1, C) padded, (1, B, C) packed: one token per sequence; then the whole (B, L, C)
    assert calls[0][:2] == ((1, ids.shape[0]) if unpad else (ids.shape[0], 1)) and calls[1][1] == ids.shape[1]
    torch.testing.assert_close(fast.pooler_output, full.pooler_output, **TOL)


def test_alignmodel_unpad_and_first_tokens_only(tmp_path):
    from conftest import write_alignscore_ckpt

    path, ref = write_alignscore_ckpt(tmp_path / "a.ckpt", "roberta")
    ref["backbone"].save_pretrained(tmp_path / "bb")
    model = ma.AlignModel.from_pretrained(path, backbone=str(tmp_path / "bb"))
    ids, mask = _batch(ref["backbone"].config)
    with torch.no_grad():
        pooled = ref["backbone"](ids, attention_mask=mask).pooler_output
        for unpad in (False, True):
            out = model(ids, attention_mask=mask, unpad=unpad)
            assert out.last_hidden_state.shape == (ids.shape[0], 1, model.config.hidden_size)
            assert out.prediction_logits is None
            torch.testing.assert_close(out.tri_label_logits, ref["tri_layer"](pooled), **TOL)
        assert model(ids, attention_mask=mask, mlm=True).last_hidden_state.shape == (*ids.shape, model.config.hidden_size)


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_unpad_attends_each_text_alike_in_every_batch(pair, backend):
    """Packed (unpad=True), eager and sdpa attend each sequence padded to a length of its own
    (layout.bucket_length), so a text alone, in a batch without padding and in a mixed batch gives the same
    bits; one attention call per length bucket, not one per sequence."""
    hf, directory = pair
    model = ma.Encoder.from_pretrained(directory, attn_backend=backend)
    ids, mask = _batch(hf.config, lengths=(9, 9, 30, 5, 33, 10))  # buckets 16, 32, 8, 40
    with torch.no_grad():
        mixed = model(ids, attention_mask=mask, unpad=True).last_hidden_state
        alone = model(ids[:1, :9], attention_mask=mask[:1, :9], unpad=True).last_hidden_state
        without_padding = model(ids[:2, :9], attention_mask=mask[:2, :9], unpad=True).last_hidden_state
        for i, n in enumerate((9, 9, 30, 5, 33, 10)):
            assert torch.equal(model(ids[i:i + 1, :n], attention_mask=mask[i:i + 1, :n],
                                     unpad=True).last_hidden_state[0], mixed[i, :n])
    assert torch.equal(alone[0], mixed[0, :9]) and torch.equal(without_padding, mixed[:2, :9])
    torch.testing.assert_close(mixed, model(ids, attention_mask=mask).last_hidden_state * mask[..., None], **TOL)
    layout = ma.nn.layout.packed(mask)
    assert [b.length for b in layout.buckets] == [8, 16, 32, 40]
    assert [b.sequences.tolist() for b in layout.buckets] == [[3], [0, 1, 5], [2], [4]]


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_one_query_row_gets_the_same_bits_in_any_batch(backend):
    """final_tokens="first" attends one query row per sequence; torch's CPU attention runs a single query row on a
    kernel whose sums follow the batch (on an AMD EPYC every sequence of a batch of 4 differed from itself alone, and
    zero-shot scores moved by 1e-7 with the other texts), so the backends run it as two rows
    (attention.two_query_rows): each sequence the same bits alone and in a batch, the output the one-row formula's."""
    from minialign.nn.attention import BACKENDS
    from minialign.nn.score_functions import make_score_function

    torch.manual_seed(0)
    score = make_score_function("scaled_dot", 2, 16, None)
    q, k, v = torch.randn(4, 2, 1, 16), torch.randn(4, 2, 40, 16), torch.randn(4, 2, 40, 16)
    run = BACKENDS[backend].run
    with torch.no_grad():
        together = run(q, k, v, None, score, 0.0)[0]
        assert together.shape == (4, 2, 1, 16)
        for i in range(4):
            assert torch.equal(run(q[i:i + 1], k[i:i + 1], v[i:i + 1], None, score, 0.0)[0][0], together[i]), i
        reference = torch.softmax(q @ k.transpose(-1, -2) / 4.0, dim=-1) @ v
    torch.testing.assert_close(together, reference, **TOL)


def test_bucket_length_pads_at_most_seven_keys_or_an_eighth():
    for n in range(1, 2049):
        length = ma.nn.layout.bucket_length(n)
        assert n <= length <= max(n + 7, n * 9 // 8) and ma.nn.layout.bucket_length(length) == length
    assert [ma.nn.layout.bucket_length(n) for n in (1, 8, 9, 64, 65, 127, 128, 129, 300)] == \
        [8, 8, 16, 64, 72, 128, 128, 144, 320]


def test_unpad_needs_right_padding(pair):
    hf, directory = pair
    model = ma.Encoder.from_pretrained(directory)
    ids, mask = _batch(hf.config)
    with pytest.raises(ValueError, match="right-padded"):
        model(ids, attention_mask=mask.flip(1), unpad=True)


def test_fused_qkv_keeps_checkpoint_names(pair):
    hf, directory = pair
    model = ma.Encoder.from_pretrained(directory)
    attention = model.layers[0].attention
    assert attention.qkv.weight.shape == (3 * hf.config.hidden_size, hf.config.hidden_size)
    names = set(model.state_dict())
    assert {"layers.0.attention.query.weight", "layers.0.attention.key.bias", "layers.0.attention.value.weight"} <= names
    assert not any("qkv" in n for n in names)
    sd = hf.state_dict()
    torch.testing.assert_close(model.state_dict()["layers.1.attention.key.weight"],
                               sd["encoder.layer.1.attention.self.key.weight"], atol=0, rtol=0)
    fresh = ma.Encoder(model.config)
    fresh.load_state_dict(model.state_dict())
    assert torch.equal(fresh.layers[2].attention.qkv.weight, model.layers[2].attention.qkv.weight)


def test_bf16_and_autocast_close_to_fp32(pair):
    hf, directory = pair
    fp32 = ma.Encoder.from_pretrained(directory)
    bf16 = ma.Encoder.from_pretrained(directory, dtype=torch.bfloat16)
    ids, mask = _batch(hf.config)
    real = mask.bool()
    with torch.no_grad():
        ref = fp32(ids, attention_mask=mask).last_hidden_state
        hf_bf16 = hf.to(torch.bfloat16)(ids, attention_mask=mask).last_hidden_state.float()
        hf.float()
        ours = bf16(ids, attention_mask=mask).last_hidden_state.float()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            auto = fp32(ids, attention_mask=mask).last_hidden_state.float()
    bound = 3 * (hf_bf16 - ref)[real].abs().max()  # judged against transformers' own bf16 error
    assert (ours - ref)[real].abs().max() <= bound
    assert (auto - ref)[real].abs().max() <= bound


@pytest.mark.parametrize("cls", [ma.Encoder, ma.AlignModel])
@pytest.mark.parametrize("backend", ["sdpa", "eager"])
def test_compiles_without_graph_breaks(pair, backend, cls):
    hf, directory = pair
    with pytest.warns(UserWarning) if cls is ma.AlignModel else _nothing():
        model = cls.from_pretrained(directory, attn_backend=backend)
    ids, mask = _batch(hf.config)
    explanation = torch._dynamo.explain(model)(ids, attention_mask=mask)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


def _nothing():
    import contextlib

    return contextlib.nullcontext()


def test_compile_true_gives_the_same_numbers(pair):
    hf, directory = pair
    compiled = ma.Encoder.from_pretrained(directory, compile=True)
    plain = ma.Encoder.from_pretrained(directory)
    ids, mask = _batch(hf.config)
    with torch.no_grad():
        torch.testing.assert_close(compiled(ids, attention_mask=mask).pooler_output,
                                   plain(ids, attention_mask=mask).pooler_output, **TOL)


@pytest.mark.parametrize("backend", ["eager", "sdpa", pytest.param("flex", marks=pytest.mark.slow)])
def test_attentions_are_full_for_every_layer(pair, backend):
    """Asking for attentions (or hidden states) computes every token, whatever the head needs."""
    hf, directory = pair
    encoder = ma.Encoder.from_pretrained(directory, attn_backend=backend)
    align = ma.AlignModel(encoder.config, attn_backend=backend, seed=0).eval()
    align.encoder.load_state_dict(encoder.state_dict())
    ids, mask = _batch(hf.config)
    B, L = ids.shape
    H = hf.config.num_attention_heads
    with torch.no_grad():
        theirs = hf(ids, attention_mask=mask, output_attentions=True)
        outputs = (encoder(ids, attention_mask=mask, final_tokens="first", output_attentions=True, unpad=True),
                   align(ids, attention_mask=mask, output_attentions=True),
                   align(ids, attention_mask=mask, output_hidden_states=True))
    for out in outputs[:2]:
        assert [tuple(a.shape) for a in out.attentions] == [(B, H, L, L)] * hf.config.num_hidden_layers
        for ours, ref in zip(out.attentions, theirs.attentions):
            torch.testing.assert_close(ours.transpose(1, 2)[mask.bool()], ref.transpose(1, 2)[mask.bool()], **TOL)
    for out in outputs[1:]:
        assert out.last_hidden_state.shape == (B, L, hf.config.hidden_size)
    assert len(outputs[2].hidden_states) == hf.config.num_hidden_layers + 1


def test_final_tokens_is_checked(pair):
    _, directory = pair
    model = ma.Encoder.from_pretrained(directory)
    with pytest.raises(ValueError, match="final_tokens"):
        model(torch.tensor([[5, 6]]), final_tokens="last")


@pytest.mark.parametrize("score_fn", ["general", "additive", pytest.param("location", marks=pytest.mark.slow)])
@pytest.mark.parametrize("backend", ["sdpa", pytest.param("flex", marks=pytest.mark.slow)])
def test_packed_and_first_tokens_with_every_score_form(score_fn, backend):
    """Every score form (dot, dense, offset), packed or padded, all or first tokens: equal to the
    padded eager reference, on the backend the fallback rule picks."""
    config = ma.Config(vocab_size=60, hidden_size=24, num_layers=2, num_heads=3, intermediate_size=40,
                       max_position_embeddings=64, score_fn=score_fn, max_relative_distance=4)
    model = ma.Encoder(config, attn_backend=backend, seed=0).eval()
    reference = ma.Encoder(config, attn_backend="eager", seed=0).eval()
    with torch.no_grad():
        for m in (model, reference):
            for p in m.layers[0].attention.score.parameters():
                p.copy_(torch.linspace(-0.5, 0.5, p.numel()).view_as(p))  # away from the initial values
        ids, mask = pad_batch(torch.randint(1, 60, (3, 11)), [11, 6, 3], 0)
        expected = reference(ids, attention_mask=mask)
        for unpad in (False, True):
            for final in ("all", "first"):
                out = model(ids, attention_mask=mask, unpad=unpad, final_tokens=final)
                torch.testing.assert_close(out.pooler_output, expected.pooler_output, **TOL)
                if final == "all":
                    real = mask.bool()
                    torch.testing.assert_close(out.last_hidden_state[real], expected.last_hidden_state[real], **TOL)


@pytest.mark.parametrize("score_fn", ["scaled_dot", "general", "bilinear", "additive", "location"])
@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_first_tokens_do_not_follow_the_batch_with_every_score_function(score_fn, backend):
    """The first-token path (a classifier's last layer, one query row per sequence) gives a sequence the same logits,
    bit for bit, alone, beside one other and in a batch of nine packed in length buckets: with torch's batched
    matmul for the one-row products, general, additive and location scores moved by 6e-8 to 2e-7 (nn/reduce.py
    row_product)."""
    config = ma.Config(vocab_size=200, hidden_size=36, num_layers=2, num_heads=3, intermediate_size=50,
                       max_position_embeddings=128, score_fn=score_fn, max_relative_distance=4)
    model = ma.ClassifierModel(config, attn_backend=backend, seed=0).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.3, generator=generator)  # logits far apart: a last-bit change shows
    lengths = [56, 50, 53, 55, 49, 30, 12, 56, 51]  # several sequences in the first one's bucket
    ids = torch.randint(5, 200, (len(lengths), 56), generator=generator)
    mask = (torch.arange(56)[None] < torch.tensor(lengths)[:, None]).long()
    with torch.inference_mode():
        batch = model(ids, mask, unpad=True).logits
        alone = model(ids[:1], mask[:1], unpad=True).logits
        beside_one = model(ids[[5, 0]], mask[[5, 0]], unpad=True).logits
    assert torch.equal(batch[0], alone[0]) and torch.equal(batch[0], beside_one[1])


@pytest.mark.parametrize("native", [True, False])
def test_dtype_auto_is_bf16_matmuls_only_where_native(pair, monkeypatch, native):
    """dtype="auto": fp32 weights; on hardware with native bf16 the matmuls PRECISION_LAYERS names for
    MixedPrecisionLinear
    (the attention output and FFN down projections) run in bf16 and nothing else does (outputs fp32,
    close to fp32 within transformers' own bf16 error); elsewhere fp32 throughout."""
    from minialign.nn.linear import Linear
    from minialign.nn.layers import PRECISION_LAYERS
    from minialign.nn.linear import MixedPrecisionLinear

    hf, directory = pair
    monkeypatch.setattr(devices, "cpu_has_native", lambda dtype, unknown=True: native)
    auto = ma.Encoder.from_pretrained(directory, dtype="auto")
    assert {p.dtype for p in auto.parameters()} == {torch.float32}
    assert auto.compute_dtype == (torch.bfloat16 if native else None)
    mixed = {name for name, m in auto.named_modules() if isinstance(m, Linear) and m.compute_dtype is not None}
    assert PRECISION_LAYERS[MixedPrecisionLinear] == ("attention.output", "ffn.down")
    assert mixed == ({f"layers.{i}.{n}" for i in range(len(auto.layers)) for n in PRECISION_LAYERS[MixedPrecisionLinear]}
                     if native else set())
    fp32 = ma.Encoder.from_pretrained(directory)
    ids, mask = _batch(hf.config)
    real = mask.bool()
    with torch.no_grad():
        got, ref = auto(ids, attention_mask=mask).last_hidden_state, fp32(ids, attention_mask=mask).last_hidden_state
        hf_bf16 = hf.to(torch.bfloat16)(ids, attention_mask=mask).last_hidden_state.float()
        hf.float()
    assert got.dtype == torch.float32
    if native:
        assert 0 < (got - ref)[real].abs().max() <= 3 * (hf_bf16 - ref)[real].abs().max()
    else:
        torch.testing.assert_close(got, ref, atol=0, rtol=0)
    explanation = torch._dynamo.explain(auto)(ids, attention_mask=mask)
    assert explanation.graph_break_count == 0


def test_cli_dtype_auto_says_what_it_picked(tiny_alignscore, capsys, monkeypatch):
    from minialign.apps.cli import main as cli

    path, backbone, _ = tiny_alignscore
    for native, said in ((True, "bf16 matmuls with fp32 weights"), (False, "fp32 (no native bf16 here)")):
        monkeypatch.setattr(devices, "cpu_has_native", lambda dtype, unknown=True, n=native: n)
        assert cli(["score", "--context", "A context.", "--claim", "A claim.", "--model", str(path),
                    "--backbone", str(backbone), "--dtype", "auto"]) == 0
        captured = capsys.readouterr()
        assert f"dtype auto: {said}" in captured.err and 0.0 <= float(captured.out) <= 1.0


def test_flex_on_cpu_runs_a_padded_batch_packed_and_exact():
    """torch 2.13's compiled CPU flex kernel gets some right-padded batches wrong (rows of 40 tokens beside one of
    7: wrong values or NaN in the short row, not every run); the Encoder runs such a batch packed on flex, whatever
    `unpad` says, and matches eager. Several calls and length mixes, as the fault came and went."""
    config = ma.Config(vocab_size=500, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)
    eager = ma.Encoder(config, attn_backend="eager", seed=0).eval()
    flex = ma.Encoder(config, attn_backend="flex", seed=0).eval()
    for lengths in ([40, 29, 7], [72, 61, 7], [40, 35, 39, 10]):
        torch.manual_seed(0)
        ids = torch.randint(5, 500, (len(lengths), lengths[0]))
        mask = (torch.arange(lengths[0])[None] < torch.tensor(lengths)[:, None]).long()
        with torch.inference_mode():
            reference = eager(ids, attention_mask=mask).last_hidden_state
            for _ in range(3):
                out = flex(ids, attention_mask=mask).last_hidden_state
                assert (out - reference)[mask.bool()].abs().max() < 1e-5, lengths
                assert not out[~mask.bool()].any()  # pad rows zero: it ran packed


@pytest.mark.parametrize("arch", list(families()))
def test_every_family_packed_gives_a_text_the_same_bits_alone_and_batched(arch):
    """Every family, sdpa packed: each text alone (its bucket longer than the whole row: relative tables and
    windows sized by layout.span) and batched with others of every bucket gives the same bits."""
    from family_builders import random_encoder

    model = random_encoder(arch, num_layers=2)
    lengths = (9, 30, 5, 70, 9)
    ids, mask = _batch(model.config, lengths=lengths)
    with torch.no_grad():
        batched = model(ids, attention_mask=mask, unpad=True).last_hidden_state
        for i, n in enumerate(lengths):
            alone = model(ids[i:i + 1, :n], attention_mask=mask[i:i + 1, :n], unpad=True).last_hidden_state
            assert torch.equal(alone[0], batched[i, :n]), (arch, n)
    assert torch.isfinite(batched).all()


def test_flex_pads_heads_narrower_than_the_kernel_takes(monkeypatch):
    """CUDA's flex kernel refuses heads narrower than 16 (nn/flex.py min_head_dim): such heads are padded with zeros
    and the output cut back, the scale that of the real width. Forced here on the CPU: equal to the unpadded run."""
    from minialign.nn import flex

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 20, 12) for _ in range(3))
    relative = torch.randn(3, 2 * 20 - 1)
    plain = flex.flex_attention(q, k, v, relative=relative)
    monkeypatch.setattr(flex, "min_head_dim", lambda device: 16)
    padded = flex.flex_attention(q, k, v, relative=relative)
    assert padded.shape == (2, 3, 20, 12)
    torch.testing.assert_close(padded, plain, rtol=1e-5, atol=1e-6)
