"""The faces on the families beyond BERT and RoBERTa (tests/family_builders.py): `minialign parity` and the
explore page's data on every family (in process, cheap); the file commands, `--workers 2` and the HTTP
service on one family each (processes and servers cost seconds; the product tests cover every family)."""

import json
import signal
import warnings

import pytest
import torch
from family_builders import FAMILIES, LONG_CONTEXT, NEW, family_params

import minialign as ma
from minialign.apps.cli import main as cli
from minialign.nn.score_swap import has_relative_bias, with_score_function
from minialign.runtime.engine import TruncationWarning
from minialign.runtime.process_pool import WorkerDiedWarning

TEXTS = ["The Eiffel Tower is in Paris.", "Unicode: café naïve 東京 😀", "word " * 100, "Short.",
         "La tour a été construite à Paris en 1889."]


@pytest.mark.parametrize("family", family_params(NEW + list(LONG_CONTEXT), long_context=True))
def test_parity_passes_on_the_bare_model_and_the_classifier(family, tiny_family, capsys):
    for directory in (tiny_family.hf(family)[0], tiny_family.classifier(family, 3)[0]):
        assert cli(["parity", str(directory), "--tolerance", "1e-5"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert f"arch: {family}" in lines[0] and lines[-1].endswith("OK")
        assert [line.split()[0] for line in lines[2:5]] == ["emb", "0", "1"]  # every layer compared
    assert any(line.split()[0] == "logits" for line in lines)


# -- explore ---------------------------------------------------------------------------------------

def _explore(family, tiny_family, **options):
    directory, _ = tiny_family.hf(family)
    model, tokenizer = ma.Encoder.from_pretrained(directory), ma.Tokenizer.from_pretrained(directory)
    return model, tokenizer, ma.explore(model, tokenizer, "The bank raised rates.", pair="Rates rose.", **options)


@pytest.mark.parametrize("family", family_params(NEW + list(LONG_CONTEXT), long_context=True))
def test_explore_shows_the_embedding_parts_the_family_has(family, tiny_family):
    row = FAMILIES[family]
    model, tokenizer, page = _explore(family, tiny_family)
    data, run = page.data, page.data["runs"][0]
    parts = ["word", *(["position"] if row.positions else []), *(["token_type"] if row.token_types else [])]
    assert data["embedding"]["parts"] == list(run["parts"]) == list(run["part_cosines"]) == parts
    assert data["embedding"]["projected"] == row.projected
    if not row.token_types:
        missing = " or ".join(["position"] * (not row.positions) + ["token type"])
        assert f"has no {missing} embeddings" in data["embedding"]["note"]
    T, L = len(data["tokens"]), model.config.num_layers
    batch = tokenizer(["The bank raised rates."], ["Rates rose."])
    with torch.inference_mode(), ma.capture(model) as cap:
        out = model(**batch, output_hidden_states=True)
    for part in parts:  # the page's numbers are the captured ones
        torch.testing.assert_close(torch.tensor(run["parts"][part]), cap[f"embeddings.{part}"][0].norm(dim=-1),
                                   atol=1e-4, rtol=0)
        cosines = torch.tensor(run["part_cosines"][part])
        assert cosines.shape == (L + 1, T) and cosines.abs().max() <= 1 + 1e-4
        torch.testing.assert_close(cosines[0], torch.nn.functional.cosine_similarity(
            cap["embeddings.norm" if "embeddings.norm" in cap else "embeddings.sum"][0], cap[f"embeddings.{part}"][0],
            dim=-1), atol=1e-4, rtol=0)  # the embeddings' output at their width (EuroBERT has no norm there)
    norms = torch.tensor(run["norms"])  # the residual stream: what each layer reads, as transformers' hidden states
    torch.testing.assert_close(norms, torch.stack([h[0].norm(dim=-1) for h in out.hidden_states]), atol=1e-4, rtol=0)
    if row.projected:  # at the embeddings' width, and the projection
        width = model.config.embedding_size
        assert data["embedding"]["width"] == width != model.config.hidden_size and f"{width} wide" in \
            data["embedding"]["note"]
        torch.testing.assert_close(torch.tensor(run["projected_norms"]), cap["embeddings.project"][0].norm(dim=-1),
                                   atol=1e-4, rtol=0)
        W = model.embeddings.project.weight.detach()
        word = cap["embeddings.word"][0] @ W.T
        torch.testing.assert_close(torch.tensor(run["part_cosines"]["word"][1]), torch.nn.functional.cosine_similarity(
            cap["layers.0.output"][0], word, dim=-1), atol=1e-4, rtol=0)
    else:
        assert "projected_norms" not in run
    html = page.html()
    assert 'id="embedding-note"' in html and "<option>token_type</option>" not in html  # options come from the data


@pytest.mark.parametrize("family", family_params())
def test_the_score_function_swap_applies_or_says_why_not(family, tiny_family, tmp_path, capsys):
    row = FAMILIES[family]
    model, tokenizer, page = _explore(family, tiny_family)
    assert page.data["model"]["relative_bias"] == has_relative_bias(model) == row.relative_bias
    if row.relative_bias:
        with pytest.raises(ValueError, match="does not apply .* relative-position bias"):
            with_score_function(model, "general")
        directory, _ = tiny_family.hf(family)
        assert cli(["explore", "--model", str(directory), "--text", "The bank.", "--score-fn", "general",
                    "--output", str(tmp_path / "x.html")]) == 2
        assert "does not apply" in capsys.readouterr().err and not (tmp_path / "x.html").exists()
        return
    if row.own_score:
        with pytest.raises(ValueError, match="its own score function"):
            with_score_function(model, "general")
        return
    general = with_score_function(model, "general")  # starts as the scaled dot product: the same states
    _, _, same = _explore(family, tiny_family, compare_model=general)
    assert len(same.data["runs"]) == 2 and torch.tensor(same.data["cosine"]).min() > 0.9999


@pytest.mark.parametrize("family", family_params())
def test_explore_segment_mask_on_every_family(family, tiny_family, tmp_path):
    """--mask segment splits a pair after the first text's closing token, whether the tokenizer types the
    second text 1 (BERT's) or every token 0 (RoBERTa's, MPNet's: masks.pair_segments)."""
    directory, _ = tiny_family.hf(family)
    tokenizer = ma.Tokenizer.from_pretrained(directory)
    batch = tokenizer(["The bank raised rates."], ["Rates rose."])
    first = tokenizer(["The bank raised rates."])["input_ids"].size(1)  # [CLS] A [SEP] / <s> A </s>: the first segment
    segments = batch.get("token_type_ids")
    if segments is None:
        segments = ma.nn.masks.pair_segments(batch["input_ids"], tokenizer.backend.token_to_id(tokenizer.end_token))
    assert segments[0].tolist() == [0] * first + [1] * (batch["input_ids"].size(1) - first)
    assert cli(["explore", "--model", str(directory), "--text", "The bank raised rates.", "--pair", "Rates rose.",
                "--mask", "segment", "--output", str(tmp_path / "x.html")]) == 0


# -- one family each: files, workers, the service ---------------------------------------------------

def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("family", family_params(["xlm-roberta"]))
def test_embed_and_classify_files(family, tiny_family, tmp_path):
    """SentencePiece tokens, one token type, `<s> A </s></s> B </s>` pairs through the file commands."""
    st = tiny_family.sentence_transformers(family)
    classifier, _ = tiny_family.classifier(family, 3)
    _jsonl(tmp_path / "texts.jsonl", [{"id": f"t{i}", "text": t} for i, t in enumerate(TEXTS)])
    assert cli(["embed", "--model", str(st), "--input", str(tmp_path / "texts.jsonl"),
                "--output", str(tmp_path / "emb.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "emb.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == [f"t{i}" for i in range(len(TEXTS))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)
        expected = ma.SentenceEncoder.from_pretrained(st).encode(TEXTS)
    torch.testing.assert_close(torch.tensor([r["embedding"] for r in rows]), expected, atol=1e-6, rtol=0)
    pairs = [{"id": i, "premise": t, "hypothesis": "A tower."} for i, t in enumerate(TEXTS)]
    _jsonl(tmp_path / "pairs.jsonl", pairs)
    assert cli(["classify", "--model", str(classifier), "--input", str(tmp_path / "pairs.jsonl"), "--text-field",
                "premise", "--pair-field", "hypothesis", "--output", str(tmp_path / "out.jsonl")]) == 0
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    clf = ma.Classifier.from_pretrained(classifier)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)
        probs = clf.predict(TEXTS, ["A tower."] * len(TEXTS))
    assert [r["id"] for r in out] == list(range(len(TEXTS)))
    got = torch.tensor([[r[f"score_{label}"] for label in clf.labels] for r in out])
    torch.testing.assert_close(got, probs, atol=1e-6, rtol=0)
    assert [r["label"] for r in out] == [clf.labels[i] for i in probs.argmax(-1)]


@pytest.mark.slow
@pytest.mark.parametrize("family", family_params(["electra"]))
def test_cli_workers_write_what_one_process_writes(family, tiny_family, tmp_path):
    """Two model processes on ELECTRA's projected embeddings: the rows one process writes, in input order."""
    st = tiny_family.sentence_transformers(family)
    texts = [("word " * (1 + (i * 7) % 30)) + f"number {i}" for i in range(24)]
    _jsonl(tmp_path / "texts.jsonl", [{"id": f"t{i}", "text": t} for i, t in enumerate(texts)])
    outputs = {}
    for workers in (1, 2):
        out = tmp_path / f"out{workers}.jsonl"
        with warnings.catch_warnings():
            warnings.simplefilter("error", WorkerDiedWarning)
            assert cli(["embed", "--model", str(st), "--input", str(tmp_path / "texts.jsonl"), "--output", str(out),
                        "--batch-size", "4", "--workers", str(workers)]) == 0
        outputs[workers] = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in outputs[2]] == [f"t{i}" for i in range(len(texts))]
    torch.testing.assert_close(torch.tensor([r["embedding"] for r in outputs[2]]),
                               torch.tensor([r["embedding"] for r in outputs[1]]), atol=1e-5, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("family", family_params(["distilbert"]))
def test_serve_embed_and_rerank(family, tiny_family):
    """The service on DistilBERT (no token types; a BERT tokenizer that returns them): /embed and /rerank
    answer what SentenceEncoder and Classifier.rerank answer."""
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    from test_serve import call, start

    st = tiny_family.sentence_transformers(family)
    reranker, _ = tiny_family.classifier(family, 1)
    proc, url = start(["--embed", str(st), "--classify", str(reranker)])
    try:
        texts = ["The Eiffel Tower is in Paris.", "Unicode: café 東京 😀"]
        status, body = call(url, "/embed", {"inputs": texts, "normalize": False})
        assert status == 200
        torch.testing.assert_close(torch.tensor(body), ma.SentenceEncoder.from_pretrained(st).encode(texts),
                                   atol=1e-6, rtol=0)
        docs = ["It is in France.", "Tiny.", "The tower is in Paris.", "Der Turm wurde in Paris gebaut."]
        status, body = call(url, "/rerank", {"query": "which tower?", "texts": docs, "raw_scores": True})
        assert status == 200
        expected = ma.Classifier.from_pretrained(reranker).rerank("which tower?", docs, activation="none")
        assert [r["index"] for r in body] == [i for i, _ in expected]
        torch.testing.assert_close(torch.tensor([r["score"] for r in body]), torch.tensor([s for _, s in expected]),
                                   atol=1e-5, rtol=0)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def test_the_swap_keeps_the_model_as_it_was(tiny_family):
    """with_score_function (ma.with_score_function): the twin shares every weight (the same tensors), keeps the
    model's dtype, mode and backend, and starts (general, bilinear) equal to the scaled dot product. MPNet's
    identity swap (to the scaled dot product its bias is added to) is allowed."""
    directory, _ = tiny_family.hf("bert")
    model = ma.Encoder.from_pretrained(directory, attn_backend="eager", dtype=torch.float64).train()
    twin = ma.with_score_function(model, "bilinear")
    assert twin.training and twin.attn_backend == "eager" and twin.config.score_fn == "bilinear"
    assert {p.dtype for p in twin.parameters()} == {torch.float64}
    shared = dict(model.named_parameters())
    for name, p in twin.named_parameters():
        if ".score." not in name:
            assert p is shared[name] or p.data_ptr() == shared[name].data_ptr(), name
    ids = torch.randint(5, 100, (2, 9))
    with torch.no_grad():
        model.eval(), twin.eval()
        torch.testing.assert_close(twin(ids).last_hidden_state, model(ids).last_hidden_state, atol=1e-10, rtol=0)
    mpnet, _ = tiny_family.hf("mpnet")
    same = ma.with_score_function(ma.Encoder.from_pretrained(mpnet), "scaled_dot")
    assert same.config.score_fn == "scaled_dot"
    with pytest.raises(ValueError, match="unknown score function 'cosine'"):
        ma.with_score_function(model, "cosine")
