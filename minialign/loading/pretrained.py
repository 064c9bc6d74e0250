"""The base of every model class that loads from a checkpoint: `from_pretrained`, and the contract
the loader reads (pattern: transformers' PreTrainedModel and `base_model_prefix`; candle's
`load(vb.pp("name"))`, each module stating the names it reads). A model class declares where its
weights sit, which of a checkpoint's modules it owns, and what may be initialised; the loader
(loading.weights) reads only that and never switches on the class, so a new head is one class."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Iterable
from typing import Any, ClassVar

import torch
from torch import nn

from minialign.nn.precision import INT8, PLAIN, Precision, apply_precision, mixed


class Pretrained(nn.Module):
    """A model class that loads from any supported source through the contract it declares:

      checkpoint_prefix  where the class's own names start among a checkpoint's tensors, which carry
                         AlignModel's names: "encoder." for an Encoder, "" for the models with heads
      owns(config)       the modules (the class's own names) whose tensors it reads. The loader takes
                         every checkpoint tensor under them, strictly (an unexpected or wrongly shaped
                         one is an error), and logs the rest as not used (another class's heads)
      initialisable      modules a checkpoint may lack (initialised, with one warning); declared on
                         any module, names relative to it
      checkpoint_names(config)
                         own module name -> the name its tensors have among a checkpoint's (both below
                         checkpoint_prefix), for a module transformers shares between two heads (ModernBERT's
                         masked-LM head reads the classifier's `head`); default none (the names are the same).
                         As transformers' `_checkpoint_conversion_mapping`: read on loading, inverted on saving
    """

    checkpoint_prefix: ClassVar[str] = ""
    initialisable: ClassVar[tuple[str, ...]] = ()
    hf_layout: ClassVar[str] = "hf"  # how save_pretrained(layout="hf") writes it (loading.export): "hf", or
    # "hf_head" (transformers' class with a head on every token: *ForMaskedLM, *ForTokenClassification, ...)
    # transformers' class of this head, as a suffix of the family's base class ("ForTokenClassification": BertModel ->
    # BertForTokenClassification); saved as config.json's `architectures`, which says what a checkpoint is for
    architecture: ClassVar[str | None] = None

    @classmethod
    def owns(cls, config: Any) -> tuple[str, ...]:
        raise NotImplementedError(f"{cls.__name__} declares no owned modules (Pretrained.owns)")

    @classmethod
    def checkpoint_names(cls, config: Any) -> dict[str, str]:
        return {}

    @classmethod
    def from_pretrained(cls, src, **kwargs):
        """Load from a local HF dir, a hub id, a minialign dir or an AlignScore .ckpt, in eval mode
        (keywords: loading.weights.load; an unknown one is a TypeError naming it and the accepted ones, raised
        here rather than from inside the loader)."""
        from minialign.loading.weights import load

        check_keywords(f"{cls.__name__}.from_pretrained", kwargs, keywords_of(load, skip=2))
        return load(cls, src, **kwargs)

    def save_pretrained(self, directory, *, layout: str = "native", dtype: torch.dtype | None = None):
        """Write this model's weights and config to `directory`, which from_pretrained reads back: "native"
        (minialign's config.json + model.safetensors) or "hf" (transformers' layout, as `minialign convert
        --to hf` writes it; a MaskedLMModel as transformers' *ForMaskedLM: loading.export). dtype: cast the floating weights (default: as they are). Returns
        the directory."""
        from minialign.loading.checkpoints import Checkpoint
        from minialign.loading.export import export_hf, export_hf_head, save_native
        from minialign.loading.weights import checkpoint_name

        hf = {"hf": export_hf, "hf_head": export_hf_head}[self.hf_layout]
        writers = {"native": save_native, "hf": hf}
        if layout not in writers:
            raise ValueError(f"layout must be one of {tuple(writers)}, got {layout!r}")
        tensors = {self.checkpoint_prefix + checkpoint_name(name, self.checkpoint_names(self.config)): t.detach()
                   for name, t in self.state_dict().items()}
        architectures = (self.hf_architecture(self.config),) if self.architecture else ()
        return writers[layout](Checkpoint(self.config, tensors, origin=type(self).__name__, architectures=architectures),
                               directory, dtype=dtype)

    @classmethod
    def hf_architecture(cls, config: Any) -> str:
        """transformers' class of this head in the config's family (BertModel -> BertForTokenClassification)."""
        return config.format.config.base_class.removesuffix("Model") + cls.architecture

    @property
    def precision(self) -> Precision:
        """What the Linear layers each layer declares run (nn/precision.py): PLAIN (their weights' dtype; the
        default), mixed(dtype) or INT8; loading sets it from its dtype. Everything else (embeddings, LayerNorm,
        attention, the pooler, the heads) stays in the weights' dtype."""
        return self.__dict__.get("_precision", PLAIN)

    @precision.setter
    def precision(self, precision: Precision) -> None:
        apply_precision(self, precision)
        for module in self.modules():
            if isinstance(module, Pretrained):
                module.__dict__["_precision"] = precision

    @property
    def compute_dtype(self) -> torch.dtype | None:
        """Mixed precision (loading's dtype="auto" sets bf16 where it is native): the dtype of a mixed precision
        (`precision`), None otherwise. Setting a dtype sets mixed(dtype); None turns mixed precision off."""
        return self.precision.compute_dtype

    @compute_dtype.setter
    def compute_dtype(self, dtype: torch.dtype | None) -> None:
        if dtype is None:
            if self.precision.kind == "mixed":
                self.precision = PLAIN
            return
        if self.int8:
            raise one_at_a_time(self.precision, f"compute_dtype = {dtype}")
        self.precision = mixed(dtype)

    @property
    def int8(self) -> bool:
        """The quantized mode (loading's dtype="int8"): whether `precision` is INT8. Setting True sets it, False
        turns it off."""
        return self.precision == INT8

    @int8.setter
    def int8(self, on: bool) -> None:
        if not on:
            if self.int8:
                self.precision = PLAIN
            return
        if self.precision.kind == "mixed":
            raise one_at_a_time(self.precision, "int8 = True")
        self.precision = INT8


def keywords_of(fn, *, skip: int = 0) -> tuple[str, ...]:
    """The keyword parameters `fn` accepts, after its first `skip` parameters (load's cls and src)."""
    params = list(inspect.signature(fn).parameters.values())[skip:]
    return tuple(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def check_keywords(entry: str, given: Iterable[str], accepted: Iterable[str]) -> None:
    """At an entry point (a from_pretrained): a keyword outside `accepted` is a TypeError naming it, the closest
    accepted one where there is one (backend -> attn_backend), and every accepted one, before anything loads."""
    accepted = tuple(accepted)
    unknown = [k for k in given if k not in accepted]
    if not unknown:
        return
    hints = []
    for k in unknown:
        close = difflib.get_close_matches(k, accepted, n=1, cutoff=0.5) or [a for a in accepted if k in a]
        hints.append(f"{k!r} (did you mean {close[0]!r}?)" if close else repr(k))
    raise TypeError(f"{entry}() got an unexpected keyword argument {', '.join(hints)}; it accepts "
                    f"{', '.join(accepted)}")


def one_at_a_time(precision: Precision, request: str) -> ValueError:
    return ValueError(f"model.{request}: the model runs the {precision} precision, and a model runs one at a time; "
                      f"turn it off first (model.precision = minialign.nn.precision.PLAIN)")
