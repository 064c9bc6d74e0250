"""EuroBERT (minialign/models/eurobert.py) against transformers' native EuroBertModel, EuroBertForSequenceClassification
(the three poolings), EuroBertForMaskedLM and EuroBertForTokenClassification (eager attention, fp32): tiny random
configs built and saved here, grouped-query attention (4 query heads on 2 key / value heads) and plain, biases on and
off, sequences of 150 tokens (rotary positions far past a short range), every backend, padded and packed; the
converter both ways; both config.json spellings (transformers 5's rope_parameters, the Hub's rope_theta); the
Llama-3-style tokenizer against AutoTokenizer; the products (SentenceEncoder, Classifier, TokenClassifier, FillMask)
against sentence-transformers and transformers' pipelines."""

import dataclasses
import json

import pytest
import torch
import transformers
from conftest import encoder_parity, pad_batch, reference_model

import minialign as ma
from minialign import convert
from minialign.apps.cli import main as cli
from minialign.runtime.engine import TruncationWarning

TOL = dict(atol=1e-5, rtol=0)
LENGTHS = (150, 131, 9)
BIASES = dict(attention_bias=True, mlp_bias=True)
NO_BIASES = dict(attention_bias=False, mlp_bias=False)


def hf_config(**overrides):
    base = dict(vocab_size=97, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                intermediate_size=37, max_position_embeddings=256, pad_token_id=1, bos_token_id=0, eos_token_id=1,
                mask_token_id=2, rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 500.0},
                **BIASES)
    return transformers.EuroBertConfig(**{**base, **overrides})


def hf_model(cls=transformers.EuroBertModel, **overrides):
    return reference_model(cls, hf_config(**overrides), factor=3,
                           sharpen=lambda name, p: p.dim() == 2 and "embed" not in name)


def _saved(tmp_path, cls=transformers.EuroBertModel, **overrides):
    hf = hf_model(cls, **overrides)
    hf.save_pretrained(tmp_path / "m")
    return hf, tmp_path / "m"


def _batch(config, lengths=LENGTHS):
    torch.manual_seed(1)
    ids = torch.randint(3, config.vocab_size, (len(lengths), max(lengths)))
    return pad_batch(ids, list(lengths), config.pad_token_id)


@pytest.mark.parametrize("heads", [dict(num_key_value_heads=2), dict(num_key_value_heads=4)], ids=["gqa", "mha"])
@pytest.mark.parametrize("biases", [BIASES, NO_BIASES], ids=["biases", "no-biases"])
@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_encoder_parity_padded_and_packed(backend, biases, heads, tmp_path):
    hf, directory = _saved(tmp_path, **biases, **heads)
    ours = ma.Encoder.from_pretrained(directory, attn_backend=backend)
    assert ours.config.arch == "eurobert" and ours.pooler is None and ours.config.rope_theta == 500.0
    attention = ours.layers[0].attention
    assert attention.num_kv_heads == heads["num_key_value_heads"] and (attention.qkv.bias is not None) == biases[
        "attention_bias"]
    assert attention.qkv.weight.shape == ((4 + 2 * heads["num_key_value_heads"]) * 16, 64)  # (H + 2 KV) D
    ids, mask = _batch(hf.config)
    real = mask.bool()
    _, out, diffs = encoder_parity(hf, ours, real, TOL, input_ids=ids, attention_mask=mask)
    assert {f"hidden_{i}" for i in range(3)} | {f"attention_{i}" for i in range(2)} <= set(diffs)
    torch.testing.assert_close(out.hidden_states[-1], out.last_hidden_state)  # the final norm's, as transformers


@pytest.mark.slow
def test_flex_padded_and_packed(tmp_path):
    """One flex case (CPU flex compiles per shape): grouped queries, packed by default on CPU, and padded."""
    hf, directory = _saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend="flex")
    ids, mask = _batch(hf.config, lengths=(150, 40))
    real = mask.bool()
    with torch.no_grad():
        theirs = hf(ids, attention_mask=mask).last_hidden_state
        for unpad in (False, True):
            got = ours(ids, attention_mask=mask, unpad=unpad).last_hidden_state
            torch.testing.assert_close(got[real], theirs[real], **TOL)


def test_a_text_is_bit_identical_whatever_it_is_batched_with(tmp_path):
    """A sequence's states alone, and beside others of other lengths, padded or packed: torch.equal."""
    _, directory = _saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend="sdpa")
    ids, mask = _batch(ours.config, lengths=(37, 120, 5, 64))
    with torch.no_grad():
        alone = ours(ids[:1, :37], attention_mask=mask[:1, :37], unpad=True).last_hidden_state[0]
        for batch in (slice(0, 2), slice(0, 4)):
            together = ours(ids[batch], attention_mask=mask[batch], unpad=True).last_hidden_state[0, :37]
            assert torch.equal(together, alone)


@pytest.mark.parametrize("pooling", ["bos", "mean", "late"])
def test_classifier_logits_padded_and_packed(pooling, tmp_path):
    hf, directory = _saved(tmp_path, transformers.EuroBertForSequenceClassification, num_labels=3,
                           classifier_pooling=pooling)
    model = ma.ClassifierModel.from_pretrained(directory, attn_backend="sdpa")
    assert model.config.classifier_pooling == pooling and model.config.labels == ("LABEL_0", "LABEL_1", "LABEL_2")
    ids, mask = _batch(hf.config)
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask).logits
        for unpad in (False, True):
            got = model(ids, attention_mask=mask, unpad=unpad)
            torch.testing.assert_close(got.logits, expected, **TOL)
            assert got.last_hidden_state.shape[1] == (1 if pooling == "bos" else ids.size(1))
        no_mask = ids[:1, :128]  # no mask: every token real (transformers' mean over dim 1)
        torch.testing.assert_close(model(no_mask).logits, hf(no_mask).logits, **TOL)


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_masked_lm_logits_and_names_both_ways(tied, tmp_path):
    """EuroBertForMaskedLM: lm_head on the final states (its bias as mlp_bias says), untied by default; the names
    map both ways bit for bit."""
    hf, directory = _saved(tmp_path, transformers.EuroBertForMaskedLM, tie_word_embeddings=tied)
    sd = {k.removeprefix("model."): v for k, v in hf.state_dict().items()}
    ours_sd, dropped = convert.hf_to_minialign(sd, "eurobert")
    assert dropped == [] and "mlm_head.bias" in ours_sd
    back = convert.minialign_to_hf(ours_sd, "eurobert")
    assert set(back) == set(sd) and all(torch.equal(back[k], sd[k]) for k in back)
    model = ma.MaskedLMModel.from_pretrained(directory, attn_backend="sdpa")
    assert model.mlm_head.dense is None and (model.mlm_head.decoder is None) == tied
    ids, mask = _batch(hf.config)
    real = mask.bool()
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask).logits
        for unpad in (False, True):
            torch.testing.assert_close(model(ids, attention_mask=mask, unpad=unpad).logits[real], expected[real], **TOL)


def test_token_classification_logits_and_no_question_answering(tmp_path):
    hf, directory = _saved(tmp_path, transformers.EuroBertForTokenClassification, num_labels=5)
    model = ma.TokenClassifierModel.from_pretrained(directory, attn_backend="sdpa")
    ids, mask = _batch(hf.config)
    real = mask.bool()
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask).logits
        for unpad in (False, True):
            torch.testing.assert_close(model(ids, attention_mask=mask, unpad=unpad).logits[real], expected[real], **TOL)
    with pytest.raises(ValueError, match="no question-answering head"):
        ma.QuestionAnsweringModel(dataclasses.replace(model.config, labels=()))


@pytest.mark.parametrize("cls", [transformers.EuroBertModel, transformers.EuroBertForSequenceClassification])
def test_convert_round_trip_loads_in_transformers(cls, tmp_path):
    labels = {"num_labels": 2, "classifier_pooling": "mean"} if cls is not transformers.EuroBertModel else {}
    hf, directory = _saved(tmp_path, cls, **labels)
    assert cli(["convert", str(directory), str(tmp_path / "native")]) == 0
    assert cli(["convert", str(tmp_path / "native"), str(tmp_path / "hf"), "--to", "hf"]) == 0
    auto = transformers.AutoModel if cls is transformers.EuroBertModel else \
        transformers.AutoModelForSequenceClassification
    back, info = auto.from_pretrained(tmp_path / "hf", output_loading_info=True, attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"] and type(back) is cls
    for name in ("num_key_value_heads", "rope_parameters", "classifier_pooling", "rms_norm_eps", "attention_bias",
                 "mlp_bias", "head_dim"):
        assert getattr(back.config, name) == getattr(hf.config, name), name
    ids, mask = _batch(hf.config)
    with torch.no_grad():
        a, b = back.eval()(ids, attention_mask=mask), hf(ids, attention_mask=mask)
    if cls is transformers.EuroBertModel:
        torch.testing.assert_close(a.last_hidden_state[mask.bool()], b.last_hidden_state[mask.bool()], **TOL)
    else:
        torch.testing.assert_close(a.logits, b.logits, **TOL)
    saved = convert.read_safetensors(directory / "model.safetensors")
    exported = convert.read_safetensors(tmp_path / "hf" / "model.safetensors")
    assert set(exported) == set(saved) and all(torch.equal(exported[k], v) for k, v in saved.items())


def test_config_both_spellings_and_preset():
    new = hf_config(num_labels=2, classifier_pooling="bos").to_dict()  # transformers 5: rope_parameters
    hub = {k: v for k, v in new.items() if k != "rope_parameters"}
    hub.update(rope_theta=500.0, rope_scaling=None)  # the Hub's spelling (the authors' configuration code)
    for hf in (new, hub):
        config = ma.Config.from_hf(hf)
        assert (config.rope_theta, config.num_key_value_heads, config.kv_heads, config.classifier_pooling,
                config.layer_norm_eps, config.activation, config.hidden_dropout) == (500.0, 2, 2, "bos", 1e-5, "silu", 0.0)
    back = transformers.EuroBertConfig(**ma.Config.from_hf(new).to_hf(classifier=True))
    for name in ("hidden_size", "num_hidden_layers", "num_key_value_heads", "intermediate_size", "rope_parameters",
                 "rms_norm_eps", "attention_bias", "mlp_bias", "pad_token_id", "hidden_act", "tie_word_embeddings"):
        assert getattr(back, name) == getattr(hf_config(), name), name
    assert back.classifier_pooling == "bos" and back.architectures == ["EuroBertForSequenceClassification"]
    preset = ma.Config.from_name("eurobert-210m")
    assert (preset.hidden_size, preset.num_layers, preset.kv_heads, preset.intermediate_size, preset.rope_theta,
            preset.max_seq_len, preset.pad_token_id, preset.tie_word_embeddings) == (768, 12, 12, 3072, 250000.0,
                                                                                      8192, 128001, False)


def test_bad_configs_name_the_field():
    scaled = hf_config().to_dict()
    scaled["rope_parameters"] = {"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0}
    with pytest.raises(ValueError, match="rope_type"):
        ma.Config.from_hf(scaled)
    hub = {k: v for k, v in hf_config().to_dict().items() if k != "rope_parameters"}
    with pytest.raises(ValueError, match="rope_scaling"):
        ma.Config.from_hf({**hub, "rope_theta": 500.0, "rope_scaling": {"type": "dynamic", "factor": 2.0}})
    with pytest.raises(ValueError, match="head_dim"):
        ma.Config.from_hf({**hf_config().to_dict(), "head_dim": 32})
    good = ma.Config.from_hf(hf_config().to_dict())
    for field, value in (("num_key_value_heads", 3), ("num_key_value_heads", 0), ("rope_theta", -1.0),
                         ("classifier_pooling", "cls"), ("mlp_bias", "yes")):
        with pytest.raises(ValueError, match="num_key_value_heads" if field == "num_key_value_heads" else field):
            dataclasses.replace(good, **{field: value})
    with pytest.raises(ValueError, match="grouped-query"):  # grouped heads cannot be pruned one by one
        ma.Encoder(good).prune_heads({0: [1]})


def test_compiles_without_graph_breaks(tmp_path):
    _, directory = _saved(tmp_path)
    model = ma.Encoder.from_pretrained(directory, attn_backend="sdpa")
    ids, mask = _batch(model.config, lengths=(20, 12))
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(ids, attention_mask=mask)
    assert explanation.graph_break_count == 0, explanation.break_reasons


# -- the tokenizer and the products ----------------------------------------------------------------

def test_tokenizer_ids_equal_transformers(tmp_path):
    """EuroBERT's Llama-3-style byte-level BPE tokenizer.json (family_builders.eurobert_bpe: Llama 3's split, then
    ByteLevel; `<|begin_of_text|> A <|end_of_text|>`; pad = <|end_of_text|>) gives transformers' ids and keys,
    singles and pairs, truncated or not; no token_type_ids."""
    from family_builders import FAMILIES, write_tokenizer
    from text.test_family_tokenizers import _assert_matches_transformers

    write_tokenizer(FAMILIES["eurobert"], tmp_path, wordpiece_dir=tmp_path, bpe_dir=tmp_path)
    ours, theirs = ma.Tokenizer.from_pretrained(tmp_path), transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert ours.pad_token_id == theirs.pad_token_id == theirs.eos_token_id == 1 and ours.mask_token == "<|mask|>"
    ids = ours(["Paris, 1889."])["input_ids"][0].tolist()
    assert ids[0] == 0 and ids[-1] == 1 and "token_type_ids" not in ours(["a"], ["b"])
    _assert_matches_transformers(tmp_path)


TEXTS = ["The Eiffel Tower is in Paris.", "La tour a été construite à Paris en 1889.", "Short.",
         "Unicode: café naïve 東京 😀", "Der Turm wurde in Paris gebaut, sagte der Minister am Montag."]


def test_sentence_encoder_equals_sentence_transformers(tiny_family):
    from sentence_transformers import SentenceTransformer

    directory = tiny_family.sentence_transformers("eurobert")
    emb = ma.SentenceEncoder.from_pretrained(directory)
    assert emb.model.config.arch == "eurobert" and emb.pooling == ["mean"]
    expected = torch.as_tensor(SentenceTransformer(str(directory), device="cpu").encode(TEXTS, batch_size=2))
    with pytest.warns(TruncationWarning):  # the tiny BPE's tokens overrun the 24-token window: cut as ST cuts
        torch.testing.assert_close(emb.encode(TEXTS, batch_size=2), expected, **TOL)
        got = ma.SentenceEncoder.from_pretrained(directory, unpad=False).encode(TEXTS)
    torch.testing.assert_close(got, expected, **TOL)


def test_classifier_equals_transformers(tiny_family):
    directory, hf = tiny_family.classifier("eurobert", 3)  # "late" pooling, transformers' default
    clf = ma.Classifier.from_pretrained(directory)
    assert clf.model.config.classifier_pooling == "late"
    tok = transformers.AutoTokenizer.from_pretrained(directory)
    batch = tok(TEXTS, TEXTS[::-1], padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        expected = hf(**batch).logits
    torch.testing.assert_close(clf.predict(TEXTS, TEXTS[::-1], activation="none"), expected, **TOL)


def test_token_classifier_and_fill_mask_equal_the_pipelines(tiny_family):
    directory, hf = tiny_family.head("eurobert", "ForTokenClassification", 3)
    tok = transformers.AutoTokenizer.from_pretrained(directory)
    pipe = transformers.pipeline("token-classification", model=hf, tokenizer=tok, device="cpu")
    ours = ma.TokenClassifier.from_pretrained(directory).predict(TEXTS[:2])
    for mine, text in zip(ours, TEXTS[:2], strict=True):
        theirs = pipe(text)
        assert [e["entity"] for e in mine] == [e["entity"] for e in theirs] and len(theirs) > 0
        assert max(abs(a["score"] - float(b["score"])) for a, b in zip(mine, theirs)) <= 1e-5

    directory, hf = tiny_family.masked_lm("eurobert")
    tok = transformers.AutoTokenizer.from_pretrained(directory)
    texts = [f"The tower is in {tok.mask_token}.", f"La {tok.mask_token} a été construite."]
    pipe = transformers.pipeline("fill-mask", model=hf, tokenizer=tok, device="cpu")
    mine = ma.FillMask.from_pretrained(directory).predict(texts)
    for got, text in zip(mine, texts, strict=True):
        theirs = pipe(text)
        assert [c["token"] for c in got] == [int(c["token"]) for c in theirs]
        assert [c["sequence"] for c in got] == [c["sequence"] for c in theirs]
        assert max(abs(a["score"] - float(b["score"])) for a, b in zip(got, theirs)) <= 1e-5


def test_family_row_builds_the_config_the_test_row_says(tiny_family):
    """The product row (family_builders.FAMILIES) builds grouped queries and rotary positions as declared."""
    directory, _ = tiny_family.hf("eurobert")
    config = json.loads((directory / "config.json").read_text())
    assert config["num_key_value_heads"] == 1 and config["rope_parameters"]["rope_theta"] == 1000.0
    assert ma.Encoder.from_pretrained(directory).layers[0].attention.num_kv_heads == 1


def test_the_hubs_config_json_with_its_auto_map_and_clf_pooling(tmp_path):
    """EuroBERT's Hub config.json names the authors' code beside the weights in auto_map (what transformers' EuroBert*
    classes port: read as this family, ConfigRow.ported_code) and spells the pooling clf_pooling, which minialign reads
    as that code does (transformers' native config would keep its default, "late"); other code stays refused."""
    from minialign.convert.errors import CheckpointError

    hf, directory = _saved(tmp_path, transformers.EuroBertForSequenceClassification, num_labels=2,
                           classifier_pooling="mean")
    config = json.loads((directory / "config.json").read_text())
    config.pop("classifier_pooling")
    config.update(clf_pooling="mean", auto_map={
        "AutoConfig": "configuration_eurobert.EuroBertConfig", "AutoModel": "modeling_eurobert.EuroBertModel",
        "AutoModelForMaskedLM": "modeling_eurobert.EuroBertForMaskedLM",
        "AutoModelForPreTraining": "modeling_eurobert.EuroBertPreTrainedModel",
        "AutoModelForSequenceClassification": "modeling_eurobert.EuroBertForSequenceClassification"})
    (directory / "config.json").write_text(json.dumps(config))
    model = ma.ClassifierModel.from_pretrained(directory)
    assert model.config.classifier_pooling == "mean"
    ids, mask = _batch(hf.config)
    with torch.no_grad():
        torch.testing.assert_close(model(ids, attention_mask=mask).logits, hf(ids, attention_mask=mask).logits, **TOL)
    config["auto_map"]["AutoModel"] = "someone/other--modeling.OtherModel"
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="is custom code"):
        ma.ClassifierModel.from_pretrained(directory)
