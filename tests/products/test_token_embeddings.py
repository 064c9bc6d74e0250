"""SentenceEncoder.encode(output_value="token_embeddings" | None) against SentenceTransformer.encode (v6): tiny random
BERT / RoBERTa sentence-transformers directories (test_embedding.tiny_st_dir) with a Dense and a Normalize module,
which token embeddings do not pass through."""

import pytest
import torch
from test_embedding import TEXTS, tiny_st_dir

import minialign as ma


@pytest.fixture(scope="module", params=["bert", "roberta"])
def pair(request, tmp_path_factory, minilm_dir, bpe_dir):
    """(our SentenceEncoder, sentence-transformers' SentenceTransformer) of one tiny directory (mean, Dense,
    Normalize)."""
    from sentence_transformers import SentenceTransformer

    arch = request.param
    directory, _ = tiny_st_dir(tmp_path_factory.mktemp(arch), arch, minilm_dir if arch == "bert" else bpe_dir, "mean",
                               dense=True, normalize=True)
    return ma.SentenceEncoder.from_pretrained(directory), SentenceTransformer(str(directory), device="cpu")


@pytest.mark.filterwarnings("ignore::minialign.runtime.engine.TruncationWarning")  # the long text
def test_token_embeddings_equal_sentence_transformers(pair):
    ours, reference = pair
    got = ours.encode(TEXTS, output_value="token_embeddings", batch_size=3)
    expected = reference.encode(TEXTS, output_value="token_embeddings", batch_size=3)
    assert isinstance(got, list) and len(got) == len(TEXTS)
    for i, (a, b) in enumerate(zip(got, expected)):
        # every token within the window, the special ones included, before Dense and Normalize (the hidden size,
        # not the Dense's 10)
        assert a.shape == b.shape and a.shape[1] == ours.encoder.config.hidden_size, i
        assert a.dtype == torch.float32, i
        assert (a - b).abs().max() <= 1e-5, i
    assert got[3].shape[0] == 24  # "word " * 300: cut to the window, as sentence-transformers cuts it
    assert got[1].shape[0] == 2  # "": its special tokens
    # normalize_embeddings and truncate_dim are the sentence embeddings' (sentence-transformers ignores them here)
    again = ours.encode(TEXTS[:2], output_value="token_embeddings", normalize_embeddings=True, truncate_dim=4)
    assert all(torch.equal(a, b) for a, b in zip(again, got[:2]))
    # one string: one (L, C) tensor
    assert torch.equal(ours.encode(TEXTS[0], output_value="token_embeddings"), got[0])


def test_token_embeddings_with_a_prompt(pair):
    ours, reference = pair
    got = ours.encode(TEXTS[:3], prompt="query: ", output_value="token_embeddings")
    expected = reference.encode(TEXTS[:3], prompt="query: ", output_value="token_embeddings")
    for a, b in zip(got, expected):
        assert a.shape == b.shape and (a - b).abs().max() <= 1e-5  # the prompt's tokens are there too


@pytest.mark.filterwarnings("ignore::minialign.runtime.engine.TruncationWarning")
def test_a_texts_token_embeddings_are_the_same_bits_alone_and_in_any_batch(pair):
    ours, _ = pair
    together = ours.encode(TEXTS, output_value="token_embeddings")
    for i, text in enumerate(TEXTS):
        assert torch.equal(ours.encode([text], output_value="token_embeddings")[0], together[i]), i
    shuffled = ours.encode(TEXTS[::-1], output_value="token_embeddings", batch_size=2)
    assert all(torch.equal(a, b) for a, b in zip(shuffled[::-1], together))


def test_padded_layout_equals_sentence_transformers(pair):
    ours, reference = pair
    padded = ma.SentenceEncoder.from_pretrained(ours.source, unpad=False)
    assert not padded.unpad
    for a, b in zip(padded.encode(TEXTS[:3], output_value="token_embeddings"),
                    reference.encode(TEXTS[:3], output_value="token_embeddings")):
        assert a.shape == b.shape and (a - b).abs().max() <= 1e-5


def test_output_value_none_gives_each_texts_features(pair):
    ours, reference = pair
    got = ours.encode(TEXTS[:3], output_value=None, truncate_dim=6, normalize_embeddings=True)
    expected = reference.encode(TEXTS[:3], output_value=None, truncate_dim=6, normalize_embeddings=True)
    sentences = ours.encode(TEXTS[:3], truncate_dim=6)  # truncated, and not normalized again (its Normalize module
    # makes it unit length before the cut): as sentence-transformers gives output_value=None
    for i, (a, b) in enumerate(zip(got, expected)):
        n = int(b["attention_mask"].sum())  # sentence-transformers' rows are padded to the batch: ours are cut
        assert set(a) == {k for k in b if k != "modality"} and set(a) >= {"input_ids", "attention_mask",
                                                                          "token_embeddings", "sentence_embedding"}
        assert torch.equal(a["input_ids"], b["input_ids"][:n])
        assert torch.equal(a["attention_mask"], b["attention_mask"][:n])
        assert (a["token_embeddings"] - b["token_embeddings"][:n]).abs().max() <= 1e-5
        assert a["sentence_embedding"].shape == (6,)
        assert (a["sentence_embedding"] - b["sentence_embedding"]).abs().max() <= 1e-5
        assert torch.equal(a["sentence_embedding"], sentences[i])
    assert isinstance(ours.encode(TEXTS[0], output_value=None), dict)


def test_bad_options_are_refused(pair, monkeypatch):
    ours, _ = pair
    assert ours.encode([], output_value="token_embeddings") == [] and ours.encode([], output_value=None) == []
    monkeypatch.setattr(ours.encoder, "forward", lambda *a, **k: pytest.fail("model ran"))
    with pytest.raises(ValueError, match="output_value must be one of"):
        ours.encode(["a"], output_value="tokens")
    with pytest.raises(ValueError, match="precision 'int8' quantizes sentence embeddings"):
        ours.encode(["a"], output_value="token_embeddings", precision="int8")
