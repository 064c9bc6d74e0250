"""sources.resolve: "path or hub id?" decided once, and a Source that every reader asks for files
(config, weights, tokenizer, sentence-transformers modules, a CrossEncoder's activation). The hub is
a fake Hugging Face cache made in tmp_path, read offline; nothing reaches a network."""

import collections
import shutil

import pytest
import torch

import minialign as ma
from minialign import convert
from minialign.sources import HubUnavailableError, Source, resolve
from minialign.sources import source as source_module
from minialign.text import validation


@pytest.fixture
def offline(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def fake_hub(cache, repo_id, directory):
    """`directory`, folders and all, as huggingface_hub's cache holds a downloaded repo."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    shutil.copytree(directory, repo / "snapshots" / ("0" * 40))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    return repo / "snapshots" / ("0" * 40)


@pytest.fixture
def downloads(monkeypatch):
    """The files asked of huggingface_hub, in order."""
    import huggingface_hub

    asked, real = [], huggingface_hub.hf_hub_download
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda repo, name, **k: asked.append(name) or
                        real(repo, name, **k))
    return asked


@pytest.fixture
def decisions(monkeypatch):
    """Every name resolve decided about ("path or hub id?"), counted."""
    seen = collections.Counter()
    real = source_module.looks_like_path
    monkeypatch.setattr(source_module, "looks_like_path", lambda src: seen.update([src]) or real(src))
    return seen


def test_a_local_directory(minilm_dir):
    source = resolve(minilm_dir)
    assert isinstance(source, Source) and not source.from_hub and not source.is_file
    assert source.path == minilm_dir and str(source) == str(minilm_dir)
    assert {"config.json", "modules.json", "tokenizer.json"} <= set(source.files())
    assert source.file("config.json") == minilm_dir / "config.json"
    assert source.file("1_Pooling/config.json") == minilm_dir / "1_Pooling" / "config.json"
    assert source.file("merges.txt", optional=True) is None
    assert source.present(["vocab.txt", "merges.txt", "tokenizer.json"]) == ["vocab.txt", "tokenizer.json"]
    with pytest.raises(ma.CheckpointError, match="no merges.txt") as missing:  # a checkpoint lacking a file ...
        source.file("merges.txt")
    assert isinstance(missing.value, FileNotFoundError)  # ... is a missing file too
    assert resolve(source) is source  # resolved once: a Source passes through
    assert source.subfolder("1_Pooling").file("config.json") == minilm_dir / "1_Pooling" / "config.json"


def test_a_local_file_and_a_home_path(tmp_path, monkeypatch):
    (tmp_path / "a.ckpt").write_bytes(b"")
    source = resolve(tmp_path / "a.ckpt")
    assert source.is_file and source.files() == [] and source.file("config.json", optional=True) is None
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve("~/a.ckpt").path == tmp_path / "a.ckpt"


@pytest.mark.parametrize("src", ["./nowhere/model", "models/my-bert/v2", "~/nowhere/bert", "weights.safetensors"])
def test_a_missing_path(src, downloads):
    with pytest.raises(FileNotFoundError, match=f"^{src}: no such file or directory$"):
        resolve(src)
    assert not downloads


def test_a_hub_id_offline_with_nothing_cached(tmp_path, offline, downloads):
    with pytest.raises(HubUnavailableError, match=r"'org/not-cached'.*HF_HUB_OFFLINE is set.*Pass a local path"):
        resolve("org/not-cached", cache_dir=tmp_path / "empty")
    assert not downloads  # decided from the cache alone


def test_a_hub_id_from_the_cache(tmp_path, offline, downloads, minilm_dir):
    snapshot = fake_hub(tmp_path / "cache", "org/minilm", minilm_dir)
    source = resolve("org/minilm", cache_dir=tmp_path / "cache")
    assert source.from_hub and source.repo_id == "org/minilm" and str(source) == "org/minilm"
    assert source.path is None and not downloads  # nothing fetched until a reader asks
    assert source.file("config.json") == snapshot / "config.json"
    assert source.path == snapshot and "config.json" in source.files()
    assert source.file("config.json") == snapshot / "config.json"
    assert downloads == ["config.json"]  # asked once
    assert source.file("merges.txt", optional=True) is None  # an optional file the repo lacks: skipped
    with pytest.raises(HubUnavailableError, match="merges.txt is not in the local Hugging Face cache"):
        source.file("merges.txt")
    pooling = source.subfolder("1_Pooling")
    assert pooling.file("config.json") == snapshot / "1_Pooling" / "config.json"
    assert pooling.path == snapshot / "1_Pooling" and str(pooling) == "org/minilm/1_Pooling"
    assert convert.read_pooling(source, "1_Pooling") == convert.read_pooling(minilm_dir / "1_Pooling") == ["mean"]


def test_models_and_tokenizers_from_a_hub_id_offline(tmp_path, offline, minilm_dir):
    fake_hub(tmp_path / "cache", "sentence-transformers/all-MiniLM-L6-v2", minilm_dir)
    enc = ma.Encoder.from_pretrained("sentence-transformers/all-MiniLM-L6-v2", cache_dir=tmp_path / "cache")
    ref = ma.Encoder.from_pretrained(minilm_dir)
    assert all(torch.equal(a, b) for a, b in zip(enc.state_dict().values(), ref.state_dict().values()))
    tok = ma.Tokenizer.from_pretrained("sentence-transformers/all-MiniLM-L6-v2", cache_dir=tmp_path / "cache")
    assert tok("hello")["input_ids"].tolist() == [[101, 7592, 102]]


def test_a_model_offline_not_cached_says_how_to_pass_a_local_path(tmp_path, offline):
    with pytest.raises(FileNotFoundError, match="Pass a local path"):
        ma.Encoder.from_pretrained("org/not-cached-model", cache_dir=tmp_path / "empty")


def test_a_missing_local_model():
    with pytest.raises(FileNotFoundError, match="no such file or directory"):
        ma.Encoder.from_pretrained("./nowhere/model")


def test_readers_take_a_source_or_a_directory(minilm_dir):
    source = resolve(minilm_dir)
    assert convert.read_modules(source) == convert.read_modules(minilm_dir) == [
        ("Transformer", ""), ("Pooling", "1_Pooling"), ("Normalize", "2_Normalize")]
    assert convert.read_sentence_config(source)["max_seq_length"] == 256
    assert convert.find_weights(source) == convert.find_weights(minilm_dir) == minilm_dir / "model.safetensors"
    ckpt = ma.loading.read_checkpoint(source)
    assert ckpt.tokenizer is source and ckpt.tokenizer_dir == minilm_dir
    tokenizer = ma.Tokenizer.from_source(source)
    assert tokenizer("hello")["input_ids"].tolist() == [[101, 7592, 102]]


def test_a_file_is_no_tokenizer(tmp_path):
    (tmp_path / "a.ckpt").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="a.ckpt: no tokenizer.json, vocab.json"):
        ma.Tokenizer.from_pretrained(tmp_path / "a.ckpt")


# -- each loader decides once, and reads every file from that one source -------------------------------------

def test_encoder_tokenizer_and_sentence_encoder_decide_once(tmp_path, offline, minilm_dir, decisions, downloads):
    fake_hub(tmp_path / "cache", "org/minilm", minilm_dir)
    for load in (ma.Encoder.from_pretrained, ma.Tokenizer.from_pretrained, ma.SentenceEncoder.from_pretrained):
        decisions.clear()
        downloads.clear()
        load("org/minilm", cache_dir=tmp_path / "cache")
        assert decisions == {"org/minilm": 1}, load
        assert len(downloads) == len(set(downloads)), downloads  # no file asked twice
    # the sentence-transformers modules came from the same source; files nobody reads never travel
    assert {"modules.json", "1_Pooling/config.json", "sentence_bert_config.json", "config.json",
            "model.safetensors", "tokenizer.json"} <= set(downloads)
    assert not {"README.md", "data_config.json", ".gitattributes"} & set(downloads)


def test_classifier_and_minicheck_decide_once(tmp_path, offline, minilm_dir, minicheck_dir, decisions, downloads):
    from conftest import save_classifier

    save_classifier(tmp_path / "clf", "bert", 2, minilm_dir)
    fake_hub(tmp_path / "cache", "org/clf", tmp_path / "clf")
    fake_hub(tmp_path / "cache", "org/minicheck", minicheck_dir)
    for load, name in ((ma.Classifier.from_pretrained, "org/clf"), (ma.MiniCheckScorer.from_pretrained, "org/minicheck")):
        decisions.clear()
        downloads.clear()
        load(name, cache_dir=tmp_path / "cache")
        assert decisions == {name: 1}
        assert len(downloads) == len(set(downloads)), downloads
        assert "config_sentence_transformers.json" in downloads  # a CrossEncoder's activation, looked for there


def test_alignscorer_decides_once_per_name(tmp_path, offline, tiny_alignscore, decisions, monkeypatch):
    from minialign.products import alignscore

    path, backbone, _ = tiny_alignscore
    cache = tmp_path / "cache"
    fake_hub(cache, "org/tiny-roberta", backbone)
    ma.AlignScorer.from_pretrained(path, backbone="org/tiny-roberta", cache_dir=cache)
    assert decisions == {"org/tiny-roberta": 1}  # config and tokenizer from the one backbone source
    decisions.clear()
    (cache / "models--yzha--AlignScore" / "snapshots" / ("0" * 40)).mkdir(parents=True)
    shutil.copyfile(path, cache / "models--yzha--AlignScore" / "snapshots" / ("0" * 40) / "AlignScore-base.ckpt")
    (cache / "models--yzha--AlignScore" / "refs").mkdir()
    (cache / "models--yzha--AlignScore" / "refs" / "main").write_text("0" * 40)
    monkeypatch.setitem(alignscore.PUBLISHED, "AlignScore-base", ("AlignScore-base.ckpt", "org/tiny-roberta"))
    ma.AlignScorer.from_pretrained("AlignScore-base", cache_dir=cache)
    assert decisions == {"yzha/AlignScore": 1, "org/tiny-roberta": 1}


def test_input_checks_have_their_own_module():
    with pytest.raises(ValueError, match=r"texts\[1\] is None"):
        validation.check_texts("texts", ["a", None])
