"""`minialign convert` of a sentence-transformers directory carries its modules over (modules.json, Pooling, Dense,
Normalize, sentence_bert_config.json, config_sentence_transformers.json's prompts and truncate_dim), in
sentence-transformers' own file layout, so the converted directory gives the original's vectors through
SentenceEncoder and (--to hf) through sentence-transformers; a module type it cannot write is refused by name."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from minialign import SentenceEncoder, convert
from minialign.apps.cli import main as cli
from minialign.loading import export_hf, read_checkpoint, save_native

pytestmark = pytest.mark.filterwarnings("ignore::minialign.runtime.engine.TruncationWarning")  # the long text is cut

PROMPTS = {"query": "query: ", "document": "passage: "}
# past the tiny models' 24-token window (family_builders.ST_WINDOW): the window is the original's, not the model's 512
TEXTS = ["a short sentence", " ".join(["the river runs past the old mill and on to the sea"] * 12)]


@pytest.fixture(scope="module")
def st_dir(tiny_family, tmp_path_factory) -> Path:
    """A tiny sentence-transformers directory: Transformer (at the root), Pooling (cls), Dense (to 10), Normalize,
    saved by sentence-transformers itself; prompts, a default prompt and truncate_dim added to its
    config_sentence_transformers.json."""
    directory = tmp_path_factory.mktemp("st") / "model"
    shutil.copytree(tiny_family.sentence_transformers("bert", pooling="cls", dense=True, normalize=True), directory)
    path = directory / "config_sentence_transformers.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, "prompts": PROMPTS, "default_prompt_name": "query", "truncate_dim": 6}))
    return directory


def _vectors(directory: Path, **options) -> torch.Tensor:
    encoder = SentenceEncoder.from_pretrained(directory)
    return encoder.encode(TEXTS, **options)


@pytest.mark.parametrize("to", ["native", "hf"])
def test_converted_sentence_transformers_directory_gives_the_original_vectors(st_dir, tmp_path, to):
    out = tmp_path / to
    assert cli(["convert", str(st_dir), str(out), "--to", to]) == 0
    assert [m["path"] for m in json.loads((out / "modules.json").read_text())] == \
        [m["path"] for m in json.loads((st_dir / "modules.json").read_text())]
    assert (out / "sentence_bert_config.json").is_file() and (out / "2_Dense" / "model.safetensors").is_file()
    original, converted = SentenceEncoder.from_pretrained(st_dir), SentenceEncoder.from_pretrained(out)
    assert converted.max_length == original.max_length == 24
    assert converted.pooling == ["cls"] and len(converted.dense) == 1 and converted.normalize
    assert converted.prompts == original.prompts and converted.default_prompt_name == "query"
    assert converted.truncate_dim == 6
    for options in ({}, {"prompt_name": "document"}, {"truncate_dim": None}):
        expected, got = original.encode(TEXTS, **options), converted.encode(TEXTS, **options)
        assert got.shape == expected.shape and torch.equal(got, expected), options
    assert converted.encode(TEXTS).shape == (2, 6)
    if to == "hf":  # sentence-transformers reads the export as it reads the original
        from sentence_transformers import SentenceTransformer

        reference, loaded = SentenceTransformer(str(st_dir), device="cpu"), SentenceTransformer(str(out), device="cpu")
        assert loaded.max_seq_length == reference.max_seq_length == 24
        assert loaded.prompts == reference.prompts and loaded.truncate_dim == 6
        for options in ({}, {"prompt_name": "document"}):
            expected = reference.encode(TEXTS, convert_to_tensor=True, **options)
            got = loaded.encode(TEXTS, convert_to_tensor=True, **options)
            torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
            torch.testing.assert_close(got, converted.encode(TEXTS, **options), atol=1e-5, rtol=0)


def test_a_dense_module_is_cast_with_the_weights(st_dir, tmp_path):
    assert cli(["convert", str(st_dir), str(tmp_path / "bf16"), "--dtype", "bf16"]) == 0
    dense = convert.read_safetensors(tmp_path / "bf16" / "2_Dense" / "model.safetensors")
    assert set(dense) == {"linear.weight", "linear.bias"} and dense["linear.weight"].dtype == torch.bfloat16
    original = convert.read_dense(st_dir, "2_Dense")
    torch.testing.assert_close(dense["linear.weight"].float(), original["weight"], atol=1e-2, rtol=1e-2)


def test_native_into_hf_keeps_the_modules(st_dir, tmp_path):
    """native -> hf: the module files travel on."""
    assert cli(["convert", str(st_dir), str(tmp_path / "native")]) == 0
    assert cli(["convert", str(tmp_path / "native"), str(tmp_path / "hf"), "--to", "hf"]) == 0
    assert torch.equal(_vectors(tmp_path / "hf"), _vectors(st_dir))


@pytest.mark.parametrize("to", ["native", "hf"])
def test_a_module_type_that_cannot_be_written_is_refused_by_name_before_writing(st_dir, tmp_path, capsys, to):
    source = tmp_path / "src"
    shutil.copytree(st_dir, source)
    modules = json.loads((source / "modules.json").read_text())
    modules.insert(2, {"idx": 2, "name": "layer_norm", "path": "2_LayerNorm",
                       "type": "sentence_transformers.models.LayerNorm"})
    (source / "modules.json").write_text(json.dumps(modules))
    out = tmp_path / "out"
    assert cli(["convert", str(source), str(out), "--to", to]) == 2
    err = capsys.readouterr().err
    assert "sentence_transformers.models.LayerNorm" in err and "2_LayerNorm" in err
    assert not out.exists()
    write = export_hf if to == "hf" else save_native
    with pytest.raises(convert.CheckpointError, match="LayerNorm"):
        write(read_checkpoint(source), out)
    assert not out.exists()


def test_a_second_transformer_or_a_module_at_the_root_is_refused(st_dir, tmp_path):
    source = tmp_path / "src"
    shutil.copytree(st_dir, source)
    modules = json.loads((source / "modules.json").read_text())
    for changed, named in (([*modules, {**modules[0], "idx": 4, "path": "4_Transformer"}], "4_Transformer"),
                           ([modules[0], {**modules[1], "path": ""}, *modules[2:]], "Pooling")):
        (source / "modules.json").write_text(json.dumps(changed))
        with pytest.raises(convert.CheckpointError, match=named):
            save_native(read_checkpoint(source), tmp_path / "out")
        assert not (tmp_path / "out").exists()


def test_real_minilm_converted_gives_unit_vectors_in_a_256_token_window(minilm_dir, tmp_path):
    """all-MiniLM-L6-v2 (Pooling mean, Normalize, max_seq_length 256; its modules.json names a 2_Normalize folder
    it does not ship): converted, the same vectors, of norm 1, on a 400-word text cut at 256 tokens."""
    text = " ".join(f"word{i % 50} and the river" for i in range(80))  # 400 words
    original = SentenceEncoder.from_pretrained(minilm_dir)
    expected = original.encode([text, "a cat"])
    for to in ("native", "hf"):
        assert cli(["convert", str(minilm_dir), str(tmp_path / to), "--to", to]) == 0
        converted = SentenceEncoder.from_pretrained(tmp_path / to)
        assert converted.max_length == 256 and converted.normalize
        got = converted.encode([text, "a cat"])
        torch.testing.assert_close(got.norm(dim=1), torch.ones(2), atol=1e-5, rtol=0)
        assert torch.equal(got, expected), to
