"""XLM-RoBERTa and CamemBERT (RoBERTa's architecture under their own model_type) against transformers,
on tiny random models saved here, with a SentencePiece Unigram tokenizer trained here; and the
config.json refusals: custom code (auto_map) and an unsupported model_type."""

import json

import pytest
import torch
import transformers
from conftest import pad_batch

import minialign as ma
from minialign.apps.cli import main as cli
from minialign.apps.parity import compare
from minialign.convert import CheckpointError
from minialign.nn.config import families

TOL = dict(atol=1e-5, rtol=0)
BACKENDS = ["eager", "sdpa", pytest.param("flex", marks=pytest.mark.slow)]
CLASSES = {  # arch -> (config, bare model, *ForSequenceClassification)
    "xlm-roberta": (transformers.XLMRobertaConfig, transformers.XLMRobertaModel,
                    transformers.XLMRobertaForSequenceClassification),
    "camembert": (transformers.CamembertConfig, transformers.CamembertModel,
                  transformers.CamembertForSequenceClassification),
}
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # XLM-R's first ids: <s> 0, <pad> 1, </s> 2, <unk> 3
CORPUS = ["The tower was built in Paris and opened in 1889.", "La tour a été construite à Paris en 1889.",
          "Der Turm wurde in Paris gebaut.", "El ministro dijo que la empresa creció.",
          "Police said the company grew; officials reported on Monday.", "Zürich, Genève et Bâle sont des villes.",
          "A short claim.", "Numbers 3.14 and $5,000 in the report."] * 20


def _hf(arch, kind="base", **overrides):
    config_cls, base_cls, classifier_cls = CLASSES[arch]
    fields = dict(vocab_size=211, hidden_size=36, num_hidden_layers=3, num_attention_heads=3, intermediate_size=53,
                  max_position_embeddings=64, hidden_act="gelu", layer_norm_eps=1e-5, type_vocab_size=1,
                  pad_token_id=1, bos_token_id=0, eos_token_id=2)
    config = config_cls(**{**fields, **overrides})
    config._attn_implementation = "eager"
    model = (base_cls if kind == "base" else classifier_cls)(config).eval()
    with torch.no_grad():  # non-zero biases and LayerNorm params, so a swapped name cannot pass
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    return model


def _batch(config, lengths=(19, 11, 4)):
    ids = torch.randint(config.pad_token_id + 1, config.vocab_size, (len(lengths), max(lengths)))
    return pad_batch(ids, list(lengths), config.pad_token_id)


def _assert_all_fields(theirs, out, real):
    diffs = compare(theirs, out, real)
    assert {f"hidden_{i}" for i in range(len(theirs.hidden_states))} <= set(diffs)
    assert {f"attention_{i}" for i in range(len(theirs.attentions))} <= set(diffs)
    worst = {name: d for name, d in diffs.items() if d > TOL["atol"]}
    assert not worst, worst


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("arch", list(CLASSES))
def test_encoder_parity_padded_and_packed(arch, backend, tmp_path):
    hf = _hf(arch)
    hf.save_pretrained(tmp_path / "m")
    ours = ma.Encoder.from_pretrained(tmp_path / "m", attn_backend=backend)
    assert ours.config.arch == arch and ours.pooler is not None
    ids, mask = _batch(hf.config)
    real = mask.bool()
    with torch.no_grad():
        theirs = hf(ids, attention_mask=mask, output_hidden_states=True, output_attentions=True)
        out = ours(ids, attention_mask=mask, output_hidden_states=True, output_attentions=True)
        fast = ours(ids, attention_mask=mask)
        packed = ours(ids, attention_mask=mask, unpad=True, output_hidden_states=True)
    _assert_all_fields(theirs, out, real)
    for o in (fast, packed):
        torch.testing.assert_close(o.last_hidden_state[real], theirs.last_hidden_state[real], **TOL)
        torch.testing.assert_close(o.pooler_output, theirs.pooler_output, **TOL)
    assert len(packed.hidden_states) == len(theirs.hidden_states)
    for a, b in zip(packed.hidden_states, theirs.hidden_states):
        torch.testing.assert_close(a[real], b[real], **TOL)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("arch", list(CLASSES))
def test_classifier_logits_padded_and_packed(arch, backend, tmp_path):
    hf = _hf(arch, "classifier", num_labels=2)
    hf.save_pretrained(tmp_path / "m")
    model = ma.ClassifierModel.from_pretrained(tmp_path / "m", attn_backend=backend)
    assert model.encoder.pooler is None  # the head reads h_0 through its own dense layer
    ids, mask = _batch(hf.config)
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask).logits
        for unpad in (False, True):
            torch.testing.assert_close(model(ids, attention_mask=mask, unpad=unpad).logits, expected, **TOL)


def _unigram_dir(directory):
    """A SentencePiece Unigram tokenizer.json as XLM-R's (Metaspace, `<s> A </s></s> B </s>`), built here the same on
    every run (family_builders.unigram_model)."""
    from family_builders import unigram_model
    from tokenizers import Tokenizer, decoders, pre_tokenizers, processors

    tok = Tokenizer(unigram_model(SPECIALS, "<unk>", CORPUS))
    tok.add_special_tokens(SPECIALS)
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                 pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    assert [tok.token_to_id(t) for t in SPECIALS] == [0, 1, 2, 3, 4]
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
                                                       special_tokens=[("<s>", 0), ("</s>", 2)])
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "XLMRobertaTokenizer", "model_max_length": 512, "bos_token": "<s>", "eos_token": "</s>",
        "sep_token": "</s>", "cls_token": "<s>", "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>"}))
    return tok.get_vocab_size()


TEXTS = ["The tower was built in Paris.", "La tour a été construite.", "Zürich et Bâle", "", "unseen qwzx words",
         "the minister said " * 30]
SECONDS = ["It opened in 1889.", "Der Turm.", "short", "An empty first text.", "El ministro.", "a pair"]


def test_tokenizer_ids_equal_transformers_fast(tmp_path):
    _unigram_dir(tmp_path / "t")
    ref = transformers.XLMRobertaTokenizerFast.from_pretrained(tmp_path / "t")
    tok = ma.Tokenizer.from_pretrained(tmp_path / "t")
    assert tok.pad_token_id == ref.pad_token_id == 1
    for args in ((TEXTS,), (TEXTS, SECONDS)):
        ours = tok(*args)
        theirs = ref(*args, padding=True, truncation=True, max_length=512, return_tensors="pt")
        assert "token_type_ids" not in ours
        assert torch.equal(ours["input_ids"], theirs["input_ids"])
        assert torch.equal(ours["attention_mask"], theirs["attention_mask"])
    pair = tok(["a b"], ["c"])["input_ids"][0].tolist()
    assert pair[0] == 0 and pair.count(2) == 3 and pair[pair.index(2) + 1] == 2  # <s> A </s></s> B </s>


@pytest.mark.parametrize("arch", list(CLASSES))
def test_classifier_from_pretrained_with_tokenizer(arch, tmp_path):
    vocab = _unigram_dir(tmp_path / "m")
    hf = _hf(arch, "classifier", num_labels=2, vocab_size=vocab, max_position_embeddings=514)
    hf.save_pretrained(tmp_path / "m")
    clf = ma.Classifier.from_pretrained(tmp_path / "m")
    ref = transformers.AutoTokenizer.from_pretrained(tmp_path / "m")
    for args in ((TEXTS, SECONDS), (TEXTS,)):
        with torch.no_grad():
            expected = hf(**ref(*args, padding=True, truncation=True, max_length=512, return_tensors="pt")).logits
        torch.testing.assert_close(clf.predict(*args, activation="none"), expected, **TOL)


@pytest.mark.parametrize("arch", list(CLASSES))
def test_convert_to_hf_round_trip_loads_in_transformers(arch, tmp_path):
    for kind, auto in (("base", transformers.AutoModel),
                       ("classifier", transformers.AutoModelForSequenceClassification)):
        hf = _hf(arch, kind, **({"num_labels": 2} if kind == "classifier" else {}))
        hf.save_pretrained(tmp_path / kind)
        assert cli(["convert", str(tmp_path / kind), str(tmp_path / f"{kind}_native")]) == 0
        assert cli(["convert", str(tmp_path / f"{kind}_native"), str(tmp_path / f"{kind}_hf"), "--to", "hf"]) == 0
        assert json.loads((tmp_path / f"{kind}_hf" / "config.json").read_text())["model_type"] == arch
        back, info = auto.from_pretrained(tmp_path / f"{kind}_hf", output_loading_info=True)
        assert type(back) is type(hf)
        assert not info["missing_keys"] and not info["unexpected_keys"]
        ids, mask = _batch(hf.config)
        with torch.no_grad():
            a, b = hf(ids, attention_mask=mask), back.eval()(ids, attention_mask=mask)
        if kind == "base":
            torch.testing.assert_close(b.last_hidden_state, a.last_hidden_state, **TOL)
            torch.testing.assert_close(b.pooler_output, a.pooler_output, **TOL)
        else:
            torch.testing.assert_close(b.logits, a.logits, **TOL)


def _config(tmp_path, **changes):
    hf = _hf("xlm-roberta")
    hf.save_pretrained(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config.update(changes)
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    return tmp_path / "m"


def test_custom_code_is_refused_naming_the_architecture(tmp_path):
    """jina-embeddings-v2's config.json says "bert" but its auto_map runs its own code (ALiBi, GLU)."""
    directory = _config(tmp_path, model_type="bert", architectures=["JinaBertForMaskedLM"],
                        auto_map={"AutoConfig": "jinaai/jina-bert-implementation--configuration_bert.JinaBertConfig",
                                  "AutoModel": "jinaai/jina-bert-implementation--modeling_bert.JinaBertModel"})
    for load in (ma.Encoder.from_pretrained, ma.ClassifierModel.from_pretrained):
        with pytest.raises(CheckpointError, match=r"JinaBertForMaskedLM is custom code.*JinaBertModel.*"
                                                  r"does not run.*'xlm-roberta'"):
            load(directory)
    no_architectures = _config(tmp_path, architectures=None,
                               auto_map={"AutoModel": "org/repo--modeling.XLMRobertaFlash"})
    with pytest.raises(CheckpointError, match="org/repo--modeling.XLMRobertaFlash is custom code"):
        ma.Encoder.from_pretrained(no_architectures)


def test_unsupported_model_type_names_it_and_lists_the_supported(tmp_path):
    directory = _config(tmp_path, model_type="funnel", architectures=["FunnelModel"])
    with pytest.raises(CheckpointError, match=r"model_type 'funnel' \(FunnelModel\) is not supported; "
                                              r"minialign runs 'bert', 'roberta', ") as refused:
        ma.Encoder.from_pretrained(directory)
    assert all(repr(arch) in str(refused.value) for arch in families())
    with pytest.raises(ValueError, match=r"model_type None \(no architectures field\) is not supported"):
        ma.Config.from_hf({"vocab_size": 10})


@pytest.mark.parametrize("name,arch,vocab", [("xlm-roberta-base", "xlm-roberta", 250002),
                                             ("xlm-roberta-large", "xlm-roberta", 250002),
                                             ("camembert-base", "camembert", 32005)])
def test_presets(name, arch, vocab):
    config = ma.Config.from_name(name)
    assert (config.arch, config.vocab_size, config.max_seq_len, config.type_vocab_size) == (arch, vocab, 512, 1)
