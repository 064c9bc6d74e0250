"""GTE (minialign/models/gte.py) against transformers' GteModel, GteForSequenceClassification, GteForMaskedLM and
GteForTokenClassification (eager attention, fp32): tiny random configs built and saved here, non-zero biases and
norms, sequences far past the rotary base's short range, the default and the linear rope type (the published
models' NTK scaling), with and without token types, every backend, padded and packed; the original checkpoints'
names and config.json (Alibaba-NLP/new-impl, what transformers converts on load); the config both ways; the
tokenizers of gte-en (BERT WordPiece) and gte-multilingual (XLM-R Unigram); the products on a sentence-transformers
directory with CLS pooling, as gte-v1.5's."""

import dataclasses
import json

import pytest
import torch
import transformers
from conftest import encoder_parity, pad_batch, reference_model

import minialign as ma
from minialign.convert.errors import CheckpointError
from minialign import convert
from minialign.nn.rotary import default_inv_freq, linear_inv_freq, ntk_as_linear

TOL = dict(atol=1e-5, rtol=0)
BACKENDS = ["eager", "sdpa", pytest.param("flex", marks=pytest.mark.slow)]
LENGTHS = (150, 131, 9)
LINEAR = {"rope_type": "linear", "rope_theta": 1000.0, "factor": 1.25}
DEFAULT = {"rope_type": "default", "rope_theta": 500.0}


def hf_model(cls=transformers.GteModel, **overrides):
    base = dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
                max_position_embeddings=256, pad_token_id=0, type_vocab_size=2, rope_parameters=dict(LINEAR))
    return reference_model(cls, transformers.GteConfig(**{**base, **overrides}), factor=4,
                           sharpen=lambda name, p: "q_proj" in name or "k_proj" in name)


def _saved(tmp_path, cls=transformers.GteModel, **overrides):
    hf = hf_model(cls, **overrides)
    hf.save_pretrained(tmp_path / "m")
    return hf, tmp_path / "m"


def _batch(config, lengths=LENGTHS, types=True):
    torch.manual_seed(1)
    ids = torch.randint(3, config.vocab_size, (len(lengths), max(lengths)))
    ids, mask = pad_batch(ids, list(lengths), config.pad_token_id)
    token_types = (torch.arange(ids.size(1)) >= 5).long().expand_as(ids) * mask if types else None
    return ids, mask, token_types


@pytest.mark.parametrize("rope,types", [(LINEAR, 2), (DEFAULT, 0)], ids=["linear-types", "default-no-types"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_encoder_parity_padded_and_packed(backend, rope, types, tmp_path):
    hf, directory = _saved(tmp_path, rope_parameters=dict(rope), type_vocab_size=types)
    ours = ma.Encoder.from_pretrained(directory, attn_backend=backend)
    assert ours.config.arch == "gte" and ours.pooler is None and ours.config.rope_type == rope["rope_type"]
    assert (ours.embeddings.token_type is None) == (types == 0)
    ffn = ours.layers[0].ffn  # GteMLP: no bias on gate / up, one on down; the second half of up activated
    assert ffn.up.bias is None and ffn.down.bias is not None and ffn.activated == "second"
    ids, mask, token_types = _batch(hf.config, types=bool(types))
    inputs = dict(input_ids=ids, attention_mask=mask, **({"token_type_ids": token_types} if types else {}))
    _, _, diffs = encoder_parity(hf, ours, mask.bool(), TOL, **inputs)
    assert {f"hidden_{i}" for i in range(3)} <= set(diffs)


def test_the_rope_matters(tmp_path):
    """Another theta, or no linear factor, gives another result: the test above can tell the rope types apart."""
    hf, directory = _saved(tmp_path)
    ref = ma.Encoder.from_pretrained(directory, attn_backend="sdpa")
    ids, mask, types = _batch(hf.config)
    for change in (dict(rope_type="default", rope_factor=None), dict(rope_theta=2000.0)):
        other = ma.Encoder(dataclasses.replace(ref.config, **change), attn_backend="sdpa")
        other.load_state_dict(ref.state_dict())
        with torch.no_grad():
            a, b = ref(ids, mask, types), other(ids, mask, types)
        assert (a.last_hidden_state - b.last_hidden_state)[mask.bool()].abs().max() > 1e-3, change


@pytest.mark.parametrize("cls,ours_cls", [(transformers.GteForSequenceClassification, ma.ClassifierModel),
                                          (transformers.GteForTokenClassification, ma.TokenClassifierModel),
                                          (transformers.GteForMaskedLM, ma.MaskedLMModel)],
                         ids=["sequence", "token", "masked-lm"])
def test_every_head_matches_transformers(cls, ours_cls, tmp_path):
    labels = {} if cls is transformers.GteForMaskedLM else {"num_labels": 3}
    hf, directory = _saved(tmp_path, cls, **labels)
    ids, mask, types = _batch(hf.config)
    real = mask.bool()
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask, token_type_ids=types).logits
        for backend in ("eager", "sdpa"):
            model = ours_cls.from_pretrained(directory, attn_backend=backend)
            for unpad in (False, True):
                got = model(ids, attention_mask=mask, token_type_ids=types, unpad=unpad).logits
                if got.dim() == 3:
                    got, want = got[real], expected[real]
                else:
                    want = expected
                torch.testing.assert_close(got, want, **TOL)
    assert cls is not transformers.GteForSequenceClassification or model.encoder.pooler is not None


def test_no_question_answering_head_as_transformers():
    config = ma.Config(arch="gte", vocab_size=50, hidden_size=16, num_layers=1, num_heads=1, intermediate_size=20)
    with pytest.raises(ValueError, match="GteForQuestionAnswering"):
        ma.QuestionAnsweringModel(config)


def _original_names(hf_state: dict, prefix: str) -> dict:
    """transformers' GteForMaskedLM names as the original NewForMaskedLM's (Alibaba-NLP/new-impl modeling.py): the
    inverse of conversion_mapping.py "gte" (q, k, v stacked as qkv_proj; [up; gate] as up_gate_proj)."""
    out = {}
    for name, t in hf_state.items():
        name = name.replace("gte.", prefix, 1).replace(".layers.", ".encoder.layer.").replace("self_attn.o_proj",
                                                                                               "attention.o_proj")
        name = name.replace("post_attention_layernorm", "attn_ln").replace("post_mlp_layernorm", "mlp_ln")
        name = name.replace("lm_head.layer_norm", "lm_head.norm")
        if name.startswith(prefix + "layers."):
            name = name.replace(prefix + "layers.", prefix + "encoder.layer.")
        out[name] = t
    fused = {}
    for name in list(out):
        if name.endswith("self_attn.q_proj.weight") or name.endswith("self_attn.q_proj.bias"):
            kind = name.rsplit(".", 1)[1]
            stem = name.rsplit(".self_attn.", 1)[0]
            parts = [out.pop(f"{stem}.self_attn.{p}_proj.{kind}") for p in "qkv"]
            fused[f"{stem}.attention.qkv_proj.{kind}"] = torch.cat(parts)
        if name.endswith("mlp.up_proj.weight"):
            stem = name.rsplit(".mlp.", 1)[0]
            fused[f"{stem}.mlp.up_gate_proj.weight"] = torch.cat([out.pop(name), out.pop(f"{stem}.mlp.gate_proj.weight")])
    return {**out, **fused}


def test_the_original_checkpoint_and_config_json(tmp_path):
    """A checkpoint in the original's names (`new.`, qkv_proj, up_gate_proj = [up; gate], attn_ln / mlp_ln,
    lm_head.norm) under the original's config.json (rope_theta + rope_scaling ntk, position_embedding_type "rope")
    loads as transformers converts it: the same logits as the transformers model it was made from, and as
    transformers' own loading of it (model_type gte, rope_parameters linear, as its GTE docs write the NTK scaling)."""
    import safetensors.torch

    base, ntk = 500.0, 2.0
    theta, factor = ntk_as_linear(base, ntk, 16)
    hf = hf_model(transformers.GteForMaskedLM, rope_parameters={"rope_type": "linear", "rope_theta": theta,
                                                                "factor": factor})
    original = _original_names(hf.state_dict(), "new.")
    original.pop("lm_head.decoder.weight")  # tied to the word embeddings
    assert {"new.encoder.layer.0.attention.qkv_proj.weight", "new.encoder.layer.1.mlp.up_gate_proj.weight",
            "lm_head.norm.weight"} <= set(original)
    directory = tmp_path / "original"
    directory.mkdir()
    safetensors.torch.save_file({k: v.contiguous() for k, v in original.items()}, directory / "model.safetensors")
    config = {k: v for k, v in hf.config.to_dict().items() if k not in ("rope_parameters",)}
    config.update(rope_theta=base, rope_scaling={"type": "ntk", "factor": ntk}, position_embedding_type="rope",
                  layer_norm_type="layer_norm", logn_attention_scale=False, pack_qkv=True, unpad_inputs=False)
    (directory / "config.json").write_text(json.dumps(config))
    ours = ma.MaskedLMModel.from_pretrained(directory, attn_backend="eager")
    assert (ours.config.rope_type, ours.config.rope_theta, ours.config.rope_factor) == ("linear", theta, factor)
    ids, mask, types = _batch(hf.config)
    real = mask.bool()
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask, token_type_ids=types).logits[real]
        torch.testing.assert_close(ours(ids, mask, types).logits[real], expected, **TOL)
        # the Hub's files say model_type "new" with an auto_map to the original code: refused, naming gte (code
        # transformers has ported); the same file under model_type "gte" keeps its auto_map and loads as
        # transformers reads it
        auto_map = {"AutoConfig": "Alibaba-NLP/new-impl--configuration.NewConfig",
                    "AutoModelForMaskedLM": "Alibaba-NLP/new-impl--modeling.NewForMaskedLM"}
        (directory / "config.json").write_text(json.dumps({**config, "model_type": "new", "auto_map": auto_map}))
        with pytest.raises(CheckpointError, match=r"auto_map names Alibaba-NLP/new-impl\); minialign runs it "
                                                  r"natively as model_type 'gte'"):
            ma.MaskedLMModel.from_pretrained(directory)
        (directory / "config.json").write_text(json.dumps({**config, "auto_map": auto_map}))
        ported = ma.MaskedLMModel.from_pretrained(directory, attn_backend="eager")
        torch.testing.assert_close(ported(ids, mask, types).logits[real], expected, **TOL)
        # transformers' own conversion (conversion_mapping.py "gte") of the same names, with its config spelling
        (directory / "config.json").write_text(json.dumps(hf.config.to_dict()))
        theirs = transformers.GteForMaskedLM.from_pretrained(directory, attn_implementation="eager").eval()
        torch.testing.assert_close(theirs(ids, attention_mask=mask, token_type_ids=types).logits[real], expected,
                                   **TOL)


def test_ntk_scaling_is_the_linear_rope_type_bit_for_bit():
    """NTKScalingRotaryEmbedding (Alibaba-NLP/new-impl modeling.py, mixed_b None), re-implemented from its lines:
    base * s, then inv_freq / s^(2 / dim); the linear type over ntk_as_linear's (theta, factor) equals it exactly."""
    for dim, base, s in ((64, 160000.0, 2.0), (64, 500000.0, 2.0), (16, 10000.0, 3.0)):
        scaled = base * s
        original = 1.0 / (scaled ** (torch.arange(0, dim, 2).float() / dim))
        original = original / s ** (2 / dim)
        theta, factor = ntk_as_linear(base, s, dim)
        assert torch.equal(linear_inv_freq(dim, theta, factor), original)
        assert not torch.equal(default_inv_freq(dim, base), original)


def test_config_both_ways_presets_and_bad_fields():
    hf = hf_model().config
    config = ma.Config.from_hf(hf.to_dict())
    assert (config.rope_theta, config.rope_type, config.rope_factor, config.type_vocab_size) == (1000.0, "linear",
                                                                                                 1.25, 2)
    back = transformers.GteConfig(**config.to_hf(classifier=True))
    for name in ("hidden_size", "num_hidden_layers", "intermediate_size", "rope_parameters", "type_vocab_size",
                 "pad_token_id", "layer_norm_eps", "max_position_embeddings", "hidden_act"):
        assert getattr(back, name) == getattr(hf, name), name
    assert back.architectures == ["GteForSequenceClassification"]
    plain = ma.Config.from_hf(transformers.GteConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                                     num_attention_heads=1, intermediate_size=20).to_dict())
    assert (plain.rope_theta, plain.rope_type, plain.rope_factor, plain.pad_token_id) == (160000.0, "default", None, 1)
    base = ma.Config.from_name("gte-base-en-v1.5")
    large = ma.Config.from_name("gte-large-en-v1.5")
    assert (base.hidden_size, base.type_vocab_size, base.rope_theta, base.rope_type) == (768, 0, 1e6, "linear")
    assert base.rope_factor == 2.0 ** (2 / 64) and large.rope_theta == 320000.0 and large.type_vocab_size == 2
    for field, value in (("rope_type", "yarn"), ("rope_theta", 0.0), ("rope_factor", -1.0)):
        with pytest.raises(ValueError, match=field):
            dataclasses.replace(config, **{field: value})
    with pytest.raises(ValueError, match="rope_factor"):
        dataclasses.replace(config, rope_type="default")
    for change, field in (({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1.0, "factor": 2.0}}, "rope_type"),
                          ({"position_embedding_type": "absolute"}, "position_embedding_type"),
                          ({"logn_attention_scale": True}, "logn_attention_scale"),
                          ({"rope_parameters": None, "rope_scaling": {"type": "ntk", "factor": 2.0, "mixed_b": 0.5}},
                           "mixed_b")):
        with pytest.raises(ValueError, match=field):
            ma.Config.from_hf({**hf.to_dict(), **change})


def test_export_to_transformers_layout(tmp_path):
    """save_pretrained(layout="hf") writes transformers' module names and config: its Auto class loads it with no
    missing or unexpected weight and gives the original's logits."""
    hf, directory = _saved(tmp_path, transformers.GteForSequenceClassification, num_labels=2)
    out = ma.ClassifierModel.from_pretrained(directory).save_pretrained(tmp_path / "hf", layout="hf")
    back, info = transformers.AutoModelForSequenceClassification.from_pretrained(
        out, output_loading_info=True, attn_implementation="eager")
    assert type(back) is transformers.GteForSequenceClassification
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert back.config.rope_parameters == hf.config.rope_parameters
    ids, mask, types = _batch(hf.config)
    with torch.no_grad():
        torch.testing.assert_close(back.eval()(ids, attention_mask=mask, token_type_ids=types).logits,
                                   hf(ids, attention_mask=mask, token_type_ids=types).logits, **TOL)
    # transformers 5 saves the original's names (save_pretrained reverses conversion_mapping.py "gte": qkv_proj,
    # up_gate_proj, attn_ln, under `gte.`); minialign writes its modules' (q_proj, gate_proj, ...), which it loads as
    # they are: the same tensors either way
    saved = convert.read_safetensors(directory / "model.safetensors")
    assert "gte.encoder.layer.0.mlp.up_gate_proj.weight" in saved
    exported = convert.read_safetensors(out / "model.safetensors")
    assert "gte.layers.0.mlp.gate_proj.weight" in exported
    theirs, ours = (convert.hf_to_minialign(dict(sd), "gte")[0] for sd in (saved, exported))
    assert set(theirs) == set(ours)
    for k, v in theirs.items():
        assert torch.equal(ours[k], v), k


def test_a_text_is_the_same_whatever_it_is_batched_with(tmp_path):
    """Packed (the products' default), each text alone and in the batch give the same bits, rotary tables included."""
    hf, directory = _saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory)
    ids, mask, types = _batch(hf.config)
    with torch.no_grad():
        together = ours(ids, mask, types, unpad=True).last_hidden_state
        for i, n in enumerate(LENGTHS):
            alone = ours(ids[i:i + 1, :n], mask[i:i + 1, :n], types[i:i + 1, :n], unpad=True).last_hidden_state[0]
            assert torch.equal(alone, together[i, :n]), n


@pytest.mark.parametrize("kind", ["wordpiece", "unigram"])
def test_tokenizer_ids_equal_transformers(kind, tmp_path, wordpiece_dir):
    """gte-en-v1.5's BERT WordPiece (tokenizer_class BertTokenizer) and gte-multilingual's XLM-R Unigram."""
    from family_builders import FAMILIES, write_tokenizer
    from text.test_family_tokenizers import _assert_matches_transformers

    row = FAMILIES["gte"]
    if kind == "unigram":
        row = dataclasses.replace(row, tokenizer="unigram", tokenizer_config={"tokenizer_class": "XLMRobertaTokenizer"})
    write_tokenizer(row, tmp_path, wordpiece_dir=wordpiece_dir, bpe_dir=tmp_path)
    _assert_matches_transformers(tmp_path)


TEXTS = ["The Eiffel Tower is in Paris.", "Unicode: café naïve 東京 😀 — “quotes”", "Short.",
         "La tour a été construite à Paris en 1889. " * 3]


def test_sentence_encoder_with_cls_pooling_equals_sentence_transformers(tiny_family):
    """gte-v1.5's sentence-transformers layout: Transformer + Pooling(cls), then Normalize."""
    from sentence_transformers import SentenceTransformer

    directory = tiny_family.sentence_transformers("gte", pooling="cls", normalize=True)
    reference = SentenceTransformer(str(directory), device="cpu")
    emb = ma.SentenceEncoder.from_pretrained(directory)
    assert emb.model.config.arch == "gte" and emb.pooling == ["cls"] and emb.normalize
    got, expected = emb.encode(TEXTS, batch_size=3), torch.as_tensor(reference.encode(TEXTS, batch_size=3))
    assert (got - expected).abs().max() <= 1e-5
    assert torch.equal(emb.encode(TEXTS[2:3])[0], got[2])


def test_classifier_and_token_classifier_products(tiny_family):
    directory, hf = tiny_family.classifier("gte", 3)
    tok = transformers.AutoTokenizer.from_pretrained(directory)
    pairs = [("The tower was built in Paris.", "It is in France."), ("A short one.", "Tiny.")]
    a, b = map(list, zip(*pairs))
    with torch.no_grad():
        expected = hf(**tok(a, b, padding=True, return_tensors="pt")).logits
    got = ma.Classifier.from_pretrained(directory).predict(a, b, activation="none")
    assert (got - expected).abs().max() <= 1e-5
    directory, hf = tiny_family.head("gte", "ForTokenClassification", 4)
    batch = tok(TEXTS[:2], padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = hf(**batch).logits
        got = ma.TokenClassifierModel.from_pretrained(directory)(**batch).logits
    real = batch["attention_mask"].bool()
    assert (got[real] - expected[real]).abs().max() <= 1e-5
