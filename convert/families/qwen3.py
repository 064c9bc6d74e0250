"""Qwen3's config.json and weight names (transformers models/qwen3/configuration_qwen3.py Qwen3Config,
modeling_qwen3.py Qwen3Model: Llama's names plus the per-head q_norm / k_norm)."""

from __future__ import annotations

from typing import Any

from ..formats import Format
from ..hf_config import ConfigRow, default_rope, sizes
from ..names import Names, layer_names


def read_rotary_and_window(hf: dict[str, Any]) -> dict[str, Any]:
    """What Qwen2Config and Qwen3Config share (their __post_init__): the rotary base read as hf_config.default_rope
    reads it (the embedders' and rerankers' rope_scaling is null). use_sliding_window true (some layers attend a causal window,
    layer_types "sliding_attention") is refused: minialign runs every layer over every earlier key."""
    hf = {**default_rope(hf), "pad_token_saved": hf.get("pad_token_id") is not None}  # PAD_SAVED
    if hf.get("use_sliding_window"):
        raise ValueError("config.json: use_sliding_window true is not supported (sliding-window layers); minialign "
                         "runs Qwen layers over every earlier key (use_sliding_window false)")
    if any(kind != "full_attention" for kind in hf.get("layer_types") or ()):
        raise ValueError(f"config.json: layer_types {hf['layer_types']!r} is not supported (only 'full_attention')")
    return hf


# PAD_SAVED: whether config.json names a pad token. Qwen2ForSequenceClassification finds a row's last token as the
# last whose id is not pad_token_id, and with pad_token_id null reads the last position (a batch of one); a null one
# is 0 here (the embedding's padding row), so the classifier is told to read the last real token instead
# (Config.last_token_by_pad), and an export writes null again (write_pad).


def write_pad(hf: dict[str, Any]) -> dict[str, Any]:
    """The reverse of PAD_SAVED: pad_token_id null again where config.json had none."""
    hf = dict(hf)
    if hf.pop("pad_token_saved", True) is False:
        hf["pad_token_id"] = None
    return hf


# configuration_qwen3.py Qwen3Config: pre-RMSNorm layers with rotary positions, grouped-query attention whose heads
# are head_dim wide whatever hidden_size / num_attention_heads is, per-head RMSNorms on queries and keys, SwiGLU MLPs;
# its defaults (head_dim 128, rms_norm_eps 1e-6, theta 10000 where config.json gives none, no biases, untied). Its
# pad_token_id is null in the published configs: 0 here (the embedding's padding row; no forward reads it).
# use_bidirectional_attention: no transformers field for Qwen3 (Gemma3's name for it); a checkpoint trained without
# the causal mask says so with it, and runs every key.
CONFIG = ConfigRow(
    model_type="qwen3", base_class="Qwen3Model", classifier_class="Qwen3ForSequenceClassification",
    fields={"vocab_size": "vocab_size", "hidden_size": "hidden_size", "num_hidden_layers": "num_layers",
            "num_attention_heads": "num_heads", "num_key_value_heads": "num_key_value_heads", "head_dim": "head_dim",
            "intermediate_size": "intermediate_size", "max_position_embeddings": "max_position_embeddings",
            "rms_norm_eps": "layer_norm_eps", "pad_token_id": "pad_token_id", "attention_dropout": "attention_dropout",
            "hidden_act": "activation", "initializer_range": "initializer_range",
            "tie_word_embeddings": "tie_word_embeddings", "rope_theta": "rope_theta",
            "attention_bias": "attention_bias", "use_bidirectional_attention": "use_bidirectional_attention",
            "pad_token_saved": "last_token_by_pad"},
    defaults={"max_position_embeddings": 32768, "head_dim": 128, "rms_norm_eps": 1e-6, "pad_token_id": 0,
              "attention_dropout": 0.0, "hidden_act": "silu", "initializer_range": 0.02, "tie_word_embeddings": False,
              "rope_theta": 10000.0, "attention_bias": False, "use_bidirectional_attention": False},
    read=read_rotary_and_window, write=write_pad,
    presets={
        # https://huggingface.co/Qwen/Qwen3-Embedding-0.6B/blob/main/config.json
        "qwen3-embedding-0.6b": {"vocab_size": 151669, **sizes(1024, 28, 16, 3072), "num_key_value_heads": 8,
                                 "head_dim": 128, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
                                 "hidden_act": "silu", "rope_theta": 1000000.0, "tie_word_embeddings": True,
                                 "attention_bias": False},
    },
)

# Qwen3Model (modeling_qwen3.py): q_proj / k_proj / v_proj our attention's query / key / value (fused on load into one
# qkv), o_proj its output, q_norm / k_norm the per-head RMSNorms (head_dim wide); gate_proj / up_proj the SwiGLU's two
# halves (ffn.gate, the activated one, and ffn.value), down_proj ffn.down; input_layernorm / post_attention_layernorm
# the pre-norms; norm the final norm. Qwen3ForCausalLM's lm_head (the next-token head, tied or not) is dropped: an
# encoder reads the final states (a LogitScore reranker reads its two rows: convert/sbert.py read_vocab_rows).
# Qwen3ForSequenceClassification's score: the classifier's output layer, on the last non-pad token.
LAYER = {
    "input_layernorm": "attention_norm", "self_attn.q_proj": "attention.query", "self_attn.k_proj": "attention.key",
    "self_attn.v_proj": "attention.value", "self_attn.o_proj": "attention.output",
    "self_attn.q_norm": "attention.q_norm", "self_attn.k_norm": "attention.k_norm",
    "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn.gate", "mlp.up_proj": "ffn.value",
    "mlp.down_proj": "ffn.down",
}
TABLE: dict[str, str | None] = {
    "embed_tokens.weight": "encoder.embeddings.word.weight",
    **layer_names("layers", LAYER),
    "norm.weight": "encoder.final_norm.weight",
    "score.weight": "classifier.out_proj.weight",  # *ForSequenceClassification's score (no bias), on the last token
    "lm_head.weight": None,  # Qwen3ForCausalLM's next-token head
}

NAMES = Names(TABLE, model_prefix="model.", mlm_prefix="lm_head.", classifier_prefixes=("score.",))
FORMAT = Format(CONFIG, NAMES)
