"""Patching at scale: activation patching with its patched copies batched, path patching, attribution patching and
integrated gradients over a named activation (`ma.capture` / `ma.patch` names), each checked against its serial
definition (tests/nn/test_patching.py).

  activation_patching(model, clean, corrupted, metric, names, per=...)
        causal tracing / activation patching (Meng et al. 2022, "Locating and Editing Factual Associations in GPT";
        TransformerLens patching.py): each named activation of a clean run put into the corrupted run, whole, per
        position, per head or per (head, position), and the metric of each patched run. `copies` patched runs go
        through one forward: the corrupted inputs repeated along the batch, copy k's rows patched with patch k
        alone, the metric called on each copy's rows (copies=1: one forward per patch, the serial definition)
  path_patching(model, clean, corrupted, metric, sender=(layer, head), receivers=[(layer, head, "q"|"k"|"v")])
        Wang et al. 2022 ("Interpretability in the Wild", section 3.1; TransformerLens' path patching): the sender
        head's clean write reaching the receivers' queries / keys / values through the residual stream alone, every
        other head's write and every feed-forward output after it frozen at its corrupted value
  attribution_patching(model, clean, corrupted, metric, names, per=...)
        Nanda 2023 ("Attribution Patching: Activation Patching At Industrial Scale"): activation patching's effects
        estimated to first order, corrupted metric + gradient . (clean - corrupted), from one clean forward and one
        corrupted forward and backward, in activation_patching's shapes
  integrated_gradients(model, inputs, metric, name, baseline=...)
        Sundararajan et al. 2017 ("Axiomatic Attribution for Deep Networks", eq. 3, Riemann midpoints) over an
        activation: (a - a') times the mean gradient along the straight path from a baseline a' to a, each step
        a batched copy; `completeness` is the gap to the axiom sum(attributions) = metric(a) - metric(a')

Every function takes the model's keyword inputs as dicts (input_ids, attention_mask, ...); a clean and a corrupted
input must have the same shapes (token i of one is token i of the other). A metric maps the model's output (of the
rows of one copy: `_rows`) to one number.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from minialign.nn.capture import capture, patch
from minialign.nn.interventions import activation_layout
from minialign.nn.score_swap import encoder_of

PER = (None, "position", "head", "head_position")
COPIES = 32  # patched copies per forward by default: one forward of 32 x the batch's rows
_NOT_PER_ROW = ("head_mask",)  # inputs that hold no batch axis, never repeated with the copies
_LAYER = re.compile(r"layers\.(\d+)(?=[.:])")  # an Encoder's activation name in layer i: "layers.i.<role>"


@dataclass
class Patching:
    """What a patching measured: the metric of the clean run, of the corrupted run, and of the corrupted run with
    each activation patched in (`effects`: name -> a 0-d tensor whole, (L,) per position, (H,) per head, (H, L) per
    head and position; the H axis holds the layer's heads in order, the unpruned numbers of a pruned layer's in
    `attention.heads`). attribution_patching's effects are estimates of the same; path_patching's are keyed by the
    sender's head_outputs."""

    clean: float
    corrupted: float
    effects: dict[str, Tensor]
    per: str | None

    def restored(self) -> dict[str, Tensor]:
        """Each effect as the fraction of the clean behaviour it restores: (patched - corrupted) / (clean -
        corrupted); 1: the patch alone brings the clean metric back, 0: it changes nothing."""
        gap = self.clean - self.corrupted
        if gap == 0:
            raise ValueError("the clean and corrupted runs have the same metric: there is nothing to restore")
        return {name: (effect - self.corrupted) / gap for name, effect in self.effects.items()}


# -- activation patching -----------------------------------------------------------------------------------

def activation_patching(model: nn.Module, clean: dict[str, Tensor], corrupted: dict[str, Tensor],
                        metric: Callable[[object], Tensor | float], names: Sequence[str], *,
                        per: str | None = None, copies: int = COPIES) -> Patching:
    """Activation patching: run `model` on the `clean` inputs recording `names` (names or patterns, as ma.capture
    takes them); then, for each recorded activation, run the `corrupted` inputs with the clean activation put in its
    place (ma.patch), and score every run with `metric(output) -> scalar`.

    per: None patches the whole activation; "position" one token at a time (its position axis: 1 of a (B, L, ...)
    activation, the query axis 2 of a per-head (B, H, L, ...) one); "head" one head at a time (per-head activations
    only); "head_position" one head at one position ((H, L) effects, per-head activations only).
    copies: patched runs per forward. The corrupted inputs are repeated `copies` times along the batch, one ma.patch
    of every name involved writes the clean values into each copy's rows at that copy's patch only, and the metric
    is called on each copy's rows of the output (each copy keeps its attention_mask). copies=1 runs one forward per
    patch (the serial definition); the effects agree to rounding. A name without a batch axis (relative.table) is
    patched whole, one forward each. Runs without gradients, in the model's current mode."""
    _check_per(per)
    batch = _check_pair(clean, corrupted)
    if copies < 1:
        raise ValueError(f"copies must be at least 1, got {copies}")
    resumes = copies > 1 and "start_at_layer" in inspect.signature(model.forward).parameters  # an Encoder
    with torch.no_grad():
        with capture(model, names=list(names)) as recorded:
            clean_score = _scalar(metric(model(**clean)), "clean")
        with capture(model, names=["layers.*.input"]) if resumes else contextlib.nullcontext() as entering:
            corrupted_score = _scalar(metric(model(**corrupted)), "corrupted")
        sources = {name: recorded[name] for name in recorded}
        axes = {name: _axes(name, source, per) for name, source in sources.items()}
        items = [(name, index) for name, source in sources.items()
                 for index in itertools.product(*(range(source.size(a)) for a in axes[name]))]
        # each group of copies starts at the first layer it patches, from the corrupted run's residual entering it
        # (what every copy computes before it, once): fewer layers run, the same effects to rounding
        starts = {name: _first_layer(name) if resumes else 0 for name in sources}
        scored: dict[tuple, float] = {}
        ordered = sorted(items, key=lambda item: starts[item[0]])
        for chunk in _chunks(ordered, sources, batch, copies):
            start = min(starts[name] for name, _ in chunk)
            residual = entering[f"layers.{start}.input"] if start else None
            scored.update(zip(chunk, _patched_copies(model, corrupted, metric, chunk, sources, axes, batch,
                                                     start=start, residual=residual)))
        scores = [scored[item] for item in items]
    effects, start = {}, 0
    for name, source in sources.items():
        shape = tuple(source.size(a) for a in axes[name])
        count = len(list(itertools.product(*(range(n) for n in shape))))
        effects[name] = torch.tensor(scores[start:start + count]).reshape(shape)
        start += count
    return Patching(clean_score, corrupted_score, effects, per)


def _check_per(per: str | None) -> None:
    if per not in PER:
        raise ValueError(f"per must be one of {PER}, got {per!r}")


def _check_pair(clean: dict[str, Tensor], corrupted: dict[str, Tensor]) -> int:
    """The batch size of a clean / corrupted pair of inputs, whose every tensor has the same shape in both."""
    for key in clean.keys() | corrupted.keys():
        a, b = clean.get(key), corrupted.get(key)
        if not (isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape):
            raise ValueError(f"clean and corrupted inputs must have the same shapes (token i of one is token i of the "
                             f"other): {key} is {_shape(a)} and {_shape(b)}")
    return _batch(clean)


def _batch(inputs: dict[str, Tensor]) -> int:
    if not isinstance(inputs.get("input_ids"), Tensor):
        raise ValueError("the inputs must hold input_ids (B, L)")
    return inputs["input_ids"].size(0)


def _layout(name: str, source: Tensor) -> str:
    """interventions.activation_layout's reading of a name; a module path's input or output ("module") is
    (B, L, ...), as every module of an encoder's layers reads and writes."""
    layout = activation_layout(name)
    return "token" if layout == "module" else layout


def _axes(name: str, source: Tensor, per: str | None) -> tuple[int, ...]:
    """The activation's axes one patch picks an index of: none (whole), the position axis, the head axis, or both."""
    if per is None:
        return ()
    layout = _layout(name, source)
    if layout == "shared":
        raise ValueError(f"{name} has no batch axis (one table every sequence shares): patch it whole (per=None)")
    if layout == "sequence":
        raise ValueError(f"{name} is {tuple(source.shape)}, one vector per sequence: it has no {per} axis; patch it "
                         f"whole (per=None)")
    if per in ("head", "head_position") and layout != "head":
        raise ValueError(f"{name} is {tuple(source.shape)}, not a per-head (B, H, L, ...) activation: patch it whole "
                         f"or per position")
    position = 2 if layout == "head" else 1
    if source.dim() <= position:
        raise ValueError(f"{name} is {tuple(source.shape)}: it has no {per} axis")
    return {"position": (position,), "head": (1,), "head_position": (1, 2)}[per]


def _chunks(items: list, sources: dict[str, Tensor], batch: int, copies: int):
    """The patches in groups of at most `copies`, one group per forward; a name without a batch axis one a forward."""
    group = []
    for item in items:
        if _layout(item[0], sources[item[0]]) == "shared" or sources[item[0]].size(0) != batch:
            if group:  # the scores come back in the items' order: the group before it first
                yield group
                group = []
            yield [item]
            continue
        group.append(item)
        if len(group) == copies:
            yield group
            group = []
    if group:
        yield group


def _first_layer(name: str) -> int:
    """The encoder layer an activation of an Encoder's forward is computed in (0 for what precedes the layers: the
    embeddings, a relative-position table), from its name: a patch of it changes nothing before that layer."""
    found = _LAYER.match(name)
    return int(found.group(1)) if found else 0


def _patched_copies(model: nn.Module, inputs: dict[str, Tensor], metric, chunk: list, sources: dict[str, Tensor],
                    axes: dict[str, tuple[int, ...]], batch: int, *, start: int = 0,
                    residual: Tensor | None = None) -> list[float]:
    """One forward of len(chunk) copies of `inputs`, copy k patched with chunk[k] (name, index); each copy's metric.
    start > 0: the forward starts at that layer from `residual` (B, L, C), the stream entering it, for every copy."""
    K = len(chunk)
    fns = {}
    for name in dict.fromkeys(name for name, _ in chunk):
        source = sources[name]
        if source.size(0) != batch or _layout(name, source) == "shared":  # a copy alone: the whole table
            fns[name] = lambda t, source=source: source.to(device=t.device, dtype=t.dtype)
            continue
        # (K, 1, ...) True where copy k writes: the whole activation, or its patch's index on the patched axes
        mask = torch.zeros(K, 1, *(source.size(a) if a in axes[name] else 1 for a in range(1, source.dim())),
                           dtype=torch.bool, device=source.device)
        for k, (other, index) in enumerate(chunk):
            if other == name:
                where = [0] * (source.dim() - 1)
                for a, i in zip(axes[name], index):
                    where[a - 1] = i
                mask[(k, 0, *where)] = True
        fns[name] = _writer(mask, source.unsqueeze(0), K)
    resume = {} if not start else {"start_at_layer": start, "residual": residual.repeat(K, 1, 1)}
    with patch(model, fns):
        output = model(**_repeat(inputs, K, batch), **resume)
    return [_scalar(metric(_rows(output, k * batch, (k + 1) * batch, K * batch)), chunk[k][0]) for k in range(K)]


def _writer(mask: Tensor, values: Tensor, copies: int) -> Callable[[Tensor], Tensor]:
    """A patch function of a (copies * B, ...) activation: `values` (broadcast to (copies, B, ...)) where `mask`
    (broadcast likewise) is True, the activation elsewhere."""
    def fn(t: Tensor) -> Tensor:
        rows = t.view(copies, t.size(0) // copies, *t.shape[1:])
        return torch.where(mask.to(t.device), values.to(device=t.device, dtype=t.dtype), rows).reshape(t.shape)
    return fn


def _repeat(inputs: dict[str, Tensor], copies: int, batch: int) -> dict[str, Tensor]:
    """The inputs `copies` times along the batch: copy k is rows k*B .. (k+1)*B - 1 of every per-row input (an
    input whose first axis is not the batch's, a broadcast (1, ...) mask or a head_mask, is left as it is)."""
    if copies == 1:
        return inputs
    return {key: value.repeat(copies, *([1] * (value.dim() - 1)))
            if isinstance(value, Tensor) and key not in _NOT_PER_ROW and value.dim() and value.size(0) == batch
            else value for key, value in inputs.items()}


def _rows(output, start: int, stop: int, total: int):
    """Rows start .. stop - 1 of a batched output: every tensor whose first axis has `total` rows, in a dataclass (a
    model's output), a tuple, list or dict of them, or bare; anything else as it is."""
    if isinstance(output, Tensor):
        return output[start:stop] if output.dim() and output.size(0) == total else output
    if dataclasses.is_dataclass(output) and not isinstance(output, type):
        return dataclasses.replace(output, **{f.name: _rows(getattr(output, f.name), start, stop, total)
                                              for f in dataclasses.fields(output) if f.init})
    if isinstance(output, tuple):
        parts = [_rows(part, start, stop, total) for part in output]
        return type(output)(*parts) if hasattr(output, "_fields") else tuple(parts)
    if isinstance(output, list):
        return [_rows(part, start, stop, total) for part in output]
    if isinstance(output, dict):
        return {key: _rows(part, start, stop, total) for key, part in output.items()}
    return output


# -- path patching ------------------------------------------------------------------------------------------

def path_patching(model: nn.Module, clean: dict[str, Tensor], corrupted: dict[str, Tensor],
                  metric: Callable[[object], Tensor | float], *, sender: tuple[int, int] | int,
                  receivers: Sequence[tuple[int, int, str]], freeze_ffn: bool = False) -> Patching:
    """Path patching (Wang et al. 2022, section 3.1; TransformerLens' path patching): the effect on `metric` of the
    sender head's clean write reaching the receivers' queries, keys or values through the residual stream, every
    other head's write frozen on the way (and, with freeze_ffn, every feed-forward output: the direct path alone).

    sender: (layer, head); or a layer, every head of it a sender of its own (effects (H,), the heads batched as
    copies). receivers: (layer, head, "q" | "k" | "v"), each in a layer after the sender's. Heads are numbered as in
    the unpruned layer (`attention.heads`; a pruned head is an error). Four runs:
      1. clean, recording the sender's write (layers.{s}.attention.head_outputs);
      2. corrupted, recording every head's write after the sender's layer (freeze_ffn: and every feed-forward
         output from it on);
      3. corrupted with the sender head's write clean and those writes (and outputs) frozen at run 2's values,
         recording the receivers' q / k / v: what reaches them is the sender's write through the residual, the norms
         and the feed-forwards recomputed on it (Wang et al.'s recipe, and ARENA's: heads frozen, MLPs not), or
         through the residual and the norms alone (freeze_ffn);
      4. corrupted with only the receivers' q / k / v (their head's slice) set to run 3's: its metric is the effect.
    Returns a Patching whose `effects` holds {sender's head_outputs name: 0-d, or (H,)}. What a family writes into
    the residual besides head writes and feed-forward outputs (DeBERTa-v2's convolution after layer 0) is not frozen.
    Runs without gradients."""
    batch = _check_pair(clean, corrupted)
    where, encoder = encoder_of(model)
    prefix = f"{where}." if where else ""
    layers = len(encoder.layers)
    layer, heads = (sender, None) if isinstance(sender, int) else sender
    if not 0 <= layer < layers:
        raise ValueError(f"the sender's layer {layer} is not one of the model's {layers}")
    parts: dict[str, list[int]] = {}  # receiver activation -> its heads
    for r_layer, r_head, role in receivers:
        if role not in ("q", "k", "v"):
            raise ValueError(f"a receiver reads its q, k or v, got {role!r}")
        if not layer < r_layer < layers:
            raise ValueError(f"receiver ({r_layer}, {r_head}, {role!r}) must be in a layer after the sender's "
                             f"({layer}) and before {layers}")
        parts.setdefault(f"{prefix}layers.{r_layer}.attention.{role}", []).append(_head_index(encoder, r_layer, r_head))
    if not parts:
        raise ValueError("path patching needs at least one receiver")
    send = f"{prefix}layers.{layer}.attention.head_outputs"
    frozen = ([f"{prefix}layers.{i}.attention.head_outputs" for i in range(layer + 1, layers)]
              + ([f"{prefix}layers.{i}.ffn_output" for i in range(layer, layers)] if freeze_ffn else []))
    with torch.no_grad():
        with capture(model, names=[send]) as run:  # 1
            clean_score = _scalar(metric(model(**clean)), "clean")
        clean_write = run[send]  # (B, H, L, C)
        with capture(model, names=[send, *frozen]) as run:  # 2
            corrupted_score = _scalar(metric(model(**corrupted)), "corrupted")
        values = dict(run.tensors)
        # heads by their number in the unpruned layer (SelfAttention.heads, as Site.heads and direct attribution
        # number them), each at its index on the H axis
        senders = list(range(clean_write.size(1))) if heads is None else [_head_index(encoder, layer, heads)]
        K = len(senders)
        repeated = _repeat(corrupted, K, batch)
        mask = torch.zeros(K, 1, clean_write.size(1), 1, 1, dtype=torch.bool, device=clean_write.device)
        for k, h in enumerate(senders):
            mask[k, 0, h] = True
        fns = {send: _writer(mask, clean_write.unsqueeze(0), K)}
        for name in frozen:
            fns[name] = _writer(torch.ones((), dtype=torch.bool), values[name].unsqueeze(0), K)
        with patch(model, fns), capture(model, names=list(parts)) as run:  # 3
            model(**repeated)
        received = {name: run[name] for name in parts}  # (K * B, H, L, D)
        fns = {}
        for name, heads_of in parts.items():
            where = torch.zeros(1, received[name].size(1), 1, 1, dtype=torch.bool, device=received[name].device)
            where[0, heads_of] = True
            fns[name] = lambda t, where=where, value=received[name]: torch.where(
                where.to(t.device), value.to(device=t.device, dtype=t.dtype), t)
        with patch(model, fns):  # 4
            output = model(**repeated)
        scores = [_scalar(metric(_rows(output, k * batch, (k + 1) * batch, K * batch)), send) for k in range(K)]
    effect = torch.tensor(scores) if heads is None else torch.tensor(scores[0])
    return Patching(clean_score, corrupted_score, {send: effect}, "head" if heads is None else None)


def _head_index(encoder: nn.Module, layer: int, head: int) -> int:
    """Head `head` of layer `layer` (its number in the unpruned layer) as an index on the layer's H axis."""
    heads = tuple(encoder.layers[layer].attention.heads)
    if head not in heads:
        raise ValueError(f"head {head} is not one of layer {layer}'s heads {heads}"
                         + (" (the others were pruned)" if len(heads) < encoder.config.num_heads else ""))
    return heads.index(head)


# -- attribution patching -----------------------------------------------------------------------------------

def attribution_patching(model: nn.Module, clean: dict[str, Tensor], corrupted: dict[str, Tensor],
                         metric: Callable[[object], Tensor], names: Sequence[str], *,
                         per: str | None = None) -> Patching:
    """Attribution patching (Nanda 2023): activation_patching's effects to first order, from one clean forward
    (recording `names`) and one corrupted forward and backward: each patch's effect is estimated as
    corrupted metric + sum over the patched element (whole, position, head, (head, position)) of
    d metric / d activation (at the corrupted run) * (clean - corrupted). Effects in activation_patching's shapes,
    to put side by side with the exact ones; equal to them where the metric is linear in the activation (the last
    layer's output read linearly), an estimate elsewhere. The gradient is taken with respect to each activation as
    the forward goes on with it (torch.autograd.grad: no parameter's .grad is touched)."""
    _check_per(per)
    _check_pair(clean, corrupted)
    with torch.no_grad(), capture(model, names=list(names)) as recorded:
        clean_score = _scalar(metric(model(**clean)), "clean")
    sources = {name: recorded[name] for name in recorded}
    axes = {name: _axes(name, source, per) for name, source in sources.items()}
    leaves: dict[str, Tensor] = {}

    def leaf(name: str) -> Callable[[Tensor], Tensor]:  # the activation as a node of its own on the metric's graph
        def fn(t: Tensor) -> Tensor:
            # on the graph already (an earlier name's node, or the weights'): a view of it, so the gradient reaching
            # it is the whole metric's and an earlier name's still flows through it; else a leaf of its own
            leaves[name] = x = t.view_as(t) if t.requires_grad else t.detach().requires_grad_(True)
            return x
        return fn

    with torch.enable_grad(), patch(model, {name: leaf(name) for name in sources}):
        score = metric(model(**corrupted))
    corrupted_score = _scalar(score, "corrupted")
    if not (isinstance(score, Tensor) and score.requires_grad):
        raise ValueError("the metric must return a tensor computed from the model's output (its gradient is taken)")
    grads = torch.autograd.grad(score, [leaves[name] for name in sources], allow_unused=True)
    effects = {}
    for (name, source), grad in zip(sources.items(), grads):
        if grad is None:  # the metric does not read it
            grad = torch.zeros_like(leaves[name])
        product = grad * (source.to(grad.dtype) - leaves[name].detach())
        summed = [a for a in range(product.dim()) if a not in axes[name]]
        effects[name] = (corrupted_score + product.sum(dim=summed)).detach().float().cpu() if summed else (
            corrupted_score + product).detach().float().cpu()
    return Patching(clean_score, corrupted_score, effects, per)


# -- integrated gradients -----------------------------------------------------------------------------------

@dataclass
class IntegratedGradients:
    """What integrated_gradients measured: `attributions` of the activation's elements summed over its last axis
    ((B, L) of a (B, L, C) activation, (B, H, L) of a per-head one), the metric at the activation (`value`) and at the
    baseline (`baseline`), and `completeness` = sum(attributions) - (value - baseline): 0 for the exact integral,
    the Riemann sum's error for `steps` midpoints."""

    attributions: Tensor
    value: float
    baseline: float
    completeness: float
    steps: int


def integrated_gradients(model: nn.Module, inputs: dict[str, Tensor], metric: Callable[[object], Tensor], name: str,
                         *, baseline: dict[str, Tensor] | Tensor | None = None, steps: int = 32,
                         copies: int = COPIES) -> IntegratedGradients:
    """Integrated gradients over the activation `name` of a forward on `inputs` (Sundararajan et al. 2017, eq. 3,
    with the midpoint rule): attribution = (a - a') * mean over alpha in {(i + 0.5) / steps} of d metric / d a at
    a' + alpha (a - a'), the rest of the forward the inputs' own. baseline a': None zeros, a tensor of the
    activation's shape, or inputs of the same shapes (a corrupted run) whose activation is taken. Each step is a
    patched copy, `copies` per forward. The completeness axiom, sum(attributions) = metric(a) - metric(a'), holds as
    steps grow (exactly at steps=1 where the metric is linear in the activation): `completeness` is the gap."""
    if steps < 1 or copies < 1:
        raise ValueError(f"steps and copies must be at least 1, got {steps} and {copies}")
    batch = _batch(inputs)
    with torch.no_grad(), capture(model, names=[name]) as recorded:
        value = _scalar(metric(model(**inputs)), "input")
    if list(recorded) != [name]:
        raise ValueError(f"integrated_gradients takes one activation by its exact name; {name!r} recorded "
                         f"{list(recorded)}")
    act = recorded[name]
    if act.size(0) != batch or _layout(name, act) == "shared":
        raise ValueError(f"{name} is {tuple(act.shape)}: it has no batch axis to interpolate copies along")
    if baseline is None:
        base = torch.zeros_like(act)
    elif isinstance(baseline, Tensor):
        if baseline.shape != act.shape:
            raise ValueError(f"the baseline is {tuple(baseline.shape)}, the activation {tuple(act.shape)}")
        base = baseline.to(device=act.device, dtype=act.dtype)
    else:
        _check_pair(inputs, baseline)
        with torch.no_grad(), capture(model, names=[name]) as recorded:
            model(**baseline)
        base = recorded[name]
    with torch.no_grad(), patch(model, {name: lambda t: base.to(device=t.device, dtype=t.dtype)}):
        base_score = _scalar(metric(model(**inputs)), "baseline")
    alphas = (torch.arange(steps, dtype=torch.float64) + 0.5) / steps
    total = torch.zeros_like(act, dtype=torch.float32)
    for start in range(0, steps, copies):
        alpha = alphas[start:start + copies].to(act.device, torch.float32)
        K = alpha.numel()
        path = (base.unsqueeze(0) + alpha.view(K, *[1] * act.dim()) * (act - base).unsqueeze(0)).to(act.dtype)
        path = path.reshape(K * batch, *act.shape[1:]).requires_grad_(True)  # a leaf: the gradient's point
        with torch.enable_grad(), patch(model, {name: lambda t: path}):
            output = model(**_repeat(inputs, K, batch))
            scores = [metric(_rows(output, k * batch, (k + 1) * batch, K * batch)) for k in range(K)]
            if not all(isinstance(s, Tensor) and s.requires_grad for s in scores):
                raise ValueError("the metric must return a tensor computed from the model's output (its gradient is "
                                 "taken)")
            (grad,) = torch.autograd.grad(torch.stack([s.reshape(()) for s in scores]).sum(), path)
        total += grad.view(K, *act.shape).float().sum(0)  # the copies are independent: each its own gradient
    attributions = ((act - base).float() * total / steps).sum(-1)
    return IntegratedGradients(attributions, value, base_score,
                               attributions.sum().item() - (value - base_score), steps)


# -- shared --------------------------------------------------------------------------------------------------

def _scalar(value: Tensor | float, run: str) -> float:
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise ValueError(f"the metric must return one number; on the {run} run it returned a tensor of shape "
                             f"{tuple(value.shape)}")
        value = value.item()
    value = float(value)
    if value != value:  # NaN: a comparison that passes NaN is worse than none
        raise ValueError(f"the metric returned NaN on the {run} run")
    return value


def _shape(value) -> str:
    if isinstance(value, Tensor):
        return str(tuple(value.shape))
    return "missing" if value is None else type(value).__name__
