"""MiniCheckScorer: MiniCheck's grounding check with its RoBERTa or DeBERTa-v3 (or a BERT) classifier.

The algorithm is the original's (Liyan06/MiniCheck minicheck/inference.py, Inferencer; the lines
cited are those of its file), the same for both variants but for the window:
  1. the document is split into sentences block by block (blocks are its newline-separated lines),
     with a "\\n" marker between blocks; no sentence gives one empty sentence (L17-26, L139-140);
  2. sentences are packed greedily into chunks of at most `chunk_size` tokens (each sentence counted
     without special tokens, at most the window), joined by a space; " \\n " becomes "\\n", chunks
     are stripped and empty ones dropped (L122-137, L142-143);
  3. each chunk is scored with the claim as ONE text, `chunk + eos + claim` (the tokenizer's eos:
     RoBERTa's "</s>", DeBERTa-v3's "[SEP]", so `[CLS] chunk [SEP] claim [SEP]`, one token type;
     L233), cut to the window at its end (L248-254); P(supported) = softmax(logits)[:, 1]; the score
     is the max over chunks (L158, L211, L217-218).
The window (max_model_len) is the variant's: 512 for roberta-large, 2048 for deberta-v3-large (L47-53),
chosen by the checkpoint's family (config.json model_type "deberta-v2"); DeBERTa's relative positions
have no table to outgrow. The claim is not split (L160-163). A document with no text at all is scored
as one empty chunk (where the original fails on an empty batch). The chunks given with return_details
are the chunks themselves (the original's used_chunks cut each text at "</s>", L257, which for DeBERTa
drops the text's last character instead). The runner contract is products/runner.py's: MiniCheck runs
its classifier's model through that classifier's engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Unpack

import torch

from minialign.products.choices import MINICHECK_CHUNK_SIZE as CHUNK_SIZE, MINICHECK_MODEL as DEFAULT_MODEL
from minialign.products.classifier import Classifier
from minialign.products.runner import LoadOptions, Loading, PairScorer, refuse_int8
from minialign.runtime.engine import Truncation
from minialign.text.sentences import split_sentences
from minialign.text.validation import check_texts, one_pair

# Inferencer's max_model_len (inference.py L47-53) by the checkpoint's family (Config.arch, config.json's
# model_type): deberta-v3-large 2048; roberta-large (and any other family) 512.
MAX_LENGTHS = {"deberta-v2": 2048}
MAX_LENGTH = 512
SUPPORTED = 1  # label index of "supported"
LABELS = ("unsupported", "supported")  # by label index, as MiniCheck's classifiers are trained (SUPPORTED)
NEWLINE = "\n"  # the block marker


class MiniCheckScorer(PairScorer):
    mode = "minicheck"  # what batch-scoring outputs record as the method
    truncation_unit, truncation_like = "chunk + claim text(s)", "the original MiniCheck"
    progress_label = "checking"

    def __init__(self, classifier: Classifier, *, chunk_size: int = CHUNK_SIZE,
                 splitter: Callable[[str], list[str]] | None = None, eos_token: str | None = None):
        if len(classifier.labels) != 2:
            raise ValueError(f"MiniCheck needs a two-label classifier (unsupported, supported), this one has "
                             f"{len(classifier.labels)}")
        if not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
        self.classifier, self.chunk_size = classifier, chunk_size
        self.model, self.tokenizer, self.engine, self.unpad = (classifier.model, classifier.tokenizer,
                                                               classifier.engine, classifier.unpad)
        self.splitter = splitter or split_sentences
        # MiniCheck joins chunk and claim with its tokenizer's eos token (L233: RoBERTa </s>; DeBERTa-v3 and
        # BERT-style [SEP]), the token that closes a single text
        self.eos_token = eos_token or classifier.tokenizer.end_token or "[SEP]"

    @classmethod
    def from_pretrained(cls, src: str | Path = DEFAULT_MODEL, *, chunk_size: int = CHUNK_SIZE,
                        splitter: Callable[[str], list[str]] | None = None,
                        **keywords: Unpack[Loading]) -> MiniCheckScorer:
        """A MiniCheck classifier directory or hub id (lytang/MiniCheck-RoBERTa-Large,
        lytang/MiniCheck-DeBERTa-v3-Large). The window is MiniCheck's for the checkpoint's family
        (MAX_LENGTHS). The keywords every runner takes are products/runner.py's (Loading)."""
        load = LoadOptions(**keywords)
        refuse_int8(load.dtype, "MiniCheckScorer")
        loaded = Classifier.from_pretrained(src, max_length=MAX_LENGTH, **load.only(
            "tokenizer", "device", "dtype", "cache_dir", "attn_backend", "revision", "adapter"))
        # the runner over the loaded model and tokenizer, with the window of the family the checkpoint is
        max_length = MAX_LENGTHS.get(loaded.model.config.arch, MAX_LENGTH)
        classifier = Classifier(loaded.model, loaded.tokenizer, max_length=max_length, **load.engine())
        classifier.source = loaded.source
        scorer = cls(classifier, chunk_size=chunk_size, splitter=splitter)
        scorer.source = str(src)
        return scorer

    def settings(self, **options) -> dict:
        """PairScorer.settings and the chunk size: a resumed file run must cut documents the same way."""
        return {**super().settings(**options), "chunk_size": self.chunk_size}

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The classifier's logits of one batch of chunk + claim texts."""
        return self.classifier.forward(batch)

    def chunks(self, document: str) -> list[str]:
        """The document's chunks (steps 1 and 2)."""
        sentences = []
        for block in document.split(NEWLINE):
            sentences += list(self.splitter(block)) + [NEWLINE]
        sentences = sentences[:-1] or [""]
        counts = [min(n, self.max_length) for n in self.classifier.tokenizer.token_counts(sentences)]
        chunks, current, tokens = [], [], 0
        for sentence, n in zip(sentences, counts):
            if tokens + n > self.chunk_size:
                chunks.append(" ".join(current))
                current, tokens = [sentence], n
            else:
                current.append(sentence)
                tokens += n
        if current:
            chunks.append(" ".join(current))
        chunks = [c.replace(" \n ", NEWLINE).strip() for c in chunks]
        return [c for c in chunks if c] or [""]

    def text(self, chunk: str, claim: str) -> str:
        """The one text the classifier reads for a chunk and a claim (MiniCheck's chunk, eos, claim)."""
        return chunk + self.eos_token + claim

    def score(self, documents: Sequence[str] | str, claims: Sequence[str] | str, *, return_details: bool = False,
              progress: bool = False, warn_truncation: bool | None = None,
              tally: Truncation | None = None) -> list[float] | list[dict]:
        """P(supported) per (document, claim): the max over the document's chunks; one document and one claim as
        strings give that example's alone (a float, or its dict). With
        return_details, per example: the score, the chunks, `supported` (each chunk's probability)
        and `truncated` (tokens each chunk + claim text lost to the window), as chunk x 1 lists.
        Truncation is reported as by every runner (warn_truncation, tally: products/runner.py)."""
        if one_pair(documents, claims, ("documents", "claims")):
            return self.score([documents], [claims], return_details=return_details, progress=progress,
                              warn_truncation=warn_truncation, tally=tally)[0]
        documents, claims = check_texts("documents", documents), check_texts("claims", claims)
        if len(documents) != len(claims):
            raise ValueError(f"documents and claims must have equal length, got {len(documents)} and {len(claims)}")
        chunked = [self.chunks(d) for d in documents]
        texts = [self.text(chunk, claim) for chunks, claim in zip(chunked, claims) for chunk in chunks]
        if not texts:
            return []
        results = self.run(texts, progress=progress)
        supported = torch.softmax(results.values, dim=-1)[:, SUPPORTED]
        self._count(results.truncated, warn_truncation, tally)
        out, start = [], 0
        for chunks in chunked:
            probs, cut = supported[start:start + len(chunks)], results.truncated[start:start + len(chunks)]
            start += len(chunks)
            score = probs.max().item()
            out.append(score if not return_details else
                       {"score": score, "chunks": chunks, "supported": [[p] for p in probs.tolist()],
                        "truncated": [[n] for n in cut.tolist()]})
        return out
