"""QuestionAnswerer: extractive question answering from *ForQuestionAnswering checkpoints, returning what transformers
4.x's QuestionAnsweringPipeline returned (transformers v4.57.1 pipelines/question_answering.py; transformers 5 has no
question-answering pipeline).

    qa = QuestionAnswerer.from_pretrained("deepset/roberta-base-squad2")
    qa.predict("Where do I live?", "My name is Wolfgang and I live in Berlin")
    # {"score": 0.92, "start": 34, "end": 40, "answer": "Berlin"}

An answer is a span of the context: score (the probability that it starts where it starts times the probability that
it ends where it ends), start / end (character offsets into the context: context[start:end] is the answer) and answer.

The pipeline's steps, each mirrored here from its v4.57.1 lines:

  preprocess           the question and the context as a pair, the question whole in every window and the context
                       read in windows of what room is left, each `doc_stride` tokens into the one before
                       (truncation "only_second", return_overflowing_tokens; max_seq_len default min(the tokenizer's
                       model_max_length, 384), here also within the model's positions; doc_stride default
                       min(max_seq_len // 2, 128)); p_mask: only the context's tokens can be in an answer, and the
                       CLS token stays in the softmax (some models score "no answer" there)
  select_starts_ends   per window, the start and end logits of the question and special tokens set to -10000, a
                       softmax over the window; the CLS token's start x end probability is the window's "no answer"
                       score (handle_impossible_answer keeps the smallest over the windows), then CLS is set to 0
  decode_spans         every span start <= end < start + max_answer_len scored start x end, the best
                       `top_k * 2 + 10` (align_to_words) or `top_k` per window
  postprocess          each span to characters: with align_to_words, from the first character of the word its first
                       token is in to the last of the word its last token is in (the tokenizer's words: word_ids),
                       else the tokens' own offsets; spans whose text is the same (case ignored) are one answer, their
                       scores added, as the pipeline's get_answer adds them; with handle_impossible_answer, the "no
                       answer" {"score": that score, "start": 0, "end": 0, "answer": ""} joins; the best top_k

Where minialign differs, and why (docs/guides/question_answering.md says the same):

  - the shape of a result follows the call's arguments: top_k=1 gives one dict, top_k > 1 a list (v4 gave a dict
    whenever only one answer was left), and a list of inputs gives a list of results (v4 gave a list of one input's
    result alone);
  - spans of score 0 are never answers: where a context has fewer possible spans than the pipeline takes
    (top_k * 2 + 10), v4 filled the rest with spans of probability 0 that numpy's argpartition picked among the
    impossible ones (reversed, too long, starting at CLS: their text often empty); minialign returns fewer answers,
    as v4's docstring says it may ("we return less than top_k answers if there are not enough options");
  - the question is first and the context second, as v4 ordered them for every tokenizer that pads on the right
    (every family minialign loads); max_question_len is taken and, as in v4 with a fast tokenizer (the only kind
    minialign has), unused: only v4's slow-tokenizer path cut the question to it;
  - a context with no tokens (only spaces) is refused, where v4 answered "" with score 0.

The windows of every pair run through the batching engine together (sorted, packed); each pair's answers are decoded
from its own windows' logits only, so a pair's result is the same whatever it is batched with.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Unpack

import tokenizers
import torch
from torch import Tensor

from minialign.loading import build, read_checkpoint
from minialign.models.head_models import QuestionAnsweringModel
from minialign.products.choices import QA_ALIGN_TO_WORDS as ALIGN_TO_WORDS
from minialign.products.choices import QA_HANDLE_IMPOSSIBLE_ANSWER as HANDLE_IMPOSSIBLE
from minialign.products.choices import QA_MAX_ANSWER_LEN as MAX_ANSWER_LEN, QA_MAX_QUESTION_LEN as MAX_QUESTION_LEN
from minialign.products.choices import QA_TOP_K as TOP_K
from minialign.products.runner import LoadOptions, Loading, OptionError, Runner, batch_lengths
from minialign.sources import resolve
from minialign.text.tokenizer import Encoded, Tokenizer
from minialign.text.validation import value_problem

MAX_SEQ_LEN = 384  # the pipeline's default window, within the tokenizer's model_max_length (preprocess)
NULL_SCORE = 1000000.0  # postprocess's min_null_score before any window: "large and positive"
MASKED = -10000.0  # select_starts_ends: the logit of a token that cannot be in an answer
TRAINED = ("qa_outputs.",)
NO_HEAD = ("A QuestionAnswerer needs a fine-tuned *ForQuestionAnswering checkpoint (config.json's architectures names "
           "one); to fine-tune a new head, load ma.QuestionAnsweringModel, whose new head starts the same in every run.")


class QuestionAnswerer(Runner):
    truncation_unit, truncation_like = "pair(s)", "transformers 4's question-answering pipeline"
    progress_label = "answering"

    def __init__(self, model: QuestionAnsweringModel, tokenizer: Tokenizer, *, batch_size: int | None = None,
                 max_tokens: int | None = None, max_length: int | None = None, unpad: bool | None = None, workers: int = 1,
                 compile: bool | str = False, threads: int | None = None):
        """The options: Runner._start. max_length bounds the windows (max_seq_len) a call may ask for."""
        self._start(model, tokenizer, max_length=max_length, batch_size=batch_size, max_tokens=max_tokens,
                    unpad=unpad, compile=compile, workers=workers, threads=threads)
        # check's own copy of the tokenizer, never truncated: the service checks a body on its event loop while the
        # model's thread reads the pairs in windows, and truncation is a setting of the tokenizer object
        self._counter = tokenizers.Tokenizer.from_str(tokenizer.backend.to_str())
        self._counter.no_truncation()
        self._counter.no_padding()

    @classmethod
    def from_pretrained(cls, src: str | Path, *, max_length: int | None = None,
                        **keywords: Unpack[Loading]) -> QuestionAnswerer:
        """A transformers *ForQuestionAnswering directory or hub id, or a minialign directory of one. The keywords
        every runner takes are products/runner.py's (Loading)."""
        load = LoadOptions.of(keywords, f"{cls.__name__}.from_pretrained")
        source = resolve(src, revision=load.revision, cache_dir=load.cache_dir)
        ckpt = read_checkpoint(source, task=load.adapter)
        model = build(QuestionAnsweringModel, ckpt, require=TRAINED, advice=NO_HEAD,
                      **load.only("device", "dtype", "attn_backend"))
        tokenizer = load.open_tokenizer(source, ckpt.tokenizer)
        runner = cls(model, tokenizer, max_length=max_length, **load.engine())
        runner.source = str(src)
        return runner

    def check_options(self, *, top_k: int = TOP_K, doc_stride: int | None = None, max_answer_len: int = MAX_ANSWER_LEN,
                      max_seq_len: int | None = None, max_question_len: int = MAX_QUESTION_LEN,
                      handle_impossible_answer: bool = HANDLE_IMPOSSIBLE,
                      align_to_words: bool = ALIGN_TO_WORDS) -> tuple[int, int]:
        """A call's options checked (an OptionError naming the first refused, which each face names its own way:
        --doc-stride, parameters.doc_stride); returns the window and the stride they resolve to (max_seq_len and
        doc_stride, their defaults filled in)."""
        for name, value in (("top_k", top_k), ("max_answer_len", max_answer_len),
                            ("max_question_len", max_question_len)):
            if not _is_int(value) or value < 1:
                raise OptionError(name, f"must be an int >= 1, got {value!r}")
        for name, value in (("handle_impossible_answer", handle_impossible_answer),
                            ("align_to_words", align_to_words)):
            if not isinstance(value, bool):
                raise OptionError(name, f"must be True or False, got {value!r}")
        window = self._window(max_seq_len)
        return window, self._stride(doc_stride, window)

    def settings(self, *, top_k: int = TOP_K, doc_stride: int | None = None, max_answer_len: int = MAX_ANSWER_LEN,
                 max_seq_len: int | None = None, max_question_len: int = MAX_QUESTION_LEN,
                 handle_impossible_answer: bool = HANDLE_IMPOSSIBLE, align_to_words: bool = ALIGN_TO_WORDS) -> dict:
        """What a resumed file run must share: the options checked (check_options), the window and stride resolved."""
        window, stride = self.check_options(top_k=top_k, doc_stride=doc_stride, max_answer_len=max_answer_len,
                                            max_seq_len=max_seq_len, max_question_len=max_question_len,
                                            handle_impossible_answer=handle_impossible_answer,
                                            align_to_words=align_to_words)
        return {**super().settings(), "top_k": top_k, "doc_stride": stride, "max_answer_len": max_answer_len,
                "max_seq_len": window, "max_question_len": max_question_len,
                "handle_impossible_answer": handle_impossible_answer, "align_to_words": align_to_words}

    def check(self, question, context, *, null: str = "None", max_seq_len: int | None = None,
              doc_stride: int | None = None) -> list[tuple[str, str]]:
        """What is wrong with one (question, context), as ("question" | "context", problem) pairs, before any model
        work (file rows, service bodies); `null` names a missing value (None in Python, null in JSON). Besides the
        values (check_values), what their tokens make impossible under the window and stride (max_seq_len,
        doc_stride: as predict takes them), each of which predict refuses for the pair too: a context with no tokens,
        a question that fills the window, a context needing several windows that the stride leaves no room to read
        (Tokenizer.encode_pair_windows)."""
        out = check_values(question, context, null=null)
        if out:
            return out
        window = self._window(max_seq_len)
        stride = self._stride(doc_stride, window)
        tok = self._counter
        n_question, n_context = (len(tok.encode(text, add_special_tokens=False).ids) for text in (question, context))
        specials = tok.num_special_tokens_to_add(True)
        room = window - specials - n_question
        if n_context == 0:
            return [("context", "has no tokens (only spaces, or characters the tokenizer drops): there is nothing to "
                                "answer from")]
        if n_question + n_context + specials <= window:  # one window: the stride does not matter
            return []
        if room < 1:
            return [("question", f"has {n_question} tokens, which with the {specials} special tokens fill the window "
                                 f"of {window} tokens (max_seq_len), leaving no room for the context")]
        if stride >= room:
            return [("question", f"has {n_question} tokens, which with the {specials} special tokens leave {room} "
                                 f"tokens of the window of {window} for the context, which needs several windows: "
                                 f"doc_stride ({stride}) must be below {room}")]
        return []

    @torch.inference_mode()
    def predict(self, question: str | Sequence[str] | dict | Sequence[dict], context: str | Sequence[str] | None = None,
                *, top_k: int = TOP_K, doc_stride: int | None = None, max_answer_len: int = MAX_ANSWER_LEN,
                max_seq_len: int | None = None, max_question_len: int = MAX_QUESTION_LEN,
                handle_impossible_answer: bool = HANDLE_IMPOSSIBLE, align_to_words: bool = ALIGN_TO_WORDS,
                progress: bool = False):
        """Answers to questions from their contexts, as the v4 pipeline's __call__ took them: a question and a
        context (strings); lists of questions and contexts of the same length; a list of questions and one context
        for all; a {"question", "context"} dict, or a list of them. One pair (strings, or one dict) gives its result
        alone, lists a list of results in input order. A result is the best answer's dict {"score", "start",
        "end", "answer"} for top_k=1, else a list of at most top_k of them, best first.

        top_k: how many answers. doc_stride: how many tokens of a context each window shares with the one before
        (default min(max_seq_len // 2, 128)). max_answer_len: the most tokens of an answer. max_seq_len: a window's
        tokens, question and special tokens included (default min(the tokenizer's model_max_length, 384), within the
        model's positions). max_question_len: unused, as in v4 with a fast tokenizer (module docstring).
        handle_impossible_answer: also offer "no answer" ({"start": 0, "end": 0, "answer": ""}) with its score.
        align_to_words: widen a span to whole words (the tokenizer's), else keep the tokens' own characters. A refused
        option is an OptionError (a ValueError) naming it (check_options); a refused pair a ValueError naming it by
        its index (check says the same of one pair before any model work)."""
        pairs, single = pairs_of(question, context)
        window, stride = self.check_options(top_k=top_k, doc_stride=doc_stride, max_answer_len=max_answer_len,
                                            max_seq_len=max_seq_len, max_question_len=max_question_len,
                                            handle_impossible_answer=handle_impossible_answer,
                                            align_to_words=align_to_words)
        windows = [self._windows(i, q, c, window, stride) for i, (q, c) in enumerate(pairs)]
        flat = [w for pair_windows in windows for w in pair_windows]
        encoded = Encoded([w.ids for w in flat], [w.type_ids for w in flat], [0] * len(flat))
        logits = self.engine.run_encoded(encoded, self.forward,
                                         progress=self.progress_label if progress else False).values
        out, at = [], 0
        for (_, text), pair_windows in zip(pairs, windows):
            answers = self._answers(text, pair_windows, logits[at:at + len(pair_windows)], top_k=top_k,
                                    max_answer_len=max_answer_len, handle_impossible_answer=handle_impossible_answer,
                                    align_to_words=align_to_words)
            at += len(pair_windows)
            out.append(answers if top_k > 1 else answers[0] if answers else answers)
        return out[0] if single else out

    __call__ = predict

    def forward(self, batch: dict[str, Tensor]) -> list[Tensor]:
        """float32 (start, end) logits of each sequence's tokens, (n_i, 2) each (a ragged forward: runtime/engine.py)."""
        out = self.model(**batch, unpad=self.unpad)
        logits = torch.stack([out.start_logits, out.end_logits], dim=-1).float()  # (B, L, 2)
        lengths = batch_lengths(batch)
        return [row[:n] for row, n in zip(logits, lengths)]

    # -- preprocess --

    def _window(self, max_seq_len: int | None) -> int:
        """preprocess's max_seq_len: min(model_max_length, 384) by default, within the runner's window (the model's
        positions, and from_pretrained's max_length)."""
        if max_seq_len is None:
            return min(self.tokenizer.model_max_length, MAX_SEQ_LEN, self.max_length)
        least = self.tokenizer.backend.num_special_tokens_to_add(True) + 2
        if not _is_int(max_seq_len) or not least <= max_seq_len <= self.max_length:
            raise OptionError("max_seq_len", f"must be an int from {least} (the special tokens of a pair and a token "
                                             f"of each text) to the model's window ({self.max_length}), got "
                                             f"{max_seq_len!r}")
        return max_seq_len

    @staticmethod
    def _stride(doc_stride: int | None, window: int) -> int:
        """preprocess's doc_stride: min(max_seq_len // 2, 128) by default; larger than max_seq_len is refused, as v4
        refuses it (a stride that leaves no room for a pair's context is refused with that pair: _windows)."""
        if doc_stride is None:
            return min(window // 2, 128)
        if not _is_int(doc_stride) or doc_stride < 0:
            raise OptionError("doc_stride", f"must be an int >= 0, got {doc_stride!r}")
        if doc_stride > window:
            raise OptionError("doc_stride", f"({doc_stride}) is larger than max_seq_len ({window})")
        return doc_stride

    def _windows(self, index: int, question: str, context: str, window: int, stride: int) -> list:
        """One pair's windows (Tokenizer.encode_pair_windows: the question whole in each, the context read in
        windows overlapping by `stride` tokens)."""
        try:
            windows = self.tokenizer.encode_pair_windows(question, context, max_length=window, stride=stride)
        except ValueError as e:
            raise ValueError(f"question[{index}] and context[{index}] (max_seq_len {window}, doc_stride {stride}): the "
                             f"question is the first text, the context the second: {e}") from None
        if 1 not in windows[0].sequence_ids:
            raise ValueError(f"context[{index}] has no tokens (only spaces, or characters the tokenizer drops): there "
                             f"is nothing to answer from")
        return windows

    # -- postprocess --

    def _answers(self, context: str, windows: list, logits: list[Tensor], *, top_k: int, max_answer_len: int,
                 handle_impossible_answer: bool, align_to_words: bool) -> list[dict]:
        """postprocess over one pair's windows: each window's best spans as characters of the context, spans of the
        same text (case ignored) one answer with their scores added (get_answer), "no answer" if asked, the best
        top_k."""
        cls_id = self._cls_id()
        pre_top_k = top_k * 2 + 10 if align_to_words else top_k  # some candidates may merge when aligned to words
        null_score, answers, by_text = NULL_SCORE, [], {}
        for encoding, window_logits in zip(windows, logits):
            allowed = torch.tensor([sequence == 1 or token == cls_id
                                    for sequence, token in zip(encoding.sequence_ids, encoding.ids)])
            starts, ends, scores, null_score = select_starts_ends(
                window_logits[:, 0], window_logits[:, 1], allowed, null_score, top_k=pre_top_k,
                handle_impossible_answer=handle_impossible_answer, max_answer_len=max_answer_len)
            for s, e, score in zip(starts, ends, scores):
                start, end = char_span(encoding, s, e, align_to_words)
                text = context[start:end]
                same = by_text.get(text.lower())
                if same is not None:
                    same["score"] += score
                else:
                    answer = {"score": score, "start": start, "end": end, "answer": text}
                    answers.append(answer)
                    by_text[text.lower()] = answer
        if handle_impossible_answer:
            answers.append({"score": null_score, "start": 0, "end": 0, "answer": ""})
        return sorted(answers, key=lambda answer: answer["score"], reverse=True)[:top_k]

    def _cls_id(self) -> int | None:
        """The CLS token's id (the tokenizer's cls_token, else the token its template opens a text with: [CLS], <s>),
        which preprocess keeps in the softmax."""
        token = self.tokenizer.special_tokens.get("cls_token") or self.tokenizer.start_token
        return None if token is None else self.tokenizer.backend.token_to_id(token)


def select_starts_ends(start: Tensor, end: Tensor, allowed: Tensor, null_score: float, *, top_k: int,
                       handle_impossible_answer: bool, max_answer_len: int) -> tuple[list, list, list, float]:
    """select_starts_ends and decode_spans over one window: start / end logits (L,) float32, `allowed` (L,) bool (the
    context's tokens and CLS) -> the best spans' start and end token indices and scores (best first, scores > 0: at
    most top_k), and the smallest "no answer" score so far (CLS's start x end probability)."""
    start = torch.where(allowed, start, MASKED)
    end = torch.where(allowed, end, MASKED)
    start = (start - start.max()).exp()
    start = start / start.sum()
    end = (end - end.max()).exp()
    end = end / end.sum()
    if handle_impossible_answer:
        null_score = min(null_score, float(start[0] * end[0]))
    start[0] = end[0] = 0.0  # mask CLS
    # decode_spans: start <= end < start + max_answer_len; the masked tokens' probabilities are 0 (exp underflows),
    # so a span of score > 0 holds context tokens only
    candidates = (start[:, None] * end[None, :]).triu().tril(max_answer_len - 1)  # (L, L)
    flat = candidates.flatten()
    scores, index = flat.topk(min(top_k, int((flat > 0).sum())))
    length = candidates.size(1)
    return (index // length).tolist(), (index % length).tolist(), scores.tolist(), null_score


def char_span(encoding, s: int, e: int, align_to_words: bool) -> tuple[int, int]:
    """get_indices: the characters of the context a span of tokens covers: from its first token's word's first
    character to its last token's word's last (the second text's words), or, without align_to_words or where a
    token has no word, the tokens' own offsets."""
    if align_to_words:
        start_word, end_word = encoding.token_to_word(s), encoding.token_to_word(e)
        if start_word is not None and end_word is not None:
            first = encoding.word_to_chars(start_word, sequence_index=1)
            last = encoding.word_to_chars(end_word, sequence_index=1)
            if first is not None and last is not None:
                return first[0], last[1]
    return encoding.offsets[s][0], encoding.offsets[e][1]


def pairs_of(question, context) -> tuple[list[tuple[str, str]], bool]:
    """(question, context) pairs from what the v4 pipeline took (QuestionAnsweringArgumentHandler: strings, lists,
    one context for a list of questions, {"question", "context"} dicts), and whether one pair was given alone;
    every value checked: a ValueError names each problem with its index."""
    if context is None:
        single = isinstance(question, dict)
        items = [question] if single else question
        if isinstance(items, str) or not isinstance(items, Sequence):
            raise ValueError(f"give a question and a context, or {{'question': ..., 'context': ...}} dicts; got "
                             f"{type(question).__name__} and no context")
        pairs = []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise ValueError(f"inputs[{i}] must be a dict with keys 'question' and 'context', got "
                                 f"{type(item).__name__}")
            missing = [key for key in ("question", "context") if key not in item]
            if missing:
                raise ValueError(f"inputs[{i}] has no {' or '.join(map(repr, missing))} key: give dicts "
                                 f"{{'question': ..., 'context': ...}}")
            pairs.append((item["question"], item["context"]))
    elif isinstance(question, str) and isinstance(context, str):
        pairs, single = [(question, context)], True
    elif isinstance(question, Sequence) and not isinstance(question, str | dict):
        single = False
        if isinstance(context, str):  # one context for every question, as v4 took it
            pairs = [(q, context) for q in question]
        elif isinstance(context, Sequence):
            if len(question) != len(context):
                raise ValueError(f"questions and contexts don't have the same lengths: {len(question)} questions, "
                                 f"{len(context)} contexts")
            pairs = list(zip(question, context))
        else:
            raise ValueError(f"context must be a string or a list of strings, got {type(context).__name__}")
    else:
        raise ValueError(f"question must be a string, a list of strings, or {{'question', 'context'}} dicts (with no "
                         f"context), and a list of contexts needs a list of questions; got "
                         f"{type(question).__name__} and {type(context).__name__}")
    if not pairs:
        raise ValueError("no questions: give at least one (question, context)")
    problems = [f"{which}[{i}] {problem}" for i, (q, c) in enumerate(pairs) for which, problem in check_values(q, c)]
    if problems:
        raise ValueError("invalid input: " + "; ".join(problems))
    return pairs, single


def check_values(question, context, *, null: str = "None") -> list[tuple[str, str]]:
    """What is wrong with one (question, context)'s values, as ("question" | "context", problem) pairs: null, not a
    string, not encodable text, or empty (v4's "`question` cannot be empty"); known before a model is loaded."""
    out = []
    for which, value in (("question", question), ("context", context)):
        problem = value_problem(value, null=null) or ("cannot be empty" if value == "" else None)
        if problem:
            out.append((which, problem))
    return out


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
