"""`ma.explore`: a capture turned into one self-contained HTML page (no server, no CDN, no network).

    page = ma.explore(model, tokenizer, "The bank raised rates.", pair=None, attention_mask=None)
    page.save("explore.html")

The page shows, for one input (and, with `compare_model` / `compare_mask`, a second run of it):
the head view (tokens in two columns, lines weighted by attention, a layer selector, heads toggled
by colour), the model view (layers x heads small maps, click to enlarge), per-token residual-stream
norms by layer, the embedding decomposition (word / position / token type: their norms, and how
much of each every layer's state still points along, as cosines), AlignScore's head probabilities
for an AlignModel, and for two runs the cosine between the same token's states, layer by layer.

Every number on the page is a captured tensor (ma.capture) of the real tokens (a single input has no
padding). Attention is stored as uint16 (value x 65535, rounded): whole maps while layers x heads x
tokens^2 fits ATTENTION_BYTES, otherwise each query's TOP_K strongest keys (k as large as the budget
allows, at least MIN_TOP_K) and the weight of the keys left out; the page says which. The model view's
small maps are block means of at most THUMB x THUMB. So a 512-token input on 12 layers x 12 heads
stays under PAGE_LIMIT bytes.
"""

from __future__ import annotations

import array
import base64
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .tracing import capture

ATTENTION_BYTES = 6_000_000  # raw bytes of attention data a page may hold (before base64)
MIN_TOP_K, MAX_TOP_K = 4, 32
THUMB = 64  # the model view's maps: at most THUMB x THUMB block means
PAGE_LIMIT = 10_000_000  # what a page of up to 512 tokens on 12 x 12 heads stays under (tests)
QUANT = 65535  # attention weights are stored as round(p * QUANT) in uint16
ALIGN_LABELS = ("aligned", "neutral", "contradiction")  # AlignScore's tri head


def _b64(t: Tensor, code: str) -> str:
    """Little-endian bytes of an integer tensor as array typecode `code` ("B": uint8, "H": uint16), base64."""
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
    from .model import Encoder

    for name, module in model.named_modules():
        if isinstance(module, Encoder):
            return f"{name}." if name else ""
    raise TypeError(f"{type(model).__name__} holds no minialign Encoder")


def _run(model: nn.Module, batch: dict[str, Tensor], mask: Tensor | None, label: str) -> tuple[dict, dict]:
    """One forward under capture: (the page's data of this run, its raw tensors for diffs)."""
    from .model import AlignModel

    prefix = _encoder_prefix(model)
    inputs = dict(batch)
    if mask is not None:
        mask = mask.bool()
        inputs["attention_mask"] = mask if mask.dim() == 3 else mask[None]
    with torch.inference_mode(), capture(model) as cap:
        out = model(**inputs)
    layers = model.config.num_layers
    states = [cap[f"{prefix}embeddings.norm"][0]] + [cap[f"{prefix}layers.{i}.output"][0] for i in range(layers)]
    parts = {name: cap[f"{prefix}embeddings.{name}"][0] for name in ("word", "position", "token_type")}
    probs = torch.cat([cap[f"{prefix}layers.{i}.attention.probs"] for i in range(layers)])  # (layers, H, T, T)
    run = {
        "label": label,
        "norms": _rounded(torch.stack([s.float().norm(dim=-1) for s in states])),  # (layers + 1, T)
        "stream": {role: _rounded(torch.stack([cap[f"{prefix}layers.{i}.{role}"][0].float().norm(dim=-1)
                                               for i in range(layers)]))
                   for role in ("attention_residual", "ffn_residual")},
        "parts": {name: [round(float(v), 5) for v in t.float().norm(dim=-1)] for name, t in parts.items()},
        "part_cosines": {name: _rounded(torch.stack([F.cosine_similarity(s.float(), t.float().expand_as(s), dim=-1)
                                                     for s in states])) for name, t in parts.items()},
        "attention": _attention(probs.float()),
    }
    if isinstance(model, AlignModel):
        tri = torch.softmax(out.tri_label_logits.float(), dim=-1)[0]
        run["heads"] = {**{f"tri: {name}": float(p) for name, p in zip(ALIGN_LABELS, tri)},
                        "bin: aligned": float(torch.softmax(out.seq_relationship_logits.float(), dim=-1)[0, 1]),
                        "reg": float(out.reg_label_logits.float()[0, 0])}
    return run, {"states": states}


def _attention(probs: Tensor) -> dict:
    """probs (layers, H, T, T) -> the page's attention: whole maps or each row's top-k, plus thumbnails."""
    layers, heads, T, _ = probs.shape
    maps = layers * heads
    flat = probs.reshape(maps, T, T)
    size = min(THUMB, T)
    thumbs = F.adaptive_avg_pool2d(flat[:, None], size)[:, 0]  # (maps, size, size) block means
    thumbs = thumbs / thumbs.amax(dim=(1, 2), keepdim=True).clamp_min(1e-12)  # each map scaled to its own max
    data = {"layers": layers, "heads": heads, "tokens": T, "quant": QUANT, "thumb": size,
            "thumbs": _b64((thumbs * 255).round(), "B")}
    if maps * T * T * 2 <= ATTENTION_BYTES:
        return {**data, "storage": "full", "weights": _b64(_quantise(flat), "H")}
    k = max(MIN_TOP_K, min(MAX_TOP_K, T, ATTENTION_BYTES // (maps * T * 4)))
    values, index = flat.topk(k, dim=-1)  # (maps, T, k), strongest first
    rest = (1 - values.sum(-1)).clamp_min(0)  # the weight of the keys left out, per query
    return {**data, "storage": "topk", "k": k, "weights": _b64(_quantise(values), "H"),
            "index": _b64(index, "H"), "rest_max": float(rest.max())}


@dataclass
class Exploration:
    data: dict  # what the page embeds (JSON)

    def html(self) -> str:
        from .explore_page import render

        return render(self.data)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(self.html(), encoding="utf-8")
        return path


def explore(model: nn.Module, tokenizer, text: str, pair: str | None = None, attention_mask: Tensor | None = None, *,
            compare_model: nn.Module | None = None, compare_mask: Tensor | None = None,
            labels: tuple[str, str] | None = None, max_length: int | None = None) -> Exploration:
    """The page's data for one input through an Encoder or AlignModel (the model's own tokenizer).

    attention_mask: a custom (T, T) or (1, T, T) boolean mask (True = attend, e.g. masks.left_only_mask),
    over the tokens of the input with its special tokens; default: every token attends every token.
    compare_model / compare_mask: a second run of the same input (another model, e.g. another score
    function, or another mask); the page then shows both and the cosine of each token's states."""
    from .batching import pad
    from .tokenizer import text_problem

    for name, value in (("text", text), ("pair", pair)):
        if value is None and name == "pair":
            continue
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{name} must be a non-empty string, got {value!r}")
        if problem := text_problem(value):
            raise ValueError(f"{name} {problem}")
    window = min(max_length or tokenizer.model_max_length, model.config.max_seq_len)
    encoded = tokenizer.encode_ids([text], None if pair is None else [pair], max_length=window)
    batch = pad(encoded.ids, encoded.type_ids, pad_id=tokenizer.pad_token_id,
                token_types=tokenizer.return_token_type_ids)
    ids = encoded.ids[0]
    T = len(ids)
    for name, mask in (("attention_mask", attention_mask), ("compare_mask", compare_mask)):
        if mask is not None and tuple(mask.shape[-2:]) != (T, T):
            raise ValueError(f"{name} must be ({T}, {T}) for this input's {T} tokens, got {tuple(mask.shape)}")
    tokens = [tokenizer.decode([i], skip_special_tokens=False) or tokenizer.backend.id_to_token(i) or f"#{i}"
              for i in ids]
    second = compare_model is not None or compare_mask is not None
    names = labels or (("run A", "run B") if second else ("run",))
    first, raw_first = _run(model, batch, attention_mask, names[0])
    config = model.config
    data = {"model": {"class": type(model).__name__, "arch": config.arch, "layers": config.num_layers,
                      "heads": config.num_heads, "hidden": config.hidden_size, "score_fn": config.score_fn},
            "text": text, "pair": pair, "tokens": tokens, "token_types": list(encoded.type_ids[0]),
            "truncated": int(encoded.truncated[0]), "runs": [first]}
    if second:
        other = compare_model if compare_model is not None else model
        run, raw = _run(other, batch, compare_mask if compare_mask is not None else attention_mask, names[1])
        data["runs"].append(run)
        data["cosine"] = _rounded(torch.stack([F.cosine_similarity(a.float(), b.float(), dim=-1)
                                               for a, b in zip(raw_first["states"], raw["states"])]))
    return Exploration(data)


def with_score_function(model: nn.Module, score_fn: str) -> nn.Module:
    """A copy of `model` whose attention uses another alignment-score function (scores.py): every
    weight shared but the new function's own parameters, which start from their initialisation."""
    import dataclasses

    config = dataclasses.replace(model.config, score_fn=score_fn)
    other = type(model)(config).eval()
    missing, unexpected = other.load_state_dict(model.state_dict(), strict=False)
    stray = [n for n in missing + unexpected if ".score." not in n]
    if stray:
        raise ValueError(f"cannot swap the score function of {type(model).__name__}: {stray[:5]}")
    return other
