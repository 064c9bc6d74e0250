"""DeBERTa-v2/v3's config.json and weight names (configuration_deberta_v2.py, modeling_deberta_v2.py)."""

from __future__ import annotations

import dataclasses

from ..hf_config import sizes
from ..names import Names, QA_OUTPUTS, layer_names
from ..formats import Format
from . import bert

# configuration_deberta_v2.py (DebertaV2Config; v2 and v3 alike): BERT's names plus embedding_size (None:
# hidden_size, written back as it) and the disentangled attention's fields, read by DebertaV2Model through
# getattr with these defaults; cls_dropout is the classifier's dropout, pooler_hidden_act / pooler_dropout its
# ContextPooler's. type_vocab_size 0: no token types (v3). No position_embedding_type.
CONFIG = dataclasses.replace(
    bert.CONFIG, model_type="deberta-v2", base_class="DebertaV2Model", classifier_class="DebertaV2ForSequenceClassification",
    fields={**bert.FIELDS, "embedding_size": "embedding_size", "relative_attention": "relative_attention",
            "pos_att_type": "pos_att_type", "max_relative_positions": "max_relative_positions",
            "position_buckets": "position_buckets", "share_att_key": "share_att_key", "norm_rel_ebd": "norm_rel_ebd",
            "position_biased_input": "position_biased_input", "conv_kernel_size": "conv_kernel_size",
            "conv_groups": "conv_groups", "conv_act": "conv_act", "pooler_hidden_act": "pooler_activation",
            "pooler_dropout": "pooler_dropout", "cls_dropout": "classifier_dropout"},
    defaults={**bert.CONFIG.defaults, "type_vocab_size": 0, "layer_norm_eps": 1e-7, "relative_attention": False,
              "pos_att_type": [], "max_relative_positions": -1, "position_buckets": -1, "share_att_key": False,
              "norm_rel_ebd": "none", "position_biased_input": True, "conv_kernel_size": 0, "conv_groups": 1,
              "conv_act": "tanh", "pooler_hidden_act": "gelu", "pooler_dropout": 0.0},
    written={},
    unset_as={"embedding_size": "hidden_size"},
    presets={
        # https://huggingface.co/microsoft/deberta-v3-base/blob/main/config.json
        "deberta-v3-base": {"vocab_size": 128100, **sizes(768, 12, 12, 3072), "max_position_embeddings": 512,
                            "type_vocab_size": 0, "layer_norm_eps": 1e-7, "pad_token_id": 0, "hidden_act": "gelu",
                            "relative_attention": True, "max_relative_positions": -1, "position_buckets": 256,
                            "norm_rel_ebd": "layer_norm", "share_att_key": True, "pos_att_type": "p2c|c2p",
                            "position_biased_input": False, "pooler_hidden_size": 768, "pooler_dropout": 0,
                            "pooler_hidden_act": "gelu"},
    },
)

# DebertaV2Model (modeling_deberta_v2.py; v2 and v3): BERT's layout under its own attention names
# (attention.self.{query,key,value}_proj, the position projections pos_key_proj / pos_query_proj when
# share_att_key is off), embed_proj (no bias) when embedding_size differs from hidden_size, the relative
# embeddings and their LayerNorm shared by every layer, v2's convolution after the first layer, no pooler.
# DebertaV2ForSequenceClassification: ContextPooler (`pooler.dense`) and `classifier` beside the backbone.
_DEBERTA_V2_LAYER = {
    "attention.self.query_proj": "attention.query", "attention.self.key_proj": "attention.key",
    "attention.self.value_proj": "attention.value", "attention.self.pos_key_proj": "attention.pos_key",
    "attention.self.pos_query_proj": "attention.pos_query", "attention.output.dense": "attention.output",
    "attention.output.LayerNorm": "attention_norm",
    "intermediate.dense": "ffn.up", "output.dense": "ffn.down", "output.LayerNorm": "ffn_norm",
}
TABLE: dict[str, str | None] = {
    **{k: v for k, v in bert.BACKBONE.items() if k.startswith("embeddings.")},
    "embeddings.embed_proj.weight": "encoder.embeddings.project.weight",
    **layer_names("encoder.layer", _DEBERTA_V2_LAYER),
    "encoder.rel_embeddings.weight": "encoder.relative.table.weight",
    "encoder.LayerNorm.weight": "encoder.relative.norm.weight",
    "encoder.LayerNorm.bias": "encoder.relative.norm.bias",
    "encoder.conv.conv.weight": "encoder.layers.0.conv.conv.weight",
    "encoder.conv.conv.bias": "encoder.layers.0.conv.conv.bias",
    "encoder.conv.LayerNorm.weight": "encoder.layers.0.conv.norm.weight",
    "encoder.conv.LayerNorm.bias": "encoder.layers.0.conv.norm.bias",
    "pooler.dense.weight": "classifier.dense.weight",
    "pooler.dense.bias": "classifier.dense.bias",
    "classifier.weight": "classifier.out_proj.weight",
    "classifier.bias": "classifier.out_proj.bias",
    **QA_OUTPUTS,  # DebertaV2ForQuestionAnswering
    # DeBERTa-v3's replaced-token-detection head (the ELECTRA-style discriminator microsoft/deberta-v3-* were
    # pretrained with, saved in their checkpoints): no transformers class has it (DebertaV2ForMaskedLM lists
    # `mask_predictions.*` in _keys_to_ignore_on_load_unexpected), so it is dropped, as ELECTRA's is (electra.py).
    **{f"mask_predictions.{m}.{p}": None for m in ("dense", "LayerNorm", "classifier") for p in ("weight", "bias")},
    # DebertaV2ForMaskedLM with config.legacy=False: DebertaV2LMPredictionHead, its decoder the word embeddings
    "lm_predictions.lm_head.dense.weight": "mlm_head.dense.weight",
    "lm_predictions.lm_head.dense.bias": "mlm_head.dense.bias",
    "lm_predictions.lm_head.LayerNorm.weight": "mlm_head.norm.weight",
    "lm_predictions.lm_head.LayerNorm.bias": "mlm_head.norm.bias",
    "lm_predictions.lm_head.bias": "mlm_head.bias",
    # ... and with legacy=True (transformers' default): LegacyDebertaV2LMPredictionHead, BERT's names. Listed
    # last, so the reverse table (names.inverse) writes these.
    "cls.predictions.transform.dense.weight": "mlm_head.dense.weight",
    "cls.predictions.transform.dense.bias": "mlm_head.dense.bias",
    "cls.predictions.transform.LayerNorm.weight": "mlm_head.norm.weight",
    "cls.predictions.transform.LayerNorm.bias": "mlm_head.norm.bias",
    "cls.predictions.decoder.weight": "mlm_head.decoder.weight",
    "cls.predictions.bias": "mlm_head.bias",
    "cls.predictions.decoder.bias": "mlm_head.decoder.bias",  # cls.predictions.bias, unless untied (bert.py's note)
}

NAMES = Names(TABLE, model_prefix="deberta.", mlm_prefix="cls.predictions.",
              classifier_prefixes=("pooler.", "classifier."))
FORMAT = Format(CONFIG, NAMES)
