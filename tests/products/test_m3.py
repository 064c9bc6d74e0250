"""M3Encoder against FlagEmbedding's BGE-M3, two ways: its formulas re-implemented here over transformers'
XLMRobertaModel (the `flag_reference` below), on a tiny random XLM-RoBERTa with a Unigram tokenizer
(tests/family_builders.py) and random sparse / colbert heads saved as FlagEmbedding saves them; and FlagEmbedding
1.4.2's own BGEM3FlagModel outputs on another such model, made once in its own virtual environment and kept
(data/flagembedding_m3, scripts/make_m3_reference.py): FlagEmbedding is no test dependency."""

import json
import pickle
import shutil
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import minialign as ma
from conftest import save_m3
from minialign.runtime.engine import TruncationWarning

TEXTS = ["The tower was built in Paris and opened in 1889.", "", "Paris Paris Paris, the tower; the tower.",
         "Zürich, Genève et Bâle sont des villes. Жук ёж 東京 😀",  # characters the vocabulary lacks: <unk>
         "word " * 80,  # cut by the 64-token window
         "A short claim.", "The tower was built in Paris and opened in 1889.", "La tour a été construite à Paris."]


@pytest.fixture(scope="module")
def m3_dir(tiny_family, tmp_path_factory):
    return save_m3(tiny_family, tmp_path_factory.mktemp("m3"))


def flag_reference(directory, texts, *, max_length=64, normalize=True):
    """BGEM3FlagModel.encode's outputs, from FlagEmbedding's formulas over transformers (fp32, as it runs on the
    CPU): inference/embedder/encoder_only/m3.py M3Embedder.encode_single_device (tokenize with truncation,
    _process_token_weights, _process_colbert_vecs) over finetune/embedder/encoder_only/m3/modeling.py
    EncoderOnlyEmbedderM3ModelForInference.forward (_dense_embedding "cls", _sparse_embedding's token weights,
    _colbert_embedding, F.normalize of dense and colbert). One padded batch, as FlagEmbedding 1.x runs it;
    max_length: the tiny model's window, as 8192 is BAAI/bge-m3's (FlagEmbedding 1.x's encode default)."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory))
    model = transformers.XLMRobertaModel.from_pretrained(str(directory), attn_implementation="eager").eval()
    hidden = model.config.hidden_size
    sparse_linear, colbert_linear = nn.Linear(hidden, 1), nn.Linear(hidden, hidden)
    sparse_linear.load_state_dict(torch.load(directory / "sparse_linear.pt", weights_only=True))
    colbert_linear.load_state_dict(torch.load(directory / "colbert_linear.pt", weights_only=True))
    inputs = tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        last_hidden_state = model(**inputs, return_dict=True).last_hidden_state
        dense_vecs = last_hidden_state[:, 0]
        token_weights = torch.relu(sparse_linear(last_hidden_state)).squeeze(-1)
        colbert_vecs = colbert_linear(last_hidden_state[:, 1:]) * inputs["attention_mask"][:, 1:][:, :, None].float()
        if normalize:
            dense_vecs, colbert_vecs = F.normalize(dense_vecs, dim=-1), F.normalize(colbert_vecs, dim=-1)
    unused_tokens = {tokenizer.cls_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.unk_token_id}

    def process_token_weights(weights, input_ids):
        result = {}
        for w, idx in zip(weights.tolist(), input_ids):
            if idx not in unused_tokens and w > 0:
                idx = str(idx)
                if w > result.get(idx, 0):
                    result[idx] = w
        return result

    lexical = [process_token_weights(w, ids) for w, ids in zip(token_weights, inputs["input_ids"].tolist())]
    colbert = [v[:int(m.sum()) - 1] for v, m in zip(colbert_vecs, inputs["attention_mask"])]
    return {"dense_vecs": dense_vecs, "lexical_weights": lexical, "colbert_vecs": colbert}, tokenizer


def flag_lexical_score(lw1, lw2):  # M3Embedder.compute_lexical_matching_score's _compute_single_lexical_matching_score
    return sum(weight * lw2[token] for token, weight in lw1.items() if token in lw2)


def flag_colbert_score(q_reps, p_reps):  # M3Embedder.colbert_score
    token_scores = torch.einsum("in,jn->ij", q_reps, p_reps)
    scores, _ = token_scores.max(-1)
    return torch.sum(scores) / q_reps.size(0)


def assert_lexical_close(got, expected, tol=1e-5):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert list(g) == list(e)  # the same ids, in the same order
        assert all(isinstance(k, str) and isinstance(v, float) for k, v in g.items())
        assert all(abs(g[k] - e[k]) <= tol for k in e)


@pytest.fixture(scope="module")
def m3(m3_dir):
    return ma.M3Encoder.from_pretrained(m3_dir, batch_size=3)


def test_three_outputs_equal_flagembedding_formulas(m3, m3_dir):
    with pytest.warns(TruncationWarning, match="1 of 8 text"):
        out = m3.encode(TEXTS, return_dense=True, return_sparse=True, return_colbert_vecs=True)
    reference, _ = flag_reference(m3_dir, TEXTS)
    assert list(out) == ["dense_vecs", "lexical_weights", "colbert_vecs"]
    dense = out["dense_vecs"]
    assert dense.shape == (len(TEXTS), m3.dimension) and dense.dtype == torch.float32
    assert (dense - reference["dense_vecs"]).abs().max() <= 1e-5
    assert torch.allclose(dense.norm(dim=-1), torch.ones(len(TEXTS)))  # normalised, FlagEmbedding's default
    assert_lexical_close(out["lexical_weights"], reference["lexical_weights"])
    for got, expected in zip(out["colbert_vecs"], reference["colbert_vecs"]):
        assert got.shape == expected.shape and got.dtype == torch.float32
        assert (got - expected).abs().max() <= 1e-5
    # what the texts exercise: weights cut to zero, a repeated id taking its largest, <unk> and specials left
    # out, the window, an empty text (no weights, one colbert vector: </s>)
    assert out["colbert_vecs"][1].shape == (1, m3.colbert_dimension) and out["lexical_weights"][1] == {}
    assert out["colbert_vecs"][4].shape == (m3.max_length - 1, m3.colbert_dimension) and m3.max_length == 64
    unk = m3.tokenizer.backend.token_to_id("<unk>")
    ids = m3.tokenizer.encode_ids([TEXTS[3]], max_length=64).ids[0]
    assert unk in ids and str(unk) not in out["lexical_weights"][3]
    assert not any(str(i) in lw for lw in out["lexical_weights"] for i in (0, 1, 2, 3))  # <s> <pad> </s> <unk>
    assert sum(len(lw) for lw in out["lexical_weights"]) < sum(len(set(i)) - 2 for i in m3.tokenizer.encode_ids(
        TEXTS, max_length=64).ids)  # some weights are 0


def test_equals_flagembedding_itself():
    """FlagEmbedding 1.4.2's BGEM3FlagModel.encode (fp32, batch_size=3, max_length=64: the tiny model's window), its
    compute_lexical_matching_score and colbert_score of the first four texts against the others, convert_id_to_token."""
    from safetensors.torch import load_file

    data = Path(__file__).parent / "data" / "flagembedding_m3"
    reference, tensors = json.loads((data / "reference.json").read_text()), load_file(data / "reference.safetensors")
    texts = reference["texts"]
    m3 = ma.M3Encoder.from_pretrained(data / "model", batch_size=3)
    with pytest.warns(TruncationWarning, match="1 of 8 text"):
        out = m3.encode(texts, return_sparse=True, return_colbert_vecs=True)
    assert m3.max_length == reference["max_length"]
    assert (out["dense_vecs"] - tensors["dense_vecs"]).abs().max() <= 1e-5
    assert_lexical_close(out["lexical_weights"], reference["lexical_weights"])
    assert len(out["colbert_vecs"]) == len(texts)
    for i, got in enumerate(out["colbert_vecs"]):
        expected = tensors[f"colbert_vecs.{i}"]
        assert got.shape == expected.shape and (got - expected).abs().max() <= 1e-5
    lexical = m3.compute_lexical_matching_score(out["lexical_weights"][:4], out["lexical_weights"][4:])
    assert (lexical - tensors["lexical_matching_score"]).abs().max() <= 1e-5
    colbert = torch.tensor([[float(m3.colbert_score(q, p)) for p in out["colbert_vecs"][4:]]
                            for q in out["colbert_vecs"][:4]])
    assert (colbert - tensors["colbert_score"]).abs().max() <= 1e-5
    assert_lexical_close(m3.convert_id_to_token(out["lexical_weights"]), reference["tokens"])


def test_scores_equal_flagembedding_formulas(m3, m3_dir):
    queries, passages = TEXTS[:4], TEXTS[4:]
    out_q = m3.encode(queries, return_sparse=True, return_colbert_vecs=True)
    with pytest.warns(TruncationWarning):
        out_p = m3.encode(passages, return_sparse=True, return_colbert_vecs=True)
    ref_q, _ = flag_reference(m3_dir, queries)
    ref_p, _ = flag_reference(m3_dir, passages)
    lexical = m3.compute_lexical_matching_score(out_q["lexical_weights"], out_p["lexical_weights"])
    expected = torch.tensor([[flag_lexical_score(a, b) for b in ref_p["lexical_weights"]]
                             for a in ref_q["lexical_weights"]])
    assert lexical.shape == (4, 4) and lexical.dtype == torch.float32 and (lexical - expected).abs().max() <= 1e-5
    assert (lexical > 0).any()  # the texts share tokens
    single = m3.compute_lexical_matching_score(out_q["lexical_weights"][0], out_p["lexical_weights"][3])
    assert isinstance(single, float) and abs(single - float(expected[0, 3])) <= 1e-5
    with pytest.raises(ValueError, match="two dicts or two lists"):
        m3.compute_lexical_matching_score(out_q["lexical_weights"][0], out_p["lexical_weights"])
    for q, rq in zip(out_q["colbert_vecs"], ref_q["colbert_vecs"]):
        for p, rp in zip(out_p["colbert_vecs"], ref_p["colbert_vecs"]):
            score = m3.colbert_score(q, p)
            assert score.dim() == 0 and abs(float(score) - float(flag_colbert_score(rq, rp))) <= 1e-5
    assert torch.equal(m3.colbert_score(out_q["colbert_vecs"][0].numpy(), out_p["colbert_vecs"][0].numpy()),
                       m3.colbert_score(out_q["colbert_vecs"][0], out_p["colbert_vecs"][0]))
    with pytest.raises(ValueError, match=r"\(n, dim\)"):
        m3.colbert_score(out_q["colbert_vecs"][0][0], out_p["colbert_vecs"][0])


def test_each_text_the_same_whatever_it_is_batched_with(m3_dir):
    """Alone, in batches of 3 and in one packed batch (and under a small token budget): bit-identical."""
    texts = [t for t in TEXTS if len(t) < 200]
    runs = [ma.M3Encoder.from_pretrained(m3_dir, batch_size=b, max_tokens=m) for b, m in ((1, None), (3, None),
                                                                                        (32, None), (32, 40))]
    outs = [r.encode(texts, return_sparse=True, return_colbert_vecs=True) for r in runs]
    alone = [runs[1].encode(t, return_sparse=True, return_colbert_vecs=True) for t in texts]
    for out in outs[1:] + [{k: [a[k] for a in alone] for k in outs[0]}]:
        for i in range(len(texts)):
            assert torch.equal(out["dense_vecs"][i], outs[0]["dense_vecs"][i])
            assert out["lexical_weights"][i] == outs[0]["lexical_weights"][i]
            assert torch.equal(out["colbert_vecs"][i], outs[0]["colbert_vecs"][i])
    # identical texts: equal results, each its own tensor
    first, again = outs[2]["colbert_vecs"][0], outs[2]["colbert_vecs"][5]
    assert texts[0] == texts[5] and torch.equal(first, again) and first.data_ptr() != again.data_ptr()


def test_forms_options_and_a_smaller_window(m3, m3_dir):
    one = m3.encode(TEXTS[0], return_sparse=True, return_colbert_vecs=True)
    assert one["dense_vecs"].shape == (m3.dimension,) and isinstance(one["lexical_weights"], dict)
    assert one["colbert_vecs"].dim() == 2
    dense_only = m3.encode(TEXTS[:2])
    assert dense_only["lexical_weights"] is None and dense_only["colbert_vecs"] is None
    empty = m3.encode([], return_sparse=True, return_colbert_vecs=True)
    assert empty["dense_vecs"].shape == (0, m3.dimension) and empty["lexical_weights"] == empty["colbert_vecs"] == []
    raw = m3.encode(TEXTS[:3], return_colbert_vecs=True, normalize_embeddings=False)
    reference, _ = flag_reference(m3_dir, TEXTS[:3], normalize=False)
    assert (raw["dense_vecs"] - reference["dense_vecs"]).abs().max() <= 1e-5
    assert all((a - b).abs().max() <= 1e-5 for a, b in zip(raw["colbert_vecs"], reference["colbert_vecs"]))
    with pytest.warns(TruncationWarning, match="12-token window"):
        short = m3.encode(TEXTS[:3], max_length=12, return_sparse=True, return_colbert_vecs=True)
    reference, _ = flag_reference(m3_dir, TEXTS[:3], max_length=12)
    assert (short["dense_vecs"] - reference["dense_vecs"]).abs().max() <= 1e-5
    assert_lexical_close(short["lexical_weights"], reference["lexical_weights"])
    assert [v.size(0) for v in short["colbert_vecs"]] == [11, 1, 11]
    with pytest.raises(ValueError, match="over the model's 64-token window"):
        m3.encode(TEXTS[:1], max_length=65)


def test_convert_id_to_token_equals_the_tokenizers_decode(m3, m3_dir):
    weights = m3.encode(TEXTS[:3], return_sparse=True)["lexical_weights"]
    _, tokenizer = flag_reference(m3_dir, TEXTS[:1])
    named = m3.convert_id_to_token(weights)
    assert named == [{tokenizer.decode([int(i)]): w for i, w in lw.items()} for lw in weights]
    assert m3.convert_id_to_token(weights[0]) == named[0] == m3.convert_id_to_token(weights[:1])


def test_bad_input_is_named(m3):
    with pytest.raises(ValueError, match=r"texts\[1\] is int"):
        m3.encode(["fine", 3])
    with pytest.raises(ValueError, match=r"texts\[0\] is None"):
        m3.encode([None])
    with pytest.raises(ValueError, match="choose one or more"):
        m3.encode(["fine"], return_dense=False)


def test_workers_run_the_ragged_forward(m3_dir, m3):
    """workers=2: each batch's entries (ids, weights, vectors) come back from the worker processes."""
    pooled = ma.M3Encoder.from_pretrained(m3_dir, batch_size=2, workers=2)
    try:
        got = pooled.encode(TEXTS[:4], return_sparse=True, return_colbert_vecs=True)
    finally:
        pooled.close()
    here = m3.encode(TEXTS[:4], return_sparse=True, return_colbert_vecs=True)
    assert torch.equal(got["dense_vecs"], here["dense_vecs"]) and got["lexical_weights"] == here["lexical_weights"]
    assert all(torch.equal(a, b) for a, b in zip(got["colbert_vecs"], here["colbert_vecs"]))


def test_a_missing_head_is_named_when_asked_for(m3_dir, tmp_path):
    directory = tmp_path / "dense-only"
    shutil.copytree(m3_dir, directory)
    (directory / "colbert_linear.pt").unlink()
    m3 = ma.M3Encoder.from_pretrained(directory)
    assert m3.colbert_dimension is None
    full = ma.M3Encoder.from_pretrained(m3_dir)
    got = m3.encode(TEXTS[:3], return_sparse=True)
    expected = full.encode(TEXTS[:3], return_sparse=True)
    assert torch.equal(got["dense_vecs"], expected["dense_vecs"]) and got["lexical_weights"] == expected["lexical_weights"]
    # dense alone: the last layer runs for the first tokens only (final_tokens="first"), the same up to rounding
    assert (m3.encode(TEXTS[:3])["dense_vecs"] - got["dense_vecs"]).abs().max() <= 1e-6
    with pytest.raises(ValueError, match=r"dense-only: no colbert_linear\.pt.*return_colbert_vecs needs it"):
        m3.encode(TEXTS[:3], return_colbert_vecs=True)
    (directory / "sparse_linear.pt").unlink()
    with pytest.raises(ValueError, match=r"no sparse_linear\.pt"):
        ma.M3Encoder.from_pretrained(directory).encode(TEXTS[:3], return_sparse=True)


class _Boom:
    def __reduce__(self):
        return (print, ("unpickled code ran",))


def test_bad_head_files_are_refused(m3_dir, tmp_path):
    directory = tmp_path / "bad"
    shutil.copytree(m3_dir, directory)
    torch.save(nn.Linear(7, 1).state_dict(), directory / "sparse_linear.pt")
    with pytest.raises(ma.CheckpointError, match=r"sparse_linear\.pt: weight \(1, 7\).*36-wide"):
        ma.M3Encoder.from_pretrained(directory)
    torch.save({"weight": torch.zeros(1, 36)}, directory / "sparse_linear.pt")
    with pytest.raises(ma.CheckpointError, match=r"weight and bias, found \['weight'\]"):
        ma.M3Encoder.from_pretrained(directory)
    with open(directory / "sparse_linear.pt", "wb") as f:
        pickle.dump({"weight": _Boom()}, f, protocol=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ma.CheckpointError, match="refused to unpickle"):
            ma.M3Encoder.from_pretrained(directory)


def test_the_tokens_left_out_of_lexical_weights_are_flagembeddings(m3_dir, minilm_dir, tmp_path):
    """cls, eos, pad, unk where the tokenizer names them (M3Embedder's rule over special_tokens_map: a BERT
    tokenizer names no eos, so [SEP] keeps its weight); a tokenizer.json alone: XLMRobertaTokenizer's defaults."""
    import transformers

    from minialign.products.m3 import unused_token_ids

    for directory in (m3_dir, minilm_dir):
        theirs = transformers.AutoTokenizer.from_pretrained(str(directory))
        named = theirs.special_tokens_map
        expected = {theirs.convert_tokens_to_ids(named[role])
                    for role in ("cls_token", "eos_token", "pad_token", "unk_token") if role in named}
        assert unused_token_ids(ma.Tokenizer.from_pretrained(directory)) == expected
    assert unused_token_ids(ma.Tokenizer.from_pretrained(m3_dir)) == {0, 1, 2, 3}  # <s> <pad> </s> <unk>
    bare = tmp_path / "tokenizer-json-only"
    bare.mkdir()
    shutil.copyfile(m3_dir / "tokenizer.json", bare / "tokenizer.json")
    assert unused_token_ids(ma.Tokenizer.from_pretrained(bare)) == {0, 1, 2, 3}


def test_a_ragged_forward_runs_mixed_singles_and_pairs_in_input_order(m3):
    """Runner.run with texts and (text, pair) tuples in one call: each kind on its own, entries back in input order."""
    mixed = m3.run(["one text", ("a text", "its pair"), "another text"], constants={"sparse": 1, "colbert": 1})
    alone = m3.run(["one text", "another text"], constants={"sparse": 1, "colbert": 1})
    paired = m3.run([("a text", "its pair")], constants={"sparse": 1, "colbert": 1})
    assert isinstance(mixed.values, list) and mixed.truncated.tolist() == [0, 0, 0]
    for got, expected in zip(mixed.values, [alone.values[0], paired.values[0], alone.values[1]]):
        assert got.keys() == expected.keys() == {"dense", "ids", "weights", "colbert"}
        assert all(torch.equal(got[k], expected[k]) for k in got)
    assert mixed.values[1]["ids"].tolist().count(2) == 3  # <s> A </s></s> B </s>
