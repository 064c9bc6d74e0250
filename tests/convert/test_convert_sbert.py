"""`minialign convert` of a sentence-transformers directory carries its modules over (modules.json,
sentence_bert_config.json, config_sentence_transformers.json's prompts and truncate_dim, and every other module's folder
as it was saved, of any type), so the converted directory gives the original's vectors through SentenceEncoder,
SparseEncoder and MultiVectorEncoder and (--to hf) through sentence-transformers; what cannot be written (a module at
the root besides the transformer, a second transformer or one not first, a folder outside the model, a type whose files
a hub repo cannot list) is refused by type and path before anything is written."""

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

import minialign as ma
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
def test_a_module_of_any_type_is_carried_as_saved(st_dir, tmp_path, to):
    """A module type minialign does not run (a made-up one, its folder nested) is carried byte for byte; one
    sentence-transformers runs (LayerNorm, saved by it) gives the original's vectors there too."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import LayerNorm

    torch.manual_seed(2)
    modules = list(SentenceTransformer(str(st_dir), device="cpu"))
    norm = LayerNorm(modules[1].get_embedding_dimension())
    torch.nn.init.normal_(norm.norm.weight)
    source = tmp_path / "src"
    SentenceTransformer(modules=[*modules[:2], norm, *modules[2:]], device="cpu").save(str(source))
    entries = json.loads((source / "modules.json").read_text())
    (source / "9_Foo" / "inner").mkdir(parents=True)
    (source / "9_Foo" / "config.json").write_text('{"size": 3}')
    (source / "9_Foo" / "inner" / "state.bin").write_bytes(bytes(range(256)))
    (source / "modules.json").write_text(json.dumps([*entries, {"idx": 5, "name": "9", "path": "9_Foo",
                                                                 "type": "my_pkg.Foo"}]))
    out = tmp_path / to
    assert cli(["convert", str(source), str(out), "--to", to]) == 0
    assert json.loads((out / "modules.json").read_text())[-1]["type"] == "my_pkg.Foo"
    for folder in ("2_LayerNorm", "9_Foo"):
        files = sorted(p.relative_to(source) for p in (source / folder).rglob("*") if p.is_file())
        assert files and files == sorted(p.relative_to(out) for p in (out / folder).rglob("*") if p.is_file())
        for name in files:
            assert (out / name).read_bytes() == (source / name).read_bytes(), name
    if to == "hf":  # without the made-up module, sentence-transformers runs the LayerNorm as in the original
        (source / "modules.json").write_text(json.dumps(entries))
        (out / "modules.json").write_text(json.dumps(entries))
        expected = SentenceTransformer(str(source), device="cpu").encode(TEXTS, convert_to_tensor=True)
        got = SentenceTransformer(str(out), device="cpu").encode(TEXTS, convert_to_tensor=True)
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("module", ["MLMTransformer", "Transformer"])
@pytest.mark.parametrize("to", ["native", "hf"])
def test_a_sparse_encoder_converted_gives_the_original_vectors(tiny_family, tmp_path, module, to):
    """A SparseEncoder (SPLADE: MLMTransformer, or Transformer with transformer_task "fill-mask", at the root, then
    SpladePooling), max_active_dims and prompts saved: the same sparse vectors through minialign's SparseEncoder and
    (--to hf, written as BertForMaskedLM) sentence-transformers'."""
    directory = tiny_family.sparse_encoder("bert", pooling_strategy="sum", max_active_dims=9, prompts=PROMPTS,
                                           module=module)
    out = tmp_path / to
    assert cli(["convert", str(directory), str(out), "--to", to]) == 0
    assert (out / "1_SpladePooling" / "config.json").read_bytes() == \
        (directory / "1_SpladePooling" / "config.json").read_bytes()
    original, converted = ma.SparseEncoder.from_pretrained(directory), ma.SparseEncoder.from_pretrained(out)
    assert (converted.pooling_strategy, converted.max_active_dims, converted.prompts) == ("sum", 9, PROMPTS)
    for options in ({}, {"prompt_name": "document"}):
        assert torch.equal(converted.encode(TEXTS, **options).to_dense(), original.encode(TEXTS, **options).to_dense())
    if to == "hf":
        from sentence_transformers import SparseEncoder

        expected = SparseEncoder(str(directory), device="cpu").encode(TEXTS).to_dense()
        got = SparseEncoder(str(out), device="cpu").encode(TEXTS).to_dense()
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
        torch.testing.assert_close(converted.encode(TEXTS).to_dense(), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("to", ["native", "hf"])
def test_a_multivector_encoder_converted_gives_the_original_token_vectors(tiny_family, tmp_path, to):
    """A MultiVectorEncoder (Transformer with a query expansion, a token-level Dense, MultiVectorMask, Normalize)."""
    from conftest import save_multivector_encoder

    base, _ = tiny_family.hf("bert")
    directory = save_multivector_encoder(tmp_path, base, {"strategy": "fixed", "attend": False, "length": 12})
    out = tmp_path / to
    assert cli(["convert", str(directory), str(out), "--to", to]) == 0
    original, converted = ma.MultiVectorEncoder.from_pretrained(directory), ma.MultiVectorEncoder.from_pretrained(out)
    for encode in ("encode_query", "encode_document"):
        expected, got = getattr(original, encode)(TEXTS), getattr(converted, encode)(TEXTS)
        assert len(got) == len(expected) and all(torch.equal(a, b) for a, b in zip(got, expected)), encode
    if to == "hf":
        from sentence_transformers import MultiVectorEncoder

        expected = MultiVectorEncoder(str(directory), device="cpu").encode_document(TEXTS)
        for a, b in zip(MultiVectorEncoder(str(out), device="cpu").encode_document(TEXTS), expected):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def _unwritable(modules: list[dict]) -> dict[str, list[dict]]:
    """modules.json's that cannot be written, by what the refusal names (type and path)."""
    transformer, pooling, *rest = modules
    return {"Transformer.*'4_Transformer'": [*modules, {**transformer, "idx": 4, "path": "4_Transformer"}],
            r"Pooling' at '\.'.*root": [transformer, {**pooling, "path": ""}, *rest],
            "Pooling' at '1_Pooling'.*first": [pooling, transformer, *rest],
            r"'\.\./elsewhere'.*Pooling": [transformer, {**pooling, "path": "../elsewhere"}, *rest]}


@pytest.mark.parametrize("to", ["native", "hf"])
def test_what_cannot_be_written_is_refused_by_type_and_path_before_writing(st_dir, tmp_path, capsys, to):
    source = tmp_path / "src"
    shutil.copytree(st_dir, source)
    write = export_hf if to == "hf" else save_native
    for named, changed in _unwritable(json.loads((source / "modules.json").read_text())).items():
        (source / "modules.json").write_text(json.dumps(changed))
        assert cli(["convert", str(source), str(tmp_path / "out"), "--to", to]) == 2
        assert re.search(named, capsys.readouterr().err), named
        with pytest.raises(convert.CheckpointError, match=named):
            write(read_checkpoint(source), tmp_path / "out")
        assert not (tmp_path / "out").exists()


def test_from_the_hub_the_known_types_are_carried_and_another_is_refused(st_dir, tmp_path, monkeypatch):
    """A hub snapshot's folders cannot be listed: what sentence-transformers saves of each type minialign reads
    is carried (the same vectors); a module of another type is refused by type and path."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    snapshot = tmp_path / "cache" / "models--org--st" / "snapshots" / ("0" * 40)  # as huggingface_hub's cache holds it
    shutil.copytree(st_dir, snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
    save_native(read_checkpoint("org/st", cache_dir=tmp_path / "cache"), tmp_path / "native")
    assert sorted(p.name for p in (tmp_path / "native" / "2_Dense").iterdir()) == ["config.json", "model.safetensors"]
    assert torch.equal(_vectors(tmp_path / "native"), _vectors(st_dir))
    modules = json.loads((snapshot / "modules.json").read_text())
    (snapshot / "modules.json").write_text(json.dumps([*modules, {"idx": 4, "name": "4", "path": "4_Foo",
                                                                  "type": "my_pkg.Foo"}]))
    with pytest.raises(convert.CheckpointError, match="'my_pkg.Foo' at '4_Foo'.*from the hub"):
        save_native(read_checkpoint("org/st", cache_dir=tmp_path / "cache"), tmp_path / "refused")
    assert not (tmp_path / "refused").exists()


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
