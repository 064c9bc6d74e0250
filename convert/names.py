"""Weight-name tables: Hugging Face encoder families and AlignScore <-> minialign, the machinery.

One declarative table per family maps HF names to minialign names, in the family's own file
(convert/families/<family>.py, built from the nearest family's, overriding what differs). `{}` stands
for the layer index; `None` means "dropped on purpose". The reverse direction is derived from the
same table (`inverse`), never typed twice. A family's `Names` adds where its backbone and its MLM head
sit inside transformers' *ForMaskedLM / *ForSequenceClassification. Functions here take a family as
its `Names` or its model_type (whose file convert/families/ finds).

minialign's names (the AlignModel namespace; an Encoder holds the `encoder.` part):

    encoder.embeddings.{word,position,token_type}.weight, encoder.embeddings.norm.*
    encoder.layers.{i}.attention.{query,key,value,output}.*, encoder.layers.{i}.attention_norm.*
    encoder.layers.{i}.ffn.{up,down}.*, encoder.layers.{i}.ffn_norm.*
    encoder.pooler.dense.*, encoder.final_norm.* (a pre-LN family's: ModernBERT)
    encoder.layers.{i}.attention.qkv.* (ModernBERT's fused Wqkv, kept fused)
    mlm_head.{dense,norm}.*, mlm_head.bias, mlm_head.decoder.weight (only when untied)
    bin_layer.*, tri_layer.*, reg_layer.*
    classifier.out_proj.*, classifier.dense.* (RoBERTa only), classifier.norm.* (ModernBERT):
    *ForSequenceClassification's head, and *ForTokenClassification's (its out_proj; ModernBERT's dense and norm)
    qa_outputs.out_proj.*: *ForQuestionAnswering's (ModernBERT's under classifier.*)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from .errors import CheckpointError

# AlignScore's heads (AlignScore model.py: bin_layer, tri_layer, reg_layer) keep their names.
ALIGN_HEADS: dict[str, str | None] = {
    f"{head}.{p}": f"{head}.{p}" for head in ("bin_layer", "tri_layer", "reg_layer") for p in ("weight", "bias")
}

# A classification head of dense -> activation -> out_proj on the first token (RobertaClassificationHead,
# ElectraClassificationHead): the same names on both sides.
DENSE_CLASSIFICATION_HEAD: dict[str, str | None] = {
    f"classifier.{m}.{p}": f"classifier.{m}.{p}" for m in ("dense", "out_proj") for p in ("weight", "bias")
}


# *ForTokenClassification's output layer: dropout -> classifier (one Linear) on every token (BertForTokenClassification
# and every family's alike; RoBERTa's, ELECTRA's and MPNet's sequence heads name theirs classifier.out_proj, so the
# one `classifier.weight` is the token head's there). Which class a checkpoint is for comes from config.json's
# `architectures` (minialign/models/auto.py), never from these names alone: BERT's sequence head has the same.
TOKEN_CLASSIFIER: dict[str, str | None] = {f"classifier.{p}": f"classifier.out_proj.{p}" for p in ("weight", "bias")}

# *ForQuestionAnswering's output layer (BertForQuestionAnswering.qa_outputs: Linear(hidden, 2), start and end
# logits); ModernBertForQuestionAnswering names its own `head` and `classifier` instead (its family file).
QA_OUTPUTS: dict[str, str | None] = {f"qa_outputs.{p}": f"qa_outputs.out_proj.{p}" for p in ("weight", "bias")}


def layer_names(prefix: str, parts: dict[str, str]) -> dict[str, str | None]:
    """A family's per-layer names: `{prefix}.{i}.{hf part}.{weight,bias}` -> `encoder.layers.{i}.{our part}.*`."""
    return {f"{prefix}.{{}}.{src}.{p}": f"encoder.layers.{{}}.{dst}.{p}" for src, dst in parts.items()
            for p in ("weight", "bias")}


@dataclass(frozen=True)
class Names:
    """One family's names: its table, the prefix of the backbone inside HF's *ForMaskedLM /
    *ForPreTraining / *ForSequenceClassification, and where its MLM head lives in HF names
    (AlignScore stores that head as `mlm_head.` + the same suffix)."""

    table: dict[str, str | None]
    model_prefix: str
    mlm_prefix: str
    classifier_prefixes: tuple[str, ...] = ("classifier.",)  # *ForSequenceClassification's head, beside the backbone
    # a checkpoint's fused tensor (its minialign name's last parts) -> the names of its equal chunks along dim 0, in
    # order, as the model's state dict names them (GTE's original qkv_proj / up_gate_proj: `unfuse`)
    fused: tuple[tuple[str, tuple[str, ...]], ...] = ()


def unfuse(tensors: dict[str, torch.Tensor], fused: tuple[tuple[str, tuple[str, ...]], ...]) -> dict[str, torch.Tensor]:
    """Each tensor named `<prefix>.<whole>.<weight|bias>` of a `fused` entry as its chunks along dim 0 (views),
    `<prefix>.<part>.<weight|bias>` (transformers' conversion_mapping.py Chunk(dim=0))."""
    if not fused:
        return tensors
    out = {}
    for name, tensor in tensors.items():
        head, _, kind = name.rpartition(".")
        for whole, parts in fused:
            if head == whole or head.endswith("." + whole):
                stem = head[:len(head) - len(whole)]
                out.update({f"{stem}{part}.{kind}": chunk for part, chunk in zip(parts, tensor.chunk(len(parts)))})
                break
        else:
            out[name] = tensor
    return out


CLASSIFIER_PREFIX = "classifier."
ALIGNSCORE_BACKBONE_PREFIX = "base_model."
ALIGNSCORE_MLM_PREFIX = "mlm_head."
def _label(family) -> str | None:
    """A family's model_type for messages (None where it is given as its Names alone)."""
    return family if isinstance(family, str) else None if isinstance(family, Names) else family.model_type


def names_of(family) -> Names:
    """A family's names: its Names, or those of its Format (formats.py). By model_type: by_model_type.py."""
    if isinstance(family, Names):
        return family
    if isinstance(family, str):
        raise TypeError(f"convert.names takes a family's Names or Format, not the model_type {family!r}: "
                        f"convert.{{hf_to_minialign, ...}} (by_model_type.py) take model_types")
    return family.names


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


def _fits(names: list[str], arch, others: dict[str, Names]) -> list[str]:
    """The families other than `arch` whose names (their backbone prefix taken off, as hf_to_minialign
    does) cover every one of `names`; families sharing a table (RoBERTa's) are listed together."""
    fits = []
    for other, family in others.items():
        if other != arch:
            bare = [n[len(family.model_prefix):] if n.startswith(family.model_prefix) else n for n in names]
            if not _unknown_names(bare, family.table):
                fits.append(other)
    return fits


def _unknown_error(source: str, unknown: list[str], arch: str | None, names: list[str], others: dict[str, Names],
                   shown: int = 5) -> str:
    """The first `shown` names that do not fit, how many more, and which of `others` (families by model_type)
    the names fit."""
    unknown = sorted(unknown)
    listed = "; ".join(unknown[:shown]) + (f"; ... and {len(unknown) - shown} more" if len(unknown) > shown else "")
    if arch is None:
        return f"{source}: {len(unknown)} unknown weight name(s): {listed}"
    text = (f"{source}: {len(unknown)} weight name(s) do not fit the family its config names, {arch!r}: {listed}")
    fits = _fits(names, arch, others)
    if fits:
        text += (f". Every weight name fits {' / '.join(repr(f) for f in fits)}: the weights look like that "
                 f"family's, so the config (config.json's model_type, or backbone=) likely belongs to another model")
    return text


def _rename(
    state_dict: dict[str, torch.Tensor], table: dict[str, str | None], source: str, arch: str | None = None,
    original: list[str] | None = None, others: dict[str, Names] | None = None,
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """`original`: the checkpoint's own names (before a prefix was taken off), to say which of `others` (the
    families to compare, by model_type) they fit."""
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
        raise CheckpointError(_unknown_error(source, unknown, arch, original or list(state_dict), others or {}))
    return out, dropped


def hf_to_minialign(
    state_dict: dict[str, torch.Tensor], arch, *, source: str = "checkpoint", others: dict[str, Names] | None = None,
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Rename an HF state dict of the family `arch` (its Names or Format; bare backbone or *ForMaskedLM /
    *ForPreTraining / *ForSequenceClassification).

    Returns (tensors under minialign names, names dropped on purpose). An unknown name raises
    CheckpointError naming it, and which of `others` (families by model_type) the names fit.
    """
    names = names_of(arch)
    prefix = names.model_prefix
    bare = {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in state_dict.items()}
    out, dropped = _rename(bare, names.table, source, _label(arch), list(state_dict), others)
    return unfuse(out, names.fused), dropped


def alignscore_to_minialign(
    state_dict: dict[str, torch.Tensor], arch, *, source: str = "checkpoint", others: dict[str, Names] | None = None,
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Rename an AlignScore BERTAlignModel state dict (`base_model.`, `mlm_head.`, heads)."""
    hf: dict[str, torch.Tensor] = {}
    for name, tensor in state_dict.items():
        if name.startswith(ALIGNSCORE_BACKBONE_PREFIX):
            name = name[len(ALIGNSCORE_BACKBONE_PREFIX):]
        elif name.startswith(ALIGNSCORE_MLM_PREFIX):
            name = names_of(arch).mlm_prefix + name[len(ALIGNSCORE_MLM_PREFIX):]
        hf[name] = tensor
    return _rename(hf, names_of(arch).table, source, _label(arch), others=others)


def inverse(table: dict[str, str | None]) -> dict[str, str]:
    """minialign name -> HF name, derived from a forward table."""
    return {dst: src for src, dst in table.items() if dst is not None}


def minialign_to_hf(state_dict: dict[str, torch.Tensor], arch, *, token_head: bool = False) -> dict[str, torch.Tensor]:
    """Rename minialign weights to bare HF names (BertModel/RobertaModel backbone, MLM head under
    `cls.predictions.` / `lm_head.`, AlignScore heads as they are). token_head: `classifier.out_proj` is a
    *ForTokenClassification's output layer, `classifier.*` in every family (RoBERTa's and ELECTRA's sequence heads
    name it `classifier.out_proj`, which the table's inverse gives)."""
    table = inverse(names_of(arch).table)
    if token_head:
        table.update(inverse(TOKEN_CLASSIFIER))
    out, _ = _rename(state_dict, table, "minialign state dict")
    return out


def minialign_to_alignscore(state_dict: dict[str, torch.Tensor], arch) -> dict[str, torch.Tensor]:
    """Rename minialign weights to AlignScore BERTAlignModel's names (the inverse of alignscore_to_minialign):
    the backbone under `base_model.`, the MLM head under `mlm_head.`, the three heads as they are."""
    out = {}
    for name, tensor in minialign_to_hf(state_dict, arch).items():
        if name.startswith(names_of(arch).mlm_prefix):
            name = ALIGNSCORE_MLM_PREFIX + name[len(names_of(arch).mlm_prefix):]
        elif name not in ALIGN_HEADS:
            name = ALIGNSCORE_BACKBONE_PREFIX + name
        out[name] = tensor
    return out


def split_hf_backbone(hf_state_dict: dict[str, torch.Tensor], arch) -> tuple[dict, dict]:
    """Split bare HF names into (the transformers model: backbone, and the classification head when
    there is one, in *ForSequenceClassification's names; the rest: MLM head and AlignScore heads).

    With a classification head the backbone takes its family prefix (`bert.` / `roberta.`), as
    *ForSequenceClassification saves it (AutoModel reads that too). The rest is named as AlignScore
    names it (`mlm_head.*`, `bin_layer.*`, ...), so the pair is a lossless view of an AlignScore checkpoint.
    """
    model, heads = {}, {}
    names = names_of(arch)
    mlm, head = names.mlm_prefix, names.classifier_prefixes
    classifier = any(name.startswith(head) for name in hf_state_dict)
    for name, tensor in hf_state_dict.items():
        if name.startswith(mlm):
            heads[ALIGNSCORE_MLM_PREFIX + name[len(mlm):]] = tensor
        elif name in ALIGN_HEADS:
            heads[name] = tensor
        elif classifier and not name.startswith(head):
            model[names.model_prefix + name] = tensor
        else:
            model[name] = tensor
    return model, heads

