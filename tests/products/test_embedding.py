"""SentenceEncoder.encode against SentenceTransformer.encode: the real all-MiniLM-L6-v2, and tiny
random BERT / RoBERTa sentence-transformers directories built here for every pooling mode, with a
Dense and a Normalize module."""

import json
import shutil

import pytest
import torch
from conftest import hf_model

import minialign as ma

TEXTS = ["The Eiffel Tower is in Paris.", "", "Unicode: café naïve 東京 😀 — “quotes”", "word " * 300,
         "Short.", "The Eiffel Tower is in Paris.", "the minister said on monday that the company grew"]


def _close(got, expected):
    expected = torch.as_tensor(expected)
    assert got.shape == expected.shape and got.dtype == torch.float32
    assert (got - expected).abs().max() <= 1e-5
    assert torch.nn.functional.cosine_similarity(got, expected).min() >= 0.99999


def test_minilm_equals_sentence_transformers(minilm_dir):
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(minilm_dir), device="cpu")
    emb = ma.SentenceEncoder.from_pretrained(minilm_dir)
    assert emb.max_seq_length == 256 and emb.dimension == 384 and emb.normalize  # its sentence_bert_config
    _close(emb.encode(TEXTS), reference.encode(TEXTS))
    _close(emb.encode(TEXTS, batch_size=2), reference.encode(TEXTS, batch_size=2))


def test_minilm_gives_a_text_the_same_bits_alone_and_in_any_batch(minilm_dir):
    """The real model on real row counts: batches of hundreds of tokens (where a kernel chosen by row count
    would differ, nn/linear.py) and a text alone give each text the same bits, in any order and batch size."""
    emb = ma.SentenceEncoder.from_pretrained(minilm_dir)
    texts = [t for t in TEXTS if t] + [f"sentence {i}: " + "more words here " * i for i in range(1, 12)]
    together = emb.encode(texts, warn_truncation=False)
    for i, text in enumerate(texts):
        assert torch.equal(emb.encode([text], warn_truncation=False)[0], together[i]), i
    order = torch.randperm(len(texts), generator=torch.Generator().manual_seed(0)).tolist()
    shuffled = emb.encode([texts[i] for i in order], batch_size=5, warn_truncation=False)
    assert torch.equal(shuffled, together[order])


def tiny_st_dir(tmp_path, arch, tokenizer_dir, modes, *, dense=False, normalize=False, max_seq_length=24):
    """A tiny random transformers model with a real tokenizer, wrapped as a sentence-transformers dir."""
    from sentence_transformers import SentenceTransformer, models

    vocab = len(json.loads((tokenizer_dir / "vocab.json").read_text())) if arch == "roberta" else 30522
    hf = hf_model(arch, "base", vocab_size=vocab, max_position_embeddings=66 if arch == "roberta" else 64)
    base = tmp_path / f"hf-{arch}"
    hf.save_pretrained(base)
    for f in tokenizer_dir.iterdir():
        if f.is_file() and f.name in ("vocab.txt", "vocab.json", "merges.txt", "tokenizer.json", "special_tokens_map.json"):
            shutil.copyfile(f, base / f.name)
    (base / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 64}))
    transformer = models.Transformer(str(base), max_seq_length=max_seq_length)
    modules = [transformer, models.Pooling(transformer.get_word_embedding_dimension(), pooling_mode=modes)]
    if dense:
        modules.append(models.Dense(modules[-1].get_sentence_embedding_dimension(), 10))
    if normalize:
        modules.append(models.Normalize())
    directory = tmp_path / f"st-{arch}"
    SentenceTransformer(modules=modules, device="cpu").save(str(directory))
    return directory, base


@pytest.mark.parametrize("arch", ["bert", "roberta"])
@pytest.mark.parametrize("modes,dense,normalize", [
    ("cls", False, False), ("max", False, False), ("mean", True, True), ("mean_sqrt_len_tokens", False, False),
    ("weightedmean", True, False), ("lasttoken", False, True), (("cls", "mean", "max"), True, True)])
def test_tiny_models_every_pooling_mode(tmp_path, arch, modes, dense, normalize, minilm_dir, bpe_dir):
    from sentence_transformers import SentenceTransformer

    directory, _ = tiny_st_dir(tmp_path, arch, minilm_dir if arch == "bert" else bpe_dir, modes,
                               dense=dense, normalize=normalize)
    reference = SentenceTransformer(str(directory), device="cpu")
    emb = ma.SentenceEncoder.from_pretrained(directory)
    assert emb.max_seq_length == 24 and emb.dimension == reference.get_sentence_embedding_dimension()
    together = emb.encode(TEXTS, batch_size=3)
    _close(together, reference.encode(TEXTS, batch_size=3))
    # a text alone: the same bits (the Dense layer a Linear whose rows do not depend on their count)
    assert all(torch.equal(emb.encode([text])[0], together[i]) for i, text in enumerate(TEXTS))
    normalized = emb.encode(TEXTS[:2], normalize_embeddings=True)
    torch.testing.assert_close(normalized.norm(dim=1), torch.ones(2))


def test_plain_transformers_dir_pools_by_mean(tmp_path, bpe_dir):
    from sentence_transformers import SentenceTransformer

    _, base = tiny_st_dir(tmp_path, "roberta", bpe_dir, "mean")
    emb = ma.SentenceEncoder.from_pretrained(base)
    assert emb.pooling == ["mean"] and not emb.dense and not emb.normalize
    _close(emb.encode(TEXTS), SentenceTransformer(str(base), device="cpu").encode(TEXTS))


def test_legacy_pooling_flags_and_lowercase(tmp_path, minilm_dir):
    """Files as sentence-transformers v2 wrote them: pooling_mode_* flags (concatenated in its order)
    and sentence_bert_config.json with max_seq_length and do_lower_case."""
    from sentence_transformers import SentenceTransformer

    directory, _ = tiny_st_dir(tmp_path, "bert", minilm_dir, ("mean", "cls"))
    pooling = directory / "1_Pooling" / "config.json"
    pooling.write_text(json.dumps({"word_embedding_dimension": 36, "pooling_mode_cls_token": True,
                                   "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False}))
    (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 16, "do_lower_case": True}))
    emb = ma.SentenceEncoder.from_pretrained(directory)
    assert emb.pooling == ["cls", "mean"] and emb.max_seq_length == 16
    reference = SentenceTransformer(str(directory), device="cpu")
    texts = ["MiXeD CaSe TeXt", "ÉCOLE Été", *TEXTS]
    _close(emb.encode(texts), reference.encode(texts))


def test_unsupported_module_is_named(tmp_path, minilm_dir):
    directory, _ = tiny_st_dir(tmp_path, "bert", minilm_dir, "mean")
    modules = json.loads((directory / "modules.json").read_text())
    modules.append({"idx": 9, "name": "9", "path": "9_Custom", "type": "my_package.MyLayer"})
    (directory / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ma.CheckpointError, match=r"my_package\.MyLayer.*supported: Transformer, Pooling, Dense, Normalize"):
        ma.SentenceEncoder.from_pretrained(directory)


def test_bad_input(minilm_dir, monkeypatch):
    emb = ma.SentenceEncoder.from_pretrained(minilm_dir)
    assert emb.encode([]).shape == (0, 384)
    monkeypatch.setattr(emb.encoder, "forward", lambda *a, **k: pytest.fail("model ran"))
    with pytest.raises(ValueError, match=r"texts\[1\] is None; texts\[2\] holds a lone surrogate"):
        emb.encode(["fine", None, "\udc80"])
    with pytest.raises(ValueError, match="sequence of strings"):
        emb.encode(42)
    with pytest.raises(ValueError, match=r"texts\[0\] holds a lone surrogate"):  # one string: checked the same
        emb.encode("\udc80")


def test_hub_id_with_sentence_transformers_files(tmp_path, minilm_dir, monkeypatch):
    """A sentence-transformers repo from the hub cache (offline): its modules come with it."""
    from huggingface_hub import constants

    directory, _ = tiny_st_dir(tmp_path, "bert", minilm_dir, ("cls", "mean"), dense=True, normalize=True)
    snapshot = tmp_path / "cache" / "models--org--tiny-st" / "snapshots" / ("0" * 40)
    shutil.copytree(directory, snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    from_hub = ma.SentenceEncoder.from_pretrained("org/tiny-st", cache_dir=tmp_path / "cache")
    local = ma.SentenceEncoder.from_pretrained(directory)
    assert from_hub.pooling == ["cls", "mean"] and len(from_hub.dense) == 1 and from_hub.normalize
    torch.testing.assert_close(from_hub.encode(TEXTS), local.encode(TEXTS), atol=0, rtol=0)
