"""Activations by name, in one table: the encoder's hidden_act, the heads, the products' output
functions (a classifier's softmax / sigmoid, a sentence-transformers Dense layer's tanh).

Names follow transformers activations.py (ACT2FN): "gelu" is the exact erf GELU; "gelu_new" and
"gelu_pytorch_tanh" the tanh approximation; "swish" is SiLU. "none" / "identity" / "linear" return
their input.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor


def identity(x: Tensor) -> Tensor:
    return x


_TANH_GELU = partial(F.gelu, approximate="tanh")

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": F.gelu,
    "gelu_new": _TANH_GELU,
    "gelu_pytorch_tanh": _TANH_GELU,
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "softmax": partial(torch.softmax, dim=-1),  # over the last axis (a classifier's labels)
    "none": identity,
    "identity": identity,
    "linear": identity,
}

# The ones that act on each element alone: what a layer's hidden_act (Config.activation) may be.
ELEMENTWISE: tuple[str, ...] = tuple(name for name in ACTIVATIONS if name != "softmax")

# The same functions writing into their input, for Linear to apply to the product it has just made (no second
# buffer of the output's size; equal to the functions above bit for bit: tests/nn/test_activations.py).
IN_PLACE: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": torch.ops.aten.gelu_,
    "gelu_new": partial(torch.ops.aten.gelu_, approximate="tanh"),
    "gelu_pytorch_tanh": partial(torch.ops.aten.gelu_, approximate="tanh"),
    "relu": torch.relu_,
    "silu": partial(F.silu, inplace=True),
    "swish": partial(F.silu, inplace=True),
    "tanh": torch.tanh_,
    "sigmoid": torch.sigmoid_,
}

# oneDNN's fused post-op (attr, algorithm) for torch.ops.mkldnn._linear_pointwise, where it has one and
# matches the function to fp32 rounding (tests/test_linear.py); Linear applies the others after the product.
ONEDNN_POST_OPS: dict[str, tuple[str, str]] = {
    "gelu": ("gelu", "none"),
    "gelu_new": ("gelu", "tanh"),
    "gelu_pytorch_tanh": ("gelu", "tanh"),
    "relu": ("relu", ""),
    "tanh": ("tanh", ""),
    "sigmoid": ("sigmoid", ""),
}

# torch.nn module class paths (as sentence-transformers saves them: Dense's activation_function, a
# CrossEncoder's default_activation_function) -> names above.
TORCH_MODULES: dict[str, str] = {
    "torch.nn.modules.activation.Tanh": "tanh",
    "torch.nn.modules.activation.Sigmoid": "sigmoid",
    "torch.nn.modules.activation.Softmax": "softmax",
    "torch.nn.modules.activation.ReLU": "relu",
    "torch.nn.modules.activation.GELU": "gelu",
    "torch.nn.modules.activation.SiLU": "silu",
    "torch.nn.modules.linear.Identity": "none",
}


def activation(name: str) -> Callable[[Tensor], Tensor]:
    """The function named `name`; a ValueError naming the choices for any other name."""
    try:
        return ACTIVATIONS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown activation {name!r}; choose from {tuple(ACTIVATIONS)}") from None
