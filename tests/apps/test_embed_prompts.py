"""Prompts on the faces: TEI's `prompt_name` on POST /embed and /similarity (and in GET /info), and
`minialign embed --prompt-name / --prompt` with the prompt recorded for --resume. The model is the real
all-MiniLM-L6-v2 with prompts added to its config_sentence_transformers.json."""

import asyncio
import json
import os
import shutil
import socket
import threading
import time

import pytest
import torch
from test_serve import call

import minialign as ma
from minialign.apps.cli import main as cli

PROMPTS = {"query": "query: ", "passage": "passage: ", "long": "word " * 50}
TEXTS = ["The Eiffel Tower is in Paris.", "Unicode: café 東京 😀"]


@pytest.fixture(scope="module")
def prompted_dir(minilm_dir, tmp_path_factory):
    """all-MiniLM-L6-v2 (its files linked, not copied) with prompts and the default "passage"."""
    directory = tmp_path_factory.mktemp("prompted") / "minilm"
    shutil.copytree(minilm_dir, directory, copy_function=os.symlink)
    config = directory / "config_sentence_transformers.json"
    config.unlink()  # a link to the installed package's file: replaced, never written through
    config.write_text(json.dumps({"prompts": PROMPTS, "default_prompt_name": "passage"}))
    return directory


@pytest.fixture(scope="module")
def embedder(prompted_dir):
    return ma.SentenceEncoder.from_pretrained(prompted_dir)


@pytest.fixture(scope="module")
def service_url(embedder):
    """The service in this process, on 127.0.0.1."""
    import uvicorn

    from minialign.apps.serve import Limits, Models, Service

    service = Service(Models(embedder=embedder, names={"embed": "prompted"}), Limits())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(service.app(), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(30)


def _normalized(vectors):
    return torch.nn.functional.normalize(vectors, dim=1)


def test_embed_prompt_name_equals_encode(service_url, embedder):
    for body, kwargs in [({"prompt_name": "query"}, {"prompt_name": "query"}), ({}, {}),  # {}: the default
                         ({"prompt_name": None}, {}), ({"prompt_name": "document"}, {"prompt": ""})]:
        status, got = call(service_url, "/embed", {"inputs": TEXTS, **body})
        assert status == 200
        torch.testing.assert_close(torch.tensor(got), _normalized(embedder.encode(TEXTS, **kwargs)), atol=1e-6, rtol=0)
    query, passage = (call(service_url, "/embed", {"inputs": TEXTS[0], "prompt_name": name})[1]
                      for name in ("query", "passage"))
    assert torch.tensor(query).sub(torch.tensor(passage)).abs().max() > 1e-3  # the prompt is applied
    status, root = call(service_url, "/", {"inputs": TEXTS[0], "prompt_name": "query"})  # POST /: /embed's body
    assert status == 200 and root == query
    status, similarity = call(service_url, "/similarity", {"inputs": {"source_sentence": TEXTS[0], "sentences": TEXTS},
                                                          "parameters": {"prompt_name": "query"}})
    vectors = embedder.encode(TEXTS, prompt_name="query")
    expected = torch.nn.functional.cosine_similarity(vectors[:1], vectors)
    assert status == 200 and max(abs(a - b) for a, b in zip(similarity, expected.tolist())) <= 1e-5
    status, info = call(service_url, "/info")
    assert status == 200 and info["default_prompt_name"] == "passage"
    assert info["prompts"] == {"query": "query: ", "document": "", "passage": "passage: ", "long": PROMPTS["long"]}


def test_embed_bad_prompt_names(service_url):
    status, body = call(service_url, "/embed", {"inputs": TEXTS, "prompt_name": "nope"})
    assert status == 413 and body["error_type"] == "Validation"  # TEI's status and shape for an unknown name
    assert body["error"].startswith("Input validation error: `prompt_name`: prompt name 'nope' is not one of")
    assert "['query', 'document', 'passage', 'long']" in body["error"]
    status, body = call(service_url, "/similarity", {"inputs": {"source_sentence": "a", "sentences": ["b"]},
                                                     "parameters": {"prompt_name": "nope"}})
    assert status == 413 and "`parameters.prompt_name`" in body["error"]
    status, body = call(service_url, "/embed", {"inputs": TEXTS, "prompt_name": 5})
    assert status == 422 and body == {"error": "`prompt_name` must be a string, got int", "error_type": "Validation"}
    text = "word " * 220  # fits the 256-token window alone; with the 50-word prompt it does not
    assert call(service_url, "/embed", {"inputs": text, "prompt_name": "query"})[0] == 200
    status, body = call(service_url, "/embed", {"inputs": text, "prompt_name": "long"})
    assert status == 413 and "must have less than 256 tokens. Given: 272" in body["error"]
    assert call(service_url, "/embed", {"inputs": text, "prompt_name": "long", "truncate": True})[0] == 200


def test_requests_with_different_prompts_share_a_model_call(embedder):
    """Merged requests with different prompts: one call, each text under its own request's prompt."""
    from minialign.apps.serve import Limits, Models, Service, tei

    service = Service(Models(embedder=embedder), Limits(max_wait_ms=100))
    bodies = [{"inputs": TEXTS, "prompt_name": "query"}, {"inputs": TEXTS},
              {"inputs": TEXTS[:1], "prompt_name": "query"}, {"inputs": TEXTS, "prompt_name": "document", "normalize": False}]

    async def requests():
        return await asyncio.gather(*[tei.embed(service, body) for body in bodies])

    try:
        calls = service.batchers["embed"].calls
        answers = asyncio.run(requests())
        assert service.batchers["embed"].calls - calls == 1
    finally:
        service.close()
    expected = [_normalized(embedder.encode(TEXTS, prompt_name="query")), _normalized(embedder.encode(TEXTS)),
                _normalized(embedder.encode(TEXTS[:1], prompt_name="query")), embedder.encode(TEXTS, prompt="")]
    for answer, vectors in zip(answers, expected):
        torch.testing.assert_close(torch.tensor(answer), vectors, atol=1e-6, rtol=0)


def test_cli_prompt_flags_and_resume(tmp_path, prompted_dir, embedder, capsys):
    texts = [f"text number {i}" for i in range(5)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    out = tmp_path / "out.jsonl"
    args = ["embed", "--model", str(prompted_dir), "--input", str(tmp_path / "in.jsonl"), "--output", str(out)]
    assert cli([*args, "--prompt-name", "query"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    expected = embedder.encode(texts, prompt_name="query")
    torch.testing.assert_close(torch.tensor([r["embedding"] for r in rows]), expected, atol=1e-6, rtol=0)
    record = json.loads((tmp_path / "out.jsonl.settings.json").read_text())
    assert record["settings"]["prompt"] == "query: "
    whole = out.read_text()
    out.write_text("".join(whole.splitlines(keepends=True)[:2]))
    assert cli([*args, "--resume", "--prompt-name", "passage"]) == 2  # another prompt: refused
    assert "prompt: 'query: ' then, 'passage: ' now" in capsys.readouterr().err
    assert cli([*args, "--resume"]) == 2  # no flag: the model's default prompt, "passage: "
    assert "'passage: ' now" in capsys.readouterr().err and len(out.read_text().splitlines()) == 2  # untouched
    assert cli([*args, "--resume", "--prompt", "query: "]) == 0  # the same prompt text, given as text
    assert out.read_text() == whole
    assert cli(["embed", "--model", str(prompted_dir), "--text", texts[0], "--prompt-name", "nope"]) == 2
    assert "prompt name 'nope' is not one of this model's prompts" in capsys.readouterr().err
    assert cli(["embed", "--model", str(prompted_dir), "--text", texts[0], "--prompt", ""]) == 0
    printed = torch.tensor(json.loads(capsys.readouterr().out))
    torch.testing.assert_close(printed, embedder.encode(texts[:1], prompt="")[0], atol=1e-6, rtol=0)
    with pytest.raises(SystemExit):  # one or the other
        cli([*args, "--prompt-name", "query", "--prompt", "x"])


def test_ray_embed_batches_take_the_prompt(prompted_dir, embedder):
    """EmbedBatches (Ray Data's map_batches class; called here directly, without Ray) with a prompt_name."""
    np = pytest.importorskip("numpy")
    from minialign.apps.raydata import EmbedBatches

    out = EmbedBatches(str(prompted_dir), prompt_name="query")({"id": np.arange(2), "text": np.array(TEXTS)})
    torch.testing.assert_close(torch.from_numpy(out["embedding"]), embedder.encode(TEXTS, prompt_name="query"),
                               atol=1e-6, rtol=0)


def test_embed_file_task_and_int8_equal_the_python_api(prompted_dir, embedder, tmp_path, capsys):
    """`embed --task query|document` writes what encode_query / encode_document give (their prompt); --precision
    int8 / uint8 with --calibration what encode gives with calibration_embeddings= (the input as its own
    calibration: what encode(texts, precision=...) gives); the ranges are a setting, so --resume keeps them."""
    texts = [*TEXTS, "A third text, longer than the others.", "Short."]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts)))
    (tmp_path / "calib.csv").write_text("text\n" + "\n".join(f"calibration sentence {i} about towers" for i in
                                                            range(6)) + "\n")

    def embed(name, *flags):
        out = tmp_path / name
        assert cli(["embed", "--model", str(prompted_dir), "--input", str(tmp_path / "in.jsonl"), "--output",
                    str(out), *flags]) == 0
        return torch.tensor([json.loads(line)["embedding"] for line in out.read_text().splitlines()])

    for task, expected in (("query", embedder.encode_query(texts)), ("document", embedder.encode_document(texts))):
        torch.testing.assert_close(embed(f"{task}.jsonl", "--task", task), expected, atol=1e-6, rtol=0)
    assert not torch.equal(embedder.encode_query(texts), embedder.encode_document(texts))
    calibration = embedder.encode([f"calibration sentence {i} about towers" for i in range(6)])
    for precision in ("int8", "uint8"):
        got = embed(f"{precision}.jsonl", "--precision", precision, "--calibration", str(tmp_path / "calib.csv"))
        assert torch.equal(got, embedder.encode(texts, precision=precision, calibration_embeddings=calibration).float())
    got = embed("self.jsonl", "--precision", "int8", "--calibration", str(tmp_path / "in.jsonl"), "--task", "query")
    assert torch.equal(got, embedder.encode_query(texts, precision="int8").float())
    capsys.readouterr()
    args = ["embed", "--model", str(prompted_dir), "--input", str(tmp_path / "in.jsonl"), "--output"]
    assert cli([*args, str(tmp_path / "none.jsonl"), "--precision", "int8"]) == 2
    assert "--calibration is needed with precision int8" in capsys.readouterr().err
    assert cli([*args, str(tmp_path / "none.jsonl"), "--calibration", str(tmp_path / "calib.csv")]) == 2
    assert "--calibration is for precision int8 / uint8 only" in capsys.readouterr().err
    whole = (tmp_path / "int8.jsonl").read_text()
    (tmp_path / "int8.jsonl").write_text("".join(whole.splitlines(keepends=True)[:2]))
    assert cli([*args, str(tmp_path / "int8.jsonl"), "--precision", "int8", "--calibration",
                str(tmp_path / "calib.csv"), "--resume"]) == 0
    assert (tmp_path / "int8.jsonl").read_text() == whole
