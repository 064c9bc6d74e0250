"""Matryoshka truncation and quantized embeddings against sentence-transformers: truncate_dim per model (the
directory's config, the constructor) and per call, before normalize_embeddings; precision= and
quantize_embeddings (ranges, calibration embeddings) equal to sentence-transformers' codes, bit for bit."""

import json

import numpy as np
import pytest
import torch
from test_embedding import TEXTS, _close

import minialign as ma
from minialign.products.quantization import PRECISIONS, pack_bits

MORE = TEXTS + ["another line of text to embed", "short", "a third, longer sentence with several words in it"]


@pytest.fixture(scope="module")
def models(minilm_dir):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_dir), device="cpu"), ma.SentenceEncoder.from_pretrained(minilm_dir)


@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("truncate_dim", [None, 64, 100, 1000])
def test_truncate_dim_per_call_equals_sentence_transformers(models, truncate_dim, normalize):
    reference, emb = models
    expected = reference.encode(MORE, truncate_dim=truncate_dim, normalize_embeddings=normalize)
    got = emb.encode(MORE, truncate_dim=truncate_dim, normalize_embeddings=normalize)
    assert got.shape == expected.shape
    _close(got, expected)
    # MiniLM's pipeline ends in Normalize: truncated without normalize_embeddings, no longer unit length
    norms = got.norm(dim=1)
    unit = normalize or truncate_dim in (None, 1000)
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-5) is unit


def test_truncate_dim_of_the_model_from_its_config_and_from_the_constructor(tmp_path, minilm_dir):
    import shutil

    from sentence_transformers import SentenceTransformer

    directory = tmp_path / "matryoshka"
    shutil.copytree(minilm_dir, directory)
    config = json.loads((directory / "config_sentence_transformers.json").read_text())
    (directory / "config_sentence_transformers.json").write_text(json.dumps({**config, "truncate_dim": 48}))
    reference, emb = SentenceTransformer(str(directory), device="cpu"), ma.SentenceEncoder.from_pretrained(directory)
    assert emb.truncate_dim == reference.truncate_dim == 48
    assert emb.dimension == reference.get_embedding_dimension() == 48
    _close(emb.encode(MORE), reference.encode(MORE))
    _close(emb.encode(MORE, truncate_dim=32), reference.encode(MORE, truncate_dim=32))
    assert emb.encode("one text").shape == (48,) and emb.encode([]).shape == (0, 48)
    assert ma.SentenceEncoder.from_pretrained(directory, truncate_dim=16).encode(MORE).shape == (len(MORE), 16)
    assert ma.SentenceEncoder.from_pretrained(directory, truncate_dim=16).settings()["truncate_dim"] == 16
    (directory / "config_sentence_transformers.json").write_text(json.dumps({**config, "truncate_dim": -1}))
    with pytest.raises(ma.CheckpointError, match="config_sentence_transformers.json: truncate_dim must be a positive"):
        ma.SentenceEncoder.from_pretrained(directory)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_precision_codes_equal_sentence_transformers(models, precision):
    reference, emb = models
    expected = reference.encode(MORE, precision=precision, normalize_embeddings=True)
    got = emb.encode(MORE, precision=precision, normalize_embeddings=True)
    assert str(got.dtype).removeprefix("torch.") == str(expected.dtype) and got.shape == expected.shape
    if precision == "float32":
        _close(got, expected)
    else:  # codes: every one equal (the embeddings agree to ~1e-7; a code on a bucket's edge could differ by one)
        assert np.abs(got.numpy().astype(np.int16) - expected.astype(np.int16)).max() <= 1
        assert (got.numpy() == expected).mean() >= 0.99


@pytest.mark.parametrize("precision", ["int8", "uint8", "binary", "ubinary"])
def test_quantize_embeddings_is_sentence_transformers_arithmetic_bit_for_bit(precision):
    """The same float32 input, both quantizers: every code equal, with the ranges from the embeddings, from
    calibration embeddings and given; widths that are not a multiple of 8 for the binary packings."""
    from sentence_transformers.quantization import quantize_embeddings

    g = torch.Generator().manual_seed(0)
    for width in (16, 13):
        x = torch.randn(20, width, generator=g)
        x[:, 0] = 0.25  # a constant dimension: a zero step counts as 1
        calibration = torch.randn(50, width, generator=g) * 0.5
        ranges = torch.tensor([[-1.0] * width, [1.0] * width])
        for kwargs in ({}, {"calibration_embeddings": calibration}, {"ranges": ranges}):
            if precision.endswith("binary") and kwargs:
                continue
            theirs = quantize_embeddings(x.numpy(), precision,
                                         **{k: v.numpy() for k, v in kwargs.items()})
            ours = ma.quantize_embeddings(x, precision, **kwargs)
            assert np.array_equal(ours.numpy(), theirs), (width, kwargs)


def test_quantized_codes_with_fixed_ranges_do_not_depend_on_the_batch(models, minilm_dir):
    """Ranges from the batch make a text's int8 code depend on the other texts (as in sentence-transformers);
    ranges or calibration embeddings given make it the same alone and batched."""
    _, emb = models
    calibration = emb.encode(MORE)
    alone = emb.encode(MORE[0], precision="int8", calibration_embeddings=calibration)
    batched = emb.encode(MORE, precision="int8", calibration_embeddings=calibration)
    assert torch.equal(alone, batched[0])
    assert not torch.equal(emb.encode(MORE[:2], precision="int8")[0], emb.encode(MORE, precision="int8")[0])


def test_pack_bits_is_numpy_packbits():
    bits = torch.rand(7, 21, generator=torch.Generator().manual_seed(1)) > 0.5
    assert np.array_equal(pack_bits(bits).numpy(), np.packbits(bits.numpy(), axis=-1))


def test_bad_options_are_named(models):
    _, emb = models
    with pytest.raises(ValueError, match="precision 'int4' is not supported"):
        emb.encode(MORE, precision="int4")
    with pytest.raises(ValueError, match="truncate_dim must be a positive integer"):
        emb.encode(MORE, truncate_dim=0)
    with pytest.raises(ValueError, match="from a single embedding"):
        emb.encode("one text", precision="int8")
    with pytest.raises(ValueError, match=r"ranges must have shape \(2, 384\)"):
        emb.encode(MORE, precision="uint8", ranges=torch.zeros(2, 3))
    with pytest.raises(ValueError, match="must be floating point"):
        ma.quantize_embeddings(torch.zeros(2, 3, dtype=torch.int8), "binary")
    assert emb.encode([], precision="ubinary").shape == (0, 48)
