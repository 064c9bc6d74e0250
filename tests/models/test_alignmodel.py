"""AlignModel against a reference built from transformers modules plus nn.Linear heads, loaded
from a Lightning-style AlignScore checkpoint written here."""

import warnings

import pytest
import torch
from conftest import pad_batch, write_alignscore_ckpt

import minialign as ma

TOL = dict(atol=1e-5, rtol=0)


@pytest.fixture(params=["roberta", "bert"])
def ckpt(request, tmp_path):
    arch = request.param
    path, ref = write_alignscore_ckpt(tmp_path / "AlignScore-tiny.ckpt", arch)
    backbone_dir = tmp_path / "backbone"
    ref["backbone"].save_pretrained(backbone_dir)  # gives the config
    return arch, path, backbone_dir, ref


def test_heads_match_reference(ckpt):
    arch, path, backbone_dir, ref = ckpt
    model = ma.AlignModel.from_pretrained(path, backbone=str(backbone_dir), attn_backend="eager")
    config = ref["backbone"].config
    ids, mask = pad_batch(torch.randint(config.pad_token_id + 1, config.vocab_size, (3, 14)), [14, 9, 3],
                          config.pad_token_id)
    with torch.no_grad():
        base = ref["backbone"](ids, attention_mask=mask)
        out = model(ids, attention_mask=mask, mlm=True)
        expected_mlm = ref["mlm_head"](base.last_hidden_state)
    pooled = base.pooler_output
    torch.testing.assert_close(out.tri_label_logits, ref["tri_layer"](pooled), **TOL)
    torch.testing.assert_close(out.seq_relationship_logits, ref["bin_layer"](pooled), **TOL)
    torch.testing.assert_close(out.reg_label_logits, ref["reg_layer"](pooled), **TOL)
    assert out.tri_label_logits.shape == (3, 3) and out.seq_relationship_logits.shape == (3, 2)
    assert out.reg_label_logits.shape == (3, 1)
    real = mask.bool()
    torch.testing.assert_close(out.prediction_logits[real], expected_mlm[real], **TOL)
    assert not model.config.tie_word_embeddings  # AlignScore's decoder differs from the embeddings
    assert isinstance(model.encoder, ma.Encoder)


def test_prediction_logits_only_when_asked(ckpt):
    _, path, backbone_dir, _ = ckpt
    model = ma.AlignModel.from_pretrained(path, backbone=str(backbone_dir))
    out = model(torch.tensor([[5, 6, 7]]))
    assert out.prediction_logits is None


def test_backbone_default_from_hyper_parameters(tmp_path):
    path, _ = write_alignscore_ckpt(tmp_path / "a.ckpt", "roberta", backbone_name="roberta-base",
                                    vocab_size=50265, max_position_embeddings=514, hidden_size=24,
                                    num_attention_heads=2, intermediate_size=30, num_hidden_layers=1)
    # hyper_parameters['model'] = 'roberta-base' resolves through the presets: 768 wide, so shapes disagree
    with pytest.raises(ma.CheckpointError, match=r"embeddings\.word\.weight: checkpoint \(50265, 24\) vs model \(50265, 768\)"):
        ma.AlignModel.from_pretrained(path)


def test_dropout_before_bin_and_tri_only(ckpt):
    _, path, backbone_dir, _ = ckpt
    model = ma.AlignModel.from_pretrained(path, backbone=str(backbone_dir))
    model.train()
    model.encoder.eval()  # only the heads' dropout varies
    ids = torch.randint(5, 100, (4, 8))
    with torch.no_grad():
        a, b = model(ids), model(ids)
    torch.testing.assert_close(a.reg_label_logits, b.reg_label_logits, atol=0, rtol=0)
    assert not torch.equal(a.tri_label_logits, b.tri_label_logits)
    assert not torch.equal(a.seq_relationship_logits, b.seq_relationship_logits)
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(ids).tri_label_logits, model(ids).tri_label_logits)


def test_plain_backbone_initialises_heads_with_one_warning(save_hf):
    _, directory = save_hf("roberta", "base")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = ma.AlignModel.from_pretrained(directory)
    messages = [str(w.message) for w in caught if "initialised" in str(w.message)]
    assert len(messages) == 1
    for head in ("bin_layer.weight", "tri_layer.bias", "reg_layer.weight", "mlm_head.dense.weight", "mlm_head.bias"):
        assert head in messages[0]
    assert "encoder.embeddings" not in messages[0]
    assert not any(p.is_meta for p in model.parameters())
    assert torch.all(model.bin_layer.bias == 0) and model.mlm_head.norm.weight.eq(1).all()
    assert model.config.tie_word_embeddings


def test_mlm_checkpoint_loads_tied_head_without_warning(save_hf):
    hf, directory = save_hf("bert", "mlm")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = ma.AlignModel.from_pretrained(directory)
    message = " ".join(str(w.message) for w in caught)
    assert "mlm_head" not in message and "bin_layer" in message
    ids = torch.randint(1, 200, (2, 7))
    with torch.no_grad():
        expected = hf(ids).prediction_logits
        got = model(ids, mlm=True).prediction_logits
    torch.testing.assert_close(got, expected, **TOL)


def test_encoder_from_alignscore_ckpt(ckpt):
    _, path, backbone_dir, ref = ckpt
    enc = ma.Encoder.from_pretrained(path, backbone=str(backbone_dir))
    ids = torch.randint(5, 100, (2, 6))
    with torch.no_grad():
        torch.testing.assert_close(enc(ids).pooler_output, ref["backbone"](ids).pooler_output, **TOL)


def test_score_is_p_aligned(ckpt):
    _, path, backbone_dir, _ = ckpt
    model = ma.AlignModel.from_pretrained(path, backbone=str(backbone_dir))
    with torch.no_grad():
        logits = model(torch.randint(5, 100, (2, 6))).tri_label_logits
    probs = torch.softmax(logits, dim=-1)
    assert torch.allclose(probs.sum(-1), torch.ones(2))


def test_each_class_reads_what_it_owns(tmp_path, caplog):
    """Loading is declared (Pretrained.owns): a class takes the tensors under its own modules, strictly,
    and logs the others' as not used; the loader never asks which class it builds."""
    import dataclasses
    import logging

    from minialign.loading import read_checkpoint
    from minialign.loading import build

    path, ref = write_alignscore_ckpt(tmp_path / "a.ckpt", "roberta")
    ref["backbone"].save_pretrained(tmp_path / "bb")
    ckpt = read_checkpoint(path, backbone=str(tmp_path / "bb"))
    config = dataclasses.replace(ckpt.config, labels=("x", "y"))
    assert ma.ClassifierModel.owns(config) == ("encoder.embeddings", "encoder.layers", "classifier")
    assert ma.AlignModel.owns(config)[:3] == ("encoder.embeddings", "encoder.layers", "encoder.pooler")
    assert ma.Encoder.owns(config) == ("embeddings", "layers", "pooler")
    with caplog.at_level(logging.INFO, logger="minialign.loading.weights"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        classifier = build(ma.ClassifierModel, dataclasses.replace(ckpt, config=config))
    unused = " ".join(r.getMessage() for r in caplog.records)
    assert "encoder.pooler.dense.weight" in unused and "tri_layer.bias" in unused  # RoBERTa's classifier: no pooler
    assert classifier.encoder.pooler is None
    extra = dataclasses.replace(ckpt, tensors={**ckpt.tensors, "another_head.weight": torch.zeros(2)})
    build(ma.Encoder, extra)  # not an Encoder's module: logged
    wrong = dataclasses.replace(ckpt, tensors={**ckpt.tensors, "encoder.layers.7.ffn.up.weight": torch.zeros(2)})
    with pytest.raises(ma.CheckpointError, match=r"unexpected weight\(s\): encoder\.layers\.7\.ffn\.up\.weight"):
        build(ma.Encoder, wrong)  # under a module it owns: an error
