"""A stand-in for sentence-transformers' ONNX int8 backend (`export_dynamic_quantized_onnx_model` then
`SentenceTransformer(dir, backend="onnx", model_kwargs={"file_name": "onnx/model_quint8_avx2.onnx"})`, and
`CrossEncoder` the same), which needs optimum-onnx, whose transformers pin excludes ours.

The same steps, without optimum: export the transformers model the way optimum's exporter does it
(TorchScript exporter, optimum's inputs, outputs and dynamic axes, opset and constant folding), quantize
it with ONNX Runtime's dynamic quantizer under exactly the settings optimum's
`AutoQuantizationConfig.<config>(is_static=False)` hands to ONNX Runtime, open it in an ONNX Runtime
session the way optimum's ORTModel does, and tokenize, batch, pool and normalize the way
sentence-transformers does. Sources read (quoted in the comments below):

- UKPLab/sentence-transformers sentence_transformers/backend/quantize.py (installed 6.2.0)
- UKPLab/sentence-transformers sentence_transformers/backend/load.py (installed 6.2.0)
- huggingface/optimum-onnx optimum/onnxruntime/configuration.py (AutoQuantizationConfig, QuantizationConfig)
- huggingface/optimum-onnx optimum/onnxruntime/quantization.py (ORTQuantizer.quantize)
- huggingface/optimum-onnx optimum/onnxruntime/modeling.py (ORTModel._from_pretrained, the session)
- huggingface/optimum-onnx optimum/exporters/onnx/{base,model_configs,convert}.py (the export)
- onnxruntime 1.32 onnxruntime/quantization/quantize.py (quantize_dynamic) and onnx_quantizer.py
"""

from __future__ import annotations

import inspect
import json
import logging
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

# optimum-onnx optimum/exporters/onnx/base.py: `class OnnxConfig(ExporterConfig, ABC): DEFAULT_ONNX_OPSET = 18`
# (BertOnnxConfig and the other encoder configs do not override it).
OPSET = 18

# optimum-onnx optimum/exporters/onnx/model_configs.py: BertOnnxConfig.inputs is
# {"input_ids", "attention_mask", "token_type_ids"} with {0: "batch_size", 1: "sequence_length"}, but
# DistilBertOnnxConfig (and RoBERTa, XLM-R, CamemBERT, MPNet, IBert, ModernBERT, which derive from it) and
# EsmOnnxConfig leave token_type_ids out; DebertaOnnxConfig drops it when `type_vocab_size == 0`.
NO_TOKEN_TYPES = frozenset({"distilbert", "roberta", "xlm-roberta", "camembert", "mpnet", "ibert", "modernbert",
                            "esm"})
AXES = {0: "batch_size", 1: "sequence_length"}
# base.py `_TASK_TO_COMMON_OUTPUTS`: "feature-extraction": {"last_hidden_state": {0: "batch_size",
# 1: "sequence_length"}}, "text-classification": {"logits": {0: "batch_size"}}.
OUTPUT_AXES = {"last_hidden_state": AXES, "logits": {0: "batch_size"}}

CONFIGS = ("arm64", "avx2", "avx512", "avx512_vnni")


def onnx_input_names(hf_model) -> list[str]:
    """The inputs optimum's OnnxConfig gives this model type, in the forward's order (OnnxConfig.ordered_inputs)."""
    config = hf_model.config
    names = ["input_ids", "attention_mask"]
    accepts = inspect.signature(hf_model.forward).parameters
    if (config.model_type not in NO_TOKEN_TYPES and "token_type_ids" in accepts
            and getattr(config, "type_vocab_size", 1) > 0):
        names.append("token_type_ids")
    return sorted(names, key=list(accepts).index)


class _Exported(torch.nn.Module):
    """The transformers model with positional inputs and one named output."""

    def __init__(self, model, names: list[str], output: str):
        super().__init__()
        self.model, self.names, self.output = model, names, output

    def forward(self, *inputs):
        return getattr(self.model(**dict(zip(self.names, inputs)), return_dict=True), self.output)


def export_onnx(hf_model, path, *, opset: int = OPSET) -> Path:
    """The fp32 export (what optimum's ORTModelForFeatureExtraction / ORTModelForSequenceClassification
    export writes to onnx/model.onnx): last_hidden_state for a base model, logits for a classifier."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    hf_model = hf_model.eval()
    names = onnx_input_names(hf_model)
    # optimum's DummyTextInputGenerator uses batch 2, length 16; a padded second row keeps the
    # attention-mask path general while tracing.
    lengths = [16, 9]
    ids = torch.randint(5, min(hf_model.config.vocab_size, 1000), (2, 16))
    mask = (torch.arange(16)[None] < torch.tensor(lengths)[:, None]).long()
    dummy = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
    with torch.no_grad():
        out = hf_model(**{n: dummy[n] for n in names}, return_dict=True)
    output = "logits" if getattr(out, "logits", None) is not None else "last_hidden_state"
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        # optimum-onnx convert.py export_pytorch: `onnx_export(model, (dummy_inputs,), f=..., input_names=...,
        # output_names=..., do_constant_folding=do_constant_folding (True), opset_version=opset,
        # **export_kwargs)` with `export_kwargs = {"dynamo": dynamo (False), "external_data": dynamo}` and
        # `export_kwargs["dynamic_axes"] = dynamic_axes` (inputs and outputs above).
        torch.onnx.export(_Exported(hf_model, names, output), tuple(dummy[n] for n in names), str(path),
                          input_names=names, output_names=[output], opset_version=opset, do_constant_folding=True,
                          dynamo=False, external_data=False,
                          dynamic_axes={**{n: AXES for n in names}, output: OUTPUT_AXES[output]})
    return path


def quantization_settings(config: str = "avx2", model=None) -> dict:
    """keyword arguments for onnxruntime.quantization.quantize_dynamic that reproduce what optimum's
    ORTQuantizer.quantize passes to ONNXQuantizer for `AutoQuantizationConfig.<config>(is_static=False)`,
    which is how sentence-transformers calls it (backend/quantize.py:
    `quantization_config = getattr(AutoQuantizationConfig, quantization_config)(is_static=False)`; per_channel
    and the other arguments are left at their defaults)."""
    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization.registry import IntegerOpsRegistry

    if config not in CONFIGS:
        raise ValueError(f"config must be one of {CONFIGS}, got {config!r}")
    # quantization.py: `has_subgraphs` is True when a node is one of "If", "Loop", "Scan", "SequenceMap".
    has_subgraphs = model is not None and any(n.op_type in ("If", "Loop", "Scan", "SequenceMap")
                                              for n in model.graph.node)
    return dict(
        # configuration.py, AutoQuantizationConfig.avx2: `weights_dtype=QuantType.QUInt8`; arm64, avx512 and
        # avx512_vnni: `weights_dtype=QuantType.QInt8`.
        weight_type=QuantType.QUInt8 if config == "avx2" else QuantType.QInt8,
        # every AutoQuantizationConfig method: `per_channel: bool = True` (not overridden by sentence-transformers).
        per_channel=True,
        # avx2/avx512: `reduce_range: bool = False` passed through; arm64/avx512_vnni: `reduce_range=False`.
        reduce_range=False,
        # default_quantization_parameters(is_static=False): `format = QuantFormat.QOperator`, `mode =
        # QuantizationMode.IntegerOps`, `operators_to_quantize = ORT_DEFAULT_OPS_DYNAMIC_QUANTIZATION` =
        # `list(IntegerOpsRegistry.keys())`; quantize_dynamic is QOperator/IntegerOps, with activations
        # `QuantType.QUInt8` hard-coded (configuration.py: `activations_dtype=QuantType.QUInt8` in all four).
        op_types_to_quantize=list(IntegerOpsRegistry.keys()),
        nodes_to_quantize=[],  # `nodes_to_quantize=nodes_to_quantize or []`
        nodes_to_exclude=[],  # `nodes_to_exclude=nodes_to_exclude or []`
        # quantization.py, ORTQuantizer.quantize: `"extra_options": {"WeightSymmetric":
        # quantization_config.weights_symmetric, "ActivationSymmetric": ...activations_symmetric, "EnableSubgraph":
        # has_subgraphs, "ForceSymmetric": activations_symmetric and weights_symmetric, "AddQDQPairToWeight":
        # qdq_add_pair_to_weight, "DedicatedQDQPair": qdq_dedicated_pair, "QDQOpTypePerChannelSupportToAxis":
        # qdq_op_type_per_channel_support_to_axis}`, with `use_symmetric_weights: bool = True`,
        # `use_symmetric_activations: bool = False`, and the QDQ fields at their dataclass defaults (False, False,
        # ORT_DEFAULT_CHANNEL_FOR_OPERATORS = {"MatMul": 1}; ONNXQuantizer, the QOperator quantizer, never reads
        # the QDQ ones).
        extra_options={
            "WeightSymmetric": True,  # explicit: left unset, ORT would make QUInt8 (avx2) weights asymmetric
            "ActivationSymmetric": False,
            "EnableSubgraph": has_subgraphs,
            "ForceSymmetric": False,
            "AddQDQPairToWeight": False,
            "DedicatedQDQPair": False,
            "QDQOpTypePerChannelSupportToAxis": {"MatMul": 1},
            # optimum builds ONNXQuantizer itself and never sets MatMulConstBOnly, so ONNXQuantizer reads it as
            # False (`"MatMulConstBOnly" in self.extra_options and ...`) and the activation x activation MatMuls
            # of attention (QK^T, PV) are quantized too; quantize_dynamic would default it to True
            # (`if "MatMulConstBOnly" not in extra_options: extra_options["MatMulConstBOnly"] = True`).
            "MatMulConstBOnly": False,
        },
    )


def quantize(fp32_path, out_path, *, config: str = "avx2") -> Path:
    """ONNX Runtime dynamic int8 quantization of an fp32 export with optimum's settings for `config`.

    quantize_dynamic also runs ONNX shape inference before quantizing and calls `update_opset_version`
    (a no-op for 8-bit types); optimum passes `onnx.load(path)` to ONNXQuantizer, which for dynamic
    quantization runs the same shape inference itself (`save_and_reload_model_with_shape_infer`), so the
    graphs come out the same."""
    import onnx
    from onnxruntime.quantization import quantize_dynamic

    settings = quantization_settings(config, onnx.load(str(fp32_path), load_external_data=False))
    out_path = Path(out_path)
    root = logging.getLogger()
    level = root.level
    try:  # quantize_dynamic logs a "consider pre-processing" warning: optimum does not pre-process either
        root.setLevel(logging.ERROR)
        quantize_dynamic(str(fp32_path), str(out_path), **settings)
    finally:
        root.setLevel(level)
    return out_path


def export_quantized(hf_model, directory, *, config: str = "avx2") -> Path:
    """directory/model.onnx (fp32) and directory/model_<weights dtype>_<config>.onnx, the quantized one,
    named as sentence-transformers names it (backend/quantize.py: `file_suffix =
    f"{quantization_config.weights_dtype.name.lower()}_{quantization_config_name}"`, saved by ORTQuantizer as
    `f"{self.onnx_model_path.stem}_{file_suffix}.onnx"`): model_quint8_avx2.onnx, model_qint8_avx512.onnx,
    model_qint8_avx512_vnni.onnx, model_qint8_arm64.onnx. Returns the quantized model's path."""
    directory = Path(directory)
    fp32 = export_onnx(hf_model, directory / "model.onnx")
    weights = "quint8" if config == "avx2" else "qint8"
    return quantize(fp32, directory / f"model_{weights}_{config}.onnx", config=config)


def ort_session(path, threads: int):
    """The session optimum's ORTModel opens (modeling.py `_from_pretrained`: `InferenceSession(model_path,
    providers=providers, provider_options=provider_options, sess_options=session_options)` with
    `session_options=None` as sentence-transformers passes none, and sentence-transformers' load.py:
    `model_kwargs["provider"] = model_kwargs.pop("provider", ort.get_available_providers()[0])`, the CPU
    provider here): ONNX Runtime's default options (all graph optimizations, sequential execution) with one
    change, `threads` intra-op threads (ORT's default is one per physical core), so it runs on the same
    threads as the torch runs it is compared with."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _read(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def text_tokenizer(directory, max_length: int):
    """tokenizer.json with sentence-transformers' text settings (base/modules/transformer.py preprocess:
    `"text": {"padding": True, "truncation": "longest_first"}` up to the tokenizer's `model_max_length`):
    pad to the longest in the batch, on the tokenizer's padding side, truncate longest-first."""
    from tokenizers import Tokenizer

    directory = Path(directory)
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    settings = {**_read(directory / "special_tokens_map.json"), **_read(directory / "tokenizer_config.json")}
    pad = settings.get("pad_token", "[PAD]")
    pad = pad["content"] if isinstance(pad, dict) else pad
    tokenizer.no_truncation()
    tokenizer.enable_truncation(max_length, strategy="longest_first",
                                direction=settings.get("truncation_side", "right"))
    tokenizer.enable_padding(direction=settings.get("padding_side", "right"), pad_id=tokenizer.token_to_id(pad),
                             pad_token=pad)
    return tokenizer


class _OnnxModel:
    """Sorting, batching, tokenizing and running, shared by both wrappers (sentence-transformers'
    `_inference`/`encode`: `length_sorted_idx = np.argsort([-self._input_length(x) for x in inputs])`,
    with `_input_length` the character count, summed over a pair)."""

    def __init__(self, directory, onnx_path, threads: int, max_length: int):
        self.tokenizer = text_tokenizer(directory, max_length)
        self.session = ort_session(onnx_path, threads)
        self.input_names = [i.name for i in self.session.get_inputs()]

    def _run(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        encodings = self.tokenizer.encode_batch(batch)
        feed = {"input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64)}
        out = self.session.run(None, {name: feed[name] for name in self.input_names})[0]
        return torch.from_numpy(out), torch.from_numpy(feed["attention_mask"])

    def _batches(self, inputs: list, batch_size: int, length):
        order = np.argsort([-length(x) for x in inputs])
        results = [None] * len(inputs)
        for start in range(0, len(inputs), batch_size):
            index = order[start:start + batch_size]
            for i, row in zip(index, self._forward([inputs[i] for i in index])):
                results[i] = row
        return torch.stack(results) if results else torch.empty(0)


class OnnxSentenceEncoder(_OnnxModel):
    """A sentence-transformers directory's Transformer -> Pooling (-> Normalize) run through an ONNX export
    of its transformer: `.encode(texts)` equals `SentenceTransformer(directory).encode(texts)`."""

    def __init__(self, st_directory, onnx_path, threads: int):
        st_directory = Path(st_directory)
        modules = _read(st_directory / "modules.json") or [
            {"path": "", "type": "sentence_transformers.models.Transformer"}]
        kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
        unknown = set(kinds) - {"Transformer", "Pooling", "Normalize"}
        if unknown or kinds[0] != "Transformer":
            raise NotImplementedError(f"modules {kinds}: only Transformer, Pooling, Normalize are supported")
        root = st_directory / modules[0]["path"]
        max_length = _read(root / "sentence_bert_config.json").get("max_seq_length") \
            or _max_length(root)
        super().__init__(root, onnx_path, threads, max_length)
        pooling = next((m for m in modules if m["type"].endswith("Pooling")), None)
        self.pooling = _pooling_modes(_read(st_directory / pooling["path"] / "config.json")) if pooling else []
        self.normalize = "Normalize" in kinds

    def _forward(self, batch: list[str]) -> torch.Tensor:
        tokens, mask = self._run(batch)
        if not self.pooling:
            raise NotImplementedError("no Pooling module: token embeddings are not supported")
        out = [_pool(mode, tokens, mask) for mode in self.pooling]
        out = torch.cat(out, dim=1)
        return F.normalize(out, p=2, dim=1) if self.normalize else out

    def encode(self, texts: list[str], batch_size: int = 32) -> torch.Tensor:
        return self._batches(list(texts), batch_size, len)


class OnnxCrossEncoder(_OnnxModel):
    """A sequence-classification model run through its ONNX export on text pairs: `.predict(pairs)` gives
    the raw logits, squeezed to (n,) for one label, as `CrossEncoder(directory).predict(pairs,
    activation_fn=torch.nn.Identity())` does."""

    def __init__(self, directory, onnx_path, threads: int):
        directory = Path(directory)
        max_length = _read(directory / "sentence_bert_config.json").get("max_seq_length") or _max_length(directory)
        super().__init__(directory, onnx_path, threads, max_length)

    def _forward(self, batch) -> torch.Tensor:
        logits, _ = self._run([tuple(pair) for pair in batch])
        return logits.squeeze(-1) if logits.shape[-1] == 1 else logits

    def predict(self, pairs, batch_size: int = 32) -> torch.Tensor:
        return self._batches(list(pairs), batch_size, lambda pair: sum(len(s) for s in pair))


def _max_length(directory: Path) -> int:
    """The tokenizer's model_max_length (sentence-transformers' Transformer.max_seq_length reads
    `self.tokenizer.model_max_length`), else the model's max_position_embeddings."""
    length = _read(directory / "tokenizer_config.json").get("model_max_length")
    if length is None or length > 1e8:  # transformers' VERY_LARGE_INTEGER: no limit configured
        length = _read(directory / "config.json")["max_position_embeddings"]
    return int(length)


_LEGACY_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max", "pooling_mode_mean_tokens": "mean",
                 "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                 "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}


def _pooling_modes(config: dict) -> list[str]:
    """Pooling's config.json: `pooling_mode` (a mode or a list) or the legacy booleans, in ST's order."""
    mode = config.get("pooling_mode")
    if mode is not None:
        return [mode] if isinstance(mode, str) else list(mode)
    return [name for key, name in _LEGACY_MODES.items() if config.get(key)]


def _pool(mode: str, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sentence-transformers' Pooling.forward for the padded case (sentence_transformer/modules/pooling.py)."""
    m = mask.unsqueeze(-1).to(tokens.dtype)
    if mode == "cls":
        return tokens[:, 0]
    if mode == "max":
        return tokens.masked_fill(m == 0, -1e9).max(dim=1).values
    if mode in ("mean", "mean_sqrt_len_tokens"):
        total, count = (tokens * m).sum(dim=1), m.sum(dim=1)
        return total / (torch.clamp(count, min=1e-9) if mode == "mean" else torch.sqrt(count))
    raise NotImplementedError(f"pooling mode {mode!r}")
