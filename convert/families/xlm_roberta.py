"""XLM-RoBERTa's config.json (configuration_xlm_roberta.py): RobertaConfig's fields and defaults under its
own model_type and classes; RoBERTa's weight names (base_model_prefix "roberta")."""

from __future__ import annotations

import dataclasses

from ..hf_config import sizes
from ..formats import Format
from . import roberta

# XLM-RoBERTa and CamemBERT: RoBERTa's config exactly (configuration_xlm_roberta.py / configuration_camembert.py
# have RobertaConfig's fields and defaults), their own model_type and classes.
CONFIG = dataclasses.replace(
    roberta.CONFIG, model_type="xlm-roberta", base_class="XLMRobertaModel",
    classifier_class="XLMRobertaForSequenceClassification",
    presets={
        # https://huggingface.co/FacebookAI/xlm-roberta-base/blob/main/config.json
        "xlm-roberta-base": {"vocab_size": 250002, **sizes(768, 12, 12, 3072), "max_position_embeddings": 514,
                             "type_vocab_size": 1, "layer_norm_eps": 1e-5, "pad_token_id": 1},
        # https://huggingface.co/FacebookAI/xlm-roberta-large/blob/main/config.json
        "xlm-roberta-large": {"vocab_size": 250002, **sizes(1024, 24, 16, 4096), "max_position_embeddings": 514,
                              "type_vocab_size": 1, "layer_norm_eps": 1e-5, "pad_token_id": 1},
    },
)

NAMES = roberta.NAMES
FORMAT = Format(CONFIG, NAMES)
