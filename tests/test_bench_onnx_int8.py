"""scripts/benchmarks/onnx_int8.py, the stand-in for sentence-transformers' ONNX int8 backend: its fp32
export run through ONNX Runtime gives what SentenceTransformer.encode and CrossEncoder.predict give, and
its quantized export holds dynamic int8 ops and stays close to fp32."""

import collections
import shutil

import pytest
import torch

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
sentence_transformers = pytest.importorskip("sentence_transformers")

from benchmarks import onnx_int8  # noqa: E402  scripts/benchmarks (conftest: scripts/ on the path)

TEXTS = [
    "hi",
    "The Eiffel tower was built in Paris in 1889.",
    "x",
    "The minister said on Monday that the government would publish the new report on the city's "
    "market after police officials and the court reviewed it. " * 3,
    "one two three four five six seven",
    "Ünïcödé, accents and punctuation: it's a test!",
    "word " * 600,  # past max_seq_length (256) and the cross-encoder's 512: truncated
    "A short claim.",
]


@pytest.fixture(scope="module")
def exported(minilm_dir, tmp_path_factory):
    import transformers

    directory = tmp_path_factory.mktemp("onnx")
    model = transformers.AutoModel.from_pretrained(minilm_dir)
    quantized = onnx_int8.export_quantized(model, directory, config="avx2")
    return directory / "model.onnx", quantized


@pytest.fixture(scope="module")
def reference(minilm_dir):
    model = sentence_transformers.SentenceTransformer(str(minilm_dir), device="cpu")
    return model.encode(TEXTS, convert_to_tensor=True, batch_size=3)


@pytest.mark.slow
def test_fp32_export_encodes_as_sentence_transformers(minilm_dir, exported, reference):
    fp32, _ = exported
    names = [i.name for i in onnx.load(str(fp32), load_external_data=False).graph.input]
    assert names == ["input_ids", "attention_mask", "token_type_ids"]  # optimum's BertOnnxConfig inputs
    ours = onnx_int8.OnnxSentenceEncoder(minilm_dir, fp32, threads=2).encode(TEXTS, batch_size=3)
    assert ours.shape == reference.shape == (len(TEXTS), 384)
    assert (ours - reference).abs().max() <= 1e-4


@pytest.mark.slow
def test_quantized_export_has_dynamic_int8_ops_and_stays_close(minilm_dir, exported, reference):
    _, quantized = exported
    assert quantized.name == "model_quint8_avx2.onnx"  # sentence-transformers' file name for "avx2"
    ops = collections.Counter(n.op_type for n in onnx.load(str(quantized)).graph.node)
    # 6 layers x (q, k, v, out, up, down + the two attention products): optimum leaves MatMulConstBOnly unset
    assert ops["MatMulInteger"] == 48 and ops["DynamicQuantizeLinear"] > 0 and ops["MatMul"] == 0
    ours = onnx_int8.OnnxSentenceEncoder(minilm_dir, quantized, threads=2).encode(TEXTS, batch_size=3)
    cosine = torch.nn.functional.cosine_similarity(ours, reference)
    # One token repeated 256 times is int8's worst case here (its attention products quantized with
    # per-tensor activation scales, over the whole batch): ~0.94-0.95, the text-like ones >= 0.98.
    degenerate = torch.tensor([t.startswith("word word") for t in TEXTS])
    assert cosine[~degenerate].min() >= 0.95 and cosine[degenerate].min() >= 0.9


def test_quantization_settings_follow_optimum():
    from onnxruntime.quantization import QuantType

    avx2, vnni = onnx_int8.quantization_settings("avx2"), onnx_int8.quantization_settings("avx512_vnni")
    assert avx2["weight_type"] == QuantType.QUInt8 and vnni["weight_type"] == QuantType.QInt8
    for settings in (avx2, vnni):
        assert settings["per_channel"] and not settings["reduce_range"]
        assert settings["extra_options"]["WeightSymmetric"] and not settings["extra_options"]["MatMulConstBOnly"]
    with pytest.raises(ValueError):
        onnx_int8.quantization_settings("avx3")


@pytest.mark.slow
def test_fp32_cross_encoder_export_gives_cross_encoder_logits(minilm_dir, tmp_path):
    import transformers

    torch.manual_seed(0)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(minilm_dir, num_labels=1)
    torch.nn.init.normal_(model.classifier.weight, std=0.5)  # a random head with logits of order 1
    model.save_pretrained(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        shutil.copy(minilm_dir / name, tmp_path)
    path = onnx_int8.export_onnx(model, tmp_path / "onnx" / "model.onnx")
    assert [o.name for o in onnx.load(str(path), load_external_data=False).graph.output] == ["logits"]

    # the long text overflows 512 beside a short one and beside itself: longest-first truncation
    pairs = list(zip(TEXTS, TEXTS[1:] + TEXTS[:1])) + [(TEXTS[6], TEXTS[6])]
    reference = sentence_transformers.CrossEncoder(str(tmp_path), device="cpu").predict(
        pairs, activation_fn=torch.nn.Identity(), convert_to_tensor=True, batch_size=3)
    ours = onnx_int8.OnnxCrossEncoder(tmp_path, path, threads=2).predict(pairs, batch_size=3)
    assert ours.shape == reference.shape == (len(pairs),)
    assert reference.abs().max() > 0.1
    assert (ours - reference).abs().max() <= 1e-4
