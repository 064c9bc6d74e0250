"""The base of every model class that loads from a checkpoint: `from_pretrained`, and the contract
the loader reads (pattern: transformers' PreTrainedModel and `base_model_prefix`; candle's
`load(vb.pp("name"))`, each module stating the names it reads). A model class declares where its
weights sit, which of a checkpoint's modules it owns, and what may be initialised; the loader
(loading.weights) reads only that and never switches on the class, so a new head is one class."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn


class Pretrained(nn.Module):
    """A model class that loads from any supported source through the contract it declares:

      checkpoint_prefix  where the class's own names start among a checkpoint's tensors, which carry
                         AlignModel's names: "encoder." for an Encoder, "" for the models with heads
      owns(config)       the modules (the class's own names) whose tensors it reads. The loader takes
                         every checkpoint tensor under them, strictly (an unexpected or wrongly shaped
                         one is an error), and logs the rest as not used (another class's heads)
      initialisable      modules a checkpoint may lack (initialised, with one warning); declared on
                         any module, names relative to it
    """

    checkpoint_prefix: ClassVar[str] = ""
    initialisable: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def owns(cls, config: Any) -> tuple[str, ...]:
        raise NotImplementedError(f"{cls.__name__} declares no owned modules (Pretrained.owns)")

    @classmethod
    def from_pretrained(cls, src, **kwargs):
        """Load from a local HF dir, a hub id, a minialign dir or an AlignScore .ckpt, in eval mode
        (keywords: loading.weights.load)."""
        from minialign.loading.weights import load

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

    @property
    def int8(self) -> bool:
        """The quantized mode (loading's dtype="int8"): the Linear layers each layer names in its INT8 run
        int8 products on CPU (nn/int8.py); everything else (embeddings, LayerNorm, attention, the pooler,
        the heads) stays fp32. False: off."""
        return self.__dict__.get("_int8_mode", False)

    @int8.setter
    def int8(self, on: bool) -> None:
        for module in self.modules():
            if isinstance(module, Pretrained):
                module.__dict__["_int8_mode"] = bool(on)
            for name in getattr(module, "INT8", ()):
                module.get_submodule(name).int8 = bool(on)
