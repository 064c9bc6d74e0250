"""HallucinationDetector against lettucedetect's own HallucinationDetector(method="transformer") (the package, a test
extra: lettucedetect/detectors/transformer.py TransformerDetector) loaded on the same tiny random
ModernBertForTokenClassification and EuroBertForTokenClassification directories (2 labels, saved by transformers, their
tokenizers from family_builders.py): the prompts of every language's templates equal to prompt_utils.py's; the same
answer tokens and predictions, probabilities within 1e-5, the same spans (start, end, text) with confidences within
1e-5, padded and packed, on contexts that fit and on contexts grouped into several chunks (the max over chunks), with a
question and without (a summary's prompt), in several languages; predict_prompt and min_confidence alike; a passage
longer than the window cut as the reference cuts it, and the cut reported; an example's result the same whatever it is
batched with; bad input refused by name."""

import warnings

import pytest
import torch
from family_builders import FAMILIES, hf_model, write_tokenizer

import minialign as ma
from minialign.products.lettuce import LANGS, format_prompt
from minialign.runtime.engine import TruncationWarning

lettucedetect = pytest.importorskip("lettucedetect", reason="the reference: pip install lettucedetect (a test extra)")

WINDOW = 360  # the detectors' max_length: the English template and a few passages fit, the long contexts do not
TOL = 1e-5
PASSAGES = [f"Passage {i}: the tower was built in Paris and opened in 1889; police said the company grew by {i}%."
            for i in range(9)]
OTHERS = ["Der Turm wurde in Paris gebaut.", "La tour a été construite à Paris en 1889.", "Zürich, Genève et Bâle."]
QUESTION = "When was the tower opened?"
ANSWER = "The tower opened in 1889 in Paris; officials reported on Monday that the company grew 5%."
# (lang, context, question): a context that fits and ones grouped into several chunks, questions and summaries
CASES = {
    "en-short": ("en", PASSAGES[:1], QUESTION),
    "en-chunked": ("en", PASSAGES, QUESTION),
    "de-chunked": ("de", PASSAGES[:5] + OTHERS, "Wann wurde der Turm eröffnet?"),
    "fr-summary": ("fr", PASSAGES[:7], None),
    "cn-short": ("cn", OTHERS, "塔是什么时候开放的？"),
}


@pytest.fixture(scope="module")
def detectors(tmp_path_factory):
    """family -> (directory, the reference detector per language) of a tiny random *ForTokenClassification of two
    labels whose positions hold WINDOW, its head scaled and its label-1 bias set so that both labels occur."""
    from lettucedetect.models.inference import HallucinationDetector

    built = {}

    def get(family):
        if family not in built:
            directory = tmp_path_factory.mktemp(f"lettuce-{family}")
            vocab = write_tokenizer(FAMILIES[family], directory, wordpiece_dir=None, bpe_dir=None)
            model = hf_model(FAMILIES[family], vocab, num_labels=2, head="ForTokenClassification",
                             max_position_embeddings=512)
            with torch.no_grad():
                model.classifier.weight.mul_(8)
                ids = torch.arange(5, min(vocab, 200))[None]
                logits = model(input_ids=ids).logits[0]
                model.classifier.bias[1] -= (logits[:, 1] - logits[:, 0]).median()  # half the tokens hallucinated
            model.save_pretrained(directory)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                theirs = {lang: HallucinationDetector(method="transformer", model_path=str(directory),
                                                      max_length=WINDOW, device="cpu", lang=lang) for lang in LANGS}
            built[family] = directory, theirs
        return built[family]

    return get


def _same_tokens(mine, theirs):
    assert [t["token"] for t in mine] == [t["token"] for t in theirs]
    assert [t["pred"] for t in mine] == [t["pred"] for t in theirs]
    assert max(abs(a["prob"] - b["prob"]) for a, b in zip(mine, theirs)) <= TOL
    assert set(mine[0]) == set(theirs[0]) == {"token", "pred", "prob"}


def _same_spans(mine, theirs):
    assert [(s["start"], s["end"], s["text"]) for s in mine] == [(s["start"], s["end"], s["text"]) for s in theirs]
    assert all(abs(a["confidence"] - b["confidence"]) <= TOL for a, b in zip(mine, theirs))
    assert all(list(s) == ["start", "end", "confidence", "text"] for s in mine)


@pytest.mark.parametrize("prompt_lang", LANGS)
def test_the_prompts_are_the_reference_templates(prompt_lang):
    from lettucedetect.detectors.prompt_utils import PromptUtils

    for context in (PASSAGES[:3], ["one $passage with ${braces}"], []):
        for question in (QUESTION, None):
            assert format_prompt(context, question, prompt_lang) == PromptUtils.format_context(context, question,
                                                                                               prompt_lang)


@pytest.mark.parametrize("family", ["modernbert", "eurobert"])
@pytest.mark.parametrize("unpad", [True, False])
def test_tokens_and_spans_equal_lettucedetects(detectors, family, unpad):
    directory, theirs = detectors(family)
    ours = ma.HallucinationDetector.from_pretrained(directory, max_length=WINDOW, unpad=unpad)
    hallucinated = chunked = 0
    for name, (lang, context, question) in CASES.items():
        reference = theirs[lang].detector
        groups = reference._group_passages_into_chunks(context, question, ANSWER)
        assert ours._groups(context, question, ANSWER, lang) == groups, name
        chunked += len(groups) > 1 and any(len(g) > 1 for g in groups)
        for output_format, same in (("tokens", _same_tokens), ("spans", _same_spans)):
            expected = theirs[lang].predict(context=context, question=question, answer=ANSWER,
                                            output_format=output_format)
            got = ours.predict(context=context, question=question, answer=ANSWER, output_format=output_format,
                               lang=lang)
            same(got, expected)
            hallucinated += output_format == "spans" and len(got)
    assert chunked >= 2 and hallucinated >= 5  # the cases chunk and find spans: a comparison of something
    assert max(len(ours._groups(c, q, ANSWER, lang)) for lang, c, q in CASES.values()) > 2


@pytest.mark.parametrize("family", ["modernbert", "eurobert"])
def test_the_detectors_language_min_confidence_and_prompts(detectors, family):
    directory, theirs = detectors(family)
    ours = ma.HallucinationDetector.from_pretrained(directory, max_length=WINDOW, lang="de")
    lang, context, question = CASES["de-chunked"]
    confidences = sorted(s["confidence"] for s in theirs["de"].predict(context, ANSWER, question, "spans"))
    threshold = (confidences[0] + confidences[-1]) / 2
    expected = theirs["de"].predict(context, ANSWER, question, "spans", min_confidence=threshold)
    assert 0 < len(expected) < len(confidences)  # the threshold drops some spans, not all
    _same_spans(ours.predict(context, ANSWER, question, "spans", min_confidence=threshold), expected)  # lang: ours
    prompts = [format_prompt(PASSAGES[:2], QUESTION, "en"), "A prompt written by hand."]
    answers = [ANSWER, "Paris, 1889."]
    for output_format, same in (("tokens", _same_tokens), ("spans", _same_spans)):
        for mine, reference in zip(ours.predict_prompt_batch(prompts, answers, output_format),
                                   theirs["en"].predict_prompt_batch(prompts, answers, output_format)):
            same(mine, reference)
        same(ours.predict_prompt(prompts[1], answers[1], output_format),
             theirs["en"].predict_prompt(prompts[1], answers[1], output_format))


@pytest.mark.parametrize("family", ["modernbert", "eurobert"])
def test_a_passage_longer_than_the_window_is_cut_as_theirs_and_reported(detectors, family):
    directory, theirs = detectors(family)
    ours = ma.HallucinationDetector.from_pretrained(directory, max_length=WINDOW)
    context = [PASSAGES[0], " ".join(PASSAGES)]  # the second passage alone is longer than the window
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = theirs["en"].predict(context, ANSWER, QUESTION, "tokens")
    with pytest.warns(TruncationWarning, match="1 of 1 example"):
        mine = ours.predict(context, ANSWER, QUESTION, "tokens")
    _same_tokens(mine, expected)
    details = ours.predict_batch([context, PASSAGES[:1]], [ANSWER, ANSWER], [QUESTION, QUESTION],
                                 return_details=True, warn_truncation=False)
    assert details[0]["chunks"] == 2 and details[0]["truncated"] > 0
    assert details[1] == {"prediction": ours.predict(PASSAGES[:1], ANSWER, QUESTION), "chunks": 1, "truncated": 0}
    tally = ours.tally()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a tally given: the call does not warn
        ours.predict(context, ANSWER, QUESTION, tally=tally)
    assert (tally.cut, tally.inputs) == (1, 1) and tally.tokens == details[0]["truncated"]


@pytest.mark.parametrize("family", ["modernbert", "eurobert"])
def test_an_example_is_the_same_whatever_it_is_batched_with(detectors, family):
    directory, _ = detectors(family)
    ours = ma.HallucinationDetector.from_pretrained(directory, max_length=WINDOW, batch_size=3)
    examples = [(context, ANSWER if i % 2 else "Paris, 1889.", question)
                for i, (_, context, question) in enumerate(CASES.values())]
    contexts, answers, questions = zip(*examples)
    for output_format in ("tokens", "spans"):
        together = ours.predict_batch(contexts, answers, questions, output_format=output_format, lang="en")
        for (context, answer, question), result in zip(examples, together):
            assert ours.predict(context, answer, question, output_format) == result  # exact: probabilities bit for bit


def test_bad_input_is_refused(detectors):
    directory, _ = detectors("modernbert")
    ours = ma.HallucinationDetector.from_pretrained(directory, max_length=WINDOW)
    with pytest.raises(ValueError, match="output_format must be one of"):
        ours.predict(PASSAGES[:1], ANSWER, output_format="json")
    with pytest.raises(ValueError, match=r"min_confidence must be in \[0, 1\]"):
        ours.predict(PASSAGES[:1], ANSWER, output_format="spans", min_confidence=1.5)
    with pytest.raises(ValueError, match="lang must be one of"):
        ours.predict(PASSAGES[:1], ANSWER, lang="xx")
    with pytest.raises(ValueError, match="lang must be one of"):
        ma.HallucinationDetector.from_pretrained(directory, lang="english")
    with pytest.raises(ValueError, match="context of example 0 must be a list of passages"):
        ours.predict("one passage as a string", ANSWER)
    with pytest.raises(ValueError, match=r"context\[1\] of example 0 is int"):
        ours.predict(["fine", 3], ANSWER)
    with pytest.raises(ValueError, match="answer of example 0 is None"):
        ours.predict(PASSAGES[:1], None)
    with pytest.raises(ValueError, match="question of example 0 is list"):
        ours.predict(PASSAGES[:1], ANSWER, question=["?"])
    with pytest.raises(ValueError, match="the answer of example 0 has .* tokens"):
        ours.predict(PASSAGES[:1], " ".join(PASSAGES))  # the answer alone fills the window
    with pytest.raises(ValueError, match="answers must be a list"):
        ours.predict_batch([PASSAGES[:1]], ANSWER)
    with pytest.raises(ValueError, match="must be as long"):
        ours.predict_batch([PASSAGES[:1]], [ANSWER, ANSWER])
    assert ours.predict([], "", output_format="spans") == []  # nothing to check: the reference's result too


def test_every_face_writes_what_predict_batch_gives(detectors, tmp_path):
    """`minialign score --method lettuce` (a file: {"spans": [...]} per row; one example: printed), Ray's
    LettuceBatches and the service's POST /rows/lettuce answer HallucinationDetector.predict_batch's spans."""
    import json

    from starlette.testclient import TestClient

    from minialign.apps import raydata
    from minialign.apps.cli import main as cli
    from minialign.apps.serve import Limits, Models, Service

    directory, _ = detectors("modernbert")
    ours = ma.HallucinationDetector.from_pretrained(directory, max_length=WINDOW)
    rows = [{"context": PASSAGES[0], "question": QUESTION, "answer": ANSWER},
            {"context": " ".join(PASSAGES[:2]), "answer": ANSWER}]  # no question: a summary
    expected = ours.predict_batch([[r["context"]] for r in rows], [r["answer"] for r in rows],
                                  [r.get("question") for r in rows], output_format="spans")
    assert any(expected)
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert cli(["score", "--method", "lettuce", "--model", str(directory), "--max-length", str(WINDOW),
                "--input", str(tmp_path / "rows.jsonl"), "--output", str(tmp_path / "out.jsonl")]) == 0
    written = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [w["spans"] for w in written] == json.loads(json.dumps(expected))
    mapper = raydata.batches_class("lettuce")(str(directory), max_length=WINDOW)
    batch = mapper({"context": [r["context"] for r in rows], "answer": [r["answer"] for r in rows],
                    "question": [r.get("question") for r in rows]})
    assert [list(s) for s in batch["spans"]] == [list(s) for s in expected]
    with TestClient(Service(Models(products={"lettuce": ours}), Limits()).app()) as client:
        answer = client.post("/rows/lettuce", json={"rows": rows})
        assert answer.status_code == 200 and [r["spans"] for r in answer.json()["results"]] == [w["spans"]
                                                                                               for w in written]
        tokens = client.post("/rows/lettuce", json={"rows": rows[:1], "options": {"tokens": True}}).json()
        assert tokens["results"][0]["tokens"] == json.loads(json.dumps(ours.predict_batch(
            [[rows[0]["context"]]], [ANSWER], [QUESTION], output_format="tokens")[0]))
        bad = client.post("/rows/lettuce", json={"rows": [{"context": "c"}]})
        assert bad.status_code == 422 and "answer" in bad.json()["error"]
