"""Analysis over a capture (`ma.capture`): the helpers interpretability work reaches for first, each checked
against its definition (tests/nn/test_analysis.py).

  head_entropy(probs, mask)         each head's mean attention entropy over real queries, in nats
  attention_rollout(probs_list)     Abnar & Zuidema 2020 ("Quantifying Attention Flow in Transformers", eq. 1):
                                    per layer 0.5 * (mean over heads) + 0.5 * I, rows renormalised, multiplied
                                    from the first layer up: how much each output token draws on each input token
  attention_flow(probs_list)        the same paper's flow: the maximum flow from each input token to each output
                                    token through the layers' attention graph (exact max-flow, short inputs)
  logit_lens(model, cap)            each layer's residual stream read through the model's own finish (a pre-LN
                                    family's final norm) and masked-LM head: (layers, B, L, V) vocabulary logits
  residual_decomposition(model, cap)   the last hidden state as a sum of what the embeddings, each layer's
                                    attention and each feed-forward wrote into the residual stream (and the norms'
                                    biases): every LayerNorm distributed over its input's parts with that input's
                                    own mean and deviation, so the parts sum to the state exactly (a linearised
                                    view: a part's share depends on the others through the deviation)
  activation_patching, path_patching, attribution_patching, integrated_gradients (and their results Patching,
  IntegratedGradients)              live in nn/patching.py, re-exported here: patching at scale
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from minialign.nn.capture import Capture
from minialign.nn.patching import (  # noqa: F401  re-exported: ma.analysis.activation_patching and the rest
    PER,
    IntegratedGradients,
    Patching,
    activation_patching,
    attribution_patching,
    integrated_gradients,
    path_patching,
)
from minialign.nn.score_swap import encoder_of

NORM_BIASES = "norm biases"  # the part every norm's bias (beta) goes to (spread_norm)


def head_entropy(probs: Tensor, attention_mask: Tensor | None = None) -> Tensor:
    """probs (B, H, L, L) -> (H,): each head's entropy -sum p log p, averaged over the real queries (`attention_mask`
    (B, L), 1 = real; default every query). 0: one key; log(n): n keys alike."""
    entropy = -(probs * probs.clamp_min(1e-30).log()).sum(-1)  # (B, H, L)
    if attention_mask is None:
        return entropy.mean(dim=(0, 2))
    real = attention_mask.bool()[:, None, :].to(entropy.device)  # (B, 1, L)
    return (entropy * real).sum(dim=(0, 2)) / real.sum(dim=(0, 2)).clamp_min(1)


def attention_rollout(probs: Sequence[Tensor], *, residual: bool = True) -> Tensor:
    """Attention rollout over layers (each probs (B, H, L, L), first layer first) -> (B, L, L): row i is how much
    output token i draws on each input token. residual: add the identity for the skip connection (0.5 A + 0.5 I,
    rows renormalised), as Abnar & Zuidema do."""
    rollout = None
    for layer in probs:
        a = layer.float().mean(dim=1)  # (B, L, L): heads averaged
        if residual:
            a = 0.5 * a + 0.5 * torch.eye(a.size(-1), device=a.device)
            a = a / a.sum(dim=-1, keepdim=True)
        rollout = a if rollout is None else a @ rollout
    if rollout is None:
        raise ValueError("attention_rollout needs at least one layer's probabilities")
    return rollout


def attention_flow(probs: Sequence[Tensor], *, residual: bool = True) -> Tensor:
    """Attention flow over layers (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers", sec. 3)
    -> (B, L, L): entry (i, j) is the maximum flow from input token j to output token i in the attention graph,
    a flow network whose node (l, t) is token t after layer l (l = 0: the input) and whose edge
    (l - 1, j) -> (l, i) has capacity A_l[i, j]: the layer's probabilities with heads averaged, with the
    residual 0.5 A + 0.5 I rows renormalised as in `attention_rollout`. Where rollout multiplies the layers'
    attention up (every path counts), flow bounds each path by its narrowest edge.

    Exact, by Dinic's algorithm for each pair: L^2 max-flows over (N + 1) L nodes and N L^2 edges, in Python:
    meant for the short inputs the paper studies (tens of tokens; 16 tokens on 6 layers take about a second)."""
    layers = [layer.float().mean(dim=1) for layer in probs]  # (B, L, L) each: heads averaged
    if not layers:
        raise ValueError("attention_flow needs at least one layer's probabilities")
    if residual:
        eye = torch.eye(layers[0].size(-1), device=layers[0].device)
        layers = [(0.5 * a + 0.5 * eye) / (0.5 * a + 0.5 * eye).sum(dim=-1, keepdim=True) for a in layers]
    B, L = layers[0].shape[:2]
    flows = torch.zeros(B, L, L, dtype=torch.float64)
    for b in range(B):
        capacity = [a[b].double().tolist() for a in layers]  # capacity[l - 1][i][j]: edge (l - 1, j) -> (l, i)
        for i in range(L):
            for j in range(L):
                flows[b, i, j] = _max_flow(capacity, source=j, sink=i)
    return flows.to(layers[0].dtype)


def _max_flow(capacity: list[list[list[float]]], *, source: int, sink: int, eps: float = 1e-12) -> float:
    """Dinic's algorithm on the layered attention graph (attention_flow), from node (0, source) to (N, sink): a
    breadth-first level graph over the residual edges, then a blocking flow of depth-first augmenting paths in it,
    repeated until the sink is out of reach (Dinic 1970; 20-25x Edmonds-Karp's time here, the same flows). Edges
    join adjacent layers only; a residual edge runs backward where flow was sent."""
    N, L = len(capacity), len(capacity[0])
    used = [[[0.0] * L for _ in range(L)] for _ in range(N)]  # used[l - 1][i][j]: flow on (l - 1, j) -> (l, i)
    sink_node = (N, sink)

    def residual_edges(layer: int, token: int):
        """(next node, room left, forward?) of each residual edge out of (layer, token)."""
        if layer < N:  # forward edges to the next layer, where capacity is left
            cap, flow = capacity[layer], used[layer]
            for i in range(L):
                room = cap[i][token] - flow[i][token]
                if room > eps:
                    yield (layer + 1, i), room, True
        if layer > 0:  # backward along edges carrying flow
            flow = used[layer - 1][token]
            for k in range(L):
                if flow[k] > eps:
                    yield (layer - 1, k), flow[k], False

    total = 0.0
    while True:
        level = {(0, source): 0}
        queue, head = [(0, source)], 0
        while head < len(queue):
            node = queue[head]
            head += 1
            for following, _, _ in residual_edges(*node):
                if following not in level:
                    level[following] = level[node] + 1
                    queue.append(following)
        if sink_node not in level:
            return total
        dead: set[tuple[int, int]] = set()  # nodes no augmenting path of this phase passes through any more

        def push(node: tuple[int, int], limit: float) -> float:
            if node == sink_node:
                return limit
            layer, token = node
            for following, room, forward in residual_edges(layer, token):
                if level.get(following) != level[node] + 1 or following in dead:
                    continue
                sent = push(following, min(limit, room))
                if sent > eps:
                    if forward:
                        used[layer][following[1]][token] += sent
                    else:
                        used[layer - 1][token][following[1]] -= sent
                    return sent
            dead.add(node)
            return 0.0

        while (sent := push((0, source), float("inf"))) > eps:
            total += sent



def spread_norm(norm: nn.Module, total: Tensor, parts: dict[str, Tensor]) -> dict[str, Tensor]:
    """A LayerNorm of `total` (= the sum of `parts`) distributed over them: gamma * (part - mean(part)) / sigma(total),
    and beta as a part of its own; the results sum to norm(total). An RMSNorm (EuroBERT's nn.RMSNorm, or a norm
    declaring `rms = True`): gamma * part / rms(total), no mean and no bias; gamma is 1 + weight for a norm declaring
    `unit_offset = True` (Gemma's, models/gemma3_text.py). Another kind of norm is an error naming it."""
    rms_norm = isinstance(norm, nn.RMSNorm) or getattr(norm, "rms", False)
    if not (rms_norm or isinstance(norm, nn.LayerNorm)):
        raise ValueError(f"the decomposition spreads a LayerNorm or an RMSNorm over the residual's parts; "
                         f"{type(norm).__name__} is neither")
    weight = norm.weight.float() if norm.weight is not None else 1.0  # read as fp32, the module left as it is
    if getattr(norm, "unit_offset", False):
        weight = 1.0 + weight
    if rms_norm:
        eps = norm.eps if norm.eps is not None else torch.finfo(total.dtype).eps
        rms = (total.pow(2).mean(dim=-1, keepdim=True) + eps).sqrt()
        return {name: weight * p / rms for name, p in parts.items()}
    sigma = (total.var(dim=-1, unbiased=False, keepdim=True) + norm.eps).sqrt()
    out = {name: weight * (p - p.mean(dim=-1, keepdim=True)) / sigma for name, p in parts.items()}
    if norm.bias is not None:
        out[NORM_BIASES] = out.get(NORM_BIASES, 0) + norm.bias.float().expand_as(total)
    return out


def residual_decomposition(model: nn.Module, cap: Capture, *, prefix: str | None = None,
                           detach: bool = True) -> dict[str, Tensor]:
    """The last hidden state of a forward captured in eval mode as a sum of parts (B, L, C) (module docstring):
    "embeddings", "layers.i.attention", "layers.i.ffn", and "norm biases". Post-LN families (BERT's layer: a
    LayerNorm after each residual sum) and pre-LN ones (ModernBERT: sums, then its final norm).

    model: the Encoder, or a model holding one (AlignModel, ClassifierModel, MaskedLMModel: its `.encoder`), whose
    whole forward `cap` recorded. prefix: where the encoder's names start in `cap`; default: the encoder's path in
    `model` ("" for an Encoder, "encoder." for a head model), so a head model's own capture needs no second forward.
    detach (default): the parts are computed under no_grad and hold no autograd graph (no memory of a backward
    pass, whatever the capture kept); False: they stay in the graph of a `capture(detach=False)` forward and of the
    norms' weights, for a gradient through the decomposition."""
    name, encoder = encoder_of(model)
    prefix = (f"{name}." if name else "") if prefix is None else prefix
    if encoder.training:
        raise ValueError("residual_decomposition reads an eval-mode forward (dropout would add parts it cannot see)")
    layers = len(encoder.layers)
    if any(getattr(layer, "conv", None) is not None for layer in encoder.layers):  # DebertaV2Layer.conv: v2's ConvLayer
        raise ValueError("residual_decomposition does not cover DeBERTa-v2's convolution after the first layer")
    missing = [n for n in (f"{prefix}layers.0.input", f"{prefix}layers.{layers - 1}.output") if n not in cap]
    if missing:
        found = ", ".join(repr(p) for p in sorted({n.split("layers.")[0] for n in cap if "layers." in n}))
        raise ValueError(f"the capture lacks {missing}: capture the model's whole forward (names=None) and pass the "
                         f"model it recorded, or the prefix its encoder's names start with in the capture "
                         f"({found or 'none recorded'})")
    with torch.no_grad() if detach else contextlib.nullcontext():
        return decompose(encoder, {n.removeprefix(prefix): cap[n] for n in cap if n.startswith(prefix)})


def decompose(model: nn.Module, cap: dict[str, Tensor], *,
              attention_parts: Callable[[int, nn.Module, dict[str, Tensor]], dict[str, Tensor]] | None = None,
              ) -> dict[str, Tensor]:
    """residual_decomposition over the Encoder `model` and its capture's names, bare: the walk of the forward, each
    norm spread over the parts so far (`spread_norm`). attention_parts(i, layer, cap) -> the parts layer i's attention
    output is split into (default: one, "layers.{i}.attention"; nn/attribution.py: each head's write and the bias)."""
    layers = len(model.layers)
    pre_ln = "layers.0.ffn_norm" in cap
    parts = {"embeddings": cap["layers.0.input"].float()}
    for i, layer in enumerate(model.layers):
        attention = ({f"layers.{i}.attention": cap[f"layers.{i}.attention.output"].float()}
                     if attention_parts is None else attention_parts(i, layer, cap))
        if f"layers.{i}.post_attention_norm" in cap:  # a sandwich norm (Gemma 3's) on the attention's update alone
            attention = spread_norm(layer.post_attention_norm, cap[f"layers.{i}.attention.output"].float(), attention)
        parts.update(attention)
        if not pre_ln:
            parts = spread_norm(layer.attention_norm, cap[f"layers.{i}.attention_residual"].float(), parts)
        parts[f"layers.{i}.ffn"] = cap[f"layers.{i}.ffn_output"].float()
        if not pre_ln:
            parts = spread_norm(layer.ffn_norm, cap[f"layers.{i}.ffn_residual"].float(), parts)
    if pre_ln:
        parts = spread_norm(model.final_norm, cap[f"layers.{layers - 1}.output"].float(), parts)
    return parts


def logit_lens(model: nn.Module, cap: Capture, *, prefix: str = "encoder.") -> Tensor:
    """The logit lens (nostalgebraist 2020) with the model's own pieces: every layer's output (capture names
    `{prefix}layers.{i}.output`) through the family's finish (ModernBERT's final norm; nothing for a post-LN
    family, whose layers end in a norm) and the masked-LM head -> (layers, B, L, vocabulary). The last layer's
    equals the model's own prediction_logits. `model`: a model with an MLM head (AlignModel, MaskedLMModel). A layer
    ending in DeBERTa-v2's convolution is read after it (`layers.0.conv.output`, transformers' hidden_states[1])."""
    head = getattr(model, "mlm_head", None)
    if head is None:
        raise ValueError(f"{type(model).__name__} has no masked-LM head to read the residual stream through")
    encoder = model.encoder
    outputs = []
    for i in range(len(encoder.layers)):
        conv = getattr(encoder.layers[i], "conv", None) is not None  # DebertaV2Layer.conv: the layer's last step
        name = f"{prefix}layers.{i}.conv.output" if conv else f"{prefix}layers.{i}.output"
        if name not in cap:
            raise ValueError(f"the capture lacks {name}: capture the whole forward of `model`")
        state = encoder.family.finish(encoder, cap[name])
        outputs.append(head(state, encoder.embeddings.word.weight))
    return torch.stack(outputs)
