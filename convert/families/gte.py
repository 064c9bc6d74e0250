"""GTE's config.json and weight names (transformers models/gte: configuration_gte.py, modeling_gte.py; the
original Alibaba-NLP/new-impl modeling.py "NewModel", whose names transformers converts on load:
conversion_mapping.py "gte")."""

from __future__ import annotations

from typing import Any

from ..hf_config import ConfigRow, sizes
from ..names import Names, TOKEN_CLASSIFIER, layer_names
from ..formats import Format

ROPE_TYPES = ("default", "linear")  # the rope types minialign runs (nn/rotary.py); the original's "ntk" is read as linear


def _gte_read(hf: dict[str, Any]) -> dict[str, Any]:
    """transformers 5 writes GTE's rope as rope_parameters {"rope_type", "rope_theta", "factor"}
    (configuration_gte.py; modeling_rope_utils.py standardize_rope_params); the original config.json
    (Alibaba-NLP/new-impl configuration.py NewConfig) as rope_theta and rope_scaling {"type": "ntk", "factor"},
    a fixed NTK scaling, which is the linear rope type over base * factor with factor^(2 / head_dim)
    (transformers' model_doc/gte.md; minialign/nn/rotary.py ntk_as_linear). Both become rope_theta, rope_type and
    rope_factor. The original's fields that change the model are checked: position_embedding_type "rope",
    layer_norm_type "layer_norm", no logn attention scale, no mixed NTK (mixed_b); its speed flags (unpad_inputs,
    use_memory_efficient_attention, pack_qkv) are not."""
    hf = dict(hf)
    given = hf.pop("position_embedding_type", "rope")
    if given != "rope":
        raise ValueError(f"config.json: position_embedding_type {given!r} is not supported (GTE's positions are "
                         f"rotary: 'rope')")
    if hf.get("layer_norm_type", "layer_norm") != "layer_norm":
        raise ValueError(f"config.json: layer_norm_type {hf['layer_norm_type']!r} is not supported (only "
                         f"'layer_norm')")
    if hf.get("logn_attention_scale"):
        raise ValueError("config.json: logn_attention_scale is not supported")
    rope = hf.get("rope_parameters")
    scaling = hf.get("rope_scaling")
    if not isinstance(rope, dict):
        rope = {"rope_theta": hf.get("rope_theta", DEFAULT_THETA), **(scaling if isinstance(scaling, dict) else {})}
    kind = rope.get("rope_type", rope.get("type", "default"))
    theta, factor = rope.get("rope_theta", hf.get("rope_theta", DEFAULT_THETA)), rope.get("factor")
    if kind == "ntk":
        if rope.get("mixed_b") is not None:
            raise ValueError("config.json: rope_scaling mixed_b (mixed NTK scaling) is not supported")
        dim = hf["hidden_size"] // hf["num_attention_heads"]
        kind, theta, factor = "linear", theta * factor, factor ** (2 / dim)  # nn/rotary.py ntk_as_linear
    if kind not in ROPE_TYPES:
        raise ValueError(f"config.json: rope_type {kind!r} is not supported (only {ROPE_TYPES}, and the original's "
                         f"'ntk')")
    hf.update(rope_theta=theta, rope_type=kind, rope_factor=factor if kind == "linear" else None)
    return hf


def _gte_write(hf: dict[str, Any]) -> dict[str, Any]:
    """rope_theta / rope_type / rope_factor back as transformers 5's rope_parameters."""
    rope = {"rope_type": hf.pop("rope_type", "default"), "rope_theta": hf.pop("rope_theta")}
    factor = hf.pop("rope_factor", None)
    if factor is not None:
        rope["factor"] = factor
    hf["rope_parameters"] = rope
    return hf


DEFAULT_THETA = 160000.0  # configuration_gte.py GteConfig.default_theta

# configuration_gte.py (GteConfig): BERT's field names, post-LN GLU layers with rotary positions, no position table;
# type_vocab_size 0 (gte-base-en-v1.5) means no token types.
CONFIG = ConfigRow(
    model_type="gte", base_class="GteModel", classifier_class="GteForSequenceClassification",
    fields={"vocab_size": "vocab_size", "hidden_size": "hidden_size", "num_hidden_layers": "num_layers",
            "num_attention_heads": "num_heads", "intermediate_size": "intermediate_size",
            "max_position_embeddings": "max_position_embeddings", "type_vocab_size": "type_vocab_size",
            "layer_norm_eps": "layer_norm_eps", "pad_token_id": "pad_token_id",
            "hidden_dropout_prob": "hidden_dropout", "attention_probs_dropout_prob": "attention_dropout",
            "hidden_act": "activation", "initializer_range": "initializer_range",
            "tie_word_embeddings": "tie_word_embeddings", "rope_theta": "rope_theta", "rope_type": "rope_type",
            "rope_factor": "rope_factor"},
    defaults={"vocab_size": 250048, "max_position_embeddings": 8192, "type_vocab_size": 1, "layer_norm_eps": 1e-12,
              "pad_token_id": 1, "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.0, "hidden_act": "gelu",
              "initializer_range": 0.02, "tie_word_embeddings": True},
    read=_gte_read,
    write=_gte_write,
    # the Hub's gte-v1.5 / gte-multilingual config.json names Alibaba-NLP/new-impl's code in auto_map (configuration.py,
    # modeling.py): the code transformers' Gte* classes port (conversion_mapping.py "gte")
    ported_code=("configuration.NewConfig", "modeling.NewModel", "modeling.NewForMaskedLM",
                 "modeling.NewForSequenceClassification", "modeling.NewForTokenClassification",
                 "modeling.NewForMultipleChoice", "modeling.NewForQuestionAnswering"),
    presets={
        # https://huggingface.co/Alibaba-NLP/gte-base-en-v1.5/blob/main/config.json (model_type "new" there)
        "gte-base-en-v1.5": {"vocab_size": 30528, **sizes(768, 12, 12, 3072), "max_position_embeddings": 8192,
                             "type_vocab_size": 0, "layer_norm_eps": 1e-12, "pad_token_id": 0,
                             "rope_theta": 500000, "rope_scaling": {"type": "ntk", "factor": 2.0}},
        # https://huggingface.co/Alibaba-NLP/gte-large-en-v1.5/blob/main/config.json (model_type "new" there)
        "gte-large-en-v1.5": {"vocab_size": 30528, **sizes(1024, 24, 16, 4096), "max_position_embeddings": 8192,
                              "type_vocab_size": 2, "layer_norm_eps": 1e-12, "pad_token_id": 0,
                              "rope_theta": 160000, "rope_scaling": {"type": "ntk", "factor": 2.0}},
    },
)

# GteModel (modeling_gte.py): no position table; q/k/v apart (our attention's split names), GteMLP's gate_proj (the
# activated half) and up_proj as the GLU's gate / value (split names), no bias on either, down_proj with one;
# post_attention_layernorm / post_mlp_layernorm after each residual (post-LN); the pooler only under
# GteForSequenceClassification.
_NATIVE_LAYER = {
    "self_attn.q_proj": "attention.query", "self_attn.k_proj": "attention.key", "self_attn.v_proj": "attention.value",
    "self_attn.o_proj": "attention.output", "post_attention_layernorm": "attention_norm",
    "mlp.gate_proj": "ffn.gate", "mlp.up_proj": "ffn.value", "mlp.down_proj": "ffn.down",
    "post_mlp_layernorm": "ffn_norm",
}
# The original NewModel's names (Alibaba-NLP/new-impl modeling.py; conversion_mapping.py "gte" renames them):
# qkv_proj fused q, k, v (our fused qkv), up_gate_proj the GLU's halves stacked [up; gate] (our up, whose second
# half is the activated one), attn_ln / mlp_ln; checkpoints of its heads under `new.` (NewForMaskedLM's lm_head.norm).
_ORIGINAL_LAYER = {
    "attention.qkv_proj": "attention.qkv", "attention.o_proj": "attention.output", "attn_ln": "attention_norm",
    "mlp.up_gate_proj": "ffn.up", "mlp.down_proj": "ffn.down", "mlp_ln": "ffn_norm",
}
_EMBEDDINGS = {
    "embeddings.word_embeddings.weight": "encoder.embeddings.word.weight",
    "embeddings.token_type_embeddings.weight": "encoder.embeddings.token_type.weight",
    "embeddings.LayerNorm.weight": "encoder.embeddings.norm.weight",
    "embeddings.LayerNorm.bias": "encoder.embeddings.norm.bias",
    "pooler.dense.weight": "encoder.pooler.dense.weight",
    "pooler.dense.bias": "encoder.pooler.dense.bias",
}
_ORIGINAL = {
    **_EMBEDDINGS,
    "embeddings.position_ids": None,  # NewEmbeddings' buffers, should a checkpoint hold them
    "embeddings.rotary_emb.inv_freq": None,
    "embeddings.rotary_emb.cos_cached": None,
    "embeddings.rotary_emb.sin_cached": None,
    **layer_names("encoder.layer", _ORIGINAL_LAYER),
    "lm_head.norm.weight": "mlm_head.norm.weight",
    "lm_head.norm.bias": "mlm_head.norm.bias",
}
# GteLMHead: dense -> gelu -> layer_norm -> decoder, the decoder's bias the head's (no separate `bias`).
_HEADS = {
    "lm_head.dense.weight": "mlm_head.dense.weight",
    "lm_head.dense.bias": "mlm_head.dense.bias",
    "lm_head.layer_norm.weight": "mlm_head.norm.weight",
    "lm_head.layer_norm.bias": "mlm_head.norm.bias",
    "lm_head.decoder.weight": "mlm_head.decoder.weight",
    "lm_head.decoder.bias": "mlm_head.bias",
    # GteForSequenceClassification (pooler -> dropout -> classifier) and GteForTokenClassification (dropout ->
    # classifier): the one output layer, named alike
    **TOKEN_CLASSIFIER,
}
# The original's names first, transformers' last: the inverse (export) writes transformers' names.
TABLE: dict[str, str | None] = {
    **{f"new.{name}": ours for name, ours in _ORIGINAL.items()},
    **_ORIGINAL,
    **_EMBEDDINGS,
    **layer_names("layers", _NATIVE_LAYER),
    "rotary_emb.inv_freq": None,  # GteRotaryEmbedding's buffers (non-persistent: _keys_to_ignore_on_load_unexpected)
    "rotary_emb.original_inv_freq": None,
    **_HEADS,
}

# The original's fused tensors as the model's split names (conversion_mapping.py "gte": Chunk(dim=0) into q, k, v
# and into [up_proj, gate_proj]).
FUSED = (("attention.qkv", ("attention.query", "attention.key", "attention.value")),
         ("ffn.up", ("ffn.value", "ffn.gate")))
NAMES = Names(TABLE, model_prefix="gte.", mlm_prefix="lm_head.", fused=FUSED)
FORMAT = Format(CONFIG, NAMES)
