"""AlignModel's MLM head decodes onto the word embeddings, so it needs them as wide as the encoder:
an ELECTRA config with narrower embeddings is refused when the model is built, and ELECTRA of one width
is built."""

import pytest
import torch

import minialign as ma
from minialign.nn.config import Config

SIZES = dict(vocab_size=50, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=40, arch="electra")


def test_alignmodel_refuses_embeddings_narrower_than_the_encoder():
    with pytest.raises(ValueError, match=r"hidden_size \(32\) .* electra config makes embedding_size \(16\) wide; "
                                         r"load it as an Encoder or ClassifierModel"):
        ma.AlignModel(Config(embedding_size=16, **SIZES))
    assert ma.Encoder(Config(embedding_size=16, **SIZES)) is not None  # the encoder alone is fine


def test_alignmodel_builds_when_the_widths_agree():
    model = ma.AlignModel(Config(embedding_size=32, **SIZES), seed=0)
    with torch.no_grad():
        out = model(torch.tensor([[1, 5, 7, 2]]), mlm=True)
    assert out.prediction_logits.shape == (1, 4, 50) and out.tri_label_logits.shape == (1, 3)
