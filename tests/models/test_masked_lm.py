"""MaskedLMModel: every family's *ForMaskedLM checkpoint (transformers' own, tiny and random), logits within 1e-5 of
transformers' on the real tokens, padded and packed (unpad=True); the tied decoder and an untied one; strict loading;
saving and loading back (ModernBERT's head, which transformers shares with its classifier, included)."""

import pytest
import torch
from conftest import pad_batch
from family_builders import FAMILIES, family_params

import minialign as ma
from minialign.convert import CheckpointError

TOL = dict(atol=1e-5, rtol=0)


def _batch(config, vocab: int, lengths=(13, 6, 9)):
    pad = config.pad_token_id
    ids = torch.randint(5, vocab, (len(lengths), max(lengths)), generator=torch.Generator().manual_seed(0))
    ids = ids.masked_fill(ids == pad, 5)
    return pad_batch(ids, list(lengths), pad)


def _parity(hf, ours, ids, mask):
    real = mask.bool()
    with torch.no_grad():
        theirs = hf(ids, attention_mask=mask).logits
        padded = ours(ids, mask).logits
        packed = ours(ids, mask, unpad=True).logits
    assert padded.shape == theirs.shape
    torch.testing.assert_close(padded[real], theirs[real], **TOL)
    torch.testing.assert_close(packed[real], theirs[real], **TOL)
    return (padded[real] - theirs[real]).abs().max().item()


@pytest.mark.parametrize("arch", family_params(list(FAMILIES)))
def test_every_family_matches_its_for_masked_lm(arch, tiny_family):
    directory, hf = tiny_family.masked_lm(arch)
    ours = ma.MaskedLMModel.from_pretrained(directory, attn_backend="eager")
    # tied: the word embeddings, as the family's config says by default (EuroBERT's is untied: its lm_head)
    assert (ours.mlm_head.decoder is None) == hf.config.tie_word_embeddings
    assert ours.mlm_head.kind == ma.models.family_of(ours.config).heads(ours.config).masked_lm
    ids, mask = _batch(ours.config, hf.config.vocab_size)
    _parity(hf, ours, ids, mask)
    sdpa = ma.MaskedLMModel.from_pretrained(directory)
    with torch.no_grad():
        torch.testing.assert_close(sdpa(ids, mask, unpad=True).logits[mask.bool()],
                                   ours(ids, mask).logits[mask.bool()], **TOL)


@pytest.mark.parametrize("arch,fields", [("bert", dict(tie_word_embeddings=False)),
                                         ("electra", dict(tie_word_embeddings=False)),
                                         ("deberta-v2", dict(legacy=False)),
                                         ("modernbert", dict(decoder_bias=False, classifier_activation="silu")),
                                         ("modernbert", dict(tie_word_embeddings=False))])
def test_the_family_variants(arch, fields, tiny_family):
    """An untied decoder is read (and kept); DeBERTa-v2's non-legacy head (lm_predictions.lm_head) loads as its
    legacy one does; ModernBERT without a decoder bias, with its own head activation."""
    directory, hf = tiny_family.masked_lm(arch, **fields)
    ours = ma.MaskedLMModel.from_pretrained(directory, attn_backend="eager")
    untied = fields.get("tie_word_embeddings") is False
    assert (ours.mlm_head.decoder is not None) == untied
    assert (ours.mlm_head.bias is None) == (fields.get("decoder_bias") is False)
    ids, mask = _batch(ours.config, hf.config.vocab_size)
    _parity(hf, ours, ids, mask)


def test_a_bare_model_gets_an_initialised_head_and_a_wrong_one_is_refused(tiny_family, tmp_path):
    """Strict as the other heads: a bare BertModel's directory loads with the head initialised (one warning naming
    it); a head of the wrong shape is an error naming the weight."""
    directory, _ = tiny_family.hf("bert")
    with pytest.warns(UserWarning, match="mlm_head"):
        ma.MaskedLMModel.from_pretrained(directory)
    mlm_dir, hf = tiny_family.masked_lm("bert")
    import safetensors.torch

    tensors = safetensors.torch.load_file(mlm_dir / "model.safetensors")
    tensors["cls.predictions.bias"] = tensors["cls.predictions.bias"][:-1].clone()
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("config.json", "vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        (broken / name).write_bytes((mlm_dir / name).read_bytes())
    safetensors.torch.save_file(tensors, broken / "model.safetensors")
    with pytest.raises(CheckpointError, match="mlm_head.bias"):
        ma.MaskedLMModel.from_pretrained(broken)


@pytest.mark.parametrize("arch", ["bert", "modernbert"])
def test_saved_and_loaded_back(arch, tiny_family, tmp_path):
    """save_pretrained (native) and from_pretrained give the same model; ModernBERT's dense and norm are written under
    the classifier's names, where a checkpoint keeps them (MaskedLMModel.checkpoint_names)."""
    directory, hf = tiny_family.masked_lm(arch)
    ours = ma.MaskedLMModel.from_pretrained(directory)
    saved = ours.save_pretrained(tmp_path / "native")
    import safetensors.torch

    names = set(safetensors.torch.load_file(saved / "model.safetensors"))
    assert ("classifier.dense.weight" in names) == (arch == "modernbert")
    assert ("mlm_head.dense.weight" in names) == (arch != "modernbert")
    back = ma.MaskedLMModel.from_pretrained(saved)
    ids, mask = _batch(ours.config, hf.config.vocab_size)
    with torch.no_grad():
        assert torch.equal(back(ids, mask).logits, ours(ids, mask).logits)


@pytest.mark.parametrize("arch", family_params(list(FAMILIES)))
def test_saved_as_transformers_for_masked_lm(arch, tiny_family, tmp_path):
    """save_pretrained(layout="hf") writes transformers' *ForMaskedLM: AutoModelForMaskedLM loads it with no missing or
    unexpected weight and gives the original's logits; minialign reads it back the same."""
    import transformers

    directory, hf = tiny_family.masked_lm(arch)
    ours = ma.MaskedLMModel.from_pretrained(directory)
    out = ours.save_pretrained(tmp_path / "hf", layout="hf")
    back, info = transformers.AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True,
                                                                   attn_implementation="eager")
    assert type(back) is type(hf)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    ids, mask = _batch(ours.config, hf.config.vocab_size)
    with torch.no_grad():
        torch.testing.assert_close(back.eval()(ids, attention_mask=mask).logits[mask.bool()],
                                   hf(ids, attention_mask=mask).logits[mask.bool()], **TOL)
        assert torch.equal(ma.MaskedLMModel.from_pretrained(out)(ids, mask).logits, ours(ids, mask).logits)


@pytest.mark.parametrize("arch", ["modernbert", "electra"])
def test_the_logit_lens_reads_through_its_head(arch):
    """ma.analysis.logit_lens on a MaskedLMModel (a pre-LN family's final norm; ELECTRA's narrower head): the last
    layer's lens is the model's own logits."""
    extra = {"modernbert": dict(rope_theta=10000.0), "electra": dict(embedding_size=16)}[arch]
    config = ma.Config(arch=arch, vocab_size=90, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=48,
                       **extra)
    model = ma.MaskedLMModel(config, seed=0).eval()
    ids = torch.randint(5, 90, (2, 7))
    with torch.no_grad(), ma.capture(model) as cap:
        logits = model(ids).logits
        lens = ma.analysis.logit_lens(model, cap)
    assert lens.shape == (2, 2, 7, 90)
    torch.testing.assert_close(lens[-1], logits, **TOL)


def test_a_declaration_is_checked():
    from minialign.models.heads import MaskedLM

    with pytest.raises(ValueError, match="width"):
        MaskedLM(width="vocab")
    with pytest.raises(ValueError, match="at must be"):
        MaskedLM(at="head")
