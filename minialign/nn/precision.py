"""A model's precision as a value: which kind of product the Linear layers it declares run (`Precision`), and
the one function that applies it (`apply_precision`).

  PLAIN           every product in its weights' dtype (fp32 weights: fp32; oneDNN's prepacked kernel where
                  faster: nn/linear.py Linear)
  mixed(dtype)    the declared layers' products in `dtype` (bf16) on fp32 weights (MixedPrecisionLinear)
  mixed(dtype, layers="all")
                  the same variant in every Linear a layer declares for any precision: all four projections
                  (Q/K/V, the attention output, the feed-forward's up and down), each taking its input in `dtype`
                  and giving its output in it: the attention after Q/K/V and the activation after the up projection
                  then run on `dtype` tensors
  INT8            the declared layers' products in int8 on CPU (nn/int8.py Int8Linear)

A precision is a variant of Linear set in the place of the layers a layer class declares for it (nn/layers.py
PRECISION_LAYERS: `precision_layers`, a mapping variant -> the layer's Linear layers by name, read by every
family's layer), as gpt-fast's quantize.py swaps a WeightOnlyInt8Linear in at load: the kernel is the module's
class, chosen once, not a flag read inside every forward. A model runs one precision at a time.

What users type (from_pretrained's dtype="auto" / "int8" / "bf16", the CLI's --dtype) is parsed once, where it
enters (loading/devices.py parse_dtype): "bf16" is the weights' dtype with the PLAIN precision, "auto" and
"auto-all" a precision decided on the device (mixed bf16 on the declared layers / on all four, or PLAIN); past
that edge only these values travel.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from minialign.nn.int8 import Int8Linear
from minialign.nn.linear import Linear, MixedPrecisionLinear, swap

# kind -> the Linear variant its declared layers become
VARIANTS: dict[str, type[Linear]] = {"plain": Linear, "mixed": MixedPrecisionLinear, "int8": Int8Linear}
# Precision.layers -> which of the Linear layers a layer declares (`precision_layers`) its variant takes, and how
# str(Precision) says it ("" for the default):
#   declared  those the declaration names for the variant (mixed: the products that write into the residual
#             stream, nn/layers.py PRECISION_LAYERS says why; int8: all four)
#   all       every layer the declaration names for any variant: a mixed precision on all four projections
LAYER_SETS = {"declared": "", "all": " (all projections)"}


@dataclass(frozen=True)
class Precision:
    """One of PLAIN, mixed(dtype, layers=...), INT8 (module docstring). `compute_dtype`: mixed's dtype (None
    otherwise).
    `layers`: which declared layers the variant takes (LAYER_SETS); "all" for a mixed precision only (PLAIN takes
    none, INT8's declaration is all four already)."""

    kind: str = "plain"
    compute_dtype: torch.dtype | None = None
    layers: str = "declared"

    def __post_init__(self):
        if self.kind not in VARIANTS:
            raise ValueError(f"unknown precision kind {self.kind!r}; choose from {tuple(VARIANTS)}")
        if self.layers not in LAYER_SETS:
            raise ValueError(f"unknown precision layers {self.layers!r}; choose from {tuple(LAYER_SETS)}")
        if self.layers != "declared" and self.kind != "mixed":
            raise ValueError(f"layers={self.layers!r} is a mixed precision's choice; the {self.kind} precision "
                             f"takes the layers declared for it")
        if self.kind == "mixed":
            if not (isinstance(self.compute_dtype, torch.dtype) and self.compute_dtype.is_floating_point):
                raise ValueError(f"a mixed precision needs a floating torch.dtype, got {self.compute_dtype!r}")
        elif self.compute_dtype is not None:
            raise ValueError(f"the {self.kind} precision takes no compute_dtype (got {self.compute_dtype}); "
                             f"use mixed({self.compute_dtype})")

    @property
    def variant(self) -> type[Linear]:
        """The Linear variant the declared layers become."""
        return VARIANTS[self.kind]

    def takes(self, declared: Mapping[type[Linear], tuple[str, ...]]) -> tuple[str, ...]:
        """Of a module's declaration (`precision_layers`: variant -> its Linear layers by name), the layers this
        precision's variant takes (`layers`)."""
        if self.layers == "all":
            return tuple(dict.fromkeys(name for names in declared.values() for name in names))
        return tuple(declared.get(self.variant, ()))

    def swap(self, owner: nn.Module, name: str) -> Linear:
        """This precision's variant set in the place of the Linear at `name` under `owner` (nn/linear.py swap)."""
        settings = {"compute_dtype": self.compute_dtype} if self.kind == "mixed" else {}
        return swap(owner, name, self.variant, **settings)

    def __str__(self) -> str:
        if self.kind != "mixed":
            return self.kind
        return f"mixed {str(self.compute_dtype).removeprefix('torch.')}{LAYER_SETS[self.layers]}"


PLAIN = Precision()
INT8 = Precision("int8")


def mixed(dtype: torch.dtype, *, layers: str = "declared") -> Precision:
    """The mixed precision in `dtype` (e.g. torch.bfloat16) on the `layers` a layer declares (LAYER_SETS)."""
    return Precision("mixed", dtype, layers)


def apply_precision(model: nn.Module, precision: Precision) -> None:
    """Swap every Linear layer a module of `model` declares (`precision_layers`) into `precision`'s variant where
    the precision takes it (Precision.takes), and back into Linear where it does not. Undeclared layers (the
    embeddings' projections, the pooler, the heads) are left as they are."""
    if not isinstance(precision, Precision):
        raise TypeError(f"apply_precision takes a Precision (PLAIN, INT8, mixed(dtype, layers=...)), not "
                        f"{precision!r}; a user's dtype string is parsed by minialign.loading.parse_dtype")
    for module in list(model.modules()):  # a list: the swaps set new modules in the tree
        declared: dict[type[Linear], tuple[str, ...]] = getattr(module, "precision_layers", None) or {}
        chosen = precision.takes(declared)
        for name in dict.fromkeys(name for names in declared.values() for name in names):
            if name in chosen:
                precision.swap(module, name)
            else:
                swap(module, name, Linear)
