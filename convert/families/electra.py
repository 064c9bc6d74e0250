"""ELECTRA's config.json and weight names (configuration_electra.py, modeling_electra.py): BERT's, with the
embeddings' own width and projection, no pooler."""

from __future__ import annotations

import dataclasses

from ..hf_config import sizes
from ..names import DENSE_CLASSIFICATION_HEAD, Names, QA_OUTPUTS, TOKEN_CLASSIFIER
from ..formats import Format
from . import bert

# configuration_electra.py (ElectraConfig): BERT's names plus embedding_size, the embeddings' width
# (ElectraConfig's default 128; a projection to hidden_size follows when they differ). Config's None
# (no projection) is written back as hidden_size.
CONFIG = dataclasses.replace(
    bert.CONFIG, model_type="electra", base_class="ElectraModel", classifier_class="ElectraForSequenceClassification",
    fields={**bert.FIELDS, "embedding_size": "embedding_size"},
    defaults={**bert.CONFIG.defaults, "embedding_size": 128},
    written={},  # ElectraConfig has no position_embedding_type
    unset_as={"embedding_size": "hidden_size"},
    presets={
        # https://huggingface.co/google/electra-small-discriminator/blob/main/config.json
        "electra-small-discriminator": {"vocab_size": 30522, "embedding_size": 128, **sizes(256, 12, 4, 1024),
                                        "max_position_embeddings": 512, "type_vocab_size": 2,
                                        "layer_norm_eps": 1e-12, "pad_token_id": 0},
        # https://huggingface.co/google/electra-base-discriminator/blob/main/config.json
        "electra-base-discriminator": {"vocab_size": 30522, "embedding_size": 768, **sizes(768, 12, 12, 3072),
                                       "max_position_embeddings": 512, "type_vocab_size": 2,
                                       "layer_norm_eps": 1e-12, "pad_token_id": 0},
    },
)

# ElectraModel (modeling_electra.py): BERT's backbone without a pooler, plus embeddings_project (the
# embeddings' width -> hidden_size, present only when they differ). ElectraForMaskedLM's generator head
# (generator_predictions, generator_lm_head: embedding_size wide) is the masked-LM head; the discriminator's
# replaced-token head (ElectraForPreTraining) has no minialign model.
TABLE: dict[str, str | None] = {
    **{k: v for k, v in bert.BACKBONE.items() if not k.startswith("pooler.")},
    "embeddings_project.weight": "encoder.embeddings.project.weight",
    "embeddings_project.bias": "encoder.embeddings.project.bias",
    **{f"discriminator_predictions.{m}.{p}": None for m in ("dense", "dense_prediction") for p in ("weight", "bias")},
    "generator_predictions.dense.weight": "mlm_head.dense.weight",
    "generator_predictions.dense.bias": "mlm_head.dense.bias",
    "generator_predictions.LayerNorm.weight": "mlm_head.norm.weight",
    "generator_predictions.LayerNorm.bias": "mlm_head.norm.bias",
    "generator_lm_head.weight": "mlm_head.decoder.weight",  # tied to the word embeddings unless untied
    "generator_lm_head.bias": "mlm_head.bias",
    # ElectraForTokenClassification: dropout -> classifier. Before the sequence head's names, so that
    # minialign_to_hf's inverse keeps classifier.out_proj for those (a token head is written with token_head=True)
    **TOKEN_CLASSIFIER,
    # ElectraForSequenceClassification: ElectraClassificationHead on the first token (no pooler).
    **DENSE_CLASSIFICATION_HEAD,
    **QA_OUTPUTS,  # ElectraForQuestionAnswering
}

NAMES = Names(TABLE, model_prefix="electra.", mlm_prefix="generator_predictions.")
FORMAT = Format(CONFIG, NAMES)
