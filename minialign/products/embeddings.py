"""SentenceEncoder: sentence embeddings from sentence-transformers directories (or plain HF ones).

    emb = SentenceEncoder.from_pretrained("path/or/hub-id")
    E = emb.encode(["a sentence", "another"])          # (N, D) float32 on the CPU

The pipeline is the directory's modules.json, module by module (sentence-transformers
`SentenceTransformer.encode`): Transformer (our Encoder), Pooling (one or several modes,
concatenated in the order the config lists them), Dense (Linear + activation), Normalize.
A plain transformers directory pools by mean, as sentence-transformers does. Texts longer than
max_seq_length are cut at the end, as sentence-transformers does. Batches go through the shared
batching engine (deduplicated, sorted by length, packed).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tokenizers import normalizers

from minialign import convert
from minialign.runtime.engine import BatchEngine
from minialign.sources.hub import hub_file, looks_like_path
from minialign.loading import build, read_checkpoint, resolve_device
from minialign.models.encoder import Encoder
from minialign.text.tokenizer import Tokenizer, check_texts



# -- pooling: sentence_transformers Pooling, one formula per mode --------------------------------------

def pool(hidden: Tensor, mask: Tensor, mode: str) -> Tensor:
    """(B, C) from token states (B, L, C) under a right-padded (B, L) mask of real tokens."""
    keep = mask.unsqueeze(-1).to(hidden.dtype)  # (B, L, 1)
    if mode == "cls":
        return hidden[:, 0]
    if mode == "max":
        return hidden.masked_fill(keep == 0, float("-inf")).max(dim=1).values
    if mode in ("mean", "mean_sqrt_len_tokens"):
        total = (hidden * keep).sum(dim=1)
        count = keep.sum(dim=1).clamp(min=1e-9)
        return total / (count if mode == "mean" else count.sqrt())
    if mode == "weightedmean":  # token i (1-based) weighs i
        weights = keep * torch.arange(1, hidden.size(1) + 1, device=hidden.device, dtype=hidden.dtype)[None, :, None]
        return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
    if mode == "lasttoken":
        last = mask.sum(dim=1).long().clamp(min=1) - 1  # (B,)
        return hidden[torch.arange(hidden.size(0), device=hidden.device), last]
    raise ValueError(f"unknown pooling mode {mode!r}; choose from {convert.sbert.POOLING_MODES}")


_DENSE_ACTIVATIONS = {
    "torch.nn.modules.activation.Tanh": torch.tanh,
    "torch.nn.modules.linear.Identity": lambda x: x,
    "torch.nn.modules.activation.ReLU": F.relu,
    "torch.nn.modules.activation.GELU": F.gelu,
    "torch.nn.modules.activation.Sigmoid": torch.sigmoid,
}


class Dense(nn.Module):
    """sentence_transformers Dense: activation(W x + b)."""

    def __init__(self, weight: Tensor, bias: Tensor | None, activation: str):
        super().__init__()
        if activation not in _DENSE_ACTIVATIONS:
            raise ValueError(f"Dense activation {activation!r} is not supported; supported: {', '.join(_DENSE_ACTIVATIONS)}")
        self.linear = nn.Linear(weight.size(1), weight.size(0), bias=bias is not None)
        self.linear.load_state_dict({"weight": weight, **({"bias": bias} if bias is not None else {})}, assign=True)
        self.activation = _DENSE_ACTIVATIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.activation(self.linear(x))


class SentenceEncoder:
    def __init__(self, encoder: Encoder, tokenizer: Tokenizer, *, pooling: Sequence[str] = ("mean",),
                 dense: Sequence[Dense] = (), normalize: bool = False, max_seq_length: int | None = None,
                 batch_size: int = 32, max_tokens: int | None = None, unpad: bool = True, workers: int = 1):
        """workers: model processes on the CPU, each with cores / workers threads (workers.py)."""
        for mode in pooling:
            if mode not in convert.sbert.POOLING_MODES:
                raise ValueError(f"unknown pooling mode {mode!r}; choose from {convert.sbert.POOLING_MODES}")
        self.encoder, self.tokenizer = encoder.eval(), tokenizer
        self.pooling, self.dense, self.normalize = list(pooling), list(dense), normalize
        self.max_seq_length = min(max_seq_length or tokenizer.model_max_length, encoder.config.max_seq_len)
        self.unpad = unpad
        self.batch_size = batch_size
        self.engine = BatchEngine.for_model(tokenizer, encoder, batch_size=batch_size, packed=unpad,
                                            max_length=self.max_seq_length, max_tokens=max_tokens, workers=workers)

    @classmethod
    def from_pretrained(cls, src: str | Path, *, device: str | torch.device | None = None,
                        dtype: torch.dtype | None = None, batch_size: int = 32, max_tokens: int | None = None,
                        attn_backend: str = "sdpa", revision: str | None = None, workers: int = 1,
                        cache_dir: str | Path | None = None) -> SentenceEncoder:
        """A sentence-transformers directory (modules.json) or a plain transformers one (mean pooling)."""
        path = Path(src).expanduser()
        if not path.is_dir() and not looks_like_path(str(src)):  # a hub id: its sentence-transformers files first
            path = fetch_sentence_files(str(src), revision=revision, cache_dir=cache_dir) or path
        modules = convert.read_modules(path) if path.is_dir() else None
        pooling, dense, normalize, root = ["mean"], [], False, path
        if modules is not None:
            if not modules or modules[0][0] != "Transformer":
                raise ValueError(f"{path}/modules.json: the first module must be a Transformer")
            root, pooling = modules[0][1], []
            for kind, folder in modules[1:]:
                if kind == "Pooling":
                    pooling += convert.read_pooling(folder)
                elif kind == "Dense":
                    dense.append(Dense(**convert.read_dense(folder)))
                elif kind == "Normalize":
                    normalize = True
                else:
                    raise ValueError(f"{path}/modules.json: a second Transformer module is not supported")
            if not pooling:
                raise ValueError(f"{path}/modules.json: no Pooling module; minialign embeds pooled sentences")
        ckpt = read_checkpoint(root if modules is not None and root.is_dir() and (root / "config.json").is_file()
                               else src, revision=revision, cache_dir=cache_dir)
        encoder = build(Encoder, ckpt, device=device, dtype=dtype, attn_backend=attn_backend)
        tokenizer = Tokenizer.from_pretrained(ckpt.tokenizer_dir or src, revision=revision, cache_dir=cache_dir)
        settings = convert.read_sentence_config(root) if modules is not None else {}
        if settings.get("do_lower_case"):
            lowercase(tokenizer)
        device = resolve_device(device)
        dense = [d.to(device=device, dtype=next(encoder.parameters()).dtype) for d in dense]
        return cls(encoder, tokenizer, pooling=pooling, dense=dense, normalize=normalize,
                   max_seq_length=settings.get("max_seq_length"), batch_size=batch_size, max_tokens=max_tokens,
                   workers=workers)

    @property
    def dimension(self) -> int:
        """Size of one embedding."""
        if self.dense:
            return self.dense[-1].linear.out_features
        return self.encoder.config.hidden_size * len(self.pooling)

    @torch.inference_mode()
    def encode(self, texts: Sequence[str], *, batch_size: int | None = None, normalize_embeddings: bool = False,
               show_progress_bar: bool = False) -> Tensor:
        """(N, dimension) float32 embeddings on the CPU, row i for texts[i]."""
        texts = check_texts("texts", texts)
        if not texts:
            return torch.empty(0, self.dimension)
        embeddings = self.engine.run(texts, self._embed, progress="embedding" if show_progress_bar else False,
                                     batch_size=batch_size).values
        return F.normalize(embeddings, p=2, dim=1) if normalize_embeddings else embeddings

    def _embed(self, batch: dict[str, Tensor]) -> Tensor:
        final = "first" if self.pooling == ["cls"] else "all"
        hidden = self.encoder(**batch, unpad=self.unpad, final_tokens=final).last_hidden_state
        mask = batch["attention_mask"][:, :hidden.size(1)]
        x = torch.cat([pool(hidden, mask, mode) for mode in self.pooling], dim=-1)
        for layer in self.dense:
            x = layer(x)
        if self.normalize:
            x = F.normalize(x, p=2, dim=1)
        return x.float()


def fetch_sentence_files(repo_id: str, *, revision: str | None = None, cache_dir: str | Path | None = None) -> Path | None:
    """A hub repo's sentence-transformers files (modules.json, each module's config and weights,
    sentence_bert_config.json) and its transformers files, into the local cache; the snapshot
    directory holding them, or None when the repo has no modules.json."""
    modules = hub_file(repo_id, "modules.json", revision=revision, cache_dir=cache_dir, optional=True)
    if modules is None:
        return None
    entries = convert.read_json(modules, expect=list)
    folders = [str(e.get("path", "")) for e in entries if isinstance(e, dict) and e.get("path")]
    for name in ["sentence_bert_config.json"] + [f"{folder}/{file}" for folder in folders
                                                 for file in ("config.json", "model.safetensors", "pytorch_model.bin")]:
        hub_file(repo_id, name, revision=revision, cache_dir=cache_dir, optional=True)
    read_checkpoint(repo_id, revision=revision, cache_dir=cache_dir)  # config, weights, tokenizer beside them
    return modules.parent


def lowercase(tokenizer: Tokenizer) -> None:
    """Lowercase input first (sentence_bert_config do_lower_case), as sentence-transformers does."""
    existing = tokenizer.backend.normalizer
    parts = [normalizers.Lowercase()] + ([existing] if existing is not None else [])
    tokenizer.backend.normalizer = normalizers.Sequence(parts)
