"""ModernBERT's config.json and weight names (configuration_modernbert.py, modeling_modernbert.py)."""

from __future__ import annotations

from typing import Any

from ..hf_config import ConfigRow, sizes
from ..names import Names, layer_names
from ..formats import Format

def _modernbert_read(hf: dict[str, Any]) -> dict[str, Any]:
    """transformers 5 writes ModernBERT's thetas as rope_parameters and its layer pattern as layer_types
    (configuration_modernbert.py __post_init__, convert_rope_params_to_dict); older config.json files
    (the Hub's) as global_rope_theta / local_rope_theta and global_attn_every_n_layers. Both become the
    latter; a pattern or a rope type minialign cannot run is refused, naming the field."""
    hf = dict(hf)
    # The training code's leftover (answerdotai/ModernBERT's, and the Ettin / mmBERT configs trained with it: "sans_pos"
    # or "absolute"): ModernBertConfig has no such field and its positions are rotary whatever it says.
    hf.pop("position_embedding_type", None)
    rope = hf.get("rope_parameters")
    if isinstance(rope, dict):
        for kind, name in (("full_attention", "global_rope_theta"), ("sliding_attention", "local_rope_theta")):
            params = rope.get(kind) or {}
            if params.get("rope_type", "default") != "default":
                raise ValueError(f"config.json: rope_parameters[{kind!r}] rope_type {params['rope_type']!r} is not "
                                 f"supported (only 'default')")
            if params.get("rope_theta") is not None:
                hf[name] = params["rope_theta"]
    types = hf.get("layer_types")
    if types is not None:
        layers = len(types)
        pattern = lambda n: ["sliding_attention" if i % n else "full_attention" for i in range(layers)]  # noqa: E731
        given = hf.get("global_attn_every_n_layers")
        choices = ([given] if isinstance(given, int) and given > 0 else []) + list(range(1, layers + 2))
        every = next((n for n in choices if pattern(n) == list(types)), None)
        if every is None:
            raise ValueError(f"config.json: layer_types {types!r} is not a global layer every n layers (layer i "
                             f"global iff i % n == 0), the only pattern minialign runs")
        hf["global_attn_every_n_layers"] = every
    return hf


# configuration_modernbert.py (ModernBertConfig): its own names, pre-LN layers with rotary positions, a global
# layer every global_attn_every_n_layers (the others attend |i - j| <= local_attention // 2), GeGLU MLPs, no
# token types; its defaults (biases off, norm_eps 1e-5, thetas 160000 / 10000, window 128, every 3rd global).
CONFIG = ConfigRow(
    model_type="modernbert", base_class="ModernBertModel", classifier_class="ModernBertForSequenceClassification",
    fields={"vocab_size": "vocab_size", "hidden_size": "hidden_size", "num_hidden_layers": "num_layers",
            "num_attention_heads": "num_heads", "intermediate_size": "intermediate_size",
            "max_position_embeddings": "max_position_embeddings", "norm_eps": "layer_norm_eps",
            "pad_token_id": "pad_token_id", "embedding_dropout": "hidden_dropout",
            "attention_dropout": "attention_dropout", "mlp_dropout": "mlp_dropout",
            "hidden_activation": "activation", "initializer_range": "initializer_range",
            "tie_word_embeddings": "tie_word_embeddings", "global_rope_theta": "rope_theta",
            "local_rope_theta": "local_rope_theta", "local_attention": "local_attention",
            "global_attn_every_n_layers": "global_attn_every_n_layers", "attention_bias": "attention_bias",
            "mlp_bias": "mlp_bias", "norm_bias": "norm_bias", "classifier_bias": "classifier_bias", "decoder_bias": "decoder_bias",
            "classifier_activation": "classifier_activation", "classifier_pooling": "classifier_pooling"},
    defaults={"max_position_embeddings": 8192, "norm_eps": 1e-5, "pad_token_id": 50283, "embedding_dropout": 0.0,
              "attention_dropout": 0.0, "mlp_dropout": 0.0, "hidden_activation": "gelu", "initializer_range": 0.02,
              "tie_word_embeddings": True, "global_rope_theta": 160000.0, "local_rope_theta": 10000.0,
              "local_attention": 128, "global_attn_every_n_layers": 3, "attention_bias": False, "mlp_bias": False,
              "norm_bias": False, "classifier_bias": False, "decoder_bias": True, "classifier_activation": "gelu",
              "classifier_pooling": "cls", "classifier_dropout": 0.0},
    read=_modernbert_read,
    presets={
        # https://huggingface.co/answerdotai/ModernBERT-base/blob/main/config.json
        "modernbert-base": {"vocab_size": 50368, **sizes(768, 22, 12, 1152), "max_position_embeddings": 8192,
                            "norm_eps": 1e-5, "pad_token_id": 50283, "global_rope_theta": 160000.0,
                            "local_rope_theta": 10000.0, "local_attention": 128, "global_attn_every_n_layers": 3},
    },
)

# ModernBertModel (modeling_modernbert.py): its own names, no positions or token types; Wqkv is one fused
# projection (q, k, v stacked on the output axis, as our attention.qkv: that layer keeps the fused name),
# Wi the GeGLU's fused input and gate; attn_norm is absent from layer 0 (an Identity there); final_norm after
# the stack. ModernBertForSequenceClassification's head (dense -> activation -> norm) and classifier keep
# their names under `classifier.`; ModernBertForMaskedLM shares that head (transformers loads an MLM checkpoint's
# head.* into the classifier's, as here; minialign's MaskedLMModel reads it there, heads.py MaskedLM.at) and adds
# the decoder (its weight tied to tok_embeddings, its bias as decoder_bias says).
_MODERNBERT_LAYER = {
    "attn_norm": "attention_norm", "attn.Wqkv": "attention.qkv", "attn.Wo": "attention.output",
    "mlp_norm": "ffn_norm", "mlp.Wi": "ffn.up", "mlp.Wo": "ffn.down",
}
TABLE: dict[str, str | None] = {
    "embeddings.tok_embeddings.weight": "encoder.embeddings.word.weight",
    "embeddings.norm.weight": "encoder.embeddings.norm.weight",
    "embeddings.norm.bias": "encoder.embeddings.norm.bias",
    **layer_names("layers", _MODERNBERT_LAYER),
    "final_norm.weight": "encoder.final_norm.weight",
    "final_norm.bias": "encoder.final_norm.bias",
    **{f"head.{m}.{p}": f"classifier.{m}.{p}" for m in ("dense", "norm") for p in ("weight", "bias")},
    "classifier.weight": "classifier.out_proj.weight",
    "classifier.bias": "classifier.out_proj.bias",
    "decoder.weight": "mlm_head.decoder.weight",  # ModernBertForMaskedLM's decoder, when untied (_tied_weights_keys)
    "decoder.bias": "mlm_head.bias",
}

NAMES = Names(TABLE, model_prefix="model.", mlm_prefix="decoder.", classifier_prefixes=("head.", "classifier."))
FORMAT = Format(CONFIG, NAMES)
