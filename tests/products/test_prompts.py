"""Prompts for sentence embeddings against SentenceTransformer.encode: prompt_name=, prompt=, the model's
default prompt, Pooling's include_prompt true and false, on tiny BERT (WordPiece) and RoBERTa (BPE)
sentence-transformers directories; the prompt-length rule; bad prompt names and bad files."""

import json

import pytest
import torch
from test_embedding import TEXTS, _close, tiny_st_dir

import minialign as ma
from minialign.products.embeddings import prompt_length

PROMPTS = {"query": "query: ", "passage": "Represent this passage for retrieval: ", "document": ""}
LONG_PROMPT = "an instruction longer than the window " * 6  # cut by the window: only the closing token is left


def with_prompts(directory, *, default=None, include_prompt=True, prompts=PROMPTS):
    """The directory with prompts (and a default) in config_sentence_transformers.json, and its Pooling
    module's include_prompt set."""
    config_path = directory / "config_sentence_transformers.json"
    config = json.loads(config_path.read_text())
    config.update(prompts=prompts, default_prompt_name=default)
    config_path.write_text(json.dumps(config))
    pooling_path = directory / "1_Pooling" / "config.json"
    pooling = json.loads(pooling_path.read_text())
    pooling["include_prompt"] = include_prompt
    pooling_path.write_text(json.dumps(pooling))
    return directory


@pytest.mark.parametrize("arch", ["bert", "roberta"])
@pytest.mark.parametrize("modes", ["mean", "cls", ("lasttoken", "max", "weightedmean", "mean_sqrt_len_tokens")])
@pytest.mark.parametrize("include_prompt", [True, False])
def test_prompts_equal_sentence_transformers(tmp_path, arch, modes, include_prompt, minilm_dir, bpe_dir):
    from sentence_transformers import SentenceTransformer

    directory, _ = tiny_st_dir(tmp_path, arch, minilm_dir if arch == "bert" else bpe_dir, modes)
    with_prompts(directory, default="passage", include_prompt=include_prompt)
    reference = SentenceTransformer(str(directory), device="cpu")
    emb = ma.SentenceEncoder.from_pretrained(directory)
    assert reference[1].include_prompt is include_prompt and emb.include_prompt is include_prompt
    assert emb.prompts == reference.prompts and list(emb.prompts) == list(reference.prompts)
    assert emb.default_prompt_name == reference.default_prompt_name == "passage"
    calls = [{}, {"prompt_name": "query"}, {"prompt_name": "document"}, {"prompt": "a prompt of my own: "},
             {"prompt": ""}, {"prompt": LONG_PROMPT}]
    for kwargs in calls:  # {}: the default prompt; "document" and "": no prompt at all
        _close(emb.encode(TEXTS, batch_size=3, warn_truncation=False, **kwargs),
               reference.encode(TEXTS, batch_size=3, **kwargs))
    if not include_prompt:  # the prompt's tokens are left out: not the same as pooling them
        pooling_all = ma.SentenceEncoder.from_pretrained(with_prompts(directory))
        assert not torch.allclose(emb.encode(TEXTS[:1], prompt_name="query"),
                                  pooling_all.encode(TEXTS[:1], prompt_name="query"), atol=1e-4)


@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_prompt_length_is_sentence_transformers_rule(tmp_path, arch, minilm_dir, bpe_dir):
    """Tokens of the prompt alone, special ones and the window included, less a closing special token
    (sentence-transformers' Transformer._get_prompt_length)."""
    from sentence_transformers import SentenceTransformer

    directory, _ = tiny_st_dir(tmp_path, arch, minilm_dir if arch == "bert" else bpe_dir, "mean")
    transformer = SentenceTransformer(str(directory), device="cpu")[0]
    emb = ma.SentenceEncoder.from_pretrained(directory)
    for prompt in ["query: ", "query:", "Represent this sentence: ", "東京 😀 ", LONG_PROMPT]:
        assert prompt_length(emb.tokenizer, prompt, emb.max_length) == transformer._get_prompt_length(prompt)
    first, sep = (101, 102) if arch == "bert" else (0, 2)
    ids = emb.tokenizer.encode_ids(["query: "], max_length=emb.max_length).ids[0]
    assert ids[0] == first and ids[-1] == sep and prompt_length(emb.tokenizer, "query: ", 24) == len(ids) - 1
    assert prompt_length(emb.tokenizer, LONG_PROMPT, 24) == 23  # the window's tokens less its closing one


def test_prompt_precedence_and_bad_names(tmp_path, minilm_dir):
    directory, _ = tiny_st_dir(tmp_path, "bert", minilm_dir, "mean")
    emb = ma.SentenceEncoder.from_pretrained(with_prompts(directory, default="query"))
    assert emb.resolve_prompt() == "query: "  # the default
    assert emb.resolve_prompt(prompt_name="passage") == PROMPTS["passage"]
    assert emb.resolve_prompt(prompt="") == ""  # an explicit empty prompt: none, not the default
    with pytest.warns(UserWarning, match="prompt_name is ignored"):
        assert emb.resolve_prompt(prompt_name="passage", prompt="mine: ") == "mine: "
    torch.testing.assert_close(emb.encode(["a text"]), emb.encode(["query: a text"], prompt=""), atol=0, rtol=0)
    with pytest.raises(ValueError, match=r"'nope' is not one of this model's prompts \['query', 'document', 'passage'"):
        emb.encode(["a text"], prompt_name="nope")
    with pytest.raises(ValueError, match=r"'nope'"):
        emb.encode([], prompt_name="nope")  # checked before anything else, as sentence-transformers does
    with pytest.raises(ValueError, match="prompt must be a string, got int"):
        emb.encode(["a text"], prompt=3)
    assert emb.settings(prompt_name="passage")["prompt"] == PROMPTS["passage"]
    assert emb.settings(prompt_name="document")["prompt"] is None  # "" is no prompt


def test_prompts_without_a_config_and_bad_files(tmp_path, minilm_dir):
    from sentence_transformers import SentenceTransformer

    directory, base = tiny_st_dir(tmp_path, "bert", minilm_dir, "mean")
    plain = ma.SentenceEncoder.from_pretrained(base)  # a plain transformers directory: v6's two empty prompts
    assert plain.prompts == SentenceTransformer(str(base), device="cpu").prompts == {"query": "", "document": ""}
    assert plain.default_prompt_name is None and plain.include_prompt
    with_prompts(directory, default="missing")
    with pytest.raises(ValueError, match=r"default prompt name 'missing' is not one of the prompts \['query', "):
        ma.SentenceEncoder.from_pretrained(directory)
    with_prompts(directory, prompts={"query": 5})
    with pytest.raises(ma.CheckpointError, match="prompts must be an object of name -> prompt text"):
        ma.SentenceEncoder.from_pretrained(directory)
    with_prompts(directory, include_prompt="no")
    with pytest.raises(ma.CheckpointError, match="include_prompt must be true or false"):
        ma.SentenceEncoder.from_pretrained(directory)


@pytest.mark.slow
def test_prompt_length_travels_to_worker_processes(tmp_path, minilm_dir):
    """include_prompt=false with workers=2: each batch carries the prompt's length to the worker."""
    directory, _ = tiny_st_dir(tmp_path, "bert", minilm_dir, "mean")
    with_prompts(directory, include_prompt=False)
    texts = [f"sentence number {i} " * (i % 5 + 1) for i in range(12)]
    expected = ma.SentenceEncoder.from_pretrained(directory).encode(texts, prompt_name="passage", batch_size=4)
    pooled = ma.SentenceEncoder.from_pretrained(directory, workers=2)
    try:
        torch.testing.assert_close(pooled.encode(texts, prompt_name="passage", batch_size=4), expected,
                                   atol=1e-6, rtol=0)
    finally:
        pooled.close()


@pytest.mark.parametrize("prompts", [PROMPTS, {"passage": "passage: ", "query": "q: "}, {}])
def test_encode_query_and_encode_document_pick_prompts_as_sentence_transformers(tmp_path, minilm_dir, prompts):
    from sentence_transformers import SentenceTransformer

    directory, _ = tiny_st_dir(tmp_path, "bert", minilm_dir, "mean")
    with_prompts(directory, default="query" if prompts else None, prompts=prompts)
    reference, emb = SentenceTransformer(str(directory), device="cpu"), ma.SentenceEncoder.from_pretrained(directory)
    for method in ("encode_query", "encode_document"):
        for kwargs in ({}, {"prompt_name": "query"}, {"prompt": "own: "}):
            _close(getattr(emb, method)(TEXTS, warn_truncation=False, **kwargs),
                   getattr(reference, method)(TEXTS, **kwargs))
