"""TokenClassifier: named entities and other per-token labels from *ForTokenClassification checkpoints, returning
what transformers' TokenClassificationPipeline returns (transformers pipelines/token_classification.py).

    ner = TokenClassifier.from_pretrained("path/or/hub-id")
    ner.predict("Hugging Face is based in New York", aggregation_strategy="simple")
    # [{"entity_group": "ORG", "score": 0.99, "word": "hugging face", "start": 0, "end": 12}, ...]

Each text gives a list of dicts, with the pipeline's keys:

  aggregation_strategy "none"   one dict per token that is not a special token: entity (its best label), score (its
                                softmax probability), index (its position in the window, special tokens counted),
                                word (the token as the vocabulary spells it: "##ing", "Ġworld"), start / end (its
                                character offsets in the text)
  "simple"                      the tokens' labels grouped: adjacent tokens whose labels name the same entity
                                (B-X then I-X, or a plain X) form one group unless a B- starts a new one;
                                entity_group (the label without B- / I-), score (the mean of its tokens'), word (the
                                tokens decoded), start / end
  "first" / "average" / "max"   first each word's tokens agree on one label: its first token's, the label of the mean
                                of its tokens' probabilities, or its most confident token's; then the words grouped
                                as "simple" groups tokens

A token continues a word when the tokenizer marks continuations (WordPiece's "##": its text is shorter than the
token), else when no space touches its start (the pipeline's fallback for byte-level BPE and SentencePiece, which
misreads words next to punctuation as it does there). Labels in `ignore_labels` (default "O") are left out.

The window is the model's: a longer text is cut, as the pipeline cuts it (truncation=True), and the cut is reported
as by every runner (products/runner.py); with `stride`, the text is read in overlapping windows instead, each
`stride` tokens into the one before (return_overflowing_tokens), and the entities of all windows are merged as the
pipeline merges them (aggregate_overlapping_entities: of entities that overlap, the longer, or the more confident).
The windows of every text run through the batching engine together (sorted, packed), one row of logits per token.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Unpack

import torch
from torch import Tensor

from minialign.loading import build, read_checkpoint
from minialign.models.head_models import TokenClassifierModel
from minialign.products.choices import AGGREGATIONS, NER_AGGREGATION
from minialign.products.runner import LoadOptions, Loading, OptionError, Runner, batch_lengths
from minialign.runtime.engine import Truncation
from minialign.sources import resolve
from minialign.text.tokenizer import Encoded, Tokenizer
from minialign.text.validation import check_texts

WORD_AGGREGATIONS = ("first", "average", "max")  # those that make every token of a word agree first
TRAINED = ("classifier.",)
NO_HEAD = ("A TokenClassifier needs a fine-tuned *ForTokenClassification checkpoint (config.json's architectures "
           "names one); to fine-tune a new head, load ma.TokenClassifierModel, whose new head starts the same in "
           "every run.")


class TokenClassifier(Runner):
    truncation_unit, truncation_like = "text(s)", "transformers' token-classification pipeline"
    progress_label = "tagging"

    def __init__(self, model: TokenClassifierModel, tokenizer: Tokenizer, *, batch_size: int | None = None,
                 max_tokens: int | None = None, max_length: int | None = None, unpad: bool | None = None, workers: int = 1,
                 compile: bool | str = False, threads: int | None = None):
        """The options: Runner._start."""
        self._start(model, tokenizer, max_length=max_length, batch_size=batch_size, max_tokens=max_tokens,
                    unpad=unpad, compile=compile, workers=workers, threads=threads)

    @classmethod
    def from_pretrained(cls, src: str | Path, *, max_length: int | None = None,
                        **keywords: Unpack[Loading]) -> TokenClassifier:
        """A transformers *ForTokenClassification directory or hub id, or a minialign directory of one. The keywords
        every runner takes are products/runner.py's (Loading)."""
        load = LoadOptions.of(keywords, f"{cls.__name__}.from_pretrained")
        source = resolve(src, revision=load.revision, cache_dir=load.cache_dir)
        ckpt = read_checkpoint(source, task=load.adapter)
        model = build(TokenClassifierModel, ckpt, require=TRAINED, advice=NO_HEAD,
                      **load.only("device", "dtype", "attn_backend"))
        tokenizer = load.open_tokenizer(source, ckpt.tokenizer)
        runner = cls(model, tokenizer, max_length=max_length, **load.engine())
        runner.source = str(src)
        return runner

    @property
    def labels(self) -> list[str]:
        """Label names by index (id2label)."""
        return list(self.model.config.labels)

    def check_options(self, *, aggregation_strategy: str = NER_AGGREGATION, ignore_labels: Iterable[str] = ("O",),
                      stride: int | None = None) -> tuple[str, ...]:
        """A call's options checked (OptionError naming the first refused); returns ignore_labels as a tuple."""
        if aggregation_strategy not in AGGREGATIONS:
            raise OptionError("aggregation_strategy", f"must be one of {AGGREGATIONS}, got {aggregation_strategy!r}")
        labels = None if isinstance(ignore_labels, str) or not isinstance(ignore_labels, Iterable) \
            else tuple(ignore_labels)
        if labels is None or not all(isinstance(label, str) for label in labels):
            raise OptionError("ignore_labels", f"must be a sequence of label names, got {ignore_labels!r}")
        if stride is not None and aggregation_strategy == "none":
            raise OptionError("stride", "reads a text in overlapping windows, whose tokens only an "
                                        "aggregation_strategy other than 'none' merges (as transformers' pipeline says)")
        if problem := self.tokenizer.stride_problem(stride, max_length=self.max_length):
            raise OptionError("stride", problem)
        return labels

    def settings(self, *, aggregation_strategy: str = NER_AGGREGATION, ignore_labels: Iterable[str] = ("O",),
                 stride: int | None = None) -> dict:
        """What a resumed file run must share (the options checked: check_options)."""
        ignore = self.check_options(aggregation_strategy=aggregation_strategy, ignore_labels=ignore_labels,
                                    stride=stride)
        return {**super().settings(), "aggregation_strategy": aggregation_strategy, "ignore_labels": list(ignore),
                "stride": stride}

    @torch.inference_mode()
    def predict(self, texts: Sequence[str] | str, *, aggregation_strategy: str = NER_AGGREGATION,
                ignore_labels: Sequence[str] = ("O",), stride: int | None = None, progress: bool = False,
                warn_truncation: bool | None = None, tally: Truncation | None = None) -> list:
        """Each text's entities (module docstring), a list of dicts per text in input order; one text as a string
        gives its list alone. stride: read a text longer than the window in windows overlapping by `stride` tokens
        (not with aggregation_strategy "none", which the pipeline refuses too). A refused option is an OptionError
        (a ValueError) naming it (check_options). Text cut by the window (without a stride) is reported as by every
        runner (warn_truncation, tally: products/runner.py)."""
        if isinstance(texts, str):
            return self.predict([texts], aggregation_strategy=aggregation_strategy, ignore_labels=ignore_labels,
                                stride=stride, progress=progress, warn_truncation=warn_truncation, tally=tally)[0]
        ignore_labels = self.check_options(aggregation_strategy=aggregation_strategy, ignore_labels=ignore_labels,
                                           stride=stride)
        texts = check_texts("texts", texts)
        if not texts:
            raise ValueError("texts is empty: give at least one text")
        windows = [self.tokenizer.encode_windows(text, max_length=self.max_length, stride=stride) for text in texts]
        flat = [window for text_windows in windows for window in text_windows]
        cut = [0 if stride is not None else sum(len(o.ids) - sum(o.special_tokens_mask) for o in w[0].overflowing)
               for w in windows]
        encoded = Encoded([w.ids for w in flat], [w.type_ids for w in flat], [0] * len(flat))
        logits = self.engine.run_encoded(encoded, self.forward,
                                         progress=self.progress_label if progress else False).values
        self._count(torch.tensor(cut, dtype=torch.long), warn_truncation, tally)
        out, at = [], 0
        for text, text_windows in zip(texts, windows):
            entities = []
            for window in text_windows:
                entities += self._entities(text, window, logits[at], aggregation_strategy, set(ignore_labels))
                at += 1
            out.append(merge_overlapping(entities) if len(text_windows) > 1 else entities)
        return out

    def forward(self, batch: dict[str, Tensor]) -> list[Tensor]:
        """float32 logits of each sequence's tokens, (n_i, num_labels) each (a ragged forward: runtime/engine.py)."""
        logits = self.model(**batch, unpad=self.unpad).logits.float()
        lengths = batch_lengths(batch)
        return [row[:n] for row, n in zip(logits, lengths)]

    __call__ = predict  # as the pipeline is called: ner(texts, aggregation_strategy=...)

    # -- transformers' TokenClassificationPipeline.postprocess, one window at a time --

    def _entities(self, text: str, window, logits: Tensor, strategy: str, ignore: set[str]) -> list[dict]:
        """One window's entities: softmax, gather_pre_entities, aggregate, the ignored labels left out."""
        scores = softmax(logits)
        tokens = self._pre_entities(text, window, scores)
        if strategy in ("none", "simple"):
            entities = [self._token_entity(token) for token in tokens]
        else:
            entities = [self._word_entity(word, strategy) for word in words(tokens)]
        if strategy != "none":
            entities = group_entities(entities, self.tokenizer)
        return [e for e in entities if e.get("entity") not in ignore and e.get("entity_group") not in ignore]

    def _pre_entities(self, text: str, window, scores: Tensor) -> list[dict]:
        """gather_pre_entities: every token but the special ones, with its scores, offsets and whether it continues
        a word."""
        tokenizer, unk = self.tokenizer, self.tokenizer.unk_token_id
        word_aware = tokenizer.word_aware
        out = []
        for index, (token_id, special, (start, end)) in enumerate(zip(window.ids, window.special_tokens_mask,
                                                                      window.offsets)):
            if special:
                continue
            word = tokenizer.backend.id_to_token(token_id)
            reference = text[start:end]
            if word_aware:
                subword = len(word) != len(reference)
            else:  # the pipeline's fallback heuristic
                subword = start > 0 and " " not in text[start - 1:start + 1]
            if token_id == unk:
                word, subword = reference, False
            out.append({"word": word, "scores": scores[index], "start": start, "end": end, "index": index,
                        "is_subword": subword})
        return out

    def _token_entity(self, token: dict) -> dict:
        best = int(token["scores"].argmax())
        return {"entity": self.labels[best], "score": float(token["scores"][best]), "index": token["index"],
                "word": token["word"], "start": token["start"], "end": token["end"]}

    def _word_entity(self, tokens: list[dict], strategy: str) -> dict:
        """aggregate_word: one word's tokens under one label (first / max / average)."""
        if strategy == "first":
            scores = tokens[0]["scores"]
        elif strategy == "max":
            scores = max(tokens, key=lambda token: float(token["scores"].max()))["scores"]
        else:
            scores = torch.stack([token["scores"] for token in tokens]).nanmean(dim=0)
        best = int(scores.argmax())
        return {"entity": self.labels[best], "score": float(scores[best]),
                "word": self.tokenizer.tokens_to_string([token["word"] for token in tokens]),
                "start": tokens[0]["start"], "end": tokens[-1]["end"]}


def softmax(logits: Tensor) -> Tensor:
    """(n, labels) float32 -> probabilities, as the pipeline computes them (exp of the logits less their max)."""
    shifted = (logits - logits.max(dim=-1, keepdim=True).values).exp()
    return shifted / shifted.sum(dim=-1, keepdim=True)


def words(tokens: list[dict]) -> list[list[dict]]:
    """aggregate_words: the tokens in words, a word's continuing tokens after its first."""
    out: list[list[dict]] = []
    for token in tokens:
        if out and token["is_subword"]:
            out[-1].append(token)
        else:
            out.append([token])
    return out


def tag(label: str) -> tuple[str, str]:
    """get_tag: ("B" | "I", the entity) of a label; a label without B- / I- continues ("I")."""
    if label.startswith("B-"):
        return "B", label[2:]
    if label.startswith("I-"):
        return "I", label[2:]
    return "I", label


def group_entities(entities: list[dict], tokenizer: Tokenizer) -> list[dict]:
    """group_entities: adjacent entities of the same tag, a B- starting a new group; each group's entity (its first
    label without B- / I-), mean score, words decoded together and span."""
    groups: list[list[dict]] = []
    for entity in entities:
        bi, name = tag(entity["entity"])
        if groups and name == tag(groups[-1][-1]["entity"])[1] and bi != "B":
            groups[-1].append(entity)
        else:
            groups.append([entity])
    return [{"entity_group": group[0]["entity"].split("-", 1)[-1],
             "score": float(torch.tensor([e["score"] for e in group], dtype=torch.float64).nanmean()),
             "word": tokenizer.tokens_to_string([e["word"] for e in group]),
             "start": group[0]["start"], "end": group[-1]["end"]} for group in groups]


def merge_overlapping(entities: list[dict]) -> list[dict]:
    """aggregate_overlapping_entities: the entities of overlapping windows by start; of two that overlap, the longer
    stays, or at equal length the more confident."""
    if not entities:
        return entities
    entities = sorted(entities, key=lambda e: e["start"])
    merged, previous = [], entities[0]
    for entity in entities:
        if previous["start"] <= entity["start"] < previous["end"]:
            length, previous_length = entity["end"] - entity["start"], previous["end"] - previous["start"]
            if length > previous_length or length == previous_length and entity["score"] > previous["score"]:
                previous = entity
        else:
            merged.append(previous)
            previous = entity
    merged.append(previous)
    return merged
