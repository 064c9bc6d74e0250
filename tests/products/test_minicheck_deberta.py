"""MiniCheckScorer on a MiniCheck-DeBERTa-v3-shaped checkpoint (a tiny random DebertaV2ForSequenceClassification
saved as pytorch_model.bin, a SentencePiece Unigram tokenizer.json) against an independent re-implementation
of MiniCheck's deberta-v3-large path (Liyan06/MiniCheck minicheck/inference.py, Inferencer) on transformers."""

import json

import pytest
import torch
import transformers
from conftest import CLAIMS, DOCS, WORDS
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

import minialign as ma
from minialign.apps.cli import main as cli
from minialign.products.alignscore import TruncationWarning

SPECIALS = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]  # deberta-v3's ids 0-3; [MASK] is 128000 there


class ReferenceMiniCheck:
    """MiniCheck's Inferencer for its classifiers, on transformers' tokenizer and model: the lines cited are
    minicheck/inference.py's."""

    MAX_MODEL_LEN = {"roberta-large": 512, "deberta-v3-large": 2048}  # L47-53

    def __init__(self, model_name, model, tokenizer, splitter, chunk_size=400, batch_size=16):
        self.model, self.tokenizer, self.splitter = model, tokenizer, splitter
        self.max_model_len, self.chunk_size, self.batch_size = self.MAX_MODEL_LEN[model_name], chunk_size, batch_size

    def sentences(self, doc):  # sent_tokenize_with_newlines, L17-26
        out = []
        for block in doc.split("\n"):
            out.extend(self.splitter(block))
            out.append("\n")
        return out[:-1]

    def chunks(self, sentences):  # L122-137: sentences packed by their token counts
        current, count = [], 0
        for sentence in sentences:
            n = len(self.tokenizer(sentence, padding=False, add_special_tokens=False, max_length=self.max_model_len,
                                   truncation=True)["input_ids"])
            if count + n > self.chunk_size:
                yield " ".join(current)
                current, count = [sentence], n
            else:
                current.append(sentence)
                count += n
        if current:
            yield " ".join(current)

    def score(self, doc, claim):
        sentences = self.sentences(doc) or [""]  # L139-140
        chunks = [c.replace(" \n ", "\n").strip() for c in self.chunks(sentences)]  # L142-143
        chunks = [c for c in chunks if c != ""]
        texts = [self.tokenizer.eos_token.join([c, claim]) for c in chunks]  # L233: one text, not a pair
        probs = []
        for start in range(0, len(texts), self.batch_size):  # L237-254: mini-batches, padded, cut at the end
            batch = self.tokenizer(texts[start:start + self.batch_size], max_length=self.max_model_len,
                                   truncation=True, padding=True, return_tensors="pt")
            with torch.no_grad():
                probs.append(torch.softmax(self.model(**batch).logits, dim=1))  # L211
        probs = torch.cat(probs)[:, 1]  # L217-218: P(supported) is label 1, the max over chunks
        return probs.max().item(), chunks, probs.tolist()


def save_deberta_minicheck(directory):
    """The files of a MiniCheck-DeBERTa-v3-Large-shaped checkpoint: config.json (deberta-v3-large's layout,
    tiny sizes), pytorch_model.bin only, and a Unigram tokenizer.json trained here."""
    directory.mkdir(parents=True)
    tok = Tokenizer(models.Unigram())
    # The normaliser and pre-tokenizer transformers 5's DebertaV2Tokenizer builds (tokenization_deberta_v2.py:
    # it rebuilds them from its class), so AutoTokenizer and the file agree; the template is deberta-v3's.
    tok.normalizer = normalizers.Sequence([normalizers.Replace(Regex(r"\s{2,}|[\n\r\t]"), " "), normalizers.NFC(),
                                           normalizers.Strip(left=False, right=True)])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    corpus = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(12)) + "." for i in range(200)] + DOCS + CLAIMS
    tok.train_from_iterator(corpus, trainers.UnigramTrainer(vocab_size=200, special_tokens=SPECIALS, unk_token="[UNK]"))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    tok.save(str(directory / "tokenizer.json"))
    specials = dict(zip(("pad_token", "cls_token", "sep_token", "unk_token", "mask_token"), SPECIALS))
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "DebertaV2Tokenizer", "do_lower_case": False, "split_by_punct": False,
         "bos_token": "[CLS]", "eos_token": "[SEP]", **specials}))
    # microsoft/deberta-v3-large's config.json but for the sizes: relative attention with log buckets,
    # no absolute positions (position_biased_input false), no token types
    config = transformers.DebertaV2Config(
        vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=37, max_position_embeddings=512, relative_attention=True, position_buckets=256,
        max_relative_positions=-1, pos_att_type=["p2c", "c2p"], position_biased_input=False, norm_rel_ebd="layer_norm",
        share_att_key=True, type_vocab_size=0, layer_norm_eps=1e-7, pad_token_id=0, hidden_act="gelu",
        pooler_hidden_size=32, pooler_hidden_act="gelu", pooler_dropout=0, num_labels=2,
        initializer_range=0.2)  # large weights: each token moves the probabilities (0.02 leaves them ~constant)
    model = transformers.DebertaV2ForSequenceClassification(config).eval()
    with torch.no_grad():  # non-zero biases and LayerNorm params, so a swapped name cannot pass
        for name, p in model.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    model.config.save_pretrained(directory)
    # What transformers 4's save_pretrained(safe_serialization=False) wrote, as MiniCheck-DeBERTa ships it
    # (transformers 5 writes safetensors whatever it is asked)
    torch.save(model.state_dict(), directory / "pytorch_model.bin")
    return directory


@pytest.fixture(scope="module")
def deberta_dir(tmp_path_factory):
    torch.manual_seed(5)
    return save_deberta_minicheck(tmp_path_factory.mktemp("minicheck_deberta") / "m")


@pytest.fixture(scope="module")
def reference(deberta_dir):
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(deberta_dir).eval()
    tok = transformers.AutoTokenizer.from_pretrained(deberta_dir, use_fast=True)  # L61
    assert isinstance(tok, transformers.DebertaV2Tokenizer) and tok.eos_token == "[SEP]"
    return ReferenceMiniCheck("deberta-v3-large", hf, tok, ma.split_sentences)


def _sentences(i, n, k):
    words = "police said the company market grew officials reported on monday city people".split()
    return " ".join(" ".join(words[(i + s * 5 + j) % len(words)] for j in range(n)).capitalize() + "."
                    for s in range(k))


# Documents of several chunks, blocks, a sentence longer than 512 tokens but within 2048, one over 2048;
# claims of several sentences (MiniCheck checks a claim as one text, L160-163), one longer than the window.
DEBERTA_DOCS = DOCS + ["word " * 2300, "\n\n".join(_sentences(i, 20, 6) for i in range(8)), "Short context."]
DEBERTA_CLAIMS = CLAIMS[:4] + ["Words. More words. Word word.", _sentences(1, 10, 3), _sentences(2, 9, 2),
                               "A long claim. " * 600]


def test_scores_equal_reference(deberta_dir, reference):
    assert (deberta_dir / "pytorch_model.bin").is_file() and not list(deberta_dir.glob("*.safetensors"))
    scorer = ma.MiniCheckScorer.from_pretrained(deberta_dir, batch_size=3)
    assert scorer.model.config.arch == "deberta-v2" and scorer.max_length == 2048 and scorer.eos_token == "[SEP]"
    with pytest.warns(TruncationWarning, match="chunk \\+ claim text"):
        details = scorer.score(DEBERTA_DOCS, DEBERTA_CLAIMS, return_details=True)
    for doc, claim, got in zip(DEBERTA_DOCS, DEBERTA_CLAIMS, details):
        score, chunks, probs = reference.score(doc, claim)
        assert got["chunks"] == chunks
        assert abs(got["score"] - score) <= 1e-5
        assert max(abs(a - b) for (a,), b in zip(got["supported"], probs)) <= 1e-5
    # what the documents exercise: several chunks, a text past 512 tokens that MiniCheck-DeBERTa does not cut,
    # and texts past its window of 2048 (a chunk, a claim) that it cuts at their end
    tok = reference.tokenizer
    lengths = [[len(tok(tok.eos_token.join([c, claim]))["input_ids"]) for c in d["chunks"]]
               for d, claim in zip(details, DEBERTA_CLAIMS)]
    assert len(details[2]["chunks"]) > 2 and len(details[6]["chunks"]) > 1
    assert 512 < lengths[4][0] <= 2048 and details[4]["truncated"] == [[0]]
    assert lengths[5][0] > 2048 and details[5]["truncated"] == [[lengths[5][0] - 2048]]
    assert lengths[7][0] > 2048 and details[7]["truncated"][0][0] > 0
    assert scorer.score(DEBERTA_DOCS[:3], DEBERTA_CLAIMS[:3]) == [d["score"] for d in details[:3]]


def test_the_text_is_one_sequence_joined_by_sep(deberta_dir, reference):
    """The chunk and the claim go in as ONE text joined by the eos token ([SEP]), as MiniCheck's L233, which
    for DeBERTa-v3 is `[CLS] chunk [SEP] claim [SEP]` all of token type 0 (not a text pair)."""
    scorer = ma.MiniCheckScorer.from_pretrained(deberta_dir)
    hf = reference.tokenizer
    joined = hf("The tower was built.[SEP]It opened.")
    assert joined["input_ids"][0] == hf.cls_token_id and joined["input_ids"].count(hf.sep_token_id) == 2
    assert set(joined["token_type_ids"]) == {0}
    ours = scorer.tokenizer.encode_ids(["The tower was built." + scorer.eos_token + "It opened."], max_length=2048)
    assert ours.ids[0] == joined["input_ids"]


def test_roberta_window_unchanged(minicheck_dir):
    scorer = ma.MiniCheckScorer.from_pretrained(minicheck_dir)
    assert scorer.model.config.arch == "roberta" and scorer.max_length == 512 and scorer.eos_token == "</s>"


def test_cli_score_method_minicheck(deberta_dir, reference, capsys):
    doc, claim = DEBERTA_DOCS[2], DEBERTA_CLAIMS[5]
    assert cli(["score", "--method", "minicheck", "--model", str(deberta_dir), "--context", doc, "--claim", claim]) == 0
    assert abs(float(capsys.readouterr().out.strip().splitlines()[-1]) - reference.score(doc, claim)[0]) <= 1e-5
