"""Qwen2's config.json and weight names (transformers models/qwen2/configuration_qwen2.py Qwen2Config,
modeling_qwen2.py Qwen2Model): Qwen3's (convert/families/qwen3.py) without the q_norm / k_norm names, its heads
hidden_size / num_attention_heads wide, biases on q_proj / k_proj / v_proj always and none on o_proj."""

from __future__ import annotations

from ..formats import Format
from ..hf_config import ConfigRow, sizes
from ..names import Names, layer_names
from .qwen3 import LAYER, read_rotary_and_window, write_pad

# configuration_qwen2.py Qwen2Config: Qwen3's fields less head_dim and attention_bias (fixed in Qwen2Attention).
CONFIG = ConfigRow(
    model_type="qwen2", base_class="Qwen2Model", classifier_class="Qwen2ForSequenceClassification",
    fields={"vocab_size": "vocab_size", "hidden_size": "hidden_size", "num_hidden_layers": "num_layers",
            "num_attention_heads": "num_heads", "num_key_value_heads": "num_key_value_heads",
            "intermediate_size": "intermediate_size", "max_position_embeddings": "max_position_embeddings",
            "rms_norm_eps": "layer_norm_eps", "pad_token_id": "pad_token_id", "attention_dropout": "attention_dropout",
            "hidden_act": "activation", "initializer_range": "initializer_range",
            "tie_word_embeddings": "tie_word_embeddings", "rope_theta": "rope_theta",
            "use_bidirectional_attention": "use_bidirectional_attention", "pad_token_saved": "last_token_by_pad"},
    defaults={"max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "pad_token_id": 0, "attention_dropout": 0.0,
              "hidden_act": "silu", "initializer_range": 0.02, "tie_word_embeddings": False, "rope_theta": 10000.0,
              "use_bidirectional_attention": False},
    read=read_rotary_and_window, write=write_pad,
    presets={
        # https://huggingface.co/mixedbread-ai/mxbai-rerank-base-v2/blob/main/config.json (Qwen2ForCausalLM)
        "mxbai-rerank-base-v2": {"vocab_size": 151936, **sizes(896, 24, 14, 4864), "num_key_value_heads": 2,
                                 "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "hidden_act": "silu",
                                 "rope_theta": 1000000.0, "tie_word_embeddings": True},
    },
)

TABLE: dict[str, str | None] = {
    "embed_tokens.weight": "encoder.embeddings.word.weight",
    **layer_names("layers", {k: v for k, v in LAYER.items() if not k.endswith(("q_norm", "k_norm"))}),
    "norm.weight": "encoder.final_norm.weight",
    "score.weight": "classifier.out_proj.weight",  # *ForSequenceClassification's score (no bias), on the last token
    "lm_head.weight": None,  # Qwen2ForCausalLM's next-token head
}

NAMES = Names(TABLE, model_prefix="model.", mlm_prefix="lm_head.", classifier_prefixes=("score.",))
FORMAT = Format(CONFIG, NAMES)
