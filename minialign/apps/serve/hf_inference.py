"""HF Inference's task shapes (huggingface_hub's InferenceClient posts them to POST /, or to the path of its
base_url): feature-extraction and sentence-similarity are TEI's bodies (tei.py); text-classification is here,
for the classifier and for MiniCheck.

    {"inputs": str | {"text", "text_pair"}, "parameters": {"top_k", "function_to_apply"}}
        -> [[{"label", "score"}, ...]]   (one list per input, every label best first, or the top_k)

A classifier scores by its own default (transformers' pipeline rule, Classifier.activation) unless
function_to_apply names sigmoid, softmax or none; a {"text", "text_pair"} input is a pair (transformers'
TextClassificationPipeline takes it so). MiniCheck takes a (document, claim) as {"text": document,
"text_pair": claim} and answers its two labels: "supported" with P(supported) (products/minicheck.py: the max
over the document's chunks) and "unsupported" with 1 - P(supported); its only function is softmax.
"""

from __future__ import annotations

from typing import Any

import torch

from minialign.apps.serve.core import Models, bad_request, empty, flag, parameters, text
from minialign.products.classifier import Classifier
from minialign.products.minicheck import LABELS as MINICHECK_LABELS, SUPPORTED

FUNCTIONS = ("sigmoid", "softmax", "none")


def _inputs(value: Any) -> tuple[str, str | None]:
    """An input: a text, or a pair {"text", "text_pair"}."""
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"text", "text_pair"})
        if unknown or "text" not in value:
            raise bad_request('`inputs` must be a string or an object {"text": str, "text_pair": str}')
        pair = value.get("text_pair")
        return text(value["text"], "inputs.text"), None if pair is None else text(pair, "inputs.text_pair")
    return text(value, "inputs"), None


def _options(body: dict) -> tuple[int | None, str | None]:
    """(top_k, function_to_apply) of `parameters`."""
    options = parameters(body)
    top_k, function = options.get("top_k"), options.get("function_to_apply")
    if top_k is not None and (type(top_k) is not int or top_k < 1):
        raise bad_request(f"`parameters.top_k` must be a positive integer, got {top_k!r}")
    if function not in (None, *FUNCTIONS):
        raise bad_request(f"`parameters.function_to_apply` must be sigmoid, softmax or none, got {function!r}")
    return top_k, function


class HFInferenceShapes:
    """The handlers (mixed into the Service, over serve/core.Core)."""

    models: Models

    async def text_classification(self, body: dict, *, model: str = "classify") -> list:
        """HF Inference's text-classification (the module docstring) on the classifier or ("minicheck") MiniCheck."""
        top_k, function = _options(body)
        document, pair = _inputs(body.get("inputs"))
        if model == "minicheck":
            ranked = await self._minicheck_labels(document, pair, function)
        else:
            classifier = self._require("classify")
            self._check_length(classifier, [document if pair is None else (document, pair)],
                               flag(body, "truncate", False))
            logits = await self._run("classify", "logits", [(document, pair)])
            (ranked,) = classifier.label_ranking(classifier.activate(torch.stack(logits), function or "auto"))
        return [[{"label": label, "score": score} for label, score in ranked[:top_k]]]

    async def _minicheck_labels(self, document: str, claim: str | None, function: str | None) -> list:
        """MiniCheck's two labels for (document, claim), best first."""
        if claim is None:
            raise bad_request('MiniCheck checks a claim against a document: `inputs` must be {"text": document, '
                              '"text_pair": claim}')
        if claim == "":
            raise empty("inputs.text_pair")
        if function not in (None, "softmax"):
            raise bad_request("`parameters.function_to_apply`: MiniCheck's probabilities are a softmax; "
                              f"got {function!r}")
        problems = self.models.minicheck.check(document, claim, null="null")
        if problems:
            raise bad_request("; ".join(f"`inputs.{'text' if which == 'context' else 'text_pair'}` {problem}"
                                        for which, problem in problems))
        (details,) = await self._run("minicheck", "score", [(None, document, claim)])
        scores = [1.0 - details["score"]] * len(MINICHECK_LABELS)
        scores[SUPPORTED] = details["score"]
        return [(MINICHECK_LABELS[i], score) for i, score in Classifier.rank(scores)]
