"""StaticEncoder: static embeddings (sentence-transformers' StaticEmbedding, model2vec), with no transformer forward.

    emb = StaticEncoder.from_pretrained("path/or/hub-id")     # a StaticEmbedding or model2vec directory
    E = emb.encode(["a sentence", "another"])                 # (N, D) float32 on the CPU

A text's embedding is the mean of its tokens' rows of one table (sentence_transformer/modules/static_embedding.py
StaticEmbedding: its tokenizer.json without special tokens and without a window, nn.EmbeddingBag's mean over the
ids; a text without tokens: zeros), then Normalize where modules.json has it. model2vec directories are read as
sentence-transformers reads them (model2vec's save_pretrained writes that modules.json: StaticEmbedding at ".", then
Normalize where its config.json says normalize; one without modules.json is read the same way): a vocabulary-quantized
table folded into one row per token id (convert/sbert.py read_static_embeddings). model2vec's own StaticModel.encode
differs on two points sentence-transformers does not follow: it drops the unknown token's ids and cuts a text at
max_length (512) tokens.

StaticEncoder is a SentenceEncoder (products/embeddings.py) whose model is StaticModel: prompts, truncate_dim,
normalize_embeddings and precision are SentenceEncoder.encode's, and every face that runs a SentenceEncoder runs it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Unpack

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer as HFTokenizer
from torch import Tensor, nn

from minialign import convert
from minialign.loading import parse_dtype, resolve_device
from minialign.nn.precision import PLAIN
from minialign.products.embeddings import SentenceEncoder
from minialign.products.runner import LoadOptions, Loading
from minialign.sources import Source, resolve
from minialign.text.tokenizer import Tokenizer

NO_WINDOW = 1 << 30  # StaticEmbedding.max_seq_length is math.inf: a text is never cut (unless tokenizer.json cuts it)
NO_TOKENS = ("a static embedding model has no token states (StaticEmbedding writes none): it averages its table's "
             "rows; token embeddings and late chunking need a transformer")
NO_OPTION = ("attn_backend", "compile", "adapter")  # Loading keywords a static model has no use for (None / default)


@dataclasses.dataclass(frozen=True)
class StaticConfig:
    """What the runner reads of a model's config (Runner._start, BatchEngine.for_model)."""

    vocab_size: int
    hidden_size: int
    max_seq_len: int = NO_WINDOW


class StaticModel(nn.Module):
    """StaticEmbedding's forward: token ids -> the mean of their rows of `embedding` (F.embedding_bag, mode "mean",
    as its nn.EmbeddingBag runs it), over the real tokens of each right-padded row."""

    def __init__(self, weight: Tensor):
        super().__init__()
        if weight.dim() != 2:
            raise ValueError(f"a static embedding table is (vocabulary, dimension), got {tuple(weight.shape)}")
        self.embedding = nn.Parameter(weight, requires_grad=False)  # (V, D)
        self.config = StaticConfig(vocab_size=weight.size(0), hidden_size=weight.size(1))

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """(B, D) from ids (B, L) and their mask (B, L), 1 = a real token; a row without one: zeros."""
        lengths = attention_mask.sum(dim=1)  # (B,)
        ids = input_ids[attention_mask.bool()]  # (T,): each row's tokens in order, rows one after another
        offsets = torch.cumsum(lengths, 0) - lengths  # (B,) where each row's tokens start
        return F.embedding_bag(ids, self.embedding, offsets, mode="mean")


def static_tokenizer(path: Path) -> Tokenizer:
    """StaticEmbedding's tokenizer: tokenizer.json as saved, with no special tokens (it encodes with
    add_special_tokens=False) and, unless tokenizer.json cuts text itself, no window."""
    backend = HFTokenizer.from_file(str(path))
    cut = (backend.truncation or {}).get("max_length")
    backend.post_processor = None  # encode_batch(add_special_tokens=False): no [CLS] / [SEP]
    pad = (backend.padding or {}).get("pad_token")
    if pad is None or backend.token_to_id(pad) is None:  # any token: padded positions are masked out
        pad = next((t for t in ("[PAD]", "<pad>", "<unk>", "[UNK]") if backend.token_to_id(t) is not None),
                   backend.id_to_token(0))
    return Tokenizer(backend, pad_token=pad, model_max_length=cut or NO_WINDOW, return_token_type_ids=False)


def static_modules(source: Source) -> list[tuple[str, str]] | None:
    """A static embedding model's modules (kind, folder): StaticEmbedding, then Normalize or not; None where the
    source is not one (no StaticEmbedding in its modules.json, nor a model2vec config.json)."""
    path = source.file("modules.json", optional=True)
    if path is None:
        config = convert.sbert.read_model2vec_config(source)
        return None if config is None else [("StaticEmbedding", ""), *([("Normalize", "")] if config.get("normalize")
                                                                         else [])]
    kinds = [str(entry.get("type", "")).rsplit(".", 1)[-1] for entry in convert.read_json(path, expect=list)
             if isinstance(entry, dict)]
    if "StaticEmbedding" not in kinds:
        return None
    modules = convert.read_modules(source, supported=convert.sbert.STATIC_MODULES)
    if modules[0][0] != "StaticEmbedding" or any(kind != "Normalize" for kind, _ in modules[1:]):
        raise ValueError(f"{path}: minialign runs a StaticEmbedding first, then Normalize or nothing; "
                         f"found {[kind for kind, _ in modules]}")
    return modules


def is_static(src: str | Path | Source) -> bool:
    """Whether a directory or resolved source is a static embedding model (StaticEncoder loads it)."""
    source = src if isinstance(src, Source) else resolve(src)
    return static_modules(source) is not None


class StaticEncoder(SentenceEncoder):
    truncation_like = "sentence-transformers' StaticEmbedding (its tokenizer.json's own truncation only)"
    progress_label = "static embedding"

    @classmethod
    def handles(cls, src: str | Path, **keywords: Unpack[Loading]) -> bool:
        """Whether `src` is a static embedding model (the faces ask before SentenceEncoder: apps/products.py
        Product.variants); the revision and cache_dir of `keywords` locate it, the rest is from_pretrained's."""
        load = LoadOptions.of({k: v for k, v in keywords.items() if k in ("revision", "cache_dir")}, "handles")
        try:
            return static_modules(resolve(src, revision=load.revision, cache_dir=load.cache_dir)) is not None
        except (convert.CheckpointError, OSError, ValueError):  # not a directory this reads: not static
            return False

    @classmethod
    def from_pretrained(cls, src: str | Path, *, truncate_dim: int | None = None,
                        **keywords: Unpack[Loading]) -> StaticEncoder:
        """A sentence-transformers StaticEmbedding directory or a model2vec one (the module docstring); truncate_dim
        as SentenceEncoder.from_pretrained takes it. Of the keywords every runner takes (products/runner.py Loading),
        attn_backend, compile and adapter have no use here and are refused when set; dtype casts the table
        (default float32)."""
        load = LoadOptions.of(keywords, f"{cls.__name__}.from_pretrained")
        for name in NO_OPTION:
            if getattr(load, name) != getattr(LoadOptions(), name):
                raise ValueError(f"{name}={getattr(load, name)!r}: a static embedding model has no transformer to "
                                 f"apply it to")
        source = resolve(src, revision=load.revision, cache_dir=load.cache_dir)
        modules = static_modules(source)
        if modules is None:
            raise ValueError(f"{source}: not a static embedding model (modules.json with a StaticEmbedding, or a "
                             f"model2vec config.json); load it with SentenceEncoder")
        table = convert.sbert.read_static_embeddings(source, modules[0][1])
        choice = parse_dtype(load.dtype)
        if choice.auto or choice.precision != PLAIN:
            raise ValueError(f"dtype={load.dtype!r}: a static embedding table is cast to a floating dtype, "
                             f"nothing else")
        model = StaticModel(table["weight"].to(choice.weights)).to(resolve_device(load.device))
        tokenizer = load.tokenizer if isinstance(load.tokenizer, Tokenizer) else static_tokenizer(
            Path(table["tokenizer"]) if load.tokenizer is None else resolve(load.tokenizer).file("tokenizer.json"))
        prompts, default_prompt_name = convert.read_prompts(source)
        encoder = cls(model, tokenizer, pooling=("mean",), normalize=len(modules) > 1, prompts=prompts,
                      default_prompt_name=default_prompt_name,
                      truncate_dim=truncate_dim if truncate_dim is not None else convert.read_truncate_dim(source),
                      unpad=False, **load.only("batch_size", "max_tokens", "workers", "threads"))
        encoder.source = str(src)
        return encoder

    @property
    def full_dimension(self) -> int:
        return self.model.config.hidden_size

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        """The embeddings of one padded batch: each row's mean token row, then Normalize where the model has it."""
        if batch.get("token_output"):  # encode(output_value="token_embeddings" | None)
            raise ValueError(NO_TOKENS)
        x = self.model(batch["input_ids"], batch["attention_mask"])
        return (F.normalize(x, p=2, dim=1) if self.normalize else x).float()

    def embed_state(self, hidden: Tensor, mask: Tensor, *, prompt_length: int = 0) -> Tensor:
        raise ValueError(NO_TOKENS)

    def encode_late_chunks(self, document: str, spans, **options) -> Tensor:
        raise ValueError(NO_TOKENS)
