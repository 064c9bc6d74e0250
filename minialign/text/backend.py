"""The backend of text/tokenizer.py's Tokenizer (a `tokenizers` Tokenizer), read from a tokenizer's files.

Files, in order of preference: tokenizer.json; vocab.json + merges.txt (byte-level BPE, RoBERTa
special tokens, pair template `<s> A </s></s> B </s>`); vocab.txt (WordPiece, `[CLS] A [SEP] B [SEP]`
with token types 0/1; MPNet's `<s> A </s></s> B </s>` when tokenizer_config.json names MPNetTokenizer).
Ids equal transformers' fast tokenizers on the same files.

A tokenizer.json is run as written, normaliser and pre-tokenizer included, as `tokenizers` and
text-embeddings-inference run it. transformers 5 rebuilds both for some classes instead
(XLMRobertaTokenizer, CamembertTokenizer: a Precompiled normaliser is kept, any other is dropped, and
the pre-tokenizer is always WhitespaceSplit + Metaspace; BertTokenizer, MPNetTokenizer: a BertNormalizer
from tokenizer_config.json; DebertaV2Tokenizer: whitespace runs, tabs and newlines to one space, NFC, the
right end stripped, then Metaspace, which is what it saves; a DeBERTa-v3 tokenizer.json converted by
transformers 4 (Strip, SentencePiece's charsmap, runs of spaces to one) is run as written, as SentencePiece
does: tests/models/test_deberta_v2.py). On the files these models were published with the two agree, and equal
SentencePiece, which XLM-R and CamemBERT were trained with; where a file declares something else
(an NFKC normaliser), minialign follows the file and transformers 5 does not
(tests/text/test_family_tokenizers.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, Tokenizer as HFTokenizer, decoders, models, normalizers, pre_tokenizers, processors

# Every file a tokenizer may be read from (copied beside converted checkpoints, fetched from the hub).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "vocab.txt",
                   "special_tokens_map.json")

# transformers' tokenizer classes (tokenizer_config.json's tokenizer_class) whose model_input_names leave
# out token_type_ids: their batches have none. Any other tokenizer returns them when its pair template
# gives the second text type 1 (BERT's), as transformers' do.
NO_TOKEN_TYPES = frozenset({"RobertaTokenizer", "XLMRobertaTokenizer", "CamembertTokenizer", "DistilBertTokenizer",
                            "MPNetTokenizer"})
# The special tokens a vocab.txt of these classes defaults to (transformers MPNetTokenizer.__init__); the
# pair is then RoBERTa's `<s> A </s></s> B </s>` (RobertaProcessing) with one token type.
WORDPIECE_CLASSES = {"MPNetTokenizer": {"bos_token": "<s>", "eos_token": "</s>", "cls_token": "<s>", "sep_token": "</s>",
                                        "unk_token": "[UNK]", "pad_token": "<pad>", "mask_token": "<mask>"}}

# The special tokens' roles, as transformers names them (SpecialTokensMixin.SPECIAL_TOKENS_ATTRIBUTES).
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def read_backend(directory: Path, settings: dict, tokenizer_class: str | None) -> tuple[HFTokenizer, str]:
    """The backend of the first file present, in the order of preference, and its pad token (the settings', else
    the file kind's: RoBERTa's <pad>, BERT's [PAD])."""
    if (directory / "tokenizer.json").is_file():
        backend = HFTokenizer.from_file(str(directory / "tokenizer.json"))
        roberta = backend.token_to_id("<s>") is not None and backend.token_to_id("[CLS]") is None
        pad = token_str(settings.get("pad_token")) or ("<pad>" if roberta else "[PAD]")
    elif (directory / "vocab.json").is_file() and (directory / "merges.txt").is_file():
        backend = byte_level_bpe(directory, settings)
        pad = token_str(settings.get("pad_token")) or "<pad>"
    elif (directory / "vocab.txt").is_file():
        backend = wordpiece(directory, settings, tokenizer_class)
        pad = token_str(settings.get("pad_token")) or "[PAD]"
    elif any(directory.glob("*.model")):  # DeBERTa-v3's spm.model, XLM-R's sentencepiece.bpe.model
        raise FileNotFoundError(
            f"{directory}: a SentencePiece model ({next(directory.glob('*.model')).name}) without tokenizer.json; "
            f"minialign reads tokenizer.json only: write one once with transformers, "
            f"AutoTokenizer.from_pretrained(dir).save_pretrained(dir)")
    else:
        raise FileNotFoundError(f"{directory}: no tokenizer.json, vocab.json + merges.txt, or vocab.txt")
    return backend, pad


def read_settings(directory: Path) -> dict:
    """special_tokens_map.json, then tokenizer_config.json over it (transformers reads both; the latter wins)."""
    settings: dict = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        if (directory / name).is_file():
            try:
                data = json.loads((directory / name).read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as e:
                raise ValueError(f"{directory / name}: unreadable JSON ({e})") from None
            if isinstance(data, dict):
                settings.update(data)
    return settings


def tokenizer_class_of(settings: dict) -> str | None:
    """tokenizer_config.json's tokenizer_class without transformers 4's "Fast" suffix."""
    name = settings.get("tokenizer_class")
    return name.removesuffix("Fast") if isinstance(name, str) else None


def token_str(token) -> str | None:
    """A special token as a string: the settings name it as one, or as a serialized AddedToken."""
    if isinstance(token, dict):  # serialized AddedToken
        return token.get("content")
    return token if isinstance(token, str) else None


def byte_level_bpe(directory: Path, settings: dict) -> HFTokenizer:
    """RoBERTa's tokenizer (transformers convert_slow_tokenizer.py RobertaConverter)."""
    add_prefix_space = bool(settings.get("add_prefix_space", False))
    tok = HFTokenizer(models.BPE.from_file(str(directory / "vocab.json"), str(directory / "merges.txt"),
                                           continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    tok.decoder = decoders.ByteLevel()
    bos, eos = token_str(settings.get("bos_token")) or "<s>", token_str(settings.get("eos_token")) or "</s>"
    specials = [bos, eos, token_str(settings.get("unk_token")) or "<unk>", token_str(settings.get("pad_token")) or "<pad>"]
    tok.add_special_tokens([AddedToken(t, special=True) for t in dict.fromkeys(specials)])
    tok.add_special_tokens([AddedToken(token_str(settings.get("mask_token")) or "<mask>", lstrip=True, special=True)])
    for token in (bos, eos):
        if tok.token_to_id(token) is None:
            raise ValueError(f"{directory}: special token {token!r} is not in vocab.json")
    tok.post_processor = processors.RobertaProcessing((eos, tok.token_to_id(eos)), (bos, tok.token_to_id(bos)),
                                                      trim_offsets=True, add_prefix_space=add_prefix_space)
    return tok


def wordpiece(directory: Path, settings: dict, tokenizer_class: str | None = None) -> HFTokenizer:
    """BERT's tokenizer (transformers convert_slow_tokenizer.py BertConverter); MPNet's (MPNetTokenizer:
    the same WordPiece, `<s> A </s></s> B </s>`, a mask token that takes the space before it)."""
    vocab = {}
    with open(directory / "vocab.txt", encoding="utf-8") as f:
        for index, line in enumerate(f):
            vocab[line.rstrip("\n")] = index
    unk = token_str(settings.get("unk_token")) or "[UNK]"
    tok = HFTokenizer(models.WordPiece(vocab, unk_token=unk, max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=settings.get("tokenize_chinese_chars", True),
        strip_accents=settings.get("strip_accents"), lowercase=settings.get("do_lower_case", True))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    cls_, sep = token_str(settings.get("cls_token")) or "[CLS]", token_str(settings.get("sep_token")) or "[SEP]"
    specials = [unk, sep, token_str(settings.get("pad_token")) or "[PAD]", cls_,
                token_str(settings.get("mask_token")) or "[MASK]"]
    mpnet = tokenizer_class == "MPNetTokenizer"
    tok.add_special_tokens([AddedToken(t, special=True, lstrip=mpnet and t == specials[-1])
                            for t in dict.fromkeys(specials) if t in vocab])
    for token in (cls_, sep):
        if token not in vocab:
            raise ValueError(f"{directory}: special token {token!r} is not in vocab.txt")
    if mpnet:
        tok.post_processor = processors.RobertaProcessing((sep, vocab[sep]), (cls_, vocab[cls_]), trim_offsets=True,
                                                          add_prefix_space=False)
        return tok
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls_}:0 $A:0 {sep}:0", pair=f"{cls_}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls_, vocab[cls_]), (sep, vocab[sep])])
    return tok
