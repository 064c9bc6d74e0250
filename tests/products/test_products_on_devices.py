"""The products on every device this machine has (conftest.DEVICES: the CPU, and CUDA where there is one,
marked `cuda` for scripts/gpu_suite.sh), in fp32 and bf16, each against the reference its CPU tests use,
run on the same device:

  SentenceEncoder  SentenceTransformer.encode (every family)
  Classifier       CrossEncoder.predict and rerank (every family)
  AlignScorer      the original AlignScore pipeline (scripts/original_alignscore.py), every mode kind
  MiniCheckScorer  the MiniCheck re-implementation of tests/products/test_minicheck.py

fp32 within 1e-5 (TF32 off); bf16 within 3x the reference's own bf16 error (conftest.assert_within_half_error).
On the CPU, tests/products/test_family_products.py already runs every family; here the CPU runs two of them."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import transformers
from conftest import CLAIMS, CORPUS, DEVICES, DTYPES, assert_within_half_error
from family_builders import every_family_params
from original_alignscore import OriginalAlignScore
from test_minicheck import DOCS, ReferenceMiniCheck

import minialign as ma

TOL = dict(atol=1e-5, rtol=0)
PRODUCT_DTYPES = ["fp32", "bf16"]
CPU_FAMILIES = ("bert", "modernbert")
TEXTS = ["The Eiffel Tower is in Paris.", "", "Unicode: café naïve 東京 😀 — “quotes”", "word " * 300, "Short.",
         "La tour a été construite à Paris en 1889."]
PAIRS = [("The tower was built in Paris.", "It is in France."), ("A short one.", "Tiny."),
         ("Unicode: café naïve 東京 😀 — “quotes”", "Numbers 3.14 and $5,000."),
         ("the minister said " * 40, "a long first text, cut by the window")]


def _skip_cpu_family(device, family):
    if device == "cpu" and family not in CPU_FAMILIES:
        pytest.skip("every family runs on the CPU in tests/products/test_family_products.py")


def _judge(got, theirs, reference, dtype, where):
    got, theirs, reference = (torch.as_tensor(t).float().cpu() for t in (got, theirs, reference))
    if dtype == "fp32":
        assert torch.isfinite(got).all(), f"{where}: non-finite values"
        torch.testing.assert_close(got, reference, **TOL)
    else:
        assert_within_half_error(got, theirs, reference, where=where, half=DTYPES[dtype])


@pytest.mark.parametrize("dtype", PRODUCT_DTYPES)
@pytest.mark.parametrize("family", every_family_params())
@pytest.mark.parametrize("device", DEVICES)
def test_sentence_encoder(device, family, dtype, tiny_family):
    from sentence_transformers import SentenceTransformer

    _skip_cpu_family(device, family)
    directory = tiny_family.sentence_transformers(family)
    reference = SentenceTransformer(str(directory), device=device)
    ours = ma.SentenceEncoder.from_pretrained(directory, device=device, dtype=DTYPES[dtype])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the long text is cut, as sentence-transformers cuts it
        got = ours.encode(TEXTS, batch_size=4)
        expected = reference.encode(TEXTS, batch_size=4, convert_to_tensor=True)
        theirs = expected if dtype == "fp32" else \
            copy.deepcopy(reference).to(DTYPES[dtype]).encode(TEXTS, batch_size=4, convert_to_tensor=True)
    assert got.shape == expected.shape
    _judge(got, theirs, expected, dtype, f"{family} embeddings {dtype} on {device}")


@pytest.mark.parametrize("dtype", PRODUCT_DTYPES)
@pytest.mark.parametrize("family", every_family_params())
@pytest.mark.parametrize("device", DEVICES)
def test_classifier_predict_and_rerank(device, family, dtype, tiny_family):
    from sentence_transformers import CrossEncoder

    _skip_cpu_family(device, family)
    directory, _ = tiny_family.classifier(family, 1)
    reference = CrossEncoder(str(directory), device=device)
    ours = ma.Classifier.from_pretrained(directory, device=device, dtype=DTYPES[dtype])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the long pair is cut by the window on both sides
        got = ours.predict(*map(list, zip(*PAIRS)))
        expected = torch.as_tensor(reference.predict(PAIRS))
        if dtype == "fp32":
            theirs = expected
        else:
            reference.model.to(DTYPES[dtype])
            theirs = torch.as_tensor(reference.predict(PAIRS, convert_to_tensor=True).float().cpu())
    _judge(got, theirs, expected, dtype, f"{family} cross-encoder {dtype} on {device}")
    if dtype == "fp32":
        ranked = ours.rerank(PAIRS[0][0], [b for _, b in PAIRS])
        scores = torch.as_tensor(CrossEncoder(str(directory), device=device).predict(
            [(PAIRS[0][0], b) for _, b in PAIRS]))
        assert [i for i, _ in ranked] == sorted(range(len(PAIRS)), key=lambda i: -scores[i])


@pytest.mark.parametrize("dtype", PRODUCT_DTYPES)
@pytest.mark.parametrize("mode", ["nli_sp", "bin", "reg_sp"])
@pytest.mark.parametrize("device", DEVICES)
def test_alignscorer_equals_original(device, mode, dtype, tiny_alignscore):
    path, backbone, ref = tiny_alignscore
    tokenizer = transformers.AutoTokenizer.from_pretrained(backbone, tokenizer_type="roberta")
    contexts, claims = map(list, zip(*CORPUS))

    def original(dtype_):
        parts = {name: copy.deepcopy(part).to(device=device, dtype=dtype_) for name, part in ref.items()}
        return OriginalAlignScore(parts, tokenizer, mode, ma.split_sentences).score(contexts, claims)

    scorer = ma.AlignScorer.from_pretrained(path, backbone=str(backbone), mode=mode, batch_size=4, device=device,
                                            dtype=DTYPES[dtype])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CORPUS has a claim longer than the window
        got = scorer.score(contexts, claims)
    expected = original(torch.float32)
    theirs = expected if dtype == "fp32" else original(DTYPES[dtype])
    _judge(got, theirs, expected, dtype, f"AlignScorer {mode} {dtype} on {device}")


@pytest.mark.parametrize("dtype", PRODUCT_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_minicheck_equals_reference(device, dtype, minicheck_dir):
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(minicheck_dir).eval()
    tok = transformers.AutoTokenizer.from_pretrained(minicheck_dir)

    def reference(dtype_):
        model = copy.deepcopy(hf).to(device=device, dtype=dtype_)
        return [ReferenceMiniCheck(model, tok, ma.split_sentences).score(d, c)[0] for d, c in zip(DOCS, CLAIMS)]

    scorer = ma.MiniCheckScorer.from_pretrained(minicheck_dir, batch_size=3, device=device, dtype=DTYPES[dtype])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one document's sentence is cut by the window
        got = scorer.score(DOCS, CLAIMS)
    expected = reference(torch.float32)
    theirs = expected if dtype == "fp32" else reference(DTYPES[dtype])
    _judge(got, theirs, expected, dtype, f"MiniCheck {dtype} on {device}")
