"""ma.capture is scoped to its caller: the thread (or asyncio task) that opened it and the model it names.
Another thread's forward, of the same model too, keeps its own kernels, output and records; another model
run inside the block records nothing."""

import threading

import torch

import minialign as ma
from minialign.nn import capture as capture_module


def _model():
    config = ma.Config(vocab_size=300, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64)
    return ma.Encoder(config, seed=0).eval()


def test_another_threads_forward_is_untouched_by_a_capture():
    model = _model()
    ids = torch.randint(5, 300, (2, 11))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    with torch.no_grad():
        expected = model(ids, attention_mask=mask, unpad=True).last_hidden_state
        with ma.capture(model) as alone:
            model(ids, attention_mask=mask)
    opened, done = threading.Event(), threading.Event()
    seen = {}

    def other():
        opened.wait(timeout=30)
        seen["capturing"] = capture_module.capturing()
        with torch.no_grad():
            seen["out"] = model(ids, attention_mask=mask, unpad=True).last_hidden_state
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with torch.no_grad(), ma.capture(model) as cap:
        opened.set()
        assert done.wait(timeout=60)  # the other thread ran its forward while this capture was open
        assert capture_module.capturing()
        model(ids, attention_mask=mask)
    thread.join()
    assert seen["capturing"] is False  # its kernel path: no capture seen, so no recording backend
    assert torch.equal(seen["out"], expected)  # bit for bit what it gives with no capture anywhere
    assert list(cap) == list(alone)  # this capture holds its own forward alone, once
    for name in cap:
        assert torch.equal(cap[name], alone[name]), name


def test_a_capture_records_its_model_only():
    captured, other = _model(), _model()
    ids = torch.randint(5, 300, (1, 9))
    with torch.no_grad(), ma.capture(captured) as cap:
        other(ids)
    assert len(cap) == 0
    with torch.no_grad(), ma.capture(captured) as cap:
        other(ids)
        captured(ids)
        other(ids)
    assert "layers.0.attention.probs" in cap and not any("#" in name for name in cap)  # one forward's names, once


def test_detach_false_keeps_the_records_in_the_graph():
    """Records are detached by default; detach=False lets a loss on an intermediate backpropagate (attention
    supervision, gradient x activation), with the gradients a loss on the same tensor computed by hand gets."""
    model = _model()
    ids = torch.randint(5, 300, (2, 7))
    with ma.capture(model) as cap:
        model(ids)
    assert not cap["layers.1.attention.probs"].requires_grad
    with ma.capture(model, detach=False) as cap:
        model(ids)
    probs = cap["layers.1.attention.probs"]
    assert probs.requires_grad
    (probs[:, :, :, 0].sum() + cap["layers.0.ffn.intermediate"].pow(2).mean()).backward()
    qkv = model.layers[1].attention.qkv.weight.grad
    assert qkv is not None and qkv.abs().sum() > 0
    assert model.layers[1].ffn.up.weight.grad is None  # after the recorded tensors: no gradient reaches it
