"""DistilBERT's config.json and weight names (configuration_distilbert.py, modeling_distilbert.py)."""

from __future__ import annotations

from ..hf_config import ConfigRow
from ..names import ALIGN_HEADS, Names, QA_OUTPUTS, layer_names
from ..formats import Format

# configuration_distilbert.py (DistilBertConfig): its own names; no token types and no layer_norm_eps
# (modeling_distilbert.py fixes every LayerNorm's eps at 1e-12, Config's default); seq_classif_dropout
# is DistilBertForSequenceClassification's dropout.
CONFIG = ConfigRow(
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

# DistilBertModel (modeling_distilbert.py): its own names under `transformer.`, no token types, no pooler;
# DistilBertForMaskedLM's head is vocab_transform -> activation -> vocab_layer_norm -> vocab_projector.
_DISTILBERT_LAYER = {
    "attention.q_lin": "attention.query", "attention.k_lin": "attention.key", "attention.v_lin": "attention.value",
    "attention.out_lin": "attention.output", "sa_layer_norm": "attention_norm",
    "ffn.lin1": "ffn.up", "ffn.lin2": "ffn.down", "output_layer_norm": "ffn_norm",
}
TABLE: dict[str, str | None] = {
    "embeddings.word_embeddings.weight": "encoder.embeddings.word.weight",
    "embeddings.position_embeddings.weight": "encoder.embeddings.position.weight",  # learned or sinusoidal
    "embeddings.LayerNorm.weight": "encoder.embeddings.norm.weight",
    "embeddings.LayerNorm.bias": "encoder.embeddings.norm.bias",
    "embeddings.position_ids": None,  # stale buffer saved by old transformers versions
    **layer_names("transformer.layer", _DISTILBERT_LAYER),
    "vocab_transform.weight": "mlm_head.dense.weight",
    "vocab_transform.bias": "mlm_head.dense.bias",
    "vocab_layer_norm.weight": "mlm_head.norm.weight",
    "vocab_layer_norm.bias": "mlm_head.norm.bias",
    "vocab_projector.weight": "mlm_head.decoder.weight",
    "vocab_projector.bias": "mlm_head.bias",
    **ALIGN_HEADS,
    # DistilBertForSequenceClassification: classifier(dropout(relu(pre_classifier(h_0)))), no pooler.
    "pre_classifier.weight": "classifier.dense.weight",
    "pre_classifier.bias": "classifier.dense.bias",
    "classifier.weight": "classifier.out_proj.weight",
    "classifier.bias": "classifier.out_proj.bias",
    **QA_OUTPUTS,  # DistilBertForQuestionAnswering (dropout -> qa_outputs)
}

NAMES = Names(TABLE, model_prefix="distilbert.", mlm_prefix="vocab_",
              classifier_prefixes=("pre_classifier.", "classifier."))
FORMAT = Format(CONFIG, NAMES)
