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


def test_one_registry_of_families():
    """One family registry by model_type: convert/families holds the foreign side (a format file per model_type),
    and each family's config class attaches to the same key (nn/config.py families()), its Family (models/)
    hanging off the class; Config(arch=...) builds the family's own class, which holds only its fields."""
    from minialign.convert import families as formats
    from minialign.nn.config import families

    registry = families()
    assert set(registry) == set(formats.model_types())
    for arch, config_class in registry.items():
        assert config_class.family is not None and config_class.family.arch == arch
        assert config_class.format is formats.format_of(arch)
    with pytest.raises(ValueError, match=r"Config.arch must be one of \('bert', .*'roberta'.*\), got 'gpt2'"):
        ma.Config(vocab_size=20, hidden_size=8, num_layers=1, num_heads=2, intermediate_size=16, arch="gpt2")
    assert {c.arch for c in ma.PRESETS.values()} == set(registry)  # each family owns presets
    sizes = dict(vocab_size=20, hidden_size=8, num_layers=1, num_heads=2, intermediate_size=16)
    modern = ma.Config(**sizes, arch="modernbert", rope_theta=10.0)
    assert type(modern) is registry["modernbert"] and isinstance(modern, ma.Config)
    assert "rope_theta" in modern.to_dict() and "rope_theta" not in ma.Config(**sizes).to_dict()
    with pytest.raises(ValueError, match=r"\['rope_theta'\] are not fields of the bert family.*\[.*'modernbert'.*\]"):
        ma.Config(**sizes, rope_theta=10.0)
    with pytest.raises(ValueError, match="Config.local_attention must be None or an int >= 2"):
        ma.Config(**sizes, arch="modernbert", local_attention=1)


def test_a_native_config_holds_its_family_s_fields_only():
    """from_dict reads to_dict's dict; another family's field (0.1 wrote every family's, at their defaults) is an
    unknown field, named, whatever its value."""
    sizes = dict(vocab_size=20, hidden_size=8, num_layers=1, num_heads=2, intermediate_size=16)
    config = ma.Config(**sizes, arch="roberta")
    assert ma.Config.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match=r"unknown Config field\(s\) \['conv_act', 'rope_theta'\].*roberta family"):
        ma.Config.from_dict({**config.to_dict(), "rope_theta": None, "conv_act": "tanh"})


def test_config_from_hf_is_the_format_s_fields_typed_by_the_family():
    """One function reads a config.json: Config.from_hf, the family's format (convert) returning fields, the family's
    class typing them."""
    from minialign.nn.config import families

    hf = {"model_type": "roberta", "vocab_size": 20, "hidden_size": 8, "num_hidden_layers": 1,
          "num_attention_heads": 2, "intermediate_size": 16, "pad_token_id": 1, "max_position_embeddings": 12}
    fields = families()["roberta"].format.config_fields(hf)
    assert isinstance(fields, dict) and fields["arch"] == "roberta"
    config = ma.Config.from_hf(hf)
    assert ma.Config(**fields) == config and type(config) is families()["roberta"]
    with pytest.raises(ValueError, match=r"model_type 'funnel' \(\['FunnelModel'\]\) is not supported"):
        ma.Config.from_hf({**hf, "model_type": "funnel", "architectures": ["FunnelModel"]})


@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_max_seq_len_is_what_the_position_table_holds(arch):
    """Config.max_seq_len (the family's reserved rows, its format file) and the family's position
    rule (models/<family>.py) agree: max_seq_len tokens embed, one more is refused."""
    import torch

    from minialign import convert

    pad = 0 if arch == "bert" else 1
    config = ma.Config(vocab_size=20, hidden_size=8, num_layers=1, num_heads=2, intermediate_size=16,
                       max_position_embeddings=12, pad_token_id=pad, arch=arch)
    model = ma.Encoder(config, seed=0)
    ids = torch.full((1, config.max_seq_len), 5)
    assert int(model.embeddings.position_ids(ids).max()) == config.max_position_embeddings - 1
    model(ids)
    with pytest.raises(ValueError, match="window"):
        model(torch.full((1, config.max_seq_len + 1), 5))
    reserved = convert.families.format_of(arch).reserved_positions(pad)
    assert config.max_seq_len == 12 - reserved
    if reserved:
        with pytest.raises(ValueError, match="max_position_embeddings"):
            ma.Config(vocab_size=20, hidden_size=8, num_layers=1, num_heads=2, intermediate_size=16,
                      max_position_embeddings=reserved, pad_token_id=pad, arch=arch)


def test_no_shared_module_branches_on_the_family():
    """nn/, loading/ and the shared model classes never compare Config.arch: a family declares."""
    import ast
    from pathlib import Path

    root = Path(ma.__file__).parent
    files = [*(root / "nn").glob("*.py"), *(root / "loading").glob("*.py"), root / "models" / "encoder.py",
             root / "models" / "family.py"]
    def names_a_family(node) -> bool:  # `x.arch == "roberta"`, `"bert" != config.arch`, `arch in ("bert", ...)`
        parts = [node.left, *node.comparators]
        return (any(isinstance(n, ast.Attribute) and n.attr == "arch" for p in parts for n in ast.walk(p))
                and any(isinstance(n, ast.Constant) and isinstance(n.value, str) for p in parts for n in ast.walk(p)))

    branches = [f"{path.name}:{node.lineno}" for path in files for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.Compare) and names_a_family(node)]
    assert not branches, branches


def test_activations_in_one_table():
    from minialign.nn import activations, linear

    assert set(linear.ACTIVATIONS) == set(activations.ACTIVATIONS)
    assert all(linear.ACTIVATIONS[name][0] is f for name, f in activations.ACTIVATIONS.items())
    assert "softmax" not in ma.nn.config.ACTIVATIONS and "gelu_new" in ma.nn.config.ACTIVATIONS
    with pytest.raises(ValueError, match="unknown activation 'swish2'"):
        activations.activation("swish2")
