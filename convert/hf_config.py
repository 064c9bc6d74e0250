"""HF `config.json` (BertConfig / RobertaConfig) <-> minialign config fields, as plain dicts."""

from __future__ import annotations

from typing import Any

# HF field -> minialign field, the same for both families (configuration_bert.py, configuration_roberta.py).
_FIELDS = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads",
    "intermediate_size": "intermediate_size",
    "max_position_embeddings": "max_position_embeddings",
    "type_vocab_size": "type_vocab_size",
    "layer_norm_eps": "layer_norm_eps",
    "pad_token_id": "pad_token_id",
    "hidden_dropout_prob": "hidden_dropout",
    "attention_probs_dropout_prob": "attention_dropout",
    "hidden_act": "activation",
    "initializer_range": "initializer_range",
    "tie_word_embeddings": "tie_word_embeddings",
}
# HF defaults for fields an old config.json may leave out (BertConfig.__init__ / RobertaConfig).
_DEFAULTS = {
    "bert": {"pad_token_id": 0, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu",
             "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02,
             "max_position_embeddings": 512, "tie_word_embeddings": True},
    "roberta": {"pad_token_id": 1, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu",
                "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02,
                "max_position_embeddings": 512, "tie_word_embeddings": True},
}
_REQUIRED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
_ARCHITECTURES = {"bert": "BertModel", "roberta": "RobertaModel"}
_CLASSIFIERS = {"bert": "BertForSequenceClassification", "roberta": "RobertaForSequenceClassification"}


def config_from_hf(hf: dict[str, Any], *, source: str = "config.json") -> dict[str, Any]:
    """Map an HF config dict to minialign field names. Dispatches on `model_type`, never on a name."""
    arch = hf.get("model_type")
    if arch not in _DEFAULTS:
        raise ValueError(f"{source}: model_type {arch!r} is not supported (expected 'bert' or 'roberta')")
    missing = [k for k in _REQUIRED if k not in hf]
    if missing:
        raise ValueError(f"{source}: missing field(s) {missing}")
    position_type = hf.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ValueError(f"{source}: position_embedding_type {position_type!r} is not supported (only 'absolute')")
    if hf.get("is_decoder") or hf.get("add_cross_attention"):
        raise ValueError(f"{source}: decoder / cross-attention configs are not supported (minialign is an encoder)")
    merged = {**_DEFAULTS[arch], **{k: v for k, v in hf.items() if v is not None}}
    out = {dst: merged[src] for src, dst in _FIELDS.items() if src in merged}
    out["arch"] = arch
    out["labels"] = labels_from_hf(hf, source=source)
    for field in ("problem_type", "classifier_dropout"):
        if hf.get(field) is not None:
            out[field] = hf[field]
    return out


def labels_from_hf(hf: dict[str, Any], *, source: str = "config.json") -> list[str]:
    """Label names by index from `id2label` (JSON keys are strings) or `num_labels` (LABEL_i, as
    transformers names them); none when the config has neither."""
    id2label = hf.get("id2label")
    if id2label:
        try:
            by_index = {int(k): str(v) for k, v in id2label.items()}
        except (AttributeError, TypeError, ValueError):
            raise ValueError(f"{source}: id2label must map label indices to names, got {id2label!r}") from None
        if sorted(by_index) != list(range(len(by_index))):
            raise ValueError(f"{source}: id2label indices must be 0..{len(by_index) - 1}, got {sorted(by_index)}")
        return [by_index[i] for i in range(len(by_index))]
    n = hf.get("num_labels")
    return [f"LABEL_{i}" for i in range(n)] if isinstance(n, int) and n > 0 else []


def config_to_hf(fields: dict[str, Any], *, classifier: bool = False) -> dict[str, Any]:
    """Map minialign config fields back to an HF config dict that transformers' AutoConfig reads;
    `classifier`: the weights are a *ForSequenceClassification's."""
    hf = {src: fields[dst] for src, dst in _FIELDS.items() if dst in fields}
    arch = fields["arch"]
    if fields.get("labels"):
        hf["id2label"] = {str(i): label for i, label in enumerate(fields["labels"])}
        hf["label2id"] = {label: i for i, label in enumerate(fields["labels"])}
    for field in ("problem_type", "classifier_dropout"):
        if fields.get(field) is not None:
            hf[field] = fields[field]
    hf.update(model_type=arch, architectures=[(_CLASSIFIERS if classifier else _ARCHITECTURES)[arch]],
              position_embedding_type="absolute")
    if arch == "roberta":  # RoBERTa's special ids (roberta-base config.json)
        hf.update(bos_token_id=0, eos_token_id=2)
    return hf
