"""nn/layers.py GatedFeedForward: the GLU formula for either activated half, and the split state-dict names
(a family whose checkpoints hold the halves as two layers) saved and loaded back to the same module."""

import pytest
import torch
import torch.nn.functional as F

import minialign.models  # noqa: F401  (registers the families' configs)
from minialign.models.modernbert import ModernBertConfig
from minialign.nn.layers import GatedFeedForward


def config(**fields):
    return ModernBertConfig(vocab_size=10, hidden_size=8, num_layers=1, num_heads=2, intermediate_size=6,
                            rope_theta=1e4, activation="silu", **fields)


@pytest.mark.parametrize("activated", ["first", "second"])
def test_gated_feed_forward_is_down_of_act_gate_times_value(activated):
    torch.manual_seed(0)
    ffn = GatedFeedForward(config(), activated=activated).eval()
    x = torch.randn(5, 8)
    first, second = (x @ ffn.up.weight.T + ffn.up.bias).chunk(2, dim=-1)
    gate, value = (first, second) if activated == "first" else (second, first)
    expected = (F.silu(gate) * value) @ ffn.down.weight.T + ffn.down.bias
    torch.testing.assert_close(ffn(x), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("activated", ["first", "second"])
def test_split_names_save_the_activated_half_as_gate_and_load_back(activated):
    torch.manual_seed(1)
    ffn = GatedFeedForward(config(), activated=activated, split_names=True).eval()
    state = ffn.state_dict()
    assert sorted(state) == ["down.bias", "down.weight", "gate.bias", "gate.weight", "value.bias", "value.weight"]
    x = torch.randn(4, 8)
    expected = (F.silu(x @ state["gate.weight"].T + state["gate.bias"]) * (x @ state["value.weight"].T + state["value.bias"])
                ) @ state["down.weight"].T + state["down.bias"]
    torch.testing.assert_close(ffn(x), expected, rtol=1e-6, atol=1e-6)
    other = GatedFeedForward(config(), activated=activated, split_names=True).eval()
    other.load_state_dict(state)
    assert torch.equal(other(x), ffn(x))


def test_unknown_half_is_refused():
    with pytest.raises(ValueError, match="activated is 'first' or 'second'"):
        GatedFeedForward(config(), activated="gate")
