"""FlagEmbedding's BGE-M3 heads: the two Linear layers it keeps beside the XLM-RoBERTa checkpoint, read as
plain tensors (FlagEmbedding itself is never imported), from a directory or any `Files`.

Files (FlagEmbedding finetune/embedder/encoder_only/m3/modeling.py, EncoderOnlyEmbedderM3Model.save, writes
them with torch.save of each Linear's state_dict; runner.py, EncoderOnlyEmbedderM3Runner.get_model, reads them):
  sparse_linear.pt    {"weight": (1, hidden), "bias": (1,)}           Linear(hidden, 1): each token's weight
  colbert_linear.pt   {"weight": (dim, hidden), "bias": (dim,)}       Linear(hidden, dim): each token's vector
                                                                      (dim = hidden for BAAI/bge-m3)
Each is unpickled with torch.load(weights_only=True) or the restricted unpickler (pickles.py), never with
code a file names.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .errors import CheckpointError
from .files import Files, as_files, read_state_dict

M3_HEADS = {"sparse": "sparse_linear.pt", "colbert": "colbert_linear.pt"}  # head -> the file FlagEmbedding names


def read_m3_heads(where: str | Path | Files, hidden_size: int) -> dict[str, dict[str, torch.Tensor] | None]:
    """Each M3 head ("sparse", "colbert") as {"weight", "bias"}, or None where its file is absent (FlagEmbedding
    then initialises the head at random, for training: get_model's log line; a reader decides what an absent
    head means). A file with other names or shapes than a Linear over `hidden_size` inputs is a
    CheckpointError naming the file and what it holds."""
    files = as_files(where)
    heads: dict[str, dict[str, torch.Tensor] | None] = {}
    for head, name in M3_HEADS.items():
        path = files.file(name, optional=True)
        if path is None:
            heads[head] = None
            continue
        tensors = read_state_dict(path)
        if set(tensors) != {"weight", "bias"}:
            raise CheckpointError(f"{path}: a Linear's state dict has weight and bias, found {sorted(tensors)}")
        weight, bias = tensors["weight"], tensors["bias"]
        out = 1 if head == "sparse" else weight.size(0)
        if weight.dim() != 2 or tuple(weight.shape) != (out, hidden_size) or tuple(bias.shape) != (out,):
            raise CheckpointError(f"{path}: weight {tuple(weight.shape)} and bias {tuple(bias.shape)} do not fit a "
                                  f"Linear({hidden_size}, {'1' if head == 'sparse' else 'dim'}) over the model's "
                                  f"{hidden_size}-wide states")
        heads[head] = {"weight": weight, "bias": bias}
    return heads
