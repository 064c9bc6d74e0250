"""TokenClassifier against transformers' TokenClassificationPipeline on tiny random *ForTokenClassification models:
a WordPiece tokenizer (all-MiniLM-L6-v2's real vocabulary, `wordpiece_dir`), a byte-level BPE one (`bpe_dir`) and two
SentencePiece Unigram ones (xlm-roberta's and deberta-v2's, family_builders.py), and all-MiniLM-L6-v2's published
tokenizer as it ships (its own tokenizer_config.json, the 512-token window); texts with accents, punctuation, runs of spaces, emoji and words of many pieces; every aggregation strategy: the same
entities, labels, words and offsets, scores within 1e-5; long texts cut, or read in overlapping windows (stride);
a text's result the same whatever it is batched with; bad input refused by name."""

import math
import warnings

import pytest
import torch
from family_builders import FAMILIES, hf_model, write_tokenizer

import minialign as ma
from minialign.runtime.engine import TruncationWarning

LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "MISC"]  # a plain label (MISC) too: it continues as I- does
TEXTS = [
    "Hugging Face Inc. is based in New York City; café naïve résumé!",
    "  Several   spaces\tand\nnewlines  between   words ",
    "Emoji 😀🎉 and 東京 and supercalifragilisticexpialidocious antidisestablishmentarianism.",
    "Zürich, Genève et Bâle — “quotes” (parentheses) $5,000 on 2023-01-02.",
    "A.",
    "",
]
LONG = " ".join(["Angela Merkel visited Zürich and Genève, then New-York;"] * 9)
STRATEGIES = ["none", "simple", "first", "average", "max"]
ALL = ["bert", "roberta", "xlm-roberta", "deberta-v2"]  # WordPiece, byte-level BPE, two Unigrams
MAIN = ["bert", "roberta"]  # the families every cross product runs on
# The Unigrams' share where a full cross product would be slow: each strategy on one of them (with one stride)
UNIGRAM_STRATEGIES = [("xlm-roberta", "none"), ("xlm-roberta", "first"), ("xlm-roberta", "average"),
                      ("deberta-v2", "simple"), ("deberta-v2", "max")]
SOME = [(family, strategy) for family in MAIN for strategy in STRATEGIES] + UNIGRAM_STRATEGIES


@pytest.fixture(scope="module")
def _taggers(tmp_path_factory, wordpiece_dir, bpe_dir):
    """family -> (a transformers *ForTokenClassification directory of the family, its tokenizer and 6 labels; the
    model; its tokenizer), each built once per module, the head's weights scaled so the labels vary from token to
    token."""
    import transformers

    built = {}

    def build(family):
        if family not in built:
            row = FAMILIES[family]
            directory = tmp_path_factory.mktemp(f"ner-{family}")
            vocab = write_tokenizer(row, directory, wordpiece_dir=wordpiece_dir, bpe_dir=bpe_dir)
            model = hf_model(row, vocab, num_labels=len(LABELS), head="ForTokenClassification",
                             id2label=dict(enumerate(LABELS)), label2id={label: i for i, label in enumerate(LABELS)})
            with torch.no_grad():
                model.classifier.weight.mul_(40)
            model.save_pretrained(directory)
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory))
            assert tokenizer.is_fast
            built[family] = directory, model, tokenizer
        return built[family]

    return build


@pytest.fixture
def tagger(request, _taggers):
    """The tagger of the family each test names in its `tagger` parameter (indirectly): _taggers."""
    return _taggers(request.param)


def _pipeline(tagger, strategy, **kwargs):
    import transformers

    directory, model, tokenizer = tagger
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fallback heuristic warns once per token there
        pipe = transformers.pipeline("token-classification", model=model, tokenizer=tokenizer, device="cpu",
                                     aggregation_strategy=strategy, **kwargs)
        return pipe


def _theirs(tagger, texts, strategy, **kwargs):
    pipe = _pipeline(tagger, strategy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = [pipe(text, **kwargs) for text in texts]  # one at a time: the pipeline pads a batch
    return [[{k: (float(v) if k == "score" else int(v) if k in ("start", "end", "index") else v)
              for k, v in e.items()} for e in entities] for entities in out]


def _assert_same(ours, theirs):
    assert len(ours) == len(theirs)
    for mine, reference in zip(ours, theirs, strict=True):
        assert [list(e) for e in mine] == [list(e) for e in reference]  # the same keys, in the same order
        strip = lambda entities: [{k: v for k, v in e.items() if k != "score"} for e in entities]  # noqa: E731
        assert strip(mine) == strip(reference)
        for a, b in zip(mine, reference):
            assert math.isclose(a["score"], b["score"], abs_tol=1e-5), (a, b)


@pytest.mark.parametrize("tagger", ALL, indirect=True)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_matches_the_pipeline(tagger, strategy):
    directory, _, _ = tagger
    ours = ma.TokenClassifier.from_pretrained(directory, attn_backend="eager")
    assert ours.labels == LABELS
    mine = ours.predict(TEXTS, aggregation_strategy=strategy, warn_truncation=False)  # the tiny BPE cuts some
    theirs = _theirs(tagger, TEXTS, strategy)
    _assert_same(mine, theirs)
    assert sum(map(len, theirs)) > 5  # entities to compare, of several labels
    if strategy != "none":
        assert {e["entity_group"] for entities in theirs for e in entities} >= {"PER", "LOC"}
    assert ours.predict(TEXTS[0], aggregation_strategy=strategy, warn_truncation=False) == mine[0]  # one text: its list alone


@pytest.mark.parametrize(("tagger", "strategy"), SOME, indirect=["tagger"])
def test_ignore_labels(tagger, strategy):
    directory, _, _ = tagger
    ours = ma.TokenClassifier.from_pretrained(directory)
    ignore = ["O", "MISC", "PER"] if strategy != "none" else ["O", "B-PER", "MISC"]
    _assert_same(ours.predict(TEXTS[:4], aggregation_strategy=strategy, ignore_labels=ignore, warn_truncation=False),
                 _theirs(tagger, TEXTS[:4], strategy, ignore_labels=ignore))
    _assert_same(ours.predict(TEXTS[:1], aggregation_strategy=strategy, ignore_labels=[], warn_truncation=False),
                 _theirs(tagger, TEXTS[:1], strategy, ignore_labels=[]))


@pytest.mark.parametrize(("tagger", "strategy"), SOME, indirect=["tagger"])
def test_a_long_text_is_cut_as_the_pipeline_cuts_it(tagger, strategy):
    directory, _, _ = tagger
    ours = ma.TokenClassifier.from_pretrained(directory)
    with pytest.warns(TruncationWarning, match="1 of 2 text"):
        mine = ours.predict([LONG, TEXTS[4]], aggregation_strategy=strategy)
    _assert_same(mine, _theirs(tagger, [LONG, TEXTS[4]], strategy))


@pytest.mark.parametrize(("tagger", "strategy", "stride"),
                         [(family, strategy, stride) for family in MAIN for strategy in STRATEGIES[1:]
                          for stride in (0, 7, 30)]
                         + [(family, strategy, 7) for family, strategy in UNIGRAM_STRATEGIES if strategy != "none"],
                         indirect=["tagger"])
def test_a_long_text_in_overlapping_windows(tagger, strategy, stride):
    directory, _, _ = tagger
    ours = ma.TokenClassifier.from_pretrained(directory)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing is cut
        mine = ours.predict([LONG, TEXTS[2]], aggregation_strategy=strategy, stride=stride)
    theirs = _theirs(tagger, [LONG, TEXTS[2]], strategy, stride=stride)
    _assert_same(mine, theirs)
    assert theirs[0][-1]["end"] > len(LONG) - 10  # the windows reach the end


@pytest.mark.parametrize("tagger", ALL, indirect=True)
def test_a_text_is_the_same_whatever_it_is_batched_with(tagger):
    directory, _, _ = tagger
    ours = ma.TokenClassifier.from_pretrained(directory, batch_size=3)
    together = ours.predict(TEXTS + [LONG], aggregation_strategy="none", warn_truncation=False)
    for text, entities in zip(TEXTS, together):
        assert ours.predict([text], aggregation_strategy="none", warn_truncation=False) == [entities]  # exact: scores bit for bit


@pytest.mark.parametrize("tagger", MAIN, indirect=True)
def test_bad_input_is_refused(tagger):
    directory, _, _ = tagger
    ours = ma.TokenClassifier.from_pretrained(directory)
    with pytest.raises(ValueError, match="texts is empty"):
        ours.predict([])
    with pytest.raises(ValueError, match=r"texts\[1\] is int, not a string"):
        ours.predict(["fine", 3])
    with pytest.raises(ValueError, match=r"texts\[0\] is None"):
        ours.predict([None])
    with pytest.raises(ValueError, match="aggregation_strategy must be one of"):
        ours.predict(["x"], aggregation_strategy="mean")
    with pytest.raises(ValueError, match="stride"):
        ours.predict(["x"], stride=4)  # aggregation "none"
    with pytest.raises(ValueError, match="stride must be"):
        ours.predict(["x"], aggregation_strategy="simple", stride=ours.max_length)
    with pytest.raises(ValueError, match="ignore_labels"):
        ours.predict(["x"], ignore_labels="O")
    with pytest.raises(ValueError, match="ignore_labels must be a sequence of label names, got 5"):
        ours.predict(["x"], ignore_labels=5)  # not iterable: named, not a TypeError
    from minialign.products.runner import OptionError

    with pytest.raises(OptionError) as refused:  # the option named, for the faces (the service's parameters.stride)
        ours.settings(aggregation_strategy="first", stride=-1)
    assert refused.value.option == "stride" and refused.value.problem.startswith("must be an int >= 0")
    assert ours.settings(aggregation_strategy="max", ignore_labels=iter(["O", "MISC"]), stride=3) == \
        {"dtype": "float32", "aggregation_strategy": "max", "ignore_labels": ["O", "MISC"], "stride": 3}


def test_a_checkpoint_without_a_token_head_is_refused(tiny_family):
    directory, _ = tiny_family.hf("bert")
    with pytest.raises(ma.CheckpointError, match="no trained classifier"):
        ma.TokenClassifier.from_pretrained(directory)
    sequence, _ = tiny_family.classifier("bert", 3)
    with pytest.raises(ma.CheckpointError, match="ForSequenceClassification"):
        ma.TokenClassifier.from_pretrained(sequence)


@pytest.mark.parametrize("tagger", ["bert"], indirect=True)  # one tokenizer is enough: the workers run the same forward
def test_worker_processes_give_the_same_entities(tagger):
    directory, _, _ = tagger
    alone = ma.TokenClassifier.from_pretrained(directory)
    pooled = ma.TokenClassifier.from_pretrained(directory, workers=2, batch_size=2)
    try:
        assert pooled.predict(TEXTS, aggregation_strategy="first") == alone.predict(TEXTS, aggregation_strategy="first")
    finally:
        pooled.close()


@pytest.fixture(scope="module")
def published(tmp_path_factory, minilm_dir):
    """A tiny random BertForTokenClassification over all-MiniLM-L6-v2's vocabulary, saved beside a copy of that
    published tokenizer as it ships (its tokenizer_config.json: lower-casing, the 512-token window)."""
    import shutil

    import transformers

    directory = tmp_path_factory.mktemp("ner-minilm")
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copyfile(minilm_dir / name, directory / name)
    row = FAMILIES["bert"]
    model = hf_model(row, 30522, num_labels=len(LABELS), head="ForTokenClassification", max_position_embeddings=512,
                     id2label=dict(enumerate(LABELS)), label2id={label: i for i, label in enumerate(LABELS)})
    with torch.no_grad():
        model.classifier.weight.mul_(40)
    model.save_pretrained(directory)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory))
    assert tokenizer.is_fast and tokenizer.model_max_length == 512
    return directory, model, tokenizer


def test_a_published_vocabulary(published):
    """Offsets, words and groups on all-MiniLM-L6-v2's tokenizer as published: every strategy on the texts, and a
    text longer than its 512-token window cut, then read in overlapping windows."""
    directory, _, _ = published
    ours = ma.TokenClassifier.from_pretrained(directory)
    assert ours.max_length == 512
    for strategy in STRATEGIES:
        _assert_same(ours.predict(TEXTS, aggregation_strategy=strategy), _theirs(published, TEXTS, strategy))
    longer = " ".join([LONG] * 7)
    with pytest.warns(TruncationWarning, match="1 of 1 text"):
        mine = ours.predict([longer], aggregation_strategy="simple")
    _assert_same(mine, _theirs(published, [longer], "simple"))
    theirs = _theirs(published, [longer], "first", stride=64)
    _assert_same(ours.predict([longer], aggregation_strategy="first", stride=64), theirs)
    assert theirs[0][-1]["end"] > len(longer) - 10
