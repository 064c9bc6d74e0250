"""EuroBERT's config.json and weight names (configuration_eurobert.py, modeling_eurobert.py; Llama's names)."""

from __future__ import annotations

from typing import Any

from ..formats import Format
from ..hf_config import ConfigRow, default_rope, sizes
from ..names import Names, TOKEN_CLASSIFIER, layer_names


def _eurobert_read(hf: dict[str, Any]) -> dict[str, Any]:
    """transformers 5 writes the rotary base as rope_parameters {"rope_type", "rope_theta"}
    (modeling_rope_utils.py, LlamaConfig); the Hub's config.json files (written by the EuroBERT authors' own code)
    as rope_theta beside rope_scaling (null in every published one). Both become rope_theta; a rope type other
    than "default" (a scaled rotary) is refused, naming the field, as is a head_dim other than
    hidden_size / num_attention_heads (minialign's heads split the hidden size)."""
    hf = dict(hf)
    if "classifier_pooling" not in hf and hf.get("clf_pooling") is not None:
        # the EuroBERT authors' code (the Hub's configuration_eurobert.py) names the pooling clf_pooling; transformers'
        # native EuroBertConfig reads classifier_pooling only and would run such a classifier with its default
        # ("late") whatever it was trained with: read as the checkpoint's own code does
        hf["classifier_pooling"] = hf["clf_pooling"]
    hf = default_rope(hf)
    head_dim, hidden, heads = hf.get("head_dim"), hf.get("hidden_size"), hf.get("num_attention_heads")
    if head_dim is not None and isinstance(hidden, int) and isinstance(heads, int) and heads \
            and head_dim * heads != hidden:
        raise ValueError(f"config.json: head_dim {head_dim} is not hidden_size / num_attention_heads "
                         f"({hidden} / {heads}); minialign's attention splits the hidden size into the heads")
    return hf


# configuration_eurobert.py (EuroBertConfig, LlamaConfig's fields): pre-RMSNorm layers with rotary positions,
# grouped-query attention, SwiGLU MLPs, no token types; its defaults (no biases, rms_norm_eps 1e-5, theta 10000
# where config.json gives none, pad 128001, untied decoder, "late" pooling).
CONFIG = ConfigRow(
    model_type="eurobert", base_class="EuroBertModel", classifier_class="EuroBertForSequenceClassification",
    fields={"vocab_size": "vocab_size", "hidden_size": "hidden_size", "num_hidden_layers": "num_layers",
            "num_attention_heads": "num_heads", "num_key_value_heads": "num_key_value_heads",
            "intermediate_size": "intermediate_size", "max_position_embeddings": "max_position_embeddings",
            "rms_norm_eps": "layer_norm_eps", "pad_token_id": "pad_token_id", "attention_dropout": "attention_dropout",
            "hidden_act": "activation", "initializer_range": "initializer_range",
            "tie_word_embeddings": "tie_word_embeddings", "rope_theta": "rope_theta",
            "attention_bias": "attention_bias", "mlp_bias": "mlp_bias", "classifier_pooling": "classifier_pooling"},
    defaults={"max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "pad_token_id": 128001, "attention_dropout": 0.0,
              "hidden_act": "silu", "initializer_range": 0.02, "tie_word_embeddings": False, "rope_theta": 10000.0,
              "attention_bias": False, "mlp_bias": False, "classifier_pooling": "late"},
    read=_eurobert_read,
    # the Hub's config.json names the authors' code beside the weights in auto_map (configuration_eurobert.py,
    # modeling_eurobert.py): the code transformers' EuroBert* classes port
    ported_code=("configuration_eurobert.EuroBertConfig", "modeling_eurobert.EuroBertModel",
                 "modeling_eurobert.EuroBertPreTrainedModel", "modeling_eurobert.EuroBertForMaskedLM",
                 "modeling_eurobert.EuroBertForSequenceClassification",
                 "modeling_eurobert.EuroBertForTokenClassification"),
    presets={
        # https://huggingface.co/EuroBERT/EuroBERT-210m/blob/main/config.json
        "eurobert-210m": {"vocab_size": 128256, **sizes(768, 12, 12, 3072), "num_key_value_heads": 12,
                          "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "pad_token_id": 128001,
                          "hidden_act": "silu", "rope_theta": 250000.0, "tie_word_embeddings": False,
                          "attention_bias": False, "mlp_bias": False},
    },
)

# EuroBertModel (modeling_eurobert.py, Llama's names): q_proj / k_proj / v_proj are our attention's query / key /
# value (fused on load into one qkv, k and v num_key_value_heads * head_dim rows each), o_proj its output;
# gate_proj / up_proj the SwiGLU's two halves (ffn.gate, the activated one, and ffn.value: nn/layers.py
# GatedFeedForward split_names), down_proj ffn.down; input_layernorm / post_attention_layernorm the pre-norms
# (RMSNorm: a weight, no bias); norm the final norm. EuroBertForMaskedLM adds lm_head (bias only with mlp_bias);
# EuroBertForSequenceClassification adds dense and classifier beside the model (no `classifier.` prefix on dense);
# EuroBertForTokenClassification classifier alone (the same `classifier.*` names: which class a checkpoint is for
# comes from its config.json's architectures).
_EUROBERT_LAYER = {
    "input_layernorm": "attention_norm", "self_attn.q_proj": "attention.query", "self_attn.k_proj": "attention.key",
    "self_attn.v_proj": "attention.value", "self_attn.o_proj": "attention.output",
    "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn.gate", "mlp.up_proj": "ffn.value",
    "mlp.down_proj": "ffn.down",
}
TABLE: dict[str, str | None] = {
    "embed_tokens.weight": "encoder.embeddings.word.weight",
    **layer_names("layers", _EUROBERT_LAYER),
    "norm.weight": "encoder.final_norm.weight",
    "lm_head.weight": "mlm_head.decoder.weight",  # EuroBertForMaskedLM's decoder, when untied (_tied_weights_keys)
    "lm_head.bias": "mlm_head.bias",
    "dense.weight": "classifier.dense.weight",
    "dense.bias": "classifier.dense.bias",
    **TOKEN_CLASSIFIER,  # classifier.{weight,bias} -> classifier.out_proj.*: the sequence head's and the token head's
}

NAMES = Names(TABLE, model_prefix="model.", mlm_prefix="lm_head.", classifier_prefixes=("dense.", "classifier."))
FORMAT = Format(CONFIG, NAMES)
