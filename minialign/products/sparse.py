"""SparseEncoder: SPLADE sparse embeddings from the directories sentence-transformers' SparseEncoder saves.

    enc = SparseEncoder.from_pretrained("path/or/hub-id")
    E = enc.encode(["a sentence", "another"])           # (N, V) torch sparse COO, float32 on the CPU
    enc.decode(E[0], top_k=5)                            # [(token, weight), ...], heaviest first
    enc.similarity(enc.encode_query(["q"]), enc.encode_document(["d1", "d2"]))   # (1, 2) dot products

What it mirrors (sentence-transformers 6.2, sentence_transformers/sparse_encoder/):
  modules.json      an MLMTransformer (modules/mlm_transformer.py), or a Transformer with transformer_task
                    "fill-mask" (sentence_bert_config.json), then a SpladePooling (modules/splade_pooling.py:
                    pooling_strategy "max" | "sum", activation_function "relu" | "log1p_relu"); a plain
                    transformers *ForMaskedLM directory is read as both with SpladePooling's defaults (max, relu),
                    as SparseEncoder builds them for one
  the weights       the model's *ForMaskedLM checkpoint: models/head_models.py MaskedLMModel, every family
  SPLADE            w_v = pool over the text's tokens t of log1p(relu(logits[t, v])) (log1p_relu: log1p once more),
                    pool max or sum (SpladePooling.forward; padding never pooled, as its mask does)
  max_active_dims   the largest max_active_dims values of each row kept, the others 0
                    (util/tensor.py select_max_active_dims: topk of |w|); a call's wins over the model's
                    (config_sentence_transformers.json), None: every value
  encode            SparseEncoder.encode's arguments and results: a torch sparse COO tensor (N, V) by default,
                    dense with convert_to_sparse_tensor=False, a list of rows with convert_to_tensor=False, one row
                    for one string; prompts as SentenceEncoder has them (products/embeddings.py resolve_prompt);
                    encode_query / encode_document pick the "query" / the first of "document", "passage", "corpus"
                    prompts when none is given (model.py encode_query, encode_document)
  decode            (token, weight) pairs by descending weight (model.py decode)
  similarity        the model's similarity_fn_name: "dot" (SparseEncoder's default) or "cosine"

Memory: the (tokens x vocabulary) logits are never made for a whole batch. The real tokens' final states are
taken from the padded output, whole sequences gathered into chunks of at most `chunk_tokens` tokens (a longer
sequence cut into pieces from its first token), and each chunk's logits made, activated and pooled into its
sequences' rows before the next: at most chunk_tokens x V floats of logits live at once (default: 32 MiB's worth,
e.g. 274 tokens of a 30522-token vocabulary), beside the batch's (B, V) rows. A call keeps its dense rows for at
most BLOCK_BYTES (256 MiB) of texts at a time, each block made sparse before the next (dense output: all of them).

Inference-free models (a Router with a "query" route of one SparseStaticEmbedding and a "document" route of the
SPLADE modules: base/modules/router.py, Router.for_query_document): encode_query (task="query") looks each token
of the text (special tokens not added, its tokenizer's model_max_length kept) up in the static weights, row[v] =
weight[v] for every token v present (SparseStaticEmbedding.forward); encode_document, and encode without a task,
take the router's default route (its "document" one). Other modules (SparseAutoEncoder, a Router with
route_mappings or other routes) are refused by name when the directory is read (convert/sbert.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Unpack

import torch
import torch.nn.functional as F
from torch import Tensor

from minialign import convert
from minialign.loading import build, read_checkpoint
from minialign.models.head_models import MaskedLMModel
from minialign.products.embeddings import model_prompts, resolve_prompt
from minialign.products.runner import LoadOptions, Loading, Runner, batch_lengths
from minialign.runtime.engine import Truncation
from minialign.sources import resolve
from minialign.text.tokenizer import Tokenizer
from minialign.text.validation import check_texts

CHUNK_BYTES = 32 << 20  # the most logits one chunk of tokens makes (module docstring)
BLOCK_BYTES = 256 << 20  # the most dense rows one call keeps before making them sparse
SIMILARITIES = ("dot", "cosine")
DOCUMENT_PROMPTS = ("document", "passage", "corpus")  # encode_document's order (model.py encode_document)


def splade(logits: Tensor, activation_function: str) -> Tensor:
    """log1p(relu(logits)), and log1p once more for "log1p_relu" (SpladePooling.forward), in place."""
    x = logits.relu_().log1p_()
    return x.log1p_() if activation_function == "log1p_relu" else x


def max_active(rows: Tensor, k: int | None) -> Tensor:
    """Each row's k values of largest magnitude kept, the others 0 (util/tensor.py select_max_active_dims)."""
    if k is None:
        return rows
    top = torch.topk(rows.abs(), k=min(k, rows.size(-1)), dim=-1).indices
    return torch.zeros_like(rows).scatter_(-1, top, rows.gather(-1, top))


def check_max_active_dims(value) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise ValueError(f"max_active_dims must be a positive integer or None, got {value!r}")
    return value


@dataclass
class StaticQuery:
    """SparseStaticEmbedding (sparse_encoder/modules/sparse_static_embedding.py): each text's row holds weight[v] for
    every token v of it (tokenized without special tokens, cut at max_length), 0 elsewhere."""

    weight: Tensor  # (V,)
    tokenizer: Tokenizer
    max_length: int | None = None

    def encode(self, texts: list[str]) -> tuple[Tensor, Tensor]:
        """(N, V) rows and (N,) tokens each text lost to max_length."""
        backend = self.tokenizer.backend
        backend.no_truncation()
        rows, lost = torch.zeros(len(texts), self.weight.numel()), torch.zeros(len(texts), dtype=torch.long)
        for i, encoding in enumerate(backend.encode_batch(texts, add_special_tokens=False)):
            ids = encoding.ids
            if self.max_length is not None and len(ids) > self.max_length:
                lost[i], ids = len(ids) - self.max_length, ids[:self.max_length]
            if ids:
                rows[i, ids] = self.weight[ids].float()
        return rows, lost


class SparseEncoder(Runner):
    truncation_unit, truncation_like = "text(s)", "sentence-transformers"
    progress_label = "sparse embedding"

    def __init__(self, model: MaskedLMModel, tokenizer: Tokenizer, *, pooling_strategy: str = "max",
                 activation_function: str = "relu", max_active_dims: int | None = None,
                 similarity_fn_name: str | None = None, max_seq_length: int | None = None,
                 prompts: dict[str, str] | None = None, default_prompt_name: str | None = None,
                 chunk_tokens: int | None = None, query: StaticQuery | None = None, default_route: str = "document",
                 batch_size: int | None = None, max_tokens: int | None = None,
                 unpad: bool | None = None, workers: int = 1, compile: bool | str = False, threads: int | None = None):
        """pooling_strategy, activation_function: SpladePooling's; max_active_dims: the default of every call (None:
        no limit); similarity_fn_name: "dot" (None: dot) or "cosine"; prompts, default_prompt_name: as
        config_sentence_transformers.json saves them; chunk_tokens: the most tokens whose logits are made at once
        (default: CHUNK_BYTES of them); query: an inference-free query side (encode's task="query", encode_query),
        default_route: the route of a call without a task ("query" or "document"). The other options:
        Runner._start."""
        if pooling_strategy not in convert.sbert.SPLADE_POOLING:
            raise ValueError(f"pooling_strategy must be one of {convert.sbert.SPLADE_POOLING}, got {pooling_strategy!r}")
        if activation_function not in convert.sbert.SPLADE_ACTIVATIONS:
            raise ValueError(f"activation_function must be one of {convert.sbert.SPLADE_ACTIVATIONS}, "
                             f"got {activation_function!r}")
        if similarity_fn_name not in (None, *SIMILARITIES):
            raise ValueError(f"similarity_fn_name must be one of {SIMILARITIES}, got {similarity_fn_name!r}")
        if not isinstance(model, MaskedLMModel):
            raise ValueError(f"SparseEncoder runs a MaskedLMModel, got {type(model).__name__}")
        vocab = model.config.vocab_size
        if chunk_tokens is None:
            chunk_tokens = max(1, CHUNK_BYTES // (4 * vocab))
        if isinstance(chunk_tokens, bool) or not isinstance(chunk_tokens, int) or chunk_tokens < 1:
            raise ValueError(f"chunk_tokens must be a positive int, got {chunk_tokens!r}")
        self.pooling_strategy, self.activation_function = pooling_strategy, activation_function
        self.max_active_dims = check_max_active_dims(max_active_dims)
        self.similarity_fn_name = similarity_fn_name or "dot"
        self.prompts = model_prompts(prompts, default_prompt_name)
        self.default_prompt_name, self.chunk_tokens = default_prompt_name, chunk_tokens
        if query is not None and query.weight.numel() != vocab:
            raise ValueError(f"the query side's static weights have {query.weight.numel()} entries, the model's "
                             f"vocabulary {vocab}")
        if default_route not in ("query", "document") or (default_route == "query" and query is None):
            raise ValueError(f"default_route must be 'document', or 'query' with a query side; got {default_route!r}")
        self.query, self.default_route = query, default_route
        self._start(model, tokenizer, max_length=max_seq_length, batch_size=batch_size, max_tokens=max_tokens,
                    unpad=unpad, compile=compile, workers=workers, threads=threads)

    @classmethod
    def from_pretrained(cls, src: str | Path, *, max_active_dims: int | None = None, chunk_tokens: int | None = None,
                        **keywords: Unpack[Loading]) -> SparseEncoder:
        """A sentence-transformers SparseEncoder directory (modules.json: MLMTransformer, or Transformer with
        transformer_task "fill-mask", then SpladePooling) or a plain transformers *ForMaskedLM one (max pooling,
        relu). max_active_dims: every call's default (None: the model's); chunk_tokens: the most tokens whose logits
        are made at once (the constructor's). The keywords every runner takes are
        products/runner.py's (Loading)."""
        load = LoadOptions.of(keywords, f"{cls.__name__}.from_pretrained")
        source = resolve(src, revision=load.revision, cache_dir=load.cache_dir)
        modules = convert.read_modules(source)
        splade_config, model, settings = {"pooling_strategy": "max", "activation_function": "relu"}, source, {}
        query, default_route = None, "document"
        if modules is not None and [kind for kind, _ in modules] == ["Router"]:
            modules, query, default_route = cls._routes(source, modules[0][1])
        if modules is not None:
            kinds = [kind for kind, _ in modules]
            if kinds[1:] != ["SpladePooling"] or kinds[0] not in ("MLMTransformer", "Transformer"):
                raise ValueError(f"{source}/modules.json: modules {kinds} are not a SPLADE model's (MLMTransformer or "
                                 f"Transformer, then SpladePooling)"
                                 + ("; a dense embedding model: load it with minialign.SentenceEncoder"
                                    if "Pooling" in kinds else ""))
            inner = source.subfolder(modules[0][1])
            model = inner if inner.file("config.json", optional=True) else source
            settings = convert.read_sentence_config(inner)
            task = settings.get("transformer_task", "fill-mask" if kinds[0] == "MLMTransformer" else None)
            if task != "fill-mask":
                raise ValueError(f"{source}: its Transformer module's transformer_task is {task!r}, not 'fill-mask': "
                                 f"SpladePooling reads masked-LM logits")
            splade_config = convert.read_splade_pooling(source, modules[1][1])
        sparse = convert.read_sparse_config(source)
        prompts, default_prompt_name = convert.read_prompts(source)
        ckpt = read_checkpoint(model, task=load.adapter)
        mlm = build(MaskedLMModel, ckpt, **load.only("device", "dtype", "attn_backend"), require=("mlm_head.",),
                    advice="SPLADE pools the masked-LM logits: give the directory of a *ForMaskedLM model")
        tokenizer = load.open_tokenizer(model, ckpt.tokenizer, do_lower_case=settings.get("do_lower_case", False))
        similarity = sparse["similarity_fn_name"]
        if similarity not in (None, *SIMILARITIES):
            raise ValueError(f"{source}: similarity_fn_name {similarity!r} is not supported (have {SIMILARITIES})")
        encoder = cls(mlm, tokenizer, **splade_config,
                      max_active_dims=check_max_active_dims(max_active_dims) or sparse["max_active_dims"],
                      similarity_fn_name=similarity, max_seq_length=settings.get("max_seq_length"),
                      prompts=prompts, default_prompt_name=default_prompt_name, chunk_tokens=chunk_tokens,
                      query=query, default_route=default_route, **load.engine())
        encoder.source = str(src)
        return encoder

    @staticmethod
    def _routes(source, folder: str) -> tuple[list[tuple[str, str]], StaticQuery | None, str]:
        """A Router's document modules, its query side (None where the query route is the document one) and its
        default route, or a ValueError saying what minialign does not run."""
        router = convert.read_router(source, folder)
        routes, where = router["routes"], f"{source}/{folder + '/' if folder else ''}router_config.json"
        if router["route_mappings"] or set(routes) - {"query", "document"} or "document" not in routes:
            raise ValueError(f"{where}: minialign runs a Router of a 'query' and a 'document' route without "
                             f"route_mappings (Router.for_query_document); this one has routes {list(routes)} and "
                             f"route_mappings {router['route_mappings']}")
        document, query = routes["document"], routes.get("query", routes["document"])
        static = None
        if query != document:
            if [kind for kind, _ in query] != ["SparseStaticEmbedding"]:
                raise ValueError(f"{where}: its query route {[kind for kind, _ in query]} is neither the document "
                                 f"route nor one SparseStaticEmbedding")
            inner = source.subfolder(query[0][1])
            static = StaticQuery(tokenizer=Tokenizer.from_source(inner), **convert.read_static_embedding(source,
                                                                                                     query[0][1]))
        return document, static, router["default_route"] or "document"

    def calibration_module(self):
        """dtype="int8" calibrates the encoder alone (the masked-LM head holds no quantized layer): its (tokens x
        vocabulary) logits are never made for a whole batch, here either."""
        return self.model.encoder

    @property
    def max_seq_length(self) -> int:
        """The window (the runner's `max_length`), sentence-transformers' name for it."""
        return self.max_length

    @property
    def dimension(self) -> int:
        """Size of one embedding: the vocabulary."""
        return self.model.config.vocab_size

    def settings(self, *, prompt_name: str | None = None, prompt: str | None = None,
                 max_active_dims: int | None = None, task: str | None = None) -> dict:
        """What a call with these options depends on, beside the weights (a resumed file run compares them)."""
        return {**super().settings(), "pooling_strategy": self.pooling_strategy,
                "activation_function": self.activation_function, "max_seq_length": self.max_seq_length,
                "max_active_dims": max_active_dims or self.max_active_dims,
                "route": (task or self.default_route) if self.query is not None else None,
                "prompt": self.resolve_prompt(prompt_name=prompt_name, prompt=prompt, task=task) or None}

    def resolve_prompt(self, *, prompt_name: str | None = None, prompt: str | None = None,
                       task: str | None = None) -> str | None:
        """The prompt text a call uses (products/embeddings.py resolve_prompt). task: "query" picks the "query"
        prompt, "document" the first of DOCUMENT_PROMPTS the model has, when neither prompt_name nor prompt is given
        (SparseEncoder.encode_query, encode_document)."""
        if prompt_name is None and prompt is None and task is not None:
            names = ("query",) if task == "query" else DOCUMENT_PROMPTS
            prompt_name = next((name for name in names if name in self.prompts), None)  # else: the default
        return resolve_prompt(self.prompts, self.default_prompt_name, prompt_name=prompt_name, prompt=prompt)

    # -- calls --

    def encode(self, texts: Sequence[str] | str, *, prompt_name: str | None = None, prompt: str | None = None,
               batch_size: int | None = None, show_progress_bar: bool = False, convert_to_tensor: bool = True,
               convert_to_sparse_tensor: bool = True, save_to_cpu: bool = False, max_active_dims: int | None = None,
               task: str | None = None, warn_truncation: bool | None = None,
               tally: Truncation | None = None) -> Tensor | list[Tensor]:
        """Sparse embeddings (N, V), row i for texts[i], float32 on the CPU (save_to_cpu is accepted for
        sentence-transformers' callers: rows are on the CPU always): a torch sparse COO tensor, or dense with
        convert_to_sparse_tensor=False; a list of N rows with convert_to_tensor=False; one string gives one row
        (V,). prompt_name / prompt: as SentenceEncoder.encode. max_active_dims: keep each row's largest this many
        values (None: the model's). task: the route of an inference-free model ("query": its static weights,
        "document"; None: its default route), ignored by other models as sentence-transformers does. An empty text is
        its special tokens alone, as sentence-transformers embeds it.
        Text cut by the window is reported as by every runner (warn_truncation, tally: products/runner.py)."""
        options = dict(prompt_name=prompt_name, prompt=prompt, batch_size=batch_size,
                       show_progress_bar=show_progress_bar, convert_to_tensor=convert_to_tensor,
                       convert_to_sparse_tensor=convert_to_sparse_tensor, max_active_dims=max_active_dims,
                       task=task, warn_truncation=warn_truncation, tally=tally)
        if isinstance(texts, str):
            return self.encode([texts], **options)[0]
        k = check_max_active_dims(max_active_dims) or self.max_active_dims
        prompt = self.resolve_prompt(prompt_name=prompt_name, prompt=prompt)
        texts = check_texts("texts", texts)
        if prompt:  # sentence-transformers: `if prompt`, so "" is no prompt
            texts = [prompt + text for text in texts]
        if task not in (None, "query", "document") and self.query is not None:
            raise ValueError(f"task must be 'query', 'document' or None (the default route), got {task!r}")
        static = self.query is not None and (task or self.default_route) == "query"
        block = max(1, BLOCK_BYTES // (4 * self.dimension)) if convert_to_sparse_tensor else max(1, len(texts))
        parts, truncated = [], []
        for start in range(0, len(texts), block):
            if static:
                values, lost = self.query.encode(texts[start:start + block])
                values = max_active(values, k)
            else:
                results = self.run(texts[start:start + block], progress=show_progress_bar, batch_size=batch_size,
                                   constants={"max_active_dims": k or 0})
                values, lost = results.values, results.truncated
            parts.append(values.to_sparse() if convert_to_sparse_tensor else values)
            truncated.append(lost)
        self._count(torch.cat(truncated) if truncated else torch.empty(0, dtype=torch.long), warn_truncation, tally)
        if not parts:
            empty = torch.empty(0, self.dimension)
            out = empty.to_sparse() if convert_to_sparse_tensor else empty
        else:
            out = stack_rows(parts, self.dimension) if convert_to_sparse_tensor else torch.cat(parts)
        return out if convert_to_tensor else list(out.unbind(0))

    def encode_query(self, texts: Sequence[str] | str, *, prompt_name: str | None = None, prompt: str | None = None,
                     **options) -> Tensor | list[Tensor]:
        """encode on the "query" route (an inference-free model's static weights), with the "query" prompt when neither
        prompt_name nor prompt is given (SparseEncoder.encode_query: "" by default, which also keeps the default
        prompt out)."""
        if prompt_name is None and prompt is None:
            prompt = self.resolve_prompt(task="query")
        return self.encode(texts, prompt_name=prompt_name, prompt=prompt, task="query", **options)

    def encode_document(self, texts: Sequence[str] | str, *, prompt_name: str | None = None,
                        prompt: str | None = None, **options) -> Tensor | list[Tensor]:
        """encode on the "document" route, with the first of the "document", "passage", "corpus" prompts the model
        has when neither prompt_name nor prompt is given (SparseEncoder.encode_document)."""
        if prompt_name is None and prompt is None:
            prompt = self.resolve_prompt(task="document")
        return self.encode(texts, prompt_name=prompt_name, prompt=prompt, task="document", **options)

    def over_window(self, inputs: Sequence[str], *, prompt_name: str | None = None,
                    prompt: str | None = None) -> list[tuple[int, int]]:
        """Runner.over_window, with the prompt a call with these options puts before each text counted."""
        prompt = self.resolve_prompt(prompt_name=prompt_name, prompt=prompt)
        return super().over_window([prompt + text for text in inputs] if prompt else list(inputs))

    def decode(self, embeddings: Tensor, top_k: int | None = None) -> list[tuple[str, float]] | list[list]:
        """(token, weight) pairs of each row's non-zero values, heaviest first, at most top_k of them (None: all):
        one list for a row (V,), a list of lists for (N, V), dense or sparse (SparseEncoder.decode)."""
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k <= 0):
            raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
        if not isinstance(embeddings, Tensor):
            raise TypeError(f"decode takes a torch.Tensor, got {type(embeddings).__name__}")
        if embeddings.dim() not in (1, 2) or embeddings.size(-1) != self.dimension:
            raise ValueError(f"decode takes a row ({self.dimension},) or rows (N, {self.dimension}), got "
                             f"{tuple(embeddings.shape)}")
        rows = embeddings.to_dense() if embeddings.is_sparse else embeddings
        rows = rows.unsqueeze(0) if rows.dim() == 1 else rows
        backend, out = self.tokenizer.backend, []
        for row in rows:
            ids = row.nonzero().squeeze(1)
            values = row[ids]
            order = torch.argsort(values, descending=True, stable=True)[:top_k]
            out.append([(backend.id_to_token(int(i)), float(v)) for i, v in zip(ids[order], values[order])])
        return out[0] if embeddings.dim() == 1 else out

    def similarity(self, a: Tensor, b: Tensor) -> Tensor:
        """(N, M) similarities of every row of `a` with every row of `b` (rows (V,) taken as (1, V)), sparse or
        dense, by the model's similarity_fn_name: dot products (util/similarity.py dot_score) or cosines."""
        a, b = (x.unsqueeze(0) if x.dim() == 1 else x for x in (a, b))
        if self.similarity_fn_name == "cosine":
            a, b = (F.normalize(x.to_dense() if x.is_sparse else x, p=2, dim=1) for x in (a, b))
        if a.is_sparse or b.is_sparse:
            return torch.mm(a if a.is_sparse else a.to_sparse(), b.t().to_dense()).to_dense()
        return a @ b.t()

    # -- one batch --

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        """(B, V) SPLADE rows of one padded batch (module docstring), each row's largest max_active_dims kept
        when the batch carries one (0: all)."""
        batch = dict(batch)
        k = int(batch.pop("max_active_dims", 0)) or None
        mask = batch["attention_mask"]
        hidden = self.model.encoder(**batch, unpad=self.unpad).last_hidden_state  # (B, L, C)
        lengths = batch_lengths(batch)
        tokens = hidden[mask.bool()]  # (T, C): each sequence's real tokens in turn (right padding)
        word = self.model.encoder.embeddings.word.weight
        head = self.model.mlm_head
        rows = hidden.new_zeros(len(lengths), self.dimension)  # max over values >= 0: 0 is SpladePooling's -inf
        for start, pieces in self._chunks(lengths):
            end = pieces[-1][2]
            x = splade(head.decode(head.features(tokens[start:end]), word), self.activation_function)  # (t, V)
            for row, a, b in pieces:
                part = x[a - start:b - start]
                if self.pooling_strategy == "max":
                    torch.maximum(rows[row], part.amax(dim=0), out=rows[row])
                else:
                    rows[row] += part.sum(dim=0)
        return max_active(rows, k).float()

    def _chunks(self, lengths: list[int]) -> list[tuple[int, list[tuple[int, int, int]]]]:
        """The packed tokens in chunks of at most chunk_tokens: (first token, [(row, start, end)]), whole sequences
        gathered, a longer one cut from its first token (its pieces the same whatever the batch)."""
        chunks, current, size, offset = [], [], 0, 0
        for row, n in enumerate(lengths):
            for a in range(0, n, self.chunk_tokens):
                b = min(n, a + self.chunk_tokens)
                if current and size + (b - a) > self.chunk_tokens:
                    chunks.append(current)
                    current, size = [], 0
                current.append((row, offset + a, offset + b))
                size += b - a
            offset += n
        if current:
            chunks.append(current)
        return [(chunk[0][1], chunk) for chunk in chunks]


def stack_rows(parts: list[Tensor], width: int) -> Tensor:
    """Blocks of rows, each a coalesced sparse COO tensor (Tensor.to_sparse sorts by row, then column), as one
    (N, width) tensor, marked coalesced: the blocks come in row order, so the entries already are, and the sort
    torch.cat(parts).coalesce() would run over every entry is not needed (it was most of a sparse call's time on
    rows with many active dimensions)."""
    if len(parts) == 1:
        return parts[0]
    indices, values, rows = [], [], 0
    for part in parts:
        where = part.indices().clone()
        where[0] += rows
        indices.append(where)
        values.append(part.values())
        rows += part.size(0)
    return torch.sparse_coo_tensor(torch.cat(indices, dim=1), torch.cat(values), (rows, width), is_coalesced=True,
                                   check_invariants=False)  # sorted and in range by construction
