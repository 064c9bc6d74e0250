"""MultiVectorEncoder against sentence-transformers 6.2's MultiVectorEncoder: tiny random BERT and ModernBERT models
wrapped with its own modules (Transformer with query_length / document_length / query_expansion, a token-level
Dense, MultiVectorMask with a punctuation skiplist, Normalize) and saved; legacy PyLate and Stanford-NLP ColBERT
directories written here as those libraries saved them; MaxSim scores; batch independence; bad input."""

import json
import shutil

import pytest
import torch

import minialign as ma
from conftest import save_multivector_encoder as mve_dir
from minialign.products.maxsim import EMPTY_DOCUMENT_SCORE, maxsim
from minialign.runtime.engine import TruncationWarning

QUERIES = ["what is the capital of france?", "", "...", "who built the tower",
           "a much longer query that the window of twelve tokens cuts somewhere in the middle of it", "hi"]
DOCUMENTS = ["Paris is the capital of France.", "", "!!! ... ???", "word " * 40, "Berlin, Germany.",
             "Unicode: café naïve 東京 😀 — “quotes”", "Paris is the capital of France."]
EXPANSIONS = {"fixed": {"strategy": "fixed", "attend": False, "length": 12},
              "fixed-attend": {"strategy": "fixed", "attend": True, "length": 12},
              "min": {"strategy": "min", "attend": False, "length": 8},
              "min-attend": {"strategy": "min", "attend": True, "length": 8},
              "none": None}

pytestmark = pytest.mark.filterwarnings("ignore::minialign.runtime.engine.TruncationWarning")  # the long texts


def reference(directory):
    from sentence_transformers import MultiVectorEncoder

    return MultiVectorEncoder(str(directory), device="cpu")


def assert_same_vectors(ours, theirs):
    assert len(ours) == len(theirs)
    for got, expected in zip(ours, theirs):
        assert got.dtype == torch.float32 and got.shape == expected.shape, (got.shape, expected.shape)
        assert got.numel() == 0 or (got - expected).abs().max() <= 1e-5


def compare(directory, *, batch_size=3):
    """Our vectors and MaxSim / MeanMaxSim scores against sentence-transformers' on the same directory."""
    theirs = reference(directory)
    ours = ma.MultiVectorEncoder.from_pretrained(directory)
    q, d = ours.encode_query(QUERIES, batch_size=batch_size), ours.encode_document(DOCUMENTS, batch_size=batch_size)
    tq = theirs.encode_query(QUERIES, batch_size=batch_size)
    td = theirs.encode_document(DOCUMENTS, batch_size=batch_size)
    assert_same_vectors(q, tq)
    assert_same_vectors(d, td)
    assert torch.equal(d[0], d[-1]) and d[0] is not d[-1]  # a repeated text is run once, each gets its own tensor
    assert (ours.similarity(q, d) - theirs.similarity(tq, td)).abs().max() <= 1e-5
    from sentence_transformers.util.similarity import mean_maxsim

    assert (ours.similarity(q, d, length_normalize=True) - mean_maxsim(tq, td)).abs().max() <= 1e-6
    return ours, theirs, q, d


@pytest.mark.parametrize("expansion", list(EXPANSIONS))
def test_bert_equals_sentence_transformers(tmp_path, tiny_family, expansion):
    base, _ = tiny_family.hf("bert")
    ours, theirs, q, d = compare(mve_dir(tmp_path, base, EXPANSIONS[expansion]))
    assert ours.dimension == theirs.get_embedding_dimension() == 16
    torch.testing.assert_close(torch.cat(q + d).norm(dim=1), torch.ones(sum(len(x) for x in q + d)))
    if EXPANSIONS[expansion] and EXPANSIONS[expansion]["strategy"] == "fixed":
        assert {len(x) for x in q} == {12}  # every query at the expansion length, expansion positions kept
    # the skiplist (documents only): a text of punctuation keeps [CLS], "doc" (the prompt's ":" is skipped too), [SEP]
    assert len(d[2]) == len(d[1]) == 3


@pytest.mark.parametrize("expansion", ["fixed8", "min-attend", "none"])
def test_modernbert_equals_sentence_transformers(tmp_path, tiny_family, expansion):
    """Expansion to 8 tokens, with attend=False: the tiny model's local layers see |i - j| <= 4, and an expansion
    position farther than that from every real token would have no key at all in them, where transformers' sdpa
    gives zeros and its eager path (and minialign) a uniform average; a real ModernBERT ColBERT's window is 64."""
    base, _ = tiny_family.hf("modernbert")
    fixed8 = {"strategy": "fixed", "attend": False, "length": 8}
    compare(mve_dir(tmp_path, base, fixed8 if expansion == "fixed8" else EXPANSIONS[expansion]))


@pytest.mark.parametrize("family", ["gte", "nomic_bert", "jina_embeddings_v3", "eurobert"])
def test_the_long_context_families_equal_sentence_transformers(tmp_path, tiny_family, family):
    """ColBERT over each rotary family, queries expanded to a fixed width (attending), documents packed."""
    base, _ = tiny_family.hf(family)
    compare(mve_dir(tmp_path, base, EXPANSIONS["fixed-attend"]))


@pytest.mark.parametrize("expansion", ["fixed", "min", "min-attend"])
def test_a_text_alone_or_in_a_batch_gets_the_same_vectors(tmp_path, tiny_family, expansion):
    """Bit-identical: packed documents, expanded queries in the padded layout (attend=False: each width apart)."""
    base, _ = tiny_family.hf("bert")
    ours = ma.MultiVectorEncoder.from_pretrained(mve_dir(tmp_path, base, EXPANSIONS[expansion]))
    for encode, texts in ((ours.encode_query, QUERIES), (ours.encode_document, DOCUMENTS)):
        together = encode(texts, batch_size=4)
        for text, vectors in zip(texts, together):
            assert torch.equal(encode(text), vectors)


def test_truncation_is_reported_with_the_window_of_the_task(tmp_path, tiny_family):
    base, _ = tiny_family.hf("bert")
    ours = ma.MultiVectorEncoder.from_pretrained(mve_dir(tmp_path, base, EXPANSIONS["fixed"]))
    long = "word " * 30
    assert ours.over_window(["short", long], task="query") == [(1, 34)]  # [CLS] query : 30 words [SEP], over 12
    assert ours.over_window(["short", long], task="document") == [(1, 34)]  # over 20
    assert ours.over_window(["short", "word " * 10], task="document") == []
    with pytest.warns(TruncationWarning, match="1 of 2 text.*12-token window") as record:
        ours.encode_query(["short", long])
    assert record[0].filename == __file__  # the warning points at the call
    with pytest.warns(TruncationWarning, match="1 of 2 text.*20-token window"):
        ours.encode_document(["short", long])
    tally = ours.tally(task="document")
    ours.encode_document(["short", long], tally=tally)
    assert (tally.cut, tally.inputs, tally.tokens) == (1, 2, 14)


def test_workers_give_the_vectors_of_one_process(tmp_path, tiny_family):
    base, _ = tiny_family.hf("bert")
    directory = mve_dir(tmp_path, base, EXPANSIONS["min"])
    one = ma.MultiVectorEncoder.from_pretrained(directory, batch_size=2)
    two = ma.MultiVectorEncoder.from_pretrained(directory, batch_size=2, workers=2)
    try:
        for task in ("query", "document"):
            assert_same_vectors(two.encode(DOCUMENTS, task=task), one.encode(DOCUMENTS, task=task))
    finally:
        two.close()


def test_prompts_meanmaxsim_and_plain_encode(tmp_path, tiny_family):
    """A saved meanmaxsim; encode without a task (the default prompt, the skiplist as for documents); a call's
    prompt and prompt_name; an unknown prompt name."""
    base, _ = tiny_family.hf("bert")
    directory = mve_dir(tmp_path, base, EXPANSIONS["fixed"], similarity="meanmaxsim",
                        prompts={"query": "query: ", "document": "doc: ", "title": "title: "})
    theirs, ours = reference(directory), ma.MultiVectorEncoder.from_pretrained(directory)
    assert ours.similarity_fn_name == theirs.similarity_fn_name == "meanmaxsim"
    assert_same_vectors(ours.encode(DOCUMENTS), theirs.encode(DOCUMENTS))
    assert_same_vectors(ours.encode_document(DOCUMENTS, prompt_name="title"),
                        theirs.encode_document(DOCUMENTS, prompt_name="title"))
    assert_same_vectors(ours.encode_query(QUERIES, prompt="search: "), theirs.encode_query(QUERIES, prompt="search: "))
    q, d = ours.encode_query(QUERIES), ours.encode_document(DOCUMENTS)
    tq, td = theirs.encode_query(QUERIES), theirs.encode_document(DOCUMENTS)
    assert (ours.similarity(q, d) - theirs.similarity(tq, td)).abs().max() <= 1e-6
    assert (ours.similarity_pairwise(q, d[:6]) - theirs.similarity_pairwise(tq, td[:6])).abs().max() <= 1e-6
    with pytest.raises(ValueError, match="'nope' is not one of this model's prompts"):
        ours.encode_query(QUERIES, prompt_name="nope")


def test_pylate_directory(tmp_path, tiny_family):
    """A PyLate (v3) save: model_type ColBERT, [unused0] / [unused1] prefixes (registered as special tokens: one
    token each), query_length and attend_to_expansion_tokens at the top level, modules.json with Transformer and
    pylate's Dense only (the mask and the normalisation implied), a skiplist of its own."""
    base, _ = tiny_family.hf("bert")
    directory = mve_dir(tmp_path, base, EXPANSIONS["fixed"], prompts={})
    shutil.rmtree(directory / "2_MultiVectorMask")
    shutil.rmtree(directory / "3_Normalize")
    (directory / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"}]))
    dense = json.loads((directory / "1_Dense" / "config.json").read_text())
    del dense["module_input_name"], dense["module_output_name"]
    (directory / "1_Dense" / "config.json").write_text(json.dumps(dense))
    (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 19, "do_lower_case": False}))
    (directory / "config_sentence_transformers.json").write_text(json.dumps({
        "prompts": {}, "default_prompt_name": None, "similarity_fn_name": "MaxSim", "model_type": "ColBERT",
        "query_prefix": "[unused0]", "document_prefix": "[unused1]", "query_length": 12, "document_length": 20,
        "attend_to_expansion_tokens": False, "skiplist_words": ["!", ".", ",", "?"]}))
    ours, _, q, d = compare(directory)
    assert ours.query_expansion == {"strategy": "fixed", "attend": False, "token": None, "length": 12}
    assert ours.prompts["query"] == "[unused0]" and ours.mask and ours.normalize
    assert ours.tokenizer.backend.encode("[unused1]x", add_special_tokens=False).tokens[0] == "[unused1]"
    assert len(d[1]) == 3  # [CLS] [unused1] [SEP]


@pytest.mark.parametrize("attend", [False, True])
def test_stanford_colbert_directory(tmp_path, tiny_family, attend):
    """A Stanford-NLP ColBERT save: config.json architectures ["HF_ColBERT"], the encoder's weights under "bert."
    with the projection's linear.weight beside them, artifact.metadata with the markers and lengths."""
    from safetensors.torch import load_file, save_file

    base, _ = tiny_family.hf("bert")
    directory = tmp_path / "stanford"
    shutil.copytree(base, directory)
    tensors = {f"bert.{name}": t for name, t in load_file(directory / "model.safetensors").items()}
    save_file({**tensors, "linear.weight": torch.randn(16, 36)}, directory / "model.safetensors")
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "architectures": ["HF_ColBERT"]}))
    (directory / "artifact.metadata").write_text(json.dumps({
        "query_token_id": "[unused0]", "doc_token_id": "[unused1]", "query_maxlen": 12, "doc_maxlen": 20,
        "attend_to_mask_tokens": attend, "mask_punctuation": True}))
    ours, _, q, d = compare(directory)
    assert ours.query_expansion == {"strategy": "fixed", "attend": attend, "token": None, "length": 12}
    assert {len(x) for x in q} == {12} and len(d[2]) == 3  # "!!! ... ???": [CLS] [unused1] [SEP]


def test_empty_and_skipped_texts_and_empty_documents(tmp_path, tiny_family):
    """"" is a text (its special tokens and prompt); keep_only_token_ids can leave a document without any vector,
    which scores EMPTY_DOCUMENT_SCORE, as sentence-transformers' maxsim gives it."""
    from sentence_transformers.util.similarity import maxsim as st_maxsim

    base, _ = tiny_family.hf("bert")
    directory = mve_dir(tmp_path, base, EXPANSIONS["fixed"])
    config = directory / "2_MultiVectorMask" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "keep_only_token_ids": [1996]}))  # "the"
    theirs, ours = reference(directory), ma.MultiVectorEncoder.from_pretrained(directory)
    texts = ["the tower and the city", "no such word here"]
    d, td = ours.encode_document(texts), theirs.encode_document(texts)
    assert_same_vectors(d, td)
    assert [len(x) for x in d] == [2, 0]
    q = ours.encode_query(["the"])
    scores = ours.similarity(q, d)
    assert scores[0, 1] == EMPTY_DOCUMENT_SCORE
    assert (scores - st_maxsim(q, td)).abs().max() <= 1e-5
    assert ours.encode_query([]) == [] and ours.similarity([], d).shape == (0, 2)


def test_similarity_inputs():
    """A list of (tokens, dim) tensors, one such tensor, or a padded (N, T, dim) tensor whose zero rows are padding."""
    from sentence_transformers.util.similarity import maxsim as st_maxsim

    torch.manual_seed(0)
    q = [torch.randn(n, 8) for n in (3, 5)]
    d = [torch.randn(n, 8) for n in (4, 1, 7)]
    expected = st_maxsim(q, d)
    torch.testing.assert_close(maxsim(q, d), expected)
    torch.testing.assert_close(maxsim(q[0], d), expected[:1])
    padded = torch.nn.utils.rnn.pad_sequence(d, batch_first=True)
    torch.testing.assert_close(maxsim(q, padded), expected)
    torch.testing.assert_close(maxsim(q, d, chunk_elements=1), expected)  # one document per chunk
    with pytest.raises(ValueError, match=r"\(tokens, dim\)"):
        maxsim([torch.randn(8)], d)


def test_bad_input(tmp_path, tiny_family, monkeypatch):
    base, _ = tiny_family.hf("bert")
    ours = ma.MultiVectorEncoder.from_pretrained(mve_dir(tmp_path, base, EXPANSIONS["fixed"]))
    monkeypatch.setattr(ours.encoder, "forward", lambda *a, **k: pytest.fail("model ran"))
    with pytest.raises(ValueError, match=r"inputs\[1\] is None"):
        ours.encode_document(["fine", None])
    with pytest.raises(ValueError, match="sequence of strings"):
        ours.encode_query(42)
    with pytest.raises(ValueError, match="task must be"):
        ours.encode(["x"], task="passage")


def test_directories_that_are_not_multi_vector_are_refused(tmp_path, tiny_family):
    """A dense SentenceTransformer (pooled) and a plain transformers directory: sentence-transformers would turn
    them into multi-vector models with an untrained projection; minialign names what they are. A multi-vector
    directory given to SentenceEncoder points to MultiVectorEncoder."""
    base, _ = tiny_family.hf("bert")
    dense_only = tiny_family.sentence_transformers("bert", pooling="mean", dense=True)
    with pytest.raises(ma.CheckpointError, match="SentenceTransformer.*load it with SentenceEncoder"):
        ma.MultiVectorEncoder.from_pretrained(dense_only)
    (tmp_path / "no-type").mkdir()
    for f in dense_only.iterdir():  # the same without a model_type: read off its Pooling module
        if f.name != "config_sentence_transformers.json":
            (shutil.copytree if f.is_dir() else shutil.copyfile)(f, tmp_path / "no-type" / f.name)
    with pytest.raises(ma.CheckpointError, match="Pooling module gives one vector per text"):
        ma.MultiVectorEncoder.from_pretrained(tmp_path / "no-type")
    with pytest.raises(ma.CheckpointError, match="no modules.json, so no projection"):
        ma.MultiVectorEncoder.from_pretrained(base)
    with pytest.raises(ma.CheckpointError, match="load it with MultiVectorEncoder"):
        ma.SentenceEncoder.from_pretrained(mve_dir(tmp_path, base, None))


def test_bad_configs_are_named(tmp_path, tiny_family):
    base, _ = tiny_family.hf("bert")
    directory = mve_dir(tmp_path, base, EXPANSIONS["fixed"])
    config = json.loads((directory / "sentence_bert_config.json").read_text())
    (directory / "sentence_bert_config.json").write_text(json.dumps({**config, "query_expansion": {"strategy": "x"}}))
    with pytest.raises(ValueError, match="query_expansion\\['strategy'\\] must be 'fixed' or 'min'"):
        ma.MultiVectorEncoder.from_pretrained(directory)
    (directory / "sentence_bert_config.json").write_text(json.dumps(config))
    (directory / "2_MultiVectorMask" / "config.json").write_text(json.dumps({"skiplist_words": "."}))
    with pytest.raises(ma.CheckpointError, match="skiplist_words must be a list of strings"):
        ma.MultiVectorEncoder.from_pretrained(directory)


def test_a_querys_maxsim_is_the_same_bits_whatever_the_other_queries():
    """MaxSim sums a query's per-token maxima over the padded query length: in token order (nn/reduce.py token_sum), so
    a query scored alone and beside longer ones gets the same bits (with `.sum(-1)`: 44 of 120 rows differed)."""
    from minialign.products.maxsim import maxsim, maxsim_pairwise

    torch.manual_seed(0)
    unit = lambda n: torch.nn.functional.normalize(torch.randn(n, 64), dim=-1)  # noqa: E731
    for _ in range(10):
        queries = [unit(int(torch.randint(3, 40, (1,)))) for _ in range(4)]
        documents = [unit(int(torch.randint(5, 120, (1,)))) for _ in range(5)]
        together = maxsim(queries, documents)
        for i, query in enumerate(queries):
            assert torch.equal(maxsim([query], documents)[0], together[i])
        pairs = maxsim_pairwise(queries, documents[:4])
        for i, query in enumerate(queries):
            assert torch.equal(maxsim_pairwise([query], [documents[i]])[0], pairs[i])


def test_maxsim_pairwise_is_maxsims_diagonal_to_the_bit_across_its_groups():
    """maxsim_pairwise runs PAIRS_PER_PRODUCT pairs per product and keeps the diagonal blocks: each pair's score is
    the bits of maxsim's (query i, document i), in every group and alone, on a count that leaves a partial group."""
    from minialign.products.maxsim import PAIRS_PER_PRODUCT, maxsim, maxsim_pairwise

    torch.manual_seed(1)
    unit = lambda n: torch.nn.functional.normalize(torch.randn(n, 32), dim=-1)  # noqa: E731
    count = 2 * PAIRS_PER_PRODUCT + 1
    queries = [unit(int(torch.randint(2, 20, (1,)))) for _ in range(count)]
    documents = [unit(int(torch.randint(1, 60, (1,)))) for _ in range(count)]
    pairs = maxsim_pairwise(queries, documents)
    assert torch.equal(pairs, maxsim(queries, documents).diagonal())
    assert all(torch.equal(maxsim_pairwise([q], [d])[0], pairs[i]) for i, (q, d) in enumerate(zip(queries, documents)))
