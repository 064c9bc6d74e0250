"""The score-function swap, a research tool (`ma.with_score_function`): a twin of a model whose attention scores
with another alignment-score function (score_functions.py), every weight shared. The explorer runs a model and its
twin side by side (apps/explore); the swap itself is an internal, beside capture.py and analysis.py.

It does not apply to a model whose family adds a relative-position bias to the scaled dot product (its declared
`Family.relative_bias`, MPNet's): a swapped score function would be added to it, untrained."""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from minialign.nn.init import init_parameter
from minialign.nn.score_functions import SCORE_FUNCTIONS


def encoder_of(model: nn.Module) -> tuple[str, nn.Module]:
    """(its name, the Encoder) of a model: the model itself ("") or the Encoder it holds ("encoder" inside a head
    model). An Encoder is the module that carries its family (models/encoder.py)."""
    for name, module in model.named_modules():
        if hasattr(module, "family") and hasattr(module, "attn_backend"):
            return name, module
    raise TypeError(f"{type(model).__name__} holds no minialign Encoder")


def has_relative_bias(model: nn.Module) -> bool:
    """Whether the model's attention adds a relative-position bias to its scores (what its family declares:
    Family.relative_bias gives one, or None)."""
    _, encoder = encoder_of(model)
    with torch.no_grad():
        return encoder.family.relative_bias(encoder, 1) is not None


SEED = 0  # with_score_function's default: the same call gives the same twin


def with_score_function(model: nn.Module, score_fn: str, *, seed: int | None = SEED) -> nn.Module:
    """A twin of `model` whose attention uses another alignment-score function (score_functions.py):
    every weight shared with `model` (the same tensors: training one trains the other), the new function's
    own parameters from their initialisation (nn/init.py init_parameter: general and bilinear start equal to the
    scaled dot product, additive and location draw normal(0, initializer_range)); on the same device, in the same
    dtype, mode (train / eval), attention backend and mixed precision.

    seed: where the new function's random draws come from. Default SEED (0), fixed: two identical calls give the
    same twin, so a comparison, a training run or the explorer's page is the same every time without the caller
    seeding anything, as a researcher comparing a model with its twin expects; another int gives another draw (a
    spread over initialisations). The draws are made on the CPU in float32, then moved to the model's device and
    dtype (the same values on every device), and leave torch's global RNG as it was. None: drawn from torch's
    global RNG (torch.manual_seed decides), as a module constructor draws.

    A family that adds a relative-position bias (MPNet) takes the scaled dot product only; an int8 model is
    refused (its quantized layers are not shared state)."""
    if score_fn not in SCORE_FUNCTIONS:
        raise ValueError(f"unknown score function {score_fn!r}; choose from {SCORE_FUNCTIONS}")
    if has_relative_bias(model) and score_fn != "scaled_dot":
        raise ValueError(f"the score-function swap does not apply to {type(model).__name__} ({model.config.arch}): "
                         f"its attention adds a relative-position bias to the scaled dot product (its family's "
                         f"relative_bias), which a swapped score function would be added to, untrained")
    if getattr(model, "int8", False):
        raise ValueError("with_score_function takes a floating-point model, not one loaded with dtype='int8'")
    weight = next(model.parameters())
    _, encoder = encoder_of(model)
    config = dataclasses.replace(model.config, score_fn=score_fn)
    with torch.random.fork_rng(devices=[], enabled=seed is not None), torch.device(weight.device):
        other = type(model)(config, attn_backend=encoder.attn_backend)  # its own draws replaced or shared below
    theirs = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    mine = {**dict(other.named_parameters()), **dict(other.named_buffers())}
    stray = sorted(n for n in set(theirs) ^ set(mine) if ".score." not in n)
    if stray:
        raise ValueError(f"cannot swap the score function of {type(model).__name__}: {stray[:5]}")
    for name in set(theirs) & set(mine):  # the very tensors (a fused qkv too), not copies through a state dict
        owner, _, leaf = name.rpartition(".")
        setattr(other.get_submodule(owner), leaf, theirs[name])
    _initialise(other, [n for n in dict(other.named_parameters()) if n not in theirs], config, seed, weight)
    other.precision = model.precision  # PLAIN or a mixed precision, with the layers it takes (int8 refused above)
    return other.train(model.training)


def _initialise(model: nn.Module, names: list[str], config, seed: int | None, like: torch.Tensor) -> None:
    """The new score function's parameters `names` (in the model's order), drawn on the CPU in float32 from `seed`
    (None: the global RNG), then put on `like`'s device and dtype."""
    with torch.random.fork_rng(devices=[], enabled=seed is not None), torch.no_grad():
        if seed is not None:
            torch.manual_seed(seed)
        for name in names:
            owner_name, _, leaf = name.rpartition(".")
            owner = model.get_submodule(owner_name)
            value = torch.empty(getattr(owner, leaf).shape, dtype=torch.float32, device="cpu")
            init_parameter(owner, leaf, value, config)
            setattr(owner, leaf, nn.Parameter(value.to(device=like.device, dtype=like.dtype)))
