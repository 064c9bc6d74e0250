"""Weight-name tables: Hugging Face encoder families and AlignScore <-> minialign.

One declarative table per family maps HF names to minialign names. `{}` stands for the
layer index; `None` means "dropped on purpose". The reverse direction is derived from the
same table (`inverse`), never typed twice. A family's row in NAMES adds where its backbone and
its MLM head sit inside transformers' *ForMaskedLM / *ForSequenceClassification; a new family is
one table (built from the nearest family's, overriding what differs) and one row.

minialign's names (the AlignModel namespace; an Encoder holds the `encoder.` part):

    encoder.embeddings.{word,position,token_type}.weight, encoder.embeddings.norm.*
    encoder.layers.{i}.attention.{query,key,value,output}.*, encoder.layers.{i}.attention_norm.*
    encoder.layers.{i}.ffn.{up,down}.*, encoder.layers.{i}.ffn_norm.*
    encoder.pooler.dense.*, encoder.final_norm.* (a pre-LN family's: ModernBERT)
    encoder.layers.{i}.attention.qkv.* (ModernBERT's fused Wqkv, kept fused)
    mlm_head.{dense,norm}.*, mlm_head.bias, mlm_head.decoder.weight (only when untied)
    bin_layer.*, tri_layer.*, reg_layer.*
    classifier.out_proj.*, classifier.dense.* (RoBERTa only), classifier.norm.* (ModernBERT):
    *ForSequenceClassification's head
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from .errors import CheckpointError

# The backbone is named alike in BertModel and RobertaModel (modeling_bert.py / modeling_roberta.py).
_BACKBONE: dict[str, str | None] = {
    "embeddings.word_embeddings.weight": "encoder.embeddings.word.weight",
    "embeddings.position_embeddings.weight": "encoder.embeddings.position.weight",
    "embeddings.token_type_embeddings.weight": "encoder.embeddings.token_type.weight",
    "embeddings.LayerNorm.weight": "encoder.embeddings.norm.weight",
    "embeddings.LayerNorm.bias": "encoder.embeddings.norm.bias",
    "embeddings.position_ids": None,  # stale buffer saved by old transformers versions
    "embeddings.token_type_ids": None,  # same, for token types
    "encoder.layer.{}.attention.self.query.weight": "encoder.layers.{}.attention.query.weight",
    "encoder.layer.{}.attention.self.query.bias": "encoder.layers.{}.attention.query.bias",
    "encoder.layer.{}.attention.self.key.weight": "encoder.layers.{}.attention.key.weight",
    "encoder.layer.{}.attention.self.key.bias": "encoder.layers.{}.attention.key.bias",
    "encoder.layer.{}.attention.self.value.weight": "encoder.layers.{}.attention.value.weight",
    "encoder.layer.{}.attention.self.value.bias": "encoder.layers.{}.attention.value.bias",
    "encoder.layer.{}.attention.output.dense.weight": "encoder.layers.{}.attention.output.weight",
    "encoder.layer.{}.attention.output.dense.bias": "encoder.layers.{}.attention.output.bias",
    "encoder.layer.{}.attention.output.LayerNorm.weight": "encoder.layers.{}.attention_norm.weight",
    "encoder.layer.{}.attention.output.LayerNorm.bias": "encoder.layers.{}.attention_norm.bias",
    "encoder.layer.{}.intermediate.dense.weight": "encoder.layers.{}.ffn.up.weight",
    "encoder.layer.{}.intermediate.dense.bias": "encoder.layers.{}.ffn.up.bias",
    "encoder.layer.{}.output.dense.weight": "encoder.layers.{}.ffn.down.weight",
    "encoder.layer.{}.output.dense.bias": "encoder.layers.{}.ffn.down.bias",
    "encoder.layer.{}.output.LayerNorm.weight": "encoder.layers.{}.ffn_norm.weight",
    "encoder.layer.{}.output.LayerNorm.bias": "encoder.layers.{}.ffn_norm.bias",
    "pooler.dense.weight": "encoder.pooler.dense.weight",
    "pooler.dense.bias": "encoder.pooler.dense.bias",
}

# AlignScore's heads (AlignScore model.py: bin_layer, tri_layer, reg_layer) keep their names.
_ALIGN_HEADS: dict[str, str | None] = {
    f"{head}.{p}": f"{head}.{p}" for head in ("bin_layer", "tri_layer", "reg_layer") for p in ("weight", "bias")
}

# A classification head of dense -> activation -> out_proj on the first token (RobertaClassificationHead,
# ElectraClassificationHead): the same names on both sides.
_DENSE_CLASSIFICATION_HEAD: dict[str, str | None] = {
    f"classifier.{m}.{p}": f"classifier.{m}.{p}" for m in ("dense", "out_proj") for p in ("weight", "bias")
}


def _layers(prefix: str, parts: dict[str, str]) -> dict[str, str | None]:
    """A family's per-layer names: `{prefix}.{i}.{hf part}.{weight,bias}` -> `encoder.layers.{i}.{our part}.*`."""
    return {f"{prefix}.{{}}.{src}.{p}": f"encoder.layers.{{}}.{dst}.{p}" for src, dst in parts.items()
            for p in ("weight", "bias")}


# BertForPreTraining: cls.predictions (BertLMPredictionHead) and cls.seq_relationship (NSP).
BERT: dict[str, str | None] = {
    **_BACKBONE,
    "cls.predictions.transform.dense.weight": "mlm_head.dense.weight",
    "cls.predictions.transform.dense.bias": "mlm_head.dense.bias",
    "cls.predictions.transform.LayerNorm.weight": "mlm_head.norm.weight",
    "cls.predictions.transform.LayerNorm.bias": "mlm_head.norm.bias",
    "cls.predictions.decoder.weight": "mlm_head.decoder.weight",
    "cls.predictions.bias": "mlm_head.bias",
    "cls.predictions.decoder.bias": None,  # the same tensor as cls.predictions.bias
    "cls.seq_relationship.weight": None,  # BERT's next-sentence head: no minialign model has it
    "cls.seq_relationship.bias": None,
    **_ALIGN_HEADS,
    # BertForSequenceClassification: dropout -> classifier (one Linear) on the pooled output.
    "classifier.weight": "classifier.out_proj.weight",
    "classifier.bias": "classifier.out_proj.bias",
}

# RobertaForMaskedLM: lm_head (RobertaLMHead).
ROBERTA: dict[str, str | None] = {
    **_BACKBONE,
    "lm_head.dense.weight": "mlm_head.dense.weight",
    "lm_head.dense.bias": "mlm_head.dense.bias",
    "lm_head.layer_norm.weight": "mlm_head.norm.weight",
    "lm_head.layer_norm.bias": "mlm_head.norm.bias",
    "lm_head.decoder.weight": "mlm_head.decoder.weight",
    "lm_head.bias": "mlm_head.bias",
    "lm_head.decoder.bias": None,  # the same tensor as lm_head.bias
    **_ALIGN_HEADS,
    # RobertaForSequenceClassification: RobertaClassificationHead on the first token (no pooler).
    **_DENSE_CLASSIFICATION_HEAD,
}


# DistilBertModel (modeling_distilbert.py): its own names under `transformer.`, no token types, no pooler;
# DistilBertForMaskedLM's head is vocab_transform -> activation -> vocab_layer_norm -> vocab_projector.
_DISTILBERT_LAYER = {
    "attention.q_lin": "attention.query", "attention.k_lin": "attention.key", "attention.v_lin": "attention.value",
    "attention.out_lin": "attention.output", "sa_layer_norm": "attention_norm",
    "ffn.lin1": "ffn.up", "ffn.lin2": "ffn.down", "output_layer_norm": "ffn_norm",
}
DISTILBERT: dict[str, str | None] = {
    "embeddings.word_embeddings.weight": "encoder.embeddings.word.weight",
    "embeddings.position_embeddings.weight": "encoder.embeddings.position.weight",  # learned or sinusoidal
    "embeddings.LayerNorm.weight": "encoder.embeddings.norm.weight",
    "embeddings.LayerNorm.bias": "encoder.embeddings.norm.bias",
    "embeddings.position_ids": None,  # stale buffer saved by old transformers versions
    **_layers("transformer.layer", _DISTILBERT_LAYER),
    "vocab_transform.weight": "mlm_head.dense.weight",
    "vocab_transform.bias": "mlm_head.dense.bias",
    "vocab_layer_norm.weight": "mlm_head.norm.weight",
    "vocab_layer_norm.bias": "mlm_head.norm.bias",
    "vocab_projector.weight": "mlm_head.decoder.weight",
    "vocab_projector.bias": "mlm_head.bias",
    **_ALIGN_HEADS,
    # DistilBertForSequenceClassification: classifier(dropout(relu(pre_classifier(h_0)))), no pooler.
    "pre_classifier.weight": "classifier.dense.weight",
    "pre_classifier.bias": "classifier.dense.bias",
    "classifier.weight": "classifier.out_proj.weight",
    "classifier.bias": "classifier.out_proj.bias",
}

# ElectraModel (modeling_electra.py): BERT's backbone without a pooler, plus embeddings_project (the
# embeddings' width -> hidden_size, present only when they differ). The pretraining heads (the
# discriminator's replaced-token head, the generator's MLM head of embedding_size) have no minialign model.
ELECTRA: dict[str, str | None] = {
    **{k: v for k, v in _BACKBONE.items() if not k.startswith("pooler.")},
    "embeddings_project.weight": "encoder.embeddings.project.weight",
    "embeddings_project.bias": "encoder.embeddings.project.bias",
    **{f"discriminator_predictions.{m}.{p}": None for m in ("dense", "dense_prediction") for p in ("weight", "bias")},
    **{f"generator_predictions.{m}.{p}": None for m in ("dense", "LayerNorm") for p in ("weight", "bias")},
    "generator_lm_head.weight": None,
    "generator_lm_head.bias": None,
    # ElectraForSequenceClassification: ElectraClassificationHead on the first token (no pooler).
    **_DENSE_CLASSIFICATION_HEAD,
}


# MPNetModel (modeling_mpnet.py): BERT's layout under its own attention names (attention.attn.{q,k,v,o},
# attention.LayerNorm), no token types, the relative-position bias table shared by every layer; the MLM
# head (lm_head) and the classification head are RoBERTa's, under the same names.
_MPNET_LAYER = {
    "attention.attn.q": "attention.query", "attention.attn.k": "attention.key", "attention.attn.v": "attention.value",
    "attention.attn.o": "attention.output", "attention.LayerNorm": "attention_norm",
    "intermediate.dense": "ffn.up", "output.dense": "ffn.down", "output.LayerNorm": "ffn_norm",
}
MPNET: dict[str, str | None] = {
    **{k: v for k, v in ROBERTA.items() if not k.startswith("encoder.layer.") and "token_type" not in k},
    **_layers("encoder.layer", _MPNET_LAYER),
    "encoder.relative_attention_bias.weight": "encoder.relative_position_bias.table.weight",
}

# ModernBertModel (modeling_modernbert.py): its own names, no positions or token types; Wqkv is one fused
# projection (q, k, v stacked on the output axis, as our attention.qkv: that layer keeps the fused name),
# Wi the GeGLU's fused input and gate; attn_norm is absent from layer 0 (an Identity there); final_norm after
# the stack. ModernBertForSequenceClassification's head (dense -> activation -> norm) and classifier keep
# their names under `classifier.`; ModernBertForMaskedLM shares that head (transformers loads an MLM checkpoint's
# head.* into the classifier's, as here) and adds the decoder, which no minialign model has.
_MODERNBERT_LAYER = {
    "attn_norm": "attention_norm", "attn.Wqkv": "attention.qkv", "attn.Wo": "attention.output",
    "mlp_norm": "ffn_norm", "mlp.Wi": "ffn.up", "mlp.Wo": "ffn.down",
}
MODERNBERT: dict[str, str | None] = {
    "embeddings.tok_embeddings.weight": "encoder.embeddings.word.weight",
    "embeddings.norm.weight": "encoder.embeddings.norm.weight",
    "embeddings.norm.bias": "encoder.embeddings.norm.bias",
    **_layers("layers", _MODERNBERT_LAYER),
    "final_norm.weight": "encoder.final_norm.weight",
    "final_norm.bias": "encoder.final_norm.bias",
    **{f"head.{m}.{p}": f"classifier.{m}.{p}" for m in ("dense", "norm") for p in ("weight", "bias")},
    "classifier.weight": "classifier.out_proj.weight",
    "classifier.bias": "classifier.out_proj.bias",
    "decoder.weight": None,  # ModernBertForMaskedLM's decoder (tied to tok_embeddings)
    "decoder.bias": None,
}


# DebertaV2Model (modeling_deberta_v2.py; v2 and v3): BERT's layout under its own attention names
# (attention.self.{query,key,value}_proj, the position projections pos_key_proj / pos_query_proj when
# share_att_key is off), embed_proj (no bias) when embedding_size differs from hidden_size, the relative
# embeddings and their LayerNorm shared by every layer, v2's convolution after the first layer, no pooler.
# DebertaV2ForSequenceClassification: ContextPooler (`pooler.dense`) and `classifier` beside the backbone.
_DEBERTA_V2_LAYER = {
    "attention.self.query_proj": "attention.query", "attention.self.key_proj": "attention.key",
    "attention.self.value_proj": "attention.value", "attention.self.pos_key_proj": "attention.pos_key",
    "attention.self.pos_query_proj": "attention.pos_query", "attention.output.dense": "attention.output",
    "attention.output.LayerNorm": "attention_norm",
    "intermediate.dense": "ffn.up", "output.dense": "ffn.down", "output.LayerNorm": "ffn_norm",
}
DEBERTA_V2: dict[str, str | None] = {
    **{k: v for k, v in _BACKBONE.items() if k.startswith("embeddings.")},
    "embeddings.embed_proj.weight": "encoder.embeddings.project.weight",
    **_layers("encoder.layer", _DEBERTA_V2_LAYER),
    "encoder.rel_embeddings.weight": "encoder.relative.table.weight",
    "encoder.LayerNorm.weight": "encoder.relative.norm.weight",
    "encoder.LayerNorm.bias": "encoder.relative.norm.bias",
    "encoder.conv.conv.weight": "encoder.layers.0.conv.conv.weight",
    "encoder.conv.conv.bias": "encoder.layers.0.conv.conv.bias",
    "encoder.conv.LayerNorm.weight": "encoder.layers.0.conv.norm.weight",
    "encoder.conv.LayerNorm.bias": "encoder.layers.0.conv.norm.bias",
    "pooler.dense.weight": "classifier.dense.weight",
    "pooler.dense.bias": "classifier.dense.bias",
    "classifier.weight": "classifier.out_proj.weight",
    "classifier.bias": "classifier.out_proj.bias",
}


@dataclass(frozen=True)
class Names:
    """One family's names: its table, the prefix of the backbone inside HF's *ForMaskedLM /
    *ForPreTraining / *ForSequenceClassification, and where its MLM head lives in HF names
    (AlignScore stores that head as `mlm_head.` + the same suffix)."""

    table: dict[str, str | None]
    model_prefix: str
    mlm_prefix: str
    classifier_prefixes: tuple[str, ...] = ("classifier.",)  # *ForSequenceClassification's head, beside the backbone


# Config.arch -> names (the same families as hf_config.FAMILIES; tests/test_convert.py checks it).
NAMES: dict[str, Names] = {
    "bert": Names(BERT, model_prefix="bert.", mlm_prefix="cls.predictions."),
    "roberta": Names(ROBERTA, model_prefix="roberta.", mlm_prefix="lm_head."),
    # XLMRoberta* / Camembert*: RoBERTa's modules and names (base_model_prefix "roberta")
    "xlm-roberta": Names(ROBERTA, model_prefix="roberta.", mlm_prefix="lm_head."),
    "camembert": Names(ROBERTA, model_prefix="roberta.", mlm_prefix="lm_head."),
    "electra": Names(ELECTRA, model_prefix="electra.", mlm_prefix="generator_predictions."),
    "distilbert": Names(DISTILBERT, model_prefix="distilbert.", mlm_prefix="vocab_",
                        classifier_prefixes=("pre_classifier.", "classifier.")),
    "mpnet": Names(MPNET, model_prefix="mpnet.", mlm_prefix="lm_head."),
    "deberta-v2": Names(DEBERTA_V2, model_prefix="deberta.", mlm_prefix="lm_predictions.",
                        classifier_prefixes=("pooler.", "classifier.")),
    "modernbert": Names(MODERNBERT, model_prefix="model.", mlm_prefix="decoder.",
                        classifier_prefixes=("head.", "classifier.")),
}
# Views of NAMES by arch
TABLES = {arch: names.table for arch, names in NAMES.items()}
MODEL_PREFIX = {arch: names.model_prefix for arch, names in NAMES.items()}
MLM_PREFIX = {arch: names.mlm_prefix for arch, names in NAMES.items()}
CLASSIFIER_PREFIX = "classifier."
ALIGNSCORE_BACKBONE_PREFIX = "base_model."
ALIGNSCORE_MLM_PREFIX = "mlm_head."


def _compile(table: dict[str, str | None]) -> list[tuple[re.Pattern, str | None]]:
    return [(re.compile("^" + re.escape(src).replace(r"\{\}", r"(\d+)") + "$"), dst) for src, dst in table.items()]


def _lookup(name: str, compiled: list[tuple[re.Pattern, str | None]]) -> tuple[bool, str | None]:
    for pattern, dst in compiled:
        match = pattern.match(name)
        if match:
            return True, (dst.replace("{}", match.group(1)) if dst and match.groups() else dst)
    return False, None


def _unknown_names(names, table: dict[str, str | None]) -> list[str]:
    compiled = _compile(table)
    return [name for name in names if not _lookup(name, compiled)[0]]


def _fits(names: list[str], arch: str) -> list[str]:
    """The families other than `arch` whose names (their backbone prefix taken off, as hf_to_minialign
    does) cover every one of `names`; families sharing a table (RoBERTa's) are listed together."""
    fits = []
    for other, family in NAMES.items():
        if other != arch:
            bare = [n[len(family.model_prefix):] if n.startswith(family.model_prefix) else n for n in names]
            if not _unknown_names(bare, family.table):
                fits.append(other)
    return fits


def _unknown_error(source: str, unknown: list[str], arch: str | None, names: list[str], shown: int = 5) -> str:
    """The first `shown` names that do not fit, how many more, and which family's names they fit."""
    unknown = sorted(unknown)
    listed = "; ".join(unknown[:shown]) + (f"; ... and {len(unknown) - shown} more" if len(unknown) > shown else "")
    if arch is None:
        return f"{source}: {len(unknown)} unknown weight name(s): {listed}"
    text = (f"{source}: {len(unknown)} weight name(s) do not fit the family its config names, {arch!r}: {listed}")
    fits = _fits(names, arch)
    if fits:
        text += (f". Every weight name fits {' / '.join(repr(f) for f in fits)}: the weights look like that "
                 f"family's, so the config (config.json's model_type, or backbone=) likely belongs to another model")
    return text


def _rename(
    state_dict: dict[str, torch.Tensor], table: dict[str, str | None], source: str, arch: str | None = None,
    original: list[str] | None = None,
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """`original`: the checkpoint's own names (before a prefix was taken off), to say which family they fit."""
    compiled = _compile(table)
    out: dict[str, torch.Tensor] = {}
    dropped, unknown = [], []
    for name, tensor in state_dict.items():
        known, dst = _lookup(name, compiled)
        if not known:
            unknown.append(name)
        elif dst is None:
            dropped.append(name)
        else:
            out[dst] = tensor
    if unknown:
        raise CheckpointError(_unknown_error(source, unknown, arch, original or list(state_dict)))
    return out, dropped


def hf_to_minialign(
    state_dict: dict[str, torch.Tensor], arch: str, *, source: str = "checkpoint"
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Rename an HF BERT/RoBERTa state dict (bare backbone or *ForMaskedLM/*ForPreTraining).

    Returns (tensors under minialign names, names dropped on purpose). An unknown name raises
    CheckpointError naming it.
    """
    prefix = NAMES[arch].model_prefix
    bare = {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in state_dict.items()}
    return _rename(bare, NAMES[arch].table, source, arch, list(state_dict))


def alignscore_to_minialign(
    state_dict: dict[str, torch.Tensor], arch: str, *, source: str = "checkpoint"
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Rename an AlignScore BERTAlignModel state dict (`base_model.`, `mlm_head.`, heads)."""
    hf: dict[str, torch.Tensor] = {}
    for name, tensor in state_dict.items():
        if name.startswith(ALIGNSCORE_BACKBONE_PREFIX):
            name = name[len(ALIGNSCORE_BACKBONE_PREFIX):]
        elif name.startswith(ALIGNSCORE_MLM_PREFIX):
            name = NAMES[arch].mlm_prefix + name[len(ALIGNSCORE_MLM_PREFIX):]
        hf[name] = tensor
    return _rename(hf, NAMES[arch].table, source, arch)


def inverse(table: dict[str, str | None]) -> dict[str, str]:
    """minialign name -> HF name, derived from a forward table."""
    return {dst: src for src, dst in table.items() if dst is not None}


def minialign_to_hf(state_dict: dict[str, torch.Tensor], arch: str) -> dict[str, torch.Tensor]:
    """Rename minialign weights to bare HF names (BertModel/RobertaModel backbone, MLM head under
    `cls.predictions.` / `lm_head.`, AlignScore heads as they are)."""
    out, _ = _rename(state_dict, inverse(NAMES[arch].table), "minialign state dict")
    return out


def minialign_to_alignscore(state_dict: dict[str, torch.Tensor], arch: str) -> dict[str, torch.Tensor]:
    """Rename minialign weights to AlignScore BERTAlignModel's names (the inverse of alignscore_to_minialign):
    the backbone under `base_model.`, the MLM head under `mlm_head.`, the three heads as they are."""
    out = {}
    for name, tensor in minialign_to_hf(state_dict, arch).items():
        if name.startswith(NAMES[arch].mlm_prefix):
            name = ALIGNSCORE_MLM_PREFIX + name[len(NAMES[arch].mlm_prefix):]
        elif name not in _ALIGN_HEADS:
            name = ALIGNSCORE_BACKBONE_PREFIX + name
        out[name] = tensor
    return out


def split_hf_backbone(hf_state_dict: dict[str, torch.Tensor], arch: str) -> tuple[dict, dict]:
    """Split bare HF names into (the transformers model: backbone, and the classification head when
    there is one, in *ForSequenceClassification's names; the rest: MLM head and AlignScore heads).

    With a classification head the backbone takes its family prefix (`bert.` / `roberta.`), as
    *ForSequenceClassification saves it (AutoModel reads that too). The rest is named as AlignScore
    names it (`mlm_head.*`, `bin_layer.*`, ...), so the pair is a lossless view of an AlignScore checkpoint.
    """
    model, heads = {}, {}
    mlm, head = NAMES[arch].mlm_prefix, NAMES[arch].classifier_prefixes
    classifier = any(name.startswith(head) for name in hf_state_dict)
    for name, tensor in hf_state_dict.items():
        if name.startswith(mlm):
            heads[ALIGNSCORE_MLM_PREFIX + name[len(mlm):]] = tensor
        elif name in _ALIGN_HEADS:
            heads[name] = tensor
        elif classifier and not name.startswith(head):
            model[NAMES[arch].model_prefix + name] = tensor
        else:
            model[name] = tensor
    return model, heads
