"""AlignScorer against the reference implementation of the original Inferencer algorithm on
transformers (scripts/original_alignscore.py): per-example mini-batches, every pair padded to
max_length, MLM head run."""

import math

import pytest
import torch
import transformers
from conftest import CORPUS, WORDS, _sentence

from original_alignscore import OriginalAlignScore

import minialign as ma
from minialign.products.alignscore import TruncationWarning, chunk_context


@pytest.fixture(scope="module")
def hf_tokenizer(tiny_alignscore):
    return transformers.AutoTokenizer.from_pretrained(tiny_alignscore[1], tokenizer_type="roberta")


@pytest.mark.parametrize("mode", ["nli_sp", "bin_sp", "reg_sp", "nli", "bin", "reg"])
def test_scores_equal_original_algorithm(tiny_alignscore, hf_tokenizer, mode):
    path, backbone, ref = tiny_alignscore
    scorer = ma.AlignScorer.from_pretrained(path, backbone=str(backbone), mode=mode, batch_size=4)
    contexts, claims = zip(*CORPUS)
    expected = OriginalAlignScore(ref, hf_tokenizer, mode, ma.split_sentences).score(contexts, claims)
    got = scorer.score(list(contexts), list(claims))
    assert len(got) == len(CORPUS)
    assert max(abs(a - b) for a, b in zip(got, expected)) <= 1e-5, (got, expected)


def test_batch_size_independence(tiny_alignscore):
    path, backbone, _ = tiny_alignscore
    contexts, claims = map(list, zip(*CORPUS))
    results = [ma.AlignScorer.from_pretrained(path, backbone=str(backbone), batch_size=b).score(contexts, claims)
               for b in (1, 3, 64)]
    for other in results[1:]:
        assert max(abs(a - b) for a, b in zip(results[0], other)) <= 1e-5


def test_workers_give_the_scores_of_one_process(tiny_alignscore):
    path, backbone, _ = tiny_alignscore
    contexts, claims = map(list, zip(*CORPUS))
    one = ma.AlignScorer.from_pretrained(path, backbone=str(backbone), batch_size=4).score(contexts, claims,
                                                                                          return_details=True)
    scorer = ma.AlignScorer.from_pretrained(path, backbone=str(backbone), batch_size=4, workers=2,
                                            splitter=lambda text: ma.split_sentences(text))  # stays in this process
    try:
        two = scorer.score(contexts, claims, return_details=True)
    finally:
        scorer.engine.close()
    assert [d["chunks"] for d in two] == [d["chunks"] for d in one]
    assert [d["truncated"] for d in two] == [d["truncated"] for d in one]
    assert max(abs(a["score"] - b["score"]) for a, b in zip(one, two)) <= 1e-6


@pytest.mark.parametrize("unpad", [True, False])
def test_token_budget_bounds_every_batch(tiny_alignscore, monkeypatch, unpad):
    path, backbone, _ = tiny_alignscore
    contexts, claims = map(list, zip(*CORPUS))
    reference = ma.AlignScorer.from_pretrained(path, backbone=str(backbone)).score(contexts, claims)
    scorer = ma.AlignScorer.from_pretrained(path, backbone=str(backbone), max_tokens=200, unpad=unpad)
    shapes = []
    forward = scorer.model.forward
    monkeypatch.setattr(scorer.model, "forward", lambda input_ids, attention_mask, **kw: shapes.append(
        (tuple(input_ids.shape), int(attention_mask.sum()))) or forward(input_ids, attention_mask, **kw))
    scores = scorer.score(contexts, claims)
    assert max(abs(a - b) for a, b in zip(scores, reference)) <= 1e-5
    assert len(shapes) > 2
    for (rows, length), real in shapes:
        run = real if unpad else rows * length
        assert run <= 200 or rows == 1, (rows, length, real)  # an over-long pair runs alone
    assert any(rows == 1 and length > 200 for (rows, length), _ in shapes)  # the corpus has a chunk > 200 tokens


def test_batching_arguments_are_checked(tiny_alignscore):
    path, backbone, _ = tiny_alignscore
    for bad in ({"max_tokens": 0}, {"max_tokens": 2.5}, {"batch_size": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            ma.AlignScorer.from_pretrained(path, backbone=str(backbone), **bad)


def test_details(tiny_alignscore):
    path, backbone, _ = tiny_alignscore
    scorer = ma.AlignScorer.from_pretrained(path, backbone=str(backbone))
    context, claim = CORPUS[2]
    (details,) = scorer.score([context], [claim], return_details=True)
    chunks = chunk_context(context, ma.split_sentences(context))
    assert details["chunks"] == chunks and len(chunks) > 1
    assert details["sentences"] == ma.split_sentences(claim)
    aligned = torch.tensor(details["aligned"])
    assert aligned.shape == (len(chunks), 3)
    total = aligned + torch.tensor(details["neutral"]) + torch.tensor(details["contradiction"])
    torch.testing.assert_close(total, torch.ones_like(total))
    assert math.isclose(details["score"], aligned.max(dim=0).values.mean().item(), abs_tol=1e-7)
    assert scorer.model.mlm_head is not None and isinstance(scorer.tokenizer, ma.Tokenizer)


def test_identical_pairs_scored_once(tiny_alignscore, monkeypatch):
    path, backbone, _ = tiny_alignscore
    scorer = ma.AlignScorer.from_pretrained(path, backbone=str(backbone))
    rows = []
    forward = scorer.model.forward
    monkeypatch.setattr(scorer.model, "forward",
                        lambda input_ids, *a, **k: rows.append(input_ids.shape[0]) or forward(input_ids, *a, **k))
    scores = scorer.score(["Same context."] * 5, ["Same claim."] * 5)
    assert rows == [1] and len(set(scores)) == 1


def test_mlm_head_never_run(tiny_alignscore, monkeypatch):
    path, backbone, _ = tiny_alignscore
    scorer = ma.AlignScorer.from_pretrained(path, backbone=str(backbone))
    monkeypatch.setattr(scorer.model.mlm_head, "forward", lambda *a, **k: pytest.fail("MLM head ran"))
    scorer.score(["A context."], ["A claim."])


def test_bad_input_names_every_index_before_model_work(tiny_alignscore, monkeypatch):
    path, backbone, _ = tiny_alignscore
    scorer = ma.AlignScorer.from_pretrained(path, backbone=str(backbone))
    monkeypatch.setattr(scorer, "score_pairs", lambda *a, **k: pytest.fail("model ran"))
    with pytest.raises(ValueError) as err:
        scorer.score(["ok", None, "ok", 5], ["fine.", "fine.", "   ", None])
    message = str(err.value)
    for part in ("contexts[1]", "contexts[3]", "claims[2] has no sentence", "claims[3]"):
        assert part in message
    with pytest.raises(ValueError, match="equal length"):
        scorer.score(["a"], ["b.", "c."])
    with pytest.raises(ValueError, match="both as strings .* got str and list"):
        scorer.score("a context", ["a claim."])


def test_one_context_and_claim_give_one_score(tiny_alignscore):  # noqa: F811
    """Two strings in, that example's score out (a float, or its dict): the list call's first result."""
    path, backbone, _ = tiny_alignscore
    scorer = ma.AlignScorer.from_pretrained(path, backbone=str(backbone))
    one = scorer.score("The tower is in Paris.", "It is in Paris.")
    assert isinstance(one, float) and one == scorer.score(["The tower is in Paris."], ["It is in Paris."])[0]
    details = scorer.score("The tower is in Paris.", "It is in Paris.", mode="nli", return_details=True)
    assert details == scorer.score(["The tower is in Paris."], ["It is in Paris."], mode="nli", return_details=True)[0]


def test_long_context_scores_in_bounded_batches(tiny_alignscore, monkeypatch):
    """A 100,000-word context: every chunk AlignScore's rule makes is scored, batch by batch, each
    batch within the batch size and the token budget."""
    path, backbone, _ = tiny_alignscore
    scorer = ma.AlignScorer.from_pretrained(path, backbone=str(backbone), batch_size=16)
    context = " ".join(_sentence(i, 20) for i in range(5000))
    expected = chunk_context(context, ma.split_sentences(context))
    batches, forward = [], scorer.forward
    monkeypatch.setattr(scorer, "forward", lambda batch: batches.append(batch["attention_mask"]) or forward(batch))
    (details,) = scorer.score([context], ["Police said the company grew."], return_details=True)
    assert details["chunks"] == expected and len(expected) > 200 and 0.0 <= details["score"] <= 1.0
    assert sum(len(mask) for mask in batches) == len(set(expected))  # one pair per distinct chunk, run once
    assert all(len(mask) <= 16 and int(mask.sum()) <= scorer.engine.max_tokens for mask in batches)
    assert len(batches) >= len(set(expected)) / 16


def test_custom_splitter(tiny_alignscore):
    path, backbone, _ = tiny_alignscore
    scorer = ma.AlignScorer.from_pretrained(path, backbone=str(backbone), splitter=lambda t: t.split("|") if t else [])
    (details,) = scorer.score(["a|b"], ["c|d|e"], return_details=True)
    assert details["sentences"] == ["c", "d", "e"]


def test_unpadded_scoring_equals_padded(tiny_alignscore):
    path, backbone, _ = tiny_alignscore
    contexts, claims = map(list, zip(*CORPUS))
    padded = ma.AlignScorer.from_pretrained(path, backbone=str(backbone), batch_size=4, unpad=False)
    assert not padded.unpad
    padded = padded.score(contexts, claims)
    packed = ma.AlignScorer.from_pretrained(path, backbone=str(backbone), batch_size=4, unpad=True)
    assert packed.unpad
    assert max(abs(a - b) for a, b in zip(packed.score(contexts, claims), padded)) <= 1e-5


@pytest.mark.slow
def test_compiled_scoring_buckets_lengths(tiny_alignscore, monkeypatch):
    path, backbone, _ = tiny_alignscore
    contexts, claims = map(list, zip(*CORPUS[:3]))
    plain = ma.AlignScorer.from_pretrained(path, backbone=str(backbone), batch_size=2).score(contexts, claims)
    compiled = ma.AlignScorer.from_pretrained(path, backbone=str(backbone), batch_size=2, compile=True)
    lengths = []
    forward = compiled.model.forward
    monkeypatch.setattr(compiled.model, "forward",
                        lambda input_ids, *a, **k: lengths.append(input_ids.shape[1]) or forward(input_ids, *a, **k))
    got = compiled.score(contexts, claims)
    assert lengths and all(n % 64 == 0 or n == compiled.max_length for n in lengths)
    assert max(abs(a - b) for a, b in zip(got, plain)) <= 1e-5


def test_long_unpunctuated_context_is_tokenized_once(tiny_alignscore, hf_tokenizer, monkeypatch):
    """No sentence boundary: the whole context is one chunk, paired with every claim sentence. It is
    tokenized once (not once per sentence), the scores stay the original's, and the cut is reported."""
    path, backbone, ref = tiny_alignscore
    scorer = ma.AlignScorer.from_pretrained(path, backbone=str(backbone))
    context = " ".join(WORDS[i % len(WORDS)] for i in range(3000))
    claim = " ".join(_sentence(i) for i in range(12))
    backend, chars = scorer.tokenizer.backend, []

    class Spy:  # counts the characters handed to the tokenizer
        def __getattr__(self, name):
            return getattr(backend, name)

        def encode_batch(self, inputs, *args, **kwargs):
            chars.append(sum(len(x) if isinstance(x, str) else sum(map(len, x)) for x in inputs))
            return backend.encode_batch(inputs, *args, **kwargs)

    monkeypatch.setattr(scorer.tokenizer, "backend", Spy())
    with pytest.warns(TruncationWarning, match=r"12 of 12 \(chunk, sentence\) pair\(s\) were cut by the 512-token"):
        (details,) = scorer.score([context], [claim], return_details=True)
    assert sum(chars) <= len(context) + len(claim)  # the context read once
    expected = OriginalAlignScore(ref, hf_tokenizer, "nli_sp", ma.split_sentences).score([context], [claim])
    assert abs(details["score"] - expected[0]) <= 1e-5
    n_context = len(hf_tokenizer(context, add_special_tokens=False)["input_ids"])
    assert len(details["truncated"][0]) == 12
    assert all(n_context - 512 < cut < n_context for cut in details["truncated"][0])


def test_no_truncation_no_warning(tiny_alignscore):
    import warnings

    path, backbone, _ = tiny_alignscore
    scorer = ma.AlignScorer.from_pretrained(path, backbone=str(backbone))
    with warnings.catch_warnings():
        warnings.simplefilter("error", TruncationWarning)
        (details,) = scorer.score(["A short context."], ["A claim."], return_details=True)
    assert details["truncated"] == [[0]]


def test_unencodable_text_is_named_before_model_work(tiny_alignscore, monkeypatch):
    path, backbone, _ = tiny_alignscore
    scorer = ma.AlignScorer.from_pretrained(path, backbone=str(backbone))
    monkeypatch.setattr(scorer, "score_pairs", lambda *a, **k: pytest.fail("model ran"))
    with pytest.raises(ValueError, match=r"claims\[1\] holds a lone surrogate \(U\+D83D"):
        scorer.score(["fine.", "fine."], ["ok.", "bad \ud83d."])
    monkeypatch.undo()
    assert 0.0 <= scorer.score(["NUL \x00 inside."], ["A claim."])[0] <= 1.0  # encodable: scored


def test_mode_per_call_equals_a_scorer_built_with_that_mode(tiny_alignscore):
    """One loaded scorer serves every mode: score(..., mode=) gives what a scorer built with that mode
    gives, a mode per example mixes them in one call, and the constructor's mode stays the default."""
    from minialign.products.alignscore import MODES

    path, backbone, _ = tiny_alignscore
    scorer = ma.AlignScorer.from_pretrained(path, backbone=str(backbone))
    contexts, claims = map(list, zip(*CORPUS[:5]))
    by_mode = {}
    for mode in MODES:
        built = ma.AlignScorer(scorer.model, scorer.tokenizer, mode=mode)
        by_mode[mode] = built.score(contexts, claims, return_details=True, warn_truncation=False)
        assert scorer.score(contexts, claims, mode=mode, return_details=True, warn_truncation=False) == by_mode[mode]
    assert scorer.score(contexts, claims, warn_truncation=False) == [d["score"] for d in by_mode["nli_sp"]]
    modes = [MODES[i % len(MODES)] for i in range(len(contexts))]
    mixed = scorer.score(contexts, claims, mode=modes, warn_truncation=False)
    assert max(abs(a - by_mode[m][i]["score"]) for i, (a, m) in enumerate(zip(mixed, modes))) <= 1e-6
    with pytest.raises(ValueError, match="mode must be one of"):
        scorer.score(contexts, claims, mode="best")
    with pytest.raises(ValueError, match="one per example"):
        scorer.score(contexts, claims, mode=["nli"])
    assert scorer.settings(mode="bin") == {"mode": "bin", "dtype": "float32"}
    from minialign.nn.precision import PLAIN, mixed

    scorer.model.precision = mixed(torch.bfloat16, layers="all")  # recorded: a file is not resumed under another
    assert scorer.settings(mode="bin") == {"mode": "bin", "dtype": "float32",
                                           "precision": "mixed bfloat16 (all projections)"}
    scorer.model.precision = PLAIN
