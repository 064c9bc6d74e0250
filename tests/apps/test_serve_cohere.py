"""Cohere's rerank API (serve/cohere.py) driven by cohere's own client, unchanged: ClientV2.rerank (POST /v2/rerank)
and Client.rerank (POST /v1/rerank), against sentence-transformers' CrossEncoder on the same tiny reranker; Jina's
rerank body on /v1/rerank; errors in Cohere's shape. The service runs in this process, on 127.0.0.1."""

import pytest
import torch
import transformers
from conftest import save_classifier
from test_serve import call
from test_serve_embed_all import serving

import minialign as ma

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
cohere = pytest.importorskip("cohere")

QUERY = "Where is the Eiffel Tower?"
DOCUMENTS = ["The Eiffel Tower is in Paris.", "Bananas are yellow.", "", "Unicode: café 東京 😀",
             "Paris is the capital of France. " * 30]


@pytest.fixture(scope="module")
def reranker_dir(tmp_path_factory, minilm_dir):
    directory = tmp_path_factory.mktemp("cohere") / "reranker"
    save_classifier(directory, "bert", 1, minilm_dir)
    return directory


@pytest.fixture(scope="module")
def expected(reranker_dir):
    """sentence-transformers' CrossEncoder scores (its default activation for one label: sigmoid)."""
    from sentence_transformers import CrossEncoder

    encoder = CrossEncoder(str(reranker_dir), device="cpu")
    return lambda documents: encoder.predict([(QUERY, d) for d in documents], convert_to_tensor=True).float()


@pytest.fixture(scope="module")
def url(reranker_dir, minilm_dir):
    from minialign.apps.serve import Models

    models = Models(classifier=ma.Classifier.from_pretrained(reranker_dir),
                    embedder=ma.SentenceEncoder.from_pretrained(minilm_dir),
                    names={"classify": str(reranker_dir), "embed": str(minilm_dir)},
                    served={"classify": "rerank-tiny"})
    url, stop = serving(models)
    yield url
    stop()


def _ranked(scores: torch.Tensor, top_n=None):
    order = sorted(range(len(scores)), key=lambda i: -scores[i].item())
    return order[:top_n] if top_n is not None else order


def test_cohere_client_v2_reranks_as_the_cross_encoder(url, expected, reranker_dir):
    client = cohere.ClientV2(base_url=url, api_key="unused")
    answer = client.rerank(model="rerank-tiny", query=QUERY, documents=DOCUMENTS, top_n=3)
    scores = expected(DOCUMENTS)
    assert [r.index for r in answer.results] == _ranked(scores, 3)
    for r in answer.results:
        assert abs(r.relevance_score - scores[r.index].item()) <= 1e-5
    assert len(client.rerank(model="rerank-tiny", query=QUERY, documents=DOCUMENTS, top_n=50).results) == 5
    # max_tokens_per_doc: each document cut after its N-th token, scored as the cut text
    cut = client.rerank(model="rerank-tiny", query=QUERY, documents=DOCUMENTS, max_tokens_per_doc=4)
    tokenizer = transformers.AutoTokenizer.from_pretrained(reranker_dir)
    offsets = [tokenizer(d, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"] for d in DOCUMENTS]
    shorter = [d[:o[3][1]] if len(o) > 4 else d for d, o in zip(DOCUMENTS, offsets)]
    assert shorter[0] == "The Eiffel" and shorter[4] == "Paris is the capital"  # 4 wordpieces each
    cut_scores = expected(shorter)
    assert {r.index: pytest.approx(r.relevance_score, abs=1e-5) for r in cut.results} == \
        {i: s for i, s in enumerate(cut_scores.tolist())}
    with pytest.raises(cohere.NotFoundError) as e:  # a name it is not served by: 404 listing the names
        client.rerank(model="rerank-v3.5", query=QUERY, documents=DOCUMENTS)
    assert "'rerank-tiny'" in e.value.body["message"]
    with pytest.raises(cohere.UnprocessableEntityError) as e:
        client.rerank(model="rerank-tiny", query=QUERY, documents=DOCUMENTS, top_n=0)
    assert "`top_n`" in e.value.body["message"]


def test_cohere_client_v1_returns_documents_as_sent(url, expected):
    client = cohere.Client(base_url=url, api_key="unused")
    documents = [{"text": d, "id": f"doc-{i}"} for i, d in enumerate(DOCUMENTS)]
    answer = client.rerank(query=QUERY, documents=documents, top_n=2, return_documents=True)
    scores = expected(DOCUMENTS)
    assert [r.index for r in answer.results] == _ranked(scores, 2)
    for r in answer.results:
        assert abs(r.relevance_score - scores[r.index].item()) <= 1e-5
        assert r.document.text == DOCUMENTS[r.index] and r.document.id == f"doc-{r.index}"  # its other fields kept
    plain = client.rerank(query=QUERY, documents=DOCUMENTS, model="rerank-tiny")  # Cohere's default: no documents
    assert [r.index for r in plain.results] == _ranked(scores) and all(r.document is None for r in plain.results)
    with pytest.raises(cohere.UnprocessableEntityError) as e:
        client.rerank(query=QUERY, documents=documents, rank_fields=["id"])
    assert "`rank_fields`" in e.value.body["message"]


def test_jina_s_rerank_body_and_errors_in_cohere_s_shape(url, expected):
    """Jina's body on /v1/rerank: its answer's fields (model, usage.total_tokens, results with their document)."""
    status, answer = call(url, "/v1/rerank", {"model": "rerank-tiny", "query": QUERY, "documents": DOCUMENTS[:2],
                                              "top_n": 1, "return_documents": True})
    assert status == 200 and answer["model"] == "rerank-tiny" and len(answer["results"]) == 1
    best = _ranked(expected(DOCUMENTS[:2]), 1)[0]
    assert answer["results"][0]["index"] == best and answer["results"][0]["document"] == {"text": DOCUMENTS[best]}
    assert answer["usage"]["total_tokens"] > 0
    tiny = {"model": "rerank-tiny", "query": QUERY}
    for path, body, status_wanted, words in (
            ("/v2/rerank", {"query": QUERY, "documents": ["a"]}, 422, "`model` is missing"),
            ("/v2/rerank", {**tiny, "documents": []}, 400, "`documents` cannot be empty"),
            ("/v2/rerank", {**tiny, "documents": [{"text": "a"}]}, 422, "`documents[0]`"),
            ("/v1/rerank", {"query": QUERY, "documents": [{"title": "a"}]}, 422, "`documents[0].text` is missing"),
            ("/v1/rerank", {"query": QUERY, "documents": ["a"], "max_chunks_per_doc": 3}, 422, "max_chunks_per_doc"),
            ("/v1/rerank", {"query": None, "documents": ["a"]}, 422, "`query` is null"),
            ("/v2/rerank", {**tiny, "documents": ["a"], "max_tokens_per_doc": "4"}, 422, "`max_tokens_per_doc`")):
        status, error = call(url, path, body)
        assert status == status_wanted and set(error) == {"message"} and words in error["message"], (body, error)
    status, error = call(url, "/v2/rerank", raw=b"not json")
    assert status == 422 and set(error) == {"message"} and "not JSON" in error["message"]
