"""QuestionAnswerer against transformers 4.57.1's QuestionAnsweringPipeline, whose outputs are kept in
tests/products/data/transformers4_qa/ (transformers 5 has no question-answering pipeline: scripts/make_qa_reference.py
made them under v4, on the tiny random *ForQuestionAnswering models saved there): a WordPiece tokenizer (bert), a
byte-level BPE (roberta), SentencePiece Unigram ones (xlm-roberta, deberta-v2); default options, top_k,
handle_impossible_answer, align_to_words=False, a small max_answer_len, contexts longer than the window read in several
windows, accents, emoji, runs of spaces, punctuation, words of many pieces, several pairs at once. The same answers,
offsets and texts, scores within 1e-5; the models' logits equal to transformers 5's; a pair's result the same whatever
it is batched with; bad input refused by name."""

import json
import math
from pathlib import Path

import pytest
import torch

import minialign as ma
from minialign.text.tokenizer import pad

DATA = Path(__file__).parent / "data" / "transformers4_qa"
REFERENCE = json.loads((DATA / "reference.json").read_text(encoding="utf-8"))
FAMILIES = list(REFERENCE["outputs"])
CASES = list(REFERENCE["cases"])
# Cases where v4 filled its list with spans of score 0 (fewer possible spans than it takes: the module docstring of
# minialign/products/question_answering.py), which minialign leaves out; in every other case nothing is left out.
ZERO_FILLED = {("bert", "short_context")}
TOL = 1e-5

_answerers: dict[str, ma.QuestionAnswerer] = {}


def answerer(family: str) -> ma.QuestionAnswerer:
    if family not in _answerers:
        _answerers[family] = ma.QuestionAnswerer.from_pretrained(DATA / family)
    return _answerers[family]


def run(qa, case: dict):
    """Our call, as the pipeline was called (scripts/make_qa_reference.py `call`)."""
    inputs, options = case["inputs"], case["options"]
    if case["call"] == "dicts":
        return qa(inputs, **options)
    return qa(question=inputs[0], context=inputs[1], **options)


def per_pair(result, case: dict) -> list[list[dict]]:
    """A call's result as a list (one per pair) of lists of answers, from the pipeline's shapes or ours."""
    results = [result] if case["call"] == "pair" else result
    return [[answers] if isinstance(answers, dict) else answers for answers in results]


def assert_same(ours: list[list[dict]], theirs: list[list[dict]]) -> float:
    """The same answers (keys in v4's order, start, end, text), scores within TOL; the largest score difference."""
    worst = 0.0
    assert len(ours) == len(theirs)
    for mine, reference in zip(ours, theirs, strict=True):
        assert [list(a) for a in mine] == [["score", "start", "end", "answer"]] * len(mine)
        assert [(a["start"], a["end"], a["answer"]) for a in mine] == \
            [(a["start"], a["end"], a["answer"]) for a in reference]
        for a, b in zip(mine, reference):
            assert math.isclose(a["score"], b["score"], abs_tol=TOL), (a, b)
            worst = max(worst, abs(a["score"] - b["score"]))
    return worst


def test_the_reference_was_made_by_transformers_4():
    assert REFERENCE["transformers"] == "4.57.1"
    assert set(FAMILIES) == {"bert", "roberta", "xlm-roberta", "deberta-v2"}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("family", FAMILIES)
def test_matches_the_v4_pipeline(family, case):
    spec = REFERENCE["cases"][case]
    ours = run(answerer(family), spec)
    top_k = spec["options"].get("top_k", 1)
    shapes = [ours] if spec["call"] == "pair" else ours
    assert all(isinstance(r, dict) if top_k == 1 else isinstance(r, list) for r in shapes)  # shape by top_k
    theirs = per_pair(REFERENCE["outputs"][family][case], spec)
    kept = [[a for a in answers if a["score"] > 0] for answers in theirs]
    assert (kept != theirs) == ((family, case) in ZERO_FILLED)
    assert_same(per_pair(ours, spec), kept)


def test_zero_filled_answers_are_v4s_spans_of_score_0():
    """Where v4 filled its list (short_context), what minialign leaves out are entries of score 0 with no text."""
    theirs = per_pair(REFERENCE["outputs"]["bert"]["short_context"], REFERENCE["cases"]["short_context"])[0]
    assert [a for a in theirs if a["score"] == 0] == [{"score": 0.0, "start": 0, "end": 0, "answer": ""}]


def test_the_no_answer_entry_can_win():
    """handle_impossible_answer: the CLS token's start x end probability, as {"start": 0, "end": 0, "answer": ""}."""
    ours = run(answerer("roberta"), REFERENCE["cases"]["impossible_short"])
    assert ours[0]["answer"] == "" and ours[0]["start"] == ours[0]["end"] == 0 and ours[0]["score"] > ours[1]["score"]


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_equal_transformers_5(family):
    """The saved models' start and end logits, ours (padded and packed) against transformers 5's
    AutoModelForQuestionAnswering, over the windows of the longest case."""
    import transformers

    qa = answerer(family)
    theirs = transformers.AutoModelForQuestionAnswering.from_pretrained(DATA / family).eval()
    question, context = REFERENCE["cases"]["long_windows"]["inputs"]
    windows = qa.tokenizer.encode_pair_windows(question, context, max_length=64, stride=8)
    assert len(windows) > 3
    batch = pad([w.ids for w in windows], [w.type_ids for w in windows],
                pad_id=qa.tokenizer.pad_token_id, token_types=qa.tokenizer.return_token_type_ids)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        reference = theirs(**batch)
        for unpad in (False, True):
            out = qa.model(**batch, unpad=unpad)
            for mine, hf in ((out.start_logits, reference.start_logits), (out.end_logits, reference.end_logits)):
                torch.testing.assert_close(mine[real], hf[real], atol=TOL, rtol=0)


def test_a_pair_is_the_same_whatever_it_is_batched_with():
    qa = answerer("bert")
    batch = REFERENCE["cases"]["batch"]["inputs"]
    long = {"question": "Which city?", "context": REFERENCE["cases"]["long_windows"]["inputs"][1]}
    together = qa([*batch, long], top_k=3, doc_stride=8)
    for item, result in zip([*batch, long], together, strict=True):
        assert qa(item, top_k=3, doc_stride=8) == result  # every score bit for bit
    assert qa(long["question"], long["context"], doc_stride=8) == together[-1][0]


def test_the_forms_of_input_agree():
    qa = answerer("xlm-roberta")
    questions, context = ["Which city?", "When?"], REFERENCE["cases"]["default"]["inputs"][1]
    expected = [qa(q, context) for q in questions]
    assert qa(questions, context) == expected
    assert qa(questions, [context, context]) == expected
    assert qa(question=questions, context=context) == expected
    assert qa([{"question": q, "context": context} for q in questions]) == expected
    assert qa({"question": questions[0], "context": context}) == expected[0]
    assert qa([{"question": questions[0], "context": context}]) == [expected[0]]  # a list gives a list
    assert qa.predict(questions[0], context) == expected[0]


def test_settings_and_check():
    qa = answerer("bert")
    settings = qa.settings(top_k=2)
    assert settings["max_seq_len"] == 64 and settings["doc_stride"] == 32 and settings["top_k"] == 2
    assert qa.check("q", "") == [("context", "cannot be empty")]
    assert qa.check(None, 3, null="null") == [("question", "is null"), ("context", "is int, not a string")]
    assert qa.check("q", "c") == []


def test_check_names_what_predict_refuses_for_a_pair():
    """check's token problems (a context without tokens, a question filling the window, a stride leaving a long
    context no room) are the pairs predict refuses, and a pair it passes predict answers; options as predict's."""
    qa = answerer("bert")
    long = REFERENCE["cases"]["long_windows"]["inputs"][1]
    question = "Where was the tower built?"
    room = 64 - 3 - len(qa.tokenizer.backend.encode(question, add_special_tokens=False).ids)
    cases = [(question, "   ", {}, "context", "has no tokens"),
             (" ".join(["tower"] * 70), long, {}, "question", "leaving no room for the context"),
             (question, long, {"doc_stride": room}, "question", f"doc_stride ({room}) must be below {room}"),
             (question, long, {"max_seq_len": 40, "doc_stride": 40 - 3 - (64 - 3 - room)}, "question", "must be below")]
    for q, c, options, which, message in cases:
        (problem,) = qa.check(q, c, **options)
        assert problem[0] == which and message in problem[1], (problem, options)
        with pytest.raises(ValueError):
            qa(q, c, **options)
    for q, c, options in [(question, long, {"doc_stride": room - 1}), (question, "Paris.", {"doc_stride": room}),
                          (" ".join(["tower"] * 58), "Paris.", {})]:
        assert qa.check(q, c, **options) == [], options
        assert qa(q, c, **options)["answer"]
    from minialign.products.runner import OptionError

    with pytest.raises(OptionError, match="doc_stride must be an int >= 0") as refused:
        qa.check(question, long, doc_stride=-1)
    assert refused.value.option == "doc_stride"


@pytest.mark.parametrize("call,match", [
    (lambda qa: qa(["Where?", ""], ["A context.", "Another."]), r"question\[1\] cannot be empty"),
    (lambda qa: qa("Where?", ""), r"context\[0\] cannot be empty"),
    (lambda qa: qa([{"question": "Where?", "context": ""}]), r"context\[0\] cannot be empty"),
    (lambda qa: qa(["a", None], ["b", "c"]), r"question\[1\] is None"),
    (lambda qa: qa(["a", "b"], ["c", 3]), r"context\[1\] is int"),
    (lambda qa: qa(["a", "b"], ["c"]), "don't have the same lengths: 2 questions, 1 contexts"),
    (lambda qa: qa("a", ["b", "c"]), "a list of contexts needs a list of questions"),
    (lambda qa: qa([{"question": "a"}]), r"inputs\[0\] has no 'context' key"),
    (lambda qa: qa(["a"]), r"inputs\[0\] must be a dict"),
    (lambda qa: qa([], []), "no questions"),
    (lambda qa: qa("Where?", "   "), r"context\[0\] has no tokens"),
    (lambda qa: qa("Where?", "A context.", top_k=0), "top_k must be an int >= 1, got 0"),
    (lambda qa: qa("Where?", "A context.", max_answer_len=0), "max_answer_len must be an int >= 1"),
    (lambda qa: qa("Where?", "A context.", max_seq_len=65), r"max_seq_len must be an int .* model's window \(64\)"),
    (lambda qa: qa("Where?", "A context.", doc_stride=-1), "doc_stride must be an int >= 0"),
    (lambda qa: qa("Where?", "A context.", doc_stride=65), r"doc_stride \(65\) is larger than max_seq_len \(64\)"),
    (lambda qa: qa("Where?", "A context.", handle_impossible_answer="yes"), "handle_impossible_answer must be"),
])
def test_bad_input_is_refused_by_name(call, match):
    with pytest.raises(ValueError, match=match):
        call(answerer("bert"))


def test_a_stride_that_leaves_the_context_no_room_is_refused_with_its_pair():
    """v4 refuses doc_stride > max_seq_len; past that, `tokenizers` panics where the stride is not below the room the
    question leaves the context (max_seq_len less the question's and the special tokens): refused here, naming the
    pair, where its context needs windows (a context that fits takes any stride, as in v4)."""
    qa = answerer("bert")
    long = REFERENCE["cases"]["long_windows"]["inputs"][1]
    question = "Where was the tower built?"
    room = 64 - 3 - len(qa.tokenizer.backend.encode(question, add_special_tokens=False).ids)
    assert qa(question, "Paris.", doc_stride=room)  # fits: one window
    qa(["Which city?", question], [long, long], doc_stride=room - 1)
    with pytest.raises(ValueError, match=rf"question\[1\] and context\[1\] .*the stride \({room}\) must be below {room}"):
        qa(["Which city?", question], ["Paris.", long], doc_stride=room)
    long_question = " ".join(["tower"] * 70)
    with pytest.raises(ValueError, match=r"question\[0\] and context\[0\] .* leaving no room for the second text"):
        qa(long_question, long)
