"""SparseEncoder against sentence-transformers' own SparseEncoder on tiny random *ForMaskedLM models it wraps and
saves (MLMTransformer or Transformer(fill-mask), SpladePooling): values within 1e-5 and the same active dimensions,
the output layouts, prompts, decode and similarity; a text's row the same whatever it is batched with; bad input."""

import pytest
import torch

import minialign as ma
from minialign.convert import CheckpointError

TOL = dict(atol=1e-5, rtol=0)
TEXTS = ["The tower was built in Paris and opened in 1889.", "A short claim.", "",
         "Police said the company grew; officials reported on Monday that the numbers 3.14 and $5,000 were in the "
         "report, and the minister said so too.",  # longer than the 24-token window: cut, as sentence-transformers
         "Zürich, Genève et Bâle sont des villes.", "A short claim."]

CASES = [  # (family, SpladePooling's pooling and activation, max_active_dims, the Transformer module)
    ("bert", "max", "relu", None, "MLMTransformer"),
    ("bert", "sum", "log1p_relu", 9, "MLMTransformer"),
    ("distilbert", "max", "relu", 20, "Transformer"),
    ("modernbert", "sum", "relu", None, "Transformer"),
    ("deberta-v2", "max", "log1p_relu", None, "MLMTransformer"),
    # the long-context families with a masked-LM head
    ("gte", "max", "relu", None, "MLMTransformer"),
    ("nomic_bert", "sum", "log1p_relu", None, "MLMTransformer"),
    ("jina_embeddings_v3", "max", "relu", 12, "MLMTransformer"),
    ("eurobert", "max", "relu", None, "Transformer"),
]


def _pair(tiny_family, arch, pooling="max", activation="relu", dims=None, module="MLMTransformer", **options):
    from sentence_transformers import SparseEncoder

    directory = tiny_family.sparse_encoder(arch, pooling_strategy=pooling, activation_function=activation,
                                           max_active_dims=dims, module=module, **options)
    return SparseEncoder(str(directory), device="cpu"), directory


@pytest.mark.parametrize("arch,pooling,activation,dims,module", CASES, ids=lambda x: str(x))
@pytest.mark.parametrize("unpad", [True, False], ids=["packed", "padded"])
def test_equals_sentence_transformers(arch, pooling, activation, dims, module, unpad, tiny_family):
    ref, directory = _pair(tiny_family, arch, pooling, activation, dims, module)
    ours = ma.SparseEncoder.from_pretrained(directory, unpad=unpad, chunk_tokens=16)
    assert (ours.pooling_strategy, ours.activation_function, ours.max_active_dims) == (pooling, activation, dims)
    assert ours.max_seq_length == ref.max_seq_length
    expected = ref.encode(TEXTS).to_dense()
    got = ours.encode(TEXTS, warn_truncation=False)
    assert got.is_sparse and got.shape == expected.shape == (len(TEXTS), ours.dimension)
    got = got.to_dense()
    torch.testing.assert_close(got, expected, **TOL)
    assert torch.equal(got != 0, expected != 0)  # the same active dimensions
    if dims is not None:
        assert ((got != 0).sum(dim=1) <= dims).all()
    for k in (3, 1):  # a call's max_active_dims wins over the model's
        torch.testing.assert_close(ours.encode(TEXTS, max_active_dims=k, warn_truncation=False).to_dense(),
                                   ref.encode(TEXTS, max_active_dims=k).to_dense(), **TOL)


def test_layouts_decode_and_similarity(tiny_family):
    ref, directory = _pair(tiny_family, "bert")
    ours = ma.SparseEncoder.from_pretrained(directory)
    texts = TEXTS[:2]
    dense = ours.encode(texts, convert_to_sparse_tensor=False)
    assert not dense.is_sparse and torch.equal(dense, ours.encode(texts).to_dense())
    rows = ours.encode(texts, convert_to_tensor=False)
    assert isinstance(rows, list) and len(rows) == 2 and torch.equal(rows[1].to_dense(), dense[1])
    one = ours.encode(texts[0])
    assert one.shape == (ours.dimension,) and torch.equal(one.to_dense(), dense[0])
    assert ours.encode([]).shape == (0, ours.dimension)
    got, expected = ours.decode(dense, top_k=4), ref.decode(ref.encode(texts), top_k=4)
    assert [[t for t, _ in row] for row in got] == [[t for t, _ in row] for row in expected]
    for row, ref_row in zip(got, expected):
        torch.testing.assert_close(torch.tensor([w for _, w in row]), torch.tensor([w for _, w in ref_row]), **TOL)
    # every active token (weights 1e-7 apart may be listed in either order)
    for row, ref_row in zip(ours.decode(dense), ref.decode(ref.encode(texts))):
        weights, ref_weights = dict(row), dict(ref_row)
        assert weights.keys() == ref_weights.keys()
        torch.testing.assert_close(torch.tensor([weights[t] for t in ref_weights]), torch.tensor(list(ref_weights.values())),
                                   **TOL)
        assert [w for _, w in row] == sorted(weights.values(), reverse=True)
    assert ours.decode(one, top_k=2) == ours.decode(dense, top_k=2)[0]
    # dot products of rows whose random-weight values sum to hundreds: 1e-5 is below float32's spacing there, so
    # relative to their size (the values themselves are held to TOL above)
    torch.testing.assert_close(ours.similarity(ours.encode(texts), ours.encode(TEXTS[4:5])),
                               ref.similarity(ref.encode(texts), ref.encode(TEXTS[4:5])), atol=1e-5, rtol=1e-6)
    torch.testing.assert_close(ours.similarity(dense, dense), dense @ dense.T, **TOL)


def test_query_and_document_prompts(tiny_family):
    prompts = {"query": "query: ", "document": "passage: "}
    ref, directory = _pair(tiny_family, "bert", prompts=prompts)
    ours = ma.SparseEncoder.from_pretrained(directory)
    assert ours.prompts == prompts
    texts = TEXTS[:2]
    torch.testing.assert_close(ours.encode_query(texts).to_dense(), ref.encode_query(texts).to_dense(), **TOL)
    torch.testing.assert_close(ours.encode_document(texts).to_dense(), ref.encode_document(texts).to_dense(), **TOL)
    torch.testing.assert_close(ours.encode(texts, prompt="x: ").to_dense(), ref.encode(texts, prompt="x: ").to_dense(),
                               **TOL)
    assert not torch.equal(ours.encode_query(texts).to_dense(), ours.encode(texts).to_dense())


@pytest.mark.parametrize("pooling", ["max", "sum"])
def test_a_text_alone_or_in_a_batch_is_the_same(pooling, tiny_family):
    """Bit for bit, whatever the batch and however its tokens fall into chunks (a sequence's pieces start at its first
    token, so a sum adds the same pieces in the same order)."""
    _, directory = _pair(tiny_family, "bert", pooling)
    for chunk_tokens in (5, 64):
        ours = ma.SparseEncoder.from_pretrained(directory, chunk_tokens=chunk_tokens)
        batch = ours.encode(TEXTS, convert_to_sparse_tensor=False, warn_truncation=False)
        for i, text in enumerate(TEXTS):
            alone = ours.encode([text], convert_to_sparse_tensor=False, warn_truncation=False)
            assert torch.equal(alone[0], batch[i]), (chunk_tokens, i)


@pytest.mark.parametrize("dims", [None, 4])
def test_inference_free_query_side(dims, tiny_family):
    """A Router of a SparseStaticEmbedding query side and a SPLADE document side: encode_query looks the tokens up in
    the static weights, encode_document and encode (the default route) run the model, as sentence-transformers."""
    from sentence_transformers import SparseEncoder

    directory = tiny_family.sparse_router("bert", max_active_dims=dims)
    ref, ours = SparseEncoder(str(directory), device="cpu"), ma.SparseEncoder.from_pretrained(directory)
    assert ours.query is not None and ours.default_route == "document"
    for method in ("encode_query", "encode_document", "encode"):
        expected = getattr(ref, method)(TEXTS).to_dense()
        got = getattr(ours, method)(TEXTS, warn_truncation=False).to_dense()
        torch.testing.assert_close(got, expected, **TOL)
        assert torch.equal(got != 0, expected != 0), method
    assert torch.equal(ours.encode(TEXTS[:2], task="query").to_dense(), ours.encode_query(TEXTS[:2]).to_dense())
    with pytest.raises(ValueError, match="task must be"):
        ours.encode(TEXTS[:1], task="passage")


def test_bad_input_is_named(tiny_family, tmp_path):
    ref, directory = _pair(tiny_family, "bert")
    ours = ma.SparseEncoder.from_pretrained(directory)
    for dims in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="max_active_dims must be a positive integer"):
            ours.encode(TEXTS[:1], max_active_dims=dims)
    with pytest.raises(ValueError, match="max_active_dims must be a positive integer"):
        ma.SparseEncoder.from_pretrained(directory, max_active_dims=0)
    with pytest.raises(ValueError, match=r"texts\[1\] is int"):
        ours.encode(["fine", 3])
    with pytest.raises(ValueError, match="top_k must be a positive integer"):
        ours.decode(ours.encode("a"), top_k=0)
    with pytest.raises(ValueError, match="decode takes a row"):
        ours.decode(torch.zeros(3))
    # "" is its special tokens alone, as sentence-transformers embeds it
    torch.testing.assert_close(ours.encode("").to_dense(), ref.encode("").to_dense(), **TOL)
    dense_dir = tiny_family.sentence_transformers("bert")  # Transformer + Pooling: a dense embedding model
    with pytest.raises(ValueError, match="dense embedding model: load it with minialign.SentenceEncoder"):
        ma.SparseEncoder.from_pretrained(dense_dir)
    with pytest.raises(ValueError, match="load it with minialign.SparseEncoder"):
        ma.SentenceEncoder.from_pretrained(directory)
    import json
    import shutil

    routed = shutil.copytree(tiny_family.sparse_router("bert"), tmp_path / "routed")
    config = json.loads((routed / "router_config.json").read_text())
    config["parameters"]["route_mappings"] = {"image": "query"}
    (routed / "router_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="route_mappings"):
        ma.SparseEncoder.from_pretrained(routed)
    bare, _ = tiny_family.hf("bert")  # a BertModel: no masked-LM head to pool
    with pytest.raises(CheckpointError, match="no trained cls.predictions"):
        ma.SparseEncoder.from_pretrained(bare)


def test_blocks_of_rows_stack_as_one_coalesced_tensor_without_a_sort():
    """products/sparse.stack_rows: blocks in row order give the entries torch.cat(...).coalesce() gives, marked
    coalesced; one block is returned as it is."""
    from minialign.products.sparse import stack_rows

    g = torch.Generator().manual_seed(0)
    dense = [(torch.rand(n, 50, generator=g) > 0.7).float() * torch.rand(n, 50, generator=g) for n in (3, 1, 4, 2)]
    blocks = [d.to_sparse() for d in dense]
    stacked, reference = stack_rows(blocks, 50), torch.cat(blocks).coalesce()
    assert stacked.is_coalesced() and stacked.shape == (10, 50)
    assert torch.equal(stacked.indices(), reference.indices()) and torch.equal(stacked.values(), reference.values())
    assert torch.equal(stacked.to_dense(), torch.cat(dense)) and stack_rows(blocks[:1], 50) is blocks[0]
