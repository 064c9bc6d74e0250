"""CamemBERT's config.json (configuration_camembert.py): RobertaConfig's fields and defaults under its own
model_type and classes; RoBERTa's weight names."""

from __future__ import annotations

import dataclasses

from ..hf_config import sizes
from ..formats import Format
from . import roberta

# configuration_camembert.py: RobertaConfig's fields and defaults, its own model_type and classes.
CONFIG = dataclasses.replace(
    roberta.CONFIG, model_type="camembert", base_class="CamembertModel",
    classifier_class="CamembertForSequenceClassification",
    presets={
        # https://huggingface.co/almanach/camembert-base/blob/main/config.json
        "camembert-base": {"vocab_size": 32005, **sizes(768, 12, 12, 3072), "max_position_embeddings": 514,
                           "type_vocab_size": 1, "layer_norm_eps": 1e-5, "pad_token_id": 1},
    },
)

NAMES = roberta.NAMES
FORMAT = Format(CONFIG, NAMES)
