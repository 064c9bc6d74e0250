"""AlignScore's request shapes: NeMo Guardrails' AlignScore API and minialign's /score, for AlignScore and MiniCheck.

    POST /alignscore_base, /alignscore_large   {"evidence": str | [str], "claim"} -> {"alignscore": float}
                                               (NeMo Guardrails' client: nemoguardrails/library/factchecking/
                                               align_score/request.py posts there and reads "alignscore")
    POST /minicheck                            {"evidence", "claim"} -> {"minicheck": float}, P(supported); NeMo
                                               Guardrails has no MiniCheck client: the same body, the answer under
                                               the product's name. A body with `inputs` is HF Inference's
                                               text-classification (hf_inference.py)
    POST /NAME                                 the same body for another scorer of (context, claim) pairs loaded as
                                               a product (--hhem, --factcg): {"evidence", "claim"} -> {NAME: float}
    POST /score                                {"pairs": [{"context", "claim"}], "model", "mode", "details"} ->
                                               {"scores", "details"}; "model": an AlignScore route name (default:
                                               the first loaded), "minicheck", such a scorer's NAME, or the name a
                                               model is served by (--served-model-name); "mode" is AlignScore's
"""

from __future__ import annotations

from typing import Any, Literal

import minialign.apps.serve.bodies as bodies
import minialign.apps.serve.hf_inference as hf_inference
from minialign.apps.serve.bodies import parse
from minialign.apps.serve.core import Core, Models, Route, bad_request, empty
from minialign.products.alignscore import COLUMNS, DEFAULT_MODE
from minialign.products.runner import PairScorer

ALIGNSCORE_ROUTES = ("base", "large")  # NeMo Guardrails posts to /alignscore_base or /alignscore_large
MINICHECK = "minicheck"
# what /score's details hold for AlignScore; the other scorers' are their score(return_details=True)'s (MiniCheck's
# score, chunks, supported, truncated)
DETAILS = ("score", "chunks", "sentences", *COLUMNS, "truncated")


def _scorer(service: Core, kind: str) -> PairScorer:
    models = service.models
    if kind.startswith("alignscore_"):
        return models.alignscore[kind.removeprefix("alignscore_")]
    return models.minicheck if kind == MINICHECK else models.products[kind]


def pair_scorers(models: Models) -> list[str]:
    """The products loaded that score (context, claim) pairs (PairScorer: HHEM, FactCG), by name."""
    return [name for name, runner in models.products.items() if isinstance(runner, PairScorer)]


def _example(service: Core, kind: str, context: str, claim: str, names: dict[str, str]) -> tuple[str, str]:
    """(context, claim) once the scorer's own check (PairScorer.check) takes them (`names`: "context"/"claim" -> the
    body's field): an empty claim is empty input (400 Empty), any other problem a 422 naming the field."""
    if claim == "":
        raise empty(names["claim"])
    problems = _scorer(service, kind).check(context, claim, null="null")
    if problems:
        raise bad_request("; ".join(f"`{names[which]}` {problem}" for which, problem in problems))
    return context, claim


async def _nemo(service: Core, kind: str, body: dict) -> float:
    """NeMo Guardrails' body {"evidence": str or a list of str (joined by spaces), "claim"} -> the score."""
    request = parse(bodies.NemoRequest, body)
    evidence = request.evidence if isinstance(request.evidence, str) else " ".join(request.evidence)  # str | [str]
    context, claim = _example(service, kind, evidence, request.claim, {"context": "evidence", "claim": "claim"})
    mode = DEFAULT_MODE if kind.startswith("alignscore_") else None  # NeMo Guardrails' score: AlignScore's nli_sp
    (details,) = await service.run(kind, "score", [(mode, context, claim)])
    return details["score"]


async def alignscore(service: Core, name: str, body: dict) -> dict:
    return {"alignscore": await _nemo(service, f"alignscore_{name}", body)}


async def minicheck(service: Core, body: dict) -> Any:
    if "inputs" in body:  # HF Inference's text-classification body (hf_inference.py)
        return await hf_inference.text_classification(service, body, model=MINICHECK)
    return {MINICHECK: await _nemo(service, MINICHECK, body)}


def _score_model(service: Core, request: bodies.ScoreRequest) -> tuple[str, str | None]:
    """(the queue's kind, AlignScore's mode or None) that /score's `model` and `mode` name."""
    others = [MINICHECK] * (service.models.minicheck is not None) + pair_scorers(service.models)
    name = request.model or next(iter(service.models.alignscore), (others or [MINICHECK])[0])
    mode = request.mode
    kind = name if name in others else f"alignscore_{name}"
    if kind not in service.batchers:  # a name the model is served by (--served-model-name, its id: serve/names.py)
        kind = next((k for k in [*_alignscore_kinds(service.models), *others]
                     if name in service.models.accepted(k)), kind)
    if kind not in service.batchers:
        served = [service.models.served_name(k) for k in [*_alignscore_kinds(service.models), *others]]
        raise bad_request(f"`model` {name!r} is not loaded; loaded: {sorted(service.models.alignscore) + others} "
                          f"(served as {served})")
    if kind in others:
        if mode is not None:
            raise bad_request(f"`mode` is AlignScore's; {name} has one score")
        return kind, None
    return kind, DEFAULT_MODE if mode is None else mode


async def score(service: Core, body: dict) -> dict:
    request = parse(bodies.ScoreRequest, body)
    kind, mode = _score_model(service, request)
    service.check_batch(len(request.pairs), "pairs")
    items = []
    for i, pair in enumerate(request.pairs):
        names = {"context": f"pairs[{i}].context", "claim": f"pairs[{i}].claim"}
        items.append((mode, *_example(service, kind, pair.context, pair.claim, names)))
    details = await service.run(kind, "score", items)
    out: dict[str, Any] = {"scores": [d["score"] for d in details]}
    if request.details:
        out["details"] = [{k: d[k] for k in DETAILS} if kind.startswith("alignscore_") else d for d in details]
    return out


def _alignscore_kinds(models: Models) -> list[str]:
    return [f"alignscore_{name}" for name in models.alignscore]


def _minicheck_kinds(models: Models) -> list[str]:
    return [MINICHECK] if models.minicheck is not None else []


def routes(models: Models) -> list[Route]:
    """/alignscore_NAME for each AlignScore model loaded, /minicheck and /score when their models are (otherwise a
    JSON 404 that names the flag to load one: serve/app.py)."""
    named = [Route(f"/alignscore_{name}", lambda service, body, n=name: alignscore(service, n, body),
                   lambda m, n=name: [f"alignscore_{n}"] if n in m.alignscore else [], body=bodies.NemoRequest,
                   answer=dict[Literal["alignscore"], float])
             for name in models.alignscore]
    others = [Route(f"/{name}", lambda service, body, n=name: _other(service, n, body), lambda m, n=name: [n],
                    body=bodies.NemoRequest, answer=dict[Literal[name], float])  # type: ignore[valid-type]
              for name in pair_scorers(models)]
    return [*named, Route("/minicheck", minicheck, _minicheck_kinds, body=bodies.NemoRequest,
                          answer=dict[Literal["minicheck"], float]), *others,
            Route("/score", score, lambda m: _alignscore_kinds(m) + _minicheck_kinds(m) + pair_scorers(m),
                  body=bodies.ScoreRequest, answer=bodies.ScoreResponse)]


async def _other(service: Core, name: str, body: dict) -> dict:
    """A scorer of pairs loaded as a product: NeMo Guardrails' body, the score under the product's name."""
    return {name: await _nemo(service, name, body)}


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
