"""loading.calibration_cache: an int8 model loaded again reads its calibration instead of running it, with the same
answers; anything the statistics depend on names another file; a bad file or an unwritable cache costs time only."""

import pytest
import torch

import minialign as ma
from minialign.nn import int8
from minialign.products.runner import Runner
from minialign.loading import calibration_cache

pytestmark = pytest.mark.skipif(not int8.available(), reason="int8 needs FBGEMM on this CPU")
TEXTS = ["The tide came in over the flats before noon.", "A short one.", "Parsers read the file line by line."]


def _files(root):
    return sorted((root / "int8").glob("*.safetensors")) if (root / "int8").exists() else []


def test_a_second_load_reads_the_statistics_and_answers_the_same(minilm_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("MINIALIGN_CACHE_DIR", str(tmp_path))
    first = ma.SentenceEncoder.from_pretrained(minilm_dir, dtype="int8")
    assert len(_files(tmp_path)) == 1
    monkeypatch.setattr(Runner, "calibrate_int8", lambda self, texts: pytest.fail("calibrated again"))
    second = ma.SentenceEncoder.from_pretrained(minilm_dir, dtype="int8")
    for a, b in zip(int8.quantized_layers(first.model), int8.quantized_layers(second.model)):
        assert torch.equal(a.int8_input_absmax, b.int8_input_absmax)
    assert torch.equal(torch.as_tensor(first.encode(TEXTS)), torch.as_tensor(second.encode(TEXTS)))
    assert int8.fingerprint(first.model) == int8.fingerprint(second.model)


def test_what_the_statistics_depend_on_names_another_file(minilm_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("MINIALIGN_CACHE_DIR", str(tmp_path))
    encoder = ma.SentenceEncoder.from_pretrained(minilm_dir, dtype="int8")
    tok = encoder.tokenizer.backend.to_str()
    base = calibration_cache.key(encoder.model, tok, TEXTS, pairs=False, window=256)
    assert calibration_cache.key(encoder.model, tok, TEXTS, pairs=False, window=256) == base
    assert calibration_cache.key(encoder.model, tok, TEXTS, pairs=True, window=256) != base
    assert calibration_cache.key(encoder.model, tok, TEXTS, pairs=False, window=128) != base
    assert calibration_cache.key(encoder.model, tok, TEXTS[:2], pairs=False, window=256) != base
    assert calibration_cache.key(encoder.model, tok + " ", TEXTS, pairs=False, window=256) != base
    from minialign.nn import linear  # the fp32 pass's kernel: another one rounds the statistics otherwise

    with monkeypatch.context() as patched:
        patched.setattr(linear, "cpu_kind", lambda: "DEFAULT")  # F.linear, not the packed kernel
        assert calibration_cache.key(encoder.model, tok, TEXTS, pairs=False, window=256) != base
    assert calibration_cache.key(encoder.model, tok, TEXTS, pairs=False, window=256) == base
    with torch.no_grad():
        next(encoder.model.parameters())[0, 0] += 1.0
    assert calibration_cache.key(encoder.model, tok, TEXTS, pairs=False, window=256) != base


def test_a_bad_file_recalibrates_and_a_read_only_or_disabled_cache_is_skipped(minilm_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("MINIALIGN_CACHE_DIR", str(tmp_path))
    reference = ma.SentenceEncoder.from_pretrained(minilm_dir, dtype="int8").encode(TEXTS)
    (path,) = _files(tmp_path)
    path.write_bytes(path.read_bytes()[:50])  # truncated
    assert torch.equal(torch.as_tensor(ma.SentenceEncoder.from_pretrained(minilm_dir, dtype="int8").encode(TEXTS)),
                       torch.as_tensor(reference))
    assert path.stat().st_size > 50  # written again, whole
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("x")
    monkeypatch.setenv("MINIALIGN_CACHE_DIR", str(blocked))  # int8/ cannot be made under a file
    ma.SentenceEncoder.from_pretrained(minilm_dir, dtype="int8")
    monkeypatch.setenv("MINIALIGN_CACHE_DIR", "none")
    assert calibration_cache.directory() is None
    ma.SentenceEncoder.from_pretrained(minilm_dir, dtype="int8")
