"""StaticEncoder (products/static.py) against sentence-transformers' StaticEmbedding (SentenceTransformer.encode) and
model2vec's StaticModel, on tiny random tables saved here by those packages over a real WordPiece tokenizer.json."""

import json
import shutil
import warnings

import numpy as np
import pytest
import torch

import minialign as ma
from minialign.apps.cli import main as cli
from minialign.products.static import StaticEncoder
from minialign.runtime.engine import TruncationWarning

TOL = dict(atol=1e-6, rtol=0)
TEXTS = ["The tower was built in Paris.", "", "Unicode: café naïve 東京 😀", "word " * 200, "A short one."]
PLAIN = ["the tower was built in paris", "a short one", "numbers and more words"]  # no [UNK]: model2vec drops it
DIM = 16


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)  # "word " * 200 is cut at tokenizer.json's 128 tokens
        yield


def _tokenizer(wordpiece_dir):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(wordpiece_dir / "tokenizer.json"))


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "normalize"])
def st_dir(request, wordpiece_dir, tmp_path_factory):
    """A SentenceTransformer of one StaticEmbedding (random table), then Normalize or not, with prompts."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding

    torch.manual_seed(0)
    modules = [StaticEmbedding(_tokenizer(wordpiece_dir), embedding_dim=DIM), *([Normalize()] if request.param else [])]
    directory = tmp_path_factory.mktemp("static")
    SentenceTransformer(modules=modules, device="cpu", prompts={"query": "query: "}).save(str(directory))
    return directory


def _model2vec(wordpiece_dir, directory, *, normalize: bool, quantized: bool):
    """A model2vec directory saved by model2vec itself; quantized: 40 rows, a token -> row mapping and per-token
    weights (vocabulary quantization)."""
    from model2vec import StaticModel

    tokenizer = _tokenizer(wordpiece_dir)
    rng = np.random.default_rng(1)
    vocab = tokenizer.get_vocab_size()
    extra = dict(token_mapping=rng.integers(0, 40, vocab), weights=rng.uniform(0.5, 2, vocab).astype(np.float32)
                 ) if quantized else {}
    vectors = rng.standard_normal((40 if quantized else vocab, DIM)).astype(np.float32)
    StaticModel(vectors, tokenizer, normalize=normalize, **extra).save_pretrained(str(directory))
    return directory


def _st(directory):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(directory), device="cpu")


def test_encode_equals_sentence_transformers_with_every_option(st_dir):
    reference, ours = _st(st_dir), StaticEncoder.from_pretrained(st_dir)
    assert ours.dimension == DIM and ours.settings()["max_seq_length"] == 128  # all-MiniLM's tokenizer.json cuts
    for options in ({}, {"normalize_embeddings": True}, {"truncate_dim": 5}, {"prompt_name": "query"},
                    {"prompt": "passage: "}, {"truncate_dim": 7, "normalize_embeddings": True}):
        torch.testing.assert_close(ours.encode(TEXTS, **options),
                                   reference.encode(TEXTS, convert_to_tensor=True, **options), **TOL)
    for precision in ("int8", "uint8", "binary", "ubinary"):
        expected = reference.encode(TEXTS, precision=precision)
        assert np.array_equal(ours.encode(TEXTS, precision=precision).numpy(), expected), precision
    torch.testing.assert_close(ours.encode("A short one."), reference.encode("A short one.", convert_to_tensor=True),
                               **TOL)


def test_a_text_embeds_the_same_bits_whatever_its_batch(st_dir):
    ours = StaticEncoder.from_pretrained(st_dir, batch_size=2)
    together = ours.encode(TEXTS)
    for i, text in enumerate(TEXTS):
        assert torch.equal(ours.encode([text])[0], together[i])


@pytest.mark.parametrize("normalize,quantized", [(True, False), (False, True)])
def test_model2vec_directories_as_sentence_transformers_and_model2vec_read_them(wordpiece_dir, tmp_path, normalize,
                                                                               quantized):
    from model2vec import StaticModel

    directory = _model2vec(wordpiece_dir, tmp_path / "m2v", normalize=normalize, quantized=quantized)
    ours = StaticEncoder.from_pretrained(directory)
    assert ours.normalize is normalize
    torch.testing.assert_close(ours.encode(TEXTS), _st(directory).encode(TEXTS, convert_to_tensor=True), **TOL)
    # model2vec's own encode agrees where its two differences (unknown tokens dropped, 512 tokens) do not apply
    torch.testing.assert_close(ours.encode(PLAIN), torch.from_numpy(StaticModel.from_pretrained(directory)
                                                                    .encode(PLAIN)), **TOL)
    (directory / "modules.json").unlink()  # an older save: config.json alone says normalize
    torch.testing.assert_close(StaticEncoder.from_pretrained(directory).encode(TEXTS), ours.encode(TEXTS), **TOL)


def test_what_a_static_model_cannot_take_is_refused(st_dir, tmp_path, minilm_dir):
    with pytest.raises(ValueError, match="attn_backend='eager': a static embedding model has no transformer"):
        StaticEncoder.from_pretrained(st_dir, attn_backend="eager")
    with pytest.raises(ValueError, match="not a static embedding model"):
        StaticEncoder.from_pretrained(minilm_dir)
    shutil.copytree(st_dir, tmp_path / "m")
    modules = json.loads((tmp_path / "m" / "modules.json").read_text())
    modules.append({"idx": len(modules), "name": "x", "path": "x", "type": "sentence_transformers.models.Pooling"})
    (tmp_path / "m" / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ValueError, match="Pooling"):
        StaticEncoder.from_pretrained(tmp_path / "m")


def test_sentence_encoder_names_static_encoder_and_the_embed_command_loads_a_static_directory(st_dir, tmp_path):
    """SentenceEncoder.from_pretrained refuses a static directory naming StaticEncoder (it cannot return one: an
    import cycle); the faces ask StaticEncoder first (Product.variants): the embed command embeds with it."""
    with pytest.raises(Exception, match="StaticEncoder.from_pretrained loads it"):
        ma.SentenceEncoder.from_pretrained(st_dir)
    assert StaticEncoder.handles(str(st_dir)) and not StaticEncoder.handles(str(tmp_path))
    (tmp_path / "texts.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS[:3]))
    assert cli(["embed", "--model", str(st_dir), "--input", str(tmp_path / "texts.jsonl"),
                "--output", str(tmp_path / "out.jsonl")]) == 0
    rows = [json.loads(line)["embedding"] for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    torch.testing.assert_close(torch.tensor(rows), _st(st_dir).encode(TEXTS[:3], convert_to_tensor=True), **TOL)


def test_token_outputs_are_refused(st_dir):
    """StaticEmbedding writes no token_embeddings (SentenceTransformer.encode(output_value="token_embeddings") fails
    on it too): a clear error, not an index error."""
    ours = StaticEncoder.from_pretrained(st_dir)
    for call in (lambda: ours.encode(TEXTS[:2], output_value="token_embeddings"),
                 lambda: ours.encode_late_chunks("the tower", [(0, 3)])):
        with pytest.raises(ValueError, match="no token states"):
            call()
