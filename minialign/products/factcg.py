"""FactCGScorer: FactCG's grounding check (Lei et al., NAACL 2025) with its DeBERTa-v3 classifier
(yaxili96/FactCG-DeBERTa-v3-Large, a two-label DebertaV2ForSequenceClassification).

The algorithm is the published code's (derenlei/FactCG factcg/inference.py, Inferencer; factcg/utils.py):
  1. chunking_src: the document is split into sentences (nltk's sent_tokenize over the whole text, no
     blocks), each sentence counted in words (len(nltk.word_tokenize(sentence))), and sentences are packed
     greedily into chunks of at most `chunk_size` = 550 words, joined by "\\n", no overlap; the last chunk
     has " \\n " made "\\n" and is stripped;
  2. tokenize: each chunk and the claim go in as ONE text, INSTRUCTION_TEMPLATE.format(text_a=chunk,
     text_b=claim) (utils.py), `[CLS] text [SEP]`, cut to max_length=2048 tokens at its end
     (truncation='only_first' on a single text: the claim and the question are what a cut loses);
     the tokenizer's pad token set to its eos token changes no logit (the attention mask hides padding);
  3. inference: P(supported) = softmax(logits)[:, 1]; batch_inference: the score is the max over the
     document's chunks (one claim: `.max(dim=1).values.mean()` of a 1 x chunks matrix), the chunk that
     gave it its `best_chunk_ids`.
A claim is supported when its score is above THRESHOLD, 0.5 (benchmark.py get_threshold's "fixed" setting,
`p > threshold` in run_testset; the paper also tunes it per dataset).

Where this differs, and why: a document whose first sentence alone is over the budget gives the original
an empty first chunk ("" is appended before that sentence starts the next), scored as the template around
nothing: it is dropped here, since it is not a part of the document. A document with no text at all is
scored as one empty chunk (the original fails on it). Sentences come from text/sentences.py's
split_sentences and words from `count_words` unless `splitter` / `word_counter` are given
(`nltk.sent_tokenize`, `lambda s: len(nltk.word_tokenize(s))` for the original's exact chunks: nltk's
punkt data is a download minialign does not make). The template's text is cut at the window like the
original's, but never silently: each cut is reported as by every runner (products/runner.py), and by
chunk under "truncated" with return_details.

Chunking apart, the runner is MiniCheck's (products/minicheck.py: the same classifier, window by the
checkpoint, max over chunks); FactCG overrides what differs: the chunks and the text of a chunk and a claim.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Unpack

from minialign.products import choices
from minialign.products.classifier import Classifier
from minialign.products.minicheck import MiniCheckScorer
from minialign.products.runner import LoadOptions, Loading, refuse_int8

DEFAULT_MODEL = choices.FACTCG_MODEL  # Inferencer.__init__'s use_hf_ckpt checkpoint
# factcg/utils.py INSTRUCTION_TEMPLATE, verbatim: text_a the chunk, text_b the claim
TEMPLATE = ("{text_a}\n\nChoose your answer: based on the paragraph above can we conclude that \"{text_b}\"?\n\n"
            "OPTIONS:\n- Yes\n- No\nI think the answer is ")
CHUNK_WORDS = choices.FACTCG_CHUNK_WORDS  # chunking_src's max_chunk_size: words (nltk.word_tokenize tokens)
MAX_LENGTH = 2048  # tokenize's max_length: tokens of one template text, special tokens included
THRESHOLD = 0.5  # benchmark.py's fixed threshold: supported when the score is above it
JOIN = "\n"  # chunking_src joins a chunk's sentences by a newline

# nltk.word_tokenize's tokens, as its NLTKWordTokenizer splits a sentence: clitics apart (do|n't, it|'s), a word
# with its inner periods, commas before digits and hyphens (U.S, 3.5, 1,000, e-mail), an ellipsis or "--" one
# token, any other mark its own. nltk keeps "U.S." whole within a sentence (one token here is "U.S" and ".").
_WORD = re.compile(r"(?i)\w+(?=n't\b)|n't\b|'(?:s|m|d|ll|re|ve)\b|\w+(?:(?:[.\-]|,(?=\d))\w+)*|\.\.\.|--|\S")


def count_words(text: str) -> int:
    """The words of a sentence as nltk.word_tokenize counts them on ordinary prose (_WORD); any text with a
    non-space character has at least one."""
    return len(_WORD.findall(text))


class FactCGScorer(MiniCheckScorer):
    mode = "factcg"  # what batch-scoring outputs record as the method
    truncation_unit, truncation_like = "FactCG template text(s)", "the original FactCG"

    def __init__(self, classifier: Classifier, *, chunk_size: int = CHUNK_WORDS,
                 splitter: Callable[[str], list[str]] | None = None,
                 word_counter: Callable[[str], int] | None = None):
        super().__init__(classifier, chunk_size=chunk_size, splitter=splitter)
        self.word_counter = word_counter or count_words

    @classmethod
    def from_pretrained(cls, src: str | Path = DEFAULT_MODEL, *, chunk_size: int = CHUNK_WORDS,
                        splitter: Callable[[str], list[str]] | None = None,
                        word_counter: Callable[[str], int] | None = None,
                        **keywords: Unpack[Loading]) -> FactCGScorer:
        """A FactCG classifier directory or hub id (yaxili96/FactCG-DeBERTa-v3-Large), its window FactCG's 2048
        tokens. chunk_size: words per chunk; splitter, word_counter: the sentences and the word count of chunking
        (module docstring). The keywords every runner takes are products/runner.py's (Loading)."""
        load = LoadOptions.of(keywords, f"{cls.__name__}.from_pretrained")
        refuse_int8(load.dtype, cls.__name__)
        classifier = Classifier.from_pretrained(src, max_length=MAX_LENGTH, **keywords)
        scorer = cls(classifier, chunk_size=chunk_size, splitter=splitter, word_counter=word_counter)
        scorer.source = str(src)
        return scorer

    def text(self, chunk: str, claim: str) -> str:
        """The one text the classifier reads for a chunk and a claim (step 2)."""
        return TEMPLATE.format(text_a=chunk, text_b=claim)

    def chunks(self, document: str) -> list[str]:
        """The document's chunks (step 1): Inferencer.chunking_src, without its empty chunk (module docstring)."""
        chunks, current, words = [], [], 0
        for sentence in self.splitter(document):
            n = self.word_counter(sentence)
            if words + n <= self.chunk_size:
                current.append(sentence)
                words += n
            else:
                if current:  # the original appends the empty chunk too
                    chunks.append(JOIN.join(current).strip(JOIN))
                current, words = [sentence], n
        if words > 0:
            chunks.append(JOIN.join(current).replace(" \n ", JOIN).strip(JOIN).strip())
        return chunks or [""]
