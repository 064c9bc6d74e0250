"""AlignScore's training objective as a function of model outputs and labels.

AlignScore model.py (BERTAlignModel.forward, training_step_end):
  mlm  = sum CE(prediction_logits, mlm_label)                  over tokens whose label != -100
  bin  = sum CE(seq_relationship_logits, align_label) / log 2   over examples with label != -100
  tri  = sum CE(tri_label_logits, tri_label) / log 3            (0 aligned, 1 neutral, 2 contradiction)
  reg  = sum (reg_label_logits - reg_label)^2                   over examples with label != -100.0
each normalised by its own count (0 when the count is 0), and
  total = 0.5 * mlm + bin + tri + reg.
The log 2 / log 3 divisions put the binary and 3-way cross entropies on a scale where a uniform
guess costs 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor

from minialign.models.head_models import AlignOutput

IGNORE = -100
MLM_WEIGHT = 0.5  # AlignScore: self.mlm_loss_factor


@dataclass
class AlignLosses:
    total: Tensor  # MLM_WEIGHT * mlm + bin + tri + reg, each a per-count mean
    mlm: Tensor
    bin: Tensor
    tri: Tensor
    reg: Tensor
    counts: dict[str, int]  # labelled tokens / examples behind each loss
    sums: dict[str, Tensor]  # the un-normalised sums (what AlignScore's forward returns)


def _mean(total: Tensor, count: Tensor) -> Tensor:
    return total / count if count > 0 else total * 0.0


def alignscore_losses(output: AlignOutput, *, mlm_labels: Tensor | None = None, align_labels: Tensor | None = None,
                      tri_labels: Tensor | None = None, reg_labels: Tensor | None = None) -> AlignLosses:
    """Losses of one batch. A missing label tensor counts as all-ignored. mlm_labels (B, L) needs
    output.prediction_logits (run the model with mlm=True)."""
    zero = output.tri_label_logits.new_zeros(())
    sums, counts = {}, {}
    if mlm_labels is not None:
        if output.prediction_logits is None:
            raise ValueError("mlm_labels given but prediction_logits is None: call the model with mlm=True")
        logits = output.prediction_logits.float()
        sums["mlm"] = F.cross_entropy(logits.reshape(-1, logits.size(-1)), mlm_labels.reshape(-1),
                                      ignore_index=IGNORE, reduction="sum")
        counts["mlm"] = mlm_labels.ne(IGNORE).sum()
    for name, logits, labels, classes in (("bin", output.seq_relationship_logits, align_labels, 2),
                                          ("tri", output.tri_label_logits, tri_labels, 3)):
        if labels is not None:
            ce = F.cross_entropy(logits.float().reshape(-1, classes), labels.reshape(-1), ignore_index=IGNORE,
                                 reduction="sum")
            sums[name] = ce / math.log(classes)
            counts[name] = labels.ne(IGNORE).sum()
    if reg_labels is not None:
        target = reg_labels.reshape(-1).float()
        keep = target.ne(float(IGNORE))
        sums["reg"] = ((output.reg_label_logits.float().reshape(-1) - target)[keep] ** 2).sum()
        counts["reg"] = keep.sum()
    means = {name: _mean(sums[name], counts[name]) if name in sums else zero for name in ("mlm", "bin", "tri", "reg")}
    total = MLM_WEIGHT * means["mlm"] + means["bin"] + means["tri"] + means["reg"]
    return AlignLosses(total=total, **means, counts={k: int(v) for k, v in counts.items()}, sums=sums)


def classification_loss(logits: Tensor, labels: Tensor, problem_type: str | None = None) -> Tensor:
    """The loss transformers' *ForSequenceClassification computes (modeling_bert.py
    BertForSequenceClassification.forward): MSE for regression, cross entropy for single-label,
    BCE with logits for multi-label. problem_type None infers it as transformers does: one label
    -> regression; integer labels -> single-label; otherwise multi-label."""
    num_labels = logits.size(-1)
    if problem_type is None:
        if num_labels == 1:
            problem_type = "regression"
        elif not labels.is_floating_point():
            problem_type = "single_label_classification"
        else:
            problem_type = "multi_label_classification"
    logits = logits.float()
    if problem_type == "regression":
        return F.mse_loss(logits.squeeze(-1), labels.float().squeeze(-1)) if num_labels == 1 else \
            F.mse_loss(logits, labels.float())
    if problem_type == "single_label_classification":
        return F.cross_entropy(logits.view(-1, num_labels), labels.view(-1))
    if problem_type == "multi_label_classification":
        return F.binary_cross_entropy_with_logits(logits, labels.float())
    raise ValueError(f"unknown problem_type {problem_type!r}")
