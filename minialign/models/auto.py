"""Which model class a checkpoint's tensors are for: the one decision the CLI's convert, explore and
parity make from a checkpoint (as transformers' AutoModel picks a class from a config's
`architectures`; here the weights decide, since an AlignScore .ckpt or a minialign directory names
no architecture)."""

from __future__ import annotations

from minialign.loading import Checkpoint, Pretrained
from minialign.models.encoder import AlignModel, ClassifierModel, Encoder

# A head's weights and the class that runs it, most specific first. An MLM head alone (BERT's and
# RoBERTa's pretraining checkpoints) names no class: it is an Encoder's checkpoint.
HEADS = (
    (("classifier.",), ClassifierModel),  # *ForSequenceClassification
    (("bin_layer.", "tri_layer.", "reg_layer."), AlignModel),  # AlignScore's three heads
)


def model_class(ckpt: Checkpoint) -> type[Pretrained]:
    """The class whose head the checkpoint holds (HEADS: a sequence classifier, AlignScore's heads, in
    that order), else the Encoder."""
    for prefixes, cls in HEADS:
        if any(name.startswith(prefixes) for name in ckpt.tensors):
            return cls
    return Encoder
