"""Converter: name tables, round trips, key/shape contract, the convert command."""

import pytest
import torch
import transformers
from conftest import write_alignscore_ckpt

from minialign import convert
import minialign as ma
from minialign.apps.cli import main as cli
from minialign.loading import read_checkpoint


@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_hf_minialign_hf_round_trip_is_bit_identical(arch):
    from conftest import hf_model

    model = hf_model(arch, "mlm")
    prefix = convert.families.format_of(arch).names.model_prefix
    sd = {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in model.state_dict().items()}
    dropped_on_purpose = {"cls.predictions.decoder.bias", "lm_head.decoder.bias",
                          "cls.seq_relationship.weight", "cls.seq_relationship.bias"}
    sd = {k: v for k, v in sd.items() if k not in dropped_on_purpose}
    ours, dropped = convert.hf_to_minialign(sd, arch)
    assert dropped == []
    back = convert.minialign_to_hf(ours, arch)
    assert set(back) == set(sd)
    for k in sd:
        assert torch.equal(back[k], sd[k]), k


@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_converted_names_and_shapes_equal_model_state_dict(arch):
    """Key/shape contract: converted HF weights fill AlignModel.state_dict() exactly."""
    from conftest import hf_model

    model = hf_model(arch, "mlm")
    ours, _ = convert.hf_to_minialign(model.state_dict(), arch)
    ours.pop("mlm_head.decoder.weight")  # tied
    assert torch.equal(ours.pop("mlm_head.decoder.bias"), ours["mlm_head.bias"])  # tied (loading drops it)
    config = ma.Config.from_hf(model.config.to_dict())
    expected = ma.AlignModel(config).state_dict()
    heads = {k for k in expected if k.startswith(("bin_layer", "tri_layer", "reg_layer"))}
    if arch == "roberta":  # RobertaForMaskedLM has no pooler
        heads |= {"encoder.pooler.dense.weight", "encoder.pooler.dense.bias"}
    assert set(ours) == set(expected) - heads
    for k, v in ours.items():
        assert v.shape == expected[k].shape, k


def test_unknown_key_names_it():
    with pytest.raises(convert.CheckpointError, match="encoder.layer.0.attention.self.rotary"):
        convert.hf_to_minialign({"encoder.layer.0.attention.self.rotary": torch.zeros(1)}, "bert")
    with pytest.raises(convert.CheckpointError, match="classifier.dense.weight"):  # RobertaClassificationHead's
        convert.hf_to_minialign({"classifier.dense.weight": torch.zeros(1)}, "bert")


def test_reverse_table_is_derived():
    inverse = convert.names.inverse(convert.families.format_of("bert").names.table)
    assert inverse["encoder.layers.{}.ffn.up.weight"] == "encoder.layer.{}.intermediate.dense.weight"
    assert None not in inverse.values()


def test_stale_position_ids_dropped(save_hf):
    _, directory = save_hf("bert")
    sd = convert.read_safetensors(directory / "model.safetensors")
    sd["embeddings.position_ids"] = torch.arange(64)[None]
    ours, dropped = convert.hf_to_minialign(sd, "bert")
    assert dropped == ["embeddings.position_ids"] and "embeddings.position_ids" not in ours


@pytest.mark.parametrize("arch", ["roberta", "bert"])
def test_ckpt_to_hf_export_loses_nothing(arch, tmp_path):
    path, ref = write_alignscore_ckpt(tmp_path / "a.ckpt", arch)
    ref["backbone"].save_pretrained(tmp_path / "backbone")
    assert cli(["convert", str(path), str(tmp_path / "hf"), "--to", "hf", "--backbone", str(tmp_path / "backbone")]) == 0
    loaded, info = transformers.AutoModel.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert info["missing_keys"] == set() or not info["missing_keys"]
    assert not info["unexpected_keys"]
    assert loaded.pooler is not None
    original, _ = convert.read_alignscore_ckpt(path)
    heads = convert.read_safetensors(tmp_path / "hf" / "alignscore_heads.safetensors")
    backbone = convert.read_safetensors(tmp_path / "hf" / "model.safetensors")
    rebuilt = {**{f"base_model.{k}": v for k, v in backbone.items()}, **heads}
    duplicate_bias = "mlm_head.decoder.bias"
    assert set(rebuilt) == set(original) - {duplicate_bias}
    for k, v in rebuilt.items():
        assert torch.equal(v, original[k]), k
    # and minialign reads the export back to the same model
    a = ma.AlignModel.from_pretrained(path, backbone=str(tmp_path / "backbone"))
    b = ma.AlignModel.from_pretrained(tmp_path / "hf")
    for (k, v), (k2, v2) in zip(a.state_dict().items(), b.state_dict().items()):
        assert k == k2 and torch.equal(v, v2), k


def test_native_round_trip_and_dtype(tmp_path, minilm_dir):
    assert cli(["convert", str(minilm_dir), str(tmp_path / "native")]) == 0
    assert (tmp_path / "native" / "tokenizer.json").is_file()
    a = ma.Encoder.from_pretrained(minilm_dir)
    b = ma.Encoder.from_pretrained(tmp_path / "native")
    for (k, v), (_, v2) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(v, v2), k
    assert cli(["convert", str(minilm_dir), str(tmp_path / "bf16"), "--dtype", "bf16"]) == 0
    ckpt = read_checkpoint(tmp_path / "bf16")
    assert all(t.dtype == torch.bfloat16 for t in ckpt.tensors.values())
    c = ma.Encoder.from_pretrained(tmp_path / "bf16", dtype=torch.bfloat16)
    assert c.embeddings.word.weight.dtype == torch.bfloat16
    # native -> hf -> transformers
    assert cli(["convert", str(tmp_path / "native"), str(tmp_path / "hf"), "--to", "hf"]) == 0
    hf = transformers.AutoModel.from_pretrained(tmp_path / "hf")
    ids = torch.randint(1000, 2000, (1, 8))
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).last_hidden_state, a(ids).last_hidden_state, atol=1e-5, rtol=0)


def test_python_m_minialign_convert(tmp_path, save_hf):
    import subprocess
    import sys

    _, directory = save_hf("roberta", "mlm")
    result = subprocess.run([sys.executable, "-m", "minialign", "convert", str(directory), str(tmp_path / "out")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "wrote native checkpoint" in result.stdout
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_convert_reports_bad_source(tmp_path, capsys):
    assert cli(["convert", str(tmp_path / "missing"), str(tmp_path / "out")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_one_names_row_per_family_with_the_backbone_and_mlm_prefixes():
    """Each family's file (convert/families/<family>.py): a table, and where HF puts its backbone and MLM head;
    found by model_type (families.format_of), the key the model side's config classes attach to."""
    from minialign.convert import families
    from minialign.nn.config import families as model_side

    assert set(families.model_types()) == set(model_side())
    assert families.format_of("roberta").names.model_prefix == "roberta."
    assert families.format_of("bert").names.mlm_prefix == "cls.predictions."
    assert families.format_of("xlm-roberta").names is families.format_of("roberta").names  # RoBERTa's names
    with pytest.raises(ValueError, match="model_type 'gpt2' is not supported"):
        families.format_of("gpt2")
    with pytest.raises(TypeError, match="model_type 'bert'"):  # names.py takes a family's Names or Format
        convert.names.hf_to_minialign({}, "bert")


def test_custom_code_transformers_ships_natively_is_named_by_its_native_model_type():
    """Custom code transformers ships natively: an auto_map naming code transformers has ported (NATIVE_PORTS) is
    refused naming the native model_type and, where one is published, the checkpoint under it; under that very
    model_type it is read as the native family (transformers does so without trust_remote_code); other custom code
    is refused as before."""
    from minialign.convert.errors import CheckpointError
    from minialign.convert.hf_config import native_port, refuse_foreign

    supported = ("bert", "xlm-roberta", "gte", "jina_embeddings_v3", "eurobert")
    jina = {"model_type": "xlm-roberta", "architectures": ["XLMRobertaLoRA"],
            "auto_map": {"AutoModel": "jinaai/xlm-roberta-flash-implementation--modeling_lora.XLMRobertaLoRA"}}
    with pytest.raises(CheckpointError, match=r"XLMRobertaLoRA is custom code \(auto_map names "
                                              r"jinaai/xlm-roberta-flash-implementation\); minialign runs it natively "
                                              r"as model_type 'jina_embeddings_v3'.*load jinaai/jina-embeddings-v3-hf"):
        refuse_foreign(jina, supported=supported)
    gte = {"model_type": "new", "auto_map": {"AutoConfig": "Alibaba-NLP/new-impl--configuration.NewConfig",
                                             "AutoModel": "Alibaba-NLP/new-impl--modeling.NewModel"}}
    with pytest.raises(CheckpointError, match=r"natively as model_type 'gte'.*model_type here: 'new'"):
        refuse_foreign(gte, supported=supported)
    nomic = {"model_type": "bert", "auto_map": {"AutoModel": "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert.NomicBertModel"}}
    with pytest.raises(CheckpointError, match=r"transformers runs it natively as model_type 'nomic_bert'.*write config.json"):
        refuse_foreign(nomic, supported=supported)  # a family this list lacks: transformers', not ours
    eurobert = {"model_type": "eurobert", "auto_map": {"AutoModel": "modeling_eurobert.EuroBertModel"}}
    assert native_port(eurobert["auto_map"]) == ("modeling_eurobert.EuroBertModel", "eurobert", None)
    refuse_foreign(eurobert, supported=supported, ported=("modeling_eurobert.EuroBertModel",))  # its family's code
    with pytest.raises(CheckpointError, match=r"code of modeling_eurobert.EuroBertModel, which transformers' eurobert "
                                              r"ports, but not only the classes minialign's eurobert declares"):
        refuse_foreign(eurobert, supported=supported)  # a family that declares no ported code
    jina_bert = {"model_type": "bert", "auto_map": {"AutoModel": "jinaai/jina-bert-implementation--modeling_bert.JinaBertModel"}}
    assert native_port(jina_bert["auto_map"]) is None
    with pytest.raises(CheckpointError, match="is custom code .*does not run a checkpoint's own code"):
        refuse_foreign(jina_bert, supported=supported)
