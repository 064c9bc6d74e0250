"""The runner contract (products/runner.py) held by every runner: the same from_pretrained keywords,
one forward the engine calls, truncation counted and reported the same way, which inputs exceed the
window, a budget changed through a method."""

import dataclasses
import inspect
import re
import shutil
import warnings

import pytest
import torch
from conftest import save_classifier

import minialign as ma
from minialign.products.runner import LOAD_KEYWORDS, LoadOptions, Loading, Runner
from minialign.runtime.engine import TruncationWarning

RUNNERS = (ma.AlignScorer, ma.MiniCheckScorer, ma.SentenceEncoder, ma.Classifier, ma.M3Encoder, ma.SparseEncoder)
LONG = "word " * 700  # over every window here (512 tokens, MiniLM's 256)


@pytest.fixture(scope="module")
def sources(tiny_alignscore, minicheck_dir, minilm_dir, tmp_path_factory, tiny_family):
    """Per runner: (src, its own keywords, its tokenizer's directory)."""
    path, backbone, _ = tiny_alignscore
    reranker = tmp_path_factory.mktemp("runner") / "reranker"
    save_classifier(reranker, "bert", 1, minilm_dir)
    m3 = tmp_path_factory.mktemp("runner") / "m3"  # MiniLM with random BGE-M3 heads (FlagEmbedding's files)
    shutil.copytree(minilm_dir, m3)
    torch.manual_seed(0)
    torch.save(torch.nn.Linear(384, 1).state_dict(), m3 / "sparse_linear.pt")
    torch.save(torch.nn.Linear(384, 384).state_dict(), m3 / "colbert_linear.pt")
    return {ma.AlignScorer: (path, {"backbone": str(backbone)}, backbone),
            ma.MiniCheckScorer: (minicheck_dir, {}, minicheck_dir),
            ma.SentenceEncoder: (minilm_dir, {}, minilm_dir),
            ma.Classifier: (reranker, {}, reranker),
            ma.M3Encoder: (m3, {}, minilm_dir),
            ma.SparseEncoder: (tiny_family.sparse_encoder("bert"), {}, tiny_family.masked_lm("bert")[0])}


def call(runner, texts, **options):
    """The runner's own call on texts (the scorers pair each with a short claim)."""
    if isinstance(runner, (ma.AlignScorer, ma.MiniCheckScorer)):
        return runner.score(texts, ["A claim."] * len(texts), **options)
    if isinstance(runner, (ma.SentenceEncoder, ma.SparseEncoder)):
        return runner.encode(texts, **options)
    if isinstance(runner, ma.M3Encoder):  # every output, so every head runs
        return runner.encode(texts, return_sparse=True, return_colbert_vecs=True, **options)["dense_vecs"]
    return runner.predict(texts, **options)


EVERY_RUNNER = RUNNERS + (ma.MultiVectorEncoder, ma.TokenClassifier, ma.FillMask, ma.ZeroShotClassifier,
                          ma.QuestionAnswerer)


def test_every_from_pretrained_takes_the_loading_keywords_typed():
    """Each from_pretrained takes its own options, then `**keywords: Unpack[Loading]` (PEP 692: help() and type
    checkers read the keywords from Loading); their defaults are LoadOptions', so the same on every runner."""
    for cls in EVERY_RUNNER:
        parameters = inspect.signature(cls.from_pretrained).parameters
        rest = [p for p in parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD]
        assert [p.annotation for p in rest] == ["Unpack[Loading]"], cls.__name__
        assert not set(parameters) & set(LOAD_KEYWORDS), cls.__name__  # no Loading keyword redeclared
        assert issubclass(cls, Runner) and "forward" in vars(cls)  # the one method the engine calls


def test_loading_types_the_keywords_load_options_defaults():
    """Loading (the keywords' types) and LoadOptions (their defaults) name the same keywords with the same types."""
    typed = {name: ref.__forward_arg__ for name, ref in Loading.__annotations__.items()}
    assert typed == {f.name: f.type for f in dataclasses.fields(LoadOptions)}
    assert LoadOptions() == LoadOptions(**{f.name: f.default for f in dataclasses.fields(LoadOptions)})
    with pytest.raises(TypeError, match="unexpected keyword argument 'batchsize'"):
        ma.Classifier.from_pretrained("unused", batchsize=3)


def test_the_pipeline_products_are_called_as_the_pipelines_are():
    """The token-head products are callable as transformers' pipelines: calling one is its predict."""
    for cls in (ma.TokenClassifier, ma.FillMask, ma.ZeroShotClassifier, ma.QuestionAnswerer):
        assert cls.__call__ is cls.predict, cls.__name__


@pytest.mark.parametrize("cls", RUNNERS, ids=lambda c: c.__name__)
def test_each_runner_loads_with_the_shared_keywords(cls, sources):
    src, own, tokenizer = sources[cls]
    runner = cls.from_pretrained(src, **own, tokenizer=tokenizer, device="cpu", dtype=torch.float32,
                                 attn_backend="eager", compile=False, unpad=False, batch_size=3, max_tokens=700,
                                 workers=1, revision=None, cache_dir=None)
    assert runner.batch_size == 3 and runner.engine.max_tokens == 700 and not runner.unpad
    assert runner.source == str(src) and runner.dtype_name == "float32"
    runner.set_budget(max_tokens=900, batch_size=5)
    assert (runner.engine.max_tokens, runner.batch_size) == (900, 5)
    with pytest.raises(ValueError, match="max_tokens"):
        runner.set_budget(max_tokens=0)
    out = call(runner, ["A short text.", "Another one."], warn_truncation=False)
    assert len(out) == 2


@pytest.mark.parametrize("cls", RUNNERS, ids=lambda c: c.__name__)
def test_every_runner_reports_truncation_the_same_way(cls, sources):
    src, own, _ = sources[cls]
    runner = cls.from_pretrained(src, **own)
    texts = ["A short text.", LONG]
    with pytest.warns(TruncationWarning) as caught:
        call(runner, texts)
    assert len(caught) == 1 and caught[0].filename == __file__  # one warning, at the caller's line
    message = str(caught[0].message)
    shape = rf"^1 of 2 .+ were cut by the {runner.max_length}-token window \((\d+) tokens in all\), as .+ does"
    assert re.match(shape, message), message
    assert message.endswith("under 'truncated'") == runner.has_details  # where calls return details
    with warnings.catch_warnings():
        warnings.simplefilter("error", TruncationWarning)
        call(runner, texts, warn_truncation=False)
        tally = runner.tally()
        call(runner, texts, warn_truncation=False, tally=tally)
        call(runner, texts[:1], warn_truncation=False, tally=tally)
    assert (tally.cut, tally.inputs, tally.tokens) == (1, 3, int(re.match(shape, message).group(1)))
    with pytest.warns(TruncationWarning, match=r"^1 of 3 "):
        tally.warn()
    if runner.has_details:
        details = call(runner, texts, return_details=True, warn_truncation=False)
        assert sum(n for d in details for row in d["truncated"] for n in row) == tally.tokens


def test_over_window_names_the_inputs_a_call_would_cut(sources):
    src, _, _ = sources[ma.Classifier]
    classifier = ma.Classifier.from_pretrained(src)
    window = classifier.max_length  # a BERT WordPiece tokenizer: "word" is one token, [CLS] and [SEP] two more
    half = "word " * (window // 2)
    inputs = ["short", LONG, ("short", "pair"), (half, half), "word " * (window - 2), "word " * (window - 1)]
    (long,) = classifier.tokenizer.encode([LONG], max_length=10_000)
    (pair,) = classifier.tokenizer.encode([half], [half], max_length=10_000)
    assert classifier.over_window(inputs) == [(1, len(long.ids)), (3, len(pair.ids)), (5, window + 1)]
    assert classifier.over_window(["short", ("a", "b")]) == []
    cut = classifier.predict([t if isinstance(t, str) else t[0] for t in inputs],
                             [None if isinstance(t, str) else t[1] for t in inputs], warn_truncation=False)
    assert cut.shape == (len(inputs),)


def test_mixed_singles_and_pairs_run_in_one_call_in_input_order(sources):
    src, _, _ = sources[ma.Classifier]
    classifier = ma.Classifier.from_pretrained(src)
    results = classifier.run(["one text", ("a text", "its pair"), "another text"])
    alone = classifier.run(["one text", "another text"])
    paired = classifier.run([("a text", "its pair")])
    torch.testing.assert_close(results.values[[0, 2]], alone.values, atol=1e-6, rtol=0)
    torch.testing.assert_close(results.values[[1]], paired.values, atol=1e-6, rtol=0)


@pytest.mark.parametrize("cls", RUNNERS)
def test_a_tally_replaces_the_per_call_warnings(cls, sources):
    """With tally= a call does not warn; the tally reports once for every call (unless warn_truncation=True)."""
    src, own, _ = sources[cls]
    runner = cls.from_pretrained(src, **own)
    tally = runner.tally()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TruncationWarning)  # a per-call warning would fail here
        for _ in range(3):
            call(runner, [LONG], tally=tally)
    assert tally.cut > 0 and tally.inputs >= 3
    with pytest.warns(TruncationWarning) as caught:
        tally.warn()
        call(runner, [LONG], tally=runner.tally(), warn_truncation=True)  # asked for: both
    assert len([w for w in caught if w.category is TruncationWarning]) == 2


@pytest.mark.parametrize("cls", RUNNERS)
def test_dtype_names_as_the_command_line_takes_them(cls, sources):
    """dtype= takes the command line's names and torch's, on every runner and model class; anything else is
    refused naming the values taken, before any weight is read."""
    src, own, _ = sources[cls]
    for name, expected in (("bf16", torch.bfloat16), ("float16", torch.float16), ("fp32", torch.float32),
                           ("BFloat16", torch.bfloat16)):
        runner = cls.from_pretrained(src, dtype=name, **own)
        assert {p.dtype for p in runner.model.parameters()} == {expected}, name
    for bad in ("int4", "float64x", 3, torch.int8):
        with pytest.raises(ValueError, match=r"dtype.*use one of 'fp32', 'bf16', 'fp16', 'float32', 'bfloat16', "
                                             r"'float16', 'auto', 'auto-all', 'int8' or a floating torch.dtype"):
            cls.from_pretrained(src, dtype=bad, **own)


def test_dtype_names_on_the_model_classes(minilm_dir):
    assert ma.Encoder.from_pretrained(minilm_dir, dtype="bf16").embeddings.word.weight.dtype == torch.bfloat16
    assert ma.Encoder.from_pretrained(minilm_dir, dtype="auto").embeddings.word.weight.dtype == torch.float32
    with pytest.raises(ValueError, match="unknown dtype 'int4'"):
        ma.Encoder.from_pretrained(minilm_dir, dtype="int4")


def test_one_string_in_one_result_out(sources):
    """encode("text") is one vector, as SentenceTransformer.encode gives; predict("a", "b") one input's scores
    (a 0-d score for a one-label model, as CrossEncoder.predict(("a", "b")) gives)."""
    src, own, _ = sources[ma.SentenceEncoder]
    encoder = ma.SentenceEncoder.from_pretrained(src, **own)
    one = encoder.encode("The tower is in Paris.", normalize_embeddings=True)
    assert one.shape == (encoder.dimension,)
    torch.testing.assert_close(one, encoder.encode(["The tower is in Paris."], normalize_embeddings=True)[0])
    src, own, _ = sources[ma.Classifier]
    reranker = ma.Classifier.from_pretrained(src, **own)
    score = reranker.predict("which tower?", "The tower is in Paris.")
    assert score.shape == () and score == reranker.predict(["which tower?"], ["The tower is in Paris."])[0]
    assert reranker.predict("one text").shape == ()
    with pytest.raises(ValueError, match="pairs must be one string or None"):
        reranker.predict("a", ["b", "c"])


def test_runners_pack_by_default_on_the_cpu_and_on_a_gpu_only_with_a_one_call_backend(minilm_dir, monkeypatch):
    """unpad=None (every runner's default): packed on the CPU; off the CPU only when the backend runs a packed row in
    one call, flex or varlen (the H200 figures in products/runner.py packs_by_default). A model on the meta device
    stands in for a GPU's."""
    from family_builders import random_encoder

    from minialign.nn import varlen
    from minialign.products.runner import packs_by_default

    assert packs_by_default(random_encoder("bert", "sdpa")) and packs_by_default(random_encoder("bert", "eager"))
    assert not packs_by_default(random_encoder("bert", "sdpa").to("meta"))
    assert not packs_by_default(random_encoder("bert", "eager").to("meta"))
    assert packs_by_default(random_encoder("bert", "flex").to("meta"))
    # varlen: one call per packed row too, where it has a kernel for the model's device and dtype
    assert not packs_by_default(random_encoder("bert", "varlen").to("meta"))  # fp32 weights: none
    monkeypatch.setattr(varlen, "kernel", lambda device, dtype: varlen.per_document)
    assert packs_by_default(random_encoder("bert", "varlen").to("meta"))
    assert ma.SentenceEncoder.from_pretrained(minilm_dir).unpad
    assert not ma.SentenceEncoder.from_pretrained(minilm_dir, unpad=False).unpad
    assert not ma.SentenceEncoder.from_pretrained(minilm_dir, compile=True).unpad


def test_an_unknown_loading_keyword_is_named_with_the_closest_accepted_one():
    """Every runner's from_pretrained checks its keywords before anything loads (LoadOptions.of)."""
    for cls in (ma.SentenceEncoder, ma.Classifier, ma.AlignScorer):
        with pytest.raises(TypeError, match=rf"{cls.__name__}.from_pretrained\(\) got an unexpected keyword argument "
                                            r"'backend' \(did you mean 'attn_backend'\?\); it accepts .*attn_backend"):
            cls.from_pretrained("/nonexistent/model", backend="eager")
