"""with_score_function's seed: the new score function's parameters come from it (default a fixed seed: the same call
gives the same twin), the global RNG left as it was; seed=None draws from torch's global RNG."""

import dataclasses

import pytest
import torch

import minialign as ma
from minialign.nn.score_swap import SEED, with_score_function


@pytest.fixture(scope="module")
def model():
    config = dataclasses.replace(ma.Config.from_name("bert-base-uncased"), vocab_size=120, hidden_size=16,
                                 num_layers=2, num_heads=2, intermediate_size=24)
    return ma.Encoder(config, seed=0).eval()


def score_parameters(twin) -> dict[str, torch.Tensor]:
    return {n: p for n, p in twin.named_parameters() if ".score." in n}


@pytest.mark.parametrize("score_fn", ["additive", "location"])
def test_the_same_call_gives_the_same_twin_and_leaves_the_global_rng(model, score_fn):
    torch.manual_seed(1)
    before = torch.get_rng_state()
    first, second = with_score_function(model, score_fn), with_score_function(model, score_fn)
    assert torch.equal(torch.get_rng_state(), before)
    a, b = score_parameters(first), score_parameters(second)
    assert a and a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)
    assert a.keys() == score_parameters(with_score_function(model, score_fn, seed=SEED)).keys()
    other = score_parameters(with_score_function(model, score_fn, seed=SEED + 1))
    assert not all(torch.equal(a[n], other[n]) for n in a)
    layers = [p for n, p in a.items() if n.endswith(next(iter(a)).split(".score.")[1])]
    assert len(layers) == 2 and not torch.equal(layers[0], layers[1])  # one draw per layer, not one seed each
    ids = torch.arange(5, 17)[None]
    assert torch.equal(first(ids).last_hidden_state, second(ids).last_hidden_state)


def test_seed_none_draws_from_the_global_rng(model):
    torch.manual_seed(3)
    a = score_parameters(with_score_function(model, "additive", seed=None))
    torch.manual_seed(3)
    b = score_parameters(with_score_function(model, "additive", seed=None))
    c = score_parameters(with_score_function(model, "additive", seed=None))  # the RNG moved on
    assert all(torch.equal(a[n], b[n]) for n in a) and not all(torch.equal(a[n], c[n]) for n in a)


def test_the_draws_are_the_same_in_another_dtype(model):
    half = ma.Encoder(model.config, seed=0).to(torch.bfloat16).eval()
    a = score_parameters(with_score_function(model, "additive"))
    b = score_parameters(with_score_function(half, "additive"))
    assert all(b[n].dtype == torch.bfloat16 and torch.equal(a[n].to(torch.bfloat16), b[n]) for n in a)
