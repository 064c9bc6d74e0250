"""`ma.explore`: a capture turned into one self-contained HTML page (no server, no CDN, no network).

    page = ma.explore(model, tokenizer, "The bank raised rates.", pair=None, attention_mask=None)
    page.save("explore.html")

The page shows, for one input (and, with `compare_model` / `compare_mask`, a second run of it):
the head view (tokens in two columns, lines weighted by attention, a layer selector, heads toggled
by colour), the model view (layers x heads small maps, click to enlarge), per-token residual-stream
norms by layer, the embedding decomposition (word / position / token type: their norms, and how
much of each every layer's state still points along, as cosines), AlignScore's head probabilities
for an AlignModel, for two runs the cosine between the same token's states, layer by layer, and for a model
whose attention scores have position terms (DeBERTa's disentangled attention) the parts of its scores.
Beside them, what `ma.analysis` (nn/analysis.py) computes from the same capture, each run's own: every head's
entropy, the attention rollout (and flow, for short inputs) and the last hidden state's residual decomposition.

The embedding decomposition shows the parts the model's embeddings record and no other (`ma.capture`: a family
without token types, DistilBERT's or MPNet's, records none). Embeddings narrower than the layers and
projected to them (ELECTRA's `embedding_size`, the Embeddings' `project`) are shown at their own width,
with the projection: the parts' norms and the "emb" cosines at the embedding width, the layers' cosines
against each part mapped by the projection's weight (W p, no bias), the residual stream from the
projection's output (what the first layer reads). `Exploration.data["embedding"]["note"]` says which.

A corrupted input of the same token count (`corrupted=`) is the second run instead, beside the clean one, with
activation patching's maps (patching.py: the residual stream per layer and position, the heads per layer).

A second run may use another score function (nn/score_swap.py `with_score_function`, the research tool that
replaces the alignment score q.k / sqrt(d); not for a family adding a relative-position bias, MPNet's).

Every number on the page is a captured tensor (ma.capture) of the real tokens (a single input has no
padding). A text longer than the window is shown as far as the model saw it, never whole, with the
number of tokens cut from each text (`Exploration.cut_note`, which the CLI prints). Attention is stored
as uint16 (value x 65535, rounded): whole maps while layers x heads x tokens^2 fits ATTENTION_BYTES,
otherwise each query's TOP_K strongest keys (k as large as the budget allows, at least MIN_TOP_K) and the
weight of the keys left out; the page says which. The model view's small maps are block means of at most
THUMB x THUMB, each scaled to its own largest (stored beside it). So a 512-token input on 12 layers x 12
heads stays under PAGE_LIMIT bytes.

Analysis (`_analysis`; every number from the ma.analysis function named, never computed here again):
`head_entropy` per layer and head (nats, over the input's queries: a single input has no padding);
`attention_rollout` over all layers (residual: 0.5 A + 0.5 I), stored as the attention maps are (`_token_maps`:
uint16, whole while tokens^2 x 2 fits ROLLOUT_BYTES, else each output token's top k); `attention_flow` where its
exact max-flows are cheap (layers^2 x tokens^4, what its max-flows' work grows as, within FLOW_STEPS; the
page says when it is left out and why); `residual_decomposition` of the last hidden state x into parts p, shown
per token as share(p) = <p, x> / |x|^2 (the parts' shares sum to 1 where the parts sum to x) and |p|, or the
function's refusal (a training-mode forward, DeBERTa-v2's convolution) in its own words.

Score terms (DeBERTa-v2/v3, whose capture records each layer's `attention.c2p` / `attention.p2c`; other families
record none and get no `terms`): every layer's raw scores (before the mask) split into content-to-content (c2c =
scores_raw - c2p - p2c, i.e. q.k / scale) and the position terms, each as the capture recorded it (already
divided by the scale, so the parts add up to scores_raw). Stored as int16 per map (value / the map's largest
|value| x 32767, rounded; the largest beside it): whole maps while terms x layers x heads x tokens^2 x 2 fits
TERM_BYTES, otherwise block means over as many blocks a side as fit (at least MIN_TERM_BLOCKS; block means of
the parts still add up to the block means of the scores). Beside the maps, each
term's mean |value| per layer and head over the pairs the mask lets through, from the full-precision tensors.
"""

from __future__ import annotations

import array
import base64
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from minialign.nn import analysis
from minialign.nn.capture import Capture, capture
from minialign.nn.score_swap import encoder_of, has_relative_bias

ATTENTION_BYTES = 5_100_000  # raw bytes of attention data a run may hold (before base64): room for the rollout
# and the score terms, so a 512-token input on 12 x 12 heads stays under PAGE_LIMIT (each query's 17 keys)
MIN_TOP_K, MAX_TOP_K = 4, 32
THUMB = 64  # the model view's maps: at most THUMB x THUMB block means
PAGE_LIMIT = 10_000_000  # what a page of up to 512 tokens on 12 x 12 heads stays under (tests)
QUANT = 65535  # attention weights are stored as round(p * QUANT) in uint16
ALIGN_LABELS = ("aligned", "neutral", "contradiction")  # AlignScore's tri head
PARTS = ("word", "position", "token_type")  # the embedding parts a family may record (nn/capture.py)
TERM_BYTES = 600_000  # raw bytes of score-term maps a run may hold (before base64): the page stays under PAGE_LIMIT
MIN_TERM_BLOCKS = 16
TERM_QUANT = 32767  # score terms are stored as round(v / largest |v| of the map * TERM_QUANT) in int16
ROLLOUT_BYTES = 2 * 512 * 512  # raw bytes of one rollout map (uint16): whole up to 512 tokens, top-k beyond
# attention flow where layers^2 x tokens^4 is within (2 layers: 28 tokens; 6: 16; 12: 11): a few seconds on two
# cores (Dinic's algorithm: 16 tokens on 6 layers 1.6 s, on 12 layers 2.0 s, loaded)
FLOW_STEPS = 2_500_000


def _b64(t: Tensor, code: str) -> str:
    """Little-endian bytes of an integer tensor as array typecode `code` ("B": uint8, "H": uint16, "h": int16),
    base64."""
    values = array.array(code, t.flatten().to(torch.int64).tolist())
    if sys.byteorder == "big":
        values.byteswap()
    return base64.b64encode(values.tobytes()).decode("ascii")


def _quantise(p: Tensor) -> Tensor:
    return (p.clamp(0, 1) * QUANT).round().to(torch.int32)


def _rounded(t: Tensor, digits: int = 5) -> list:
    return [[round(float(v), digits) for v in row] for row in t]


def _encoder_prefix(model: nn.Module) -> str:
    """The capture name prefix of the model's Encoder ("" for an Encoder, "encoder." inside AlignModel)."""
    name, _ = encoder_of(model)
    return f"{name}." if name else ""


def _run(model: nn.Module, batch: dict[str, Tensor], mask: Tensor | None, label: str) -> tuple[dict, dict]:
    """One forward under capture: (the page's data of this run, its raw tensors for diffs)."""
    from minialign.models.head_models import AlignModel, TokenClassifierModel

    prefix = _encoder_prefix(model)
    inputs = dict(batch)
    if mask is not None:
        mask = mask.bool()
        inputs["attention_mask"] = mask if mask.dim() == 3 else mask[None]
    with torch.inference_mode(), capture(model) as cap:
        out = model(**inputs)
    layers = model.config.num_layers
    # (T, E): the embeddings' output at their width: their LayerNorm's, or their sum where a family has no norm there
    # (EuroBERT: Llama's bare token embeddings, normed inside each layer)
    embedded = cap[f"{prefix}embeddings.norm" if f"{prefix}embeddings.norm" in cap else f"{prefix}embeddings.sum"][0]
    projected = cap.tensors.get(f"{prefix}embeddings.project")  # (1, T, C) where a projection follows
    first = embedded if projected is None else projected[0]  # what the first layer reads
    states = [first] + [cap[f"{prefix}layers.{i}.output"][0] for i in range(layers)]
    encoder = model.get_submodule(prefix.rstrip(".")) if prefix else model
    with torch.inference_mode():  # the last state after a pre-LN final norm (Family.finish; others: as it is)
        states[-1] = encoder.family.finish(encoder, states[-1][None])[0]
    parts = {name: cap[f"{prefix}embeddings.{name}"][0] for name in PARTS if f"{prefix}embeddings.{name}" in cap}
    into_layers = _projection(model, prefix) if projected is not None else None
    probs = torch.cat([cap[f"{prefix}layers.{i}.attention.probs"] for i in range(layers)])  # (layers, H, T, T)
    run = {
        "label": label,
        "norms": _rounded(torch.stack([s.float().norm(dim=-1) for s in states])),  # (layers + 1, T)
        "stream": {role: _rounded(torch.stack([cap[f"{prefix}layers.{i}.{role}"][0].float().norm(dim=-1)
                                               for i in range(layers)]))
                   for role in ("attention_residual", "ffn_residual")},
        "parts": {name: [round(float(v), 5) for v in t.float().norm(dim=-1)] for name, t in parts.items()},
        "part_cosines": {name: _rounded(torch.stack(_part_cosines(embedded, states[1:], t, into_layers)))
                         for name, t in parts.items()},
        "attention": _attention(probs.float()),
        "analysis": _analysis(encoder, cap, prefix, probs.float(), states[-1]),
    }
    if terms := _score_terms(cap, prefix, layers, mask):
        run["terms"] = terms
    if projected is not None:
        run["projected_norms"] = [round(float(v), 5) for v in first.float().norm(dim=-1)]
    if isinstance(model, TokenClassifierModel):  # each token's label probabilities (a tagger, LettuceDetect's spans)
        run["token_labels"] = {"labels": list(model.config.labels),
                               "probs": _rounded(torch.softmax(out.logits.float(), dim=-1)[0], 4)}
    if isinstance(model, AlignModel):
        tri = torch.softmax(out.tri_label_logits.float(), dim=-1)[0]
        run["heads"] = {**{f"tri: {name}": float(p) for name, p in zip(ALIGN_LABELS, tri)},
                        "bin: aligned": float(torch.softmax(out.seq_relationship_logits.float(), dim=-1)[0, 1]),
                        "reg": float(out.reg_label_logits.float()[0, 0])}
    return run, {"states": states}


def _analysis(encoder: nn.Module, cap: Capture, prefix: str, probs: Tensor, last: Tensor) -> dict:
    """What ma.analysis computes from one run's capture (module docstring, "Analysis"). probs (layers, H, T, T): the
    captured attention; last (T, C): the last hidden state the page shows (after a pre-LN family's final norm)."""
    layers = [p[None] for p in probs]  # (1, H, T, T) each, first layer first: ma.analysis's batch of one
    L, T = len(layers), probs.size(-1)
    data = {"entropy": _rounded(torch.stack([analysis.head_entropy(p) for p in layers])),  # (layers, H), nats
            "rollout": _token_maps(analysis.attention_rollout(layers), ROLLOUT_BYTES, T)}
    steps = L ** 2 * T ** 4
    if steps <= FLOW_STEPS:  # whole: at most a few dozen tokens (rows are not distributions: never top-k)
        data["flow"] = _token_maps(analysis.attention_flow(layers), T * T * 2, T)
    else:
        data["flow_note"] = (f"Attention flow is left out: it is {T}\u00b2 exact max-flow problems over the "
                             f"attention graph, work growing as layers\u00b2 x tokens\u2074 ({L}\u00b2 x {T}\u2074 "
                             f"= {steps:,} here, over the page's {FLOW_STEPS:,}); ma.analysis.attention_flow "
                             f"computes it outside the page.")
    data["decomposition"] = _decomposition(encoder, cap, prefix, last)
    return data


def _decomposition(encoder: nn.Module, cap: Capture, prefix: str, last: Tensor) -> dict:
    """The last hidden state x (T, C) as residual_decomposition's parts p: per part and token its share
    <p, x> / |x|^2 (the shares sum to 1 where the parts sum to x) and its norm |p|; or, where the function refuses
    (a training-mode forward, DeBERTa-v2's convolution), its reason."""
    bare = cap if not prefix else Capture(tensors={name[len(prefix):]: t for name, t in cap.tensors.items()
                                                   if name.startswith(prefix)})  # the Encoder's own names
    try:
        with torch.inference_mode():  # the records are inference tensors
            parts = analysis.residual_decomposition(encoder, bare)
    except ValueError as error:
        return {"refused": str(error)}
    names = sorted(parts, key=lambda name: name == "norm biases")  # embeddings, the layers in order, biases last
    x = last.float()  # (T, C)
    stacked = torch.stack([parts[name][0].float() for name in names])  # (parts, T, C)
    return {"parts": names, "share": _rounded((stacked * x).sum(-1) / (x * x).sum(-1).clamp_min(1e-30)),
            "norm": _rounded(stacked.norm(dim=-1)), "state_norm": [round(float(v), 5) for v in x.norm(dim=-1)],
            "sum_error": float(((stacked.sum(0) - x).norm(dim=-1) / x.norm(dim=-1).clamp_min(1e-30)).max())}


def _part_cosines(embedded: Tensor, layer_states: list[Tensor], part: Tensor,
                  into_layers: Tensor | None) -> list[Tensor]:
    """cos(state, part) per token: the embeddings' output against the part at the embeddings' width, each
    layer's state against it at the layers' width (mapped by the projection's weight where there is one)."""
    wide = part.float() if into_layers is None else part.float() @ into_layers.float().T  # (T, C)
    return ([F.cosine_similarity(embedded.float(), part.float(), dim=-1)]
            + [F.cosine_similarity(s.float(), wide, dim=-1) for s in layer_states])


def _projection(model: nn.Module, prefix: str) -> Tensor:
    """The weight (C, E) of the linear layer that projects the embeddings to the layers' width."""
    return model.get_submodule(f"{prefix}embeddings").project.weight.detach()


def _embedding(model: nn.Module, run: dict) -> dict:
    """What the page's decomposition shows, and one sentence saying it (the parts this model has; its widths)."""
    config = model.config
    parts = list(run["parts"])
    width = config.embedding_width
    projected = "projected_norms" in run
    named = {"word": "word", "position": "position", "token_type": "token type"}
    said = " + ".join(named[p] for p in parts)
    note = f"The embeddings are LayerNorm({said})"
    missing = [named[p] for p in PARTS if p not in parts]
    if missing:
        note += f"; this model ({config.arch}) has no {' or '.join(missing)} embeddings"
    if projected:
        note += (f". They are {width} wide and projected to the layers' {config.hidden_size} by a linear layer W: "
                 f"the parts' norms and the emb column's cosines are at width {width}; the layers' columns compare "
                 f"each state with the part mapped by W (W p, no bias); the residual stream starts at the "
                 f"projection's output")
    return {"parts": parts, "width": width, "hidden": config.hidden_size, "projected": projected, "note": note + "."}


def _attention(probs: Tensor) -> dict:
    """probs (layers, H, T, T) -> the page's attention: whole maps or each row's top-k, plus thumbnails."""
    layers, heads, T, _ = probs.shape
    maps = layers * heads
    flat = probs.reshape(maps, T, T)
    size = min(THUMB, T)
    pooled = F.adaptive_avg_pool2d(flat[:, None], size)[:, 0]  # (maps, size, size) block means
    top = pooled.amax(dim=(1, 2))  # each small map is scaled to its own largest block mean: the page's colour scale
    thumbs = pooled / top[:, None, None].clamp_min(1e-12)
    return {"layers": layers, "heads": heads, "thumb": size, "thumbs": _b64((thumbs * 255).round(), "B"),
            "thumb_max": [round(float(v), 5) for v in top], **_token_maps(flat, ATTENTION_BYTES, MAX_TOP_K)}


def _token_maps(maps: Tensor, budget: int, max_k: int) -> dict:
    """maps (M, T, T) of weights in [0, 1] whose rows are distributions over tokens (attention, rollout) -> the
    page's storage, uint16 (p x QUANT, rounded): every weight while M x T^2 x 2 bytes fit `budget`, otherwise each
    row's k strongest (k as large as the budget allows, from MIN_TOP_K to max_k) and the largest weight left out."""
    M, T, _ = maps.shape
    data = {"tokens": T, "quant": QUANT}
    if M * T * T * 2 <= budget:
        return {**data, "storage": "full", "weights": _b64(_quantise(maps), "H")}
    k = max(MIN_TOP_K, min(max_k, T, budget // (M * T * 4)))
    values, index = maps.topk(k, dim=-1)  # (M, T, k), strongest first
    rest = (1 - values.sum(-1)).clamp_min(0)  # the weight of the keys left out, per row
    return {**data, "storage": "topk", "k": k, "weights": _b64(_quantise(values), "H"),
            "index": _b64(index, "H"), "rest_max": float(rest.max())}


def _score_terms(cap, prefix: str, layers: int, mask: Tensor | None) -> dict | None:
    """The parts of every layer's raw scores, where the capture records position terms (DeBERTa's disentangled
    attention, models/deberta_v2.py Disentangled: c2p, p2c, each already divided by sqrt(D (1 + n)) as
    transformers' disentangled_attention_bias divides them), else None. c2c = scores_raw - the position terms:
    q . k / sqrt(D (1 + n)) (DisentangledSelfAttention.forward's first matmul)."""
    from minialign.models.deberta_v2 import POSITION_TERMS

    name = lambda i, role: f"{prefix}layers.{i}.attention.{role}"  # noqa: E731
    present = [t for t in POSITION_TERMS if name(0, t) in cap]
    if not present:
        return None
    raw = torch.cat([cap[name(i, "scores_raw")] for i in range(layers)]).float()  # (layers, H, T, T)
    parts = {t: torch.cat([cap[name(i, t)] for i in range(layers)]).float() for t in present}
    terms = {"c2c": raw - sum(parts.values()), **parts}
    _, heads, T, _ = raw.shape
    keep = torch.ones(T, T, dtype=torch.bool) if mask is None else mask.reshape(-1, T, T)[0].bool().cpu()
    pairs = keep.sum().clamp_min(1)
    size = T if len(terms) * layers * heads * T * T * 2 <= TERM_BYTES else \
        min(T, max(MIN_TERM_BLOCKS, int((TERM_BYTES // (len(terms) * layers * heads * 2)) ** 0.5)))
    data = {"names": list(terms), "storage": "full" if size == T else "blocks", "size": size, "quant": TERM_QUANT,
            "head_dim": cap[name(0, "q")].size(-1), "maps": {}, "largest": {}, "mean_abs": {}}
    for t, value in terms.items():  # value (layers, H, T, T)
        value = value.cpu()
        data["mean_abs"][t] = [[float(v) for v in row] for row in (value.abs() * keep).sum(dim=(-2, -1)) / pairs]
        flat = value.reshape(layers * heads, T, T)
        if size < T:
            flat = F.adaptive_avg_pool2d(flat[:, None], size)[:, 0]  # (maps, size, size) block means
        top = flat.abs().amax(dim=(1, 2))
        data["largest"][t] = [float(v) for v in top]
        data["maps"][t] = _b64((flat / top[:, None, None].clamp_min(1e-30) * TERM_QUANT).round(), "h")
    return data


def _cut_note(cut: dict, window: str) -> str | None:
    """One sentence on what the window cut ("the input is 3,012 tokens; the model's window is 512: 2,500 tokens cut
    from the text"), or None when the model saw the whole input. The page and the CLI both say it."""
    parts = [(n, name) for name in ("text", "pair") if (n := cut[name])]
    if not parts:
        return None
    said = " and ".join(f"{n:,} token{'s' * (n != 1)} cut from the {name}" for n, name in parts)
    return f"the input is {cut['tokens']:,} tokens; {window} is {cut['window']:,}: {said}"


@dataclass
class Exploration:
    data: dict  # what the page embeds (JSON)

    @property
    def cut_note(self) -> str | None:
        """What the window cut, in one sentence (None: nothing); the CLI prints it."""
        return self.data["cut_note"]

    def html(self) -> str:
        from minialign.apps.explore.page import render

        return render(self.data)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(self.html(), encoding="utf-8")
        return path


def explore(model: nn.Module, tokenizer, text: str, pair: str | None = None, attention_mask: Tensor | None = None, *,
            compare_model: nn.Module | None = None, compare_mask: Tensor | None = None,
            labels: tuple[str, str] | None = None, max_length: int | None = None, corrupted: str | None = None,
            corrupted_pair: str | None = None, metric: Callable | None = None,
            metric_name: str | None = None) -> Exploration:
    """The page's data for one input through an Encoder or AlignModel (the model's own tokenizer).

    attention_mask: a custom (T, T) or (1, T, T) boolean mask (True = attend, e.g. masks.left_only_mask),
    over the tokens of the input with its special tokens; default: every token attends every token.
    compare_model / compare_mask: a second run of the same input (another model, e.g. another score
    function, or another mask); the page then shows both and the cosine of each token's states.
    A text longer than the window (max_length, default the model's) loses its end, as in scoring: the
    page holds the part the model saw and says how many tokens were cut from which text (`cut_note`).
    corrupted (and corrupted_pair, default the pair): a corrupted input of the same token count, run second and shown
    beside the clean one, with activation patching's maps (patching.py): `metric(output) -> scalar` scores each run
    (default: patching.metric_for), `metric_name` says what it is on the page."""
    from minialign.text.tokenizer import pad
    from minialign.text.validation import text_problem

    if corrupted is None and (corrupted_pair is not None or metric is not None):
        raise ValueError("corrupted_pair and metric score a corrupted input: give corrupted= too")
    if corrupted is not None and (compare_model is not None or compare_mask is not None):
        raise ValueError("corrupted= is the page's second run: it does not mix with compare_model / compare_mask")
    if corrupted is not None and corrupted_pair is None:
        corrupted_pair = pair
    if corrupted is not None and (pair is None) != (corrupted_pair is None):
        raise ValueError("the clean and corrupted inputs must both be pairs or both single texts")
    for name, value in (("text", text), ("pair", pair), ("corrupted", corrupted), ("corrupted_pair", corrupted_pair)):
        if value is None and name != "text":
            continue
        if not isinstance(value, str):  # "" is its special tokens alone, as on every face (README, "Empty text")
            raise ValueError(f"{name} must be a string, got {type(value).__name__}")
        if problem := text_problem(value):
            raise ValueError(f"{name} {problem}")
    window = min(max_length or tokenizer.model_max_length, model.config.max_seq_len)
    encoded = tokenizer.encode_ids([text], None if pair is None else [pair], max_length=window)
    batch = pad(encoded.ids, encoded.type_ids, pad_id=tokenizer.pad_token_id,
                token_types=tokenizer.return_token_type_ids)
    ids = encoded.ids[0]
    T = len(ids)
    if corrupted is not None:  # token i of one input is token i of the other: checked before any forward
        other = tokenizer.encode_ids([corrupted], None if corrupted_pair is None else [corrupted_pair],
                                     max_length=window)
        if len(other.ids[0]) != T:
            raise ValueError(f"the clean and corrupted inputs must have the same number of tokens (token i of one is "
                             f"token i of the other): the clean input is {T} tokens, the corrupted one "
                             f"{len(other.ids[0])}")
    seen, cut = _seen(tokenizer, ids, text, pair)
    cut["window"] = window
    for name, mask in (("attention_mask", attention_mask), ("compare_mask", compare_mask)):
        if mask is not None and tuple(mask.shape[-2:]) != (T, T):
            raise ValueError(f"{name} must be ({T}, {T}) for this input's {T} tokens, got {tuple(mask.shape)}")
    tokens = _tokens(tokenizer, ids)
    second = compare_model is not None or compare_mask is not None or corrupted is not None
    names = labels or (("clean", "corrupted") if corrupted is not None else ("run A", "run B") if second else ("run",))
    first, raw_first = _run(model, batch, attention_mask, names[0])
    config = model.config
    data = {"model": {"class": type(model).__name__, "arch": config.arch, "layers": config.num_layers,
                      "heads": config.num_heads, "hidden": config.hidden_size, "score_fn": config.score_fn,
                      "relative_bias": has_relative_bias(model)},
            "embedding": _embedding(model, first),
            "text": seen[0], "pair": seen[1], "tokens": tokens, "token_types": list(encoded.type_ids[0]),
            "pair_from": _pair_from(tokenizer, encoded.ids[0], encoded.type_ids[0]) if pair is not None else 0,
            "truncated": int(encoded.truncated[0]), "cut": cut,
            "cut_note": _cut_note(cut, "the model's window" if max_length is None else "the window (max_length)"),
            "runs": [first]}
    if corrupted is not None:
        data.update(_corrupted(model, tokenizer, batch, other, attention_mask, corrupted, corrupted_pair, metric,
                               metric_name))
        run, raw = _run(model, data.pop("corrupted_batch"), attention_mask, names[1])
        run["tokens"] = data["corrupted_tokens"]
        data["runs"].append(run)
        data["cosine"] = _rounded(torch.stack([F.cosine_similarity(a.float(), b.float(), dim=-1)
                                               for a, b in zip(raw_first["states"], raw["states"])]))
    elif second:
        other = compare_model if compare_model is not None else model
        run, raw = _run(other, batch, compare_mask if compare_mask is not None else attention_mask, names[1])
        data["runs"].append(run)
        data["cosine"] = _rounded(torch.stack([F.cosine_similarity(a.float(), b.float(), dim=-1)
                                               for a, b in zip(raw_first["states"], raw["states"])]))
    return Exploration(data)


def _pair_from(tokenizer, ids: list[int], types: list[int]) -> int:
    """The first token of the pair: the first typed 1, else the first after the first text's closing token (a
    tokenizer that types every token 0: masks.pair_segments)."""
    from minialign.nn.masks import pair_segments

    if any(types):
        return types.index(1)
    segments = pair_segments(torch.tensor([ids]), tokenizer.backend.token_to_id(tokenizer.end_token))[0].tolist()
    return segments.index(1) if 1 in segments else len(ids)


def _tokens(tokenizer, ids: list[int]) -> list[str]:
    """Each token as the page labels it."""
    return [tokenizer.decode([i], skip_special_tokens=False) or tokenizer.backend.id_to_token(i) or f"#{i}"
            for i in ids]


def _corrupted(model: nn.Module, tokenizer, batch: dict, encoded, attention_mask: Tensor | None, text: str,
               pair: str | None, metric: Callable | None, metric_name: str | None) -> dict:
    """The corrupted input's part of the page (its text as the model saw it, its tokens, activation patching's maps:
    patching.py) and its batch, under "corrupted_batch", for the second run."""
    from minialign.apps.explore.patching import metric_for, patching_maps
    from minialign.text.tokenizer import pad

    other = pad(encoded.ids, encoded.type_ids, pad_id=tokenizer.pad_token_id,
                token_types=tokenizer.return_token_type_ids)
    seen, cut = _seen(tokenizer, encoded.ids[0], text, pair)
    clean, corrupted = dict(batch), dict(other)
    if attention_mask is not None:  # the custom mask both runs use, as _run hands it to the model
        mask = attention_mask.bool()
        clean["attention_mask"] = corrupted["attention_mask"] = mask if mask.dim() == 3 else mask[None]
    if metric is None:
        metric, said = metric_for(model, clean, batch["attention_mask"])
    else:
        said = metric_name or "the metric given (ma.explore's metric=)"
    return {"corrupted": {"text": seen[0], "pair": seen[1], "cut": cut},
            "corrupted_tokens": _tokens(tokenizer, encoded.ids[0]), "corrupted_batch": other,
            "patching": patching_maps(model, _encoder_prefix(model), clean, corrupted, metric, said)}


def _seen(tokenizer, ids: list[int], text: str, pair: str | None) -> tuple[tuple[str, str | None], dict]:
    """What of each text the model saw and how many tokens the window cut from each, read off `ids` (the
    window's tokens) against the whole input tokenized uncut: the window cuts each text's end, so a text
    was seen up to the end of its last kept token. A page shows that part only, never the cut one."""
    tokenizer.backend.no_truncation()
    full = tokenizer.backend.encode(text, pair)  # every token, specials included (memory linear in the length)
    seq = full.sequence_ids  # None: a special token, 0: the text's, 1: the pair's
    first = [i for i, s in zip(full.ids, seq) if s == 0]
    n = [len(first)] + ([seq.count(1)] if pair is not None else [])
    kept = len(ids) - seq.count(None)  # tokens of the texts in the window
    rank, count = [], [0, 0]  # each token's place in its own text
    for s in seq:
        rank.append(-1 if s is None else count[s])
        if s is not None:
            count[s] += 1

    def cut_to(keep: tuple[int, ...]) -> list[int]:  # the whole input with text i cut to keep[i] tokens
        return [i for i, s, r in zip(full.ids, seq, rank) if s is None or r < keep[s]]

    if pair is None:
        options = [(kept,)]
    else:  # the first text kept at most the tokens it shares with the window's from where it starts
        start, top = (seq.index(0) if first else 0), min(n[0], kept)
        shared = next((j for j in range(top) if ids[start + j] != first[j]), top)
        options = [(a, kept - a) for a in range(shared, max(0, kept - n[1]) - 1, -1)]
    keep = next((k for k in options if cut_to(k) == ids), None)
    if keep is None:
        raise RuntimeError("the window's tokens are not the input's with each text's end cut")
    cut, seen = {"tokens": len(full.ids), "pair": None}, []
    for i, (name, value) in enumerate((("text", text), ("pair", pair))[:len(n)]):
        cut[name] = n[i] - keep[i]
        ends = [end for (_, end), s, r in zip(full.offsets, seq, rank) if s == i and r < keep[i]]
        seen.append(value[:max(ends, default=0)] if cut[name] else value)
    return (seen[0], seen[1] if pair is not None else None), cut
