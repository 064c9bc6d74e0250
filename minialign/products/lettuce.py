"""HallucinationDetector: LettuceDetect's span-level hallucination detection (KRLabsOrg/LettuceDetect), a token
classifier (ModernBERT, EuroBERT) that labels each token of an answer supported (0) or hallucinated (1) given the
passages it was to be grounded on. Called as lettucedetect's HallucinationDetector(method="transformer") is, and
returning its structures (lettucedetect/detectors/transformer.py, TransformerDetector):

    detector = HallucinationDetector.from_pretrained("path/or/hub-id", max_length=4096)
    detector.predict(context=["France's capital is Paris."], question="What is the capital of France?",
                     answer="The capital is Lyon.", output_format="spans")
    # [{"start": 15, "end": 19, "confidence": 0.97, "text": "Lyon"}]

The input is one sequence `[CLS] prompt [SEP] answer [SEP]`: the prompt is the language's template
(prompts/qa_prompt_<lang>.txt with a question, summary_prompt_<lang>.txt without one: QA_TEMPLATES,
SUMMARY_TEMPLATES) around the passages, each on its line as "passage 1: ..." (prompt_utils.py,
PromptUtils.format_context; the word per language: PASSAGE_WORDS). Only the answer's tokens are labelled: those from
the answer's first token to the end, the trailing special token included (transformer.py `labels[answer_start:] =
0`).

  output_format "tokens"  one dict per answer token: token (the id decoded alone), pred (1: hallucinated), prob (the
                          probability of label 1)
  "spans"                 runs of consecutive hallucinated answer tokens (tokens with an empty character range
                          skipped): start / end (character offsets into the answer, counted from its first token's
                          start), confidence (the largest prob of the run's tokens), text (answer[start:end]);
                          min_confidence drops the spans below it

Chunking (_group_passages_into_chunks): where the prompt with every passage and the answer do not fit max_length,
the passages are grouped greedily, in order, into prompts that do (each group in the whole template); every group
runs with the answer, and each answer token's prob is the largest over the groups (_predict_chunked: pred is then
prob >= 0.5, where one group takes the argmax). A group that still does not fit (a passage longer than the window,
or a template and answer that fill it) loses the end of its prompt as the reference's tokenizer call cuts it
(truncation="only_first"): never silently here, for the cut is reported as by every runner (TruncationWarning, a
tally, and each example's count with return_details). An answer that does not fit the window with the special
tokens is a ValueError (truncation="only_first" cannot cut it).

Every group of every example runs through the batching engine together (sorted by length, packed); an example's
result is the same whatever it is batched with.

One difference, on purpose: the reference reserves 3 special tokens (`total_budget = max_length - answer_tokens - 3`);
here the tokenizer's own count for a pair is reserved (3 for ModernBERT's and EuroBERT's), so a tokenizer with more
(RoBERTa's four) never cuts a group that chunking meant to fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Unpack

import torch
from torch import Tensor

from minialign.loading import build, read_checkpoint
from minialign.models.head_models import TokenClassifierModel
from minialign.products import choices
from minialign.products.runner import LoadOptions, Loading, OptionError, Runner, batch_lengths
from minialign.runtime.engine import Truncation
from minialign.sources import resolve
from minialign.text.tokenizer import Encoded, Tokenizer
from minialign.text.validation import check_texts, value_problem

from minialign.products.choices import LETTUCE_LANG as LANG  # TransformerDetector.__init__'s lang
from minialign.products.choices import LETTUCE_MAX_LENGTH as MAX_LENGTH  # and its max_length
from minialign.products.choices import LETTUCE_OUTPUT_FORMAT as OUTPUT_FORMAT  # predict's default output_format
from minialign.products.choices import LETTUCE_OUTPUT_FORMATS as OUTPUT_FORMATS
HALLUCINATED = 1  # the label of a hallucinated token (transformer.py reads probabilities[:, 1])
TRAINED = ("classifier.",)
NO_HEAD = ("A HallucinationDetector needs a fine-tuned *ForTokenClassification checkpoint of two labels (supported, "
           "hallucinated), as LettuceDetect's; config.json's architectures names none.")

# lettucedetect/detectors/prompt_utils.py LANG_TO_PASSAGE: the word that opens each passage's line
PASSAGE_WORDS = {"en": "passage", "de": "Passage", "fr": "passage", "es": "pasaje", "it": "brano", "pl": "fragment",
                 "cn": "段落", "hu": "szövegrészlet"}
LANGS = tuple(PASSAGE_WORDS)
assert LANGS == choices.LETTUCE_LANGS  # the faces' list (choices.py, without torch) is this one

# lettucedetect/prompts/qa_prompt_<lang>.txt, as they are (string.Template: ${question}, ${num_passages}, ${context})
QA_TEMPLATES = {
    "en": "Briefly answer the following question:\n${question}\nBear in mind that your response should be strictly "
          "based on the following ${num_passages} passages:\n${context}\nIn case the passages do not contain the "
          "necessary information to answer the question, please reply with: \"Unable to answer based on given "
          "passages.\"\noutput:",
    "de": "Beantworte die folgende Frage kurz:\n${question}\nBeachte, dass deine Antwort nur auf den folgenden "
          "${num_passages} Passagen basieren soll:\n${context}\nFalls die Passagen nicht die notwendigen "
          "Informationen zur Beantwortung der Frage enthalten, antworte bitte mit: \"Kann aufgrund der gegebenen "
          "Passagen nicht beantwortet werden.\"\nAusgabe:",
    "fr": "Réponds brièvement à la question suivante :\n${question}\nNote que ta réponse doit être basée uniquement "
          "sur les ${num_passages} passages suivants :\n${context}\nSi les passages ne contiennent pas les "
          "informations nécessaires pour répondre à la question, réponds s'il te plaît par : \"Impossible de "
          "répondre sur la base des passages fournis.\"\nSortie : ",
    "es": "Responde a la siguiente pregunta brevemente:\n${question}\nTen en cuenta que tu respuesta debe basarse "
          "únicamente en los siguientes ${num_passages} pasajes:\n${context}\nSi los pasajes no contienen la "
          "información necesaria para responder a la pregunta, por favor responde con: \"No se puede responder con "
          "base en los pasajes proporcionados.\"\nSalida: ",
    "it": "Rispondi alla seguente domanda in modo breve:\n${question}\nTieni presente che la tua risposta deve "
          "basarsi solo sui seguenti ${num_passages} passaggi:\n${context}\nSe i passaggi non contengono le "
          "informazioni necessarie per rispondere alla domanda, per favore rispondi con: \"Non può essere risposto "
          "in base ai passaggi forniti.\"\nRisposta:\n",
    "pl": "Zwięźle odpowiedz na następujące pytanie:\n${question}\nPamiętaj, że Twoja odpowiedź powinna opierać się "
          "wyłącznie na następujących ${num_passages} fragmentach:\n${context}\nJeśli fragmenty nie zawierają "
          "informacji niezbędnych do udzielenia odpowiedzi na pytanie, odpowiedz: \"Nie można odpowiedzieć na "
          "podstawie podanych fragmentów.\"\noutput: ",
    "cn": "请简短回答以下问题：\n${question}\n请注意，您的回答应严格基于以下${num_passages}段落：\n${context}\n"
          "如果段落中不包含回答问题所需的信息，请回复：\"基于给定段落无法回答。\"\n输出：\n",
    "hu": "Röviden válaszolj az alábbi kérdésre:\n${question}\nVedd figyelembe, hogy a válaszod kizárólag az alábbi "
          "${num_passages} szövegrészletre támaszkodjon:\n${context}\nHa a szövegrészletek nem tartalmazzák a kérdés "
          "megválaszolásához szükséges információt, válaszolj így: \"Nem tudok válaszolni a megadott "
          "szövegrészletek alapján.\"\noutput:",
}
# lettucedetect/prompts/summary_prompt_<lang>.txt (${text}): the prompt of an example without a question
SUMMARY_TEMPLATES = {
    "en": "Summarize the following text:\n${text}\noutput:",
    "de": "Fasse den folgenden Text zusammen:\n${text}\nAusgabe:\n",
    "fr": "Résume le texte suivant :\n${text}\nSortie : ",
    "es": "Resume el siguiente texto:\n${text}\nSalida: ",
    "it": "Riassumi il seguente testo:\n${text}\nRisposta: ",
    "pl": "Streść następujący tekst:\n${text}\nWynik: ",
    "cn": "请总结以下文本：\n${text}\n输出：\n",
    "hu": "Foglalja össze az alábbi szöveget:\n${text}\noutput:\n\n\n",
}


def check_lang(lang) -> str:
    """A language of the templates (LANGS), or an OptionError naming them."""
    if lang not in PASSAGE_WORDS:
        raise OptionError("lang", f"must be one of {LANGS}, got {lang!r}")
    return lang


def format_prompt(context: Sequence[str], question: str | None, lang: str) -> str:
    """prompt_utils.py PromptUtils.format_context: the passages, one a line as "<word> <n>: <passage>", in the
    language's question template, or its summary template without a question."""
    block = "\n".join(f"{PASSAGE_WORDS[lang]} {i + 1}: {p}" for i, p in enumerate(context))
    if question is None:
        return Template(SUMMARY_TEMPLATES[lang]).substitute(text=block)
    return Template(QA_TEMPLATES[lang]).substitute(question=question, num_passages=len(context), context=block)


def example_problems(context, answer, question, *, null: str = "None") -> list[tuple[str, str]]:
    """What is wrong with one example, as ("context" | "context[i]" | "answer" | "question", problem) pairs, before any
    model work (a face's row or request body): context a list of passage strings, answer a string, question a
    string or missing (`null` names a missing value: None in Python, null in JSON)."""
    problems = []
    if isinstance(context, str) or not isinstance(context, Sequence):
        problems.append(("context", f"must be a list of passages (strings), got {type(context).__name__}"))
    else:
        problems += [(f"context[{i}]", problem) for i, passage in enumerate(context)
                     if (problem := value_problem(passage, null=null))]
    if problem := value_problem(answer, null=null):
        problems.append(("answer", problem))
    if question is not None and (problem := value_problem(question, null=null)):
        problems.append(("question", problem))
    return problems


class HallucinationDetector(Runner):
    truncation_unit, truncation_like = "example(s)", "lettucedetect's TransformerDetector"
    has_details = True
    progress_label = "detecting"

    def __init__(self, model: TokenClassifierModel, tokenizer: Tokenizer, *, lang: str = LANG,
                 max_length: int = MAX_LENGTH, batch_size: int | None = None, max_tokens: int | None = None,
                 unpad: bool | None = None, workers: int = 1, compile: bool | str = False, threads: int | None = None):
        """lang: the templates' language (LANGS), every call's unless it names its own. The other options:
        Runner._start (the window is max_length, within the model's positions)."""
        if len(model.config.labels) < 2:
            raise ValueError(f"a HallucinationDetector needs a token classifier of two labels (supported, "
                             f"hallucinated); this one has {len(model.config.labels)}")
        self.lang = check_lang(lang)
        self._start(model, tokenizer, max_length=max_length, batch_size=batch_size, max_tokens=max_tokens,
                    unpad=unpad, compile=compile, workers=workers, threads=threads)
        self.trailing = trailing_specials(tokenizer)

    @classmethod
    def from_pretrained(cls, src: str | Path, *, max_length: int = MAX_LENGTH, lang: str = LANG,
                        **keywords: Unpack[Loading]) -> HallucinationDetector:
        """A LettuceDetect *ForTokenClassification directory or hub id (KRLabsOrg/lettucedect-base-modernbert-en-v1,
        EuroBERT ones), or a minialign directory of one. max_length: the window, as TransformerDetector's (within the
        model's positions); lang: the prompt's language. The keywords every runner takes: products/runner.py
        (Loading)."""
        load = LoadOptions.of(keywords, f"{cls.__name__}.from_pretrained")
        check_lang(lang)
        source = resolve(src, revision=load.revision, cache_dir=load.cache_dir)
        ckpt = read_checkpoint(source, task=load.adapter)
        model = build(TokenClassifierModel, ckpt, require=TRAINED, advice=NO_HEAD,
                      **load.only("device", "dtype", "attn_backend"))
        tokenizer = load.open_tokenizer(source, ckpt.tokenizer)
        runner = cls(model, tokenizer, lang=lang, max_length=max_length, **load.engine())
        runner.source = str(src)
        return runner

    def check_options(self, *, output_format: str = OUTPUT_FORMAT, min_confidence: float = 0.0,
                      lang: str | None = None) -> str:
        """A call's options checked (OptionError naming the first refused); returns the call's language."""
        if output_format not in OUTPUT_FORMATS:
            raise OptionError("output_format", f"must be one of {OUTPUT_FORMATS}, got {output_format!r}")
        if isinstance(min_confidence, bool) or not isinstance(min_confidence, (int, float)) \
                or not 0.0 <= min_confidence <= 1.0:  # base.py BaseDetector._validate_min_confidence
            raise OptionError("min_confidence", f"must be in [0, 1], got {min_confidence!r}")
        return self.lang if lang is None else check_lang(lang)

    def settings(self, *, output_format: str = OUTPUT_FORMAT, min_confidence: float = 0.0,
                 lang: str | None = None) -> dict:
        """What a resumed file run must share (the options checked: check_options)."""
        lang = self.check_options(output_format=output_format, min_confidence=min_confidence, lang=lang)
        return {**super().settings(), "output_format": output_format, "min_confidence": min_confidence,
                "lang": lang, "max_length": self.max_length}

    # -- the reference's calls --

    def predict(self, context: Sequence[str], answer: str, question: str | None = None,
                output_format: str = OUTPUT_FORMAT, min_confidence: float = 0.0, *, lang: str | None = None,
                warn_truncation: bool | None = None, tally: Truncation | None = None) -> list[dict]:
        """One example's tokens or spans (the module docstring), as TransformerDetector.predict: the passages
        `context`, the `answer` to check, the `question` (None: a summary's prompt). lang: this call's (default: the
        detector's)."""
        return self.predict_batch([context], [answer], [question], output_format=output_format,
                                  min_confidence=min_confidence, lang=lang, warn_truncation=warn_truncation,
                                  tally=tally)[0]

    def predict_prompt(self, prompt: str, answer: str, output_format: str = OUTPUT_FORMAT,
                       min_confidence: float = 0.0, *, warn_truncation: bool | None = None,
                       tally: Truncation | None = None) -> list[dict]:
        """TransformerDetector.predict_prompt: one prompt written already, never chunked (a prompt too long for the
        window loses its end, reported)."""
        return self.predict_prompt_batch([prompt], [answer], output_format, min_confidence,
                                         warn_truncation=warn_truncation, tally=tally)[0]

    def predict_prompt_batch(self, prompts: Sequence[str], answers: Sequence[str], output_format: str = OUTPUT_FORMAT,
                             min_confidence: float = 0.0, *, progress: bool = False,
                             warn_truncation: bool | None = None, tally: Truncation | None = None) -> list[list[dict]]:
        """TransformerDetector.predict_prompt_batch: predict_prompt over (prompt, answer) pairs, run together."""
        self.check_options(output_format=output_format, min_confidence=min_confidence)
        prompts, answers = check_texts("prompts", prompts), check_texts("answers", answers)
        if len(prompts) != len(answers):
            raise ValueError(f"prompts has {len(prompts)} items but answers has {len(answers)}")
        return self._run([[p] for p in prompts], answers, output_format, min_confidence, progress=progress,
                         warn_truncation=warn_truncation, tally=tally, details=False)

    def predict_batch(self, contexts: Sequence[Sequence[str]], answers: Sequence[str],
                      questions: Sequence[str | None] | None = None, *, output_format: str = OUTPUT_FORMAT,
                      min_confidence: float = 0.0, lang: str | None = None, return_details: bool = False,
                      progress: bool = False, warn_truncation: bool | None = None,
                      tally: Truncation | None = None) -> list:
        """Many examples at once (what the faces call): predict's result for each (contexts[i], answers[i],
        questions[i]), in input order; questions None: none has a question. return_details: each example as
        {"prediction": its list, "chunks": the prompts its passages were grouped into, "truncated": the prompt
        tokens the window cut}. A refused option is an OptionError naming it; a bad example a ValueError naming it
        (example_problems)."""
        lang = self.check_options(output_format=output_format, min_confidence=min_confidence, lang=lang)
        for name, values in (("contexts", contexts), ("answers", answers), ("questions", questions)):
            if (values is not None or name != "questions") and (isinstance(values, str)
                                                                 or not isinstance(values, Sequence)):
                raise ValueError(f"{name} must be a list (one item per example), got {type(values).__name__}")
        questions = [None] * len(answers) if questions is None else list(questions)
        if not len(contexts) == len(answers) == len(questions):
            raise ValueError(f"contexts, answers and questions must be as long: {len(contexts)}, {len(answers)}, "
                             f"{len(questions)}")
        problems = [f"{name} of example {i} {problem}" for i, example in enumerate(zip(contexts, answers, questions))
                    for name, problem in example_problems(*example)]
        if problems:
            raise ValueError("invalid input: " + "; ".join(problems))
        groups = [self._groups(list(c), q, a, lang) for c, a, q in zip(contexts, answers, questions)]
        prompts = [[format_prompt(group, q, lang) for group in example] for example, q in zip(groups, questions)]
        return self._run(prompts, list(answers), output_format, min_confidence, progress=progress,
                         warn_truncation=warn_truncation, tally=tally, details=return_details)

    # -- chunking: transformer.py TransformerDetector._group_passages_into_chunks --

    def _groups(self, context: list[str], question: str | None, answer: str, lang: str) -> list[list[str]]:
        """The passages grouped, in order, so that each group's prompt fits the window beside the answer."""
        count = self.tokenizer.token_counts
        budget = self.max_length - count([answer])[0] - self.tokenizer.backend.num_special_tokens_to_add(True)
        if count([format_prompt(context, question, lang)])[0] <= budget:
            return [context]
        passage_budget = budget - count([format_prompt([""], question, lang)])[0]
        if passage_budget <= 0:  # the template and the answer fill the window alone: one group, cut
            return [context]
        lines = count([f"{PASSAGE_WORDS[lang]} {i + 1}: {p}" for i, p in enumerate(context)])
        groups: list[list[str]] = []
        current: list[str] = []
        used = 0
        for passage, tokens in zip(context, lines):
            needed = tokens + (1 if current else 0)  # the newline between passages
            if current and used + needed > passage_budget:
                groups.append(current)
                current, used, needed = [], 0, tokens
            current.append(passage)
            used += needed
        if current:
            groups.append(current)
        return groups or [context]

    # -- running --

    @torch.inference_mode()
    def _run(self, prompts: list[list[str]], answers: list[str], output_format: str, min_confidence: float, *,
             progress: bool, warn_truncation: bool | None, tally: Truncation | None, details: bool) -> list:
        """Each example's prompts (one per group) with its answer through the engine together, then its result."""
        encodings = [[self._encode(prompt, answer, i) for prompt in example]
                     for i, (example, answer) in enumerate(zip(prompts, answers))]
        flat = [e for example in encodings for e in example]
        encoded = Encoded([e.ids for e in flat], [e.type_ids for e in flat], [e.cut for e in flat])
        logits = self.engine.run_encoded(encoded, self.forward, progress=self.progress_label if progress else False,
                                         per_row={"answer_start": [e.answer_start for e in flat]}).values \
            if flat else []
        cut = torch.tensor([sum(e.cut for e in example) for example in encodings], dtype=torch.long)
        self._count(cut, warn_truncation, tally)
        # every prompt's probabilities in one softmax (a row's bits are its own: the same as one call per prompt);
        # one call per prompt costs a wake of torch's threads each, milliseconds on a busy machine
        rows = torch.softmax(torch.cat(logits), dim=-1).split([len(t) for t in logits]) if flat else []
        out, at = [], 0
        for example, answer in zip(encodings, answers):
            probabilities = rows[at:at + len(example)]
            at += len(example)
            result = self._result(example, probabilities, answer, output_format)
            if output_format == "spans" and min_confidence > 0.0:  # base.py BaseDetector._filter_spans_by_confidence
                result = [span for span in result if span["confidence"] >= min_confidence]
            out.append({"prediction": result, "chunks": len(example), "truncated": sum(e.cut for e in example)}
                       if details else result)
        return out

    def _encode(self, prompt: str, answer: str, index: int) -> _Pair:
        """hallucination_dataset.py HallucinationDataset.prepare_tokenized_input: tokenizer(prompt, answer,
        truncation="only_first", max_length=...) with offsets, as `tokenizers` does it (each text encoded, the
        first cut to the room the second leaves, the template's special tokens put around them: post_process)."""
        backend = self.tokenizer.backend
        backend.no_truncation()
        first = backend.encode(prompt, add_special_tokens=False)
        second = backend.encode(answer, add_special_tokens=False)
        specials = backend.num_special_tokens_to_add(True)
        room = self.max_length - specials - len(second.ids)
        if room < 0 or room == 0 and first.ids:
            raise ValueError(f"the answer of example {index} has {len(second.ids)} tokens: with the {specials} special "
                             f"tokens and the prompt it does not fit the window of {self.max_length} tokens")
        cut = max(len(first.ids) - room, 0)
        if cut:
            first.truncate(room)
        pair = backend.post_process(first, second)
        start = len(pair.ids) - len(second.ids) - self.trailing  # transformer.py's answer_start_token
        return _Pair(pair.ids, pair.type_ids, pair.offsets, start, cut)

    def forward(self, batch: dict[str, Tensor]) -> list[Tensor]:
        """float32 logits of each sequence's tokens, (n_i, num_labels) each (a ragged forward: runtime/engine.py):
        the answer's (from each row's `answer_start` on) computed, the prompt's zero. Only the answer's labels are
        read, so the last layer runs for the answer's tokens alone (Encoder.forward final_tokens as a mask)."""
        start = batch.pop("answer_start", None)  # (B,): _run's per_row; without it (Runner.run) every token
        final_tokens = "all"
        if start is not None:
            ids, mask = batch["input_ids"], batch["attention_mask"].bool()
            # from the answer's first token, or the row's last where the answer has none (an empty answer with no
            # special token after it): each row a token at least
            start = torch.minimum(start.to(ids.device), mask.sum(1) - 1)
            final_tokens = (torch.arange(ids.size(1), device=ids.device)[None, :] >= start[:, None]) & mask
        logits = self.model(**batch, unpad=self.unpad, final_tokens=final_tokens).logits.float()
        return [row[:n] for row, n in zip(logits, batch_lengths(batch))]

    def _result(self, chunks: list[_Pair], probabilities: list[Tensor], answer: str, output_format: str) -> list:
        """transformer.py _predict_single (one prompt) or _predict_chunked (the largest prob over the prompts)."""
        start = chunks[0].answer_start
        probs = [p[chunk.answer_start:, HALLUCINATED] for chunk, p in zip(chunks, probabilities)]
        if len(chunks) == 1:
            preds = probabilities[0][start:].argmax(dim=-1) == HALLUCINATED
            prob = probs[0]
        else:
            prob = torch.stack(probs).amax(dim=0)
            preds = prob >= 0.5
        if output_format == "tokens":
            ids = chunks[0].ids[start:]
            return [{"token": self.tokenizer.decode([token], skip_special_tokens=False,
                                                    clean_up_tokenization_spaces=None),
                     "pred": int(pred), "prob": float(p)} for token, pred, p in zip(ids, preds.tolist(), prob.tolist())]
        return spans(answer, chunks[0].offsets[start:], preds.tolist(), prob.tolist(), compact=len(chunks) > 1)

    __call__ = predict


@dataclass
class _Pair:
    """One (prompt, answer) sequence as prepare_tokenized_input returns it: ids, type ids, each token's character range
    in its own text, where the answer starts, and the prompt tokens the window cut."""

    ids: list[int]
    type_ids: list[int]
    offsets: list[tuple[int, int]]
    answer_start: int
    cut: int


def trailing_specials(tokenizer: Tokenizer) -> int:
    """How many special tokens the tokenizer's pair template puts after the second text (BERT's, ModernBERT's and
    EuroBERT's one [SEP] / <|end_of_text|>: the `- 1` of prepare_tokenized_input's answer_start_token)."""
    tokenizer.backend.no_truncation()
    probe = tokenizer.backend.encode("a", "b").sequence_ids
    return len(probe) - max(i for i, s in enumerate(probe) if s == 1) - 1


def spans(answer: str, offsets: list[tuple[int, int]], preds: list[bool], probs: list[float], *,
          compact: bool) -> list[dict]:
    """Runs of hallucinated answer tokens as character spans of the answer (offsets from the answer's first token's
    start). One prompt (_predict_single): a token with an empty range is skipped. Several (_build_spans_from_tokens):
    the empty ranges are dropped from the offsets first, and the tokens matched to the rest in order."""
    base = offsets[0][0] if offsets else 0  # answer_char_offset
    if compact:
        ranges = [r for r in offsets if r[0] != r[1]]
        rows = list(zip(ranges, preds, probs))
    else:
        rows = [(r, pred, p) for r, pred, p in zip(offsets, preds, probs) if r[0] != r[1]]
    out: list[dict] = []
    current: dict | None = None
    for (start, end), pred, p in rows:
        if pred:
            if current is None:
                current = {"start": start - base, "end": end - base, "confidence": p}
            else:
                current["end"] = end - base
                current["confidence"] = max(current["confidence"], p)
        elif current is not None:
            out.append({**current, "text": answer[current["start"]:current["end"]]})
            current = None
    if current is not None:
        out.append({**current, "text": answer[current["start"]:current["end"]]})
    return out
