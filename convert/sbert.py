"""sentence-transformers models: the module list, pooling, Dense and Normalize modules, and the
CrossEncoder activation, read as plain values (sentence-transformers itself is never imported), from
a directory or any `Files` (a hub snapshot fetched file by file); and the module files a converted
directory carries over (read_module_files, write_module_files).

Files (sentence-transformers v2 to v6 write them; both the old and the new names are read):
  modules.json                        [{"idx", "name", "path", "type"}], applied in order
  <path>/config.json of a Pooling     {"pooling_mode": "mean" | [...]} (v6) or
                                      {"pooling_mode_cls_token": bool, ...} (before);
                                      "include_prompt": false leaves the prompt's tokens out of it
  <path>/config.json of a Dense       {"in_features", "out_features", "bias", "activation_function"},
                                      weights in <path>/model.safetensors or pytorch_model.bin
                                      under linear.weight / linear.bias
  sentence_bert_config.json           {"max_seq_length", "do_lower_case"}; a SparseEncoder's Transformer
                                      also {"transformer_task": "fill-mask"} (v5.4+; before: MLMTransformer)
  <path>/config.json of a SpladePooling {"pooling_strategy": "max" | "sum", "activation_function": "relu" |
                                      "log1p_relu", "embedding_dimension"} (sparse_encoder/modules/splade_pooling.py)
  config_sentence_transformers.json   of a SparseEncoder: {"max_active_dims": int | null, "similarity_fn_name"}
  router_config.json of a Router      {"types": {folder: class path}, "structure": {route: [folder, ...]},
                                      "parameters": {"default_route", "allow_empty_key", "route_mappings"}}
                                      (base/modules/router.py); each route's modules in <folder>/
  <folder>/model.safetensors of a SparseStaticEmbedding   {"weight": (V,)}, its tokenizer beside it
  <path>/config.json of a LayerNorm   {"dimension"}, weights norm.weight / norm.bias (a CrossEncoder's head)
  <path>/model.safetensors of a StaticEmbedding   {"embedding.weight": (V, D)}, or model2vec's {"embeddings",
                                      "mapping"?, "weights"?}, its tokenizer.json beside it; model2vec's config.json
                                      {"normalize", "max_length", ...}
  config_sentence_transformers.json   {"prompts": {name: prefix}, "default_prompt_name": name | null} (v2.4+);
                                      {"activation_fn": "torch.nn.modules.activation.Sigmoid", ...}
                                      (CrossEncoder, v6); before: config.json
                                      "sentence_transformers": {"activation_fn"} or
                                      "sbert_ce_default_activation_function"
"""

from __future__ import annotations

import shutil
import string
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import torch

from .errors import CheckpointError
from .files import (WEIGHT_FILES, Files, as_files, find_weights, read_json, read_state_dict, write_json,
                    write_safetensors)

# sentence-transformers modules by their class name (the last part of the "type" path): a SentenceTransformer's and a
# SparseEncoder's, and a MultiVectorEncoder's (PyLate's pylate.models.Dense.Dense is read as a Dense, as
# sentence-transformers does).
MODULES = ("Transformer", "Pooling", "Dense", "Normalize", "MLMTransformer", "SpladePooling", "Router")
MULTIVECTOR_MODULES = ("Transformer", "Dense", "MultiVectorMask", "Normalize")
ROUTED = ("MLMTransformer", "Transformer", "SpladePooling", "SparseStaticEmbedding")  # what a Router's routes may hold
# A CrossEncoder's modules (sentence-transformers 5.4+ saves a reranker as modules; cross_encoder/model.py): a
# Transformer, then a head on its tokens (Pooling, Dense, LayerNorm, in modules.json order) whose last Dense writes
# "scores"; or a causal LM's Transformer (transformer_task "text-generation") and a LogitScore module
# (cross_encoder/modules/logit_score.py): the next-token logits of one or two vocabulary tokens at the last position.
CROSS_ENCODER_MODULES = ("Transformer", "Pooling", "Dense", "LayerNorm", "LogitScore")
# A static embedding model's (sentence_transformer/modules/static_embedding.py; model2vec saves the same modules.json).
STATIC_MODULES = ("StaticEmbedding", "Normalize")
STATIC_HINT = ("a static embedding model: StaticEncoder.from_pretrained loads it, and the embed command, serve "
               "--embed and Ray pick it by themselves")
# Where a module's features go (base/modules/dense.py Dense: module_input_name, module_output_name).
SENTENCE_EMBEDDING, SCORES = "sentence_embedding", "scores"
SPLADE_POOLING = ("max", "sum")  # SpladePooling.SPLADE_POOLING_MODES
SPLADE_ACTIVATIONS = ("relu", "log1p_relu")  # SpladePooling.SPLADE_ACTIVATION
# sentence_transformers Pooling: legacy boolean keys, in the order it concatenates them.
_LEGACY_POOLING = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


def read_modules(where: str | Path | Files, *, supported: tuple[str, ...] = MODULES) -> list[tuple[str, str]] | None:
    """(kind, folder) of each module of modules.json, in order, the folder relative to the model ("" for
    the model itself); None when there is no modules.json (a plain transformers directory). A module whose
    kind is not in `supported` is a CheckpointError naming it."""
    files = as_files(where)
    path = files.file("modules.json", optional=True)
    if path is None:
        return None
    entries = read_json(path, expect=list)
    modules = []
    for i, entry in enumerate(entries):
        kind = str(entry.get("type", "")).rsplit(".", 1)[-1] if isinstance(entry, dict) else ""
        if kind not in supported:
            raise CheckpointError(f"{path}: module {i} has type {entry.get('type') if isinstance(entry, dict) else entry!r}, "
                                  f"which minialign does not run here; supported: {', '.join(supported)}"
                                  + (" (a multi-vector model: load it with MultiVectorEncoder)"
                                     if kind == "MultiVectorMask" else "")
                                  + (f" ({STATIC_HINT})" if kind == "StaticEmbedding" else ""))
        modules.append((kind, _folder(path, i, entry)))
    return modules


def _folder(path: Path, i: int, entry: dict) -> str:
    """modules.json's entry i's folder, relative to the model ("" for the model itself); a path outside the model is
    a CheckpointError naming it."""
    folder = str(entry.get("path", ""))
    if folder.startswith(("/", "~")) or "\\" in folder or ".." in PurePosixPath(folder).parts:
        raise CheckpointError(f"{path}: module {i} has path {folder!r}, which is not a folder of the model "
                              f"(type {entry.get('type')!r})")
    folder = str(PurePosixPath(folder))
    return "" if folder == "." else folder


def read_pooling(where: str | Path | Files, folder: str = "") -> list[str]:
    """The pooling modes a Pooling module names, in the order their outputs are concatenated (which
    modes minialign runs, and how, is minialign/products/pooling.py's)."""
    path = as_files(where).file(_inside(folder, "config.json"))
    config = read_json(path)
    if "pooling_mode" in config:
        mode = config["pooling_mode"]
        modes = [mode] if isinstance(mode, str) else list(mode)
    else:
        modes = [mode for key, mode in _LEGACY_POOLING.items() if config.get(key)] or ["mean"]
    return modes


def read_include_prompt(where: str | Path | Files, folder: str = "") -> bool:
    """Whether a Pooling module pools the prompt's tokens too (its config's include_prompt, default
    true); false: they are left out (INSTRUCTOR-style models)."""
    path = as_files(where).file(_inside(folder, "config.json"))
    include = read_json(path).get("include_prompt", True)
    if not isinstance(include, bool):
        raise CheckpointError(f"{path}: include_prompt must be true or false, got {include!r}")
    return include


def read_prompts(where: str | Path | Files) -> tuple[dict[str, str], str | None]:
    """The prompts config_sentence_transformers.json saves (name -> the text put before every input)
    and its default_prompt_name, as written ({} and None when absent). Which prompt a call uses is the
    embedding product's rule (minialign/products/embeddings.py)."""
    path = as_files(where).file("config_sentence_transformers.json", optional=True)
    if path is None:
        return {}, None
    config = read_json(path)
    prompts, default = config.get("prompts") or {}, config.get("default_prompt_name")
    if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
        raise CheckpointError(f"{path}: prompts must be an object of name -> prompt text, got {prompts!r}")
    if default is not None and not isinstance(default, str):
        raise CheckpointError(f"{path}: default_prompt_name must be a string or null, got {default!r}")
    return dict(prompts), default


def read_truncate_dim(where: str | Path | Files) -> int | None:
    """The truncate_dim config_sentence_transformers.json saves (sentence-transformers'
    SentenceTransformer._parse_model_config: a Matryoshka model's default output size), None when absent."""
    path = as_files(where).file("config_sentence_transformers.json", optional=True)
    if path is None:
        return None
    value = read_json(path).get("truncate_dim")
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise CheckpointError(f"{path}: truncate_dim must be a positive integer or null, got {value!r}")
    return value


def read_dense(where: str | Path | Files, folder: str = "") -> dict[str, Any]:
    """A Dense module: its weight (out, in), bias or None, and activation path."""
    files = as_files(where)
    config_path = files.file(_inside(folder, "config.json"))
    config = read_json(config_path)
    weights = next((p for name in WEIGHT_FILES if (p := files.file(_inside(folder, name), optional=True))), None)
    if weights is None:
        raise CheckpointError(f"{config_path.parent}: Dense module without {' or '.join(WEIGHT_FILES)}")
    tensors = read_state_dict(weights)
    unknown = sorted(set(tensors) - {"linear.weight", "linear.bias"})
    if unknown or "linear.weight" not in tensors:
        raise CheckpointError(f"{weights.parent}: Dense weights must be linear.weight (+ linear.bias), found {sorted(tensors)}")
    weight = tensors["linear.weight"]
    expected = (config.get("out_features"), config.get("in_features"))
    if tuple(weight.shape) != expected:
        raise CheckpointError(f"{weights.parent}: linear.weight is {tuple(weight.shape)}, config says {expected}")
    if config.get("use_residual"):  # Dense.forward adds its input (or residual.weight @ it): not run here
        raise CheckpointError(f"{config_path}: a Dense with use_residual, which minialign does not run")
    return {"weight": weight, "bias": tensors.get("linear.bias"),
            "activation": config.get("activation_function", "torch.nn.modules.activation.Tanh")}


def read_dense_features(where: str | Path | Files, folder: str = "") -> tuple[str, str]:
    """The features a Dense module reads and writes (its module_input_name, module_output_name; both
    "sentence_embedding" unless saved: the output defaults to the input, as Dense.__init__ does)."""
    config = read_json(as_files(where).file(_inside(folder, "config.json")))
    read = config.get("module_input_name") or SENTENCE_EMBEDDING
    return str(read), str(config.get("module_output_name") or read)


def read_layer_norm(where: str | Path | Files, folder: str = "") -> dict[str, Any]:
    """A LayerNorm module (sentence_transformer/modules/layer_norm.py: nn.LayerNorm(dimension), torch's eps 1e-5, on
    "sentence_embedding"): {"weight", "bias"} (dimension,) from its norm.weight / norm.bias."""
    files = as_files(where)
    config_path = files.file(_inside(folder, "config.json"))
    dimension = read_json(config_path).get("dimension")
    weights = next((p for name in WEIGHT_FILES if (p := files.file(_inside(folder, name), optional=True))), None)
    if weights is None:
        raise CheckpointError(f"{config_path.parent}: LayerNorm module without {' or '.join(WEIGHT_FILES)}")
    tensors = read_state_dict(weights)
    if set(tensors) != {"norm.weight", "norm.bias"} or any(tuple(t.shape) != (dimension,) for t in tensors.values()):
        raise CheckpointError(f"{weights}: a LayerNorm of dimension {dimension!r} holds norm.weight and norm.bias of "
                              f"that size, found { {k: tuple(v.shape) for k, v in tensors.items()} }")
    return {"weight": tensors["norm.weight"], "bias": tensors["norm.bias"]}


def read_logit_score(where: str | Path | Files, folder: str) -> dict[str, int | None]:
    """A LogitScore module's config.json (cross_encoder/modules/logit_score.py LogitScore.config_keys):
    {"true_token_id": int, "false_token_id": int or None}; it reads the Transformer's "causal_logits"."""
    path = as_files(where).file(_inside(folder, "config.json"))
    config = read_json(path)
    true_id, false_id = config.get("true_token_id"), config.get("false_token_id")
    for field, value in (("true_token_id", true_id), ("false_token_id", false_id)):
        if not (value is None and field == "false_token_id") and (isinstance(value, bool) or not isinstance(value, int)
                                                                   or value < 0):
            raise CheckpointError(f"{path}: {field} must be a token id (an int >= 0), got {value!r}")
    if config.get("module_input_name", "causal_logits") != "causal_logits":
        raise CheckpointError(f"{path}: module_input_name {config['module_input_name']!r} is not supported "
                              f"(minialign reads the Transformer's 'causal_logits')")
    return {"true_token_id": true_id, "false_token_id": false_id}


# transformers' *ForCausalLM next-token head, and the word embeddings it shares where tie_word_embeddings is true
# (transformers 5 saves no lm_head.weight then)
LM_HEAD, WORD_EMBEDDINGS = "lm_head.weight", "model.embed_tokens.weight"


def read_vocab_rows(where: str | Path | Files, token_ids: list[int], *, tied: bool) -> torch.Tensor:
    """Rows `token_ids` of a causal LM's next-token projection (k, hidden): lm_head.weight, or the word embeddings
    where tied; the weight file is memory-mapped, so only those rows are read (never the vocabulary's projection).
    A missing weight or an id past the vocabulary is a CheckpointError naming it."""
    path = find_weights(where)
    tensors = read_state_dict(path)
    name = WORD_EMBEDDINGS if tied else LM_HEAD
    if name not in tensors:
        raise CheckpointError(f"{path}: no {name} (the next-token head a LogitScore module reads"
                              + ("; config.json's tie_word_embeddings is true" if tied else "") + ")")
    weight = tensors[name]
    if weight.dim() != 2 or any(not 0 <= i < weight.size(0) for i in token_ids):
        raise CheckpointError(f"{path}: {name} of shape {tuple(weight.shape)} has no rows {token_ids}")
    return weight[token_ids].clone()


def read_model_config(where: str | Path | Files) -> dict[str, Any]:
    """config_sentence_transformers.json as written ({} when absent): model_type, prompts,
    similarity_fn_name, and the top-level keys PyLate v3 saved (`pylate_settings`)."""
    path = as_files(where).file("config_sentence_transformers.json", optional=True)
    return read_json(path) if path is not None else {}


def read_multivector_mask(where: str | Path | Files, folder: str = "") -> dict[str, Any]:
    """A MultiVectorMask module's config (sentence_transformers/multi_vector_encoder/modules/multi_vector_mask.py):
    skiplist_words (default none), skiplist_tasks (default ["document"]; a string is one task) and
    keep_only_token_ids (default None)."""
    path = as_files(where).file(_inside(folder, "config.json"))
    config = read_json(path)
    words, tasks = config.get("skiplist_words") or [], config.get("skiplist_tasks")
    keep = config.get("keep_only_token_ids")
    tasks = ["document"] if tasks is None else [tasks] if isinstance(tasks, str) else tasks
    if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
        raise CheckpointError(f"{path}: skiplist_words must be a list of strings, got {words!r}")
    if not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
        raise CheckpointError(f"{path}: skiplist_tasks must be a string or a list of strings, got {tasks!r}")
    if keep is not None and (not isinstance(keep, list) or not all(isinstance(i, int) for i in keep)):
        raise CheckpointError(f"{path}: keep_only_token_ids must be a list of token ids or null, got {keep!r}")
    return {"skiplist_words": list(words), "skiplist_tasks": list(tasks), "keep_only_token_ids": keep}


# PyLate and Stanford-NLP ColBERT marked punctuation as a skiplist by default (string.punctuation).
PUNCTUATION = list(string.punctuation)


def pylate_settings(config: dict[str, Any]) -> dict[str, Any]:
    """What a legacy PyLate save's config_sentence_transformers.json says, translated as sentence-transformers
    v6 does (MultiVectorEncoder._parse_model_config): "prefixes" (query / document -> the [Q] / [D] text put
    before the prompt, which is then registered as a special token), "prompts" (the saved prompts with the
    prefix before each), "transformer" (query_length, document_length, query_expansion: the flat
    do_query_expansion / attend_to_expansion_tokens / query_length become {"strategy": "fixed", "attend",
    "length"}; a saved sentence_bert_config.json value wins over these), "skiplist_words" (None: not saved),
    and "pylate_v3" (model_type "ColBERT": modules.json lists only Transformer and Dense, and the mask and
    the normalisation are implied). Empty values for a native MultiVectorEncoder save."""
    prompts = dict(config.get("prompts") or {})
    prefixes = {}
    for key, role in (("query_prefix", "query"), ("document_prefix", "document")):
        if key in config:
            prefix = config[key] or ""
            prefixes[role] = prefix
            prompts[role] = prefix + (prompts.get(role) or "").removeprefix(prefix)
    knobs = {key: config[key] for key in ("query_length", "document_length", "query_expansion")
             if key in config and (config[key] is not None or key == "query_expansion")}
    markers = ("query_length", "document_length", "query_expansion", "do_query_expansion", "attend_to_expansion_tokens",
               "attend_to_mask_tokens", "query_prefix", "document_prefix", "skiplist_words")
    if "query_expansion" not in knobs and any(key in config for key in markers):
        if config.get("do_query_expansion") is False:
            knobs["query_expansion"] = None
        else:
            attend = config.get("attend_to_expansion_tokens", config.get("attend_to_mask_tokens"))
            length = knobs.pop("query_length", None) or config.get("query_length") or 32
            knobs["query_expansion"] = {"strategy": "fixed", "attend": bool(attend), "length": length}
    return {"prefixes": prefixes, "prompts": prompts, "transformer": knobs,
            "skiplist_words": config.get("skiplist_words"), "pylate_v3": config.get("model_type") == "ColBERT"}


def read_splade_pooling(where: str | Path | Files, folder: str = "") -> dict[str, str]:
    """A SpladePooling module: {"pooling_strategy", "activation_function"}, SpladePooling's defaults ("max",
    "relu") where absent; a value it does not know is a CheckpointError naming it."""
    path = as_files(where).file(_inside(folder, "config.json"))
    config = read_json(path)
    values = {"pooling_strategy": config.get("pooling_strategy", "max"),
              "activation_function": config.get("activation_function", "relu")}
    for key, allowed in (("pooling_strategy", SPLADE_POOLING), ("activation_function", SPLADE_ACTIVATIONS)):
        if values[key] not in allowed:
            raise CheckpointError(f"{path}: {key} {values[key]!r} is not one of {allowed}")
    return values


def read_sparse_config(where: str | Path | Files) -> dict[str, Any]:
    """A SparseEncoder's config_sentence_transformers.json: max_active_dims (None: no limit; else a positive
    int) and similarity_fn_name (None: unset), {} of each when absent."""
    path = as_files(where).file("config_sentence_transformers.json", optional=True)
    if path is None:
        return {"max_active_dims": None, "similarity_fn_name": None}
    config = read_json(path)
    dims = config.get("max_active_dims")
    if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int) or dims <= 0):
        raise CheckpointError(f"{path}: max_active_dims must be a positive integer or null, got {dims!r}")
    return {"max_active_dims": dims, "similarity_fn_name": config.get("similarity_fn_name")}


def read_router(where: str | Path | Files, folder: str = "") -> dict[str, Any]:
    """A Router module: {"routes": {route: [(kind, folder), ...]}, "default_route": name | None (None with
    allow_empty_key: the first route, as Router.__init__ picks it), "route_mappings": {...}}; a module of a kind
    ROUTED lacks is a CheckpointError naming it."""
    path = as_files(where).file(_inside(folder, "router_config.json"))
    config = read_json(path)
    types, structure = config.get("types") or {}, config.get("structure") or {}
    if not isinstance(structure, dict) or not structure:
        raise CheckpointError(f"{path}: no routes in its structure")
    routes = {}
    for route, folders in structure.items():
        modules = []
        for name in folders:
            kind = str(types.get(name, "")).rsplit(".", 1)[-1]
            if kind not in ROUTED:
                raise CheckpointError(f"{path}: route {route!r} has module {name!r} of type {types.get(name)!r}, "
                                      f"which minialign does not run in a Router; supported: {', '.join(ROUTED)}")
            modules.append((kind, _inside(folder, name)))
        routes[route] = modules
    parameters = config.get("parameters") or {}
    default = parameters.get("default_route")
    if default is None and parameters.get("allow_empty_key", True):
        default = next(iter(routes))
    return {"routes": routes, "default_route": default, "route_mappings": parameters.get("route_mappings") or {}}


def read_static_embedding(where: str | Path | Files, folder: str) -> dict[str, Any]:
    """A SparseStaticEmbedding module (sparse_encoder/modules/sparse_static_embedding.py): {"weight": (V,) one weight
    per token id, "max_length": its tokenizer's model_max_length (None: none)}."""
    files = as_files(where)
    weights = next((p for name in WEIGHT_FILES if (p := files.file(_inside(folder, name), optional=True))), None)
    if weights is None:
        raise CheckpointError(f"{folder}: SparseStaticEmbedding module without {' or '.join(WEIGHT_FILES)}")
    tensors = read_state_dict(weights)
    if set(tensors) != {"weight"} or tensors["weight"].dim() != 1:
        raise CheckpointError(f"{weights}: a SparseStaticEmbedding holds one (V,) weight, found "
                              f"{ {k: tuple(v.shape) for k, v in tensors.items()} }")
    settings = files.file(_inside(folder, "tokenizer_config.json"), optional=True)
    limit = read_json(settings).get("model_max_length") if settings is not None else None
    limit = limit if isinstance(limit, int) and 0 < limit < 1_000_000 else None  # transformers' "no limit" is 1e30
    return {"weight": tensors["weight"], "max_length": limit}


def read_static_embeddings(where: str | Path | Files, folder: str = "") -> dict[str, Any]:
    """A StaticEmbedding module (sentence_transformer/modules/static_embedding.py), as sentence-transformers or
    model2vec saved it: {"weight": (V, D) one row per token id, "tokenizer": its tokenizer.json}. sentence-transformers saves
    embedding.weight; model2vec (model2vec/persistence/persistence.py save_pretrained) "embeddings", and after
    vocabulary quantization a "mapping" (token id -> row) and per-token "weights", folded into one row per token id as
    StaticEmbedding._fold_model2vec_weights does (embeddings[mapping[id]] * weights[id])."""
    files = as_files(where)
    weights = next((p for name in WEIGHT_FILES if (p := files.file(_inside(folder, name), optional=True))), None)
    if weights is None:
        raise CheckpointError(f"{folder or '.'}: StaticEmbedding module without {' or '.join(WEIGHT_FILES)}")
    tensors = read_state_dict(weights)
    shapes = {k: tuple(v.shape) for k, v in tensors.items()}
    if set(tensors) == {"embedding.weight"}:
        table = tensors["embedding.weight"]
    elif "embeddings" in tensors and set(tensors) <= {"embeddings", "mapping", "weights"}:
        table, mapping, scale = tensors["embeddings"], tensors.get("mapping"), tensors.get("weights")
        if mapping is not None:
            table = table[mapping.long()]
        if scale is not None:
            table = table.to(torch.promote_types(table.dtype, torch.float32))
            table = (table * scale[:, None]).to(table.dtype)
    else:
        raise CheckpointError(f"{weights}: a StaticEmbedding holds embedding.weight (sentence-transformers) or "
                              f"embeddings (+ mapping, weights: model2vec), found {shapes}")
    if table.dim() != 2:
        raise CheckpointError(f"{weights}: the embeddings must be (vocabulary, dimension), found {shapes}")
    return {"weight": table.contiguous(), "tokenizer": files.file(_inside(folder, "tokenizer.json"))}


def read_model2vec_config(where: str | Path | Files) -> dict[str, Any] | None:
    """A model2vec directory's config.json, None for any other config.json or none: model_type "model2vec" and
    architectures ["StaticModel"] (model2vec's distill writes them), or no model_type (which every transformers
    config.json has) and a "normalize" (model2vec's StaticModel.save_pretrained writes max_length, normalize,
    embedding_dtype). model2vec writes modules.json beside it (StaticEmbedding at ".", then Normalize where normalize
    is true: model2vec/persistence/persistence.py save_pretrained); one without is read as if it had that
    modules.json."""
    path = as_files(where).file("config.json", optional=True)
    if path is None:
        return None
    config = read_json(path)
    if (config.get("model_type") == "model2vec" or "StaticModel" in (config.get("architectures") or ())
            or ("model_type" not in config and "normalize" in config)):
        return config
    return None


def read_sentence_config(where: str | Path | Files) -> dict[str, Any]:
    """sentence_bert_config.json (max_seq_length, do_lower_case), {} when absent."""
    path = as_files(where).file("sentence_bert_config.json", optional=True)
    return read_json(path) if path is not None else {}


def crossencoder_activation(where: str | Path | Files) -> str | None:
    """The activation a sentence-transformers CrossEncoder applies to the logits, as the class path
    it saved, or None when the model records none (CrossEncoder's own lookup order)."""
    files = as_files(where)
    st_config = files.file("config_sentence_transformers.json", optional=True)
    if st_config is not None:
        path = read_json(st_config).get("activation_fn")
        if path:
            return str(path)
    hf_config = files.file("config.json", optional=True)
    if hf_config is not None:
        config = read_json(hf_config)
        nested = config.get("sentence_transformers")
        if isinstance(nested, dict) and nested.get("activation_fn"):
            return str(nested["activation_fn"])
        if config.get("sbert_ce_default_activation_function"):
            return str(config["sbert_ce_default_activation_function"])
    return None


# What a converted directory carries of a sentence-transformers model: its transformer module (any of these types)
# is the converted weights at the root, with its sentence_bert_config.json beside them; every other module's folder is
# copied as sentence-transformers saved it, whatever its type (a Dense's weights cast by convert --dtype); a folder the
# model lacks stays absent (all-MiniLM-L6-v2's 2_Normalize: Normalize saved nothing before v6).
TRANSFORMER_MODULES = ("Transformer", "MLMTransformer")
# A hub snapshot's folders cannot be listed: what is carried of a module from the hub is what sentence-transformers'
# own `save` writes for its type (base/modules/dense.py Dense.save: save_config and save_torch_weights,
# model.safetensors or pytorch_model.bin; sentence_transformer/modules/pooling.py Pooling.save,
# sentence_transformer/modules/layer_norm.py LayerNorm.save (the same two), base/modules/normalize.py Normalize.save
# (none before v6), sparse_encoder/modules/splade_pooling.py
# SpladePooling.save and multi_vector_encoder/modules/multi_vector_mask.py MultiVectorMask.save: save_config), each
# where the repo has it; a module of another type from the hub is refused by name.
SAVED_FILES = {"Dense": ("config.json", *WEIGHT_FILES), "LayerNorm": ("config.json", *WEIGHT_FILES),
               "Pooling": ("config.json",), "Normalize": ("config.json",),
               "SpladePooling": ("config.json",), "MultiVectorMask": ("config.json",)}


@dataclass
class ModuleFiles:
    """A sentence-transformers model's files besides its transformer's weights and tokenizer, found before anything
    is written (read_module_files) and written beside converted weights (write_module_files)."""

    entries: list[dict[str, Any]]  # modules.json's, the transformer's path "" (the converted weights are the root)
    files: dict[str, Path]  # each file carried, by its name in the model ("1_Pooling/config.json") -> where it is
    dense: tuple[str, ...]  # of those, each Dense's weights (the file Dense.load reads), cast by convert --dtype


def read_module_files(where: str | Path | Files) -> ModuleFiles | None:
    """The module files of a sentence-transformers model (None without modules.json): modules.json,
    sentence_bert_config.json (from the transformer module's folder), config_sentence_transformers.json, and every
    file of each other module's folder (from the hub: SAVED_FILES). A transformer module (TRANSFORMER_MODULES) that is
    not the first or not the only one, a first module that is not one, a module at the model's root besides it (its
    files would be the converted ones) or outside the model, and a module of a type SAVED_FILES lacks from the hub are
    each a CheckpointError naming its type and path."""
    files = as_files(where)
    path = files.file("modules.json", optional=True)
    if path is None:
        return None
    entries, carried, dense = [], {}, []
    for i, entry in enumerate(read_json(path, expect=list)):
        if not isinstance(entry, dict):
            raise CheckpointError(f"{path}: module {i} is {entry!r}, not an object with a type and a path")
        kind, folder = str(entry.get("type", "")).rsplit(".", 1)[-1], _folder(path, i, entry)
        named = f"{path}: module {i} ({entry.get('type')!r} at {folder or '.'!r})"
        if (kind in TRANSFORMER_MODULES) != (i == 0):
            raise CheckpointError(f"{named}: the first module must be the transformer "
                                  f"({', '.join(TRANSFORMER_MODULES)}), and the only one: the converted weights")
        if i == 0:
            entries.append({**entry, "path": ""})
            carried["sentence_bert_config.json"] = files.file(_inside(folder, "sentence_bert_config.json"),
                                                              optional=True)
            continue
        if not folder:
            raise CheckpointError(f"{named}: a module at the model's root, where the converted weights go; "
                                  f"sentence-transformers saves each in its own folder")
        names = files.files_in(folder)
        if names is None and kind not in SAVED_FILES:
            raise CheckpointError(f"{named}: from the hub, minialign carries only what sentence-transformers saves of "
                                  f"{', '.join(SAVED_FILES)} (a repo's folders cannot be listed); download the repo "
                                  f"and convert the directory")
        if names is None:
            names = [_inside(folder, name) for name in SAVED_FILES[kind]]
        carried.update((name, files.file(name, optional=True)) for name in names)
        if kind == "Dense":
            dense += [name for name in (_inside(folder, name) for name in WEIGHT_FILES) if carried.get(name)][:1]
        entries.append(entry)
    carried["config_sentence_transformers.json"] = files.file("config_sentence_transformers.json", optional=True)
    return ModuleFiles(entries, {name: found for name, found in carried.items() if found is not None}, tuple(dense))


def write_module_files(modules: ModuleFiles, directory: str | Path, *, dtype: torch.dtype | None = None) -> None:
    """Write a model's module files (read_module_files) into `directory`, beside its converted weights, each as it
    is; with a dtype, a Dense's weights cast to it (floating ones), as model.safetensors."""
    directory = Path(directory)
    for name, found in modules.files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        if dtype is not None and name in modules.dense:
            tensors = {k: v.to(dtype) if v.is_floating_point() else v for k, v in read_state_dict(found).items()}
            write_safetensors((directory / name).with_name("model.safetensors"), tensors, metadata={"format": "pt"})
        elif found.resolve() != (directory / name).resolve():  # not converted in place
            shutil.copyfile(found, directory / name)
    write_json(directory / "modules.json", modules.entries)


def _inside(folder: str, name: str) -> str:
    """A module's file, named relative to the model ("1_Pooling/config.json")."""
    return f"{folder}/{name}" if folder else name
