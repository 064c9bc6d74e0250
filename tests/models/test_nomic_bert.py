"""NomicBERT (minialign/models/nomic_bert.py) against transformers' native NomicBertModel, NomicBertForMaskedLM,
NomicBertForSequenceClassification and NomicBertForTokenClassification (eager attention, fp32): tiny random models
built and saved here (non-zero norm and head biases), sequences of 150 tokens with pair token types, eager / sdpa
(flex once), padded and packed; both config.json spellings (transformers 5's and the Hub's GPT2-style one with its
auto_map to nomic's code) and the switches refused; the converter both ways; the tokenizer; and the products on the
family: SentenceEncoder with nomic-embed-text's prompts (search_query: / search_document: / clustering: /
classification:) against SentenceTransformer, Classifier, TokenClassifier and FillMask against transformers."""

import dataclasses
import json
import math

import pytest
import torch
import transformers
from conftest import encoder_parity, pad_batch, reference_model

import minialign as ma
from minialign import convert
from minialign.apps.cli import main as cli
from minialign.convert import CheckpointError

TOL = dict(atol=1e-5, rtol=0)
LENGTHS = (150, 131, 9)  # far past where theta 1000's fastest pairs of dimensions turn over
NOMIC_PROMPTS = {"search_query": "search_query: ", "search_document": "search_document: ",
                 "clustering": "clustering: ", "classification": "classification: "}  # nomic-embed-text-v1.5's
TEXTS = ["What is the capital of France?", "Paris is the capital and largest city of France.",
         "The Eiffel Tower opened in 1889.", "a", "Police said the company grew; officials reported on Monday."]
# https://huggingface.co/nomic-ai/nomic-embed-text-v1.5/blob/main/config.json, its sizes made tiny
HUB_CONFIG = {
    "activation_function": "swiglu", "architectures": ["NomicBertModel"], "attn_pdrop": 0.0,
    "auto_map": {"AutoConfig": "nomic-ai/nomic-bert-2048--configuration_hf_nomic_bert.NomicBertConfig",
                 "AutoModel": "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert.NomicBertModel",
                 "AutoModelForMaskedLM": "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert.NomicBertForPreTraining"},
    "bos_token_id": None, "causal": False, "dense_seq_output": True, "embd_pdrop": 0.0, "eos_token_id": None,
    "fused_bias_fc": True, "fused_dropout_add_ln": True, "initializer_range": 0.02, "layer_norm_epsilon": 1e-12,
    "max_trained_positions": 2048, "mlp_fc1_bias": False, "mlp_fc2_bias": False, "model_type": "nomic_bert",
    "n_embd": 32, "n_head": 2, "n_inner": 37, "n_layer": 2, "n_positions": 8192, "pad_vocab_size_multiple": 64,
    "parallel_block": False, "parallel_block_tied_norm": False, "prenorm": False, "qkv_proj_bias": False,
    "reorder_and_upcast_attn": False, "resid_pdrop": 0.0, "rotary_emb_base": 1000, "rotary_emb_fraction": 1.0,
    "rotary_emb_interleaved": False, "rotary_emb_scale_base": None, "rotary_scaling_factor": None,
    "scale_attn_by_inverse_layer_idx": False, "scale_attn_weights": True, "summary_activation": None,
    "summary_first_dropout": 0.0, "summary_proj_to_labels": True, "summary_type": "cls_index",
    "summary_use_proj": True, "torch_dtype": "float32", "type_vocab_size": 2, "use_cache": True,
    "use_flash_attn": True, "use_rms_norm": False, "use_xentropy": True, "vocab_size": 97,
}


def hf_config(**overrides):
    base = dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
                type_vocab_size=2, pad_token_id=0, rope_theta=1000.0)
    return transformers.NomicBertConfig(**{**base, **overrides})


def hf_model(cls=transformers.NomicBertModel, **overrides):
    return reference_model(cls, hf_config(**overrides), factor=8,  # sharp attention: the rotary positions move outputs
                           sharpen=lambda name, p: "Wqkv" in name or "q_proj" in name or "k_proj" in name)


def _saved(tmp_path, cls=transformers.NomicBertModel, **overrides):
    hf = hf_model(cls, **overrides)
    hf.save_pretrained(tmp_path / "m")
    return hf, tmp_path / "m"


def _batch(config, lengths=LENGTHS):
    torch.manual_seed(1)
    ids, mask = pad_batch(torch.randint(3, config.vocab_size, (len(lengths), max(lengths))), list(lengths),
                          config.pad_token_id)
    types = (torch.arange(ids.size(1))[None] >= torch.tensor(lengths)[:, None] // 2).long() * mask  # pairs: 0 then 1
    return ids, mask, types


@pytest.mark.parametrize("backend", ["eager", "sdpa", pytest.param("flex", marks=pytest.mark.slow)])
def test_encoder_parity_padded_and_packed(backend, tmp_path):
    hf, directory = _saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend=backend)
    assert ours.config.arch == "nomic_bert" and ours.pooler is None and ours.config.rope_theta == 1000.0
    assert ours.layers[0].attention.qkv.bias is None and ours.layers[0].ffn.up.bias is None  # no biases
    ids, mask, types = _batch(hf.config)
    _, _, diffs = encoder_parity(hf, ours, mask.bool(), TOL, input_ids=ids, attention_mask=mask, token_type_ids=types)
    assert {"hidden_0", "hidden_1", "hidden_2", "attention_0", "attention_1"} <= set(diffs)


def test_rotary_theta_and_token_types_matter(tmp_path):
    """Another theta, or no token types, gives another result: the parity above reads both."""
    hf, directory = _saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend="sdpa")
    ids, mask, types = _batch(hf.config)
    other = ma.Encoder(dataclasses.replace(ours.config, rope_theta=10000.0), attn_backend="sdpa").eval()
    other.load_state_dict(ours.state_dict())
    real = mask.bool()
    with torch.no_grad():
        ref = ours(ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        assert (other(ids, attention_mask=mask, token_type_ids=types).last_hidden_state - ref)[real].abs().max() > 1e-3
        assert (ours(ids, attention_mask=mask).last_hidden_state - ref)[real].abs().max() > 1e-3


def test_a_text_is_bit_identical_whatever_its_batch(tmp_path):
    """Each row alone, in its padded batch and packed: the same bits (sdpa; each packed sequence is attended alone)."""
    hf, directory = _saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend="sdpa")
    ids, mask, types = _batch(hf.config, lengths=(150, 131, 9, 40))
    with torch.no_grad():
        packed = ours(ids, attention_mask=mask, token_type_ids=types, unpad=True).last_hidden_state
        for i, n in enumerate((150, 131, 9, 40)):
            alone = ours(ids[i:i + 1, :n], attention_mask=mask[i:i + 1, :n], token_type_ids=types[i:i + 1, :n],
                         unpad=True).last_hidden_state
            assert torch.equal(alone[0], packed[i, :n]), i
            pair = [i, (i + 1) % 4]  # with another text beside it, in either order
            other = ours(ids[pair], attention_mask=mask[pair], token_type_ids=types[pair], unpad=True).last_hidden_state
            assert torch.equal(other[0, :n], packed[i, :n]), i


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_classifier_logits_padded_and_packed(backend, tmp_path):
    hf, directory = _saved(tmp_path, transformers.NomicBertForSequenceClassification, num_labels=3)
    model = ma.ClassifierModel.from_pretrained(directory, attn_backend=backend)
    assert model.encoder.pooler is not None  # NomicBertForSequenceClassification's pooler (add_pooling_layer=True)
    ids, mask, types = _batch(hf.config)
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask, token_type_ids=types).logits
        for unpad in (False, True):
            torch.testing.assert_close(model(ids, attention_mask=mask, token_type_ids=types, unpad=unpad).logits,
                                       expected, **TOL)


def test_masked_lm_logits_and_names_both_ways(tmp_path):
    """NomicBertForMaskedLM: its names map both ways bit for bit (the tied decoder left out, as transformers saves
    it); the MaskedLMModel's logits equal transformers', padded and packed; save_pretrained(layout="hf") loads in
    AutoModelForMaskedLM with no missing or unexpected weight."""
    hf, directory = _saved(tmp_path, transformers.NomicBertForMaskedLM)
    saved = convert.read_safetensors(directory / "model.safetensors")
    ours, dropped = convert.hf_to_minialign(saved, "nomic_bert")
    assert dropped == [] and {"mlm_head.norm.weight", "encoder.layers.1.ffn.gate.weight"} <= set(ours)
    back = convert.minialign_to_hf(ours, "nomic_bert")
    assert set(back) == {k.removeprefix("nomic_bert.") for k in saved}
    for k, v in saved.items():
        assert torch.equal(back[k.removeprefix("nomic_bert.")], v), k
    model = ma.MaskedLMModel.from_pretrained(directory, attn_backend="eager")
    assert model.mlm_head.decoder is None  # tied to the word embeddings
    ids, mask, types = _batch(hf.config, lengths=(120, 33))
    real = mask.bool()
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask, token_type_ids=types).logits
        for unpad in (False, True):
            got = model(ids, mask, token_type_ids=types, unpad=unpad).logits
            torch.testing.assert_close(got[real], expected[real], **TOL)
    out = model.save_pretrained(tmp_path / "hf", layout="hf")
    again, info = transformers.AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True,
                                                                    attn_implementation="eager")
    assert type(again) is transformers.NomicBertForMaskedLM
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    with torch.no_grad():
        torch.testing.assert_close(again.eval()(ids, attention_mask=mask, token_type_ids=types).logits[real],
                                   expected[real], **TOL)


def test_token_classifier_logits_and_export(tmp_path):
    hf, directory = _saved(tmp_path, transformers.NomicBertForTokenClassification, num_labels=5)
    model = ma.TokenClassifierModel.from_pretrained(directory, attn_backend="eager")
    ids, mask, types = _batch(hf.config, lengths=(150, 20))
    real = mask.bool()
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask, token_type_ids=types).logits
        for unpad in (False, True):
            got = model(ids, mask, token_type_ids=types, unpad=unpad).logits
            torch.testing.assert_close(got[real], expected[real], **TOL)
    out = model.save_pretrained(tmp_path / "hf", layout="hf")
    again, info = transformers.AutoModelForTokenClassification.from_pretrained(out, output_loading_info=True)
    assert type(again) is transformers.NomicBertForTokenClassification
    assert not info["missing_keys"] and not info["unexpected_keys"], info


@pytest.mark.parametrize("cls", [transformers.NomicBertModel, transformers.NomicBertForSequenceClassification])
def test_convert_round_trip_loads_in_transformers(cls, tmp_path):
    labels = {"num_labels": 2} if cls is not transformers.NomicBertModel else {}
    hf, directory = _saved(tmp_path, cls, rope_theta=500.0, **labels)
    assert cli(["convert", str(directory), str(tmp_path / "native")]) == 0
    assert cli(["convert", str(tmp_path / "native"), str(tmp_path / "hf"), "--to", "hf"]) == 0
    auto = transformers.AutoModel if cls is transformers.NomicBertModel else \
        transformers.AutoModelForSequenceClassification
    back, info = auto.from_pretrained(tmp_path / "hf", output_loading_info=True, attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"] and type(back) is cls
    for name in ("rope_parameters", "hidden_act", "layer_norm_eps", "type_vocab_size", "intermediate_size"):
        assert getattr(back.config, name) == getattr(hf.config, name), name
    saved = convert.read_safetensors(directory / "model.safetensors")
    exported = convert.read_safetensors(tmp_path / "hf" / "model.safetensors")
    assert set(exported) == set(saved)
    for k, v in saved.items():
        assert torch.equal(exported[k], v), k


def test_the_hubs_config_json_with_its_auto_map_loads(tmp_path):
    """nomic-embed-text's config.json (nomic's GPT2-style names, an auto_map to nomic's code that transformers'
    NomicBert* classes port) beside weights in nomic's names: read as the family, its sizes from n_embd / n_inner
    (transformers' NomicBertConfig ignores those names), the outputs those of the same weights in transformers."""
    hf, directory = _saved(tmp_path)
    hub = tmp_path / "hub"
    hub.mkdir()
    (hub / "model.safetensors").write_bytes((directory / "model.safetensors").read_bytes())
    (hub / "config.json").write_text(json.dumps(HUB_CONFIG))
    ours = ma.Encoder.from_pretrained(hub, attn_backend="sdpa")
    config = ours.config
    assert (config.hidden_size, config.num_layers, config.num_heads, config.intermediate_size, config.activation,
            config.rope_theta, config.max_seq_len) == (32, 2, 2, 37, "silu", 1000, 8192)
    ids, mask, types = _batch(hf.config, lengths=(60, 7))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids, attention_mask=mask, token_type_ids=types).last_hidden_state[mask.bool()],
                                   hf(ids, attention_mask=mask, token_type_ids=types).last_hidden_state[mask.bool()],
                                   **TOL)
    preset = ma.Config.from_name("nomic-embed-text-v1.5")
    assert (preset.arch, preset.vocab_size, preset.hidden_size, preset.num_layers, preset.intermediate_size,
            preset.rope_theta, preset.activation, preset.type_vocab_size) == (
               "nomic_bert", 30528, 768, 12, 3072, 1000, "silu", 2)
    assert transformers.NomicBertConfig(**preset.to_hf()).rope_parameters == {"rope_theta": 1000, "rope_type": "default"}


@pytest.mark.parametrize("field,value", [("prenorm", True), ("rotary_emb_fraction", 0.5),
                                         ("rotary_emb_interleaved", True), ("rotary_scaling_factor", 2.0),
                                         ("qkv_proj_bias", True), ("mlp_fc1_bias", True), ("use_rms_norm", True),
                                         ("activation_function", "gelu")])
def test_a_hub_switch_the_port_lacks_is_refused_by_name(field, value):
    with pytest.raises(ValueError, match=field):
        ma.Config.from_hf({**HUB_CONFIG, field: value})


def test_other_configs_refused_by_name():
    new = hf_config().to_dict()
    scaled = {**new, "rope_parameters": {"rope_theta": 1000.0, "rope_type": "linear", "factor": 2.0}}
    with pytest.raises(ValueError, match="rope_type"):
        ma.Config.from_hf(scaled)
    with pytest.raises(ValueError, match="head_dim"):
        ma.Config.from_hf({**new, "head_dim": 8})
    with pytest.raises(ValueError, match="even head dim"):
        ma.Config(arch="nomic_bert", vocab_size=10, hidden_size=30, num_layers=1, num_heads=2, intermediate_size=8)
    with pytest.raises(ValueError, match="rope_theta"):
        dataclasses.replace(ma.Config.from_hf(new), rope_theta=0)
    # an auto_map naming code transformers has not ported stays refused, whatever the model_type
    foreign = {**HUB_CONFIG, "auto_map": {"AutoModel": "someone/repo--modeling_other.OtherModel"}}
    with pytest.raises(CheckpointError, match="custom code .auto_map: AutoModel -> someone/repo--modeling_other.OtherModel"):
        ma.Config.from_hf(foreign)
    assert ma.Config.from_hf(HUB_CONFIG).hidden_size == 32  # nomic's own code: the port's


def test_tokenizer_ids_equal_transformers(tmp_path, wordpiece_dir):
    """nomic-embed-text's tokenizer is BERT's uncased WordPiece (tokenizer_class BertTokenizer, as AutoTokenizer
    maps nomic_bert): ids, token types and masks of singles and pairs equal transformers'."""
    from family_builders import FAMILIES, write_tokenizer
    from text.test_family_tokenizers import _assert_matches_transformers

    write_tokenizer(FAMILIES["nomic_bert"], tmp_path, wordpiece_dir=wordpiece_dir, bpe_dir=tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "nomic_bert"}))
    assert type(transformers.AutoTokenizer.from_pretrained(tmp_path)).__name__ == "BertTokenizer"
    _assert_matches_transformers(tmp_path)


def _with_nomic_prompts(directory):
    path = directory / "config_sentence_transformers.json"
    config = json.loads(path.read_text())
    config.update(prompts=NOMIC_PROMPTS, default_prompt_name=None)
    path.write_text(json.dumps(config))
    return directory


@pytest.mark.parametrize("normalize", [False, True], ids=["v1.5", "v1"])  # v1's directory ends in Normalize
def test_sentence_encoder_with_nomic_prompts_equals_sentence_transformers(normalize, tiny_family):
    from sentence_transformers import SentenceTransformer

    directory = _with_nomic_prompts(tiny_family.sentence_transformers("nomic_bert", normalize=normalize))
    reference = SentenceTransformer(str(directory), device="cpu")
    ours = ma.SentenceEncoder.from_pretrained(directory)
    assert ours.prompts == reference.prompts and ours.default_prompt_name is None
    for kwargs in [{}, *({"prompt_name": name} for name in NOMIC_PROMPTS), {"prompt": "search_query: "}]:
        got = ours.encode(TEXTS, batch_size=2, warn_truncation=False, **kwargs)
        expected = torch.as_tensor(reference.encode(TEXTS, batch_size=2, **kwargs))
        assert (got - expected).abs().max() <= 1e-5, kwargs
    for method in ("encode_query", "encode_document"):  # "query" / "document": empty here, as sentence-transformers'
        got = getattr(ours, method)(TEXTS, warn_truncation=False)
        assert (got - torch.as_tensor(getattr(reference, method)(TEXTS))).abs().max() <= 1e-5, method
    query = ours.encode(TEXTS[:1], prompt_name="search_query", warn_truncation=False)
    assert torch.equal(query, ours.encode(TEXTS[:1], prompt="search_query: ", warn_truncation=False))
    assert (query - ours.encode(TEXTS[:1], warn_truncation=False)).abs().max() > 1e-3  # the prompt is read
    assert torch.equal(ours.encode(TEXTS, prompt_name="search_document", warn_truncation=False)[3],
                       ours.encode(TEXTS[3:4], prompt_name="search_document", warn_truncation=False)[0])
    with pytest.raises(ValueError, match="search_query"):  # an unknown name lists the model's prompts
        ours.encode(TEXTS, prompt_name="query_search")


def test_classifier_product_equals_transformers(tiny_family):
    directory, hf = tiny_family.classifier("nomic_bert", 3)
    ours = ma.Classifier.from_pretrained(directory)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    batch = tokenizer(TEXTS[:3], TEXTS[2:], padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        expected = hf(**batch).logits
    got = ours.predict(TEXTS[:3], TEXTS[2:], activation="none")
    assert (got - expected).abs().max() <= 1e-5


def test_token_classifier_and_fill_mask_equal_the_pipelines(tiny_family):
    directory, hf = tiny_family.head("nomic_bert", "ForTokenClassification", 3)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    pipe = transformers.pipeline("token-classification", model=hf, tokenizer=tokenizer, device="cpu")
    mine = ma.TokenClassifier.from_pretrained(directory).predict(TEXTS, warn_truncation=False)
    theirs = [pipe(text) for text in TEXTS]
    assert sum(map(len, theirs)) > 5
    for a_row, b_row in zip(mine, theirs, strict=True):
        assert [{k: v for k, v in a.items() if k != "score"} for a in a_row] == \
               [{k: (int(v) if k in ("index", "start", "end") else v) for k, v in b.items() if k != "score"}
                for b in b_row]
        assert all(math.isclose(a["score"], float(b["score"]), abs_tol=1e-5) for a, b in zip(a_row, b_row))
    directory, hf = tiny_family.masked_lm("nomic_bert")
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    pipe = transformers.pipeline("fill-mask", model=hf, tokenizer=tokenizer, device="cpu")
    texts = [f"Paris is the {tokenizer.mask_token} of France.", f"The {tokenizer.mask_token} opened in 1889."]
    mine = ma.FillMask.from_pretrained(directory).predict(texts)
    for a_row, b_row in zip(mine, [pipe(text) for text in texts], strict=True):
        assert [(a["token"], a["token_str"], a["sequence"]) for a in a_row] == \
               [(int(b["token"]), b["token_str"], b["sequence"]) for b in b_row]
        assert all(math.isclose(a["score"], float(b["score"]), abs_tol=1e-5) for a, b in zip(a_row, b_row))


def test_compiles_without_graph_breaks(tmp_path):
    _, directory = _saved(tmp_path)
    model = ma.Encoder.from_pretrained(directory, attn_backend="sdpa")
    ids, mask, _ = _batch(model.config, lengths=(20, 12))
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(ids, attention_mask=mask)
    assert explanation.graph_break_count == 0, explanation.break_reasons


def test_no_question_answering_head_as_transformers():
    """transformers has no NomicBertForQuestionAnswering: minialign builds none either (as for GTE and EuroBERT)."""
    config = ma.Config(arch="nomic_bert", vocab_size=50, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=20)
    with pytest.raises(ValueError, match="NomicBertForQuestionAnswering"):
        ma.QuestionAnsweringModel(config)
