"""ZeroShotClassifier: any labels chosen per call, scored by an NLI model (a *ForSequenceClassification checkpoint
trained on entailment), returning what transformers' ZeroShotClassificationPipeline returns (transformers
pipelines/zero_shot_classification.py).

    zs = ZeroShotClassifier.from_pretrained("MoritzLaurer/DeBERTa-v3-base-mnli-fever-anli")
    zs.predict("I have a problem with my iphone", ["urgent", "phone", "tablet"])
    # {"sequence": "I have a problem with my iphone", "labels": ["phone", "urgent", "tablet"], "scores": [...]}

Each text is the premise of one NLI pair per candidate label, whose hypothesis is the label put into
`hypothesis_template` ("This example is {}."); the model's logit of its entailment label is how far the label
holds. With one label, or multi_label=True, each label's score is the softmax of [contradiction, entailment] of its
own pair; otherwise the softmax of the entailment logits over the text's labels (they sum to 1). The labels come
back best first. The pairs of every text and label of a call run through the batching engine together (sorted,
packed); a premise longer than the window loses its end (the hypothesis is kept whole: truncation only_first, as the
pipeline's), reported as by every runner (products/runner.py).

Why a ZeroShotClassifier holds a Classifier rather than being one (MiniCheckScorer does the same): it loads and runs
the very model a Classifier does (Classifier.from_pretrained: the checkpoint, its head and tokenizer, int8, workers;
Classifier.forward: its logits), but its calls take other arguments and return other things (labels chosen per
call, not the model's); as a subclass it would inherit predict / rerank / label_ranking that mean something else
here, and be taken for a Classifier where faces dispatch on the class (apps/serve/core.py).
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from pathlib import Path
from typing import Unpack

import torch
from torch import Tensor

from minialign.products.choices import ZERO_SHOT_MULTI_LABEL as MULTI_LABEL, ZERO_SHOT_TEMPLATE as DEFAULT_TEMPLATE
from minialign.products.classifier import Classifier
from minialign.products.runner import Loading, OptionError, Runner
from minialign.runtime.engine import Truncation
from minialign.text.tokenizer import Encoded
from minialign.text.validation import check_texts, value_problem



def parse_labels(candidate_labels) -> list[str]:
    """The candidate labels as a list: a string is split at commas, each part stripped and empty parts dropped
    (ZeroShotClassificationArgumentHandler._parse_labels); a list is taken as it is. Refused (an OptionError naming
    candidate_labels, or the first bad label as candidate_labels[i]): no label, a label that is not a string, or one
    that is empty (or only spaces)."""
    if isinstance(candidate_labels, str):
        labels = [label.strip() for label in candidate_labels.split(",") if label.strip()]
    elif isinstance(candidate_labels, Sequence):
        labels = list(candidate_labels)
    else:
        raise OptionError("candidate_labels", f"must be a list of labels or a string of comma-separated labels, got "
                                              f"{type(candidate_labels).__name__}")
    if not labels:
        raise OptionError("candidate_labels", f"is empty ({candidate_labels!r}): give at least one label")
    problems = [(f"candidate_labels[{i}]", problem) for i, label in enumerate(labels)
                if (problem := value_problem(label) or (None if label.strip() else "is empty"))]
    if problems:
        (option, problem), *others = problems
        raise OptionError(option, "; ".join([problem, *(f"{o} {p}" for o, p in others)]))
    return labels


def hypotheses(template: str, labels: Sequence[str]) -> list[str]:
    """Each label put into the template (str.format). Refused (an OptionError naming hypothesis_template), as the
    pipeline refuses it (ZeroShotClassificationArgumentHandler.__call__): a template without a replacement field ({}) for the label;
    also one that str.format cannot fill with one label ("{0} {1}", "{name}", an unmatched brace)."""
    if not isinstance(template, str):
        raise OptionError("hypothesis_template", f"must be a string with {{}} where the label goes, got "
                                                 f"{type(template).__name__}")
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
        filled = [template.format(label) for label in labels]
    except (IndexError, KeyError, ValueError) as e:
        raise OptionError("hypothesis_template", f"{template!r} could not be formatted with a label "
                                                 f"({type(e).__name__}: {e}); put {{}} where the label should go, as "
                                                 f"in {DEFAULT_TEMPLATE!r}") from None
    if not fields:
        raise OptionError("hypothesis_template", f"{template!r} has no {{}} for the label, so every label would get "
                                                 f"the same hypothesis; put {{}} where the label should go, as in "
                                                 f"{DEFAULT_TEMPLATE!r}")
    return filled


def check_multi_label(multi_label) -> bool:
    """multi_label as given, when it is True or False (the pipeline reads any truthy value: "false" would be True)."""
    if not isinstance(multi_label, bool):
        raise OptionError("multi_label", f"must be True or False, got {multi_label!r}")
    return multi_label


def entailment_index(labels: Sequence[str]) -> int:
    """ZeroShotClassificationPipeline.entailment_id: the index of the first label (in label2id's order) whose
    lowercase starts with "entail" (entailment, ENTAILMENT, Entailed), else -1."""
    return next((i for i, label in enumerate(labels) if label.lower().startswith("entail")), -1)


def contradiction_index(entailment: int, num_labels: int) -> int:
    """What postprocess takes as contradiction's logit: the first (0), or the last when entailment is the first
    ("-1 if entailment_id == 0 else 0": MoritzLaurer's checkpoints put entailment first, not_entailment or
    contradiction last)."""
    return num_labels - 1 if entailment == 0 else 0


class ZeroShotClassifier(Runner):
    truncation_unit, truncation_like = "(text, hypothesis) pair(s)", "transformers' zero-shot-classification pipeline"
    progress_label = "classifying"
    calibration_pairs = True

    def __init__(self, classifier: Classifier):
        """Over a loaded Classifier of an NLI model (its model, tokenizer and engine are this runner's). Refused: a
        model without an entailment label (none of its labels starts with "entail")."""
        labels = classifier.labels
        self.entailment_id = entailment_index(labels)
        if self.entailment_id < 0:
            raise ValueError(
                f"a ZeroShotClassifier needs an NLI model whose labels (config.json's id2label / label2id) name "
                f"entailment (a label starting with 'entail', any case); this one's are {labels}. transformers' "
                f"pipeline warns and reads the last logit as entailment then; name the labels in config.json instead")
        if len(labels) < 2:
            raise ValueError(f"a ZeroShotClassifier needs an NLI model of at least two labels (entailment and "
                             f"contradiction or not-entailment), this one has {labels}")
        self.contradiction_id = contradiction_index(self.entailment_id, len(labels))
        self.classifier = classifier
        self.model, self.tokenizer, self.engine, self.unpad = (classifier.model, classifier.tokenizer,
                                                               classifier.engine, classifier.unpad)

    @classmethod
    def from_pretrained(cls, src: str | Path, *, max_length: int | None = None,
                        **keywords: Unpack[Loading]) -> ZeroShotClassifier:
        """An NLI *ForSequenceClassification directory or hub id (a CrossEncoder NLI dir too), or a minialign
        directory of one: loaded as Classifier.from_pretrained loads it. max_length: the window (default: the
        tokenizer's and the model's). The keywords every runner takes are products/runner.py's (Loading)."""
        classifier = Classifier.from_pretrained(src, max_length=max_length, **keywords)
        runner = cls(classifier)
        runner.source = str(src)
        return runner

    @property
    def labels(self) -> list[str]:
        """The NLI model's label names by index (id2label), not the candidate labels of a call."""
        return self.classifier.labels

    def check_options(self, *, candidate_labels=None, hypothesis_template: str = DEFAULT_TEMPLATE,
                      multi_label: bool = MULTI_LABEL) -> list[str] | None:
        """A call's options checked (an OptionError naming the first refused: parse_labels, hypotheses,
        check_multi_label); returns the candidate labels as a list (None when not given: a file whose rows carry
        their own). The template is tried on the labels, or on a placeholder label when there are none."""
        labels = None if candidate_labels is None else parse_labels(candidate_labels)
        hypotheses(hypothesis_template, labels or ["label"])
        check_multi_label(multi_label)
        return labels

    def settings(self, *, candidate_labels=None, hypothesis_template: str = DEFAULT_TEMPLATE,
                 multi_label: bool = MULTI_LABEL) -> dict:
        """What a resumed file run must share with the run that made the file: the call's options (checked:
        check_options)."""
        labels = self.check_options(candidate_labels=candidate_labels, hypothesis_template=hypothesis_template,
                                    multi_label=multi_label)
        return {**super().settings(), "candidate_labels": labels, "hypothesis_template": hypothesis_template,
                "multi_label": multi_label}

    def predict(self, texts: Sequence[str] | str, candidate_labels: Sequence[str] | str, *,
                hypothesis_template: str = DEFAULT_TEMPLATE, multi_label: bool = MULTI_LABEL,
                progress: bool = False, warn_truncation: bool | None = None,
                tally: Truncation | None = None) -> dict | list[dict]:
        """Each text's {"sequence": the text, "labels": the candidate labels best first, "scores": theirs} (module
        docstring), in input order; one text as a string gives its dict alone. candidate_labels: a list, or one
        string of comma-separated labels. A refused option is an OptionError (a ValueError) naming it. A (text,
        hypothesis) pair cut by the window is reported as by every runner (warn_truncation, tally:
        products/runner.py)."""
        one = isinstance(texts, str)
        texts = self._texts([texts] if one else texts, one)
        check_multi_label(multi_label)
        labels = parse_labels(candidate_labels)
        results, cut = self._predict(texts, [labels] * len(texts), hypothesis_template, multi_label, progress)
        self._count(cut, warn_truncation, tally)
        return results[0] if one else results

    __call__ = predict  # as the pipeline is called: zs(texts, candidate_labels, ...)

    def predict_each(self, texts: Sequence[str], candidate_labels: Sequence[Sequence[str] | str], *,
                     hypothesis_template: str = DEFAULT_TEMPLATE, multi_label: bool = MULTI_LABEL,
                     progress: bool = False, warn_truncation: bool | None = None,
                     tally: Truncation | None = None) -> list[dict]:
        """predict with each text's own candidate labels: `candidate_labels[i]` (a list, or one string of
        comma-separated labels) are `texts[i]`'s. Text i's result is `predict(texts[i], candidate_labels[i], ...)`'s,
        bit for bit; every (text, hypothesis) pair of the call runs through the engine together (what a file whose
        rows carry their own labels, and the service's requests with different labels, need: apps/files/jobs.py).
        A refused label is named `candidate_labels[i]` (its text's) or `candidate_labels[i][j]`."""
        if isinstance(texts, str):
            raise ValueError("texts must be a list of texts (predict takes one text)")
        texts = self._texts(texts, False)
        if isinstance(candidate_labels, str) or len(candidate_labels) != len(texts):
            raise ValueError(f"candidate_labels must hold one list of labels per text ({len(texts)}), got "
                             + (f"{len(candidate_labels)}" if not isinstance(candidate_labels, str) else "a string"))
        check_multi_label(multi_label)
        per_text = []
        for i, labels in enumerate(candidate_labels):
            try:
                per_text.append(parse_labels(labels))
            except OptionError as e:  # candidate_labels[j] ... -> candidate_labels[i][j] ...
                raise OptionError(f"candidate_labels[{i}]{e.option.removeprefix('candidate_labels')}",
                                  e.problem) from None
        results, cut = self._predict(texts, per_text, hypothesis_template, multi_label, progress)
        self._count(cut, warn_truncation, tally)
        return results

    @staticmethod
    def _texts(texts: Sequence[str], one: bool) -> list[str]:
        """The texts checked: strings, at least one, none empty."""
        texts = check_texts("texts", texts)
        if not texts:
            raise ValueError("texts is empty: give at least one text")
        if empty := [i for i, text in enumerate(texts) if not text]:
            # the pipeline's "You must include at least one label and at least one sequence" (len(sequences) == 0)
            raise ValueError(f"invalid input: {', '.join('text' if one else f'texts[{i}]' for i in empty)} is empty "
                             f"(the pipeline refuses an empty text too)")
        return texts

    def _predict(self, texts: list[str], labels: list[list[str]], template: str, multi_label: bool,
                 progress: bool) -> tuple[list[dict], Tensor]:
        """Each text's result under its own (parsed) labels, every pair through the engine at once; and the tokens
        each pair lost (the caller counts them: Runner._count names its caller's line)."""
        filled: dict[tuple[str, ...], list[str]] = {}  # the hypotheses of each distinct list of labels
        for own in labels:
            if tuple(own) not in filled:
                filled[tuple(own)] = hypotheses(template, own)
        logits, cut = self._pair_logits([(text, h) for text, own in zip(texts, labels) for h in filled[tuple(own)]],
                                        progress)
        per_text = logits.split([len(own) for own in labels])  # each (L_i, num_labels)
        return [self._result(text, own, rows, multi_label) for text, own, rows in zip(texts, labels, per_text)], cut

    def _logits(self, texts: list[str], hypotheses: list[str], progress: bool) -> tuple[Tensor, Tensor]:
        """float32 logits (T * L, num_labels) of every (text, hypothesis) pair, text by text, and the tokens each pair
        lost (_pair_logits)."""
        return self._pair_logits([(text, h) for text in texts for h in hypotheses], progress)

    def _pair_logits(self, pairs: list[tuple[str, str]], progress: bool) -> tuple[Tensor, Tensor]:
        """float32 logits (P, num_labels) of (text, hypothesis) pairs, in order, and the tokens each pair lost: the
        distinct pairs tokenized (only_first) and run through the engine together."""
        unique: dict[tuple[str, str], int] = {}
        where = torch.tensor([unique.setdefault(pair, len(unique)) for pair in pairs], dtype=torch.long)
        firsts, seconds = [a for a, _ in unique], [b for _, b in unique]
        # only_first, as the pipeline's _parse_and_tokenize (the runner's engine cuts pairs longest-first, as a
        # Classifier's): the hypothesis is kept whole
        encoded: Encoded = self.tokenizer.encode_ids(firsts, seconds, max_length=self.max_length,
                                                     truncation="only_first")
        with torch.inference_mode():
            results = self.engine.run_encoded(encoded, self.forward,
                                              progress=self.progress_label if progress else False)
        return results.values[where], results.truncated[where]

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        """The classifier's float32 logits of one batch of pairs (what the engine calls)."""
        return self.classifier.forward(batch)

    def scores(self, logits: Tensor, multi_label: bool = MULTI_LABEL) -> Tensor:
        """One text's label scores from its pairs' logits (L, num_labels), as ZeroShotClassificationPipeline.
        postprocess: with multi_label or one label, each label's softmax of [contradiction, entailment]; otherwise
        the softmax of the entailment logits over the labels. (The pipeline exponentiates without subtracting the
        maximum, which overflows to nan past a logit of 88; torch.softmax does not, and is otherwise the same to
        float32 rounding.)"""
        if multi_label or logits.size(0) == 1:
            pair = logits[:, [self.contradiction_id, self.entailment_id]]
            return torch.softmax(pair, dim=-1)[:, 1]
        return torch.softmax(logits[:, self.entailment_id], dim=-1)

    def _result(self, text: str, labels: list[str], logits: Tensor, multi_label: bool) -> dict:
        scores = self.scores(logits, multi_label).tolist()
        # reversed(scores.argsort()): best first, equal scores the later label first (numpy's argsort is stable for
        # a few labels; for more, on CPUs where numpy sorts with AVX-512, its order of ties is its own)
        order = sorted(range(len(labels)), key=scores.__getitem__)[::-1]
        return {"sequence": text, "labels": [labels[i] for i in order], "scores": [scores[i] for i in order]}
