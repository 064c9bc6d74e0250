"""MiniCheckScorer on MiniCheck-Flan-T5-shaped checkpoints (tiny random T5ForConditionalGeneration, gated-gelu as
flan-t5, a deterministic T5 Unigram tokenizer: test_hhem.py's t5_unigram) against MiniCheck's flan-t5 path restated
below in plain Python (Liyan06/MiniCheck minicheck/inference.py Inferencer, minicheck.py MiniCheck; the lines
cited are inference.py's) on transformers' T5ForConditionalGeneration and AutoTokenizer. Three checkpoints: one
tied (transformers 5 scales the decoder's output by d_model ** -0.5), one saved with tie_word_embeddings=False
(transformers 5 ties lm_head all the same and does not scale), and flan-t5's own shape (an lm_head of its own in the
file, tie_word_embeddings false, no scale_decoder_outputs field)."""

import json
import warnings

import pytest
import torch
import transformers
from conftest import CLAIMS, DOCS
from safetensors.torch import load_file, save_file
from test_hhem import t5_unigram

import minialign as ma
from minialign.products.minicheck import MiniCheckT5Scorer
from minialign.runtime.engine import TruncationWarning

SIZES = dict(d_model=32, d_kv=8, num_heads=4, d_ff=64, num_layers=2, num_decoder_layers=3,
             relative_attention_num_buckets=8, relative_attention_max_distance=20, feed_forward_proj="gated-gelu",
             dropout_rate=0.1, vocab_size=256)  # past id 209, the "support" token (the tokenizer has fewer pieces)
# d_ff a multiple of 32, as every flan-t5's (2816 for -large): torch's CPU tanh-GELU computes a vectorized loop's
# scalar tail with other bits, so with d_ff 37 or 48 a row's gated activation moved with the batch's token count
CHUNK = 100  # words per chunk here: DOCS[2] and DOCS[3] need 17 and 12
PAIRS = list(zip(DOCS[:4], CLAIMS[:4]))  # DOCS[4], one sentence past the window: test_a_long_chunk_cut_and_reported
KINDS = ("tied", "untied", "flan")


class ReferenceMiniCheckT5:
    """Inferencer's flan-t5-large path, on transformers' tokenizer and model."""

    def __init__(self, model, tokenizer, splitter, chunk_size=500, max_model_len=2048, batch_size=16):
        self.model, self.tokenizer, self.splitter = model, tokenizer, splitter
        self.chunk_size, self.max_model_len, self.batch_size = chunk_size, max_model_len, batch_size

    def sentences(self, doc):  # sent_tokenize_with_newlines, L17-26
        out = []
        for block in doc.split("\n"):
            out.extend(self.splitter(block))
            out.append("\n")
        return out[:-1]

    def chunks(self, sentences):  # L108-121: sentences packed by their whitespace-separated words
        current, count = [], 0
        for sentence in sentences:
            n = len(sentence.split())
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
        texts = [self.tokenizer.eos_token.join([c, claim]) for c in chunks]  # L233
        probs = []
        for start in range(0, len(texts), self.batch_size):  # L238-246: "predict: " + text, cut at the end
            batch = self.tokenizer(["predict: " + t for t in texts[start:start + self.batch_size]],
                                   max_length=self.max_model_len, truncation=True, padding=True, return_tensors="pt")
            with torch.no_grad():  # L199-205: one decoder step from id 0, tokens 3 and 209, softmax over the two
                decoder_input_ids = torch.zeros((batch["input_ids"].size(0), 1), dtype=torch.long)
                logits = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                    decoder_input_ids=decoder_input_ids).logits.squeeze(1)
                probs.append(torch.softmax(logits[:, torch.tensor([3, 209])], dim=-1))
        probs = torch.cat(probs)[:, 1]  # L217-218: P(supported), the max over chunks
        return probs.max().item(), chunks, probs.tolist()


def save_minicheck_t5(directory, kind):
    """A MiniCheck-Flan-T5-shaped directory (config.json, model.safetensors, tokenizer files) of `kind`."""
    directory.mkdir(parents=True)
    t5_unigram(directory)
    config = transformers.T5Config(**SIZES, tie_word_embeddings=kind == "tied", decoder_start_token_id=0)
    transformers.set_seed(KINDS.index(kind))
    model = transformers.T5ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:  # off their initial ones: a swapped name cannot pass
                p.add_(torch.randn_like(p) * 0.1)
            elif name.endswith(("q.weight", "k.weight", "relative_attention_bias.weight")):
                p.mul_(3)  # sharper attention: positions and padding move the outputs
    model.save_pretrained(directory)
    if kind == "flan":  # flan-t5's files: lm_head.weight of its own, tie_word_embeddings false, no scale field
        tensors = load_file(directory / "model.safetensors")
        tensors["lm_head.weight"] = torch.randn(SIZES["vocab_size"], SIZES["d_model"]) * 0.2
        save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
        data = json.loads((directory / "config.json").read_text())
        data.pop("scale_decoder_outputs", None)
        (directory / "config.json").write_text(json.dumps({**data, "tie_word_embeddings": False}))
    return directory


@pytest.fixture(scope="module", params=KINDS)
def t5_dir(request, tmp_path_factory):
    """(the directory, transformers' model read back from it, transformers' tokenizer)."""
    directory = save_minicheck_t5(tmp_path_factory.mktemp("minicheck-t5") / request.param, request.param)
    model = transformers.T5ForConditionalGeneration.from_pretrained(directory).eval()
    return directory, model, transformers.AutoTokenizer.from_pretrained(directory)


@pytest.fixture(scope="module")
def expected(t5_dir):
    """The reference's (score, chunks, probabilities) of each of PAIRS, CHUNK words per chunk."""
    _, model, tokenizer = t5_dir
    reference = ReferenceMiniCheckT5(model, tokenizer, ma.split_sentences, chunk_size=CHUNK, batch_size=3)
    return [reference.score(d, c) for d, c in PAIRS]


def test_each_checkpoint_read_as_transformers_reads_it(t5_dir):
    directory, model, _ = t5_dir
    kind = directory.name
    assert model.config.scale_decoder_outputs == (kind == "tied")
    own_head = not torch.equal(model.lm_head.weight, model.shared.weight)
    assert own_head == (kind == "flan")


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
@pytest.mark.parametrize("unpad", [False, True])
def test_scores_equal_minichecks_flan_t5_path(t5_dir, expected, backend, unpad):
    directory, model, tokenizer = t5_dir
    scorer = ma.MiniCheckScorer.from_pretrained(directory, chunk_size=CHUNK, attn_backend=backend, unpad=unpad,
                                                batch_size=3)
    assert isinstance(scorer, MiniCheckT5Scorer) and scorer.max_length == 2048
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing cut, nothing said
        details = scorer.score([d for d, _ in PAIRS], [c for _, c in PAIRS], return_details=True)
    for got, (score, chunks, probs) in zip(details, expected):
        assert got["chunks"] == chunks
        assert got["score"] == pytest.approx(score, abs=1e-5)
        torch.testing.assert_close(torch.tensor([p for p, in got["supported"]]), torch.tensor(probs), atol=1e-5, rtol=0)
    assert max(len(c) for _, c, _ in expected) >= 3  # documents in several chunks
    every = [p for _, _, probs in expected for p in probs]
    assert max(every) - min(every) > 1e-3  # the chunks score differently: the test can fail
    text = scorer.text(details[0]["chunks"][0], CLAIMS[0])
    ours = scorer.tokenizer([text])["input_ids"][0].tolist()
    assert ours == tokenizer("predict: " + tokenizer.eos_token.join([DOCS[0], CLAIMS[0]]))["input_ids"]
    assert ours.count(1) == 2  # the eos between chunk and claim is the special token, and the closing one


def test_a_pair_scores_the_same_alone_and_in_a_batch(t5_dir):
    directory, _, _ = t5_dir
    scorer = ma.MiniCheckScorer.from_pretrained(directory, chunk_size=CHUNK)
    together = scorer.score([d for d, _ in PAIRS], [c for _, c in PAIRS], return_details=True)
    backwards = scorer.score([d for d, _ in PAIRS[::-1]], [c for _, c in PAIRS[::-1]], return_details=True)[::-1]
    for (doc, claim), both, other in zip(PAIRS, together, backwards):
        alone = scorer.score([doc], [claim], return_details=True)[0]
        assert alone["supported"] == both["supported"] == other["supported"]  # the same bits


def test_defaults_and_a_long_chunk_cut_and_reported(t5_dir):
    """MiniCheck's defaults for flan-t5 (500-word chunks, a 2048-token window); a sentence longer than the window is
    one chunk, cut at 2048 tokens as MiniCheck cuts it, and reported (a warning, and the chunk's cut tokens). At 2048
    tokens fp32 rounding alone moves the reference (transformers' eager and sdpa logits differ by ~6e-4 on these
    sharp random weights): the score is held to 3x transformers' own fp32 error against its float64 run."""
    directory, model, tokenizer = t5_dir
    scorer = ma.MiniCheckScorer.from_pretrained(directory)
    assert scorer.chunk_size == 500
    long = DOCS[4]  # one sentence of 700 words, ~2100 tokens
    score, chunks, _ = ReferenceMiniCheckT5(model, tokenizer, ma.split_sentences).score(long, CLAIMS[4])
    exact, _, _ = ReferenceMiniCheckT5(model.double(), tokenizer, ma.split_sentences).score(long, CLAIMS[4])
    model.float()
    with pytest.warns(TruncationWarning, match="1 of 1 predict: chunk"):
        got = scorer.score([long], [CLAIMS[4]], return_details=True)[0]
    assert got["chunks"] == chunks == [long.strip()] and got["truncated"][0][0] > 0
    assert abs(got["score"] - exact) <= 3 * abs(score - exact) + 1e-6


def test_refusals(t5_dir, tmp_path):
    directory, model, _ = t5_dir
    with pytest.raises(ValueError, match="chunk_size"):
        ma.MiniCheckScorer.from_pretrained(directory, chunk_size=0)
    with pytest.raises(ValueError, match="int8"):
        ma.MiniCheckScorer.from_pretrained(directory, dtype="int8")
    encoder_only = tmp_path / "encoder"
    transformers.T5EncoderModel(model.config).save_pretrained(encoder_only)
    t5_unigram(encoder_only)
    with pytest.raises(ValueError, match="no decoder weights"):
        ma.MiniCheckScorer.from_pretrained(encoder_only)
