"""RoBERTa's config.json and weight names (configuration_roberta.py, modeling_roberta.py): BERT's, with
positions after pad_token_id and RobertaLMHead / RobertaClassificationHead."""

from __future__ import annotations

import dataclasses

from ..hf_config import sizes
from ..names import ALIGN_HEADS, DENSE_CLASSIFICATION_HEAD, Names, QA_OUTPUTS, TOKEN_CLASSIFIER
from ..formats import Format
from . import bert

CONFIG = dataclasses.replace(
    bert.CONFIG, model_type="roberta", base_class="RobertaModel", classifier_class="RobertaForSequenceClassification",
    defaults={**bert.CONFIG.defaults, "pad_token_id": 1},
    written={**bert.CONFIG.written, "bos_token_id": 0, "eos_token_id": 2},  # RoBERTa's special ids (roberta-base config.json)
    positions_after_pad=True,  # modeling_roberta.py create_position_ids_from_input_ids
    presets={
        # https://huggingface.co/FacebookAI/roberta-base/blob/main/config.json
        "roberta-base": {"vocab_size": 50265, **sizes(768, 12, 12, 3072), "max_position_embeddings": 514,
                         "type_vocab_size": 1, "layer_norm_eps": 1e-5, "pad_token_id": 1},
        # https://huggingface.co/FacebookAI/roberta-large/blob/main/config.json
        "roberta-large": {"vocab_size": 50265, **sizes(1024, 24, 16, 4096), "max_position_embeddings": 514,
                          "type_vocab_size": 1, "layer_norm_eps": 1e-5, "pad_token_id": 1},
    },
)

# RobertaForMaskedLM: lm_head (RobertaLMHead).
TABLE: dict[str, str | None] = {
    **bert.BACKBONE,
    "lm_head.dense.weight": "mlm_head.dense.weight",
    "lm_head.dense.bias": "mlm_head.dense.bias",
    "lm_head.layer_norm.weight": "mlm_head.norm.weight",
    "lm_head.layer_norm.bias": "mlm_head.norm.bias",
    "lm_head.decoder.weight": "mlm_head.decoder.weight",
    "lm_head.bias": "mlm_head.bias",
    "lm_head.decoder.bias": "mlm_head.decoder.bias",  # lm_head.bias, unless untied (bert.py's note)
    **ALIGN_HEADS,
    # RobertaForTokenClassification: dropout -> classifier. Before the sequence head's names, so that
    # minialign_to_hf's inverse keeps classifier.out_proj for those (a token head is written with token_head=True)
    **TOKEN_CLASSIFIER,
    # RobertaForSequenceClassification: RobertaClassificationHead on the first token (no pooler).
    **DENSE_CLASSIFICATION_HEAD,
    **QA_OUTPUTS,  # RobertaForQuestionAnswering
}

NAMES = Names(TABLE, model_prefix="roberta.", mlm_prefix="lm_head.")
FORMAT = Format(CONFIG, NAMES)
