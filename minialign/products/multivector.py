"""MultiVectorEncoder: one vector per token (ColBERT-style late interaction), scored with MaxSim.

    mve = MultiVectorEncoder.from_pretrained("path/or/hub-id")
    Q = mve.encode_query(["what is the capital of France?"])     # [(tokens, dim)] float32, one per text
    D = mve.encode_document(["Paris is the capital of France."])
    mve.similarity(Q, D)                                          # (queries, documents) MaxSim scores

As sentence-transformers 6.2 has it (sentence_transformers/multi_vector_encoder/model.py, MultiVectorEncoder;
the references below are to its files). The pipeline is the directory's modules.json: Transformer (our
Encoder), Dense modules on every token (base/modules/dense.py), MultiVectorMask (which tokens a text keeps:
modules/multi_vector_mask.py), Normalize (each token vector to unit length). A call's task decides:

  query     the "query" prompt (its text put before the text), the window query_length; with query_expansion
            (base/modules/transformer.py, Transformer.preprocess) the text is padded to expansion["length"]
            tokens with the mask token ([MASK] / <mask>; eos where there is none, or expansion["token"]):
            "fixed" cuts and pads every query to exactly that, "min" only pads the shorter ones. The
            expansion positions are kept as vectors; with attend=False (classic ColBERT) the encoder computes
            them but no token attends to them (they run in the padded layout), with attend=True they are
            ordinary tokens.
  document  the first of the "document", "passage", "corpus" prompts, the window document_length; tokens in the
            skiplist (MultiVectorMask.skiplist_words, resolved to single vocabulary tokens; by default for
            documents only, skiplist_tasks) are dropped; keep_only_token_ids keeps only those ids.
  None      (encode) the default prompt, the tokenizer's window, the skiplist applied as for documents.

A text keeps every real token the mask leaves (the special tokens [CLS] / [SEP] and a prompt's tokens
included); padding never. The skiplist removes listed tokens only, so a text of punctuation alone still has its
special tokens (sentence-transformers: the same). Texts longer than the window are cut at the end, and the
cut is reported as by every runner (products/runner.py).

Directories it loads (colbert_dirs.py reads them): sentence-transformers' own saves, PyLate saves (their
[Q] / [D] prefixes registered as special tokens, query_length / do_query_expansion / attend_to_expansion_tokens
made query_expansion, a punctuation skiplist unless one is saved, the mask and normalisation PyLate applied
inline added) and Stanford-NLP ColBERT saves (the projection is the linear.weight saved beside the encoder's
weights, artifact.metadata gives the markers, query_maxlen, doc_maxlen, attend_to_mask_tokens, mask_punctuation).
A SentenceTransformer directory (pooled, one vector per text) or a plain transformers one is refused:
sentence-transformers converts those by adding a randomly initialised projection (or re-pointing a sentence-level
Dense at tokens), which gives untrained vectors.

Scores: `similarity` / `similarity_pairwise` are MaxSim (maxsim.py, without a model), or meanmaxsim as the model's
similarity_fn_name says.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Unpack

import torch
import torch.nn.functional as F
from torch import Tensor

from minialign.convert import CheckpointError
from minialign.loading import build, read_checkpoint, resolve_device
from minialign.models.encoder import Encoder
from minialign.products.choices import TASKS
from minialign.products.embeddings import Dense
from minialign.products.maxsim import SIMILARITIES, maxsim, maxsim_pairwise
from minialign.products.colbert_dirs import read_directory, register_prefix_tokens
from minialign.products.runner import LoadOptions, Loading, Runner
from minialign.runtime.engine import Truncation
from minialign.sources import resolve
from minialign.text.tokenizer import Tokenizer
from minialign.text.validation import check_texts

TASK_INDEX = (None, *TASKS)  # a batch carries its task as an index here (the engine's constants are ints)


def check_expansion(expansion: dict | None, *, query_length: int | None) -> dict | None:
    """A query_expansion config, its defaults filled (base/modules/transformer.py _normalize_query_expansion
    and the query_expansion setter): strategy "fixed" | "min", attend (False), token (None: the mask
    token), length (required). A ValueError names what is wrong."""
    if expansion is None:
        return None
    if not isinstance(expansion, dict):
        raise ValueError(f"query_expansion must be an object or null, got {expansion!r}")
    unknown = set(expansion) - {"strategy", "attend", "token", "length"}
    if unknown:
        raise ValueError(f"query_expansion has unknown keys {sorted(unknown)}; valid: attend, length, strategy, token")
    strategy, attend, token, length = (expansion.get("strategy"), expansion.get("attend", False),
                                       expansion.get("token"), expansion.get("length"))
    if strategy not in ("fixed", "min"):
        raise ValueError(f"query_expansion['strategy'] must be 'fixed' or 'min', got {strategy!r}")
    if not isinstance(attend, bool):
        raise ValueError(f"query_expansion['attend'] must be true or false, got {attend!r}")
    if token is not None and not isinstance(token, str):
        raise ValueError(f"query_expansion['token'] must be a token or null, got {token!r}")
    if not isinstance(length, int) or isinstance(length, bool) or length < 1:
        raise ValueError(f"query_expansion needs 'length', the query width in tokens (a positive int), got {length!r}")
    if query_length is not None and query_length < length:
        raise ValueError(f"query_length={query_length} is smaller than query_expansion['length']={length}")
    return {"strategy": strategy, "attend": attend, "token": token, "length": length}


class MultiVectorEncoder(Runner):
    truncation_unit, truncation_like = "text(s)", "sentence-transformers"
    progress_label = "encoding"

    def __init__(self, encoder: Encoder, tokenizer: Tokenizer, *, dense: Sequence[Dense] = (), mask: bool = True,
                 skiplist_words: Sequence[str] = (), skiplist_tasks: Sequence[str] = ("document",),
                 keep_only_token_ids: Sequence[int] | None = None, normalize: bool = True,
                 query_length: int | None = None, document_length: int | None = None,
                 query_expansion: dict | None = None, max_seq_length: int | None = None,
                 prompts: dict[str, str] | None = None, default_prompt_name: str | None = None,
                 similarity_fn_name: str | None = None, batch_size: int | None = None, max_tokens: int | None = None,
                 unpad: bool | None = None, workers: int = 1, compile: bool | str = False, threads: int | None = None):
        """dense: Dense modules on every token; mask: a MultiVectorMask module follows (without one, a text keeps the
        tokens the encoder attended, expansion positions only with attend=True, and nothing is skipped);
        skiplist_words, skiplist_tasks, keep_only_token_ids: its config; normalize: a Normalize module last.
        query_length, document_length, query_expansion, max_seq_length: the Transformer module's
        (sentence_bert_config.json). prompts, default_prompt_name, similarity_fn_name ("maxsim" or "meanmaxsim"):
        config_sentence_transformers.json's. The other options: Runner._start."""
        self.dense, self.mask, self.normalize = list(dense), mask, normalize
        self.skiplist_words, self.skiplist_tasks = list(skiplist_words), list(skiplist_tasks)
        self.keep_only_token_ids = None if keep_only_token_ids is None else list(keep_only_token_ids)
        self.query_length, self.document_length = query_length, document_length
        self.query_expansion = check_expansion(query_expansion, query_length=query_length)
        self.prompts: dict[str, str] = {"query": "", "document": "", **(prompts or {})}
        if default_prompt_name is not None and default_prompt_name not in self.prompts:
            raise ValueError(f"default prompt name {default_prompt_name!r} is not one of the prompts "
                             f"{list(self.prompts)}")
        self.default_prompt_name = default_prompt_name
        self.similarity_fn_name = similarity_fn_name or "maxsim"
        if self.similarity_fn_name not in SIMILARITIES:
            raise ValueError(f"similarity_fn_name must be one of {SIMILARITIES}, got {self.similarity_fn_name!r}: "
                             f"cosine and dot products are for one vector per text")
        self._start(encoder, tokenizer, max_length=max_seq_length, batch_size=batch_size, max_tokens=max_tokens,
                    unpad=unpad, compile=compile, workers=workers, threads=threads)
        self.skiplist_ids = skiplist_ids(tokenizer, self.skiplist_words)
        self.expansion_id = self._expansion_id()

    @classmethod
    def from_pretrained(cls, src: str | Path, **keywords: Unpack[Loading]) -> MultiVectorEncoder:
        """A sentence-transformers MultiVectorEncoder directory, a PyLate one, or a Stanford-NLP ColBERT one (the
        module docstring). The keywords every runner takes are products/runner.py's (Loading)."""
        load = LoadOptions.of(keywords, f"{cls.__name__}.from_pretrained")
        source = resolve(src, revision=load.revision, cache_dir=load.cache_dir)
        parts = read_directory(source)
        stanford = parts.pop("stanford")
        model = parts.pop("model")
        ckpt = read_checkpoint(model, beside=("linear.weight",) if stanford else (), task=load.adapter)
        if stanford:  # the projection Stanford-NLP saves beside the encoder's weights
            if "linear.weight" not in ckpt.beside:
                raise CheckpointError(f"{ckpt.origin}: an HF_ColBERT checkpoint without its projection, linear.weight")
            parts["dense"] = [Dense(ckpt.beside["linear.weight"], None, "torch.nn.modules.linear.Identity")]
        encoder = build(Encoder, ckpt, **load.only("device", "dtype", "attn_backend"))
        settings, prefixes = parts.pop("settings"), parts.pop("prefixes")
        tokenizer = load.open_tokenizer(model, ckpt.tokenizer, do_lower_case=settings.get("do_lower_case", False))
        if prefixes:
            register_prefix_tokens(tokenizer, prefixes)
        device = resolve_device(load.device)
        parts["dense"] = [d.to(device=device, dtype=next(encoder.parameters()).dtype) for d in parts["dense"]]
        runner = cls(encoder, tokenizer, **parts, query_length=settings.get("query_length"),
                     document_length=settings.get("document_length"), query_expansion=settings.get("query_expansion"),
                     max_seq_length=settings.get("max_seq_length"), **load.engine())
        runner.source = str(src)
        return runner

    # -- what callers read --

    @property
    def encoder(self) -> Encoder:
        """The model (the runner's `model`)."""
        return self.model

    @property
    def dimension(self) -> int:
        """Size of one token vector."""
        return self.dense[-1].linear.out_features if self.dense else self.model.config.hidden_size

    def get_embedding_dimension(self) -> int:
        """sentence-transformers' name for `dimension`."""
        return self.dimension

    def window(self, task: str | None) -> int:
        """The most tokens of one text of this task, special tokens and prompt included, before expansion pads it
        (Transformer.preprocess): a "fixed" expansion's length for queries; else query_length / document_length
        (a "min" expansion raises query_length to its length), under the model's positions; else the runner's."""
        positions = self.model.config.max_seq_len
        expansion = self.query_expansion if task == "query" else None
        if expansion is not None and expansion["strategy"] == "fixed":
            return min(expansion["length"], positions)
        length = {"query": self.query_length, "document": self.document_length}.get(task)
        if length is None:
            return self.max_length
        return min(max(length, expansion["length"]) if expansion is not None else length, positions)

    def settings(self, *, task: str | None = None, prompt_name: str | None = None, prompt: str | None = None,
                 normalize_embeddings: bool = False) -> dict:
        """What a call with these options depends on, beside the weights (a resumed file run compares them)."""
        return {**super().settings(), "task": task, "window": self.window(task),
                "query_expansion": self.query_expansion,
                "skiplist": self.skiplist_words, "normalize": normalize_embeddings,
                "prompt": self.resolve_prompt(task, prompt_name=prompt_name, prompt=prompt) or None}

    def over_window(self, inputs: Sequence[str], *, task: str | None = None, prompt_name: str | None = None,
                    prompt: str | None = None) -> list[tuple[int, int]]:
        """Runner.over_window for a call of this task and prompt options: its window, its prompt counted."""
        prompt = self.resolve_prompt(task, prompt_name=prompt_name, prompt=prompt)
        texts = [prompt + text for text in inputs] if prompt else list(inputs)
        return super().over_window(texts, window=self.window(task))

    def tally(self, *, details: bool | None = None, task: str | None = None) -> Truncation:
        """Runner.tally, naming the window of `task`'s calls."""
        return Truncation(self.window(task), what=self.truncation_unit, original=self.truncation_like, details=False)

    def resolve_prompt(self, task: str | None = None, *, prompt_name: str | None = None,
                       prompt: str | None = None) -> str | None:
        """The prompt text a call uses (BaseModel._resolve_prompt after encode_query / encode_document choose the
        name): `prompt` if given (`prompt_name` then ignored); else the prompt named `prompt_name` (an unknown
        name is a ValueError listing the prompts); else for queries "query", for documents the first of
        "document", "passage", "corpus" that the model has; else the default prompt, if any."""
        if prompt is not None:
            if not isinstance(prompt, str):
                raise ValueError(f"prompt must be a string, got {type(prompt).__name__}")
            return prompt
        if prompt_name is None:
            names = {"query": ("query",), "document": ("document", "passage", "corpus")}.get(task, ())
            prompt_name = next((name for name in names if name in self.prompts), None)
        if prompt_name is not None:
            if prompt_name not in self.prompts:
                raise ValueError(f"prompt name {prompt_name!r} is not one of this model's prompts {list(self.prompts)}")
            return self.prompts[prompt_name]
        return self.prompts.get(self.default_prompt_name) if self.default_prompt_name is not None else None

    # -- encoding --

    def encode_query(self, inputs: Sequence[str] | str, prompt_name: str | None = None, prompt: str | None = None,
                     batch_size: int | None = None, show_progress_bar: bool = False, *,
                     normalize_embeddings: bool = False, warn_truncation: bool | None = None,
                     tally: Truncation | None = None) -> list[Tensor] | Tensor:
        """The token vectors of queries: a list of (tokens, dimension) float32 tensors on the CPU, one per text, in
        order; one string gives one tensor (MultiVectorEncoder.encode_query). The options: `encode`."""
        return self._encode(inputs, prompt_name, prompt, batch_size, show_progress_bar, "query",
                            normalize_embeddings, warn_truncation, tally)

    def encode_document(self, inputs: Sequence[str] | str, prompt_name: str | None = None, prompt: str | None = None,
                        batch_size: int | None = None, show_progress_bar: bool = False, *,
                        normalize_embeddings: bool = False, warn_truncation: bool | None = None,
                        tally: Truncation | None = None) -> list[Tensor] | Tensor:
        """The token vectors of documents, as `encode_query` gives those of queries
        (MultiVectorEncoder.encode_document). The options: `encode`."""
        return self._encode(inputs, prompt_name, prompt, batch_size, show_progress_bar, "document",
                            normalize_embeddings, warn_truncation, tally)

    def encode(self, inputs: Sequence[str] | str, prompt_name: str | None = None, prompt: str | None = None,
               batch_size: int | None = None, show_progress_bar: bool = False, *, task: str | None = None,
               normalize_embeddings: bool = False, warn_truncation: bool | None = None,
               tally: Truncation | None = None) -> list[Tensor] | Tensor:
        """Token vectors for `task` ("query", "document", or None: the module docstring says what each does):
        a list of (tokens, dimension) float32 tensors on the CPU, one per text; one string gives one tensor.
        prompt_name / prompt: as resolve_prompt says. normalize_embeddings: each vector to unit length (again).
        Text cut by the window is reported as by every runner (warn_truncation, tally: products/runner.py)."""
        return self._encode(inputs, prompt_name, prompt, batch_size, show_progress_bar, task, normalize_embeddings,
                            warn_truncation, tally)

    def _encode(self, inputs, prompt_name, prompt, batch_size, show_progress_bar, task, normalize_embeddings,
                warn_truncation, tally) -> list[Tensor] | Tensor:
        if isinstance(inputs, str):
            return self._encode([inputs], prompt_name, prompt, batch_size, show_progress_bar, task,
                                normalize_embeddings, warn_truncation, tally)[0]
        if task not in TASK_INDEX:
            raise ValueError(f"task must be 'query', 'document' or None, got {task!r}")
        prompt = self.resolve_prompt(task, prompt_name=prompt_name, prompt=prompt)
        texts = check_texts("inputs", inputs)
        if not texts:
            return []
        if prompt:  # sentence-transformers: `if prompt`, so "" is no prompt
            texts = [prompt + text for text in texts]
        window = self.window(task)
        results = self.run(texts, progress=show_progress_bar, batch_size=batch_size,
                           constants={"task": TASK_INDEX.index(task)}, max_length=window)
        truncated = results.truncated
        if tally is not None:
            tally.add(truncated)
        if warn_truncation or (warn_truncation is None and tally is None):
            self.tally(task=task).add(truncated).warn(stacklevel=4)  # the caller of encode*
        vectors = results.values
        return [F.normalize(v, p=2, dim=-1) for v in vectors] if normalize_embeddings else vectors

    def forward(self, batch: dict[str, Tensor]) -> list[Tensor]:
        """One padded batch -> each text's kept token vectors: the query expansion, the encoder, each Dense, the
        kept tokens (MultiVectorMask.forward), Normalize."""
        batch = dict(batch)
        task = TASK_INDEX[int(batch.pop("task", 0))]
        ids, attended = batch["input_ids"], batch["attention_mask"].bool()
        expansion = self.query_expansion if task == "query" else None
        expanded = torch.zeros_like(attended)
        if expansion is not None:
            ids, attended, expanded, types = self._expand(ids, attended, batch.get("token_type_ids"), expansion)
            batch.pop("host", None)  # the host's facts describe the batch before its widening (nn/layout.py HostBatch)
            batch["input_ids"], batch["attention_mask"] = ids, attended.long()
            if types is not None:
                batch["token_type_ids"] = types
        if expansion is not None and not expansion["attend"]:
            hidden = self._padded_by_width(batch, attended | expanded)
        else:
            hidden = self.model(**batch, unpad=self.unpad).last_hidden_state  # (B, L, C)
        x = hidden
        for layer in self.dense:
            x = layer(x)
        keep = attended | expanded if self.mask else attended
        if self.mask and (task or "document") in self.skiplist_tasks and self.skiplist_ids is not None:
            keep &= ~torch.isin(ids, self.skiplist_ids.to(ids.device))
        if self.mask and task != "query" and self.keep_only_token_ids:
            keep &= torch.isin(ids, torch.tensor(self.keep_only_token_ids, device=ids.device))
        if self.normalize:
            x = F.normalize(x, p=2, dim=-1)
        return list(torch.split(x[keep].float(), keep.sum(1).tolist()))

    def _padded_by_width(self, batch: dict[str, Tensor], rows: Tensor) -> Tensor:
        """(B, L, C) final states of an attend=False expanded batch, whose expansion positions are computed but
        never attended to: the padded layout, each group of texts of one width (real tokens and expansion, `rows`)
        run at exactly that width, so that a text's vectors do not depend on the texts it is batched with."""
        widths = rows.sum(1)  # rows are real tokens, then expansion, then padding
        hidden = None
        for width in widths.unique().tolist():
            group = (widths == width).nonzero().squeeze(1)
            part = {k: v[group, :width] for k, v in batch.items()}
            out = self.model(**part, unpad=False).last_hidden_state  # (b, width, C)
            if hidden is None:
                hidden = out.new_zeros((*rows.shape, out.size(-1)))
            hidden[group, :width] = out
        return hidden

    def _expand(self, ids: Tensor, attended: Tensor, types: Tensor | None, expansion: dict):
        """Transformer.preprocess's query expansion: the batch widened to the expansion length where shorter, its
        padding within that length swapped for the expansion token; (ids, attended, expansion positions, types).
        attend=True: the encoder attends the expansion positions too."""
        floor = expansion["length"]
        if ids.size(1) < floor:
            missing = floor - ids.size(1)
            ids = F.pad(ids, (0, missing), value=self.tokenizer.pad_token_id)
            attended = F.pad(attended, (0, missing), value=False)
            types = F.pad(types, (0, missing), value=0) if types is not None else None
        positions = ~attended & (torch.arange(ids.size(1), device=ids.device) < floor)  # (B, L)
        if self.expansion_id is not None:
            ids = ids.masked_fill(positions, self.expansion_id)
        if expansion["attend"]:
            attended = attended | positions
        return ids, attended, positions, types

    def _expansion_id(self) -> int | None:
        """The expansion token's id: query_expansion["token"], else the mask token, else eos (PyLate's fallback,
        Transformer.preprocess); None leaves the padding as it is."""
        if self.query_expansion is None:
            return None
        token = self.query_expansion["token"]
        backend, specials = self.tokenizer.backend, self.tokenizer.special_tokens
        if token is not None:
            if backend.token_to_id(token) is None:
                raise ValueError(f"query_expansion token {token!r} is not in this tokenizer's vocabulary")
            return backend.token_to_id(token)
        for name in ("mask_token", "eos_token"):
            if name in specials and backend.token_to_id(specials[name]) is not None:
                return backend.token_to_id(specials[name])
        return None

    # -- scoring --

    def similarity(self, embeddings1: Sequence[Tensor] | Tensor, embeddings2: Sequence[Tensor] | Tensor, *,
                   length_normalize: bool | None = None, chunk_elements: int | None = None) -> Tensor:
        """(queries, documents) float32 scores by the model's similarity_fn_name (MultiVectorEncoder.similarity):
        MaxSim, or meanmaxsim; length_normalize overrides which. Each side: a list of (tokens, dim) tensors, or
        one such tensor (one text). `maxsim` says how."""
        if length_normalize is None:
            length_normalize = self.similarity_fn_name == "meanmaxsim"
        return maxsim(embeddings1, embeddings2, length_normalize=length_normalize, chunk_elements=chunk_elements)

    def similarity_pairwise(self, embeddings1: Sequence[Tensor] | Tensor, embeddings2: Sequence[Tensor] | Tensor, *,
                            length_normalize: bool | None = None) -> Tensor:
        """(N,) float32 scores of query i against document i (MultiVectorEncoder.similarity_pairwise)."""
        if length_normalize is None:
            length_normalize = self.similarity_fn_name == "meanmaxsim"
        return maxsim_pairwise(embeddings1, embeddings2, length_normalize=length_normalize)


def skiplist_ids(tokenizer: Tokenizer, words: Sequence[str]) -> Tensor | None:
    """The ids of the skiplist words that are single vocabulary tokens (MultiVectorMask.resolve_with_tokenizer:
    a word the vocabulary lacks would resolve to [UNK] there and is dropped, so real [UNK] tokens stay)."""
    ids = [i for word in words if (i := tokenizer.backend.token_to_id(word)) is not None]
    return torch.tensor(ids, dtype=torch.long) if ids else None
