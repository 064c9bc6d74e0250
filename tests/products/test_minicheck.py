"""MiniCheckScorer against an independent re-implementation of MiniCheck's algorithm
(minicheck/inference.py, RoBERTa variant) on transformers, with a tiny random RoBERTa classifier."""

import json

import pytest
import torch
import transformers
from conftest import CLAIMS, DOCS, save_classifier

import minialign as ma
from minialign.products.alignscore import TruncationWarning


class ReferenceMiniCheck:
    """Written from MiniCheck's description, on transformers' tokenizer and model."""

    def __init__(self, model, tokenizer, splitter, chunk_size=400, max_length=512):
        self.model, self.tokenizer, self.splitter = model, tokenizer, splitter
        self.chunk_size, self.max_length = chunk_size, max_length

    def sentences(self, doc):
        out = []
        for block in doc.split("\n"):
            out.extend(self.splitter(block))
            out.append("\n")
        return out[:-1] or [""]

    def chunks(self, sentences):
        current, count = [], 0
        for sentence in sentences:
            n = len(self.tokenizer(sentence, add_special_tokens=False, truncation=True,
                                   max_length=self.max_length)["input_ids"])
            if count + n > self.chunk_size:
                yield " ".join(current)
                current, count = [sentence], n
            else:
                current.append(sentence)
                count += n
        if current:
            yield " ".join(current)

    def score(self, doc, claim):
        chunks = [c.replace(" \n ", "\n").strip() for c in self.chunks(self.sentences(doc))]
        chunks = [c for c in chunks if c]
        texts = [self.tokenizer.eos_token.join([c, claim]) for c in chunks]
        batch = self.tokenizer(texts, max_length=self.max_length, truncation=True, padding=True, return_tensors="pt")
        with torch.no_grad():  # on the model's device, probabilities in fp32 whatever its dtype
            logits = self.model(**batch.to(next(self.model.parameters()).device)).logits
            probs = torch.softmax(logits.float(), dim=1)[:, 1].cpu()
        return probs.max().item(), chunks, probs.tolist()


def test_scores_equal_reference(minicheck_dir):
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(minicheck_dir).eval()
    tok = transformers.AutoTokenizer.from_pretrained(minicheck_dir)
    reference = ReferenceMiniCheck(hf, tok, ma.split_sentences)
    scorer = ma.MiniCheckScorer.from_pretrained(minicheck_dir, batch_size=3)
    with pytest.warns(TruncationWarning, match="chunk \\+ claim text"):
        details = scorer.score(DOCS, CLAIMS, return_details=True)
    for doc, claim, got in zip(DOCS, CLAIMS, details):
        score, chunks, probs = reference.score(doc, claim)
        assert got["chunks"] == chunks
        assert abs(got["score"] - score) <= 1e-5
        assert max(abs(a[0] - b) for a, b in zip(got["supported"], probs)) <= 1e-5
    assert len(details[2]["chunks"]) > 1 and any(n for (n,) in details[4]["truncated"])
    assert scorer.score(DOCS[:2], CLAIMS[:2]) == [d["score"] for d in details[:2]]


def test_one_document_and_claim_give_one_score(minicheck_dir):
    scorer = ma.MiniCheckScorer.from_pretrained(minicheck_dir)
    one = scorer.score(DOCS[0], CLAIMS[0])
    assert isinstance(one, float) and one == scorer.score(DOCS[:1], CLAIMS[:1])[0]
    assert scorer.score(DOCS[0], CLAIMS[0], return_details=True) == scorer.score(DOCS[:1], CLAIMS[:1],
                                                                                 return_details=True)[0]
    with pytest.raises(ValueError, match="documents and claims: give both as strings"):
        scorer.score(DOCS[:1], CLAIMS[0])


def test_chunk_size_and_empty_document(minicheck_dir):
    scorer = ma.MiniCheckScorer.from_pretrained(minicheck_dir, chunk_size=40)
    assert len(scorer.chunks(DOCS[2])) > len(ma.MiniCheckScorer.from_pretrained(minicheck_dir).chunks(DOCS[2]))
    assert scorer.chunks("") == [""] and scorer.chunks("\n\n") == [""]
    (score,) = scorer.score([""], ["A claim."])
    assert 0.0 <= score <= 1.0


def test_bad_input(minicheck_dir, tmp_path, bpe_dir):
    scorer = ma.MiniCheckScorer.from_pretrained(minicheck_dir)
    assert scorer.score([], []) == []
    with pytest.raises(ValueError, match=r"claims\[0\] is int"):
        scorer.score(["doc"], [3])
    with pytest.raises(ValueError, match="equal length"):
        scorer.score(["a", "b"], ["c"])
    save_classifier(tmp_path / "three", "roberta", 3, bpe_dir)
    with pytest.raises(ValueError, match="two-label classifier"):
        ma.MiniCheckScorer.from_pretrained(tmp_path / "three")
    assert json.loads((minicheck_dir / "config.json").read_text())["model_type"] == "roberta"
