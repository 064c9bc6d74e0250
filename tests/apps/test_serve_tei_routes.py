"""TEI's POST /tokenize and /decode against transformers' own tokenizer on the same files (ids, token text, the special
flag, character offsets; decoding with and without special tokens), and GET /metrics in Prometheus' text format, read
back with prometheus-client's own parser: requests, failures, durations, tokens per route and model, batch sizes, queue
length. The service runs in this process, on 127.0.0.1."""

import sys

import pytest
import transformers
from test_serve import call
from test_serve_embed_all import serving

import minialign as ma

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

TEXTS = ["The Eiffel Tower is in Paris.", "", "Unicode: café 東京 😀"]
SERVED = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def url(minilm_dir):
    from minialign.apps.serve import Models

    url, stop = serving(Models(embedder=ma.SentenceEncoder.from_pretrained(minilm_dir),
                               names={"embed": str(minilm_dir)}))
    yield url
    stop()


def test_tokenize_and_decode_as_transformers_tokenizer(url, minilm_dir):
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    status, answer = call(url, "/tokenize", {"inputs": TEXTS})
    assert status == 200 and len(answer) == len(TEXTS)
    for text, tokens in zip(TEXTS, answer):
        expected = tokenizer(text, return_offsets_mapping=True, return_special_tokens_mask=True)
        assert [t["id"] for t in tokens] == expected["input_ids"]
        assert [t["special"] for t in tokens] == [bool(m) for m in expected["special_tokens_mask"]]
        for token, (start, stop), name in zip(tokens, expected["offset_mapping"],
                                              tokenizer.convert_ids_to_tokens(expected["input_ids"])):
            if token["special"]:  # TEI: the token itself, no offsets
                assert (token["text"], token["start"], token["stop"]) == (name, None, None)
            else:  # the input's characters (offsets in characters: "東京" and "😀" are one each)
                assert (token["start"], token["stop"]) == (start, stop) and token["text"] == text[start:stop]
    status, single = call(url, "/tokenize", {"inputs": TEXTS[0], "add_special_tokens": False})
    assert status == 200 and [t["id"] for t in single[0]] == tokenizer(TEXTS[0], add_special_tokens=False)["input_ids"]
    ids = [tokenizer(t)["input_ids"] for t in TEXTS]
    status, texts = call(url, "/decode", {"ids": ids})
    assert status == 200 and texts == [tokenizer.decode(i, skip_special_tokens=True, clean_up_tokenization_spaces=False)
                                       for i in ids]
    status, texts = call(url, "/decode", {"ids": ids[0], "skip_special_tokens": False})
    assert status == 200 and texts == [tokenizer.decode(ids[0], skip_special_tokens=False,
                                                        clean_up_tokenization_spaces=False)]
    assert texts[0].startswith("[CLS] the eiffel tower")
    for path, body, status_wanted, words in (
            ("/tokenize", {"inputs": []}, 400, "`inputs` cannot be empty"),
            ("/tokenize", {"inputs": "x", "model": "other"}, 404, f"'{SERVED}'"),
            ("/tokenize", {"inputs": "x", "prompt_name": "passage"}, 413, "`prompt_name`"),
            ("/decode", {"ids": [101, 10**9]}, 422, "`ids[1]` must be a token id from 0 to 30521"),
            ("/decode", {"ids": [[101], ["a"]]}, 422, "`ids[1][0]`"),
            ("/decode", {"ids": "101"}, 422, "`ids` must be a list")):
        status, error = call(url, path, body)
        assert status == status_wanted and words in error["error"], (body, error)


def test_metrics_count_requests_failures_tokens_and_batches(url, minilm_dir):
    pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    def samples():
        status, text = call(url, "/metrics")
        assert status == 200 and isinstance(text, str)
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    before = samples()
    embed = (("model", SERVED), ("route", "/embed"))
    for _ in range(3):
        assert call(url, "/embed", {"inputs": TEXTS})[0] == 200
    assert call(url, "/embed", {"inputs": 5})[0] == 422  # before any model call: counted under the route's model
    after = samples()

    def grew(name, labels):
        return after.get((name, labels), 0) - before.get((name, labels), 0)

    assert grew("minialign_requests_total", embed) == 4
    assert grew("minialign_request_failures_total", (("error_type", "Validation"), *embed)) == 1
    assert grew("minialign_request_duration_seconds_count", embed) == 4
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    per_request = sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in TEXTS)
    assert grew("minialign_request_tokens_total", embed) == 3 * per_request
    batches = grew("minialign_batch_size_count", (("model", SERVED),))
    assert 1 <= batches <= 3 and grew("minialign_batch_size_sum", (("model", SERVED),)) == 3 * len(TEXTS)
    assert after[("minialign_queue_size", (("model", SERVED),))] == 0  # nothing in flight now
    assert not any(dict(labels).get("route") == "/metrics" for _, labels in after)  # the scrape is not counted


def test_without_prometheus_client_metrics_is_a_503_and_the_rest_serves(minilm_dir, monkeypatch):
    from starlette.testclient import TestClient

    from minialign.apps.serve import Models, Service

    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # not installed: its import fails
    service = Service(Models(embedder=ma.SentenceEncoder.from_pretrained(minilm_dir), names={"embed": "e"}))
    try:
        client = TestClient(service.app())
        answer = client.get("/metrics")
        assert answer.status_code == 503 and "prometheus-client" in answer.json()["error"]
        assert client.post("/embed", json={"inputs": "x"}).status_code == 200
    finally:
        service.close()
