"""Every product on every family beyond BERT and RoBERTa (tests/family_builders.py, one row each):
SentenceEncoder against SentenceTransformer.encode, Classifier.predict against transformers'
*ForSequenceClassification logits, rerank and predict against CrossEncoder. Tiny random models with the
tokenizer each family ships (WordPiece, SentencePiece Unigram, MPNet's WordPiece), built once per session."""

import json
import re
import shutil

import pytest
import torch
import transformers
from family_builders import ST_WINDOW, WINDOW, family_params

import minialign as ma
from minialign.runtime.engine import TruncationWarning

TOL = dict(atol=1e-5, rtol=0)
TEXTS = ["The Eiffel Tower is in Paris.", "", "Unicode: café naïve 東京 😀 — “quotes”", "word " * 300, "Short.",
         "La tour a été construite à Paris en 1889.", "The Eiffel Tower is in Paris."]
PAIRS = [("The tower was built in Paris.", "It is in France."), ("A short one.", "Tiny."),
         ("Unicode: café naïve 東京 😀 — “quotes”", "Numbers 3.14 and $5,000."), ("", "An empty first text."),
         ("the minister said " * 40, "a long first text, cut by the window"), ("short", "a long second text " * 30)]


def _close(got, expected):
    expected = torch.as_tensor(expected)
    assert got.shape == expected.shape and got.dtype == torch.float32
    assert (got - expected).abs().max() <= 1e-5
    assert torch.nn.functional.cosine_similarity(got, expected).min() >= 0.99999


@pytest.mark.parametrize("family", family_params())
def test_sentence_encoder_equals_sentence_transformers(family, tiny_family):
    from sentence_transformers import SentenceTransformer

    directory = tiny_family.sentence_transformers(family)
    reference = SentenceTransformer(str(directory), device="cpu")
    emb = ma.SentenceEncoder.from_pretrained(directory)
    assert emb.model.config.arch == family and emb.max_seq_length == ST_WINDOW and emb.pooling == ["mean"]
    with pytest.warns(TruncationWarning):  # "word " * 300 is cut by the window, as sentence-transformers does
        got = emb.encode(TEXTS, batch_size=3)
    _close(got, reference.encode(TEXTS, batch_size=3))
    _close(ma.SentenceEncoder.from_pretrained(directory, unpad=False).encode(TEXTS[:3]), reference.encode(TEXTS[:3]))


@pytest.mark.parametrize("family", family_params(["electra", "xlm-roberta"]))
def test_cls_pooling_dense_and_normalize(family, tiny_family):
    """ELECTRA's projected embeddings and XLM-R's `<s>` under cls pooling, a Dense layer and Normalize."""
    from sentence_transformers import SentenceTransformer

    directory = tiny_family.sentence_transformers(family, pooling="cls", dense=True, normalize=True)
    emb = ma.SentenceEncoder.from_pretrained(directory)
    assert emb.dimension == 10 and emb.normalize
    got = emb.encode(TEXTS[:3] + TEXTS[4:])
    _close(got, SentenceTransformer(str(directory), device="cpu").encode(TEXTS[:3] + TEXTS[4:]))
    torch.testing.assert_close(got.norm(dim=1), torch.ones(len(got)), **TOL)


@pytest.mark.parametrize("family", family_params())
def test_prompts_on_every_family(family, tiny_family, tmp_path):
    """Saved prompts, a default prompt and include_prompt=False (the prompt's tokens counted by each family's
    tokenizer: SentencePiece's, MPNet's WordPiece) as SentenceTransformer.encode applies them."""
    from sentence_transformers import SentenceTransformer

    directory = tmp_path / "st"
    shutil.copytree(tiny_family.sentence_transformers(family), directory)
    settings = directory / "config_sentence_transformers.json"
    saved = json.loads(settings.read_text()) if settings.exists() else {}
    settings.write_text(json.dumps({**saved, "prompts": {"query": "query: ", "passage": "passage: "},
                                    "default_prompt_name": "passage"}))
    texts = [TEXTS[0], TEXTS[2], TEXTS[4], TEXTS[5]]
    for include_prompt in (True, False):
        pooling = next(directory / m["path"] for m in json.loads((directory / "modules.json").read_text())
                       if m["type"].endswith("Pooling"))
        config = json.loads((pooling / "config.json").read_text())
        (pooling / "config.json").write_text(json.dumps({**config, "include_prompt": include_prompt}))
        reference = SentenceTransformer(str(directory), device="cpu")
        emb = ma.SentenceEncoder.from_pretrained(directory)
        assert emb.default_prompt_name == "passage" and emb.include_prompt == include_prompt
        for options in ({}, {"prompt_name": "query"}, {"prompt": "Represent this: "}, {"prompt": ""}):
            _close(emb.encode(texts, **options), reference.encode(texts, **options))


def _hf_logits(model, directory, *texts):
    tok = transformers.AutoTokenizer.from_pretrained(directory)
    batch = tok(*map(list, texts), truncation=True, max_length=WINDOW, padding=True, return_tensors="pt")
    if "token_type_ids" not in tok.model_input_names:
        batch.pop("token_type_ids", None)
    with torch.no_grad():
        return model(**batch).logits


@pytest.mark.parametrize("family", family_params())
def test_classifier_predict_equals_transformers(family, tiny_family):
    directory, hf = tiny_family.classifier(family, 3)
    clf = ma.Classifier.from_pretrained(directory)
    assert clf.model.config.arch == family and clf.labels == [hf.config.id2label[i] for i in range(3)]
    a, b = map(list, zip(*PAIRS))
    with pytest.warns(TruncationWarning):
        logits = clf.predict(a, b, activation="none")
    torch.testing.assert_close(logits, _hf_logits(hf, directory, a, b), **TOL)
    torch.testing.assert_close(clf.predict(a[:4], activation="none"), _hf_logits(hf, directory, a[:4]), **TOL)
    torch.testing.assert_close(clf.predict(a, b), torch.softmax(logits, -1), **TOL)  # auto: transformers' rule


@pytest.mark.parametrize("family", family_params())
def test_rerank_and_predict_equal_crossencoder(family, tiny_family):
    from sentence_transformers import CrossEncoder

    directory, _ = tiny_family.classifier(family, 1)
    reference = CrossEncoder(str(directory), device="cpu")
    clf = ma.Classifier.from_pretrained(directory)
    expected = torch.as_tensor(reference.predict(PAIRS[:4], batch_size=2))
    torch.testing.assert_close(clf.predict(*map(list, zip(*PAIRS[:4]))), expected, **TOL)
    docs = [b for _, b in PAIRS[:4]] + ["The tower is in Paris.", "Der Turm wurde in Paris gebaut."]
    scores = torch.as_tensor(reference.predict([("which tower?", d) for d in docs]))
    ranked = clf.rerank("which tower?", docs)
    assert [i for i, _ in ranked] == sorted(range(len(docs)), key=lambda i: -scores[i])
    torch.testing.assert_close(torch.tensor([s for _, s in ranked]), scores[[i for i, _ in ranked]], **TOL)


@pytest.mark.parametrize("family,names", [
    ("bert", "classifier.bias, classifier.weight"),
    ("deberta-v2", "classifier.bias, classifier.weight, pooler.dense.bias, pooler.dense.weight"),
    ("modernbert", "classifier.bias, classifier.weight, head.dense.bias, head.dense.weight, head.norm.bias, "
                   "head.norm.weight"),
])
def test_a_missing_head_is_named_in_the_checkpoints_own_words(family, names, tiny_family):
    """A plain encoder given to a classifier: the weights it lacks, as *ForSequenceClassification names them."""
    directory, _ = tiny_family.hf(family)
    with pytest.raises(ma.CheckpointError, match=f"has no trained {re.escape(names)}: it holds no such head"):
        ma.Classifier.from_pretrained(directory)


@pytest.mark.parametrize("family", ["mpnet", "modernbert", "gte", "nomic_bert", "eurobert", "jina_embeddings_v3"])
def test_a_text_gets_the_same_bits_alone_and_in_any_batch_on_rotary_families(family, tiny_family):
    """The batch-independence guarantee on the rotary families (and MPNet, mean pooled as they are): each text alone,
    in the whole batch, and shuffled in batches of 3. Mean pooling summed with `x.sum(dim=1)` failed it (nn/reduce.py
    token_sum)."""
    emb = ma.SentenceEncoder.from_pretrained(tiny_family.sentence_transformers(family))
    texts = [t for t in TEXTS if t] + [f"sentence {i}: " + "more words here " * i for i in range(1, 6)]
    together = emb.encode(texts, warn_truncation=False)
    for i, text in enumerate(texts):
        assert torch.equal(emb.encode([text], warn_truncation=False)[0], together[i]), (family, i)
    order = torch.randperm(len(texts), generator=torch.Generator().manual_seed(0)).tolist()
    assert torch.equal(emb.encode([texts[i] for i in order], batch_size=3, warn_truncation=False), together[order])
