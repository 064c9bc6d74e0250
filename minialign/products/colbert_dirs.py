"""What a multi-vector model's directory says, read for MultiVectorEncoder.from_pretrained (multivector.py).

As sentence-transformers 6.2 reads them (sentence_transformers/multi_vector_encoder/model.py, MultiVectorEncoder
_get_model_type, _parse_model_config, _apply_legacy_fixups, _maybe_load_stanford_metadata; the foreign files
themselves are convert/'s):
  - sentence-transformers' own saves (config_sentence_transformers.json model_type "MultiVectorEncoder");
  - PyLate saves (model_type "ColBERT"): prefixes, expansion and the inline mask / normalisation made modules;
  - Stanford-NLP ColBERT saves (config.json architectures ["HF_ColBERT"], no modules.json).
A SentenceTransformer directory (pooled, one vector per text) or a plain transformers one is refused, naming why.
"""

from __future__ import annotations

from tokenizers import AddedToken

from minialign import convert
from minialign.convert import CheckpointError
from minialign.products.embeddings import Dense
from minialign.products.maxsim import SIMILARITIES
from minialign.text.tokenizer import Tokenizer


def read_directory(source) -> dict:
    """The runner's parts from a resolved source: the model's folder ("model"), the modules after the Transformer
    ("dense", "mask", "normalize" and the mask's config), the Transformer's "settings", the "prompts", the legacy
    "prefixes", the similarity, and "stanford": whether the projection is the linear.weight saved beside the
    encoder's weights (a Stanford-NLP save, whose "dense" the loader fills from it)."""
    config = convert.read_model_config(source)
    model_type = config.get("model_type")
    if model_type not in (None, "MultiVectorEncoder", "ColBERT"):
        raise CheckpointError(f"{source}: a {model_type} (config_sentence_transformers.json model_type), not a "
                              f"multi-vector model" + (": load it with SentenceEncoder" if model_type ==
                                                       "SentenceTransformer" else ""))
    modules = convert.read_modules(source, supported=(*convert.MULTIVECTOR_MODULES, "Pooling"))
    if modules is not None:
        return {**_sentence_transformers(source, config, modules), "stanford": False}
    hf_config = convert.read_json(source.file("config.json"))
    if "HF_ColBERT" not in (hf_config.get("architectures") or []):
        raise CheckpointError(f"{source}: no modules.json, so no projection to token vectors (a plain "
                              f"transformers model; sentence-transformers would add a randomly initialised "
                              f"one, which needs training)")
    return {**_stanford(source), "stanford": True}


def _sentence_transformers(source, config: dict, modules: list[tuple[str, str]]) -> dict:
    """What a sentence-transformers or PyLate directory says: the model's folder, the modules after it, the
    Transformer's settings, the prompts, the legacy prefixes, the similarity."""
    if any(kind == "Pooling" for kind, _ in modules):
        raise CheckpointError(f"{source}: a sentence-transformers model with a Pooling module gives one vector per "
                              f"text: load it with SentenceEncoder (sentence-transformers' MultiVectorEncoder would "
                              f"drop the pooling and score untrained token vectors)")
    if not modules or modules[0][0] != "Transformer" or any(k == "Transformer" for k, _ in modules[1:]):
        raise CheckpointError(f"{source}/modules.json: the first module, and only it, must be a Transformer")
    legacy = convert.pylate_settings(config)
    dense, mask, normalize, mask_config = [], False, False, {}
    for kind, folder in modules[1:]:
        if kind == "Dense":
            dense.append(_read_dense(source, folder))
        elif kind == "MultiVectorMask":
            mask, mask_config = True, convert.read_multivector_mask(source, folder)
        else:
            normalize = True
    if legacy["pylate_v3"]:  # _apply_legacy_fixups: PyLate <= 3 masked and normalised inline
        words = legacy["skiplist_words"]
        mask, normalize = True, True
        mask_config = {"skiplist_words": convert.PUNCTUATION if words is None else words}
    inner = source.subfolder(modules[0][1])
    prompts, default_prompt_name = convert.read_prompts(source)
    similarity = config.get("similarity_fn_name")
    return {"model": inner if inner.file("config.json", optional=True) else source, "dense": dense, "mask": mask,
            "normalize": normalize, **mask_config, "prefixes": legacy["prefixes"],
            "settings": {**legacy["transformer"], **convert.read_sentence_config(inner)},  # saved values win
            "prompts": {**prompts, **legacy["prompts"]}, "default_prompt_name": default_prompt_name,
            "similarity_fn_name": similarity if similarity in SIMILARITIES else None}


def _stanford(source) -> dict:
    """What a Stanford-NLP ColBERT directory says (config.json architectures ["HF_ColBERT"];
    MultiVectorEncoder._maybe_load_stanford_metadata, _load_default_modules): artifact.metadata's markers
    (query_token_id / doc_token_id, default [unused0] / [unused1]) as prompts with a space after, registered as
    special tokens; queries always expanded, "fixed" to query_maxlen (32) and attended per attend_to_mask_tokens;
    doc_maxlen as document_length; a punctuation skiplist unless mask_punctuation is false; the projection
    (linear.weight beside the encoder's weights, no bias), the mask and the normalisation."""
    path = source.file("artifact.metadata", optional=True)
    metadata = convert.read_json(path) if path is not None else {}
    prefixes = {"query": (metadata.get("query_token_id") or "[unused0]") + " ",
                "document": (metadata.get("doc_token_id") or "[unused1]") + " "}
    settings = {"query_expansion": {"strategy": "fixed", "attend": bool(metadata.get("attend_to_mask_tokens")),
                                    "length": metadata.get("query_maxlen") or 32}}
    if metadata.get("doc_maxlen") is not None:
        settings["document_length"] = metadata["doc_maxlen"]
    skiplist = convert.PUNCTUATION if metadata.get("mask_punctuation", True) else []
    return {"model": source, "dense": [], "mask": True, "normalize": True, "skiplist_words": skiplist,
            "prefixes": prefixes, "settings": settings, "prompts": dict(prefixes)}


def _read_dense(source, folder: str) -> Dense:
    """A Dense module on token vectors: sentence-transformers' own (module_input_name "token_embeddings") or
    PyLate's (no module_input_name: token vectors, as MultiVectorEncoder._get_module_init_defaults reads it)."""
    config = convert.read_json(source.file(f"{folder}/config.json" if folder else "config.json"))
    if config.get("module_input_name", "token_embeddings") != "token_embeddings":
        raise CheckpointError(f"{source}/{folder}: a Dense on {config['module_input_name']!r}, not on token vectors")
    if config.get("use_residual"):
        raise CheckpointError(f"{source}/{folder}: a Dense with use_residual (PyLate's), which sentence-transformers "
                              f"does not run either")
    return Dense(**convert.read_dense(source, folder))


def register_prefix_tokens(tokenizer: Tokenizer, prefixes: dict[str, str]) -> None:
    """A legacy save's [Q] / [D] (or [unused0] / [unused1]) made special tokens, so text put before a query is
    read as that one token, as the model was trained (MultiVectorEncoder._register_prefix_tokens): only a
    prefix the vocabulary has (the whole prefix, or its first word) and that is not already read as one token."""
    backend = tokenizer.backend
    for value in prefixes.values():
        if not value or not value.split():
            continue
        for prefix in (value, value.split(None, 1)[0]):
            if backend.token_to_id(prefix) is None:
                continue
            if backend.encode(prefix, add_special_tokens=False).tokens != [prefix]:
                backend.add_special_tokens([AddedToken(prefix, normalized=False, special=True)])
            break
