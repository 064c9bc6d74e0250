"""Sources: what is a local path and what a hub id, and a hub that cannot be reached."""

import pytest

import minialign as ma


def test_misspelt_local_paths_are_paths(tmp_path):
    for src in ("models/my-bert/v2", "./my-bert", "~/nowhere/bert", "weights.safetensors", "C:\\models\\bert"):
        with pytest.raises(FileNotFoundError, match="no such"):
            ma.Encoder.from_pretrained(src)


def test_unreachable_hub_fails_fast_from_the_cache(tmp_path, monkeypatch):
    """Not offline, but nothing answers: one refused connection on loopback, then the cache only. With
    nothing cached, resolve says so before any download is tried; with the repo cached but not the
    file, the file is looked for in the cache only."""
    import socket

    import huggingface_hub
    from huggingface_hub import constants

    from minialign.sources import hub

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    hub.hub_reachable.cache_clear()
    calls = []
    real = huggingface_hub.hf_hub_download
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda *a, **k: calls.append(k) or real(*a, **k))
    message = "cannot be reached from this machine; set HF_HUB_OFFLINE=1"
    try:
        with pytest.raises(FileNotFoundError, match=message):
            ma.Encoder.from_pretrained("org/some-model", cache_dir=tmp_path / "cache")
        assert not calls
        repo = tmp_path / "cache" / "models--org--some-model"
        (repo / "snapshots" / ("0" * 40)).mkdir(parents=True)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text("0" * 40)
        with pytest.raises(FileNotFoundError, match=f"config.json is not in the local Hugging Face cache.*{message}"):
            ma.Encoder.from_pretrained("org/some-model", cache_dir=tmp_path / "cache")
    finally:
        hub.hub_reachable.cache_clear()
    assert calls and all(k["local_files_only"] for k in calls)
