"""A head kind is one declaration (models/heads.py): every family's sequence-classification head is the one
SequenceClassificationHead, built from the value the family declares; what it pools decides whether the
encoder keeps its pooler and whose final states the forward computes."""

import pytest
import torch

import minialign as ma
from minialign.models.family import family_of
from minialign.models.heads import SequenceClassification, SequenceClassificationHead
from minialign.nn.config import families

SIZES = dict(vocab_size=40, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=24, labels=("a", "b", "c"))
EXTRA = {"modernbert": dict(rope_theta=10000.0), "roberta": dict(pad_token_id=1), "xlm-roberta": dict(pad_token_id=1),
         "camembert": dict(pad_token_id=1), "mpnet": dict(pad_token_id=1)}
POOLED = ("bert", "gte", "nomic_bert")  # the families whose classifier reads BertPooler's output (NomicBERT's too)


@pytest.mark.parametrize("arch", list(families()))
def test_every_family_declares_its_head_as_a_value(arch):
    config = ma.Config(**SIZES, arch=arch, **EXTRA.get(arch, {}))
    kind = ma.models.family_of(config).heads(config).sequence_classification
    model = ma.ClassifierModel(config, seed=0).eval()
    assert type(model.classifier) is SequenceClassificationHead and model.classifier.kind == kind
    assert (model.encoder.pooler is not None) == kind.uses_pooler == (arch in POOLED)
    names = {name.split(".")[1] for name in model.state_dict() if name.startswith("classifier.")}
    assert names == {"out_proj"} | ({"dense"} if kind.dense_activation else set()) | (
        {"norm"} if kind.norm_bias is not None else set())
    ids = torch.randint(5, 40, (2, 6))
    with torch.no_grad():
        assert model(ids).logits.shape == (2, 3)


def test_mean_pooling_reads_every_token_and_the_mask():
    config = ma.Config(**SIZES, arch="modernbert", rope_theta=10000.0, classifier_pooling="mean")
    kind = ma.models.family_of(config).heads(config).sequence_classification
    assert kind.pool == "mean" and kind.tokens == "all" and kind.norm_bias == config.norm_bias
    model = ma.ClassifierModel(config, seed=0).eval()
    ids, mask = torch.randint(5, 40, (2, 6)), torch.tensor([[1] * 6, [1] * 3 + [0] * 3])
    with torch.no_grad():
        both = model(ids, mask).logits
        alone = model(ids[1:, :3]).logits
    torch.testing.assert_close(both[1:], alone, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="mean pooling needs a 2-D"):
        model.classifier(model.encoder(ids), torch.ones(2, 6, 6))


def test_a_declaration_is_checked_and_a_family_head_is_built_from_it():
    with pytest.raises(ValueError, match="pool must be one of"):
        SequenceClassification(pool="final")
    config = ma.Config(**SIZES, arch="roberta", pad_token_id=1)
    head = SequenceClassificationHead(config, family_of(config).heads(config).sequence_classification)
    assert head.kind.dense_activation == "tanh" and head.kind.pool == "first"
