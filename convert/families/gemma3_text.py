"""Gemma 3's text model's config.json and weight names (transformers models/gemma3/configuration_gemma3.py
Gemma3TextConfig, modeling_gemma3.py Gemma3TextModel), bidirectional as EmbeddingGemma's."""

from __future__ import annotations

from typing import Any

from ..formats import Format
from ..hf_config import ConfigRow, sizes
from ..names import Names, layer_names

LAYER_TYPES = ("sliding_attention", "full_attention")
SLIDING_WINDOW_PATTERN = 6  # Gemma3TextConfig.__post_init__: without layer_types, every 6th layer is full
# the rotary bases of each layer type (configuration_gemma3.py default_theta {"global", "local"}), by the config.json
# field that names it without rope_parameters
THETAS = {"full_attention": ("rope_theta", 1_000_000.0), "sliding_attention": ("rope_local_base_freq", 10_000.0)}


def _gemma3_read(hf: dict[str, Any]) -> dict[str, Any]:
    """transformers 5 writes the two rotary bases as rope_parameters {"full_attention": {...}, "sliding_attention":
    {...}} (Gemma3TextConfig.convert_rope_params_to_dict); the Hub's config.json files (EmbeddingGemma's) as rope_theta
    and rope_local_base_freq beside rope_scaling (null). Both become the latter; layer_types left out is the default
    pattern (sliding_window_pattern, 6: every 6th layer full). Refused, naming the field: a causal model
    (use_bidirectional_attention false: Gemma 3 the decoder; minialign runs the bidirectional encoder), a rope type
    other than "default", attention logit soft-capping."""
    hf = dict(hf)
    if not hf.get("use_bidirectional_attention"):
        raise ValueError(f"config.json: use_bidirectional_attention is {hf.get('use_bidirectional_attention')!r}: a "
                         f"causal Gemma 3 is a decoder; minialign runs the bidirectional encoder (EmbeddingGemma's, "
                         f"use_bidirectional_attention true)")
    if hf.get("attn_logit_softcapping") is not None:
        raise ValueError(f"config.json: attn_logit_softcapping {hf['attn_logit_softcapping']!r} is not supported "
                         f"(only null)")
    rope = hf.get("rope_parameters")
    if isinstance(rope, dict):
        for kind, (name, _) in THETAS.items():
            params = rope.get(kind) or {}
            if params.get("rope_type", "default") != "default":
                raise ValueError(f"config.json: rope_parameters[{kind!r}] rope_type {params['rope_type']!r} is not "
                                 f"supported (only 'default')")
            if params.get("rope_theta") is not None:
                hf[name] = params["rope_theta"]
    scaling = hf.get("rope_scaling")
    if isinstance(scaling, dict) and scaling.get("rope_type", scaling.get("type", "default")) != "default":
        raise ValueError(f"config.json: rope_scaling {scaling!r} is not supported (only the default rotary: "
                         f"rope_scaling null)")
    if hf.get("layer_types") is None and isinstance(hf.get("num_hidden_layers"), int):
        every = hf.get("sliding_window_pattern") or SLIDING_WINDOW_PATTERN
        hf["layer_types"] = ["sliding_attention" if (i + 1) % every else "full_attention"
                             for i in range(hf["num_hidden_layers"])]
    return hf


def _gemma3_write(hf: dict[str, Any]) -> dict[str, Any]:
    """The two rotary bases back as transformers 5's rope_parameters, one entry per layer type."""
    hf["rope_parameters"] = {kind: {"rope_type": "default", "rope_theta": hf.pop(name)}
                             for kind, (name, _) in THETAS.items()}
    return hf


# configuration_gemma3.py (Gemma3TextConfig): pre- and post-RMSNorm layers (Gemma's 1 + weight) with rotary
# positions, a rotary base per layer type, sliding and full layers, grouped-query attention with its own head_dim and
# query scaling, gated MLPs (gelu_pytorch_tanh), no token types; its defaults. sliding_window is config.json's
# value: under bidirectional attention a sliding layer's queries see keys with |i - j| <= sliding_window // 2
# (Gemma3TextConfig.__post_init__ makes it sliding_window // 2 + 1, an exclusive bound, and to_dict writes it back).
CONFIG = ConfigRow(
    model_type="gemma3_text", base_class="Gemma3TextModel", classifier_class="Gemma3TextForSequenceClassification",
    fields={"vocab_size": "vocab_size", "hidden_size": "hidden_size", "num_hidden_layers": "num_layers",
            "num_attention_heads": "num_heads", "num_key_value_heads": "num_key_value_heads", "head_dim": "head_dim",
            "intermediate_size": "intermediate_size", "max_position_embeddings": "max_position_embeddings",
            "rms_norm_eps": "layer_norm_eps", "pad_token_id": "pad_token_id", "attention_dropout": "attention_dropout",
            "hidden_activation": "activation", "initializer_range": "initializer_range",
            "tie_word_embeddings": "tie_word_embeddings", "rope_theta": "rope_theta",
            "rope_local_base_freq": "local_rope_theta", "sliding_window": "sliding_window",
            "layer_types": "layer_types", "query_pre_attn_scalar": "query_pre_attn_scalar",
            "attention_bias": "attention_bias"},
    defaults={"vocab_size": 262_208, "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 131_072,
              "rms_norm_eps": 1e-6, "pad_token_id": 0, "attention_dropout": 0.0, "hidden_activation": "gelu_pytorch_tanh",
              "initializer_range": 0.02, "tie_word_embeddings": True, "rope_theta": THETAS["full_attention"][1],
              "rope_local_base_freq": THETAS["sliding_attention"][1], "sliding_window": 4096,
              "query_pre_attn_scalar": 256, "attention_bias": False},
    written={"use_bidirectional_attention": True},
    read=_gemma3_read,
    write=_gemma3_write,
    presets={
        # https://huggingface.co/google/embeddinggemma-300m/blob/main/config.json
        "embeddinggemma-300m": {"vocab_size": 262_144, **sizes(768, 24, 3, 1152), "num_key_value_heads": 1,
                                "head_dim": 256, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
                                "pad_token_id": 0, "hidden_activation": "gelu_pytorch_tanh", "rope_theta": 1_000_000.0,
                                "rope_local_base_freq": 10_000.0, "sliding_window": 512, "query_pre_attn_scalar": 256,
                                "attention_bias": False, "use_bidirectional_attention": True,
                                "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 4},
    },
)

# Gemma3TextModel (modeling_gemma3.py): q_proj / k_proj / v_proj are our attention's query / key / value (fused on
# load into one qkv, k and v num_key_value_heads * head_dim rows each), o_proj its output, q_norm / k_norm the per-head
# norms; gate_proj / up_proj the gated MLP's two halves (ffn.gate, the activated one, and ffn.value), down_proj
# ffn.down; input_layernorm / post_attention_layernorm around the attention, pre_feedforward_layernorm /
# post_feedforward_layernorm around the MLP; norm the final norm. Every norm a weight alone (Gemma3RMSNorm).
# Gemma3TextForSequenceClassification (its `score` on the last token) has no head here: its names are refused.
_GEMMA3_LAYER = {
    "input_layernorm": "attention_norm", "self_attn.q_proj": "attention.query", "self_attn.k_proj": "attention.key",
    "self_attn.v_proj": "attention.value", "self_attn.o_proj": "attention.output",
    "self_attn.q_norm": "attention.q_norm", "self_attn.k_norm": "attention.k_norm",
    "post_attention_layernorm": "post_attention_norm", "pre_feedforward_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn.gate", "mlp.up_proj": "ffn.value", "mlp.down_proj": "ffn.down",
    "post_feedforward_layernorm": "post_ffn_norm",
}
TABLE: dict[str, str | None] = {
    "embed_tokens.weight": "encoder.embeddings.word.weight",
    **layer_names("layers", _GEMMA3_LAYER),
    "norm.weight": "encoder.final_norm.weight",
}

NAMES = Names(TABLE, model_prefix="model.", mlm_prefix="lm_head.", classifier_prefixes=("score.",))
FORMAT = Format(CONFIG, NAMES)
