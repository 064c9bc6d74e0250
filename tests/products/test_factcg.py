"""FactCGScorer on a FactCG-DeBERTa-v3-shaped checkpoint (a tiny random DebertaV2ForSequenceClassification, two
labels, saved as MiniCheck-DeBERTa's test saves it) against FactCG's published inference restated on transformers
(derenlei/FactCG factcg/inference.py Inferencer, factcg/utils.py INSTRUCTION_TEMPLATE). nltk is not installed here:
the reference takes the scorer's sentence splitter and word counter where the original calls nltk's sent_tokenize
and word_tokenize, so what is compared is the chunking rule, the template, the cut, the model and the aggregation."""

import pytest
import torch
import transformers
from conftest import CLAIMS, DOCS
from test_minicheck_deberta import save_deberta_minicheck

import minialign as ma
from minialign.products.alignscore import TruncationWarning
from minialign.products.factcg import count_words

# factcg/utils.py INSTRUCTION_TEMPLATE, typed here from the published file
INSTRUCTION_TEMPLATE = ("{text_a}\n\nChoose your answer: based on the paragraph above can we conclude that "
                        "\"{text_b}\"?\n\nOPTIONS:\n- Yes\n- No\nI think the answer is ")


class ReferenceFactCG:
    """Inferencer's use_hf_ckpt path (factcg/inference.py), restated line for line on transformers."""

    def __init__(self, model, tokenizer, sent_tokenize, word_count, batch_size=32):
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size
        self.sent_tokenize, self.word_count = sent_tokenize, word_count

    def chunking_src(self, src, max_chunk_size=550):
        chunks, chunk_size, chunk = [], 0, ""
        for s in self.sent_tokenize(src):  # split_into_sentences: only the sentence's text is read
            token_count = self.word_count(s)  # count_tokens: len(nltk.word_tokenize(text))
            if chunk_size + token_count <= max_chunk_size:
                chunk = "\n".join([chunk, s]).strip("\n")
                chunk_size += token_count
            else:
                chunks.append(chunk.strip("\n"))  # "" when the first sentence alone is over the budget
                chunk, chunk_size = s, token_count
        if chunk_size > 0:
            chunks.append(chunk.replace(" \n ", "\n").strip("\n").strip())
        return chunks

    def inference(self, premise, hypo):  # inference + batch_tokenize + tokenize (the "deberta" branch)
        texts = [INSTRUCTION_TEMPLATE.format(text_a=p, text_b=h) for p, h in zip(premise, hypo)]
        self.tokenizer.pad_token = self.tokenizer.eos_token
        scores = []
        for start in range(0, len(texts), self.batch_size):
            batch = self.tokenizer(texts[start:start + self.batch_size], max_length=2048, truncation="only_first",
                                   padding="longest", return_tensors="pt")
            with torch.no_grad():
                scores.append(torch.softmax(self.model(**batch).logits, dim=-1)[:, 1])
        return torch.cat(scores)

    def batch_inference(self, premise, hypo, max_chunk_size=550):
        """(scores, best chunk ids, each example's chunks and chunk scores)."""
        chunked = [self.chunking_src(p, max_chunk_size) for p in premise]
        flat = self.inference([c for chunks in chunked for c in chunks],
                              [h for chunks, h in zip(chunked, hypo) for _ in chunks])
        per_example = torch.split(flat, [len(chunks) for chunks in chunked])
        scores = [s.view(1, -1).max(dim=1).values.mean().item() for s in per_example]
        best = [s.view(1, -1).max(dim=1).indices[0].item() for s in per_example]
        return scores, best, chunked, [s.tolist() for s in per_example]


def _prose(i, sentences, words=12):
    vocab = "police said the company market grew officials reported on monday city people tower built".split()
    return " ".join(" ".join(vocab[(i + s * 5 + j) % len(vocab)] for j in range(words)).capitalize() + "."
                    for s in range(sentences))


# 1. two chunks at the default 550 words; 2. a first sentence over the budget and over the window (the original's
# empty chunk, then a template text past 2048 tokens: cut, the claim with it); 3. paragraphs; then short ones
LONG_DOCS = [_prose(0, 50), "word " * 2100 + ". " + _prose(3, 4), "\n\n".join(_prose(i, 5) for i in range(6))]
FACTCG_DOCS = LONG_DOCS + DOCS[:3] + ["Short context."]
FACTCG_CLAIMS = ["The company market grew.", "Word word.", _prose(2, 2)] + CLAIMS[:3] + ["A \"quoted\" claim?"]


@pytest.fixture(scope="module")
def factcg_dir(tmp_path_factory):
    torch.manual_seed(7)
    return save_deberta_minicheck(tmp_path_factory.mktemp("factcg") / "m")


@pytest.fixture(scope="module")
def reference(factcg_dir):
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(factcg_dir).eval()
    tok = transformers.AutoTokenizer.from_pretrained(factcg_dir, use_fast=True)
    # batch_size 2 (the original's 32 pads every text to the longest): only the long text's pair padded to 2048
    return ReferenceFactCG(hf, tok, ma.split_sentences, count_words, batch_size=2)


@pytest.fixture(scope="module")
def scorer(factcg_dir):
    return ma.FactCGScorer.from_pretrained(factcg_dir, batch_size=3)


def test_scores_equal_reference(scorer, reference):
    assert scorer.max_length == 2048 and scorer.chunk_size == 550
    with pytest.warns(TruncationWarning, match="FactCG template text"):
        details = scorer.score(FACTCG_DOCS, FACTCG_CLAIMS, return_details=True)
    scores, best, chunked, probs = reference.batch_inference(FACTCG_DOCS, FACTCG_CLAIMS)
    assert len(chunked[0]) == 2 and len(chunked[2]) == 1  # the default budget: 650 words in two chunks
    assert chunked[1][0] == "" and len(chunked[1]) == 3  # the original's empty chunk, which minialign drops
    for i, got in enumerate(details):
        start = 1 if i == 1 else 0
        assert got["chunks"] == chunked[i][start:]
        assert max(abs(a - b) for (a,), b in zip(got["supported"], probs[i][start:])) <= 1e-5
        if i != 1:
            assert abs(got["score"] - scores[i]) <= 1e-5
            assert max(range(len(got["supported"])), key=lambda k: got["supported"][k][0]) == best[i]
    assert abs(details[1]["score"] - max(probs[1][1:])) <= 1e-5
    # the text past the window is cut at its end, as the original's, and the cut reported by chunk
    tok = reference.tokenizer
    lengths = [len(tok(INSTRUCTION_TEMPLATE.format(text_a=c, text_b=FACTCG_CLAIMS[1]))["input_ids"])
               for c in details[1]["chunks"]]
    assert lengths[0] > 2048 and details[1]["truncated"] == [[lengths[0] - 2048], [0]]
    assert all(n == [0] for d in details[:1] + details[2:] for n in d["truncated"])


def test_small_budget_many_chunks(factcg_dir, reference):
    scorer = ma.FactCGScorer.from_pretrained(factcg_dir, chunk_size=40)
    docs, claims = FACTCG_DOCS[2:], FACTCG_CLAIMS[2:]
    details = scorer.score(docs, claims, return_details=True)
    scores, _, chunked, _ = reference.batch_inference(docs, claims, max_chunk_size=40)
    assert len(chunked[0]) == 10 and all("\n" in c for c in chunked[0])  # 3 sentences of 13 words, joined by "\n"
    for got, chunks, score in zip(details, chunked, scores):
        assert got["chunks"] == chunks and abs(got["score"] - score) <= 1e-5


def test_a_result_independent_of_its_batch(scorer, factcg_dir):
    docs, claims = FACTCG_DOCS[2:], FACTCG_CLAIMS[2:]
    together = scorer.score(docs, claims)
    assert together == [scorer.score(d, c) for d, c in zip(docs, claims)]
    assert together[::-1] == scorer.score(docs[::-1], claims[::-1])
    padded = ma.FactCGScorer.from_pretrained(factcg_dir, unpad=False, batch_size=2).score(docs, claims)
    assert max(abs(a - b) for a, b in zip(together, padded)) <= 1e-5


def test_the_text_is_one_sequence(scorer, reference):
    """Chunk and claim go in as ONE text of the template (`[CLS] text [SEP]`, one token type), not a pair."""
    text = scorer.text("The tower was built.", "It opened.")
    assert text == INSTRUCTION_TEMPLATE.format(text_a="The tower was built.", text_b="It opened.")
    hf = reference.tokenizer(text)
    assert hf["input_ids"].count(reference.tokenizer.sep_token_id) == 1 and set(hf["token_type_ids"]) == {0}
    assert scorer.tokenizer.encode_ids([text], max_length=2048).ids[0] == hf["input_ids"]


def test_chunks_and_words(scorer):
    assert scorer.chunks("") == [""] and scorer.chunks("   ") == [""]
    assert scorer.chunks("One. Two.") == ["One.\nTwo."]
    assert count_words("I don't know, it's 3.5 -- and 1,000 e-mails...") == 13
    assert count_words("x") == 1 and count_words("") == 0
    custom = ma.FactCGScorer(scorer.classifier, chunk_size=2, splitter=lambda t: t.split("|"),
                             word_counter=lambda s: len(s))
    assert custom.chunks("a|b|cde|f") == ["a\nb", "cde", "f"]  # over the budget alone: its own chunk, no empty one


def test_refusals(scorer, factcg_dir):
    with pytest.raises(ValueError, match="equal length"):
        scorer.score(["a", "b"], ["c"])
    with pytest.raises(ValueError, match="int8"):
        ma.FactCGScorer.from_pretrained(factcg_dir, dtype="int8")
    with pytest.raises(TypeError, match="chunk_sise"):
        ma.FactCGScorer.from_pretrained(factcg_dir, chunk_sise=3)
    assert scorer.score([], []) == []


def test_the_score_command_the_rows_route_and_ray_score_as_score(factcg_dir, scorer, tmp_path):
    """`minialign score --method factcg` (--chunk-size in words), Ray's FactCGBatches and POST /rows/factcg give
    FactCGScorer.score's scores."""
    import json

    from starlette.testclient import TestClient

    from minialign.apps import raydata
    from minialign.apps.cli import main as cli
    from minialign.apps.serve import Limits, Models, Service

    documents, claims = [_prose(0, 9), DOCS[0]], [CLAIMS[0], CLAIMS[1]]
    small = ma.FactCGScorer.from_pretrained(factcg_dir, chunk_size=40)
    expected = small.score(documents, claims)
    assert expected != scorer.score(documents, claims)  # the budget reaches the scorer
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"context": d, "claim": c}) + "\n"
                                                 for d, c in zip(documents, claims)))
    assert cli(["score", "--method", "factcg", "--model", str(factcg_dir), "--chunk-size", "40",
                "--input", str(tmp_path / "rows.jsonl"), "--output", str(tmp_path / "out.jsonl")]) == 0
    written = [json.loads(line)["score"] for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert written == pytest.approx(expected, abs=1e-6)
    batch = raydata.batches_class("factcg")(str(factcg_dir), chunk_size=40)({"context": documents, "claim": claims})
    assert list(batch["score"]) == pytest.approx(expected, abs=1e-6)
    with TestClient(Service(Models(products={"factcg": small}), Limits()).app()) as client:
        body = client.post("/rows/factcg", json={"rows": [{"context": d, "claim": c}
                                                          for d, c in zip(documents, claims)]}).json()
    assert [r["score"] for r in body["results"]] == pytest.approx(expected, abs=1e-6)
