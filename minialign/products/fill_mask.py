"""FillMask: the likeliest tokens for the masked positions of a text, from any family's *ForMaskedLM checkpoint,
returning what transformers' FillMaskPipeline returns (transformers pipelines/fill_mask.py).

    fill = FillMask.from_pretrained("path/or/hub-id")
    fill.predict("Paris is the [MASK] of France.")          # fill.mask_token: this model's spelling of the mask
    # [{"score": 0.91, "token": 3007, "token_str": "capital", "sequence": "paris is the capital of france."}, ...]

Each mask gives its `top_k` (default 5) likeliest tokens, best first, as dicts with the pipeline's keys in its order:

  score      the token's probability: the softmax of the mask position's logits over the whole vocabulary
  token      its id
  token_str  the token decoded alone (special tokens kept)
  sequence   the text's tokens with the mask replaced by it, padding ids left out, decoded: special tokens skipped
             for a text of one mask; for a text of several, each mask's candidates replace that mask alone, and the
             sequence keeps every special token (the other masks, [CLS], [SEP]), as the pipeline decodes it

A text of one mask gives its list of candidates; a text of several, a list per mask (FillMaskPipeline.postprocess:
each mask scored on its own, not jointly). `targets` (a word or a list) restricts the scores to those tokens (their
probabilities under the softmax over the whole vocabulary), top_k then at most their number; a target the vocabulary
lacks is tokenized and its first token used, with a warning, and one that tokenizes to nothing is left out with a
warning (FillMaskPipeline.get_target_ids); none left is an error.

The texts run through the batching engine packed, sorted by length; the masked-LM head runs for the mask positions
alone (MLMHead.features and decode on their final states: no vocabulary logits for any other token), in blocks of at
most BLOCK_BYTES of probabilities. The window is the model's: a longer text is cut, as the pipeline cuts it with
tokenizer_kwargs={"truncation": True}, and the cut is reported as by every runner (products/runner.py); the masks cut
off are not predicted, and a text whose masks are all cut is refused.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Unpack

import torch
from torch import Tensor

from minialign.loading import build, read_checkpoint
from minialign.models.head_models import MaskedLMModel
from minialign.products.choices import FILL_MASK_TOP_K
from minialign.products.runner import LoadOptions, Loading, OptionError, Runner
from minialign.runtime.engine import Truncation
from minialign.sources import resolve
from minialign.text.tokenizer import Encoded, Tokenizer
from minialign.text.validation import check_texts, value_problem

BLOCK_BYTES = 256 << 20  # the most mask probabilities (masks x vocabulary, float32) one block of texts keeps
MASK_SPELLINGS = ("[MASK]", "<mask>", "[mask]", "<MASK>")  # how other families' tokenizers spell the mask
NO_HEAD = "FillMask reads masked-LM logits: give the directory of a *ForMaskedLM model"


class FillMask(Runner):
    truncation_unit, truncation_like = "text(s)", "transformers' fill-mask pipeline with truncation=True"
    progress_label = "filling masks"

    def __init__(self, model: MaskedLMModel, tokenizer: Tokenizer, *, batch_size: int | None = None,
                 max_tokens: int | None = None, max_length: int | None = None, unpad: bool | None = None, workers: int = 1,
                 compile: bool | str = False, threads: int | None = None):
        """A MaskedLMModel and a tokenizer that has a mask token. The other options: Runner._start."""
        if not isinstance(model, MaskedLMModel):
            raise ValueError(f"FillMask runs a MaskedLMModel, got {type(model).__name__}")
        mask = tokenizer.mask_token
        mask_id = None if mask is None else tokenizer.backend.token_to_id(mask)
        if mask_id is None:  # FillMaskPipeline._sanitize_parameters refuses it too
            raise ValueError(f"the tokenizer defines no mask token (mask_token {mask!r} in tokenizer_config.json or "
                             f"special_tokens_map.json, in its vocabulary): FillMask predicts masked tokens")
        self._mask, self._mask_id = mask, mask_id
        self._start(model, tokenizer, max_length=max_length, batch_size=batch_size, max_tokens=max_tokens,
                    unpad=unpad, compile=compile, workers=workers, threads=threads)

    @classmethod
    def from_pretrained(cls, src: str | Path, *, max_length: int | None = None,
                        **keywords: Unpack[Loading]) -> FillMask:
        """A transformers *ForMaskedLM directory or hub id (every family: models/head_models.py MaskedLMModel, its decoder
        tied to the word embeddings as the checkpoint has it), or a minialign directory of one. max_length: a window
        shorter than the model's. The keywords every runner takes are products/runner.py's (Loading)."""
        load = LoadOptions.of(keywords, f"{cls.__name__}.from_pretrained")
        source = resolve(src, revision=load.revision, cache_dir=load.cache_dir)
        ckpt = read_checkpoint(source, task=load.adapter)
        model = build(MaskedLMModel, ckpt, require=("mlm_head.",), advice=NO_HEAD,
                      **load.only("device", "dtype", "attn_backend"))
        tokenizer = load.open_tokenizer(source, ckpt.tokenizer)
        runner = cls(model, tokenizer, max_length=max_length, **load.engine())
        runner.source = str(src)
        return runner

    @property
    def mask_token(self) -> str:
        """The token a text marks a position to predict with ("[MASK]" for BERT, "<mask>" for RoBERTa)."""
        return self._mask

    @property
    def mask_token_id(self) -> int:
        return self._mask_id

    def calibration_module(self):
        """dtype="int8" calibrates the encoder alone (the masked-LM head holds no quantized layer, and its vocabulary
        logits are never made for every token)."""
        return self.model.encoder

    def check_options(self, *, top_k: int = FILL_MASK_TOP_K, targets: str | Sequence[str] | None = None) -> list[int] | None:
        """A call's options checked (OptionError naming the first refused, before any text is read); returns the
        targets' ids (None: every token), resolved without the warnings predict gives (target_ids)."""
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise OptionError("top_k", f"must be a positive integer, got {top_k!r}")
        if targets is None:
            return None
        ids, _ = self._resolve_targets(targets)
        return self._some_targets(ids, targets)

    def settings(self, *, top_k: int = FILL_MASK_TOP_K, targets: str | Sequence[str] | None = None) -> dict:
        """What a call with these options depends on, beside the weights (a resumed file run compares them); the
        options checked (check_options)."""
        self.check_options(top_k=top_k, targets=targets)
        targets = [targets] if isinstance(targets, str) else None if targets is None else list(targets)
        return {**super().settings(), "max_length": self.max_length, "top_k": top_k, "targets": targets}

    def check(self, text, *, null: str = "None") -> str | None:
        """What is wrong with one text before any model work (not text, no mask token, its masks all past the
        window), or None: a face's row or request check. `null` is how a missing value is named (None in Python,
        null in JSON)."""
        if problem := value_problem(text, null=null):
            return problem
        ids = self.tokenizer.backend.encode(text, add_special_tokens=False).ids
        if self._mask_id not in ids:
            return self._no_mask(text)
        if self._mask_id not in self.tokenizer.encode_ids([text], max_length=self.max_length).ids[0]:
            return self._past_window()
        return None

    def _past_window(self) -> str:
        return f"has its {self._mask} tokens past the {self.max_length}-token window only"

    def _no_mask(self, text: str) -> str:
        other = [spelling for spelling in MASK_SPELLINGS if spelling != self._mask and spelling in text]
        if other:
            return (f"has no {self._mask} token: it writes the mask as {other[0]!r}, and this model's mask token is "
                    f"{self._mask!r}")
        return f"has no {self._mask} token: mark the position to predict with {self._mask!r}"

    # -- calls --

    @torch.inference_mode()
    def predict(self, texts: Sequence[str] | str, *, top_k: int = FILL_MASK_TOP_K, targets: str | Sequence[str] | None = None,
                progress: bool = False, warn_truncation: bool | None = None, tally: Truncation | None = None) -> list:
        """Each text's candidates (module docstring), in input order: a list of dicts per text of one mask, a list of
        such lists (one per mask) for a text of several; one text as a string gives its result alone. top_k: how
        many candidates per mask (at most the vocabulary, or the targets); targets: a token or a list of them, the
        only candidates scored; a refused option is an OptionError (a ValueError) naming it (check_options). Text
        cut by the window is reported as by every runner (warn_truncation, tally: products/runner.py)."""
        if isinstance(texts, str):
            return self.predict([texts], top_k=top_k, targets=targets, progress=progress,
                                warn_truncation=warn_truncation, tally=tally)[0]
        self.check_options(top_k=top_k)
        target_ids = None if targets is None else self._target_ids(targets, stacklevel=4)  # the caller's line
        texts = check_texts("texts", texts)
        if not texts:
            raise ValueError("texts is empty: give at least one text")
        encoded = self.tokenizer.encode_ids(texts, max_length=self.max_length)
        positions = [[j for j, token in enumerate(ids) if token == self._mask_id] for ids in encoded.ids]
        self._check_masks(texts, encoded, positions)
        self._count(torch.tensor(encoded.truncated, dtype=torch.long), warn_truncation, tally)
        out = []
        for block in self._blocks(positions):
            part = Encoded([encoded.ids[i] for i in block], [encoded.type_ids[i] for i in block], [0] * len(block))
            probs = self.engine.run_encoded(part, self.forward,
                                            progress=self.progress_label if progress else False).values
            out += [self._candidates(encoded.ids[i], positions[i], p, top_k, target_ids) for i, p in zip(block, probs)]
        return out

    __call__ = predict  # as the pipeline is called

    def target_ids(self, targets: str | Sequence[str]) -> list[int]:
        """The ids of `targets` (FillMaskPipeline.get_target_ids): a target the vocabulary holds (added tokens
        included) as it is; another, its first token, with a warning; one that tokenizes to nothing is left out with
        a warning; duplicates once (in the pipeline's order: list(set(ids))). None left: an OptionError (a
        ValueError) naming targets."""
        return self._target_ids(targets, stacklevel=3)

    def _target_ids(self, targets: str | Sequence[str], *, stacklevel: int) -> list[int]:
        ids, notes = self._resolve_targets(targets)
        for note in notes:
            warnings.warn(note, stacklevel=stacklevel)
        return self._some_targets(ids, targets)

    def _resolve_targets(self, targets: str | Sequence[str]) -> tuple[list[int], list[str]]:
        """(the targets' ids, once each, in the pipeline's order; the pipeline's warnings for those replaced or left
        out), as FillMaskPipeline.get_target_ids resolves them."""
        targets = [targets] if isinstance(targets, str) else targets
        if not isinstance(targets, Sequence) or not all(isinstance(t, str) for t in targets):
            raise OptionError("targets", f"must be a string or a sequence of strings, got {targets!r}")
        backend = self.tokenizer.backend
        vocab = backend.get_vocab(with_added_tokens=True)
        ids, notes = [], []
        for target in targets:
            id_ = vocab.get(target)
            if id_ is None:
                pieces = backend.encode(target, add_special_tokens=False).ids
                if not pieces:
                    notes.append(f"The specified target token `{target}` does not exist in the model vocabulary. We "
                                 f"cannot replace it with anything meaningful, ignoring it")
                    continue
                id_ = pieces[0]
                notes.append(f"The specified target token `{target}` does not exist in the model vocabulary. "
                             f"Replacing with `{backend.id_to_token(id_)}`.")
            ids.append(id_)
        return list(set(ids)), notes

    def _some_targets(self, ids: list[int], targets: str | Sequence[str]) -> list[int]:
        """The resolved ids, or an OptionError where none is left or one is beyond the model's vocabulary."""
        if not ids:
            raise OptionError("targets", f"has no token of the vocabulary ({targets!r}): At least one target must be "
                                         f"provided when passed")
        vocab_size = self.model.config.vocab_size
        if any(i >= vocab_size for i in ids):  # an added token the model has no row for
            raise OptionError("targets", f"{targets!r} name token ids {sorted(i for i in ids if i >= vocab_size)}, "
                                         f"beyond the model's vocabulary of {vocab_size}")
        return ids

    def _check_masks(self, texts: list[str], encoded: Encoded, positions: list[list[int]]) -> None:
        """Every text has a mask within the window, or a ValueError naming each that has none."""
        problems = []
        for i, (text, found) in enumerate(zip(texts, positions)):
            if found:
                continue
            if encoded.truncated[i] and self._mask_id in self.tokenizer.backend.encode(text).ids:
                problems.append(f"texts[{i}] {self._past_window()}")
            else:
                problems.append(f"texts[{i}] {self._no_mask(text)}")
        if problems:
            raise ValueError("; ".join(problems))

    def _blocks(self, positions: list[list[int]]) -> list[list[int]]:
        """Consecutive texts whose masks' probabilities fit BLOCK_BYTES (a text of more masks alone)."""
        room = max(1, BLOCK_BYTES // (4 * self.model.config.vocab_size))
        blocks, current, masks = [], [], 0
        for i, found in enumerate(positions):
            if current and masks + len(found) > room:
                blocks.append(current)
                current, masks = [], 0
            current.append(i)
            masks += len(found)
        return blocks + [current] if current else blocks

    # -- one batch --

    def forward(self, batch: dict[str, Tensor]) -> list[Tensor]:
        """float32 probabilities over the vocabulary of each sequence's mask positions, (m_i, V) each (a ragged
        forward: runtime/engine.py): the head on the masks' final states alone, softmax over each row
        (FillMaskPipeline.postprocess: logits[masked_index].softmax(-1))."""
        ids = batch["input_ids"]
        hidden = self.model.encoder(**batch, unpad=self.unpad).last_hidden_state  # (B, L, C)
        at = (ids == self._mask_id) & batch["attention_mask"].bool()  # (B, L)
        head = self.model.mlm_head
        logits = head.decode(head.features(hidden[at]), self.model.encoder.embeddings.word.weight)  # (M, V), row-major
        probs = logits.float().softmax(dim=-1)
        return list(probs.split(at.sum(dim=1).tolist()))

    # -- FillMaskPipeline.postprocess, one text at a time --

    def _candidates(self, ids: list[int], positions: list[int], probs: Tensor, top_k: int,
                    target_ids: list[int] | None) -> list:
        """Each mask's top_k candidates as the pipeline's dicts; one mask: its list, several: a list per mask."""
        if target_ids is not None:
            probs = probs[:, target_ids]
        values, predictions = probs.topk(min(top_k, probs.size(-1)))
        single = len(positions) == 1
        pad, decode = self.tokenizer.pad_token_id, self.tokenizer.decode
        out = []
        for at, row_values, row_predictions in zip(positions, values.tolist(), predictions.tolist()):
            row = []
            for value, prediction in zip(row_values, row_predictions):
                token = target_ids[prediction] if target_ids is not None else prediction
                filled = ids[:at] + [token] + ids[at + 1:]
                filled = [t for t in filled if t != pad]  # the pipeline leaves padding ids out, the token's too
                row.append({"score": value, "token": token,
                            "token_str": decode([token], skip_special_tokens=False, clean_up_tokenization_spaces=None),
                            "sequence": decode(filled, skip_special_tokens=single, clean_up_tokenization_spaces=None)})
            out.append(row)
        return out[0] if single else out
