"""BERT's config.json and weight names (transformers models/bert: configuration_bert.py, modeling_bert.py).
The families derived from BERT read FIELDS, CONFIG and BACKBONE from here and override what differs."""

from __future__ import annotations

from ..hf_config import ConfigRow, sizes
from ..names import ALIGN_HEADS, Names, QA_OUTPUTS
from ..formats import Format

# configuration_bert.py (BertConfig); RoBERTa's names are the same (configuration_roberta.py).
FIELDS = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads",
    "intermediate_size": "intermediate_size",
    "max_position_embeddings": "max_position_embeddings",
    "type_vocab_size": "type_vocab_size",
    "layer_norm_eps": "layer_norm_eps",
    "pad_token_id": "pad_token_id",
    "hidden_dropout_prob": "hidden_dropout",
    "attention_probs_dropout_prob": "attention_dropout",
    "hidden_act": "activation",
    "initializer_range": "initializer_range",
    "tie_word_embeddings": "tie_word_embeddings",
}

CONFIG = ConfigRow(
    model_type="bert", base_class="BertModel", classifier_class="BertForSequenceClassification",
    fields=FIELDS,
    defaults={"pad_token_id": 0, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu",
              "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02,
              "max_position_embeddings": 512, "tie_word_embeddings": True},
    written={"position_embedding_type": "absolute"},
    presets={
        # https://huggingface.co/google-bert/bert-base-uncased/blob/main/config.json
        "bert-base-uncased": {"vocab_size": 30522, **sizes(768, 12, 12, 3072), "max_position_embeddings": 512,
                              "type_vocab_size": 2, "layer_norm_eps": 1e-12, "pad_token_id": 0},
        # https://huggingface.co/google-bert/bert-large-uncased/blob/main/config.json
        "bert-large-uncased": {"vocab_size": 30522, **sizes(1024, 24, 16, 4096), "max_position_embeddings": 512,
                               "type_vocab_size": 2, "layer_norm_eps": 1e-12, "pad_token_id": 0},
    },
)

# The backbone is named alike in BertModel and RobertaModel (modeling_bert.py / modeling_roberta.py).
BACKBONE: dict[str, str | None] = {
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

# BertForPreTraining: cls.predictions (BertLMPredictionHead) and cls.seq_relationship (NSP).
TABLE: dict[str, str | None] = {
    **BACKBONE,
    "cls.predictions.transform.dense.weight": "mlm_head.dense.weight",
    "cls.predictions.transform.dense.bias": "mlm_head.dense.bias",
    "cls.predictions.transform.LayerNorm.weight": "mlm_head.norm.weight",
    "cls.predictions.transform.LayerNorm.bias": "mlm_head.norm.bias",
    "cls.predictions.decoder.weight": "mlm_head.decoder.weight",
    "cls.predictions.bias": "mlm_head.bias",
    # the same tensor as cls.predictions.bias, unless transformers 5 untied it (tie_word_embeddings=False): then it
    # is the one its forward adds (loading/checkpoints.py _untie_if_needed decides)
    "cls.predictions.decoder.bias": "mlm_head.decoder.bias",
    "cls.seq_relationship.weight": None,  # BERT's next-sentence head: no minialign model has it
    "cls.seq_relationship.bias": None,
    **ALIGN_HEADS,
    # BertForSequenceClassification: dropout -> classifier (one Linear) on the pooled output.
    "classifier.weight": "classifier.out_proj.weight",
    "classifier.bias": "classifier.out_proj.bias",
    **QA_OUTPUTS,  # BertForQuestionAnswering
}

NAMES = Names(TABLE, model_prefix="bert.", mlm_prefix="cls.predictions.")
FORMAT = Format(CONFIG, NAMES)
