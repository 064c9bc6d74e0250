"""AlignScore's request shapes: NeMo Guardrails' AlignScore API and minialign's /score, for AlignScore and MiniCheck.

    POST /alignscore_base, /alignscore_large   {"evidence": str | [str], "claim"} -> {"alignscore": float}
                                               (NeMo Guardrails' client: nemoguardrails/library/factchecking/
                                               align_score/request.py posts there and reads "alignscore")
    POST /minicheck                            {"evidence", "claim"} -> {"minicheck": float}, P(supported); NeMo
                                               Guardrails has no MiniCheck client: the same body, the answer under
                                               the product's name. A body with `inputs` is HF Inference's
                                               text-classification (hf_inference.py)
    POST /score                                {"pairs": [{"context", "claim"}], "model", "mode", "details"} ->
                                               {"scores", "details"}; "model": an AlignScore route name (default:
                                               the first loaded) or "minicheck"; "mode" is AlignScore's
"""

from __future__ import annotations

from typing import Any

import minialign.apps.serve.hf_inference as hf_inference
from minialign.apps.serve.core import Core, Models, Route, bad_request, empty, flag, missing, required, text
from minialign.products.alignscore import COLUMNS, DEFAULT_MODE, MODES
from minialign.products.runner import PairScorer

ALIGNSCORE_ROUTES = ("base", "large")  # NeMo Guardrails posts to /alignscore_base or /alignscore_large
MINICHECK = "minicheck"
DETAILS = {"alignscore": ("score", "chunks", "sentences", *COLUMNS, "truncated"),  # what /score's details hold
           MINICHECK: ("score", "chunks", "supported", "truncated")}


def _scorer(service: Core, kind: str) -> PairScorer:
    models = service.models
    return models.minicheck if kind == MINICHECK else models.alignscore[kind.removeprefix("alignscore_")]


def _example(service: Core, kind: str, body: dict, names: dict[str, str], context: Any = None) -> tuple[str, str]:
    """(context, claim) of `body` (its fields named by `names`: "context"/"claim" -> field; `context`: one the
    route has already read) once the scorer's own check (PairScorer.check) takes them: an absent field is a
    422 saying so, an empty claim is empty input (400 Empty), any other problem a 422 naming the field."""
    for which in ("context", "claim"):
        if names[which].rpartition(".")[2] not in body:
            raise missing(names[which], body)
    context = body[names["context"].rpartition(".")[2]] if context is None else context
    claim = body[names["claim"].rpartition(".")[2]]
    if claim == "":
        raise empty(names["claim"])
    problems = _scorer(service, kind).check(context, claim, null="null")
    if problems:
        raise bad_request("; ".join(f"`{names[which]}` {problem}" for which, problem in problems))
    return context, claim


async def _nemo(service: Core, kind: str, body: dict) -> float:
    """NeMo Guardrails' body {"evidence": str or a list of str (joined by spaces), "claim"} -> the score."""
    evidence = body.get("evidence")
    if isinstance(evidence, list):
        evidence = " ".join(text(e, f"evidence[{i}]") for i, e in enumerate(evidence))
    context, claim = _example(service, kind, body, {"context": "evidence", "claim": "claim"}, evidence)
    mode = None if kind == MINICHECK else DEFAULT_MODE  # NeMo Guardrails' score: AlignScore's nli_sp
    (details,) = await service.run(kind, "score", [(mode, context, claim)])
    return details["score"]


async def alignscore(service: Core, name: str, body: dict) -> dict:
    return {"alignscore": await _nemo(service, f"alignscore_{name}", body)}


async def minicheck(service: Core, body: dict) -> Any:
    if "inputs" in body:  # HF Inference's text-classification body (hf_inference.py)
        return await hf_inference.text_classification(service, body, model=MINICHECK)
    return {MINICHECK: await _nemo(service, MINICHECK, body)}


def _score_model(service: Core, body: dict) -> tuple[str, str | None]:
    """(the queue's kind, AlignScore's mode or None) that /score's `model` and `mode` name."""
    name, mode = body.get("model") or next(iter(service.models.alignscore), MINICHECK), body.get("mode")
    kind = MINICHECK if name == MINICHECK else f"alignscore_{name}"
    if kind not in service.batchers:
        loaded = sorted(service.models.alignscore) + [MINICHECK] * (service.models.minicheck is not None)
        raise bad_request(f"`model` {name!r} is not loaded; loaded: {loaded}")
    if kind == MINICHECK:
        if mode is not None:
            raise bad_request("`mode` is AlignScore's; MiniCheck has one score, P(supported)")
        return kind, None
    if (mode := DEFAULT_MODE if mode is None else mode) not in MODES:
        raise bad_request(f"`mode` must be one of {MODES}, got {mode!r}")
    return kind, mode


async def score(service: Core, body: dict) -> dict:
    kind, mode = _score_model(service, body)
    pairs = required(body, "pairs")
    if not isinstance(pairs, list):
        raise bad_request("`pairs` must be a list of {\"context\", \"claim\"} objects")
    service.check_batch(len(pairs), "pairs")
    items = []
    for i, pair in enumerate(pairs):
        if not isinstance(pair, dict):
            raise bad_request(f"`pairs[{i}]` must be an object with `context` and `claim`")
        names = {"context": f"pairs[{i}].context", "claim": f"pairs[{i}].claim"}
        items.append((mode, *_example(service, kind, pair, names)))
    details = await service.run(kind, "score", items)
    out: dict[str, Any] = {"scores": [d["score"] for d in details]}
    if flag(body, "details", False):
        keys = DETAILS[MINICHECK if kind == MINICHECK else "alignscore"]
        out["details"] = [{k: d[k] for k in keys} for d in details]
    return out


def _alignscore_kinds(models: Models) -> list[str]:
    return [f"alignscore_{name}" for name in models.alignscore]


def _minicheck_kinds(models: Models) -> list[str]:
    return [MINICHECK] if models.minicheck is not None else []


def routes(models: Models) -> list[Route]:
    """/alignscore_NAME for each AlignScore model loaded, /minicheck and /score when their models are (otherwise a
    JSON 404 that names the flag to load one: serve/app.py)."""
    named = [Route(f"/alignscore_{name}", lambda service, body, n=name: alignscore(service, n, body),
                   lambda m, n=name: [f"alignscore_{n}"] if n in m.alignscore else [])
             for name in models.alignscore]
    return [*named, Route("/minicheck", minicheck, _minicheck_kinds),
            Route("/score", score, lambda m: _alignscore_kinds(m) + _minicheck_kinds(m))]


def not_loaded(path: str) -> str | None:
    """What to say of a request to one of these routes whose model is not loaded (None: not one of them)."""
    name = path.removeprefix("/alignscore_")
    if name in ALIGNSCORE_ROUTES:
        return f"no AlignScore model is loaded for {path} (start the service with --alignscore {name}=SRC)"
    if path == "/score":
        return ("no AlignScore or MiniCheck model is loaded for /score (start the service with --alignscore "
                "[NAME=]SRC or --minicheck [SRC])")
    if path == "/minicheck":
        return "no MiniCheck model is loaded for /minicheck (start the service with --minicheck [SRC])"
    return None
