"""jina-embeddings-v3's config.json and weight names, in both layouts it is published in:

  transformers' (models/jina_embeddings_v3: configuration_jina_embeddings_v3.py, modeling_jina_embeddings_v3.py):
      model_type "jina_embeddings_v3", the rotary base in rope_parameters; the weights saved under jina's own names
      (conversion_mapping.py "jina_embeddings_v3", applied on loading and reversed on saving): XLM-RoBERTa's
      embeddings without positions, `emb_ln`, `encoder.layers.{i}.mixer.Wqkv` (Q, K, V stacked), `mixer.out_proj`,
      `norm1`, `mlp.fc1` / `fc2`, `norm2`, under `roberta.` in the classes with heads; no task adapters (the native
      port carries none).
  jina's own (the Hub's jinaai/jina-embeddings-v3, custom code of jinaai/xlm-roberta-flash-implementation:
      configuration_xlm_roberta.py XLMRobertaFlashConfig, modeling_xlm_roberta.py, modeling_lora.py XLMRobertaLoRA):
      model_type "xlm-roberta" with position_embedding_type "rotary" and rotary_emb_base, the same names, and one
      LoRA adapter per task (config.json lora_adaptations, lora_rank, lora_alpha) on every Linear and Embedding, as
      torch parametrizations: `<layer>.parametrizations.weight.original` (the weight) and
      `<layer>.parametrizations.weight.0.lora_A` / `lora_B` (every task's, stacked on the first axis).

`JINA` reads jina's layout: its config.json as transformers' (`jina_config`), and its tensors as transformers'
with one task's adapter merged into the weights (`jina_state_dict`: W + lora_alpha / lora_rank * B @ A,
modeling_lora.py LoRAParametrization.lora_forward), or none (task None: the base weights, as XLMRobertaLoRA runs
without a task).
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import CheckpointError
from ..formats import Adapters, Foreign, Format
from ..hf_config import ConfigRow, default_rope, sizes
from ..names import ALIGN_HEADS, DENSE_CLASSIFICATION_HEAD, QA_OUTPUTS, TOKEN_CLASSIFIER, Names, layer_names
from . import bert


# configuration_jina_embeddings_v3.py (JinaEmbeddingsV3Config): XLM-RoBERTa's fields and rope_parameters; its defaults
# (jina-embeddings-v3's sizes, 8194 positions, eps 1e-5, one token type, pad 1, theta 20000).
CONFIG = ConfigRow(
    model_type="jina_embeddings_v3", base_class="JinaEmbeddingsV3Model",
    classifier_class="JinaEmbeddingsV3ForSequenceClassification",
    fields={**bert.FIELDS, "rope_theta": "rope_theta"},
    defaults={**bert.CONFIG.defaults, "vocab_size": 250002, "max_position_embeddings": 8194, "type_vocab_size": 1,
              "layer_norm_eps": 1e-5, "pad_token_id": 1, "rope_theta": 20000.0},
    written={"bos_token_id": 0, "eos_token_id": 2},
    read=default_rope,
    presets={
        # https://huggingface.co/jinaai/jina-embeddings-v3/blob/main/config.json (rotary_emb_base 20000.0)
        "jina-embeddings-v3": {"vocab_size": 250002, **sizes(1024, 24, 16, 4096), "max_position_embeddings": 8194,
                               "type_vocab_size": 1, "layer_norm_eps": 1e-5, "pad_token_id": 1, "rope_theta": 20000.0},
    },
)

# JinaEmbeddingsV3Model's names as transformers saves and reads them: its conversion_mapping.py "jina_embeddings_v3"
# (applied on loading, reversed on saving) keeps jina's own on disk: emb_ln (embeddings.LayerNorm), encoder.layers.{i}
# (layers.{i}) with mixer.Wqkv (self_attn.q_proj, k_proj, v_proj stacked, as our fused attention.qkv keeps them),
# mixer.out_proj (self_attn.o_proj), norm1 (post_attention_layernorm), mlp.fc1 / fc2, norm2 (post_mlp_layernorm).
# XLMRobertaEmbeddings without its position table; the pooler and XLM-RoBERTa's heads under their own names.
_LAYER = {
    "mixer.Wqkv": "attention.qkv", "mixer.out_proj": "attention.output", "norm1": "attention_norm",
    "mlp.fc1": "ffn.up", "mlp.fc2": "ffn.down", "norm2": "ffn_norm",
}
TABLE: dict[str, str | None] = {
    "embeddings.word_embeddings.weight": "encoder.embeddings.word.weight",
    "embeddings.token_type_embeddings.weight": "encoder.embeddings.token_type.weight",
    "emb_ln.weight": "encoder.embeddings.norm.weight",
    "emb_ln.bias": "encoder.embeddings.norm.bias",
    "embeddings.position_ids": None,  # XLMRobertaEmbeddings' buffers, if an older version saved them
    "embeddings.token_type_ids": None,
    **layer_names("encoder.layers", _LAYER),
    "pooler.dense.weight": "encoder.pooler.dense.weight",
    "pooler.dense.bias": "encoder.pooler.dense.bias",
    # JinaEmbeddingsV3ForMaskedLM: lm_head (XLMRobertaLMHead)
    "lm_head.dense.weight": "mlm_head.dense.weight",
    "lm_head.dense.bias": "mlm_head.dense.bias",
    "lm_head.layer_norm.weight": "mlm_head.norm.weight",
    "lm_head.layer_norm.bias": "mlm_head.norm.bias",
    "lm_head.decoder.weight": "mlm_head.decoder.weight",
    "lm_head.bias": "mlm_head.bias",
    "lm_head.decoder.bias": "mlm_head.decoder.bias",
    **ALIGN_HEADS,
    **TOKEN_CLASSIFIER,  # JinaEmbeddingsV3ForTokenClassification (before the sequence head: roberta.py's note)
    **DENSE_CLASSIFICATION_HEAD,  # JinaEmbeddingsV3ForSequenceClassification: XLMRobertaClassificationHead
    **QA_OUTPUTS,  # JinaEmbeddingsV3ForQuestionAnswering
}
NAMES = Names(TABLE, model_prefix="roberta.", mlm_prefix="lm_head.")


# -- jina's own layout (jinaai/xlm-roberta-flash-implementation) --------------------------------------------------

def is_jina(hf: dict[str, Any]) -> bool:
    """jina's XLMRobertaFlashConfig with rotary positions: model_type "xlm-roberta", position_embedding_type
    "rotary" (its XLMRobertaModel then builds no position table and rotates Q and K in every MHA)."""
    return hf.get("model_type") == "xlm-roberta" and hf.get("position_embedding_type") == "rotary"


def jina_config(hf: dict[str, Any]) -> dict[str, Any]:
    """jina's config.json as JinaEmbeddingsV3Config's: the rotary base (rotary_emb_base) as rope_parameters; its
    custom code (auto_map) and architectures dropped, the adapters' fields left out."""
    if hf.get("rotary_emb_base") is None:
        raise ValueError("config.json: jina's rotary XLM-RoBERTa without rotary_emb_base (its rotary base)")
    foreign = ("auto_map", "architectures", "position_embedding_type", "rotary_emb_base", "model_type")
    out = {k: v for k, v in hf.items() if k not in foreign}
    return {**out, "model_type": CONFIG.model_type, "architectures": [CONFIG.base_class],
            "rope_parameters": {"rope_theta": float(hf["rotary_emb_base"]), "rope_type": "default"}}


def jina_tasks(hf: dict[str, Any]) -> tuple[str, ...]:
    """The tasks of the adapters a jina checkpoint carries, in the order they are stacked (lora_adaptations)."""
    tasks = hf.get("lora_adaptations") or ()
    if not isinstance(tasks, (list, tuple)) or not all(isinstance(t, str) for t in tasks):
        raise ValueError(f"config.json: lora_adaptations must be a list of task names, got {tasks!r}")
    return tuple(tasks)


_PARAMETRIZED = ".parametrizations.weight."  # torch.nn.utils.parametrize's names: <layer>.parametrizations.weight.*
_EMBEDDINGS = ("embeddings.word_embeddings", "embeddings.token_type_embeddings")  # the nn.Embedding layers


def lora_delta(lora_a: torch.Tensor, lora_b: torch.Tensor, scaling: float, *, embedding: bool) -> torch.Tensor:
    """One task's update of a weight, in float32 (modeling_lora.py LoRAParametrization.lora_forward): a Linear's
    (out, in) weight gains scaling * B @ A (A (rank, in), B (out, rank)); an Embedding's (num, dim) one
    scaling * A @ B (A (num, rank), B (rank, dim): its `swap`, fan_in_fan_out)."""
    a, b = lora_a.float(), lora_b.float()
    return (a @ b if embedding else b @ a) * scaling


def _adapters_of(layer: str, state_dict: dict[str, torch.Tensor], tasks: tuple[str, ...], rank: Any,
                 weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(lora_A, lora_B, whether the layer is an Embedding) of one parametrized weight, every task's stacked on the
    first axis, checked against the config (lora_adaptations, lora_rank) and the weight's shape."""
    lora_a, lora_b = (state_dict.get(f"{layer}{_PARAMETRIZED}0.lora_{x}") for x in "AB")
    if lora_a is None or lora_b is None:
        raise CheckpointError(f"{layer}: a parametrized weight without its lora_A / lora_B")
    embedding = layer.endswith(_EMBEDDINGS)
    if lora_a.dim() != 3 or lora_b.dim() != 3:
        raise CheckpointError(f"{layer}: lora_A {tuple(lora_a.shape)}, lora_B {tuple(lora_b.shape)} are not stacks of "
                              f"matrices (task, ...)")
    r = lora_a.shape[-1] if embedding else lora_a.shape[-2]
    if len(lora_a) != len(tasks) or len(lora_b) != len(tasks) or r != rank:
        raise CheckpointError(f"{layer}: lora_A {tuple(lora_a.shape)}, lora_B {tuple(lora_b.shape)} do "
                              f"not hold {len(tasks)} adapters of rank {rank} (config.json lora_rank, "
                              f"lora_adaptations)")
    rows, cols = (lora_a.shape[1], lora_b.shape[2]) if embedding else (lora_b.shape[1], lora_a.shape[2])
    if (rows, cols) != tuple(weight.shape):
        raise CheckpointError(f"{layer}: its adapters' update ({rows}, {cols}) does not fit its "
                              f"weight {tuple(weight.shape)}")
    return lora_a, lora_b, embedding


def _scaling(hf: dict[str, Any]) -> float:
    """lora_alpha / lora_rank (modeling_lora.py LoRAParametrization: scaling = alpha / rank)."""
    rank, alpha = hf.get("lora_rank"), hf.get("lora_alpha")
    if not isinstance(rank, int) or rank <= 0 or not isinstance(alpha, (int, float)):
        raise ValueError(f"config.json: lora_rank {rank!r} / lora_alpha {alpha!r}: a positive integer rank and a "
                         f"number are needed for the adapters")
    return alpha / rank


def jina_state_dict(state_dict: dict[str, torch.Tensor], hf: dict[str, Any],
                    task: str | None) -> dict[str, torch.Tensor]:
    """jina's tensors under transformers' names (TABLE's: jina's own, the parametrizations gone), `task`'s
    adapter merged into every parametrized weight (float32:
    W + lora_alpha / lora_rank * B @ A), or none (task None: the original weights, as XLMRobertaLoRA runs with
    no task). An unknown task, or adapters that do not fit the config, are errors naming them."""
    tasks = jina_tasks(hf)
    index = None
    if task is not None:
        if task not in tasks:
            raise ValueError(f"task {task!r} is not one of this checkpoint's adapters "
                             f"({', '.join(map(repr, tasks)) or 'it has none'})")
        index = tasks.index(task)
    out: dict[str, torch.Tensor] = {}
    merged = 0
    for name, tensor in state_dict.items():
        layer, found, part = name.partition(_PARAMETRIZED)
        if not found:
            out[name] = tensor
        elif part == "original":
            out[f"{layer}.weight"] = tensor
            if index is not None:
                lora_a, lora_b, embedding = _adapters_of(layer, state_dict, tasks, hf.get("lora_rank"), tensor)
                delta = lora_delta(lora_a[index], lora_b[index], _scaling(hf), embedding=embedding)
                out[f"{layer}.weight"] = tensor.float() + delta
                merged += 1
        elif part not in ("0.lora_A", "0.lora_B"):
            raise CheckpointError(f"{name}: an unknown parametrization (jina's are lora_A and lora_B)")
    if index is not None and merged == 0:
        raise CheckpointError(f"task {task!r}: the checkpoint holds no adapter weights (lora_A / lora_B), though its "
                              f"config.json names the tasks")
    return out


def jina_adapters(state_dict: dict[str, torch.Tensor], hf: dict[str, Any]) -> Adapters | None:
    """Every task's adapter kept apart from the weights, to be chosen per call (minialign/nn/lora.py): for each
    parametrized weight, under transformers' name of the weight (`<layer>.weight`), its (lora_A, lora_B,
    embedding) as jina stacks them; None where the checkpoint has no adapters."""
    tasks = jina_tasks(hf)
    layers = {}
    for name, tensor in state_dict.items():
        layer, found, part = name.partition(_PARAMETRIZED)
        if found and part == "original":
            layers[f"{layer}.weight"] = _adapters_of(layer, state_dict, tasks, hf.get("lora_rank"), tensor)
    if not layers or not tasks:
        return None
    return Adapters(tasks, _scaling(hf), layers)


JINA = Foreign("jina's XLMRobertaLoRA (jinaai/xlm-roberta-flash-implementation)", recognise=is_jina,
               config=jina_config, tasks=jina_tasks, state_dict=jina_state_dict, adapters=jina_adapters)
FORMAT = Format(CONFIG, NAMES, foreign=JINA)
