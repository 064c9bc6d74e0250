"""HF Inference's task shapes (huggingface_hub's InferenceClient posts them to POST /, or to the path of its
base_url): feature-extraction and sentence-similarity are TEI's bodies (tei.py); text-classification,
token-classification, fill-mask, question-answering and zero-shot-classification are here.

    text-classification    (the classifier, MiniCheck)
        {"inputs": str | {"text", "text_pair"}, "parameters": {"top_k", "function_to_apply"}}
        -> [[{"label", "score"}, ...]]   (one list per input, every label best first, or the top_k)
    token-classification   (the token classifier, --ner: products/token_classification.py)
        {"inputs": str, "parameters": {"aggregation_strategy", "ignore_labels", "stride"}}
        -> [{"entity" | "entity_group", "score", "index"?, "word", "start", "end"}, ...]   (TokenClassifier.predict's
        entities of the text: the pipeline's keys; aggregation_strategy default "none", the pipeline's)
    fill-mask              (the masked-LM model, --fill-mask: products/fill_mask.py)
        {"inputs": str, "parameters": {"top_k", "targets"}}
        -> [{"score", "token", "token_str", "sequence"}, ...]   (FillMask.predict's candidates of the text's mask,
        best first; a text of several masks: a list of such lists, one per mask, as the pipeline answers it)
    question-answering     (the extractive QA model, --qa: products/question_answering.py)
        {"inputs": {"question": str, "context": str}, "parameters": {"top_k", "doc_stride", "max_answer_len",
        "max_seq_len", "max_question_len", "handle_impossible_answer", "align_to_words"}}
        -> {"score", "start", "end", "answer"} (top_k 1, the default; [] where the context offers no span) or
        [{"score", "start", "end", "answer"}, ...] (top_k > 1, best first): QuestionAnswerer.predict's, what
        InferenceClient.question_answering parses (QuestionAnsweringOutputElement, one or a list)
    zero-shot-classification   (the NLI model, --zero-shot: products/zero_shot.py)
        {"inputs": str, "parameters": {"candidate_labels", "hypothesis_template", "multi_label"}}
        -> [{"label", "score"}, ...]   (ZeroShotClassifier.predict's labels best first with their scores: what
        InferenceClient.zero_shot_classification parses, ZeroShotClassificationOutputElement; candidate_labels a list,
        or a string the pipeline's way: split at commas)

A classifier scores by its own default (transformers' pipeline rule, Classifier.activation) unless
function_to_apply names sigmoid, softmax or none; a {"text", "text_pair"} input is a pair (transformers'
TextClassificationPipeline takes it so). MiniCheck takes a (document, claim) as {"text": document,
"text_pair": claim} and answers its two labels: "supported" with P(supported) (products/minicheck.py: the max
over the document's chunks) and "unsupported" with 1 - P(supported); its only function is softmax.

Each task a product of the table answers (Product.hf_task) is declared once in HF_TASKS: the keys of its `parameters`,
what its `inputs` is, and its handler. It is served on POST /pipeline/TASK (the segment of HF's own URLs,
.../models/ID/pipeline/TASK: InferenceClient(model="http://HOST:PORT/pipeline/token-classification") posts there)
and on POST / where the body is its (tei.root). A product's handler reads its body, runs the
product's file job (apps/products.py) on the one row through the model's queue, and shapes the record: the options
are the job's, checked as POST /rows checks them, and named `parameters.<option>` in a 422.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import torch

from minialign.apps.files.rows import Row
from minialign.apps.products import PRODUCTS
import minialign.apps.serve.bodies as bodies
from minialign.apps.serve.bodies import parse
from minialign.apps.serve.core import Core, Models, Route, bad_request, empty
from minialign.apps.serve.rows import job_for
from minialign.products.classifier import Classifier
from minialign.products.minicheck import LABELS as MINICHECK_LABELS, SUPPORTED
from minialign.products.runner import OptionError
from minialign.products.zero_shot import hypotheses, parse_labels

async def text_classification(service: Core, body: dict, *, model: str = "classify") -> list:
    """HF Inference's text-classification (the module docstring) on the classifier or ("minicheck") MiniCheck."""
    request = parse(bodies.TextClassificationRequest, body)
    top_k, function = request.parameters.top_k, request.parameters.function_to_apply
    inputs = request.inputs  # a text, or a pair {"text", "text_pair"}
    document, pair = (inputs, None) if isinstance(inputs, str) else (inputs.text, inputs.text_pair)
    if model == "minicheck":
        ranked = await _minicheck_labels(service, document, pair, function)
    else:
        classifier = service.require("classify")
        service.check_length(classifier, [document if pair is None else (document, pair)], request.truncate)
        logits = await service.run("classify", "logits", [(document, pair)])
        (ranked,) = classifier.label_ranking(classifier.activate(torch.stack(logits), function or "auto"))
    return [[{"label": label, "score": score} for label, score in ranked[:top_k]]]


async def _minicheck_labels(service: Core, document: str, claim: str | None, function: str | None) -> list:
    """MiniCheck's two labels for (document, claim), best first."""
    if claim is None:
        raise bad_request('MiniCheck checks a claim against a document: `inputs` must be {"text": document, '
                          '"text_pair": claim}')
    if claim == "":
        raise empty("inputs.text_pair")
    if function not in (None, "softmax"):
        raise bad_request("`parameters.function_to_apply`: MiniCheck's probabilities are a softmax; "
                          f"got {function!r}")
    problems = service.models.minicheck.check(document, claim, null="null")
    if problems:
        raise bad_request("; ".join(f"`inputs.{'text' if which == 'context' else 'text_pair'}` {problem}"
                                    for which, problem in problems))
    (details,) = await service.run("minicheck", "score", [(None, document, claim)])
    scores = [1.0 - details["score"]] * len(MINICHECK_LABELS)
    scores[SUPPORTED] = details["score"]
    return [(MINICHECK_LABELS[i], score) for i, score in Classifier.rank(scores)]

# -- the tasks of the table's products (HF_TASKS) --------------------------------------------------------------


def _task_job(service: Core, kind: str, task: Task, given: dict):
    """The loaded model `kind`'s file job under the options the body's `parameters` give (each a key of the
    task's; a refused one is a 422 naming parameters.<option>), made once per distinct options (rows.job_for)."""
    if unknown := sorted(set(given) - set(task.parameters)):
        raise bad_request(f"`parameters` {unknown}: not parameters of {task.name}; its parameters: "
                          f"{list(task.parameters)}")
    product = PRODUCTS[service.models.loaded()[kind][0]]
    return job_for(service, kind, product, {k: v for k, v in given.items() if v is not None}, where="parameters")


async def _record(service: Core, kind: str, job, values: dict[str, Any]) -> dict:
    """The job's record of one row (`values`: role -> value), through the model's queue (requests with the same
    options share model calls, with POST /rows/KIND's too)."""
    (record,) = await service.run(kind, "rows", [(job, Row(None, 0, values))], key=id(job))
    return record


async def token_classification(service: Core, kind: str, body: dict) -> list:
    """HF Inference's token-classification (the module docstring) on the token classifier `kind`. A text its
    window would cut is refused (413, as TEI refuses one) unless `parameters.stride` reads it in overlapping
    windows, or the body's `truncate` is true (then it is cut, as the pipeline cuts it)."""
    request = parse(bodies.TaskRequest, body)
    given = request.inputs
    job = _task_job(service, kind, HF_TASKS["token-classification"], request.parameters)
    if job.settings["stride"] is None:
        service.check_length(service.models.loaded()[kind][1], [given], request.truncate)
    return (await _record(service, kind, job, {"text": given}))["entities"]


async def fill_mask(service: Core, kind: str, body: dict) -> list:
    """HF Inference's fill-mask (the module docstring) on the masked-LM model `kind`. A text without the model's
    mask token, or whose masks all lie past the window, is a 422 naming `inputs` (FillMask.check); a text its
    window would cut is refused (413, as TEI refuses one) unless the body's `truncate` is true (then it is cut,
    as the pipeline cuts it with truncation=True)."""
    request = parse(bodies.TaskRequest, body)
    given = request.inputs
    job = _task_job(service, kind, HF_TASKS["fill-mask"], request.parameters)
    filler = service.models.loaded()[kind][1]
    if problem := filler.check(given, null="null"):
        raise bad_request(f"`inputs` {problem}")
    service.check_length(filler, [given], request.truncate)
    candidates = (await _record(service, kind, job, {"text": given}))["candidates"]  # a list per mask (jobs.py)
    return candidates[0] if len(candidates) == 1 else candidates


def hf_task(service: Core, body: dict) -> tuple[Task, str] | None:
    """(the task, the loaded model's kind) that a POST / body is for, by HF Inference's shapes (tei.root): the
    tasks of the loaded models whose `inputs` it has; of several, the one whose parameters hold every key of
    the body's `parameters` (InferenceClient leaves out the ones not given). None where no task takes it, or
    the body's `inputs` is a string and it has no `parameters` while an embedding model or a classifier is
    loaded (TEI's /embed or /predict body: an object such as question-answering's is none). One task loaded: it,
    whatever the keys (its handler names those it lacks). Several, and not one fits: a 422 naming each task's
    POST /pipeline/TASK."""
    inputs, models = body.get("inputs"), service.models
    tasks = [(HF_TASKS[name], kind) for name, kind in task_kinds(models).items() if HF_TASKS[name].takes(inputs)]
    if not tasks or ("parameters" not in body and isinstance(inputs, str)
                     and (models.embedder or models.classifier) is not None):
        return None
    options = body.get("parameters")  # a routing rule on the raw body; the task's type then checks it
    given = set(options) if isinstance(options, dict) else set()
    fits = [(task, kind) for task, kind in tasks if given <= set(task.parameters)]
    if len(fits) == 1 or len(tasks) == 1:
        return (fits or tasks)[0]
    said = f"fit {', '.join(task.name for task, _ in fits)}" if fits else \
        f"fit none of {', '.join(task.name for task, _ in tasks)}"
    raise bad_request(f"POST / cannot tell which task this body is for: its `parameters` {sorted(given)} {said}; "
                      f"post it to " + " or ".join(f"/pipeline/{task.name}" for task, _ in fits or tasks))


async def question_answering(service: Core, kind: str, body: dict) -> dict | list:
    """HF Inference's question-answering (the module docstring) on the QA model `kind`: the file job's record of
    the one (question, context), as the client parses it. A context longer than a window is read in windows
    (parameters.doc_stride), never cut; a pair the answerer cannot read (an empty question or context, a context
    without tokens, a question filling the window) is a 422 naming inputs.question / inputs.context."""
    request = parse(bodies.QuestionAnsweringRequest, body)
    values = {"question": request.inputs.question, "context": request.inputs.context}
    job = _task_job(service, kind, HF_TASKS["question-answering"], request.parameters)
    if problems := job.check(values):
        raise bad_request("; ".join(f"`inputs.{which}` {problem}" for which, problem in problems))
    record = await _record(service, kind, job, values)
    if "answers" in record:  # top_k > 1: the list, best first
        return record["answers"]
    return [] if record["answer"] is None else record  # the pipeline's [] where no span is left


async def zero_shot_classification(service: Core, kind: str, body: dict) -> list:
    """HF Inference's zero-shot-classification (the module docstring) on the NLI model `kind`. The request's
    candidate labels go in its row, as a file row's own labels do (jobs.zero_shot_job's candidate_labels_field),
    and its other parameters are the job's options: requests with different labels share one job and one model
    call, and the service keeps one job per template and multi_label, not one per set of labels. A (text,
    hypothesis) pair the window would cut is refused (413, as TEI refuses a long input) unless the body's
    `truncate` is true (then the text loses its end, as the pipeline cuts it)."""
    request = parse(bodies.TaskRequest, body)
    given = request.inputs
    if given == "":  # the pipeline refuses an empty text too
        raise empty("inputs")
    task, options = HF_TASKS["zero-shot-classification"], request.parameters
    if unknown := sorted(set(options) - set(task.parameters)):  # as _task_job says it
        raise bad_request(f"`parameters` {unknown}: not parameters of {task.name}; its parameters: "
                          f"{list(task.parameters)}")
    if options.get("candidate_labels") is None:
        raise bad_request("`parameters.candidate_labels` is required: the labels to choose from (a list of "
                          "strings)")
    try:
        labels = parse_labels(options["candidate_labels"])
    except OptionError as e:
        raise bad_request(f"`parameters.{e.option}` {e.problem}") from None
    product, runner = service.models.loaded()[kind]
    rest = {k: v for k, v in options.items() if k != "candidate_labels" and v is not None}
    job = job_for(service, kind, PRODUCTS[product], {**rest, "candidate_labels_field": "candidate_labels"},
                    where="parameters")
    service.check_length(runner, [(given, h) for h in hypotheses(job.settings["hypothesis_template"], labels)],
                       request.truncate)
    record = await _record(service, kind, job, {"text": given, "candidate_labels": labels})
    return [{"label": label, "score": score} for label, score in zip(record["labels"], record["scores"])]


@dataclass(frozen=True)
class Task:
    """An HF Inference task that a product of the table answers (Product.hf_task names it; the module docstring)."""

    name: str  # HF's task name ("token-classification"); served on POST /pipeline/NAME
    parameters: tuple[str, ...]  # the keys of its body's `parameters` (huggingface_hub's <Task>Parameters)
    takes: Callable[[Any], bool]  # whether a body's `inputs` is this task's (POST /: tei.root)
    handler: Callable[[Core, str, dict], Awaitable[Any]]  # (service, the loaded model's kind, body) -> the answer
    body: Any = bodies.TaskRequest  # its body's type (serve/bodies.py)
    answer: Any = Any  # its answer's type


def _text(inputs: Any) -> bool:
    return isinstance(inputs, str)


HF_TASKS: dict[str, Task] = {task.name: task for task in (
    Task("text-classification", ("top_k", "function_to_apply"), _text,
         lambda service, kind, body: text_classification(service, body, model=kind),
         bodies.TextClassificationRequest, list[list[bodies.Label]]),
    Task("token-classification", ("aggregation_strategy", "ignore_labels", "stride"), _text, token_classification,
         answer=list[dict[str, Any]]),
    Task("fill-mask", ("top_k", "targets"), _text, fill_mask, answer=list[dict[str, Any]] | list[list[dict[str, Any]]]),
    Task("question-answering", ("top_k", "doc_stride", "max_answer_len", "max_seq_len", "max_question_len",
                                "handle_impossible_answer", "align_to_words"),
         lambda inputs: isinstance(inputs, dict) and ("question" in inputs or "context" in inputs), question_answering,
         bodies.QuestionAnsweringRequest, bodies.Answered | list[bodies.Answered]),
    Task("zero-shot-classification", ("candidate_labels", "hypothesis_template", "multi_label"), _text,
         zero_shot_classification, answer=list[bodies.Label]))}


def task_kinds(models: Models) -> dict[str, str]:
    """Task name -> the loaded model answering it (its kind: serve/core.Models.loaded), by its product's hf_task."""
    out: dict[str, str] = {}
    for kind, (product, _) in models.loaded().items():
        entry = PRODUCTS.get(product)
        if entry is not None and entry.hf_task in HF_TASKS:
            out.setdefault(entry.hf_task, kind)
    return out


def routes(models: Models) -> list[Route]:
    """POST /pipeline/TASK for each task a loaded model answers."""
    def kinds(name: str):
        return lambda m: [kind] if (kind := task_kinds(m).get(name)) else []

    def body(task: Task, kind: str):
        """The task's body, its `parameters` typed by the loaded product's options where the task takes them as
        they are (bodies.task_request); text-classification's own."""
        if not issubclass(task.body, bodies.TaskRequest):
            return task.body
        return bodies.task_request(PRODUCTS[models.loaded()[kind][0]], task.parameters, base=task.body)

    return [Route(f"/pipeline/{name}", lambda service, body, t=name, k=kind: HF_TASKS[t].handler(service, k, body),
                  kinds(name), body=body(HF_TASKS[name], kind), answer=HF_TASKS[name].answer)
            for name, kind in task_kinds(models).items()]


def not_loaded(path: str) -> str | None:
    """What to say of a request to POST /pipeline/TASK whose model is not loaded (None: not one of those routes)."""
    task = path.removeprefix("/pipeline/")
    flags = [f"--{product.name} SRC" for product in PRODUCTS.values() if product.hf_task == task]
    if not path.startswith("/pipeline/") or task not in HF_TASKS or not flags:
        return None
    return f"no model answering {task} is loaded for {path} (start the service with {' or '.join(flags)})"
