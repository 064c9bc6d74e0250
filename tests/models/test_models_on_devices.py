"""The models on every device this machine has (conftest.DEVICES: the CPU, and CUDA where there is one,
marked `cuda` for scripts/gpu_suite.sh), in fp32 and half precision, on every attention path:

  Encoder        every family (tests/family_builders.py) against transformers' bare model
  ClassifierModel every family's sequence-classification head against *ForSequenceClassification
  AlignModel     AlignScore's four heads (tri, bin, reg, MLM) against the transformers reference parts

fp32 within 1e-5 with TF32 off (the autouse fixture); bf16 / fp16 within 3x transformers' own error at
that precision on the same device (conftest.assert_within_half_error). Runs: eager, sdpa and flex on a
padded batch, and the packed layout (`unpad=True`) on sdpa and flex. On the CPU, flex compiles a kernel per
shape and dtype (tens of seconds each), and tests/models/test_<family>.py already run every family's CPU flex
path in fp32; here flex runs on the GPU only, every family and dtype."""

from __future__ import annotations

import copy
import inspect

import pytest
import torch
from conftest import DEVICES, DTYPES, assert_within_half_error, pad_batch, write_alignscore_ckpt
from family_builders import LONG_CONTEXT, every_family_params

import minialign as ma

TOL = dict(atol=1e-5, rtol=0)
RUNS = {"eager": ("eager", False), "sdpa": ("sdpa", False), "flex": ("flex", False), "packed": ("sdpa", True),
        "packed-flex": ("flex", True)}
RUN_PARAMS = [pytest.param(name, marks=pytest.mark.slow if "flex" in name else ()) for name in RUNS]
TEXTS = ["The tower was built in Paris and opened in 1889.", "Short.",
         "Police said the company grew; officials reported on Monday, and the minister said the market grew.",
         "Zürich, Genève et Bâle sont des villes."]
PAIRS = ["It opened in 1889.", "A second text.", "Numbers 3.14 and $5,000 in the report.", "La tour."]


def _skip_costly(device: str, dtype: str, run: str, family: str) -> None:
    if device == "cpu" and family in LONG_CONTEXT:
        pytest.skip(f"tests/models/test_{family}.py covers {family} on the CPU; here it runs on CUDA")
    if device == "cpu" and "flex" in run:
        pytest.skip("CPU flex compiles a kernel per shape and dtype (tens of seconds): tests/models/test_<family>.py "
                    "run every family's CPU flex path in fp32; here flex runs on CUDA, every family and dtype")


def _inputs(directory, model, device):
    """The family's own tokenizer on pairs of unequal lengths, only the inputs transformers' model takes."""
    batch = ma.Tokenizer.from_pretrained(directory)(TEXTS, PAIRS)
    accepted = inspect.signature(model.forward).parameters
    return {k: v.to(device) for k, v in batch.items() if k in accepted}


def _reference(hf, dtype, device):
    """transformers' model in fp32 and at `dtype` on `device` (copies: the session fixture keeps the CPU one)."""
    fp32 = copy.deepcopy(hf).to(device)
    return fp32, (fp32 if dtype == torch.float32 else copy.deepcopy(hf).to(device=device, dtype=dtype))


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("run", RUN_PARAMS)
@pytest.mark.parametrize("family", every_family_params())
@pytest.mark.parametrize("device", DEVICES)
def test_encoder_equals_transformers(device, family, run, dtype, tiny_family):
    _skip_costly(device, dtype, run, family)
    backend, unpad = RUNS[run]
    directory, hf = tiny_family.hf(family)
    fp32, half = _reference(hf, DTYPES[dtype], device)
    ours = ma.Encoder.from_pretrained(directory, attn_backend=backend, device=device, dtype=DTYPES[dtype])
    assert {p.device.type for p in ours.parameters()} == {device}
    assert {p.dtype for p in ours.parameters()} == {DTYPES[dtype]}
    inputs = _inputs(directory, hf, device)
    real = inputs["attention_mask"].bool()
    with torch.no_grad():
        reference = fp32(**inputs, output_hidden_states=True)
        theirs = half(**inputs, output_hidden_states=True)
        got = ours(**inputs, unpad=unpad, output_hidden_states=True)
    assert got.last_hidden_state.device.type == device and got.last_hidden_state.dtype == DTYPES[dtype]
    assert len(got.hidden_states) == len(reference.hidden_states)
    if dtype == "fp32":
        for i, (a, b) in enumerate(zip(got.hidden_states, reference.hidden_states, strict=True)):
            assert torch.isfinite(a[real]).all(), f"hidden state {i} has non-finite values"
            torch.testing.assert_close(a[real], b[real], **TOL, msg=lambda m, i=i: f"hidden state {i}: {m}")
        torch.testing.assert_close(got.last_hidden_state[real], reference.last_hidden_state[real], **TOL)
        if getattr(reference, "pooler_output", None) is not None:
            torch.testing.assert_close(got.pooler_output, reference.pooler_output, **TOL)
        return
    where = f"{family} {run} {dtype} on {device}"
    assert_within_half_error(got.last_hidden_state[real], theirs.last_hidden_state[real],
                             reference.last_hidden_state[real], where=where)
    if getattr(reference, "pooler_output", None) is not None:
        assert_within_half_error(got.pooler_output, theirs.pooler_output, reference.pooler_output,
                                 where=f"{where}, pooled")


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("run", RUN_PARAMS)
@pytest.mark.parametrize("family", every_family_params())
@pytest.mark.parametrize("device", DEVICES)
def test_classifier_head_equals_transformers(device, family, run, dtype, tiny_family):
    _skip_costly(device, dtype, run, family)
    if device == "cpu" and run in ("eager", "packed") and dtype != "fp32":
        pytest.skip("CPU half precision: the sdpa run here; every run on CUDA")
    backend, unpad = RUNS[run]
    directory, hf = tiny_family.classifier(family, 3)
    fp32, half = _reference(hf, DTYPES[dtype], device)
    ours = ma.ClassifierModel.from_pretrained(directory, attn_backend=backend, device=device, dtype=DTYPES[dtype])
    inputs = _inputs(directory, hf, device)
    with torch.no_grad():
        reference, theirs = fp32(**inputs).logits, half(**inputs).logits
        got = ours(**inputs, unpad=unpad).logits
    assert got.shape == reference.shape == (len(TEXTS), 3) and got.device.type == device
    if dtype == "fp32":
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, reference, **TOL)
    else:
        assert_within_half_error(got, theirs, reference, where=f"{family} classifier {run} {dtype} on {device}")


@pytest.fixture(scope="module")
def alignscore_ckpt(tmp_path_factory):
    directory = tmp_path_factory.mktemp("alignscore-devices")
    torch.manual_seed(0)
    path, ref = write_alignscore_ckpt(directory / "AlignScore-tiny.ckpt", "roberta")
    ref["backbone"].save_pretrained(directory / "backbone")
    return path, directory / "backbone", ref


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("run", RUN_PARAMS)
@pytest.mark.parametrize("device", DEVICES)
def test_alignmodel_heads_equal_reference(device, run, dtype, alignscore_ckpt):
    """The three pooled heads (and the MLM head over every real token) of AlignScore's BERTAlignModel."""
    _skip_costly(device, dtype, run, "roberta")
    path, backbone, ref = alignscore_ckpt
    backend, unpad = RUNS[run]
    model = ma.AlignModel.from_pretrained(path, backbone=str(backbone), attn_backend=backend, device=device,
                                          dtype=DTYPES[dtype])
    config = ref["backbone"].config
    torch.manual_seed(1)
    ids, mask = pad_batch(torch.randint(config.pad_token_id + 1, config.vocab_size, (3, 14)), [14, 9, 3],
                          config.pad_token_id)
    ids, mask = ids.to(device), mask.to(device)
    real = mask.bool()

    def reference(dtype_):
        parts = {name: copy.deepcopy(part).to(device=device, dtype=dtype_) for name, part in ref.items()}
        with torch.no_grad():
            base = parts["backbone"](ids, attention_mask=mask)
            pooled = base.pooler_output
            return {"tri": parts["tri_layer"](pooled), "bin": parts["bin_layer"](pooled),
                    "reg": parts["reg_layer"](pooled), "mlm": parts["mlm_head"](base.last_hidden_state)[real]}

    with torch.no_grad():
        out = model(ids, attention_mask=mask, mlm=True, unpad=unpad)
    got = {"tri": out.tri_label_logits, "bin": out.seq_relationship_logits, "reg": out.reg_label_logits,
           "mlm": out.prediction_logits[real]}
    expected = reference(torch.float32)
    if dtype == "fp32":
        for name in got:
            assert torch.isfinite(got[name]).all(), name
            torch.testing.assert_close(got[name], expected[name], **TOL, msg=lambda m, n=name: f"{n}: {m}")
        return
    theirs = reference(DTYPES[dtype])
    for name in got:
        assert_within_half_error(got[name], theirs[name], expected[name], where=f"{name} head {run} {dtype} on {device}")
