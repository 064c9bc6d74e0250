"""The file jobs of the command line (run.Job): score, embed (dense, sparse, multi-vector, BGE-M3), classify, ner,
fill-mask, zero-shot, qa.

Each takes the fields a row has (the product table's roles, apps/products.py Product.fields, with each role's
field as the face names it) and says how a block of rows becomes output records; the runner says the
rest (products/runner.py): what is wrong with a row (`check`), the settings a resumed run must share
(`settings`), and what its window cut, counted over the run and reported once at the end (`tally`).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from minialign.apps.files.formats import OUTPUT_FORMATS
from minialign.apps.files.rows import Fields, Row, read_rows
from minialign.apps.files.run import Job
from minialign.apps.files.tensors import ragged, sparse, stacked, tensor_layout
from minialign.products import choices
from minialign.products.classifier import Classifier
from minialign.products.embeddings import SentenceEncoder
from minialign.products.fill_mask import FillMask
from minialign.products.m3 import M3Encoder
from minialign.products.multivector import MultiVectorEncoder
from minialign.products.sparse import SparseEncoder
from minialign.products.quantization import check_precision, check_truncate_dim, quantization_ranges
from minialign.products.token_classification import TokenClassifier
from minialign.products.lettuce import HallucinationDetector, example_problems
from minialign.products.question_answering import QuestionAnswerer
from minialign.products.zero_shot import ZeroShotClassifier, parse_labels
from minialign.products.runner import OptionError, PairScorer, Runner
from minialign.runtime.engine import Truncation


def checked(fields: Fields, check: Callable[[dict[str, str | None]], list[tuple[str, str]]]) -> Fields:
    """The fields with the loaded runner's own check of a row in place of the table's pre-load one (the runner's also
    knows its window, its tokenizer, its splitter)."""
    return dataclasses.replace(fields, check=check)


def make_job(runner: Runner, fields: Fields, *, outputs: tuple[str, ...], model: str | None,
             settings: dict[str, Any], run: Callable[[list[Row], Truncation], list[dict[str, Any]]],
             totals: Truncation | None = None, **job: Any) -> Job:
    """A Job run by `runner` on rows of `fields`, writing `outputs`: its batch size, the settings a resumed run
    must share, and one truncation warning per run (`run` takes the rows and the tally, and adds each block's
    counts to it; totals: that tally, where the runner's default one names the wrong window). A product's job
    (apps/products.py) is one call of this."""
    if totals is None:  # a row of the output holds no details: the warning does not offer them
        totals = runner.tally(details=False)
    return Job(fields=fields.fields, flags=fields.flags, optional=fields.optional, check=fields.check,
               run=lambda rows: run(rows, totals), finish=totals.warn, batch_size=runner.batch_size,
               outputs=outputs, settings={"model": model, **settings}, **job)


def score_job(scorer: PairScorer, fields: Fields, *, model: str | None = None) -> Job:
    """AlignScorer or MiniCheckScorer: {"score": float} per (context, claim) row."""

    def run(rows: list[Row], totals) -> list[dict[str, Any]]:
        scores = scorer.score([r.values["context"] for r in rows], [r.values["claim"] for r in rows], tally=totals)
        return [{"score": score} for score in scores]

    fields = checked(fields, lambda values: scorer.check(values["context"], values["claim"], null="null"))
    return make_job(scorer, fields, outputs=OUTPUT_FORMATS["score"], model=model or scorer.source,
                    settings=scorer.settings(), run=run, columns=["score"])


def lettuce_job(detector: HallucinationDetector, fields: Fields, *, tokens: bool = False,
                min_confidence: float = 0.0, model: str | None = None) -> Job:
    """HallucinationDetector: per (context, answer[, question]) row, {"spans": [...]} (each {"start", "end",
    "confidence", "text"}: character offsets into the answer), or with `tokens` {"tokens": [...]} (each {"token",
    "pred", "prob"}), as lettucedetect's predict(output_format=) gives them; .jsonl only (a list per row). A row's
    context is one passage; a question missing or null makes the row a summary (lettucedetect's summary template)."""
    output_format = "tokens" if tokens else "spans"
    settings = detector.settings(output_format=output_format, min_confidence=min_confidence)

    def run(rows: list[Row], totals) -> list[dict[str, Any]]:
        if not rows:
            return []
        results = detector.predict_batch([[r.values["context"]] for r in rows], [r.values["answer"] for r in rows],
                                         [r.values.get("question") for r in rows], output_format=output_format,
                                         min_confidence=min_confidence, tally=totals)
        return [{output_format: result} for result in results]

    def check(values: dict[str, str | None]) -> list[tuple[str, str]]:
        problems = example_problems([values["context"]], values["answer"], values.get("question"), null="null")
        return [("context" if field.startswith("context") else field, problem) for field, problem in problems]

    return make_job(detector, checked(fields, check), outputs=("jsonl",), model=model or detector.source,
                    settings=settings, run=run, nested=(output_format,))


# encode's own default (the runner's signature holds it once; the command line's --precision reads it here)
DEFAULT_PRECISION = inspect.signature(SentenceEncoder.encode).parameters["precision"].default
CALIBRATED = ("int8", "uint8")  # codes whose buckets come from a calibration set's ranges (quantization.py)


def embed_job(encoder: SentenceEncoder, fields: Fields, *, normalize: bool = choices.EMBED_NORMALIZE,
              task: str | None = None, prompt_name: str | None = None, prompt: str | None = None,
              truncate_dim: int | None = None, precision: str = DEFAULT_PRECISION, calibration: str | None = None,
              model: str | None = None) -> Job:
    """SentenceEncoder: {"embedding": [floats]} per text row (.jsonl), or one (N, D) tensor (.safetensors).
    prompt_name / prompt: as SentenceEncoder.encode takes them; task ("query" / "document"): the prompt
    encode_query / encode_document put first when neither is given. The prompt text is a setting (an unknown
    prompt_name fails here, before any row is read). truncate_dim, precision (quantization.PRECISIONS): as encode
    takes them; binary codes are ints in .jsonl, int8 / uint8 in .safetensors. int8 / uint8 need `calibration`, a
    file of texts (read as the input, the same text field) whose embeddings fix each dimension's range, as
    encode's calibration_embeddings= does: a row's codes then never depend on the other rows of its block, and
    the ranges are a setting (--resume continues with the same)."""
    check_precision(precision)
    task = _task(task)
    if task is not None and prompt_name is None and prompt is None:
        prompt_name = encoder.task_prompt_name(task)
    settings = encoder.settings(normalize=normalize, prompt_name=prompt_name, prompt=prompt)
    text = settings["prompt"] or ""  # the prompt resolved once: each block uses the same
    settings.update(truncate_dim=check_truncate_dim(truncate_dim) if truncate_dim is not None else encoder.truncate_dim,
                    precision=precision, task=task)
    ranges = None
    if (precision in CALIBRATED) != (calibration is not None):
        raise OptionError("calibration", (
            f"is needed with precision {precision}: a file of texts whose embeddings fix each dimension's range "
            "(calibration_embeddings= in Python)") if calibration is None else "is for precision int8 / uint8 only")
    if calibration is not None:
        rows, problems = read_rows(Path(calibration), fields, id_field="id")
        if problems or not rows:
            raise OptionError("calibration", f"{calibration}: " + (problems[0] if problems else "no rows"))
        embeddings = encoder.encode([r.values["text"] for r in rows], prompt=text, normalize_embeddings=normalize,
                                    truncate_dim=settings["truncate_dim"])
        ranges = quantization_ranges(embeddings, precision)
        settings["ranges"] = ranges.tolist()

    def run(rows: list[Row], totals) -> list[dict[str, Any]]:
        vectors = encoder.encode([r.values["text"] for r in rows], prompt=text, normalize_embeddings=normalize,
                                 truncate_dim=settings["truncate_dim"], precision=precision, ranges=ranges,
                                 tally=totals)
        return [{"embedding": v} for v in vectors.tolist()]

    dtype = {"binary": torch.int8, "int8": torch.int8, "ubinary": torch.uint8, "uint8": torch.uint8}.get(
        precision, torch.float32)
    return make_job(encoder, fields, outputs=OUTPUT_FORMATS["embed"], model=model,
                    settings=settings, run=run, tensors=stacked("embedding", dtype=dtype))


def _task(task: str | None) -> str | None:
    if task not in (None, *choices.TASKS):
        raise ValueError(f"task must be one of {list(choices.TASKS)} (or unset: the model's default), got {task!r}")
    return task


def sparse_job(encoder: SparseEncoder, fields: Fields, *, task: str | None = None,
               prompt_name: str | None = None, prompt: str | None = None, max_active_dims: int | None = None,
               model: str | None = None) -> Job:
    """SparseEncoder: {"indices": [ints, ascending], "values": [floats]} per text row, the row's non-zero values
    (.jsonl), or the sparse layout (tensors.sparse: indices, values, offsets; the vocabulary size in the metadata as
    "vocab_size") in .safetensors. task: "query" or "document" as encode_query / encode_document run (their prompt,
    an inference-free model's route); None: encode's. prompt_name / prompt, max_active_dims: as encode takes them."""
    task = _task(task)
    settings = {**encoder.settings(prompt_name=prompt_name, prompt=prompt, max_active_dims=max_active_dims,
                                   task=task), "task": task}
    text = settings["prompt"] or ""  # the prompt resolved once: each block uses the same

    def run(rows: list[Row], totals) -> list[dict[str, Any]]:
        out = encoder.encode([r.values["text"] for r in rows], prompt=text, task=task,
                             max_active_dims=max_active_dims, tally=totals).coalesce()  # (N, V), sorted by (row, index)
        which, indices = out.indices()
        counts = torch.bincount(which, minlength=len(rows)).tolist()
        return [{"indices": i.tolist(), "values": v.tolist()}
                for i, v in zip(indices.split(counts), out.values().split(counts))]

    return make_job(encoder, fields, outputs=OUTPUT_FORMATS["embed"], model=model,
                    settings=settings, run=run, tensors=sparse("indices", "values"),
                    tensor_metadata={"vocab_size": str(encoder.dimension)})


def multivector_job(encoder: MultiVectorEncoder, fields: Fields, *, task: str | None = None,
                    prompt_name: str | None = None, prompt: str | None = None, model: str | None = None) -> Job:
    """MultiVectorEncoder: {"vectors": [[floats], ...]} per text row, one vector per kept token (.jsonl), or the
    ragged layout (tensors.ragged: `vectors` (total tokens, D) float32 and `offsets` (N + 1,)) in .safetensors.
    task: "query" / "document" as encode_query / encode_document run (their window, expansion, skiplist and
    prompt); None: encode's. prompt_name / prompt: as encode takes them (the prompt resolved once, a setting)."""
    task = _task(task)
    settings = encoder.settings(task=task, prompt_name=prompt_name, prompt=prompt)
    text = settings["prompt"] or ""

    def run(rows: list[Row], totals) -> list[dict[str, Any]]:
        vectors = encoder.encode([r.values["text"] for r in rows], prompt=text, task=task, tally=totals)
        return [{"vectors": v.tolist()} for v in vectors]

    return make_job(encoder, fields, outputs=OUTPUT_FORMATS["embed"], model=model,
                    settings=settings, run=run, totals=encoder.tally(task=task),
                    tensors=ragged("vectors", width=encoder.dimension))


def m3_job(encoder: M3Encoder, fields: Fields, *, return_dense: bool = choices.M3_RETURN_DENSE,
           return_sparse: bool = choices.M3_RETURN_SPARSE, return_colbert_vecs: bool = choices.M3_RETURN_COLBERT_VECS,
           max_length: int | None = None, model: str | None = None) -> Job:
    """M3Encoder: per text row the outputs asked for, under BGEM3FlagModel.encode's keys: "dense_vecs" [floats],
    "lexical_weights" {token id (a string): weight}, "colbert_vecs" [[floats], ...] (.jsonl); in .safetensors
    `dense_vecs` (N, D), `lexical_indices` / `lexical_values` / `lexical_offsets` (tensors.sparse, ids ascending; the
    vocabulary size in the metadata) and `colbert_vecs` (total vectors, dim) with `colbert_offsets` (tensors.ragged).
    max_length: the calls' window (default: the model's)."""
    asked = {"return_dense": return_dense, "return_sparse": return_sparse, "return_colbert_vecs": return_colbert_vecs}
    if not any(asked.values()):
        raise ValueError("choose one or more of return_dense, return_sparse, return_colbert_vecs")
    window = encoder.max_length if max_length is None else max_length
    options = {**asked, "max_length": max_length}
    keys = [key for key, wanted in zip(("dense_vecs", "lexical_weights", "colbert_vecs"), asked.values()) if wanted]
    encoder.encode([], **options)  # a head the options need but the model lacks, or a window too wide: named now

    def run(rows: list[Row], totals) -> list[dict[str, Any]]:
        out = encoder.encode([r.values["text"] for r in rows], **options, tally=totals)
        columns = {key: out[key].tolist() if key == "dense_vecs" else
                   [v.tolist() for v in out[key]] if key == "colbert_vecs" else out[key] for key in keys}
        return [{key: columns[key][i] for key in keys} for i in range(len(rows))]

    layouts = {"dense_vecs": stacked("dense_vecs", width=encoder.dimension),
               "lexical_weights": sparse("lexical_weights", prefix="lexical_"),
               "colbert_vecs": ragged("colbert_vecs", offsets="colbert_offsets", width=encoder.colbert_dimension or 0)}
    return make_job(encoder, fields, outputs=OUTPUT_FORMATS["embed"], model=model,
                    settings=encoder.settings(**asked, window=window), run=run, totals=encoder.tally(details=False, window=window),
                    tensors=tensor_layout(*(layouts[key] for key in keys)),
                    tensor_metadata={"vocab_size": str(encoder.model.config.vocab_size)} if return_sparse else {})


def classify_job(classifier: Classifier, fields: Fields, *, activation: str = choices.CLASSIFIER_ACTIVATION,
                 model: str | None = None) -> Job:
    """Classifier: per row (a text, and a pair text when the row has one), the best label and every
    label's score; a one-label model (a reranker, a regressor) gives {"score"}."""
    labels = classifier.labels

    def run(rows: list[Row], totals) -> list[dict[str, Any]]:
        scores = classifier.predict([r.values["text"] for r in rows], [r.values["pair"] for r in rows],
                                    activation=activation, tally=totals)
        if classifier.reranker:
            return [{"score": score} for score in scores.tolist()]
        return [{"label": ranked[0][0], **{f"score_{label}": s for label, s in zip(labels, row)}}
                for ranked, row in zip(classifier.label_ranking(scores), scores.tolist())]

    columns = ["score"] if classifier.reranker else ["label", *(f"score_{label}" for label in labels)]
    return make_job(classifier, fields, outputs=OUTPUT_FORMATS["classify"], model=model,
                    settings=classifier.settings(activation=activation), run=run, columns=columns)


def ner_job(tagger: TokenClassifier, fields: Fields, *, aggregation_strategy: str = choices.NER_AGGREGATION,
            ignore_labels: list[str] | None = None, stride: int | None = None, model: str | None = None) -> Job:
    """TokenClassifier: {"entities": [{...}, ...]} per text row, the row's entities as TokenClassifier.predict gives
    them (the pipeline's keys: entity or entity_group, score, index with "none", word, start, end), .jsonl only
    (OUTPUT_FORMATS). ignore_labels None: the product's default ("O"). The options are checked, and are settings,
    before any row is read."""
    options = {"aggregation_strategy": aggregation_strategy, "stride": stride,
               **({} if ignore_labels is None else {"ignore_labels": ignore_labels})}
    settings = tagger.settings(**options)

    def run(rows: list[Row], totals) -> list[dict[str, Any]]:
        entities = tagger.predict([r.values["text"] for r in rows], **options, tally=totals)
        return [{"entities": row} for row in entities]

    return make_job(tagger, fields, outputs=OUTPUT_FORMATS["ner"], model=model,
                    settings=settings, run=run, nested=("entities",))


def fill_mask_job(filler: FillMask, fields: Fields, *, top_k: int = choices.FILL_MASK_TOP_K,
                  targets: list[str] | None = None, model: str | None = None) -> Job:
    """FillMask: {"candidates": [[{...}, ...], ...]} per text row: one list per mask of the text, in order, each its
    top_k candidates as FillMask.predict gives them (the pipeline's keys: score, token, token_str, sequence), .jsonl
    only (OUTPUT_FORMATS). The record is the same shape for every row (Arrow's list of lists of structs), where predict
    (as the pipeline) gives a text of one mask its list alone and a text of several a list per mask: a row of one mask
    is [its list]. A row is checked before any model work (FillMask.check: a text, with the model's mask token within
    the window), so a row without the mask is named by its line and field; the options are checked, and are settings,
    before any row is read (targets resolved once: the replaced ones warn when the first block runs)."""
    settings = filler.settings(top_k=top_k, targets=targets)

    def run(rows: list[Row], totals) -> list[dict[str, Any]]:
        results = filler.predict([r.values["text"] for r in rows], top_k=top_k, targets=targets, tally=totals)
        return [{"candidates": result if isinstance(result[0], list) else [result]} for result in results]

    def check(values: dict[str, str | None]) -> list[tuple[str, str]]:
        problem = filler.check(values["text"], null="null")
        return [("text", problem)] if problem else []

    return make_job(filler, checked(fields, check),
                    outputs=OUTPUT_FORMATS["fill-mask"], model=model, settings=settings, run=run,
                    nested=("candidates",))


QA_COLUMNS = ["score", "start", "end", "answer"]  # QuestionAnswerer.predict's keys, in its order


def qa_job(answerer: QuestionAnswerer, fields: Fields, *, top_k: int = choices.QA_TOP_K, doc_stride: int | None = None,
           max_answer_len: int = choices.QA_MAX_ANSWER_LEN, max_seq_len: int | None = None,
           max_question_len: int = choices.QA_MAX_QUESTION_LEN,
           handle_impossible_answer: bool = choices.QA_HANDLE_IMPOSSIBLE_ANSWER,
           align_to_words: bool = choices.QA_ALIGN_TO_WORDS, model: str | None = None) -> Job:
    """QuestionAnswerer: per (question, context) row, QuestionAnswerer.predict's answers under the pipeline's keys.

    top_k 1:   the best answer's own record {"score", "start", "end", "answer"} (flat: .jsonl or .csv); where the
               context offers no span of score > 0 (predict's empty result) every one of the four is null, so each
               row has the same keys (an empty CSV cell); with handle_impossible_answer the "no answer" is
               {"score": s, "start": 0, "end": 0, "answer": ""}
    top_k > 1: {"answers": [{"score", "start", "end", "answer"}, ...]}, at most top_k, best first (fewer, even none,
               where the context has fewer spans), .jsonl only (a list of objects per row: `nested`)
    The options are checked (OptionError), and are settings (doc_stride and max_seq_len resolved), before any row is
    read; a row is checked with them (the answerer's check: a context without tokens, a question that fills the
    window, a stride that leaves a long context no room), so a bad row is named before the model runs."""
    options = {"top_k": top_k, "doc_stride": doc_stride, "max_answer_len": max_answer_len, "max_seq_len": max_seq_len,
               "max_question_len": max_question_len, "handle_impossible_answer": handle_impossible_answer,
               "align_to_words": align_to_words}
    settings = answerer.settings(**options)
    window, stride = settings["max_seq_len"], settings["doc_stride"]

    def run(rows: list[Row], totals) -> list[dict[str, Any]]:
        if not rows:
            return []
        results = answerer.predict([r.values["question"] for r in rows], [r.values["context"] for r in rows],
                                   **options)
        if top_k > 1:
            return [{"answers": answers} for answers in results]
        return [best or dict.fromkeys(QA_COLUMNS) for best in results]  # [] (no span): the same keys, null

    def check(values: dict[str, str | None]) -> list[tuple[str, str]]:
        return answerer.check(values["question"], values["context"], null="null", max_seq_len=window,
                              doc_stride=stride)

    listed = top_k > 1
    return make_job(answerer, checked(fields, check),
                    outputs=("jsonl",) if listed else OUTPUT_FORMATS["qa"], model=model, settings=settings, run=run,
                    columns=None if listed else QA_COLUMNS, nested=("answers",) if listed else ())


def empty_text_problems(values: dict[str, str | None]) -> list[tuple[str, str]]:
    """A row whose text is "": refused, as ZeroShotClassifier.predict (and transformers' pipeline) refuse it."""
    return [("text", "is empty (a zero-shot classifier needs a text: transformers' pipeline refuses an empty one too)")] \
        if values.get("text") == "" else []


def zero_shot_job(classifier: ZeroShotClassifier, fields: Fields, *, candidate_labels: list[str] | None = None,
                  candidate_labels_field: str | None = None, hypothesis_template: str = choices.ZERO_SHOT_TEMPLATE,
                  multi_label: bool = choices.ZERO_SHOT_MULTI_LABEL, model: str | None = None) -> Job:
    """ZeroShotClassifier: per text row the pipeline's dict, {"sequence": the text, "labels": the candidate labels
    best first, "scores": theirs} (.jsonl only: OUTPUT_FORMATS). The candidate labels are `candidate_labels`, the
    same for every row; with `candidate_labels_field`, a row holding that field (a string of comma-separated labels,
    split as the pipeline splits one) is classified under its own labels instead, and a row without it (absent, null
    or "", in every input format alike: a CSV field, or a Ray column read from one, has no null) under
    `candidate_labels` (then required only where a row lacks its own). The rows of a block run together whatever
    their labels (ZeroShotClassifier.predict_each). The options are checked, and are settings (the labels too:
    --resume refuses other labels), before any row is read; an empty text is a malformed row."""
    settings = {**classifier.settings(candidate_labels=candidate_labels, hypothesis_template=hypothesis_template,
                                      multi_label=multi_label), "candidate_labels_field": candidate_labels_field}
    labels = settings["candidate_labels"]  # parsed (a list), or None
    if labels is None and candidate_labels_field is None:
        raise OptionError("candidate_labels", "is required: the labels to choose from (or, where rows carry their "
                                              "own, the field holding them: candidate_labels_field)")

    def check(values: dict[str, str | None]) -> list[tuple[str, str]]:
        problems, own = empty_text_problems(values), values.get("candidate_labels")
        if not own and labels is None:  # None or "": the row takes the job's labels
            problems.append(("candidate_labels", "is missing (or null or empty), and no candidate_labels were given "
                                                 "for the rows without their own"))
        elif own:
            try:
                parse_labels(own)
            except ValueError as e:
                problems.append(("candidate_labels", f"holds no usable labels ({e})"))
        return problems

    def run(rows: list[Row], totals) -> list[dict[str, Any]]:
        for row in rows:  # rows from a file, Ray or POST /rows were checked already; the command line's --text not
            if problems := check(row.values):
                raise ValueError("; ".join(f"{role} {problem}" for role, problem in problems))
        own = [r.values.get("candidate_labels") or labels for r in rows]  # (None or "": the rows without their own)
        return classifier.predict_each([r.values["text"] for r in rows], own,
                                       hypothesis_template=hypothesis_template, multi_label=multi_label, tally=totals)

    if candidate_labels_field:  # a row's own labels: a role the option adds, optional
        fields = Fields(fields={**fields.fields, "candidate_labels": candidate_labels_field},
                        flags={**fields.flags, "candidate_labels": "--candidate-labels-field"},
                        optional=(*fields.optional, "candidate_labels"), check=fields.check)
    return make_job(classifier, checked(fields, check), outputs=OUTPUT_FORMATS["zero-shot"], model=model,
                    settings=settings, run=run, nested=("labels", "scores"))
