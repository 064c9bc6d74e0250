"""Which model class a checkpoint's tensors are for: the one decision the CLI's convert, explore and
parity make from a checkpoint, as transformers' AutoModel picks a class from a config's `architectures`.
A checkpoint naming a class with one of ARCHITECTURES' heads gets that class (its names alone cannot tell BERT's
token head from its sequence head: both are `classifier.*`); otherwise the weights decide, since an AlignScore .ckpt
or an older minialign directory names no architecture."""

from __future__ import annotations

from minialign.loading import Checkpoint, Pretrained
from minialign.models.encoder import Encoder
from minialign.models.head_models import (AlignModel, ClassifierModel, QuestionAnsweringModel,
                                          TokenClassifierModel)

# transformers' class suffixes whose heads share weight names with another's: the class a name ending so is for
ARCHITECTURES = {cls.architecture: cls for cls in (ClassifierModel, TokenClassifierModel, QuestionAnsweringModel)}

# A head's weights and the class that runs it, most specific first. An MLM head alone (BERT's and
# RoBERTa's pretraining checkpoints) names no class: it is an Encoder's checkpoint.
HEADS = (
    (("qa_outputs.",), QuestionAnsweringModel),  # *ForQuestionAnswering
    (("classifier.",), ClassifierModel),  # *ForSequenceClassification
    (("bin_layer.", "tri_layer.", "reg_layer."), AlignModel),  # AlignScore's three heads
)


def architecture_class(ckpt: Checkpoint) -> type[Pretrained] | None:
    """The class of ARCHITECTURES whose suffix ends a class the checkpoint's config.json names, or None."""
    for name in ckpt.architectures:
        for suffix, cls in ARCHITECTURES.items():
            if name.endswith(suffix):
                return cls
    return None


def model_class(ckpt: Checkpoint) -> type[Pretrained]:
    """The class the checkpoint's `architectures` names (architecture_class), else the class whose head it holds
    (HEADS: a QA head, a sequence classifier, AlignScore's heads, in that order), else the Encoder."""
    named = architecture_class(ckpt)
    if named is not None:
        return named
    for prefixes, cls in HEADS:
        if any(name.startswith(prefixes) for name in ckpt.tensors):
            return cls
    return Encoder
