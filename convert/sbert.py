"""sentence-transformers directories: the module list, pooling, Dense and Normalize modules, and the
CrossEncoder activation, read as plain values (sentence-transformers itself is never imported).

Files (sentence-transformers v2 to v6 write them; both the old and the new names are read):
  modules.json                        [{"idx", "name", "path", "type"}], applied in order
  <path>/config.json of a Pooling     {"pooling_mode": "mean" | [...]} (v6) or
                                      {"pooling_mode_cls_token": bool, ...} (before)
  <path>/config.json of a Dense       {"in_features", "out_features", "bias", "activation_function"},
                                      weights in <path>/model.safetensors or pytorch_model.bin
                                      under linear.weight / linear.bias
  sentence_bert_config.json           {"max_seq_length", "do_lower_case"}
  config_sentence_transformers.json   {"activation_fn": "torch.nn.modules.activation.Sigmoid", ...}
                                      (CrossEncoder, v6); before: config.json
                                      "sentence_transformers": {"activation_fn"} or
                                      "sbert_ce_default_activation_function"
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import CheckpointError
from .files import read_json, read_state_dict

# sentence-transformers modules by their class name (the last part of the "type" path).
MODULES = ("Transformer", "Pooling", "Dense", "Normalize")
POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
# sentence_transformers Pooling: legacy boolean keys, in the order it concatenates them.
_LEGACY_POOLING = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


def read_modules(directory: str | Path) -> list[tuple[str, Path]] | None:
    """(kind, folder) of each module of modules.json, in order; None when there is no modules.json
    (a plain transformers directory)."""
    directory = Path(directory)
    path = directory / "modules.json"
    if not path.is_file():
        return None
    entries = read_json(path, expect=list)
    modules = []
    for i, entry in enumerate(entries):
        kind = str(entry.get("type", "")).rsplit(".", 1)[-1] if isinstance(entry, dict) else ""
        if kind not in MODULES:
            raise CheckpointError(f"{path}: module {i} has type {entry.get('type') if isinstance(entry, dict) else entry!r}, "
                                  f"which minialign does not run; supported: {', '.join(MODULES)}")
        modules.append((kind, directory / str(entry.get("path", ""))))
    return modules


def read_pooling(folder: str | Path) -> list[str]:
    """The pooling modes of a Pooling module, in the order their outputs are concatenated."""
    path = Path(folder) / "config.json"
    config = read_json(path)
    if "pooling_mode" in config:
        mode = config["pooling_mode"]
        modes = [mode] if isinstance(mode, str) else list(mode)
    else:
        modes = [mode for key, mode in _LEGACY_POOLING.items() if config.get(key)] or ["mean"]
    unknown = [m for m in modes if m not in POOLING_MODES]
    if unknown:
        raise CheckpointError(f"{path}: pooling mode(s) {unknown} not supported; supported: {', '.join(POOLING_MODES)}")
    if config.get("include_prompt") is False:
        raise CheckpointError(f"{path}: include_prompt=false (prompt-excluding pooling) is not supported")
    return modes


def read_dense(folder: str | Path) -> dict[str, Any]:
    """A Dense module: its weight (out, in), bias or None, and activation path."""
    folder = Path(folder)
    config = read_json(folder / "config.json")
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (folder / name).is_file():
            tensors = read_state_dict(folder / name)
            break
    else:
        raise CheckpointError(f"{folder}: Dense module without model.safetensors or pytorch_model.bin")
    unknown = sorted(set(tensors) - {"linear.weight", "linear.bias"})
    if unknown or "linear.weight" not in tensors:
        raise CheckpointError(f"{folder}: Dense weights must be linear.weight (+ linear.bias), found {sorted(tensors)}")
    weight = tensors["linear.weight"]
    expected = (config.get("out_features"), config.get("in_features"))
    if tuple(weight.shape) != expected:
        raise CheckpointError(f"{folder}: linear.weight is {tuple(weight.shape)}, config says {expected}")
    return {"weight": weight, "bias": tensors.get("linear.bias"),
            "activation": config.get("activation_function", "torch.nn.modules.activation.Tanh")}


def read_sentence_config(directory: str | Path) -> dict[str, Any]:
    """sentence_bert_config.json (max_seq_length, do_lower_case), {} when absent."""
    path = Path(directory) / "sentence_bert_config.json"
    return read_json(path) if path.is_file() else {}


def crossencoder_activation(directory: str | Path) -> str | None:
    """The activation a sentence-transformers CrossEncoder applies to the logits, as the class path
    it saved, or None when the directory records none (CrossEncoder's own lookup order)."""
    directory = Path(directory)
    st_config = directory / "config_sentence_transformers.json"
    if st_config.is_file():
        path = read_json(st_config).get("activation_fn")
        if path:
            return str(path)
    hf_config = directory / "config.json"
    if hf_config.is_file():
        config = read_json(hf_config)
        nested = config.get("sentence_transformers")
        if isinstance(nested, dict) and nested.get("activation_fn"):
            return str(nested["activation_fn"])
        if config.get("sbert_ce_default_activation_function"):
            return str(config["sbert_ce_default_activation_function"])
    return None
