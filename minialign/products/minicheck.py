"""MiniCheckScorer: MiniCheck's grounding check with its RoBERTa or DeBERTa-v3 (or a BERT) classifier, and
MiniCheckT5Scorer with MiniCheck-Flan-T5.

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

MiniCheckT5Scorer runs MiniCheck-Flan-T5-Large (lytang/MiniCheck-Flan-T5-Large, a T5ForConditionalGeneration): the
T5 encoder and the decoder's first step alone (models/t5.py T5LabelLogits). The algorithm is the original's flan-t5
path (inference.py and minicheck.py MiniCheck), MiniCheckScorer's but for:
  1. chunking counts words, not tokens: a sentence weighs `len(sentence.split())` (L108-121), and a chunk holds at
     most `chunk_size` = 500 words (minicheck.py MiniCheck._score_inferencer: 500 for flan-t5-large);
  2. each chunk and the claim are ONE text, `"predict: " + chunk + eos + claim` (L233 joins them with the
     tokenizer's eos_token, "</s>", L241 prefixes "predict: "), the T5 tokenizer's `</s>` appended, cut at its
     end to max_model_len = 2048 tokens (L43, L240-246: truncation=True), every cut reported (products/runner.py);
  3. the model runs the encoder and one decoder step from decoder_input_ids = 0 (L199), and reads the logits of
     tokens 3 ("no support") and 209 ("support") at that step (L204); P(supported) = softmax over those two logits,
     column 1 (L205, L217); the score is the max over chunks (L218), as MiniCheckScorer's.
MiniCheckScorer.from_pretrained loads a T5 checkpoint (config.json model_type "t5") as MiniCheckT5Scorer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Unpack

import torch

from minialign import convert
from minialign.convert.families import t5 as t5_format
from minialign.loading.checkpoints import Checkpoint
from minialign.loading.weights import build
from minialign.models.encoder import Encoder
from minialign.models.t5 import T5DecoderStep, T5LabelLogits
from minialign.nn.config import Config
from minialign.products.choices import MINICHECK_CHUNK_SIZE as CHUNK_SIZE, MINICHECK_MODEL as DEFAULT_MODEL
from minialign.products.choices import MINICHECK_T5_CHUNK_WORDS as CHUNK_WORDS  # words per chunk for flan-t5-large
from minialign.products.classifier import Classifier
from minialign.products.runner import LoadOptions, Loading, PairScorer, refuse_int8
from minialign.runtime.engine import Truncation
from minialign.sources import Source, resolve
from minialign.text.sentences import split_sentences
from minialign.text.tokenizer import Tokenizer
from minialign.text.validation import check_texts, one_pair

# Inferencer's max_model_len (inference.py L47-53) by the checkpoint's family (Config.arch, config.json's
# model_type): deberta-v3-large 2048; roberta-large (and any other family) 512.
MAX_LENGTHS = {"deberta-v2": 2048}
MAX_LENGTH = 512
SUPPORTED = 1  # label index of "supported"
LABELS = ("unsupported", "supported")  # by label index, as MiniCheck's classifiers are trained (SUPPORTED)
NEWLINE = "\n"  # the block marker


def model_type(source: Source) -> str | None:
    """config.json's model_type of a checkpoint directory or hub id (None: a single file, or no config.json)."""
    path = None if source.is_file else source.file("config.json", optional=True)
    return None if path is None else convert.read_json(path).get("model_type")


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
    def from_pretrained(cls, src: str | Path = DEFAULT_MODEL, *, chunk_size: int | None = None,
                        splitter: Callable[[str], list[str]] | None = None,
                        **keywords: Unpack[Loading]) -> MiniCheckScorer:
        """A MiniCheck classifier directory or hub id (lytang/MiniCheck-RoBERTa-Large,
        lytang/MiniCheck-DeBERTa-v3-Large), or MiniCheck-Flan-T5 (lytang/MiniCheck-Flan-T5-Large: config.json's
        model_type "t5"), which loads as MiniCheckT5Scorer. The window is MiniCheck's
        for the checkpoint's family (MAX_LENGTHS). chunk_size: tokens per chunk (None: CHUNK_SIZE; the T5 model's
        are words, its own default). The keywords every runner takes are products/runner.py's (Loading)."""
        load = LoadOptions(**keywords)
        refuse_int8(load.dtype, "MiniCheckScorer")
        source = resolve(src, revision=load.revision, cache_dir=load.cache_dir)  # decided once, read by both paths
        if cls is MiniCheckScorer and model_type(source) == "t5":
            scorer = MiniCheckT5Scorer.from_pretrained(source, chunk_size=chunk_size, splitter=splitter, **keywords)
            scorer.source = str(src)
            return scorer
        chunk_size = CHUNK_SIZE if chunk_size is None else chunk_size
        loaded = Classifier.from_pretrained(source, max_length=MAX_LENGTH, **load.only(
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
        counts = self.counts(sentences)
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

    def counts(self, sentences: list[str]) -> list[int]:
        """Each sentence's weight in a chunk: its tokens without special tokens, at most the window (L126-128)."""
        return [min(n, self.max_length) for n in self.classifier.tokenizer.token_counts(sentences)]

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


# MiniCheck-Flan-T5 (module docstring)
T5_MODEL = "lytang/MiniCheck-Flan-T5-Large"  # Inferencer.__init__'s ckpt for flan-t5-large (L39)
T5_MAX_LENGTH = 2048  # Inferencer.__init__'s max_model_len for flan-t5-large (L43): tokens of one text
T5_PREFIX = "predict: "  # batch_tokenize's prefix of every flan-t5 text (L241)
T5_START = 0  # the decoder's one input id (L199: torch.zeros), T5's pad / decoder_start_token_id
T5_LABEL_IDS = (3, 209)  # L203-204: "3 for no support and 209 for support", by label index (minicheck.py SUPPORTED)


class MiniCheckT5Scorer(MiniCheckScorer):
    truncation_unit = "predict: chunk + claim text(s)"

    def __init__(self, model: T5LabelLogits, tokenizer: Tokenizer, *, chunk_size: int = CHUNK_WORDS,
                 splitter: Callable[[str], list[str]] | None = None, max_length: int = T5_MAX_LENGTH,
                 batch_size: int | None = None, max_tokens: int | None = None, unpad: bool | None = None,
                 workers: int = 1, compile: bool | str = False, threads: int | None = None):
        """model: the encoder and the decoder step reading T5_LABEL_IDS' logits; chunk_size: words per chunk;
        max_length: the window of one text (MiniCheck's 2048). The other options: Runner._start."""
        if not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
        self.chunk_size, self.splitter = chunk_size, splitter or split_sentences
        self.eos_token = tokenizer.end_token or "</s>"  # L233: the T5 tokenizer's eos_token
        self._start(model, tokenizer, max_length=max_length, batch_size=batch_size, max_tokens=max_tokens,
                    unpad=unpad, compile=compile, workers=workers, threads=threads)

    @classmethod
    def from_pretrained(cls, src: str | Path = T5_MODEL, *, chunk_size: int | None = None,
                        splitter: Callable[[str], list[str]] | None = None,
                        **keywords: Unpack[Loading]) -> MiniCheckT5Scorer:
        """A MiniCheck-Flan-T5 directory or hub id: config.json (model_type "t5") and the
        T5ForConditionalGeneration's weights; the encoder, the decoder's layers, its final norm and lm_head's two
        label rows are read (lm_head where the file holds one, else the shared embedding, as transformers ties
        them). chunk_size: words per chunk (None: CHUNK_WORDS). The keywords every runner takes are
        products/runner.py's (Loading)."""
        load = LoadOptions.of(keywords, f"{cls.__name__}.from_pretrained")
        refuse_int8(load.dtype, cls.__name__)
        source = resolve(src, revision=load.revision, cache_dir=load.cache_dir)
        data = convert.read_json(source.file("config.json"))
        config = Config.from_hf(data, source=f"{source}/config.json")
        if config.arch != "t5":
            raise ValueError(f"{source}: MiniCheck-Flan-T5 is a T5 model (config.json model_type 't5'), this one's "
                             f"is {config.arch!r}")
        weights = convert.find_weights(source)
        tensors = convert.read_state_dict(weights)
        decoder = {k: tensors.pop(k) for k in list(tensors) if k.startswith(("decoder.", "lm_head."))}
        if not decoder:
            raise ValueError(f"{weights}: no decoder weights: MiniCheck-Flan-T5 reads a T5ForConditionalGeneration "
                             f"(a T5EncoderModel has no decoder to score with)")
        renamed, dropped = convert.hf_to_minialign(tensors, config.format, source=str(weights))
        encoder = build(Encoder, Checkpoint(config, renamed, str(weights), source, dropped, layout="hf"),
                        **load.only("device", "dtype", "attn_backend"))
        steps, _ = convert.hf_to_minialign(decoder, t5_format.DECODER_STEP_NAMES, source=str(weights))
        layers, scale = t5_format.decoder_step_config(data)
        step = T5DecoderStep.from_tensors(config, steps, shared=encoder.embeddings.word.weight.detach(),
                                          start_id=T5_START, label_ids=T5_LABEL_IDS, scale=scale)
        if len(step.layers) != layers:
            raise ValueError(f"{weights}: {len(step.layers)} decoder layers, config.json says {layers}")
        scorer = cls(T5LabelLogits(encoder, step).eval(), load.open_tokenizer(source),
                     chunk_size=CHUNK_WORDS if chunk_size is None else chunk_size, splitter=splitter,
                     **load.engine())
        scorer.source = str(src)
        return scorer

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The two label logits (no support, support) of one batch of texts, (b, 2) float32."""
        return self.model(**batch, unpad=self.unpad)

    def counts(self, sentences: list[str]) -> list[int]:
        """Each sentence's weight in a chunk: its whitespace-separated words (L112)."""
        return [len(sentence.split()) for sentence in sentences]

    def text(self, chunk: str, claim: str) -> str:
        """The one text the model reads for a chunk and a claim (L233, L241)."""
        return T5_PREFIX + chunk + self.eos_token + claim
