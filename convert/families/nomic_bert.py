"""NomicBERT's config.json and weight names (transformers models/nomic_bert: configuration_nomic_bert.py,
modeling_nomic_bert.py, and conversion_mapping.py's "nomic_bert" renames, which map the names nomic's own code
saved onto the port's: save_pretrained writes nomic's names back, so both the Hub's checkpoints and transformers'
own directories hold them)."""

from __future__ import annotations

from typing import Any

from ..hf_config import ConfigRow, default_rope
from ..names import ALIGN_HEADS, QA_OUTPUTS, Names, layer_names
from ..formats import Format

# The Hub's config.json (nomic's configuration_hf_nomic_bert.py, a GPT2Config) -> transformers 5's names.
_HUB_NAMES = {"n_embd": "hidden_size", "n_layer": "num_hidden_layers", "n_head": "num_attention_heads",
              "n_inner": "intermediate_size", "n_positions": "max_position_embeddings",
              "layer_norm_epsilon": "layer_norm_eps", "resid_pdrop": "hidden_dropout_prob",
              "attn_pdrop": "attention_probs_dropout_prob", "rotary_emb_base": "rope_theta"}
# nomic's gated MLPs by activation_function (contrastors' NomicBertGatedMLP: fc12 activated); the plain ones
# (fc1 / fc2) are not this port's
_GATED = {"swiglu": "silu"}
# The Hub's switches whose other value is an architecture transformers' port does not run: (field, the value
# it runs). rotary_scaling_factor set means dynamic NTK scaling past max_trained_positions, which the port ignores.
_HUB_FIXED = (("prenorm", False), ("parallel_block", False), ("use_rms_norm", False), ("causal", False),
              ("qkv_proj_bias", False), ("mlp_fc1_bias", False), ("mlp_fc2_bias", False),
              ("rotary_emb_fraction", 1.0), ("rotary_emb_interleaved", False), ("rotary_scaling_factor", None),
              ("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False))


def _nomic_bert_read(hf: dict[str, Any]) -> dict[str, Any]:
    """transformers 5 writes the rotary base as rope_parameters (configuration_nomic_bert.py, default_theta 1000);
    the Hub's nomic-embed-text files spell their config as nomic's GPT2-style NomicBertConfig (n_embd, n_layer,
    rotary_emb_base, activation_function "swiglu", ...), which transformers' NomicBertConfig does not read (it
    keeps its defaults, nomic-embed-text-v1.5's sizes). Both become transformers' names here; a value of a
    switch the port has no code for is refused, naming the field."""
    hf = dict(hf)
    for field, runs in _HUB_FIXED:
        if field in hf and hf[field] != runs:
            raise ValueError(f"config.json: {field} {hf[field]!r} is not supported (NomicBERT as transformers runs "
                             f"it has {runs!r})")
    if "activation_function" in hf:
        act = hf["activation_function"]
        if act not in _GATED:
            raise ValueError(f"config.json: activation_function {act!r} is not supported (only {tuple(_GATED)}: "
                             f"the gated feed-forward transformers' NomicBertMLP runs)")
        hf.setdefault("hidden_act", _GATED[act])
    for hub, ours in _HUB_NAMES.items():
        if hub in hf and ours not in hf:
            hf[ours] = hf[hub]
    if "n_embd" in hf and hf.get("intermediate_size") is None:  # GPT2Config: n_inner None is 4 * n_embd
        hf["intermediate_size"] = 4 * hf["hidden_size"]
    hf = default_rope(hf)  # transformers 5's rope_parameters or the Hub's rope_theta, a scaled rotary refused
    head_dim = hf.get("head_dim")
    if head_dim is not None and hf.get("hidden_size") and hf.get("num_attention_heads") \
            and head_dim * hf["num_attention_heads"] != hf["hidden_size"]:
        raise ValueError(f"config.json: head_dim {head_dim!r} is not hidden_size / num_attention_heads "
                         f"({hf['hidden_size']} / {hf['num_attention_heads']}), the only width minialign runs")
    return hf


# configuration_nomic_bert.py (NomicBertConfig): BERT's names and defaults where it keeps them (BertConfig is what
# modular_nomic_bert.py derives it from), its own defaults (nomic-embed-text-v1.5's sizes, silu, no dropout, 2048
# positions, rope_theta 1000); no absolute positions (the max_position_embeddings it keeps bounds nothing).
CONFIG = ConfigRow(
    model_type="nomic_bert", base_class="NomicBertModel", classifier_class="NomicBertForSequenceClassification",
    fields={"vocab_size": "vocab_size", "hidden_size": "hidden_size", "num_hidden_layers": "num_layers",
            "num_attention_heads": "num_heads", "intermediate_size": "intermediate_size",
            "max_position_embeddings": "max_position_embeddings", "type_vocab_size": "type_vocab_size",
            "layer_norm_eps": "layer_norm_eps", "pad_token_id": "pad_token_id",
            "hidden_dropout_prob": "hidden_dropout", "attention_probs_dropout_prob": "attention_dropout",
            "hidden_act": "activation", "initializer_range": "initializer_range",
            "tie_word_embeddings": "tie_word_embeddings", "rope_theta": "rope_theta"},
    defaults={"vocab_size": 30528, "max_position_embeddings": 2048, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
              "pad_token_id": 0, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
              "hidden_act": "silu", "initializer_range": 0.02, "tie_word_embeddings": True, "rope_theta": 1000.0},
    read=_nomic_bert_read,
    # the Hub's checkpoints name nomic's own code in auto_map (configuration_hf_nomic_bert / modeling_hf_nomic_bert,
    # in nomic-ai/nomic-bert-2048 and its descendants): the code transformers' NomicBert* classes port
    ported_code=("configuration_hf_nomic_bert.NomicBertConfig", "modeling_hf_nomic_bert.NomicBertModel",
                 "modeling_hf_nomic_bert.NomicBertForPreTraining",
                 "modeling_hf_nomic_bert.NomicBertForSequenceClassification"),
    presets={
        # https://huggingface.co/nomic-ai/nomic-embed-text-v1.5/blob/main/config.json (nomic's spelling, read above)
        "nomic-embed-text-v1.5": {"vocab_size": 30528, "n_embd": 768, "n_layer": 12, "n_head": 12, "n_inner": 3072,
                                  "n_positions": 8192, "layer_norm_epsilon": 1e-12, "rotary_emb_base": 1000,
                                  "activation_function": "swiglu", "type_vocab_size": 2, "attn_pdrop": 0.0,
                                  "resid_pdrop": 0.0},
    },
)

# NomicBertModel's names as nomic's code saved them (conversion_mapping.py "nomic_bert": emb_ln ->
# embeddings.LayerNorm, encoder.layers -> layers, attn.Wqkv -> q/k/v_proj chunked on dim 0, attn.out_proj ->
# o_proj, fc11 -> up_proj, fc12 -> gate_proj (NomicBertMLP: down(act(gate) * up): fc12 is the activated half),
# fc2 -> down_proj, norm1 / norm2 -> post_attention_layernorm / post_mlp_layernorm). No biases in the layers.
# Wqkv stays fused (attention.qkv); fc12 / fc11 are GatedFeedForward's gate / value (split_names).
_NOMIC_LAYER = {"attn.Wqkv": "attention.qkv", "attn.out_proj": "attention.output", "norm1": "attention_norm",
                "mlp.fc12": "ffn.gate", "mlp.fc11": "ffn.value", "mlp.fc2": "ffn.down", "norm2": "ffn_norm"}
TABLE: dict[str, str | None] = {
    "embeddings.word_embeddings.weight": "encoder.embeddings.word.weight",
    "embeddings.token_type_embeddings.weight": "encoder.embeddings.token_type.weight",
    "emb_ln.weight": "encoder.embeddings.norm.weight",
    "emb_ln.bias": "encoder.embeddings.norm.bias",
    **layer_names("encoder.layers", _NOMIC_LAYER),
    # NomicBertForSequenceClassification's NomicBertPooler (the bare NomicBertModel has none)
    "pooler.dense.weight": "encoder.pooler.dense.weight",
    "pooler.dense.bias": "encoder.pooler.dense.bias",
    # NomicBertForMaskedLM: cls.predictions (BERT's head, its transform's norm named layer_norm)
    "cls.predictions.transform.dense.weight": "mlm_head.dense.weight",
    "cls.predictions.transform.dense.bias": "mlm_head.dense.bias",
    "cls.predictions.transform.layer_norm.weight": "mlm_head.norm.weight",
    "cls.predictions.transform.layer_norm.bias": "mlm_head.norm.bias",
    "cls.predictions.decoder.weight": "mlm_head.decoder.weight",  # tied to the word embeddings unless untied
    "cls.predictions.bias": "mlm_head.bias",
    "cls.predictions.decoder.bias": "mlm_head.decoder.bias",  # as BERT's (convert/families/bert.py)
    **ALIGN_HEADS,
    # NomicBertForSequenceClassification / NomicBertForTokenClassification: dropout -> classifier
    "classifier.weight": "classifier.out_proj.weight",
    "classifier.bias": "classifier.out_proj.bias",
    **QA_OUTPUTS,  # BERT's qa_outputs: transformers has no NomicBertForQuestionAnswering (minialign's own layout)
}

NAMES = Names(TABLE, model_prefix="nomic_bert.", mlm_prefix="cls.predictions.")
FORMAT = Format(CONFIG, NAMES)
