"""HHEM (minialign/products/hhem.py) against HHEM-2.1-open's computation in transformers' own classes: its remote
code (modeling_hhem_v2.py) does not run on transformers 5 and is not fetched here, so the reference is what its
HHEMv2ForSequenceClassification.predict does, run on transformers' T5ForTokenClassification and AutoTokenizer:
the template formatted with each (premise, hypothesis), tokenized with padding and no truncation, logits[:, 0, :],
softmax, column 1. A tiny random T5ForTokenClassification (gated-gelu, as flan-t5) saved under `t5.` as HHEM's
model.safetensors, beside config.json naming a foundation directory built here (the T5 config and a deterministic
SentencePiece-like Unigram tokenizer: <pad> 0, </s> 1, <unk> 2, </s> appended)."""

import json
import warnings

import pytest
import torch
import transformers
from family_builders import unigram_model
from safetensors.torch import save_file

from minialign.products.hhem import HHEM, PROMPT
from minialign.runtime.engine import TruncationWarning

T5_SPECIALS = ["<pad>", "</s>", "<unk>"]  # google/flan-t5-base's first ids
SIZES = dict(d_model=32, d_kv=8, num_heads=4, d_ff=37, num_layers=2, relative_attention_num_buckets=8,
             relative_attention_max_distance=20, feed_forward_proj="gated-gelu", dropout_rate=0.1)
PAIRS = [("The tower was built in Paris and opened in 1889.", "The tower opened in 1889."),
         ("La tour a été construite à Paris en 1889.", "Der Turm wurde in Paris gebaut."),
         ("Police said the company grew; officials reported on Monday. " * 6, "A short claim."),
         ("", "Numbers 3.14 and $5,000 in the report.")]


def t5_unigram(directory):
    """A T5-shaped tokenizer.json (Metaspace Unigram, `$A </s>`, <pad> 0 / </s> 1 / <unk> 2 as flan-t5's), built
    here the same on every run (family_builders.unigram_model), and a tokenizer_config.json naming its tokens."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, processors

    tok = Tokenizer(unigram_model(T5_SPECIALS, "<unk>"))
    tok.add_special_tokens(T5_SPECIALS)
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                 pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    assert [tok.token_to_id(t) for t in T5_SPECIALS] == [0, 1, 2]
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", 1)])
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>",
        "model_max_length": 512}))
    return tok.get_vocab_size()


@pytest.fixture(scope="module")
def hhem_dirs(tmp_path_factory):
    """(HHEM's directory, its foundation's, the reference T5ForTokenClassification)."""
    root = tmp_path_factory.mktemp("hhem")
    foundation, hhem = root / "flan-t5-tiny", root / "hhem"
    foundation.mkdir()
    hhem.mkdir()
    config = transformers.T5Config(vocab_size=t5_unigram(foundation), **SIZES)
    config.save_pretrained(foundation)
    config._attn_implementation = "eager"
    transformers.set_seed(0)
    model = transformers.T5ForTokenClassification(config).eval()  # HHEM's __init__: num_labels 2 by default
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:  # off their initial ones: a swapped name cannot pass
                p.add_(torch.randn_like(p) * 0.1)
            elif name.endswith(("SelfAttention.q.weight", "SelfAttention.k.weight", "relative_attention_bias.weight")):
                p.mul_(3)  # sharper attention: positions move the outputs
        model.classifier.weight.mul_(0.1)  # T5's init draws it at std 1: to a trained head's scale
        model.classifier.bias.add_(torch.tensor([0.3, -0.2]))
    tensors = {"t5." + k: v.contiguous() for k, v in model.state_dict().items()
               if k != "transformer.encoder.embed_tokens.weight"}  # tied to shared, saved once (as published)
    save_file(tensors, str(hhem / "model.safetensors"))
    (hhem / "config.json").write_text(json.dumps({
        "architectures": ["HHEMv2ForSequenceClassification"], "model_type": "HHEMv2", "foundation": str(foundation),
        "prompt": PROMPT, "auto_map": {"AutoConfig": "configuration_hhem_v2.HHEMv2Config",
                                       "AutoModelForSequenceClassification":
                                           "modeling_hhem_v2.HHEMv2ForSequenceClassification"}}))
    return hhem, foundation, model


def reference_scores(model, foundation, pairs):
    """HHEMv2ForSequenceClassification.predict, in transformers' classes."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(foundation)
    inputs = tokenizer([PROMPT.format(text1=p, text2=h) for p, h in pairs], return_tensors="pt", padding=True)
    with torch.no_grad():
        logits = model(**inputs).logits[:, 0, :]
    return torch.softmax(logits, dim=-1)[:, 1], inputs


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
@pytest.mark.parametrize("unpad", [False, True])
def test_scores_equal_hhems_computation(hhem_dirs, backend, unpad):
    hhem, foundation, model = hhem_dirs
    expected, inputs = reference_scores(model, foundation, PAIRS)
    assert (inputs["input_ids"][:, 0] == 0).all() and inputs["attention_mask"][:, 0].all()  # the template's <pad>
    assert (inputs["attention_mask"].sum(1) > 20).all()  # the texts reach past the table's max_distance
    ours = HHEM.from_pretrained(hhem, attn_backend=backend, unpad=unpad)
    got = ours.predict(PAIRS)
    assert got.shape == (len(PAIRS),) and ((got >= 0) & (got <= 1)).all()
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    assert (expected.max() - expected.min()) > 1e-3  # the pairs score differently: the test can fail
    ids = ours.tokenizer([ours.texts(PAIRS)[0]])["input_ids"][0].tolist()
    assert ids == inputs["input_ids"][0][inputs["attention_mask"][0].bool()].tolist()  # our tokens are theirs


def test_a_pair_scores_the_same_alone_and_in_a_batch(hhem_dirs):
    hhem, _, _ = hhem_dirs
    ours = HHEM.from_pretrained(hhem)
    together = ours.predict(PAIRS)
    for i, pair in enumerate(PAIRS):
        assert torch.equal(ours.predict([pair]), together[i:i + 1])


def test_no_window_by_default_as_hhem_cuts_nothing(hhem_dirs):
    """HHEM's predict tokenizes without truncation: a premise past the tokenizer's 512 tokens is read whole (no
    TruncationWarning), while a window asked for cuts and says so."""
    hhem, foundation, model = hhem_dirs
    long = [("The tower was built in Paris and opened in 1889. " * 80, "The tower opened in 1889.")]
    expected, inputs = reference_scores(model, foundation, long)
    assert inputs["input_ids"].size(1) > 512
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = HHEM.from_pretrained(hhem).predict(long)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    with pytest.warns(TruncationWarning, match="1 of 1"):
        HHEM.from_pretrained(hhem, max_length=64).predict(long)


def test_refusals(hhem_dirs, tmp_path):
    hhem, foundation, _ = hhem_dirs
    ours = HHEM.from_pretrained(hhem)
    assert ours.predict([]).shape == (0,)
    for bad in ("a premise", [("only one",)], [("premise", 3)]):
        with pytest.raises(ValueError):
            ours.predict(bad)
    with pytest.raises(ValueError, match="text1 and text2"):
        HHEM(ours.model, ours.tokenizer, prompt="{premise} {hypothesis}")
    with pytest.raises(ValueError, match="HHEMv2"):
        HHEM.from_pretrained(foundation)  # a T5 directory, not HHEM's


def test_the_score_command_the_rows_route_and_ray_score_as_predict(hhem_dirs, tmp_path):
    """`minialign score --method hhem` (a file and one pair), Ray's HHEMBatches and POST /rows/hhem: predict's
    scores."""
    from starlette.testclient import TestClient

    from minialign.apps import raydata
    from minialign.apps.cli import main as cli
    from minialign.apps.serve import Limits, Models, Service

    hhem, foundation, _ = hhem_dirs
    ours = HHEM.from_pretrained(hhem)
    expected = ours.predict(PAIRS[:2]).tolist()
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"context": c, "claim": h}) + "\n" for c, h in PAIRS[:2]))
    assert cli(["score", "--method", "hhem", "--model", str(hhem), "--foundation", str(foundation),
                "--input", str(tmp_path / "rows.jsonl"), "--output", str(tmp_path / "out.jsonl")]) == 0
    written = [json.loads(line)["score"] for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert written == pytest.approx(expected, abs=1e-6)
    batch = raydata.batches_class("hhem")(str(hhem))({"context": [c for c, _ in PAIRS[:2]],
                                                      "claim": [h for _, h in PAIRS[:2]]})
    assert list(batch["score"]) == pytest.approx(expected, abs=1e-6)
    with TestClient(Service(Models(products={"hhem": ours}), Limits()).app()) as client:
        body = client.post("/rows/hhem", json={"rows": [{"context": c, "claim": h} for c, h in PAIRS[:2]]}).json()
    assert [r["score"] for r in body["results"]] == pytest.approx(expected, abs=1e-6)


def test_nemo_guardrails_body_and_the_score_route(hhem_dirs):
    """Loaded as a product, HHEM answers NeMo Guardrails' body on POST /hhem ({"evidence", "claim"} -> {"hhem"}) and
    /score with "model": "hhem" (details: each pair's truncated tokens)."""
    from starlette.testclient import TestClient

    from minialign.apps.serve import Limits, Models, Service

    hhem, _, _ = hhem_dirs
    ours = HHEM.from_pretrained(hhem)
    expected = ours.predict(PAIRS[:2]).tolist()
    with TestClient(Service(Models(products={"hhem": ours}), Limits()).app()) as client:
        one = client.post("/hhem", json={"evidence": [PAIRS[0][0]], "claim": PAIRS[0][1]}).json()
        assert one == {"hhem": pytest.approx(expected[0], abs=1e-6)}
        both = client.post("/score", json={"pairs": [{"context": c, "claim": h} for c, h in PAIRS[:2]],
                                           "model": "hhem", "details": True}).json()
        assert both["scores"] == pytest.approx(expected, abs=1e-6) and both["details"][0]["truncated"] == 0
        assert client.post("/score", json={"pairs": [], "model": "hhem", "mode": "bin"}).status_code == 422
        assert client.post("/hhem", json={"evidence": "e"}).status_code == 422
