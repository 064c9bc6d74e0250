"""T5's config.json and weight names (transformers models/t5/configuration_t5.py T5Config, modeling_t5.py
T5EncoderModel / T5ForConditionalGeneration / T5ForTokenClassification): the encoder stack read, the decoder's
names known and dropped."""

from __future__ import annotations

from ..formats import Format
from ..hf_config import ConfigRow
from ..names import TOKEN_CLASSIFIER, Names, layer_names

# configuration_t5.py (T5Config): pre-RMSNorm layers without biases, a relative-position bias by bucket of j - i
# (layer 0's table, shared by every layer), an unscaled dot product, feed_forward_proj "relu" (DenseReluDense) or
# "gated-{act}" (DenseGatedActDense; "gated-gelu" runs gelu_new), no token types, no position table; its defaults.
# dense_act_fn / is_gated_act, which transformers writes too, are derived from feed_forward_proj (T5Config
# .__post_init__) and not read; n_positions (older files) bounds nothing: relative positions run at any length.
# tie_word_embeddings and the decoder's fields (num_decoder_layers, decoder_start_token_id) are not an encoder's.
CONFIG = ConfigRow(
    model_type="t5", base_class="T5EncoderModel", classifier_class="T5ForSequenceClassification",
    fields={"vocab_size": "vocab_size", "d_model": "hidden_size", "num_layers": "num_layers",
            "num_heads": "num_heads", "d_ff": "intermediate_size", "d_kv": "head_dim",
            "relative_attention_num_buckets": "relative_attention_buckets",
            "relative_attention_max_distance": "relative_attention_max_distance", "dropout_rate": "hidden_dropout",
            "layer_norm_epsilon": "layer_norm_eps", "feed_forward_proj": "feed_forward_proj",
            "pad_token_id": "pad_token_id"},
    defaults={"vocab_size": 32128, "d_kv": 64, "d_ff": 2048, "relative_attention_num_buckets": 32,
              "relative_attention_max_distance": 128, "dropout_rate": 0.1, "layer_norm_epsilon": 1e-6,
              "feed_forward_proj": "relu", "pad_token_id": 0},
    written={"eos_token_id": 1, "is_encoder_decoder": False},
    presets={
        # https://huggingface.co/google/flan-t5-base/blob/main/config.json (HHEM-2.1-open's foundation)
        "flan-t5-base": {"vocab_size": 32128, "d_model": 768, "num_layers": 12, "num_heads": 12, "d_ff": 2048,
                         "d_kv": 64, "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128,
                         "dropout_rate": 0.1, "layer_norm_epsilon": 1e-6, "feed_forward_proj": "gated-gelu",
                         "pad_token_id": 0},
    },
)

# T5Stack (modeling_t5.py) under T5EncoderModel's `encoder.`: block.{i}.layer.0 the self-attention sublayer
# (SelfAttention.q / k / v / o, no biases: our attention's query / key / value, fused on load into one qkv, and
# output; its layer_norm the pre-norm), block.{i}.layer.1 the feed-forward sublayer (DenseReluDense.wi / wo, or the
# gated wi_0 (activated: ffn.gate) and wi_1 (ffn.value); its layer_norm), final_layer_norm the final norm.
# block.0's SelfAttention.relative_attention_bias is the one table every layer reads. `shared` is the embedding
# (encoder.embed_tokens is tied to it; both names read, `shared` written back). T5ForTokenClassification holds the
# encoder under `transformer.` and its token classifier as `classifier`.
LAYER = {
    "layer.0.layer_norm": "attention_norm", "layer.0.SelfAttention.q": "attention.query",
    "layer.0.SelfAttention.k": "attention.key", "layer.0.SelfAttention.v": "attention.value",
    "layer.0.SelfAttention.o": "attention.output", "layer.1.layer_norm": "ffn_norm",
    "layer.1.DenseReluDense.wi": "ffn.up", "layer.1.DenseReluDense.wi_0": "ffn.gate",
    "layer.1.DenseReluDense.wi_1": "ffn.value", "layer.1.DenseReluDense.wo": "ffn.down",
}
# T5ForConditionalGeneration's decoder (causal self-attention with a bias table of its own in block.0, then
# cross-attention without one, then the feed-forward) and its lm_head: known and dropped here; an encoder reads none
# of them. The decoder's first step (MiniCheck-Flan-T5's) reads them through DECODER_STEP_NAMES below.
DECODER_LAYER = (*(f"layer.0.SelfAttention.{p}" for p in ("q", "k", "v", "o", "relative_attention_bias")),
                 "layer.0.layer_norm", *(f"layer.1.EncDecAttention.{p}" for p in ("q", "k", "v", "o")),
                 "layer.1.layer_norm", *(f"layer.2.DenseReluDense.{p}" for p in ("wi", "wi_0", "wi_1", "wo")),
                 "layer.2.layer_norm")
DECODER: dict[str, str | None] = {
    **{f"decoder.block.{{}}.{part}.weight": None for part in DECODER_LAYER},
    "decoder.final_layer_norm.weight": None, "decoder.embed_tokens.weight": None, "lm_head.weight": None,
}
TABLE: dict[str, str | None] = {
    "encoder.embed_tokens.weight": "encoder.embeddings.word.weight",  # tied to shared (T5EncoderModel)
    "shared.weight": "encoder.embeddings.word.weight",  # after its tied twin: the name written back
    "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight":
        "encoder.relative_position_bias.table.weight",
    **{k: v for k, v in layer_names("encoder.block", LAYER).items() if k.endswith(".weight")},  # no biases
    "encoder.final_layer_norm.weight": "encoder.final_norm.weight",
    **TOKEN_CLASSIFIER,
    **DECODER,
}

NAMES = Names(TABLE, model_prefix="transformer.", mlm_prefix="lm_head.")
FORMAT = Format(CONFIG, NAMES)

# The decoder's first position alone (models/t5.py T5DecoderStep), read from a T5ForConditionalGeneration's names
# where a product asks for it: block.{i}.layer.0 the self-attention over that one position (its softmax over one key
# is 1, so its value and output projections alone; q, k and block.0's relative_attention_bias dropped),
# block.{i}.layer.1 the cross-attention over the encoder's states (EncDecAttention.q / k / v / o, no bias table),
# block.{i}.layer.2 the feed-forward (as the encoder's), final_layer_norm, and lm_head (the label tokens' rows
# taken by the product). decoder.embed_tokens is tied to `shared`, the encoder's embedding.
DECODER_STEP_LAYER: dict[str, str | None] = {
    "layer.0.layer_norm": "self_attention_norm", "layer.0.SelfAttention.v": "self_value",
    "layer.0.SelfAttention.o": "self_output", "layer.0.SelfAttention.q": None, "layer.0.SelfAttention.k": None,
    "layer.0.SelfAttention.relative_attention_bias": None, "layer.1.layer_norm": "cross_attention_norm",
    "layer.1.EncDecAttention.q": "cross_attention.query", "layer.1.EncDecAttention.k": "cross_attention.key",
    "layer.1.EncDecAttention.v": "cross_attention.value", "layer.1.EncDecAttention.o": "cross_attention.output",
    "layer.2.layer_norm": "ffn_norm", "layer.2.DenseReluDense.wi": "ffn.up", "layer.2.DenseReluDense.wi_0": "ffn.gate",
    "layer.2.DenseReluDense.wi_1": "ffn.value", "layer.2.DenseReluDense.wo": "ffn.down",
}
DECODER_STEP: dict[str, str | None] = {
    **{f"decoder.block.{{}}.{src}.weight": None if dst is None else f"layers.{{}}.{dst}.weight"
       for src, dst in DECODER_STEP_LAYER.items()},
    "decoder.final_layer_norm.weight": "final_norm.weight", "decoder.embed_tokens.weight": None,
    "lm_head.weight": "lm_head.weight",
}
DECODER_STEP_NAMES = Names(DECODER_STEP, model_prefix="", mlm_prefix="lm_head.")


def decoder_step_config(data: dict) -> tuple[int, bool]:
    """(decoder layers, whether the decoder's output is scaled by d_model ** -0.5 before lm_head) of a T5
    config.json (configuration_t5.py T5Config.__post_init__): num_decoder_layers, else num_layers (default 6);
    scale_decoder_outputs where transformers 5 wrote it, else unless tie_word_embeddings is false (flan-t5's: an lm_head
    of its own, unscaled; modeling_t5.py T5ForConditionalGeneration.forward)."""
    layers = data.get("num_decoder_layers") or data.get("num_layers", 6)
    scale = data.get("scale_decoder_outputs")
    if scale is None:
        scale = data.get("tie_word_embeddings", True) is not False
    return int(layers), bool(scale)
