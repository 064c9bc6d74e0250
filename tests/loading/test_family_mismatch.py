"""A checkpoint whose config names one family and whose weights are another's: the error names the
config's family, the first five weight names that do not fit it, how many more, and the family the
weights fit."""

import json
import re

import pytest
import torch
import transformers

import minialign as ma
from minialign.convert import CheckpointError, hf_to_minialign

SIZES = dict(vocab_size=99, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, max_position_embeddings=64)
BERT_CONFIG = transformers.BertConfig(hidden_size=32, **SIZES).to_dict()


@pytest.fixture(scope="module")
def mislabelled(tmp_path_factory):
    """DistilBERT's and ELECTRA's weights (ELECTRA with 16-wide embeddings, so it has a projection),
    each under a config.json that says bert."""
    root = tmp_path_factory.mktemp("mislabelled")
    models = {
        "distilbert": transformers.DistilBertModel(transformers.DistilBertConfig(
            vocab_size=99, dim=32, n_layers=2, n_heads=2, hidden_dim=37, max_position_embeddings=64)),
        "electra": transformers.ElectraModel(transformers.ElectraConfig(embedding_size=16, hidden_size=32, **SIZES)),
    }
    for family, model in models.items():
        model.save_pretrained(root / family)
        (root / family / "config.json").write_text(json.dumps(BERT_CONFIG), encoding="utf-8")
    return root


@pytest.mark.parametrize("load", [ma.Encoder.from_pretrained, ma.Classifier.from_pretrained], ids=["encoder", "classifier"])
def test_distilbert_weights_under_a_bert_config(mislabelled, load):
    with pytest.raises(CheckpointError) as error:
        load(mislabelled / "distilbert")
    message = str(error.value)
    assert "do not fit the family its config names, 'bert'" in message
    assert "transformer.layer.0.attention.k_lin.bias; transformer.layer.0.attention.k_lin.weight" in message
    listed = re.search(r"'bert': (.*?); \.\.\. and (\d+) more", message)
    assert listed and len(listed.group(1).split("; ")) == 5  # the first five, then how many more
    assert int(listed.group(2)) == int(re.search(r"(\d+) weight name", message).group(1)) - 5
    assert "Every weight name fits 'distilbert'" in message


@pytest.mark.parametrize("load", [ma.Encoder.from_pretrained, ma.Classifier.from_pretrained], ids=["encoder", "classifier"])
def test_electra_weights_under_a_bert_config(mislabelled, load):
    with pytest.raises(CheckpointError, match=r"2 weight name\(s\) do not fit the family its config names, 'bert': "
                                              r"embeddings_project\.bias; embeddings_project\.weight\. "
                                              r"Every weight name fits 'electra'"):
        load(mislabelled / "electra")


def test_names_that_fit_no_family_get_no_guess():
    state = {"embeddings.word_embeddings.weight": torch.zeros(1), "mystery.weight": torch.zeros(1)}
    with pytest.raises(CheckpointError) as error:
        hf_to_minialign(state, "bert", source="x.safetensors")
    assert str(error.value) == "x.safetensors: 1 weight name(s) do not fit the family its config names, 'bert': mystery.weight"


def test_roberta_names_fit_every_family_sharing_its_table():
    """RoBERTa's table serves xlm-roberta and camembert too: all three are named (and the other families whose names
    these fit: jina-embeddings-v3 keeps XLM-R's embeddings and LM head names)."""
    state = {"roberta.embeddings.word_embeddings.weight": torch.zeros(1),
             "lm_head.dense.weight": torch.zeros(1), "lm_head.layer_norm.weight": torch.zeros(1)}
    with pytest.raises(CheckpointError, match="fits 'camembert' / (.* / )?'roberta' / 'xlm-roberta'"):
        hf_to_minialign(state, "electra", source="x.safetensors")
