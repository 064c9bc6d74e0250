"""BERT's initialisation (transformers modeling_bert.py BertPreTrainedModel._init_weights), for
models built at random and for the weights a checkpoint lacks (loading.weights.initialise)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn as nn
from torch import Tensor
from torch.overrides import TorchFunctionMode

from minialign.nn.config import Config
from minialign.nn.score_functions import Bilinear, General


@torch.no_grad()
def init_parameter(owner: nn.Module, name: str, param: Tensor, config: Config) -> None:
    """BERT's initialisation, in place (modeling_bert.py _init_weights): normal(0, initializer_range)
    for Linear and Embedding weights (an embedding's padding row zeroed) and score-function
    parameters, LayerNorm (and RMSNorm) weight 1, every bias 0. General and bilinear scores start equal to the
    scaled dot product. A meta parameter (a model built for a checkpoint's values: shapes_only) is left as it is."""
    if param.is_meta:
        return
    if isinstance(owner, (General, Bilinear)):  # start as the scaled dot product: W = I / D^(1/2) resp. I / D^(1/4)
        d = param.size(-1)
        param.copy_(torch.eye(d).expand_as(param) * d ** (-0.5 if isinstance(owner, General) else -0.25))
    elif isinstance(owner, (nn.LayerNorm, nn.RMSNorm)) and name == "weight":
        param.fill_(1.0)
    elif name == "bias":
        param.zero_()
    else:
        param.normal_(0.0, config.initializer_range)
        if isinstance(owner, nn.Embedding) and owner.padding_idx is not None:
            param[owner.padding_idx].zero_()


def init_weights(module: nn.Module, config: Config, seed: int | None = None) -> None:
    """Initialise every parameter of `module`; with a seed, reproducibly and without touching the
    global random state."""
    with torch.random.fork_rng(devices=[], enabled=seed is not None):
        if seed is not None:
            torch.manual_seed(seed)
        for owner in module.modules():
            for name, param in owner.named_parameters(recurse=False):
                init_parameter(owner, name, param, config)


# The random draws module constructors make (torch's reset_parameters): on the meta device they have no values to
# give. In torch 2.13 nn.init.normal_ / uniform_ / kaiming_uniform_ / constant_ reach a TorchFunctionMode as
# themselves; the other nn.init functions (trunc_normal_, xavier_*, ...) call the Tensor methods named here
DRAWS = frozenset({nn.init.normal_, nn.init.uniform_, nn.init.kaiming_uniform_, nn.init.constant_,
                   Tensor.normal_, Tensor.uniform_})


class _NoDrawsOnMeta(TorchFunctionMode):
    """Every DRAWS call on a meta tensor returns the tensor untouched; anything else runs as it is."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in DRAWS:
            target = args[0] if args else kwargs.get("tensor")  # nn.init passes it by keyword (handle_torch_function)
            if isinstance(target, Tensor) and target.is_meta:
                return target
        return func(*args, **kwargs)


@contextlib.contextmanager
def shapes_only() -> Iterator[None]:
    """Within: modules are built on the meta device (shapes and names, no storage) and no initial value is drawn,
    for a model whose values come from a checkpoint next (loading.weights.build). Skipping the draws is the point:
    torch runs a meta tensor's normal_ (nn.Embedding's reset_parameters, init_parameter) through a Python
    reference that imports torch._dynamo on first use (torch/_refs normal_ under _disable_dynamo), 0.8-1.1 s of a
    fresh process's first load of any model. Per thread, as torch's modes are."""
    with torch.device("meta"), _NoDrawsOnMeta():
        yield
