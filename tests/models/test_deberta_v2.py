"""DeBERTa-v2 / v3 (minialign/models/deberta_v2.py) against transformers' DebertaV2Model and
DebertaV2ForSequenceClassification (eager attention, fp32): tiny random configs built and saved here in three
variants (v3: shared keys, LayerNorm'd relative embeddings, 16 log buckets, no absolute positions, no token
types; v2: the convolution, absolute positions, own position projections, no buckets; and c2p alone with
narrower embeddings projected), sequences longer than the bucket span, every backend, padded and packed; the
buckets; capture; the converter both ways; configs; and the DeBERTa-v3 tokenizer against transformers'."""

import dataclasses
import json
import math

import pytest
import torch
import transformers
from conftest import encoder_parity, pad_batch
from family_builders import deberta_unigram

import minialign as ma
from minialign import convert
from minialign.apps.cli import main as cli
from minialign.models.deberta_v2 import log_bucket

TOL = dict(atol=1e-5, rtol=0)
BACKENDS = ["eager", "sdpa", pytest.param("flex", marks=pytest.mark.slow)]  # flex: c2p / p2c in its score_mod
LENGTHS = (100, 57, 9)  # offsets to 99: past the 16 buckets' exact range and past max_relative_positions (32)

VARIANTS = {
    "v3": dict(share_att_key=True, norm_rel_ebd="layer_norm", position_buckets=16, max_relative_positions=32,
               position_biased_input=False, pos_att_type="p2c|c2p", type_vocab_size=0),
    "v2": dict(conv_kernel_size=3, position_biased_input=True, share_att_key=False, pos_att_type=["p2c", "c2p"],
               type_vocab_size=2, max_relative_positions=24, conv_act="gelu"),
    "c2p": dict(pos_att_type=["c2p"], embedding_size=20, type_vocab_size=2, position_biased_input=True,
                share_att_key=False, pooler_hidden_act="tanh", max_relative_positions=-1),
    # DebertaV2Config's defaults: no relative attention at all, absolute positions only (sdpa once crashed on it)
    "absolute": dict(relative_attention=False, position_biased_input=True, type_vocab_size=2),
}


def hf_config(variant="v3", **overrides):
    base = dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                max_position_embeddings=128, layer_norm_eps=1e-7, relative_attention=True, pad_token_id=0)
    return transformers.DebertaV2Config(**{**base, **VARIANTS[variant], **overrides})


def hf_model(cls=transformers.DebertaV2Model, variant="v3", **overrides):
    config = hf_config(variant, **overrides)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = cls(config).eval()
    with torch.no_grad():  # non-zero biases and LayerNorm params, so a swapped name cannot pass
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
            if "rel_embeddings" in name or name.endswith("encoder.LayerNorm.weight"):
                p.mul_(10)  # position terms large enough to move the outputs (v3's: after the table's LayerNorm)
    return model


def _saved(tmp_path, cls=transformers.DebertaV2Model, variant="v3", **overrides):
    hf = hf_model(cls, variant, **overrides)
    hf.save_pretrained(tmp_path / "m")
    return hf, tmp_path / "m"


def _batch(config, lengths=LENGTHS, seed=0):
    torch.manual_seed(seed)
    ids = torch.randint(config.pad_token_id + 1, config.vocab_size, (len(lengths), max(lengths)))
    ids, mask = pad_batch(ids, list(lengths), config.pad_token_id)
    types = (torch.arange(ids.size(1))[None] >= 5).long().expand_as(ids) * mask
    return ids, mask, types if config.type_vocab_size > 0 else None


@pytest.mark.parametrize("buckets,max_position", [(16, 32), (16, 512), (256, 512), (64, 128), (4, 10)])
def test_buckets_equal_transformers_over_every_offset(buckets, max_position):
    """The log buckets equal make_log_bucket_position's exactly, the ceil boundaries included."""
    offsets = torch.arange(-3000, 3001)[:, None]
    theirs = transformers.models.deberta_v2.modeling_deberta_v2.make_log_bucket_position(offsets, buckets,
                                                                                       max_position).long()
    assert torch.equal(log_bucket(offsets, buckets, max_position), theirs)
    mid = buckets // 2
    assert torch.equal(log_bucket(torch.arange(-mid, mid + 1), buckets, max_position), torch.arange(-mid, mid + 1))


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_encoder_parity_padded_and_packed(variant, backend, tmp_path):
    hf, directory = _saved(tmp_path, variant=variant)
    ours = ma.Encoder.from_pretrained(directory, attn_backend=backend)
    assert ours.config.arch == "deberta-v2" and ours.pooler is None
    assert (ours.embeddings.position is None) == (variant == "v3")
    assert (ours.layers[0].conv is not None) == (variant == "v2")
    ids, mask, types = _batch(hf.config)
    real = mask.bool()
    _, _, diffs = encoder_parity(hf, ours, real, TOL, input_ids=ids, attention_mask=mask, token_type_ids=types)
    assert {f"hidden_{i}" for i in range(3)} | {"attention_0", "attention_1", "last_hidden_state"} <= set(diffs)


def test_final_tokens_as_a_mask_computes_every_token_for_the_position_terms(tmp_path):
    """final_tokens as a mask, packed: DeBERTa's c2p / p2c terms take the queries at positions 0.. (Disentangled.rows),
    so its last layer runs for every token and the others are zeroed: the wanted tokens' states those of the full
    forward (1.7e-3 away when the picked queries were attended at the wrong positions)."""
    hf, directory = _saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend="sdpa")
    ids, mask, types = _batch(hf.config)
    wanted = (torch.arange(ids.size(1))[None] >= torch.tensor([[3], [1], [2]])[: len(ids)]) & mask.bool()
    with torch.no_grad():
        full = ours(ids, attention_mask=mask, token_type_ids=types, unpad=True).last_hidden_state
        picked = ours(ids, attention_mask=mask, token_type_ids=types, unpad=True, final_tokens=wanted).last_hidden_state
    assert torch.equal(picked[wanted], full[wanted]) and not picked[~wanted].any()


def test_position_terms_move_the_output(tmp_path):
    """Zeroed relative embeddings (after their LayerNorm: its bias zeroed too) give another result: the c2p /
    p2c terms are applied; and a batch without padding runs (no mask)."""
    hf, directory = _saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend="sdpa")
    ids, mask, _ = _batch(hf.config)
    with torch.no_grad():
        ref = ours(ids, attention_mask=mask).last_hidden_state
        full = ours(ids[:1]).last_hidden_state
        torch.testing.assert_close(full, hf(ids[:1]).last_hidden_state, **TOL)
        ours.relative.table.weight.zero_()
        ours.relative.norm.bias.zero_()
        assert (ours(ids, attention_mask=mask).last_hidden_state - ref).abs().max() > 1e-2


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_classifier_logits_padded_and_packed(variant, backend, tmp_path):
    """The head (ContextPooler + classifier) on the first token, the last layer run for it alone; with one
    layer, the convolution runs in that last layer too."""
    for layers in (2, 1) if backend != "flex" else (2,):  # one layer for the first token alone runs on sdpa
        hf, directory = _saved(tmp_path / str(layers), transformers.DebertaV2ForSequenceClassification, variant,
                               num_labels=3, num_hidden_layers=layers)
        model = ma.ClassifierModel.from_pretrained(directory, attn_backend=backend)
        assert model.encoder.pooler is None
        ids, mask, types = _batch(hf.config)
        with torch.no_grad():
            expected = hf(ids, attention_mask=mask, token_type_ids=types).logits
            for unpad in (False, True):
                got = model(ids, attention_mask=mask, token_type_ids=types, unpad=unpad).logits
                torch.testing.assert_close(got, expected, **TOL)


def test_capture_records_the_position_terms(tmp_path):
    """capture shows c2p and p2c of every layer, and scores_raw is q . k / scale plus them."""
    hf, directory = _saved(tmp_path)
    for backend in ("eager", "sdpa"):
        ours = ma.Encoder.from_pretrained(directory, attn_backend=backend)
        ids, mask, _ = _batch(hf.config, lengths=(40, 12))
        with torch.no_grad(), ma.capture(ours) as cap:
            out = ours(ids, attention_mask=mask)
            theirs = hf(ids, attention_mask=mask, output_attentions=True)
        assert not any("#" in name for name in cap), [n for n in cap if "#" in n]  # each recorded once
        torch.testing.assert_close(out.last_hidden_state[mask.bool()], theirs.last_hidden_state[mask.bool()], **TOL)
        for i in range(2):
            q, k = cap[f"layers.{i}.attention.q"], cap[f"layers.{i}.attention.k"]
            c2p, p2c = cap[f"layers.{i}.attention.c2p"], cap[f"layers.{i}.attention.p2c"]
            assert c2p.shape == p2c.shape == (2, 4, 40, 40)
            expected = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1) * 3) + c2p + p2c
            torch.testing.assert_close(cap[f"layers.{i}.attention.scores_raw"], expected, **TOL)
            torch.testing.assert_close(cap[f"layers.{i}.attention.probs"][0, :, :40, :40], theirs.attentions[i][0],
                                       **TOL)
        assert cap["relative.table"].shape == (32, 32)


@pytest.mark.parametrize("cls", [transformers.DebertaV2Model, transformers.DebertaV2ForSequenceClassification])
@pytest.mark.parametrize("variant", ["v3", "v2"])
def test_convert_round_trip_loads_in_transformers(cls, variant, tmp_path):
    hf, directory = _saved(tmp_path, cls, variant,
                           **({"num_labels": 2} if cls is not transformers.DebertaV2Model else {}))
    assert cli(["convert", str(directory), str(tmp_path / "native")]) == 0
    assert cli(["convert", str(tmp_path / "native"), str(tmp_path / "hf"), "--to", "hf"]) == 0
    bare = cls is transformers.DebertaV2Model
    auto = transformers.AutoModel if bare else transformers.AutoModelForSequenceClassification
    back, info = auto.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and type(back) is cls
    # DebertaV2Model reads these through getattr with these defaults; minialign writes every one
    defaults = dict(share_att_key=False, position_buckets=-1, norm_rel_ebd="none", conv_kernel_size=0)
    for name in ("share_att_key", "position_buckets", "max_relative_positions", "norm_rel_ebd", "conv_kernel_size",
                 "position_biased_input", "type_vocab_size", "relative_attention", "layer_norm_eps", "pos_att_type"):
        assert getattr(back.config, name) == getattr(hf.config, name, defaults.get(name)), name
    same = lambda c: dataclasses.replace(c, embedding_size=None)  # noqa: E731  (written back as hidden_size)
    assert same(ma.Config.from_hf(back.config.to_dict())) == same(ma.Config.from_hf(hf.config.to_dict()))
    ids, mask, types = _batch(hf.config)
    with torch.no_grad():
        a = back.eval()(ids, attention_mask=mask, token_type_ids=types)
        b = hf(ids, attention_mask=mask, token_type_ids=types)
    if cls is transformers.DebertaV2Model:
        torch.testing.assert_close(a.last_hidden_state[mask.bool()], b.last_hidden_state[mask.bool()], **TOL)
    else:
        torch.testing.assert_close(a.logits, b.logits, **TOL)
    saved = convert.read_safetensors(directory / "model.safetensors")
    exported = convert.read_safetensors(tmp_path / "hf" / "model.safetensors")
    assert set(exported) == set(saved)
    for k, v in saved.items():
        assert torch.equal(exported[k], v), k


def test_config_round_trip_and_preset():
    hf = hf_config("v2", num_labels=2, cls_dropout=0.3, pooler_hidden_act="tanh", embedding_size=20)
    config = ma.Config.from_hf(hf.to_dict())
    assert (config.arch, config.pos_att_type, config.conv_kernel_size, config.classifier_dropout,
            config.pooler_activation, config.embedding_size) == ("deberta-v2", ("p2c", "c2p"), 3, 0.3, "tanh", 20)
    back = transformers.DebertaV2Config(**config.to_hf(classifier=True))
    for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
                 "max_position_embeddings", "layer_norm_eps", "pad_token_id", "relative_attention", "pos_att_type",
                 "max_relative_positions", "share_att_key", "position_biased_input", "conv_kernel_size", "conv_act",
                 "type_vocab_size", "embedding_size", "cls_dropout", "pooler_hidden_act"):
        assert getattr(back, name) == getattr(hf, name), name
    assert back.architectures == ["DebertaV2ForSequenceClassification"]
    v3 = ma.Config.from_hf(hf_config("v3").to_dict())
    assert (v3.pos_att_type, v3.position_buckets, v3.type_vocab_size, v3.norm_rel_ebd) == (("p2c", "c2p"), 16, 0,
                                                                                           "layer_norm")
    preset = ma.Config.from_name("deberta-v3-base")
    assert (preset.vocab_size, preset.hidden_size, preset.position_buckets, preset.share_att_key,
            preset.position_biased_input, preset.type_vocab_size) == (128100, 768, 256, True, False, 0)
    model = ma.Encoder(ma.Config(**{**preset.to_dict(), "num_layers": 1, "vocab_size": 300}), seed=0).eval()
    with torch.no_grad():  # relative_index covers any length up to the window
        assert model(torch.randint(1, 300, (1, 512))).last_hidden_state.shape == (1, 512, 768)


@pytest.mark.parametrize("field,value,message", [
    ("pos_att_type", ["c2p", "p2p"], "pos_att_type"), ("norm_rel_ebd", "batch_norm", "norm_rel_ebd"),
    ("conv_kernel_size", 4, "conv_kernel_size"), ("conv_act", "nope", "conv_act"),
    ("pooler_activation", "nope", "pooler_activation"), ("share_att_key", "yes", "share_att_key"),
    ("type_vocab_size", -1, "type_vocab_size"), ("position_buckets", 1.5, "position_buckets"),
])
def test_bad_configs_name_the_field(field, value, message):
    fields = ma.Config.from_hf(hf_config("v2").to_dict())
    with pytest.raises(ValueError, match=message):
        ma.Config(**{**fields.to_dict(), field: value})


def test_another_score_function_is_refused():
    config = ma.Config(**{**ma.Config.from_hf(hf_config().to_dict()).to_dict(), "score_fn": "general"})
    with pytest.raises(ValueError, match="score_fn must be 'scaled_dot'"):
        ma.Encoder(config)


def test_the_attention_declares_its_score_form():
    """The backend row follows the form the layers' attention declares (SelfAttention.score_form), though the
    attention holds no score of its own: its score is bound per forward from the relative embeddings."""
    from minialign.nn.score_functions import DISENTANGLED

    model = ma.Encoder(ma.Config.from_hf(hf_config().to_dict()), attn_backend="sdpa", seed=0)
    assert all(layer.attention.score_form == DISENTANGLED for layer in model.layers)
    assert all(layer.attention.score is None for layer in model.layers)
    assert not any(".score." in name for name in model.state_dict())


# -- the tokenizer ----------------------------------------------------------------------------------------

TEXTS = ["The tower was built in Paris and opened in 1889.", "  a  b\tc\nd ", "Zürich, Genève et Bâle", "",
         "unknown ☃ chars [MASK] here", "café naïve", "the minister said " * 30]
PAIRS = ["It opened in 1889.", "x", "Short  one ", "y  ", "[SEP] z", "Ça", "claim"]


def _tokenizer_dir(tmp_path):
    directory = tmp_path / "tok"
    directory.mkdir()
    deberta_unigram(directory)
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "DebertaV2Tokenizer", "model_max_length": 48, "bos_token": "[CLS]", "eos_token": "[SEP]",
        "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]",
        "do_lower_case": False, "split_by_punct": False}))
    return directory


def test_tokenizer_ids_equal_transformers_singles_and_pairs(tmp_path):
    """`[CLS] A [SEP] B [SEP]`, token types 0 / 1, truncation, on a tokenizer.json as transformers 5 saves one."""
    directory = _tokenizer_dir(tmp_path)
    theirs = transformers.AutoTokenizer.from_pretrained(directory)
    assert type(theirs).__name__.startswith("DebertaV2Tokenizer")
    ours = ma.Tokenizer.from_pretrained(directory)
    for args in ((TEXTS,), (TEXTS, PAIRS)):
        expected = theirs(*args, padding=True, truncation=True, max_length=48, return_tensors="pt")
        got = ours(*args, max_length=48)
        assert set(got) == {"input_ids", "attention_mask", "token_type_ids"}
        for key in got:
            assert torch.equal(got[key], expected[key]), key
    pair = ours(["a b"], ["c"])
    assert pair["input_ids"][0, 0] == 1 and pair["token_type_ids"][0].tolist()[-2:] == [1, 1]


def test_tokenizer_follows_its_file_where_transformers_rebuilds_it(tmp_path):
    """A tokenizer.json as transformers 4 converted DeBERTa-v3's (DebertaV2Converter: Strip, then runs of
    spaces to one) is run as written; transformers 5 swaps in its own normaliser (tabs and newlines to spaces,
    NFC, the right end stripped), so on a tab the two part, and on plain text they agree."""
    directory = _tokenizer_dir(tmp_path)
    data = json.loads((directory / "tokenizer.json").read_text())
    data["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Strip", "strip_left": True, "strip_right": True},
        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]}
    (directory / "tokenizer.json").write_text(json.dumps(data))
    theirs = transformers.AutoTokenizer.from_pretrained(directory)
    ours = ma.Tokenizer.from_pretrained(directory)
    plain = ["The tower was built in Paris.", "café naïve"]
    assert ours(plain)["input_ids"].tolist() == theirs(plain, padding=True)["input_ids"]
    assert ours.backend.encode("a\tb").tokens != theirs.convert_ids_to_tokens(theirs("a\tb")["input_ids"])
    assert "\t" in "".join(ours.backend.encode("a\tb").tokens)


@pytest.mark.parametrize("variant", ["v3", "v2"])
def test_compiles_without_graph_breaks(variant, tmp_path):
    """The per-forward score object, the relative index and the convolution trace into one graph."""
    _, directory = _saved(tmp_path, variant=variant)
    model = ma.Encoder.from_pretrained(directory, attn_backend="sdpa")
    ids, mask, types = _batch(model.config, lengths=(20, 12))
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(ids, attention_mask=mask, token_type_ids=types)
    assert explanation.graph_break_count == 0, explanation.break_reasons


def test_the_replaced_token_detection_head_of_published_v3_checkpoints_is_dropped(tmp_path):
    """microsoft/deberta-v3-* checkpoints hold the discriminator head they were pretrained with (mask_predictions:
    dense, LayerNorm, classifier), which no transformers class has: an Encoder loads such a checkpoint, dropping
    exactly those six names, and matches transformers' DebertaV2Model on it."""
    from safetensors.torch import save_file

    hf, directory = _saved(tmp_path)
    weights = convert.read_safetensors(directory / "model.safetensors")
    width = hf.config.hidden_size
    head = {"mask_predictions.dense.weight": torch.randn(width, width), "mask_predictions.dense.bias": torch.randn(width),
            "mask_predictions.LayerNorm.weight": torch.ones(width), "mask_predictions.LayerNorm.bias": torch.zeros(width),
            "mask_predictions.classifier.weight": torch.randn(1, width), "mask_predictions.classifier.bias": torch.zeros(1)}
    save_file({**{f"deberta.{k}": v for k, v in weights.items()}, **head}, str(directory / "model.safetensors"),
              metadata={"format": "pt"})
    _, dropped = convert.hf_to_minialign(convert.read_safetensors(directory / "model.safetensors"), "deberta-v2")
    assert sorted(dropped) == sorted(head)
    encoder = ma.Encoder.from_pretrained(directory, attn_backend="eager")
    ids, mask, types = _batch(hf.config)
    with torch.no_grad():
        theirs = hf(ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        ours = encoder(ids, attention_mask=mask, token_type_ids=types).last_hidden_state
    torch.testing.assert_close(ours[mask.bool()], theirs[mask.bool()], **TOL)
