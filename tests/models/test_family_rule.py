"""The family rule: a family is one unit. A throwaway family written to a temporary module (BERT with one
declared difference: its own config field, read by its own embeddings) registers by being imported, and
then runs everywhere a family runs (Config, config.json both ways, the Encoder, the HF layout both ways),
with nothing outside that module touched."""

import importlib
import json
import sys
import textwrap

import pytest
import torch

import minialign as ma
from minialign.nn import config as configs

TOY = textwrap.dedent('''
    """A BERT whose embeddings are scaled by embedding_scale (config.json "embedding_scale", default 1)."""
    import dataclasses
    from dataclasses import dataclass

    from minialign.convert.families import bert as bert_format
    from minialign.convert.formats import Format
    from minialign.models.bert import Bert, BertConfig, Embeddings
    from minialign.nn.config import POSITIVE_NUMBER, checked

    FORMAT = Format(dataclasses.replace(
        bert_format.CONFIG, model_type="toy-bert",
        fields={**bert_format.FIELDS, "embedding_scale": "embedding_scale"},
        defaults={**bert_format.CONFIG.defaults, "embedding_scale": 1.0}, presets={}), bert_format.NAMES)


    @dataclass(frozen=True)
    class ToyConfig(BertConfig):
        format = FORMAT
        arch: str = "toy-bert"
        embedding_scale: float = checked(POSITIVE_NUMBER, 1.0)


    class ScaledEmbeddings(Embeddings):
        def forward(self, input_ids, token_type_ids, position_ids):
            return super().forward(input_ids, token_type_ids, position_ids) * self.config.embedding_scale


    class Toy(Bert):
        config_class = ToyConfig
        Embeddings = ScaledEmbeddings
''')
SIZES = dict(vocab_size=40, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=24)


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The toy family's module, imported from a temporary directory; the registry is restored afterwards."""
    monkeypatch.setattr(configs, "_FAMILIES", dict(configs._FAMILIES))
    (tmp_path / "toy_family.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module("toy_family")
    sys.modules.pop("toy_family", None)


def test_a_family_in_one_module_registers_and_runs_everywhere(toy, tmp_path):
    from minialign.loading import Checkpoint, export_hf

    assert "toy-bert" in configs.families() and configs.families()["toy-bert"].family is toy.Toy
    config = ma.Config(**SIZES, arch="toy-bert", embedding_scale=2.0)
    assert type(config) is toy.ToyConfig and ma.models.family_of(config) is toy.Toy
    with pytest.raises(ValueError, match="Config.embedding_scale must be a positive number"):
        ma.Config(**SIZES, arch="toy-bert", embedding_scale=0)
    hf = config.to_hf()
    assert hf["model_type"] == "toy-bert" and hf["embedding_scale"] == 2.0
    assert ma.Config.from_hf(hf) == config

    model = ma.Encoder(config, seed=0).eval()
    bert = ma.Encoder(ma.Config(**SIZES), seed=0).eval()
    bert.load_state_dict(model.state_dict())
    ids = torch.randint(5, 40, (2, 7))
    zeros = torch.zeros_like(ids)
    with torch.no_grad():
        positions = model.embeddings.position_ids(ids)
        torch.testing.assert_close(model.embeddings(ids, zeros, positions), 2 * bert.embeddings(ids, zeros, positions))
        assert not torch.allclose(model(ids).last_hidden_state, bert(ids).last_hidden_state)

    out = export_hf(Checkpoint(config, {f"encoder.{k}": v for k, v in model.state_dict().items()}, "toy"),
                    tmp_path / "toy-hf")
    assert json.loads((out / "config.json").read_text())["model_type"] == "toy-bert"
    back = ma.Encoder.from_pretrained(out).eval()
    assert back.config == config
    with torch.no_grad():
        assert torch.equal(back(ids).last_hidden_state, model(ids).last_hidden_state)


def test_the_registry_is_the_family_files(toy):
    """Without its module a family is unknown; the shipped families are each one file in minialign/models/
    and one in minialign/convert/families/, and no other module names them."""
    sys.modules.pop("toy_family", None)
    configs._FAMILIES.pop("toy-bert")
    with pytest.raises(ValueError, match="Config.arch must be one of .*got 'toy-bert'"):
        ma.Config(**SIZES, arch="toy-bert")
    from pathlib import Path

    from minialign.convert import families as formats

    models = Path(ma.models.__file__).parent
    for arch, config_class in configs.families().items():
        file = Path(sys.modules[config_class.__module__].__file__)
        assert file.parent == models and sys.modules[config_class.family.__module__] is sys.modules[
            config_class.__module__], arch  # the config class and the Family in one file
        assert config_class.format is formats.format_of(arch)
