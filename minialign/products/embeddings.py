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

Prompts, as sentence-transformers has them (SentenceTransformer.encode, _resolve_prompt; v6): the
model's `prompts` (config_sentence_transformers.json, with "query" and "document" always there, "" unless
saved) and `default_prompt_name`; a call's `prompt` wins over its `prompt_name`, which wins over the
default; the prompt text is put before every text, and the whole is tokenized and cut to the window.
A Pooling module with include_prompt=false leaves the prompt's first `prompt_length` tokens out.

Smaller outputs, as sentence-transformers has them (products/quantization.py): `truncate_dim` (the model's, from
config_sentence_transformers.json or the constructor, or a call's) keeps a Matryoshka model's first dimensions,
before `normalize_embeddings`; `precision` ("int8", "uint8", "binary", "ubinary") quantizes the result.

Token embeddings, as sentence-transformers v6 gives them (SentenceTransformer.encode, _inference):
output_value="token_embeddings" is each text's final hidden states (the Transformer module's output; Pooling, Dense
and Normalize do not touch them), one (L_i, C) float32 tensor per text over every token it has within the window:
the special tokens and the prompt's included, padding never; normalize_embeddings, truncate_dim and precision are
the sentence embeddings' (a precision other than float32 is refused). output_value=None gives each text's dict:
its token_embeddings, its input_ids, attention_mask (and token_type_ids where the model takes them) over the same
tokens, and its sentence_embedding (truncate_dim applied, normalize_embeddings not, as sentence-transformers does);
sentence-transformers' dict rows are padded to their batch's longest text, which minialign cuts to the text's own.

Late chunking (encode_late_chunks; the spans' rule and the windows past the window: products/token_spans.py): one
forward over a document, then the pipeline after the encoder (embed_state) over each character span's tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Unpack

import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from minialign import convert
from minialign.nn import lora
from minialign.nn.activations import ACTIVATIONS, TORCH_MODULES
from minialign.nn.linear import Linear
from minialign.products import pooling as pooling_modes
from minialign.products import token_spans
from minialign.products.choices import EMBED_NORMALIZE
from minialign.products.quantization import check_precision, check_truncate_dim, quantize_embeddings
from minialign.products.runner import LoadOptions, Loading, Runner, batch_lengths
from minialign.runtime.engine import Truncation
from minialign.sources import resolve
from minialign.loading import build, read_checkpoint, resolve_device
from minialign.models.encoder import Encoder
from minialign.text.tokenizer import Encoded, Tokenizer
from minialign.text.validation import check_texts, text_problem

OUTPUT_VALUES = ("sentence_embedding", "token_embeddings", None)  # encode's output_value (sentence-transformers')
SPAN_GROUP = 64  # late chunks pooled at once: bounds the (spans, tokens, C) temporary of their masks


class Dense(nn.Module):
    """sentence_transformers Dense: activation(W x + b), the product minialign's Linear (nn/linear.py): a text's
    embedding the same bits whatever its batch (torch's F.linear, MKL's sgemm, gives a row other bits by the
    product's row count)."""

    def __init__(self, weight: Tensor, bias: Tensor | None, activation: str):
        super().__init__()
        if activation not in TORCH_MODULES:  # the class path it saved
            raise ValueError(f"Dense activation {activation!r} is not supported; supported: {', '.join(TORCH_MODULES)}")
        self.linear = Linear(weight.size(1), weight.size(0), bias=bias is not None)
        self.linear.load_state_dict({"weight": weight, **({"bias": bias} if bias is not None else {})}, assign=True)
        self.activation = ACTIVATIONS[TORCH_MODULES[activation]]

    def forward(self, x: Tensor) -> Tensor:
        return self.activation(self.linear(x))


class SentenceEncoder(Runner):
    truncation_unit, truncation_like = "text(s)", "sentence-transformers"
    progress_label = "embedding"

    def __init__(self, encoder: Encoder, tokenizer: Tokenizer, *, pooling: Sequence[str] = ("mean",),
                 dense: Sequence[Dense] = (), normalize: bool = False, max_seq_length: int | None = None,
                 prompts: dict[str, str] | None = None, default_prompt_name: str | None = None,
                 include_prompt: bool = True, truncate_dim: int | None = None, batch_size: int | None = None,
                 max_tokens: int | None = None, unpad: bool | None = None, workers: int = 1, compile: bool | str = False,
                 threads: int | None = None):
        """pooling: modes of products/pooling.py, concatenated in order; dense: Dense modules after it;
        normalize: a Normalize module last. prompts (name -> text), default_prompt_name: as
        config_sentence_transformers.json saves them; include_prompt: whether pooling reads the
        prompt's tokens (the Pooling module's); truncate_dim: the first dimensions every call keeps unless it
        says otherwise (a Matryoshka model's; None: all). The other options: Runner._start."""
        self.pooling, self.dense, self.normalize = pooling_modes.check(pooling), list(dense), normalize
        self.truncate_dim = check_truncate_dim(truncate_dim)
        self.prompts = model_prompts(prompts, default_prompt_name)
        self.default_prompt_name, self.include_prompt = default_prompt_name, include_prompt
        self._start(encoder, tokenizer, max_length=max_seq_length, batch_size=batch_size, max_tokens=max_tokens,
                    unpad=unpad, compile=compile, workers=workers, threads=threads)

    @classmethod
    def from_pretrained(cls, src: str | Path, *, truncate_dim: int | None = None,
                        **keywords: Unpack[Loading]) -> SentenceEncoder:
        """A sentence-transformers directory (modules.json) or a plain transformers one (mean pooling).
        truncate_dim: the model's output size (default: the directory's config_sentence_transformers.json
        `truncate_dim`, else every dimension), as SentenceTransformer(truncate_dim=) takes it. adapter (a checkpoint
        carrying task adapters, jina-embeddings-v3's): its adapter merged into the weights, and the prompt of that
        name (config_sentence_transformers.json) the default one unless the directory names a default.
        The keywords every runner takes are products/runner.py's (Loading)."""
        load = LoadOptions.of(keywords, f"{cls.__name__}.from_pretrained")
        source = resolve(src, revision=load.revision, cache_dir=load.cache_dir)  # every file below is read from it
        if convert.sbert.read_model2vec_config(source) is not None:  # model2vec without modules.json
            raise ValueError(f"{src}: {convert.sbert.STATIC_HINT}")
        modules = convert.read_modules(source)
        pooling, dense, normalize, model, settings, include_prompt = ["mean"], [], False, source, {}, True
        if modules is not None:
            if any(kind in ("MLMTransformer", "SpladePooling") for kind, _ in modules):
                raise ValueError(f"{source}/modules.json: a sparse (SPLADE) model (MLMTransformer / SpladePooling); "
                                 f"load it with minialign.SparseEncoder")
            if not modules or modules[0][0] != "Transformer":
                raise ValueError(f"{source}/modules.json: the first module must be a Transformer")
            pooling, includes = [], set()
            for kind, folder in modules[1:]:
                if kind == "Pooling":
                    pooling += pooling_modes.read(source, folder)
                    includes.add(convert.read_include_prompt(source, folder))
                elif kind == "Dense":
                    dense.append(Dense(**convert.read_dense(source, folder)))
                elif kind == "Normalize":
                    normalize = True
                else:
                    raise ValueError(f"{source}/modules.json: a second Transformer module is not supported")
            if not pooling:
                raise ValueError(f"{source}/modules.json: no Pooling module; minialign embeds pooled sentences")
            if len(includes) > 1:
                raise ValueError(f"{source}/modules.json: its Pooling modules differ in include_prompt")
            (include_prompt,) = includes
            inner = source.subfolder(modules[0][1])  # an old layout keeps the Transformer in 0_Transformer/
            model = inner if inner.file("config.json", optional=True) else source
            settings = convert.read_sentence_config(inner)
        prompts, default_prompt_name = convert.read_prompts(source)
        if load.adapter is not None and default_prompt_name is None and prompts.get(load.adapter) is not None:
            # the task's prompt by default, as jina's XLMRobertaLoRA.encode(task=) puts task_instructions[task] first
            default_prompt_name = load.adapter
        ckpt = read_checkpoint(model, task=load.adapter)
        encoder = build(Encoder, ckpt, **load.only("device", "dtype", "attn_backend"))
        tokenizer = load.open_tokenizer(model, ckpt.tokenizer, do_lower_case=settings.get("do_lower_case", False))
        device = resolve_device(load.device)
        dense = [d.to(device=device, dtype=next(encoder.parameters()).dtype) for d in dense]
        embedder = cls(encoder, tokenizer, pooling=pooling, dense=dense, normalize=normalize,
                       max_seq_length=settings.get("max_seq_length"), prompts=prompts,
                       default_prompt_name=default_prompt_name, include_prompt=include_prompt,
                       truncate_dim=truncate_dim if truncate_dim is not None else convert.read_truncate_dim(source),
                       **load.engine())
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

    def settings(self, *, normalize: bool = EMBED_NORMALIZE, prompt_name: str | None = None,
                 prompt: str | None = None) -> dict:
        """With the prompt text a call with these options puts before every text (None: none)."""
        return {**super().settings(), "normalize": normalize, "max_seq_length": self.max_seq_length,
                "prompt": self.resolve_prompt(prompt_name=prompt_name, prompt=prompt) or None,
                "truncate_dim": self.truncate_dim}

    def resolve_prompt(self, *, prompt_name: str | None = None, prompt: str | None = None) -> str | None:
        """The prompt text a call uses, by sentence-transformers' rule (_resolve_prompt): `prompt` if
        given (with `prompt_name` too: a warning, and `prompt` wins); else the prompt named `prompt_name`,
        an unknown name being a ValueError that names it and lists the model's prompts; else the
        default prompt, if the model has one. None or "": no prompt."""
        return resolve_prompt(self.prompts, self.default_prompt_name, prompt_name=prompt_name, prompt=prompt)

    def _prompted(self, texts: list[str], prompt: str | None) -> tuple[list[str], dict[str, int] | None]:
        """The texts with the prompt before each, and what every batch must carry for pooling to leave
        the prompt out (include_prompt=False), as sentence-transformers prepends and measures it."""
        if not prompt:  # sentence-transformers: `if prompt`, so "" is no prompt
            return texts, None
        texts = [prompt + text for text in texts]
        if self.include_prompt:
            return texts, None
        return texts, {"prompt_length": prompt_length(self.tokenizer, prompt, self.max_length)}

    def over_window(self, inputs: Sequence[str], *, prompt_name: str | None = None,
                    prompt: str | None = None) -> list[tuple[int, int]]:
        """Runner.over_window, with the prompt a call with these options puts before each text counted."""
        texts, _ = self._prompted(list(inputs), self.resolve_prompt(prompt_name=prompt_name, prompt=prompt))
        return super().over_window(texts)

    @property
    def full_dimension(self) -> int:
        """Size of the pipeline's output, before any truncate_dim."""
        if self.dense:
            return self.dense[-1].linear.out_features
        return self.model.config.hidden_size * len(self.pooling)

    @property
    def dimension(self) -> int:
        """Size of one embedding: the pipeline's, or the model's truncate_dim where smaller
        (SentenceTransformer.get_embedding_dimension)."""
        return check_truncate_dim(self.truncate_dim, self.full_dimension) or self.full_dimension

    def encode(self, texts: Sequence[str] | str, *, prompt_name: str | None = None, prompt: str | None = None,
               batch_size: int | None = None, normalize_embeddings: bool = EMBED_NORMALIZE,
               truncate_dim: int | None = None,
               precision: str = "float32", ranges: Tensor | None = None,
               calibration_embeddings: Tensor | None = None, show_progress_bar: bool = False,
               warn_truncation: bool | None = None, tally: Truncation | None = None,
               adapter: str | None = None,
               output_value: str | None = "sentence_embedding") -> Tensor | list[Tensor] | list[dict] | dict:
        """(N, dimension) float32 embeddings on the CPU, row i for texts[i]; one string gives one vector
        (dimension,), as SentenceTransformer.encode does. prompt_name (one of `prompts`) or prompt (its
        text): put before every text, as sentence-transformers does (resolve_prompt; neither: the default
        prompt, if any). truncate_dim: the first dimensions kept (default: the model's), before
        normalize_embeddings. precision: "float32", or "int8" / "uint8" / "binary" / "ubinary" codes
        (products/quantization.py; int8 / uint8 buckets from `ranges` (2, D) or `calibration_embeddings`, else from
        these embeddings, which makes a text's codes depend on the others, as in sentence-transformers). Text cut by
        the window is reported as by every runner (warn_truncation, tally: products/runner.py); the prompt counts
        towards the window. adapter: the task adapter this call adds (a checkpoint carrying them, jina-embeddings-v3's,
        loaded without adapter=: nn/lora.py), and the prompt of that name the default one unless the call or the
        directory names one, as loading with adapter= does. output_value: "sentence_embedding" (the default), or
        "token_embeddings" (a list of (L_i, C) tensors) or None (a list of dicts), as the module docstring says."""
        check_precision(precision)
        if output_value not in OUTPUT_VALUES:
            raise ValueError(f"output_value must be one of {OUTPUT_VALUES}, got {output_value!r}")
        if output_value != "sentence_embedding" and precision != "float32":
            raise ValueError(f"precision {precision!r} quantizes sentence embeddings: output_value={output_value!r} "
                             f"gives float32 token embeddings")
        if adapter is not None:
            lora.check(self.model, adapter)  # before any text runs
            if prompt_name is None and prompt is None and self.default_prompt_name is None and adapter in self.prompts:
                prompt_name = adapter
        truncate_dim = check_truncate_dim(truncate_dim if truncate_dim is not None else self.truncate_dim)
        if isinstance(texts, str):
            if precision in ("int8", "uint8") and ranges is None and calibration_embeddings is None:
                raise ValueError(f"cannot compute {precision} quantization ranges from a single embedding: give "
                                 "ranges= or calibration_embeddings=")
            return self.encode([texts], prompt_name=prompt_name, prompt=prompt, batch_size=batch_size,
                               normalize_embeddings=normalize_embeddings, truncate_dim=truncate_dim,
                               precision=precision, ranges=ranges, calibration_embeddings=calibration_embeddings,
                               show_progress_bar=show_progress_bar, warn_truncation=warn_truncation, tally=tally,
                               adapter=adapter, output_value=output_value)[0]
        prompt = self.resolve_prompt(prompt_name=prompt_name, prompt=prompt)
        texts = check_texts("texts", texts)
        if texts:
            texts, constants = self._prompted(texts, prompt)
            if adapter is not None:  # every batch carries it, to the worker processes too (forward)
                constants = {**(constants or {}), "adapter": adapter}
            if output_value != "sentence_embedding":
                constants = {**(constants or {}), "token_output": 1}
            results = self.run(texts, progress=show_progress_bar, batch_size=batch_size, constants=constants)
            self._count(results.truncated, warn_truncation, tally)
            values = results.values
        else:
            values = torch.empty(0, self.full_dimension) if output_value == "sentence_embedding" else []
        if output_value == "token_embeddings":
            return [entry["token_embeddings"] for entry in values]
        if output_value is None:
            for entry in values:
                entry["sentence_embedding"] = finish(entry["sentence_embedding"][None], truncate_dim=truncate_dim,
                                                     normalize_embeddings=False)[0]
            return values
        values = finish(values, truncate_dim=truncate_dim, normalize_embeddings=normalize_embeddings)
        if precision == "float32":
            return values
        return quantize_embeddings(values, precision, ranges=ranges, calibration_embeddings=calibration_embeddings)

    def encode_late_chunks(self, document: str, spans: Sequence[tuple[int, int]], *, prompt_name: str | None = None,
                           prompt: str | None = None, overlap: int | None = None, batch_size: int | None = None,
                           normalize_embeddings: bool = EMBED_NORMALIZE, truncate_dim: int | None = None,
                           adapter: str | None = None) -> Tensor:
        """(S, dimension) float32: late chunking (Günther et al. 2024): the document runs through the encoder once,
        and spans[s], a character range [start, end) of the document, gets the model's pipeline after the encoder
        (embed_state: its pooling, each Dense, Normalize) over the final states of the tokens its range overlaps
        (products/token_spans.py says which). The pooling is the model's, on each span's tokens: mean (and max,
        weightedmean, mean_sqrt_len_tokens) over them; cls takes the span's first token and lasttoken its last,
        which is what they mean on a span, and of little use: late chunking is meant for mean-pooling models.
        A document past the window is not cut: it runs as overlapping windows (`overlap` tokens; default a quarter
        of the window's room), each token's state taken from the window where it is farthest from a cut (a causal
        model's: the earliest window holding it; token_spans). prompt_name / prompt: put before the document, as
        encode does, and before every window's text when it runs as windows (its tokens belong to no span).
        normalize_embeddings, truncate_dim and adapter: as encode's."""
        if not isinstance(document, str):
            raise ValueError(f"document must be a string, got {type(document).__name__}")
        if problem := text_problem(document):
            raise ValueError(f"document {problem}")
        spans = token_spans.check_spans(spans, len(document))
        if adapter is not None:
            lora.check(self.model, adapter)
            if prompt_name is None and prompt is None and self.default_prompt_name is None and adapter in self.prompts:
                prompt_name = adapter
        truncate_dim = check_truncate_dim(truncate_dim if truncate_dim is not None else self.truncate_dim)
        prompt = self.resolve_prompt(prompt_name=prompt_name, prompt=prompt) or ""
        backend = self.tokenizer.backend
        backend.no_truncation()
        whole = token_spans.Document.of(backend.encode(prompt + document)).with_prompt(len(prompt))
        masks = token_spans.span_masks(whole, spans, shift=len(prompt))  # (S, L): refused before any model work
        ids, types, starts = token_spans.windows(whole, self.max_length, overlap)
        constants = {"token_output": 1, **({"adapter": adapter} if adapter is not None else {})}
        with torch.inference_mode():
            results = self.engine.run_encoded(Encoded(ids, types, [0] * len(ids)), self.forward,
                                              batch_size=batch_size, constants=constants)
            hidden = token_spans.assemble(whole, [entry["token_embeddings"] for entry in results.values], starts,
                                          self.max_length, causal=self.model.config.causal)  # (L, C) float32
            weight = next(self.model.parameters())
            hidden, masks = hidden.to(device=weight.device, dtype=weight.dtype), masks.to(weight.device)
            parts = [self.embed_state(hidden[None].expand(len(group), -1, -1), group).cpu()
                     for group in masks.split(SPAN_GROUP)]
        return finish(torch.cat(parts).float(), truncate_dim=truncate_dim, normalize_embeddings=normalize_embeddings)

    def encode_query(self, texts: Sequence[str] | str, *, prompt_name: str | None = None, prompt: str | None = None,
                     **options) -> Tensor:
        """encode with the "query" prompt unless the call names one (SentenceTransformer.encode_query: "query" is
        always among the prompts, "" unless the model saved one, so the default prompt is never used here)."""
        if prompt_name is None and prompt is None:
            prompt_name = self.task_prompt_name("query")
        return self.encode(texts, prompt_name=prompt_name, prompt=prompt, **options)

    def encode_document(self, texts: Sequence[str] | str, *, prompt_name: str | None = None,
                        prompt: str | None = None, **options) -> Tensor:
        """encode with the first of the "document", "passage", "corpus" prompts the model has unless the call names
        one (SentenceTransformer.encode_document)."""
        if prompt_name is None and prompt is None:
            prompt_name = self.task_prompt_name("document")
        return self.encode(texts, prompt_name=prompt_name, prompt=prompt, **options)

    def task_prompt_name(self, task: str) -> str:
        """The prompt encode_query ("query") or encode_document ("document") puts first when the call names none:
        "query", or the first of "document", "passage", "corpus" the model has (SentenceTransformer's)."""
        if task == "query":
            return "query"
        if task == "document":
            return next(name for name in ("document", "passage", "corpus") if name in self.prompts)
        raise ValueError(f"task must be 'query' or 'document', got {task!r}")

    def forward(self, batch: dict[str, Tensor]) -> Tensor | list[dict[str, Tensor]]:
        """The embeddings of one padded batch: pooled (less the prompt's tokens when the batch carries
        a prompt_length), then each Dense, then Normalize. A batch carrying token_output: one dict per sequence
        (a ragged forward, runtime/engine.py) of its real tokens' final states (token_embeddings), input_ids,
        attention_mask, token_type_ids where the batch has them, and its sentence_embedding."""
        batch = dict(batch)
        skip = int(batch.pop("prompt_length", 0))
        tokens = bool(batch.pop("token_output", 0))
        final = "all" if tokens else pooling_modes.final_tokens(self.pooling, prompt_length=skip)
        with lora.chosen(self.model, batch.pop("adapter", None)):
            hidden = self.model(**batch, unpad=self.unpad, final_tokens=final).last_hidden_state
        mask = batch["attention_mask"][:, :hidden.size(1)]
        embedded = self.embed_state(hidden, mask, prompt_length=skip)
        if not tokens:
            return embedded
        names = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in batch]
        return [{"token_embeddings": hidden[i, :n].float(), **{name: batch[name][i, :n] for name in names},
                 "sentence_embedding": embedded[i]} for i, n in enumerate(batch_lengths(batch))]

    def embed_state(self, hidden: Tensor, mask: Tensor, *, prompt_length: int = 0) -> Tensor:
        """(B, D) float32: the pipeline after the encoder, on a last hidden state (B, L, C) and its mask (B, L): the
        pooling (less `prompt_length` leading tokens where the Pooling module leaves the prompt out), each Dense, then
        Normalize. Differentiable (products/probes.py reads a forward's embedding through it)."""
        x = pooling_modes.pool(hidden, mask, self.pooling, prompt_length=prompt_length)
        for layer in self.dense:
            x = layer(x)
        if self.normalize:
            x = F.normalize(x, p=2, dim=1)
        return x.float()


def finish(values: Tensor, *, truncate_dim: int | None, normalize_embeddings: bool) -> Tensor:
    """encode's last steps on the pipeline's embeddings: the first `truncate_dim` dimensions kept, then each row
    normalised where asked (sentence-transformers' order: truncate, then normalize)."""
    if truncate_dim is not None:
        values = values[:, :truncate_dim]
    return F.normalize(values, p=2, dim=1) if normalize_embeddings else values


def model_prompts(prompts: dict[str, str] | None, default_prompt_name: str | None) -> dict[str, str]:
    """A model's prompts as sentence-transformers v6 keeps them (BaseModel._default_prompts: "query" and "document"
    are always there, "" unless saved); a default_prompt_name that names none of them is a ValueError."""
    prompts = {"query": "", "document": "", **(prompts or {})}
    if default_prompt_name is not None and default_prompt_name not in prompts:
        raise ValueError(f"default prompt name {default_prompt_name!r} is not one of the prompts {list(prompts)}")
    return prompts


def resolve_prompt(prompts: dict[str, str], default_prompt_name: str | None, *, prompt_name: str | None = None,
                   prompt: str | None = None) -> str | None:
    """SentenceEncoder.resolve_prompt's rule (sentence-transformers _resolve_prompt), for any runner with prompts."""
    if prompt is not None:
        if not isinstance(prompt, str):
            raise ValueError(f"prompt must be a string, got {type(prompt).__name__}")
        if prompt_name is not None:
            warnings.warn("give either prompt or prompt_name, not both: prompt_name is ignored", stacklevel=4)
        return prompt
    if prompt_name is not None:
        if prompt_name not in prompts:
            raise ValueError(f"prompt name {prompt_name!r} is not one of this model's prompts {list(prompts)}")
        return prompts[prompt_name]
    return prompts.get(default_prompt_name) if default_prompt_name is not None else None


def prompt_length(tokenizer: Tokenizer, prompt: str, max_length: int) -> int:
    """How many leading tokens of a prompted text are the prompt's, as sentence-transformers counts them
    (Transformer._get_prompt_length): the prompt tokenized alone, with the special tokens and under the
    window, less its last token when that is a special one (the [SEP] / </s> that closes it). The count
    does not look at the text after it: with a BPE prompt ending in a space ("query: "), the first word
    of the text, which takes that space, is counted as the prompt's too, as sentence-transformers does."""
    (ids,) = tokenizer.encode_ids([prompt], max_length=max_length).ids
    specials = {i for i, token in tokenizer.backend.get_added_tokens_decoder().items() if token.special}
    return len(ids) - (ids[-1] in specials)

