"""TEI's POST /embed_all for an embedding model (--embed): each input's token embeddings, as
SentenceEncoder.encode(output_value="token_embeddings") gives them; with a multi-vector model loaded too, the body's
`model` chooses (serve/tei.py). The service runs in this process, on 127.0.0.1."""

import socket
import threading
import time

import pytest
import torch
from test_serve import call

import minialign as ma

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

TEXTS = ["The Eiffel Tower is in Paris.", "", "Unicode: café 東京 😀"]


def serving(models):
    """(url, stop) of a Service over `models` in this process."""
    import uvicorn

    from minialign.apps.serve import Limits, Service

    service = Service(models, Limits())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(service.app(), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)

    def stop():
        server.should_exit = True
        thread.join(30)
        service.close()

    return f"http://127.0.0.1:{sock.getsockname()[1]}", stop


@pytest.fixture(scope="module")
def embedder(minilm_dir):
    return ma.SentenceEncoder.from_pretrained(minilm_dir)


@pytest.fixture(scope="module")
def multivector(retrieval_dirs):
    return ma.MultiVectorEncoder.from_pretrained(retrieval_dirs["multivector"])


@pytest.fixture(scope="module")
def embed_only(embedder, minilm_dir):
    from minialign.apps.serve import Models

    url, stop = serving(Models(embedder=embedder, names={"embed": str(minilm_dir)}))
    yield url
    stop()


@pytest.fixture(scope="module")
def both(embedder, multivector, minilm_dir, retrieval_dirs):
    from minialign.apps.serve import Models

    url, stop = serving(Models(embedder=embedder, multivector=multivector,
                               names={"embed": str(minilm_dir), "multivector": str(retrieval_dirs["multivector"])}))
    yield url
    stop()


def _equal(answer, expected):
    assert len(answer) == len(expected)
    for got, vectors in zip(answer, expected):
        assert torch.equal(torch.tensor(got).reshape(vectors.shape), vectors)


def test_embed_all_gives_the_embedders_token_embeddings(embed_only, embedder):
    status, answer = call(embed_only, "/embed_all", {"inputs": TEXTS})
    assert status == 200
    _equal(answer, embedder.encode(TEXTS, output_value="token_embeddings"))
    assert [len(rows) for rows in answer] == [len(ids) for ids in embedder.tokenizer.encode_ids(TEXTS).ids]
    status, single = call(embed_only, "/embed_all", {"inputs": TEXTS[0], "model": "anything"})  # one model: not read
    assert status == 200 and single == answer[:1]
    status, queried = call(embed_only, "/embed_all", {"inputs": TEXTS, "prompt_name": "query", "task": "document"})
    assert status == 200 and queried == answer  # all-MiniLM-L6-v2's prompts are "": the same tokens
    status, prompted = call(embed_only, "/embed_all", {"inputs": ["a"], "prompt_name": "nope"})
    assert status == 413 and "`prompt_name`" in prompted["error"]
    status, long = call(embed_only, "/embed_all", {"inputs": ["word " * 300]})
    assert status == 413 and "must have less than 256 tokens" in long["error"]
    status, cut = call(embed_only, "/embed_all", {"inputs": ["word " * 300], "truncate": True})
    assert status == 200 and len(cut[0]) == 256
    status, info = call(embed_only, "/info")
    assert "/embed_all" in info["models"]["embed"]["routes"]


def test_with_both_models_loaded_the_bodys_model_chooses(both, embedder, multivector, minilm_dir, retrieval_dirs):
    tokens = embedder.encode(TEXTS, output_value="token_embeddings")
    vectors = multivector.encode(TEXTS)
    for model, expected in ((None, vectors), ("multivector", vectors), (str(retrieval_dirs["multivector"]), vectors),
                            ("embed", tokens), (str(minilm_dir), tokens), (minilm_dir.name, tokens)):
        status, answer = call(both, "/embed_all", {"inputs": TEXTS, **({"model": model} if model else {})})
        assert status == 200, (model, answer)
        _equal(answer, expected)
    status, answer = call(both, "/embed_all", {"inputs": TEXTS, "model": "other/model"})
    assert status == 404 and "'other/model' is not loaded" in answer["error"] and "embed: 'embed'" in answer["error"]
    status, answer = call(both, "/embed_all", {"inputs": TEXTS, "model": 3})
    assert status == 422 and "`model`" in answer["error"]
    status, info = call(both, "/info")
    assert "/embed_all" in info["models"]["embed"]["routes"] and "/embed_all" in info["models"]["multivector"]["routes"]
