"""Direct attribution of a scalar metric of the last hidden state to what wrote it: the embeddings, each attention
head, each attention's output bias, each feed-forward and the norms' biases (TransformerLens' `decompose_resid`,
`stack_head_results` and direct logit attribution; Elhage et al. 2021, "A Mathematical Framework for Transformer
Circuits", sec. "Direct path terms").

The last hidden state h (B, L, C) is the sum of parts written into the residual stream, each LayerNorm on the way
distributed over its input's parts with the scale of the forward's own input (analysis.spread_norm: gamma *
(part - mean(part)) / sigma(total), beta a part of its own), so the parts sum to h exactly. A metric f's attribution to a part
p is its linearisation at the forward's own state:

    attribution(p) = <df/dh (h), p>            rest = f(h) - sum_p attribution(p)

and the attributions plus `rest` sum to f(h). For a metric linear in h, f(h) = <g, h> + c (a probe's logit, a logit
difference), attribution(p) = <g, p> is exact and rest is c. For a nonlinear one (a cosine) each attribution is
the first-order change of f along its part; the rest holds what the linearisation misses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from minialign.nn.analysis import decompose
from minialign.nn.capture import capture
from minialign.nn.score_swap import encoder_of


# What the decomposition reads of the forward (nn/capture.py names); "layers.*.*_norm": the norm outputs, where layer
# 0's `ffn_norm` says a pre-LN layer (ModernBERT, EuroBERT: the norm before the feed-forward) and a
# `post_attention_norm` a sandwich norm on the attention's update (Gemma 3's), as analysis.decompose reads them.
NAMES = ("layers.0.input", "layers.*.*_norm", "layers.*.attention.head_outputs", "layers.*.attention.output",
         "layers.*.attention_residual", "layers.*.ffn_output", "layers.*.ffn_residual", "layers.*.output")


@dataclass
class DirectAttribution:
    """What direct_attribution measured (module docstring).

    metric:        f(h), 0-d, or (B,) for a per-text metric
    attributions:  part name -> <df/dh, part>, shaped as the metric: "embeddings", "layers.{i}.attention.head.{h}"
                   (heads numbered as in the unpruned layer), "layers.{i}.attention.bias" (the output projection's
                   bias, where it has one), "layers.{i}.ffn", "norm biases" (every LayerNorm's beta)
    rest:          f(h) - the attributions' sum: the metric's constant for a linear metric
    parts:         part name -> (B, L, C), the piece of the last hidden state each attribution reads; they sum to h
    layers, heads: the encoder's layers and heads per layer (unpruned)
    """

    metric: Tensor
    attributions: dict[str, Tensor]
    rest: Tensor
    parts: dict[str, Tensor]
    layers: int
    heads: int

    def by_head(self) -> Tensor:
        """(layers, H), or (B, layers, H) for a per-text metric: each head's attribution (0 for a pruned head)."""
        out = self.metric.new_zeros(self.layers, self.heads, *self.metric.shape)
        for i in range(self.layers):
            for h in range(self.heads):
                out[i, h] = self.attributions.get(f"layers.{i}.attention.head.{h}", 0)
        return out.movedim((0, 1), (-2, -1))

    def by_layer(self) -> Tensor:
        """(layers, 2), or (B, layers, 2): each layer's attention (its heads and output bias) and feed-forward."""
        out = self.metric.new_zeros(self.layers, 2, *self.metric.shape)
        for name, value in self.attributions.items():
            if name.startswith("layers."):
                _, i, block = name.split(".")[:3]
                out[int(i), 0 if block == "attention" else 1] += value
        return out.movedim((0, 1), (-2, -1))

    def top(self, k: int = 10, *, text: int | None = None) -> list[tuple[str, float]]:
        """The k parts of largest |attribution|, largest first, as (name, attribution); `text`: which text's, for a
        per-text metric."""
        if self.metric.dim() and text is None:
            raise ValueError(f"the metric is per text ({tuple(self.metric.shape)}): pass text=<index> to rank one "
                             f"text's parts")
        values = {n: float(a if text is None else a[text]) for n, a in self.attributions.items()}
        return sorted(values.items(), key=lambda item: -abs(item[1]))[:k]


def direct_attribution(model: nn.Module, inputs: dict[str, Tensor],
                       metric: Callable[[Tensor], Tensor]) -> DirectAttribution:
    """Attribute `metric(h)` to the parts of h, the encoder's last hidden state (B, L, C), in one forward.

    model: an Encoder, or a model holding one (ClassifierModel, MaskedLMModel, AlignModel, ...), in eval mode. The
    metric reads the ENCODER's last hidden state, never the head's output: a head's nonlinearity (a pooler's tanh, an
    MLM head's GELU and norm) belongs in `metric` if wanted, and only the encoder runs (the head would be computed and
    thrown away). inputs: the encoder's keyword arguments (input_ids, attention_mask, token_type_ids, ...).
    metric: h (float32, B, L, C) -> a 0-d tensor, or (B,) per text (entry b must read h[b] only: each text's
    attributions are then (B,)). Its gradient at h is taken once; no gradient reaches the model's weights.

    Post-LN families (BERT's layer: a LayerNorm after each residual sum) and pre-LN ones (ModernBERT, EuroBERT's
    RMSNorm: one final norm). DeBERTa-v2's convolution after the first layer (conv_kernel_size > 0) is refused."""
    _, encoder = encoder_of(model)
    if encoder.training:
        raise ValueError("direct_attribution reads an eval-mode forward (dropout would add parts it cannot see): "
                         "call model.eval() first")
    if any(getattr(layer, "conv", None) is not None for layer in encoder.layers):  # DebertaV2Layer.conv
        raise ValueError("direct_attribution does not cover DeBERTa-v2's convolution after the first layer "
                         "(conv_kernel_size > 0)")
    with torch.no_grad(), capture(encoder, names=list(NAMES)) as cap:
        state = encoder(**inputs).last_hidden_state  # (B, L, C): every token, as under any capture
    with torch.no_grad():
        parts = _parts(encoder, cap.tensors)
    h = state.detach().float().requires_grad_(True)
    with torch.enable_grad():
        value = metric(h)
        if not isinstance(value, Tensor) or value.shape not in ((), h.shape[:1]):
            got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
            raise ValueError(f"the metric must return a 0-d tensor or one value per text ({h.size(0)},); it "
                             f"returned {got}")
        grad = (torch.autograd.grad(value.sum(), h)[0] if value.requires_grad
                else torch.zeros_like(h))  # a metric that does not read h: all of it is the rest
    value = value.detach()
    dims = tuple(range(value.dim(), 3))  # (L, C) per text, everything for a 0-d metric
    attributions = {name: (grad * part).sum(dim=dims) for name, part in parts.items()}
    rest = value - sum(attributions.values())
    return DirectAttribution(value, attributions, rest, parts, len(encoder.layers), encoder.config.num_heads)


def _parts(encoder: nn.Module, cap: dict[str, Tensor]) -> dict[str, Tensor]:
    """The last hidden state as parts (B, L, C): analysis.decompose's walk, each attention split into its heads'
    writes and its bias."""
    return decompose(encoder, cap, attention_parts=lambda i, layer, cap: _attention_parts(
        layer.attention, cap[f"layers.{i}.attention.head_outputs"], f"layers.{i}"))


def _attention_parts(attention: nn.Module, writes: Tensor, layer: str) -> dict[str, Tensor]:
    """An attention's output as its heads' writes (B, H, L, C -> one (B, L, C) each, named by the head's number in
    the unpruned layer: SelfAttention.heads) and its output projection's bias (nn/layers.py head_writes)."""
    parts = {f"{layer}.attention.head.{h}": writes[:, k].float() for k, h in enumerate(attention.heads)}
    bias = getattr(attention.output, "bias", None)
    if bias is not None:
        parts[f"{layer}.attention.bias"] = bias.float().expand_as(writes[:, 0])
    return parts
