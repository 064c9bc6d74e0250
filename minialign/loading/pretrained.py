"""The base of every model class that loads from a checkpoint: `from_pretrained`, and the contract
the loader reads (pattern: transformers' PreTrainedModel and `base_model_prefix`). A model class
declares where its weights sit and what may be initialised; the loader never switches on the class."""

from __future__ import annotations

import torch
from torch import nn


class Pretrained(nn.Module):
    """A model class that loads from any supported source through the contract it declares
    (checkpoint_prefix, initialisable, skipped_weights; see loading.build)."""

    @classmethod
    def from_pretrained(cls, src, **kwargs):
        """Load from a local HF dir, a hub id, a minialign dir or an AlignScore .ckpt, in eval mode
        (keywords: loading.build.load)."""
        from minialign.loading.build import load

        return load(cls, src, **kwargs)

    @property
    def compute_dtype(self) -> torch.dtype | None:
        """Mixed precision (loading's dtype="auto" sets bf16 where it is native): the matmuls each layer
        names in its MIXED_PRECISION run in this dtype; everything else (the weights, the other
        matmuls, attention, LayerNorm, the residual stream, the pooler, the heads) stays in the
        weights' dtype. None: off."""
        return self.__dict__.get("_compute_dtype")

    @compute_dtype.setter
    def compute_dtype(self, dtype: torch.dtype | None) -> None:
        for module in self.modules():
            if isinstance(module, Pretrained):
                module.__dict__["_compute_dtype"] = dtype
            for name in getattr(module, "MIXED_PRECISION", ()):
                module.get_submodule(name).compute_dtype = dtype
