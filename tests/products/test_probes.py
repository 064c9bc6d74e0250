"""products/probes.py: a SentenceEncoder's embedding read off an encoder forward equals encode's; its cosine as an
activation-patching metric; steering vectors, and encode steered under ma.patch (the forwards on the calling
thread)."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F

import minialign as ma
from minialign.nn import analysis
from minialign.products import probes
from minialign.products.embeddings import Dense, SentenceEncoder

TEXTS = ["A man is playing the guitar.", "The bank raised its rates on Monday.", "Short."]


def tiny_encoder(wordpiece_dir, *, pooling=("mean",), dense=True, normalize=True, prompts=None,
                 include_prompt=True, workers=1) -> SentenceEncoder:
    """A tiny random BERT with the WordPiece tokenizer, a Dense module and Normalize: a whole sentence-transformers
    pipeline in a few milliseconds."""
    config = ma.Config(vocab_size=30522, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                       max_position_embeddings=64, hidden_dropout=0.0, attention_dropout=0.0)
    encoder = ma.Encoder(config, seed=0).eval()
    generator = torch.Generator().manual_seed(1)
    width = config.hidden_size * len(pooling)
    layers = [Dense(torch.randn(16, width, generator=generator) / width ** 0.5, torch.randn(16, generator=generator),
                    "torch.nn.modules.activation.Tanh")] if dense else []
    return SentenceEncoder(encoder, ma.Tokenizer.from_pretrained(wordpiece_dir), pooling=pooling, dense=layers,
                           normalize=normalize, prompts=prompts, include_prompt=include_prompt, workers=workers)


@pytest.mark.parametrize("pooling", [("mean",), ("cls",), ("max", "lasttoken")])
def test_embedding_of_a_forward_is_what_encode_returns(wordpiece_dir, pooling):
    runner = tiny_encoder(wordpiece_dir, pooling=pooling)
    inputs = probes.text_inputs(runner, TEXTS)
    with torch.no_grad():
        output = runner.model(**inputs)
    got = probes.embedding_of(runner, output, inputs["attention_mask"])
    expected = runner.encode(TEXTS)
    assert got.shape == expected.shape == (3, 16)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    # the last hidden state alone reads the same (direct attribution hands the metric the state)
    assert torch.equal(probes.embedding_of(runner, output.last_hidden_state, inputs["attention_mask"]), got)
    # encode's options: a truncate_dim and normalize_embeddings
    torch.testing.assert_close(
        probes.embedding_of(runner, output, inputs["attention_mask"], truncate_dim=8, normalize_embeddings=True),
        runner.encode(TEXTS, truncate_dim=8, normalize_embeddings=True), atol=1e-6, rtol=0)


def test_a_prompt_left_out_of_pooling_is_left_out_here_too(wordpiece_dir):
    runner = tiny_encoder(wordpiece_dir, prompts={"query": "query: "}, include_prompt=False)
    inputs = probes.text_inputs(runner, TEXTS, prompt_name="query")
    plain = probes.text_inputs(runner, TEXTS)
    assert inputs["input_ids"].size(1) > plain["input_ids"].size(1)  # the prompt's tokens are in the inputs
    with torch.no_grad():
        output = runner.model(**inputs)
    got = probes.embedding_of(runner, output, inputs["attention_mask"], prompt_name="query")
    torch.testing.assert_close(got, runner.encode(TEXTS, prompt_name="query"), atol=1e-6, rtol=0)
    with_prompt = probes.embedding_of(runner, output, inputs["attention_mask"])  # pooling over the prompt as well
    assert (with_prompt - got).abs().max() > 1e-3


def test_pooled_cosine_is_the_cosine_of_the_embeddings_and_drives_activation_patching(wordpiece_dir):
    runner = tiny_encoder(wordpiece_dir)
    clean = probes.text_inputs(runner, ["The cat sat on the mat."])
    corrupted = probes.text_inputs(runner, ["The dog sat on the mat."])
    assert clean["input_ids"].shape == corrupted["input_ids"].shape
    reference = runner.encode(["The cat sat on the mat."])[0]
    metric = probes.pooled_cosine(runner, reference, clean["attention_mask"])
    with torch.no_grad():
        corrupted_output = runner.model(**corrupted)
    expected = F.cosine_similarity(runner.encode(["The dog sat on the mat."]), reference[None])[0]
    with torch.no_grad():
        assert abs(float(metric(corrupted_output)) - float(expected)) < 1e-6
    result = analysis.activation_patching(runner.model, clean, corrupted, metric, ["layers.*.output"], per="position")
    assert abs(result.clean - 1.0) < 1e-6 and result.corrupted < 1 - 1e-4
    restored = result.restored()
    last = restored["layers.1.output"]  # (L,): the last layer's state restored one position at a time
    assert last.shape == (clean["input_ids"].size(1),)
    changed = (clean["input_ids"][0] != corrupted["input_ids"][0]).nonzero()[:, 0]
    # the changed token's state restores most
    assert int(last.argmax()) in changed.tolist()
    # per row, without reduction
    with torch.no_grad():
        rows = probes.pooled_cosine(runner, reference, clean["attention_mask"], reduce=False)(corrupted_output)
    assert rows.shape == (1,)


def test_the_metric_takes_gradients_through_the_state(wordpiece_dir):
    runner = tiny_encoder(wordpiece_dir)
    inputs = probes.text_inputs(runner, TEXTS[:2])
    reference = runner.encode(TEXTS[2:])[0]
    state = runner.model(**inputs).last_hidden_state.detach().requires_grad_(True)
    probes.pooled_cosine(runner, reference, inputs["attention_mask"])(state).backward()
    assert state.grad is not None and state.grad.abs().sum() > 0
    assert state.grad[inputs["attention_mask"] == 0].abs().max() == 0  # padding does not enter mean pooling


def test_steering_vector_is_the_difference_of_mean_real_token_activations(wordpiece_dir):
    runner = tiny_encoder(wordpiece_dir)
    positive, negative = ["I love this, it is wonderful.", "Great!"], ["I hate this.", "It is terrible and awful."]
    vector = probes.steering_vector(runner, positive, negative, "layers.0.output")

    def means(texts):
        rows = []
        for text in texts:  # one text at a time: no padding at all
            inputs = probes.text_inputs(runner, [text])
            with torch.no_grad(), ma.capture(runner.model, names=["layers.0.output"]) as cap:
                runner.model(**inputs)
            rows.append(cap["layers.0.output"][0].mean(dim=0))
        return torch.stack(rows).mean(dim=0)

    assert vector.shape == (32,)
    torch.testing.assert_close(vector, means(positive) - means(negative), atol=1e-5, rtol=0)
    # a model with its keyword arguments gives the same
    same = probes.steering_vector(runner.model, probes.text_inputs(runner, positive),
                                  probes.text_inputs(runner, negative), "layers.0.output")
    torch.testing.assert_close(same, vector, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="B, L, C"):
        probes.steering_vector(runner, positive, negative, "layers.0.attention.probs")
    with pytest.raises(ValueError, match="keyword arguments"):
        probes.steering_vector(runner.model, positive, negative, "layers.0.output")


def test_encode_under_a_patch_is_steered_and_equals_the_manual_forward(wordpiece_dir):
    runner = tiny_encoder(wordpiece_dir)
    vector = probes.steering_vector(runner, ["wonderful great"], ["terrible awful"], "layers.0.output")
    threads = set()

    def steer(state):  # at positions 1 and 2 of every row, 3 times the vector
        threads.add(threading.get_ident())
        out = state.clone()
        out[:, 1:3] += 3.0 * vector.to(state.dtype)
        return out

    plain = runner.encode(TEXTS)
    with ma.patch(runner.model, {"layers.0.output": steer}):
        steered = runner.encode(TEXTS)
        inputs = probes.text_inputs(runner, TEXTS)
        with torch.no_grad():
            manual = probes.embedding_of(runner, runner.model(**inputs), inputs["attention_mask"])
    assert threads == {threading.get_ident()}  # every forward ran on this thread, under the patch
    assert (steered - plain).abs().max() > 1e-3
    torch.testing.assert_close(steered, manual, atol=1e-6, rtol=0)
    torch.testing.assert_close(runner.encode(TEXTS), plain, atol=0, rtol=0)  # scoped to the block


def test_a_runner_with_worker_processes_runs_here_under_a_patch(wordpiece_dir):
    """workers=2: the batches go to worker processes, except while a patch is open on this thread (the engine
    runs them here, so the patch applies): steered as a workers=1 runner is, and plain again after the block."""
    one, two = tiny_encoder(wordpiece_dir), tiny_encoder(wordpiece_dir, workers=2)
    try:
        vector = probes.steering_vector(one, ["wonderful great"], ["terrible awful"], "layers.0.output")
        with ma.patch(one.model, {"layers.0.output": ma.steer(vector, scale=4.0)}):
            expected = one.encode(TEXTS)
        with ma.patch(two.model, {"layers.0.output": ma.steer(vector, scale=4.0)}):
            steered = two.encode(TEXTS)
        torch.testing.assert_close(steered, expected, atol=1e-6, rtol=0)
        torch.testing.assert_close(two.encode(TEXTS), one.encode(TEXTS), atol=1e-6, rtol=0)
        assert (steered - two.encode(TEXTS)).abs().max() > 1e-3
    finally:
        two.close()


def test_ma_steer_around_encode_is_the_vector_added_at_the_positions(wordpiece_dir):
    runner = tiny_encoder(wordpiece_dir)
    vector = probes.steering_vector(runner, ["wonderful great"], ["terrible awful"], "layers.0.output")

    def by_hand(state):
        out = state.clone()
        out[:, [1, 2]] += 3.0 * vector.to(state.dtype)
        return out

    with ma.patch(runner.model, {"layers.0.output": ma.steer(vector, positions=[1, 2], scale=3.0)}):
        steered = runner.encode(TEXTS)
    with ma.patch(runner.model, {"layers.0.output": by_hand}):
        expected = runner.encode(TEXTS)
    assert (steered - runner.encode(TEXTS)).abs().max() > 1e-3
    torch.testing.assert_close(steered, expected, atol=1e-6, rtol=0)
