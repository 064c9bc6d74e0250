"""A thin wrapper over `tokenizers`: encode single texts or pairs, truncate, pad to the longest in the batch,
return tensors. Ids equal transformers' fast tokenizers on the same files; which files, and how each is read:
backend.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor
from tokenizers import Tokenizer as HFTokenizer

from minialign.sources import Source, resolve
from minialign.text.backend import (NO_TOKEN_TYPES, SPECIAL_TOKEN_NAMES, TOKENIZER_FILES, WORDPIECE_CLASSES,
                                    read_backend, read_settings, token_str, tokenizer_class_of)
from minialign.text.validation import text_problem

TRUNCATIONS = ("only_first", "longest_first")  # for pairs; a single text always loses its end
ENCODE_BLOCK = 1024  # distinct texts tokenized per call: bounds the memory of the encodings in flight


@dataclass
class Encoded:
    """Token ids of a batch of texts or pairs, unpadded, and the tokens each lost to the window."""

    ids: list[list[int]]
    type_ids: list[list[int]]
    truncated: list[int]  # tokens cut from each input (pairs: from the first text, or both on fallback)


# transformers' clean_up_tokenization (tokenization_utils_base.py): spaces the decoder left before punctuation and
# contractions, replaced in this order
CLEAN_UP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
            (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


class Tokenizer:
    def __init__(self, tokenizer: HFTokenizer, *, pad_token: str, model_max_length: int = 512,
                 return_token_type_ids: bool = True):
        pad_id = tokenizer.token_to_id(pad_token)
        if pad_id is None:
            raise ValueError(f"pad token {pad_token!r} is not in the vocabulary")
        tokenizer.no_truncation()  # a tokenizer.json may carry its own settings (all-MiniLM-L6-v2 pads to 128)
        tokenizer.no_padding()
        self.backend = tokenizer
        self.pad_token, self.pad_token_id = pad_token, pad_id
        self.model_max_length = model_max_length
        self.return_token_type_ids = return_token_type_ids
        self._templates: dict[bool, tuple[tuple, ...]] = {}  # _template's, per pair / single
        # role (SPECIAL_TOKEN_NAMES) -> token, as the tokenizer files name them (special_tokens_map.json,
        # tokenizer_config.json: transformers' special_tokens_map); the pad token always
        self.special_tokens: dict[str, str] = {"pad_token": pad_token}
        # decode's clean-up of spaces before punctuation (tokenizer_config.json's, transformers' default False)
        self.clean_up_tokenization_spaces = False
        self.clean_up_bpe = False  # clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output
        # tokenizer_config.json's model_max_length as saved (None: none; model_max_length is then 512), and its
        # truncation_side (which end a cut loses: the chat-template path reads it, text/chat_template.py)
        self.saved_max_length: int | None = model_max_length
        self.truncation_side = "right"

    @classmethod
    def from_pretrained(cls, src: str | Path | Source, *, revision: str | None = None,
                        cache_dir: str | Path | None = None) -> Tokenizer:
        """From a directory (HF, minialign) or a hub repo id (sources.resolve decides which)."""
        return cls.from_source(resolve(src, revision=revision, cache_dir=cache_dir))

    @classmethod
    def from_source(cls, source: Source) -> Tokenizer:
        """From a resolved source: its tokenizer files (from the hub, those the repo has, fetched)."""
        if not source.present(TOKENIZER_FILES):
            raise FileNotFoundError(f"{source}: no tokenizer.json, vocab.json + merges.txt, or vocab.txt")
        return cls.from_dir(source.path)

    @classmethod
    def from_dir(cls, directory: str | Path) -> Tokenizer:
        directory = Path(directory)
        settings = read_settings(directory)
        tokenizer_class = tokenizer_class_of(settings)
        settings = {**WORDPIECE_CLASSES.get(tokenizer_class, {}), **settings}
        saved = settings.get("model_max_length")
        saved = saved if isinstance(saved, int) and 0 < saved < 1_000_000 else None  # transformers' "none" is 1e30
        backend, pad = read_backend(directory, settings, tokenizer_class)
        tok = cls(backend, pad_token=pad, model_max_length=saved or 512)
        tok.saved_max_length = saved
        side = settings.get("truncation_side")
        tok.truncation_side = side if side in ("left", "right") else "right"
        tok.special_tokens.update({name: token for name in SPECIAL_TOKEN_NAMES
                                   if name != "pad_token" and (token := token_str(settings.get(name)))})
        tok.clean_up_tokenization_spaces = settings.get("clean_up_tokenization_spaces") is True
        force = "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output"
        tok.clean_up_bpe = settings.get(force) is True
        names = settings.get("model_input_names")
        if isinstance(names, list):
            tok.return_token_type_ids = "token_type_ids" in names
        elif tokenizer_class in NO_TOKEN_TYPES:
            tok.return_token_type_ids = False
        else:  # BERT's template types the second text 1; RoBERTa's types nothing
            tok.return_token_type_ids = any(item[-1] != 0 for item in tok._template(True))
        return tok

    def __call__(self, text: str | Sequence[str], text_pair: str | Sequence[str] | None = None, *,
                 max_length: int | None = None) -> dict[str, torch.Tensor]:
        """Encode texts (or pairs), truncated to max_length, padded to the longest; tensors (B, L).

        Pairs truncate the first text only; a pair whose second text alone does not fit falls
        back to longest-first truncation (both texts shortened).
        """
        texts = _as_list(text, "text")
        pairs = None if text_pair is None else _as_list(text_pair, "text_pair")
        if pairs is not None and len(pairs) != len(texts):
            raise ValueError(f"text has {len(texts)} items but text_pair has {len(pairs)}")
        encoded = self.encode_ids(texts, pairs, max_length=max_length or self.model_max_length)
        return pad(encoded.ids, encoded.type_ids, pad_id=self.pad_token_id, token_types=self.return_token_type_ids)

    def encode(self, texts: list[str], pairs: list[str] | None = None, *, max_length: int | None = None,
               truncation: str = "only_first"):
        """tokenizers Encodings (no padding) under the truncation rule of __call__, truncated by `tokenizers`
        itself; for pairs, truncation="longest_first" shortens the longer text first (transformers'
        truncation=True). The reference `encode_ids` is tested against: `tokenizers` makes every
        overflowing piece of both texts when it cuts a pair, so a long pair costs memory quadratic in
        its length (huggingface/tokenizers#2035); the runners use `encode_ids`."""
        if truncation not in TRUNCATIONS:
            raise ValueError(f"truncation must be one of {TRUNCATIONS}, got {truncation!r}")
        max_length = max_length or self.model_max_length
        tok = self.backend
        try:
            if pairs is None or truncation == "longest_first":
                tok.enable_truncation(max_length, strategy="longest_first")
                return tok.encode_batch(texts if pairs is None else list(zip(texts, pairs)))
            tok.enable_truncation(max_length, strategy="only_first")
            return tok.encode_batch(list(zip(texts, pairs)))
        except Exception:  # some second text is too long on its own: redo pair by pair
            if pairs is None or truncation == "longest_first":
                raise
            out = []
            for a, b in zip(texts, pairs):
                tok.enable_truncation(max_length, strategy="only_first")
                try:
                    out.append(tok.encode(a, b))
                except Exception:
                    tok.enable_truncation(max_length, strategy="longest_first")
                    out.append(tok.encode(a, b))
            return out
        finally:
            tok.no_truncation()

    def encode_ids(self, texts: list[str], pairs: list[str] | None = None, *,
                   max_length: int | None = None, truncation: str = "only_first") -> Encoded:
        """Token ids equal to `encode`'s, with each distinct text tokenized once: a context shared by
        many pairs, however long, is read once and only its first max_length tokens are kept; a pair
        is cut on the token counts (`pair_lengths`), so its memory and time are linear in its length.
        Returns how many tokens each input lost to the window."""
        if truncation not in TRUNCATIONS:
            raise ValueError(f"truncation must be one of {TRUNCATIONS}, got {truncation!r}")
        max_length = max_length or self.model_max_length
        specials = self.backend.num_special_tokens_to_add(pairs is not None)
        if max_length < specials + 1:
            raise ValueError(f"max_length {max_length} leaves no room for text ({specials} special tokens)")
        firsts = self._prefixes(texts, max_length)
        seconds = self._prefixes(pairs, max_length) if pairs is not None else None
        template = self._template(pairs is not None)
        out = Encoded([], [], [])
        for i, text in enumerate(texts):
            a, n_a = firsts[text]
            if seconds is None:  # one text: its end is cut
                keep = max_length - specials
                ids, types = _fill(template, a[:keep], [])
                cut = max(n_a - keep, 0)
            else:
                b, n_b = seconds[pairs[i]]
                keep_a, keep_b = pair_lengths(n_a, n_b, max_length - specials, truncation)
                ids, types = _fill(template, a[:keep_a], b[:keep_b])
                cut = n_a + n_b - keep_a - keep_b
            out.ids.append(ids)
            out.type_ids.append(types)
            out.truncated.append(cut)
        return out

    def encode_windows(self, text: str, *, max_length: int | None = None, stride: int | None = None) -> list:
        """One text's tokenizers Encodings with their character offsets, special-token masks and tokens: the first
        `max_length` tokens (special ones included), and, with a stride, every further window of the text, each
        overlapping the one before by `stride` tokens (transformers' return_overflowing_tokens=True, stride=stride:
        the first window, then its `overflowing`, in order)."""
        max_length = max_length or self.model_max_length
        if problem := self.stride_problem(stride, max_length=max_length):
            raise ValueError(f"stride {problem}")
        tok = self.backend
        try:
            tok.enable_truncation(max_length, stride=stride or 0, strategy="longest_first")
            first = tok.encode(text)
        finally:
            tok.no_truncation()
        return [first, *first.overflowing] if stride is not None else [first]

    def encode_pair_windows(self, first: str, second: str, *, max_length: int, stride: int) -> list:
        """One pair's tokenizers Encodings (offsets, sequence ids, words) with the whole first text in each and the
        second read in windows of what room is left, each overlapping the one before by `stride` tokens
        (transformers' tokenizer(first, second, truncation="only_second", max_length=, stride=,
        return_overflowing_tokens=True): the first window, then its `overflowing`, in order). A pair that fits is one
        window. A pair that needs windows must leave the second text room for more than `stride` tokens: a ValueError
        says so (`tokenizers` would fail on it, or panic)."""
        tok = self.backend
        specials = tok.num_special_tokens_to_add(True)
        n_first = len(tok.encode(first, add_special_tokens=False).ids)
        room = max_length - specials - n_first
        try:
            if 0 <= stride < room:
                tok.enable_truncation(max_length, stride=stride, strategy="only_second")
                first_window = tok.encode(first, second)
                return [first_window, *first_window.overflowing]
            tok.no_truncation()
            whole = tok.encode(first, second)
        finally:
            tok.no_truncation()
        if len(whole.ids) <= max_length:  # fits: nothing to cut, so the stride does not matter
            return [whole]
        if room < 1:
            raise ValueError(f"the first text's {n_first} tokens and the {specials} special tokens fill the window of "
                             f"{max_length} tokens, leaving no room for the second text ({len(whole.ids) - n_first - specials}"
                             f" tokens)")
        raise ValueError(f"the first text's {n_first} tokens and the {specials} special tokens leave {room} tokens of "
                         f"the window of {max_length} for the second text, which needs several windows: the stride "
                         f"({stride}) must be below {room}")

    def stride_problem(self, stride: int | None, *, max_length: int | None = None) -> str | None:
        """What is wrong with a stride for windows of `max_length` tokens (default: the tokenizer's), or None: an int
        >= 0 that leaves room in each window for text beyond the overlap (None: no windows, nothing wrong)."""
        max_length = max_length or self.model_max_length
        if stride is None or (isinstance(stride, int) and not isinstance(stride, bool)
                              and 0 <= stride < max_length - self.backend.num_special_tokens_to_add(False)):
            return None
        return (f"must be an int >= 0 and below the window's room for text ({max_length} tokens less the special "
                f"ones), got {stride!r}")

    @property
    def word_aware(self) -> bool:
        """Whether its model marks a word's continuing pieces (WordPiece's "##": a `continuing_subword_prefix`),
        so a token is a word's continuation when its text is shorter than the token (transformers'
        TokenClassificationPipeline.gather_pre_entities); otherwise a token continues a word when no space touches
        its start (the pipeline's fallback heuristic)."""
        return bool(getattr(self.backend.model, "continuing_subword_prefix", None))

    @property
    def unk_token_id(self) -> int | None:
        token = self.special_tokens.get("unk_token") or getattr(self.backend.model, "unk_token", None)
        return None if token is None else self.backend.token_to_id(token)

    def tokens_to_string(self, tokens: Sequence[str]) -> str:
        """Tokens joined by the decoder (transformers' fast convert_tokens_to_string; " ".join without one)."""
        decoder = self.backend.decoder
        return decoder.decode(list(tokens)) if decoder is not None else " ".join(tokens)

    def token_counts(self, texts: list[str]) -> list[int]:
        """How many tokens each text has, without special tokens (each distinct text tokenized once)."""
        counts = self._prefixes(texts, 0)
        return [counts[t][1] for t in texts]

    def _prefixes(self, texts: list[str], max_length: int) -> dict[str, tuple[list[int], int]]:
        """text -> (its first max_length token ids without special tokens, its full token count)."""
        prefixes = {}
        self.backend.no_truncation()  # whole texts: their full length is the count of what the window cuts
        for part in _blocks(list(dict.fromkeys(texts))):
            for text, e in zip(part, self.backend.encode_batch(part, add_special_tokens=False)):
                prefixes[text] = (e.ids[:max_length], len(e.ids))
        return prefixes

    def _template(self, pair: bool) -> tuple[tuple, ...]:
        """The post-processor's layout, read off one encoding: ("special", id, type) items and
        ("a", type) / ("b", type) slots where the texts go (BERT: [CLS] a [SEP] b [SEP])."""
        if pair in self._templates:
            return self._templates[pair]
        self.backend.no_truncation()
        processed = self.backend.encode(*(("a", "b") if pair else ("a",)))  # any text that yields a token
        items: list[tuple] = []
        for token, kind, sequence in zip(processed.ids, processed.type_ids, processed.sequence_ids):
            if sequence is None:
                items.append(("special", token, kind))
            elif not items or items[-1][:1] != ("ab"[sequence],):
                items.append(("ab"[sequence], kind))
        self._templates[pair] = tuple(items)
        return self._templates[pair]

    @property
    def start_token(self) -> str | None:
        """The special token that opens a single text (BERT's [CLS], RoBERTa's <s>), read off the
        post-processor; None when it adds none."""
        first = self._template(False)[0]
        return self.backend.id_to_token(first[1]) if first[0] == "special" else None

    @property
    def end_token(self) -> str | None:
        """The special token that closes a single text (BERT's [SEP], RoBERTa's </s>), read off the
        post-processor; None when it adds none."""
        specials = [item for item in self._template(False) if item[0] == "special"]
        last = self._template(False)[-1]
        return self.backend.id_to_token(last[1]) if specials and last[0] == "special" else None

    def pad(self, encodings) -> dict[str, torch.Tensor]:
        """Pad Encodings to the longest: input_ids, attention_mask (and token_type_ids for BERT)."""
        return pad([e.ids for e in encodings], [e.type_ids for e in encodings], pad_id=self.pad_token_id,
                   token_types=self.return_token_type_ids)

    @property
    def mask_token(self) -> str | None:
        """The mask token: the one the tokenizer files name (mask_token), else the special token `[MASK]` or `<mask>`
        the vocabulary holds (transformers' BertTokenizer / RobertaTokenizer defaults); None if neither."""
        if token := self.special_tokens.get("mask_token"):
            return token
        specials = {t.content for t in self.backend.get_added_tokens_decoder().values() if t.special}
        return next((t for t in ("[MASK]", "<mask>") if t in specials), None)

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True,
               clean_up_tokenization_spaces: bool | None = False) -> str:
        """Token ids -> text by the tokenizer's decoder. clean_up_tokenization_spaces: transformers' clean-up of the
        spaces before punctuation and contractions (tokenization_utils_tokenizers.py TokenizersBackend._decode,
        CLEAN_UP), None: the tokenizer's own setting (tokenizer_config.json), as transformers' decode takes it; never
        on a BPE model, as there (unless its config forces it)."""
        text = self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)
        if clean_up_tokenization_spaces is None:
            clean_up_tokenization_spaces = self.clean_up_tokenization_spaces
        if clean_up_tokenization_spaces and (type(self.backend.model).__name__ != "BPE" or self.clean_up_bpe):
            for before, after in CLEAN_UP:
                text = text.replace(before, after)
        return text

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(directory / "tokenizer.json"))


def pair_lengths(n_a: int, n_b: int, budget: int, truncation: str) -> tuple[int, int]:
    """How many tokens of each text of a pair fit `budget` (the window less the special tokens).

    only_first: the first text absorbs the overflow; if it cannot, longest-first. longest_first is
    `tokenizers`' rule (tokenizers/src/utils/truncation.rs, truncate_encodings): with s <= l the two
    lengths, the longer text is cut to max(s, budget - s); if that still does not fit, the shorter
    keeps budget // 2 and the longer budget // 2 + budget % 2 (the second text on a tie).
    """
    overflow = n_a + n_b - budget
    if overflow <= 0:
        return n_a, n_b
    if truncation == "only_first" and n_a > overflow:
        return n_a - overflow, n_b
    short, long = sorted((n_a, n_b))
    keep_long = short if short > budget else max(short, budget - short)
    keep_short = short
    if keep_short + keep_long > budget:
        keep_short, keep_long = budget // 2, budget // 2 + budget % 2
    keep_a, keep_b = (keep_long, keep_short) if n_a > n_b else (keep_short, keep_long)
    return min(n_a, keep_a), min(n_b, keep_b)


ENCODE_CHARACTERS = 1 << 22  # characters tokenized per call: bounds the encodings in flight for long texts


def _blocks(texts: list[str]):
    """Consecutive groups of at most ENCODE_BLOCK texts and, past the first text, ENCODE_CHARACTERS characters."""
    part, size = [], 0
    for text in texts:
        if part and (len(part) == ENCODE_BLOCK or size + len(text) > ENCODE_CHARACTERS):
            yield part
            part, size = [], 0
        part.append(text)
        size += len(text)
    if part:
        yield part


def _fill(template: tuple[tuple, ...], a: list[int], b: list[int]) -> tuple[list[int], list[int]]:
    ids, types = [], []
    for item in template:
        part = [item[1]] if item[0] == "special" else a if item[0] == "a" else b
        ids += part
        types += [item[-1]] * len(part)
    return ids, types


def _as_list(value, name: str) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, Sequence):
        raise TypeError(f"{name} must be a string or a sequence of strings, got {type(value).__name__}")
    bad = [i for i, t in enumerate(items) if not isinstance(t, str)]
    if bad:
        raise TypeError(f"{name} items must be strings; not strings at index {bad}")
    unencodable = [f"{name}[{i}] {problem}" for i, t in enumerate(items) if (problem := text_problem(t))]
    if unencodable:
        raise ValueError("; ".join(unencodable))
    return list(items)


def pad(ids: Sequence[Sequence[int]], type_ids: Sequence[Sequence[int]], *, pad_id: int, length: int | None = None,
        token_types: bool = True) -> dict[str, Tensor]:
    """Right-pad token ids to `length` (default: the longest): input_ids, attention_mask and, when
    `token_types`, token_type_ids, each (B, L) int64."""
    length = max((len(row) for row in ids), default=0) if length is None else length
    input_ids = torch.full((len(ids), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(ids), length), dtype=torch.long)
    types = torch.zeros((len(ids), length), dtype=torch.long)
    for row, (tokens, kinds) in enumerate(zip(ids, type_ids)):
        n = len(tokens)
        input_ids[row, :n] = torch.tensor(tokens, dtype=torch.long)
        types[row, :n] = torch.tensor(kinds, dtype=torch.long)
        mask[row, :n] = 1
    out = {"input_ids": input_ids, "attention_mask": mask}
    if token_types:
        out["token_type_ids"] = types
    return out
