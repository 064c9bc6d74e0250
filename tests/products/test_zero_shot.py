"""ZeroShotClassifier against transformers' ZeroShotClassificationPipeline on tiny random NLI models
(*ForSequenceClassification with contradiction / neutral / entailment labels): bert (WordPiece, all-MiniLM-L6-v2's
vocabulary), roberta (byte-level BPE), deberta-v2 (a SentencePiece Unigram, as DeBERTa-v3's) and modernbert (its
byte-level BPE); single- and multi-label, labels as a list and as a comma-separated string, a custom template, one
label, texts with accents, emoji, runs of spaces and one longer than the window; entailment first (MoritzLaurer's
convention) and in capitals. The same labels in the same order, scores within 1e-5; a text's result the same whatever
it is batched with; bad input refused by name."""

import json
import math
import warnings

import pytest
import torch
from family_builders import FAMILIES, hf_model, write_tokenizer

import minialign as ma
from minialign.runtime.engine import TruncationWarning

NLI = ["contradiction", "neutral", "entailment"]  # as facebook/bart-large-mnli and microsoft/deberta-*-mnli
ENTAILMENT_FIRST = ["entailment", "neutral", "contradiction"]  # as MoritzLaurer/DeBERTa-v3-base-mnli-fever-anli
CAPITALS = ["CONTRADICTION", "NEUTRAL", "ENTAILMENT"]  # as roberta-large-mnli
TEXTS = [
    "Angela Merkel visited Zürich and Genève; café naïve résumé!",
    "  Several   spaces\tand\nnewlines  between   words ",
    "Emoji 😀🎉 and 東京 and supercalifragilisticexpialidocious.",
    "Numbers 3.14 and $5,000 on 2023-01-02.",
    "A.",
]
LONG = " ".join(["The minister said the company grew in Paris, then in New-York;"] * 8)  # past the 64-token window
LABELS = ["politics", "sports", "travel", "économie", "science 😀"]
FAMILY_NAMES = ["bert", "roberta", "deberta-v2", "modernbert"]


INIT_RANGE = 0.3  # the random weights' std (transformers' 0.02 makes every pair's logits nearly equal: see _centre)


def _centre(model, tokenizer, seed: int) -> None:
    """Move the head's last bias so that the logits of the test's pairs centre near 0 (within a random offset of about
    0.5), where softmax scores are far from 0 and 1. With weights of std INIT_RANGE the logits of a text's pairs differ
    by about 1, so the labels' scores differ and their order is no coin toss; at transformers' 0.02 a tiny random
    encoder tells its pairs apart by 1e-5 only, and scaling its head up to spread them amplifies float32 rounding
    as much."""
    head = model.classifier
    linear = head if isinstance(head, torch.nn.Linear) else head.out_proj  # RoBERTa's: dense, tanh, out_proj
    with torch.no_grad():
        logits = torch.cat([model(**tokenizer(text, f"This example is {label}.", return_tensors="pt",
                                                 truncation="only_first")).logits
                            for text in TEXTS for label in LABELS])
        offset = torch.randn(logits.size(1), generator=torch.Generator().manual_seed(seed)) * 0.5
        linear.bias.add_(offset - logits.mean(dim=0))


def _build(tmp_path_factory, wordpiece_dir, bpe_dir, family: str, labels: list[str], seed: int = 0):
    """(directory, transformers model, transformers tokenizer) of a tiny NLI model of the family with `labels`."""
    import transformers

    row = FAMILIES[family]
    directory = tmp_path_factory.mktemp(f"nli-{family}")
    vocab = write_tokenizer(row, directory, wordpiece_dir=wordpiece_dir, bpe_dir=bpe_dir)
    model = hf_model(row, vocab, num_labels=len(labels), seed=seed, id2label=dict(enumerate(labels)),
                     label2id={label: i for i, label in enumerate(labels)}, initializer_range=INIT_RANGE)
    model.save_pretrained(directory)  # config.json first: AutoTokenizer reads the family from it
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory))
    assert tokenizer.is_fast
    _centre(model, tokenizer, seed)
    model.save_pretrained(directory)
    return directory, model, tokenizer


@pytest.fixture(scope="module", params=FAMILY_NAMES)
def nli(request, tmp_path_factory, wordpiece_dir, bpe_dir):
    return _build(tmp_path_factory, wordpiece_dir, bpe_dir, request.param, NLI)


@pytest.fixture(scope="module", params=[(family, labels) for family in ("bert", "deberta-v2")
                                        for labels in ("entailment-first", "capitals")],
                ids=lambda p: "-".join(p))
def convention(request, tmp_path_factory, wordpiece_dir, bpe_dir):
    """(labels, built) of a model whose entailment is first or in capitals."""
    family, name = request.param
    labels = ENTAILMENT_FIRST if name == "entailment-first" else CAPITALS
    return labels, _build(tmp_path_factory, wordpiece_dir, bpe_dir, family, labels, seed=1)


@pytest.fixture(scope="module")
def bert_nli(tmp_path_factory, wordpiece_dir, bpe_dir):
    return _build(tmp_path_factory, wordpiece_dir, bpe_dir, "bert", NLI)


_PIPELINES = {}


def _theirs(built, texts, labels, **kwargs):
    """transformers' pipeline over the built model (one per model), on the texts."""
    import transformers

    _, model, tokenizer = built
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if id(model) not in _PIPELINES:
            _PIPELINES[id(model)] = (model, transformers.pipeline("zero-shot-classification", model=model,
                                                                  tokenizer=tokenizer, device="cpu"))
        return _PIPELINES[id(model)][1](texts, candidate_labels=labels, **kwargs)


def _assert_same(ours, theirs, *, distinct: bool = True) -> float:
    """Equal keys, sequences and labels in the same order, scores within 1e-5; returns the largest difference.
    distinct: the reference's scores of a text differ by more than the tolerance (so its order is no tie)."""
    ours, theirs = ([ours], [theirs]) if isinstance(theirs, dict) else (ours, theirs)
    assert len(ours) == len(theirs)
    worst = 0.0
    for mine, reference in zip(ours, theirs, strict=True):
        assert list(mine) == list(reference) == ["sequence", "labels", "scores"]
        assert mine["sequence"] == reference["sequence"]
        assert mine["labels"] == reference["labels"], (mine, reference)
        for a, b in zip(mine["scores"], reference["scores"], strict=True):
            assert isinstance(a, float) and math.isclose(a, b, abs_tol=1e-5), (mine, reference)
            worst = max(worst, abs(a - b))
        if distinct:
            assert all(a - b > 1e-5 for a, b in zip(reference["scores"], reference["scores"][1:])), reference
    return worst


@pytest.mark.parametrize("multi_label", [False, True])
def test_matches_the_pipeline(nli, multi_label):
    directory, _, _ = nli
    ours = ma.ZeroShotClassifier.from_pretrained(directory, attn_backend="eager")
    assert ours.labels == NLI and (ours.entailment_id, ours.contradiction_id) == (2, 0)
    mine = ours.predict(TEXTS, LABELS, multi_label=multi_label, warn_truncation=False)  # the tiny BPEs cut some
    _assert_same(mine, _theirs(nli, TEXTS, LABELS, multi_label=multi_label))
    if not multi_label:
        assert all(math.isclose(sum(r["scores"]), 1.0, abs_tol=1e-5) for r in mine)  # one distribution per text
    else:
        assert not all(math.isclose(sum(r["scores"]), 1.0, abs_tol=1e-3) for r in mine)  # each label on its own
    assert ours.predict(TEXTS[4], LABELS, multi_label=multi_label) == mine[4]  # one text: its dict alone
    assert ours(TEXTS[3:], LABELS, multi_label=multi_label, warn_truncation=False) == mine[3:]  # callable, as the pipeline


def test_comma_separated_labels_and_a_template(nli):
    directory, _, _ = nli
    ours = ma.ZeroShotClassifier.from_pretrained(directory)
    labels = " politics,sports , ,travel,économie,"  # parts stripped, empty ones dropped
    template = "Das Thema dieses Textes ist «{}» 😀."
    mine = ours.predict(TEXTS[:3], labels, hypothesis_template=template, warn_truncation=False)
    assert sorted(mine[0]["labels"]) == sorted(["politics", "sports", "travel", "économie"])
    _assert_same(mine, _theirs(nli, TEXTS[:3], labels, hypothesis_template=template), distinct=False)


def test_one_label_scores_entailment_against_contradiction(nli):
    """With one label the pipeline takes the multi-label branch whatever multi_label says."""
    directory, _, _ = nli
    ours = ma.ZeroShotClassifier.from_pretrained(directory)
    mine = ours.predict(TEXTS, ["politics"], warn_truncation=False)
    assert ours.predict(TEXTS, ["politics"], multi_label=True, warn_truncation=False) == mine
    _assert_same(mine, _theirs(nli, TEXTS, ["politics"]))
    assert len({r["scores"][0] for r in mine}) == len(TEXTS) and all(0 < r["scores"][0] < 1 for r in mine)


def test_a_long_text_is_cut_as_the_pipeline_cuts_it(nli):
    """only_first: the premise loses its end, the hypothesis stays whole."""
    directory, _, _ = nli
    ours = ma.ZeroShotClassifier.from_pretrained(directory)
    with pytest.warns(TruncationWarning, match=f"{len(LABELS)} of {2 * len(LABELS)}") as caught:
        mine = ours.predict([LONG, TEXTS[4]], LABELS)
    assert caught[0].filename == __file__  # the warning names the caller's line
    _assert_same(mine, _theirs(nli, [LONG, TEXTS[4]], LABELS), distinct=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tally = ours.tally()
        ours.predict([LONG], LABELS, tally=tally)  # counted, not warned
    assert tally.cut == len(LABELS)


def test_label_conventions(convention):
    """Entailment found by its name whatever its index and case; contradiction the last label when entailment is the
    first (the pipeline's rule)."""
    labels, built = convention
    ours = ma.ZeroShotClassifier.from_pretrained(built[0])
    assert (ours.entailment_id, ours.contradiction_id) == ((0, 2) if labels == ENTAILMENT_FIRST else (2, 0))
    for multi_label in (False, True):
        _assert_same(ours.predict(TEXTS[:3], LABELS, multi_label=multi_label, warn_truncation=False),
                     _theirs(built, TEXTS[:3], LABELS, multi_label=multi_label))


def test_equal_scores_come_back_in_the_pipelines_order(bert_nli):
    """A label given twice ties with itself: the later one first, as the pipeline's reversed argsort orders a few."""
    directory, _, _ = bert_nli
    ours = ma.ZeroShotClassifier.from_pretrained(directory)
    labels = ["sports", "politics", "sports", "travel"]
    for multi_label in (False, True):
        mine = ours.predict(TEXTS[:2], labels, multi_label=multi_label)
        _assert_same(mine, _theirs(bert_nli, TEXTS[:2], labels, multi_label=multi_label), distinct=False)


def test_a_text_is_the_same_whatever_it_is_batched_with(bert_nli):
    directory, _, _ = bert_nli
    ours = ma.ZeroShotClassifier.from_pretrained(directory, batch_size=4)
    for multi_label in (False, True):
        together = ours.predict(TEXTS + [LONG, TEXTS[0]], LABELS, multi_label=multi_label, warn_truncation=False)
        assert together[-1] == together[0]
        for text, result in zip(TEXTS, together):
            assert ours.predict([text], LABELS, multi_label=multi_label) == [result]  # exact: scores bit for bit
    logits_alone = ours._logits([TEXTS[1]], ["This example is sports."], False)[0]
    logits_batched = ours._logits(TEXTS, ["This example is sports.", "This example is travel."], False)[0]
    assert torch.equal(logits_alone[0], logits_batched[2])


def test_settings_and_the_window(bert_nli):
    directory, _, _ = bert_nli
    ours = ma.ZeroShotClassifier.from_pretrained(directory, max_length=32)
    assert ours.max_length == 32
    assert ours.settings(candidate_labels="a, b", multi_label=True) == {
        "dtype": "float32", "candidate_labels": ["a", "b"], "hypothesis_template": "This example is {}.",
        "multi_label": True}
    with pytest.warns(TruncationWarning):
        ours.predict(LONG, ["politics"])


def test_bad_input_is_refused(bert_nli, tmp_path_factory, wordpiece_dir, bpe_dir):
    directory, _, _ = bert_nli
    ours = ma.ZeroShotClassifier.from_pretrained(directory)
    for labels in ([], "", " , ,"):
        with pytest.raises(ValueError, match="candidate_labels is empty"):
            ours.predict("text", labels)
    with pytest.raises(ValueError, match=r"candidate_labels\[1\] is empty"):
        ours.predict("text", ["sports", " "])
    with pytest.raises(ValueError, match=r"candidate_labels\[0\] is int, not a string"):
        ours.predict("text", [3])
    with pytest.raises(ValueError, match="candidate_labels must be a list"):
        ours.predict("text", None)
    with pytest.raises(ValueError, match="has no {} for the label"):
        ours.predict("text", ["sports"], hypothesis_template="This example is sports.")
    with pytest.raises(ValueError, match="has no {} for the label"):
        ours.predict("text", ["sports"], hypothesis_template="Literal {{}} braces.")
    for template in ("{0} or {1}", "About {topic}.", "Unmatched { brace {}"):
        with pytest.raises(ValueError, match="could not be formatted"):
            ours.predict("text", ["sports"], hypothesis_template=template)
    with pytest.raises(ValueError, match="texts is empty"):
        ours.predict([], ["sports"])
    with pytest.raises(ValueError, match=r"texts\[1\] is empty"):
        ours.predict(["fine", ""], ["sports"])
    with pytest.raises(ValueError, match=r"text is empty"):
        ours.predict("", ["sports"])
    with pytest.raises(ValueError, match=r"texts\[1\] is int, not a string"):
        ours.predict(["fine", 3], ["sports"])
    with pytest.raises(ValueError, match="multi_label must be True or False"):
        ours.predict("text", ["sports"], multi_label="false")
    unnamed, _, _ = _build(tmp_path_factory, wordpiece_dir, bpe_dir, "bert", ["LABEL_0", "LABEL_1", "LABEL_2"])
    with pytest.raises(ValueError, match=r"labels .*name entailment.*\['LABEL_0', 'LABEL_1', 'LABEL_2'\]"):
        ma.ZeroShotClassifier.from_pretrained(unnamed)
    alone, _, _ = _build(tmp_path_factory, wordpiece_dir, bpe_dir, "bert", ["entailment"])
    with pytest.raises(ValueError, match=r"at least two labels"):
        ma.ZeroShotClassifier.from_pretrained(alone)


def test_labels_are_read_from_id2label(bert_nli, tmp_path):
    """A config.json without label2id (transformers 5's pipeline then fails on label2id None) is read by id2label."""
    directory, _, _ = bert_nli
    for file in directory.iterdir():
        (tmp_path / file.name).write_bytes(file.read_bytes())
    config = json.loads((tmp_path / "config.json").read_text())
    del config["label2id"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    ours = ma.ZeroShotClassifier.from_pretrained(tmp_path)
    assert (ours.entailment_id, ours.contradiction_id) == (2, 0)
    assert ours.predict(TEXTS[3:], LABELS) == ma.ZeroShotClassifier.from_pretrained(directory).predict(TEXTS[3:], LABELS)


def test_a_hypothesis_longer_than_the_window_is_cut_with_the_premise(bert_nli):
    """Where only_first cannot fit the pair (the hypothesis alone is too long) both texts are cut, longest first, and
    reported (the pipeline retries untruncated, and BERT's position table then fails)."""
    directory, _, _ = bert_nli
    ours = ma.ZeroShotClassifier.from_pretrained(directory)
    label = " ".join(["politics"] * 80)
    with pytest.warns(TruncationWarning, match="1 of 2"):
        result = ours.predict(TEXTS[0], [label, "sports"])
    assert sorted(result["labels"]) == sorted([label, "sports"])


def test_the_runner_contract(bert_nli):
    """The keywords every runner's from_pretrained takes (products/runner.py), with their defaults, and a padded run
    (unpad=False) that gives the packed run's results."""
    import inspect

    ours = inspect.signature(ma.ZeroShotClassifier.from_pretrained).parameters
    theirs = inspect.signature(ma.Classifier.from_pretrained).parameters
    assert ours["keywords"].annotation == theirs["keywords"].annotation == "Unpack[Loading]"
    directory, _, tokenizer = bert_nli
    padded = ma.ZeroShotClassifier.from_pretrained(directory, tokenizer=directory, device="cpu", dtype=torch.float32,
                                                   attn_backend="eager", unpad=False, batch_size=3, max_tokens=700)
    assert padded.batch_size == 3 and padded.engine.max_tokens == 700 and not padded.unpad
    assert padded.source == str(directory) and padded.dtype_name == "float32"
    packed = ma.ZeroShotClassifier.from_pretrained(directory)
    for a, b in zip(padded.predict(TEXTS, LABELS), packed.predict(TEXTS, LABELS), strict=True):
        assert a["labels"] == b["labels"]
        torch.testing.assert_close(torch.tensor(a["scores"]), torch.tensor(b["scores"]), atol=1e-6, rtol=0)


def test_each_text_with_its_own_labels(bert_nli):
    """predict_each (the file rows and service requests that carry their own labels): text i's result is
    predict(texts[i], candidate_labels[i])'s bit for bit, every pair in one engine run, and a bad label is named by its
    text; settings' and the options' refusals are OptionErrors naming the option."""
    from minialign.products.runner import OptionError

    directory, _, _ = bert_nli
    ours = ma.ZeroShotClassifier.from_pretrained(directory, batch_size=4)
    own = [LABELS, "sports, travel", ["politics"], LABELS[::-1], "économie,politics", ["travel", "sports"]]
    texts = TEXTS + [LONG]
    for multi_label in (False, True):
        each = ours.predict_each(texts, own, multi_label=multi_label, hypothesis_template="About {}.",
                                 warn_truncation=False)
        assert each == [ours.predict(t, o, multi_label=multi_label, hypothesis_template="About {}.",
                                     warn_truncation=False) for t, o in zip(texts, own)]
    with pytest.warns(TruncationWarning, match="2 of 4") as caught:
        ours.predict_each([TEXTS[0], LONG], ["a, b", ["c", "d"]])
    assert caught[0].filename == __file__
    for call, message in [
            (lambda: ours.predict_each(TEXTS[:2], [LABELS]), r"one list of labels per text \(2\), got 1"),
            (lambda: ours.predict_each(TEXTS[:2], "a, b"), "one list of labels per text"),
            (lambda: ours.predict_each("text", [LABELS]), "texts must be a list"),
            (lambda: ours.predict_each(TEXTS[:2], [LABELS, " , "]), r"candidate_labels\[1\] is empty"),
            (lambda: ours.predict_each(TEXTS[:2], [LABELS, ["a", 3]]), r"candidate_labels\[1\]\[1\] is int, not a string"),
            (lambda: ours.predict_each(["a", ""], [LABELS, LABELS]), r"texts\[1\] is empty")]:
        with pytest.raises(ValueError, match=message):
            call()
    for options, option in [({"candidate_labels": []}, "candidate_labels"),
                            ({"candidate_labels": ["a", ""]}, "candidate_labels[1]"),
                            ({"hypothesis_template": "none"}, "hypothesis_template"),
                            ({"hypothesis_template": "{a}"}, "hypothesis_template"),
                            ({"multi_label": 1}, "multi_label")]:
        with pytest.raises(OptionError) as raised:
            ours.settings(**options)
        assert raised.value.option == option, options
    assert ours.check_options() is None and ours.check_options(candidate_labels="a,b") == ["a", "b"]
