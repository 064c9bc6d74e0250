"""models/auto.py: which model class a checkpoint's tensors are for (the one decision `convert`, `explore`
and `parity` make), and that the class picked reads the checkpoint without initialising anything."""

import warnings

import pytest
from conftest import save_classifier

import minialign as ma
from minialign.apps.cli import main as cli
from minialign.loading import build, read_checkpoint
from minialign.models.auto import model_class


@pytest.fixture
def sources(tmp_path, save_hf, tiny_alignscore, bpe_dir):
    """(source, backbone, the class it is for) of every kind of checkpoint minialign reads."""
    path, backbone, _ = tiny_alignscore
    assert cli(["convert", str(path), str(tmp_path / "native"), "--backbone", str(backbone)]) == 0
    assert cli(["convert", str(tmp_path / "native"), str(tmp_path / "hf"), "--to", "hf"]) == 0
    save_classifier(tmp_path / "classifier", "roberta", 3, bpe_dir)
    return [
        (save_hf("bert")[1], None, ma.Encoder),  # BertModel
        (save_hf("bert", "mlm")[1], None, ma.Encoder),  # an MLM head alone: a pretraining checkpoint
        (path, backbone, ma.AlignModel),  # AlignScore's Lightning .ckpt
        (tmp_path / "native", None, ma.AlignModel),  # converted: heads in model.safetensors
        (tmp_path / "hf", None, ma.AlignModel),  # HF layout: heads in alignscore_heads.safetensors
        (tmp_path / "classifier", None, ma.ClassifierModel),  # RobertaForSequenceClassification
    ]


def test_each_kind_of_checkpoint_names_its_class(sources):
    for src, backbone, expected in sources:
        ckpt = read_checkpoint(src, backbone=None if backbone is None else str(backbone))
        assert model_class(ckpt) is expected, src
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the class reads the checkpoint: nothing initialised, nothing said
            build(model_class(ckpt), ckpt)


def test_a_classifier_head_wins_over_alignscore_heads(tmp_path, tiny_alignscore):
    """Both kinds of head in one checkpoint: the classifier's is the more specific (HEADS' order)."""
    import torch

    path, backbone, _ = tiny_alignscore
    ckpt = read_checkpoint(path, backbone=str(backbone))
    assert model_class(ckpt) is ma.AlignModel
    ckpt.tensors["classifier.out_proj.weight"] = torch.zeros(2, ckpt.config.hidden_size)
    assert model_class(ckpt) is ma.ClassifierModel
    ckpt.tensors = {k: v for k, v in ckpt.tensors.items() if k.startswith("encoder.")}
    assert model_class(ckpt) is ma.Encoder
