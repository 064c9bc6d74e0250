"""SentenceEncoder: sentence embeddings from sentence-transformers directories (or plain HF ones).

    emb = SentenceEncoder.from_pretrained("path/or/hub-id")
    E = emb.encode(["a sentence", "another"])          # (N, D) float32 on the CPU

The pipeline is the directory's modules.json, module by module (sentence-transformers
`SentenceTransformer.encode`): Transformer (our Encoder), Pooling (one or several modes,
concatenated in the order the config lists them), Dense (Linear + activation), Normalize.
A plain transformers directory pools by mean, as sentence-transformers does. Texts longer than
max_seq_length are cut at the end, as sentence-transformers does, and the cut is reported as by
every runner (products/runner.py). Pooling, every mode of it, is products/pooling.py's. Batches go
through the shared batching engine (deduplicated, sorted by length, packed).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tokenizers import normalizers

from minialign import convert
from minialign.nn.activations import ACTIVATIONS, TORCH_MODULES
from minialign.products import pooling as pooling_modes
from minialign.products.runner import Runner
from minialign.runtime.engine import Truncation
from minialign.sources import resolve
from minialign.loading import build, read_checkpoint, resolve_device
from minialign.models.encoder import Encoder
from minialign.text.tokenizer import Tokenizer
from minialign.text.validation import check_texts


class Dense(nn.Module):
    """sentence_transformers Dense: activation(W x + b)."""

    def __init__(self, weight: Tensor, bias: Tensor | None, activation: str):
        super().__init__()
        if activation not in TORCH_MODULES:  # the class path it saved
            raise ValueError(f"Dense activation {activation!r} is not supported; supported: {', '.join(TORCH_MODULES)}")
        self.linear = nn.Linear(weight.size(1), weight.size(0), bias=bias is not None)
        self.linear.load_state_dict({"weight": weight, **({"bias": bias} if bias is not None else {})}, assign=True)
        self.activation = ACTIVATIONS[TORCH_MODULES[activation]]

    def forward(self, x: Tensor) -> Tensor:
        return self.activation(self.linear(x))


class SentenceEncoder(Runner):
    truncation_unit, truncation_like = "text(s)", "sentence-transformers"
    progress_label = "embedding"

    def __init__(self, encoder: Encoder, tokenizer: Tokenizer, *, pooling: Sequence[str] = ("mean",),
                 dense: Sequence[Dense] = (), normalize: bool = False, max_seq_length: int | None = None,
                 batch_size: int = 32, max_tokens: int | None = None, unpad: bool = True, workers: int = 1,
                 compile: bool = False):
        """pooling: modes of products/pooling.py, concatenated in order; dense: Dense modules after it;
        normalize: a Normalize module last. The other options: Runner._start."""
        self.pooling, self.dense, self.normalize = pooling_modes.check(pooling), list(dense), normalize
        self._start(encoder, tokenizer, max_length=max_seq_length, batch_size=batch_size, max_tokens=max_tokens,
                    unpad=unpad, compile=compile, workers=workers)

    @classmethod
    def from_pretrained(cls, src: str | Path, *, device: str | torch.device | None = None,
                        dtype: torch.dtype | None = None, batch_size: int = 32, max_tokens: int | None = None,
                        attn_backend: str = "sdpa", revision: str | None = None, workers: int = 1,
                        cache_dir: str | Path | None = None, tokenizer: str | Path | Tokenizer | None = None,
                        compile: bool = False, unpad: bool = True) -> SentenceEncoder:
        """A sentence-transformers directory (modules.json) or a plain transformers one (mean pooling).
        The keywords every runner takes are products/runner.py's (LOAD_KEYWORDS)."""
        source = resolve(src, revision=revision, cache_dir=cache_dir)  # every file below is read from it
        modules = convert.read_modules(source)
        pooling, dense, normalize, model, settings = ["mean"], [], False, source, {}
        if modules is not None:
            if not modules or modules[0][0] != "Transformer":
                raise ValueError(f"{source}/modules.json: the first module must be a Transformer")
            pooling = []
            for kind, folder in modules[1:]:
                if kind == "Pooling":
                    pooling += pooling_modes.read(source, folder)
                elif kind == "Dense":
                    dense.append(Dense(**convert.read_dense(source, folder)))
                elif kind == "Normalize":
                    normalize = True
                else:
                    raise ValueError(f"{source}/modules.json: a second Transformer module is not supported")
            if not pooling:
                raise ValueError(f"{source}/modules.json: no Pooling module; minialign embeds pooled sentences")
            inner = source.subfolder(modules[0][1])  # an old layout keeps the Transformer in 0_Transformer/
            model = inner if inner.file("config.json", optional=True) else source
            settings = convert.read_sentence_config(inner)
        ckpt = read_checkpoint(model)
        encoder = build(Encoder, ckpt, device=device, dtype=dtype, attn_backend=attn_backend)
        if not isinstance(tokenizer, Tokenizer):
            tokenizer = Tokenizer.from_pretrained(tokenizer or ckpt.tokenizer or model, revision=revision, cache_dir=cache_dir)
        if settings.get("do_lower_case"):
            lowercase(tokenizer)
        device = resolve_device(device)
        dense = [d.to(device=device, dtype=next(encoder.parameters()).dtype) for d in dense]
        embedder = cls(encoder, tokenizer, pooling=pooling, dense=dense, normalize=normalize,
                       max_seq_length=settings.get("max_seq_length"), batch_size=batch_size, max_tokens=max_tokens,
                       workers=workers, compile=compile, unpad=unpad)
        embedder.source = str(src)
        return embedder

    @property
    def encoder(self) -> Encoder:
        """The model (the runner's `model`)."""
        return self.model

    @property
    def max_seq_length(self) -> int:
        """The window (the runner's `max_length`), sentence-transformers' name for it."""
        return self.max_length

    def settings(self, *, normalize: bool = False) -> dict:
        return {**super().settings(), "normalize": normalize, "max_seq_length": self.max_seq_length}

    @property
    def dimension(self) -> int:
        """Size of one embedding."""
        if self.dense:
            return self.dense[-1].linear.out_features
        return self.model.config.hidden_size * len(self.pooling)

    def encode(self, texts: Sequence[str], *, batch_size: int | None = None, normalize_embeddings: bool = False,
               show_progress_bar: bool = False, warn_truncation: bool = True,
               tally: Truncation | None = None) -> Tensor:
        """(N, dimension) float32 embeddings on the CPU, row i for texts[i]. Text cut by the window
        is reported as by every runner (warn_truncation, tally: products/runner.py)."""
        texts = check_texts("texts", texts)
        if not texts:
            return torch.empty(0, self.dimension)
        results = self.run(texts, progress=show_progress_bar, batch_size=batch_size)
        self._count(results.truncated, warn_truncation, tally)
        return F.normalize(results.values, p=2, dim=1) if normalize_embeddings else results.values

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        """The embeddings of one padded batch: pooled, then each Dense, then Normalize."""
        final = pooling_modes.final_tokens(self.pooling)
        hidden = self.model(**batch, unpad=self.unpad, final_tokens=final).last_hidden_state
        mask = batch["attention_mask"][:, :hidden.size(1)]
        x = pooling_modes.pool(hidden, mask, self.pooling)
        for layer in self.dense:
            x = layer(x)
        if self.normalize:
            x = F.normalize(x, p=2, dim=1)
        return x.float()


def lowercase(tokenizer: Tokenizer) -> None:
    """Lowercase input first (sentence_bert_config do_lower_case), as sentence-transformers does."""
    existing = tokenizer.backend.normalizer
    parts = [normalizers.Lowercase()] + ([existing] if existing is not None else [])
    tokenizer.backend.normalizer = normalizers.Sequence(parts)
