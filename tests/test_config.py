import dataclasses

import pytest

import minialign as ma


def test_presets_by_exact_name():
    base = ma.Config.from_name("roberta-base")
    assert (base.hidden_size, base.num_layers, base.pad_token_id, base.type_vocab_size) == (768, 12, 1, 1)
    assert ma.Config.from_name("bert-large-uncased").num_heads == 16
    with pytest.raises(ValueError, match="unknown preset 'roberta'"):
        ma.Config.from_name("roberta")
    with pytest.raises(ValueError, match="unknown preset"):
        ma.Config.from_name("RoBERTa-base")


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ma.Config.from_name("bert-base-uncased").hidden_size = 5


@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_hf_round_trip_through_transformers(arch):
    import transformers

    from conftest import hf_config

    hf = hf_config(arch, hidden_act="gelu_new", hidden_dropout_prob=0.2)
    config = ma.Config.from_hf(hf.to_dict())
    assert config.arch == arch and config.activation == "gelu_new" and config.hidden_dropout == 0.2
    back = transformers.AutoConfig.for_model(**config.to_hf())
    assert type(back) is type(hf)
    for field in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                  "max_position_embeddings", "type_vocab_size", "layer_norm_eps", "pad_token_id", "hidden_act"):
        assert getattr(back, field) == getattr(hf, field), field
    assert ma.Config.from_hf(config.to_hf()) == config


def test_dispatch_on_model_type_not_name():
    hf = {"model_type": "bert", "_name_or_path": "roberta-base", "vocab_size": 10, "hidden_size": 4,
          "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 8}
    assert ma.Config.from_hf(hf).arch == "bert"
    with pytest.raises(ValueError, match="model_type 'albert'"):
        ma.Config.from_hf({**hf, "model_type": "albert"})
    with pytest.raises(ValueError, match="missing field"):
        ma.Config.from_hf({"model_type": "bert"})
    with pytest.raises(ValueError, match="position_embedding_type 'relative_key'"):
        ma.Config.from_hf({**hf, "position_embedding_type": "relative_key"})


@pytest.mark.parametrize("field,value", [
    ("hidden_size", 0), ("num_heads", -1), ("vocab_size", 2.5), ("arch", "gpt2"), ("activation", "swish2"),
    ("hidden_dropout", 1.5), ("layer_norm_eps", 0), ("pad_token_id", 99), ("num_layers", True),
])
def test_invalid_values_name_the_field(field, value):
    good = dict(vocab_size=20, hidden_size=8, num_layers=1, num_heads=2, intermediate_size=16)
    with pytest.raises(ValueError, match=field):
        ma.Config(**{**good, field: value})


def test_heads_must_divide_hidden():
    with pytest.raises(ValueError, match="divisible"):
        ma.Config(vocab_size=20, hidden_size=10, num_layers=1, num_heads=3, intermediate_size=16)


def test_from_dict_rejects_unknown_fields():
    with pytest.raises(ValueError, match="bogus"):
        ma.Config.from_dict({"vocab_size": 5, "bogus": 1})
