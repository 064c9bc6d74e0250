"""Classifier: sequence classifiers, NLI models and cross-encoder rerankers from
*ForSequenceClassification checkpoints (transformers, sentence-transformers CrossEncoder dirs).

    clf = Classifier.from_pretrained("path/or/hub-id")
    clf.predict(["premise", ...], ["hypothesis", ...])    # (N, num_labels), or (N,) for one label
    clf.rerank("query", ["doc 1", "doc 2"])                # [(index, score), ...] best first

A CrossEncoder saved as modules (sentence-transformers 5.4+, model_type "CrossEncoder" in
config_sentence_transformers.json: modules.json's Transformer, then a head on its tokens:
Pooling, Dense, LayerNorm in order, the last Dense writing "scores"; Ettin's rerankers are Pooling(cls) -> Dense(GELU)
-> LayerNorm -> Dense(1)) runs as CrossEncoderModel: our Encoder, then that head (CrossEncoderHead); its activation is
the saved one, else CrossEncoder's default (sigmoid for one label, none otherwise:
CrossEncoder.get_default_activation_fn).
A causal language model's CrossEncoder (a Transformer with transformer_task "text-generation", then LogitScore:
Qwen3-Reranker, mxbai-rerank-v2) runs as CrossEncoderModel too: our causal Encoder, then LogitScoreHead, the
next-token logits of the true (and false) token at each row's last real token: two vocabulary rows read from the
checkpoint, never the vocabulary's projection. Its pairs are rendered by the model's chat template
(text/chat_template.py: "query" and "document" messages, a prompt as a system message before them) as
sentence-transformers renders, tokenizes and cuts them; without a template, as text pairs.

Pairs are cut to the window longest-first, as transformers' tokenizers (truncation=True) and
CrossEncoder do, and the cut is reported as by every runner (products/runner.py). Batches go through
the shared batching engine (deduplicated, sorted by length, packed). One call may mix single texts
and pairs (pairs[i] None); rows come back in input order. The activation is chosen per call;
`activate`, `label_ranking` and `rank` turn logits into the answers predict and rerank give.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Unpack

import torch
from torch import Tensor, nn

from minialign import convert
from minialign.nn.activations import ACTIVATIONS as FUNCTIONS, TORCH_MODULES
from minialign.products.choices import CLASSIFIER_ACTIVATION as ACTIVATION  # predict's default
from minialign.products.choices import CLASSIFIER_ACTIVATIONS as ACTIVATIONS  # what predict applies
from minialign.products import pooling as pooling_modes
from minialign.products.embeddings import Dense, model_prompts, resolve_prompt
from minialign.products.runner import LoadOptions, Loading, Runner, inputs_of
from minialign.runtime.engine import Results, Truncation
from minialign.nn.layout import HostBatch
from minialign.nn.linear import Linear
from minialign.sources import Source, resolve
from minialign.loading import build, read_checkpoint, resolve_device
from minialign.models.encoder import Encoder
from minialign.models.head_models import ClassifierModel, ClassifierOutput
from minialign.text.chat_template import ChatTemplate
from minialign.text.tokenizer import Tokenizer
from minialign.text.validation import check_texts, value_problem

# The weights predictions read, which a checkpoint must hold (loading.weights.build refuses it otherwise).
TRAINED = ("encoder.pooler.", "classifier.")
NO_HEAD = ("A Classifier needs a fine-tuned *ForSequenceClassification or CrossEncoder checkpoint; this looks like a "
           "plain encoder (a backbone or an embedding model: use SentenceEncoder / `minialign embed` for that). "
           "To fine-tune a new head, load ma.ClassifierModel, whose new head starts the same in every run.")


def apply_activation(logits: Tensor, activation: str) -> Tensor:
    """One of ACTIVATIONS (but "auto", which Classifier.activation resolves) on logits (N, num_labels)."""
    return FUNCTIONS[activation](logits)


def pipeline_activation(num_labels: int, problem_type: str | None) -> str:
    """transformers' TextClassificationPipeline default (function_to_apply): none for regression,
    sigmoid for multi-label or one label, softmax otherwise."""
    if problem_type == "regression":
        return "none"
    if problem_type == "multi_label_classification" or num_labels == 1:
        return "sigmoid"
    return "softmax"


def crossencoder_activation(path: str | None) -> str | None:
    """Ours for a CrossEncoder's saved activation; None when none is saved. As CrossEncoder does,
    a path outside torch (custom code, not trusted) falls back to its default."""
    if path is None or not path.startswith("torch."):
        return None
    if TORCH_MODULES.get(path) not in ACTIVATIONS:
        supported = [module for module, name in TORCH_MODULES.items() if name in ACTIVATIONS]
        raise ValueError(f"CrossEncoder activation {path!r} is not supported; supported: {', '.join(supported)}")
    return TORCH_MODULES[path]


# CrossEncoder's activation where none is saved (CrossEncoder.get_default_activation_fn), by num_labels == 1.
CROSS_ENCODER_DEFAULT = {True: "torch.nn.modules.activation.Sigmoid", False: "torch.nn.modules.linear.Identity"}
CAUSAL_TASK = "text-generation"  # the Transformer module's transformer_task under a LogitScore module


class CrossEncoderHead(nn.Module):
    """A modular CrossEncoder's modules after its Transformer, in order (sentence_transformer/modules/pooling.py
    Pooling, base/modules/dense.py Dense, sentence_transformer/modules/layer_norm.py LayerNorm): token states (B, L, C)
    and their mask -> scores (B, num_labels). Pooling is products/pooling.py's; Dense is SentenceEncoder's."""

    def __init__(self, steps: list[nn.Module | list[str]]):
        """steps: a list of pooling modes (a Pooling module), a Dense or an nn.LayerNorm each, in modules.json order;
        the first one pools."""
        super().__init__()
        if not steps or not isinstance(steps[0], list):
            raise ValueError("a CrossEncoder head starts with a Pooling module")
        self.pooling = pooling_modes.check(steps[0])
        self.steps = nn.ModuleList(steps[1:])
        if any(isinstance(step, list) for step in self.steps):
            raise ValueError("a CrossEncoder head pools once, first")

    @property
    def num_labels(self) -> int:
        return self.steps[-1].linear.out_features

    def forward(self, hidden: Tensor, mask: Tensor) -> Tensor:
        x = pooling_modes.pool(hidden, mask, self.pooling)  # (B, C x modes)
        for step in self.steps:
            x = step(x)
        return x


class LogitScoreHead(nn.Module):
    """sentence-transformers' LogitScore (cross_encoder/modules/logit_score.py) on a causal LM's final states: the
    next-token logits at each row's last real token (its Transformer pads on the left, so position -1 is real; ours
    pads on the right or packs: pooling's lasttoken finds it), of the true token, less the false token's where it
    has one: (B, 1). `vocabulary` holds those tokens' rows of the LM head (k, C), so two dot products per row stand
    for Qwen3ForCausalLM's lm_head over the whole vocabulary (a Linear: each row the same bits in any batch)."""

    pooling = ["lasttoken"]
    num_labels = 1

    def __init__(self, rows: Tensor):
        super().__init__()
        if rows.dim() != 2 or rows.size(0) not in (1, 2):
            raise ValueError(f"a LogitScore head reads one or two vocabulary rows, got shape {tuple(rows.shape)}")
        self.vocabulary = Linear(rows.size(1), rows.size(0), bias=False)
        self.vocabulary.weight = nn.Parameter(rows, requires_grad=False)

    def forward(self, hidden: Tensor, mask: Tensor) -> Tensor:
        logits = self.vocabulary(pooling_modes.pool(hidden, mask, self.pooling))  # (B, k): logits[:, -1][:, ids]
        return logits[:, :1] - logits[:, 1:] if logits.size(1) == 2 else logits


class CrossEncoderModel(nn.Module):
    """A modular CrossEncoder: an Encoder (the Transformer module) and its CrossEncoderHead or LogitScoreHead; called
    as ClassifierModel is, its logits the head's scores."""

    def __init__(self, encoder: Encoder, head: CrossEncoderHead | LogitScoreHead):
        super().__init__()
        self.encoder, self.head = encoder, head
        labels = encoder.config.labels
        if len(labels) != head.num_labels:  # a feature-extraction config.json carries no labels of the head's
            labels = tuple(f"LABEL_{i}" for i in range(head.num_labels))
        self.config = dataclasses.replace(encoder.config, labels=labels, problem_type=None)

    @property
    def int8(self) -> bool:
        """Whether the encoder's layers are int8 (dtype="int8"): the runner calibrates them (Runner._start)."""
        return getattr(self.encoder, "int8", False)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                position_ids: Tensor | None = None, *, unpad: bool = False, host: HostBatch | None = None
                ) -> ClassifierOutput:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        out = self.encoder(input_ids, attention_mask, token_type_ids, position_ids, unpad=unpad, host=host,
                           final_tokens=pooling_modes.final_tokens(self.head.pooling))
        hidden = out.last_hidden_state  # (B, L, C), or (B, 1, C) where the head reads the first tokens only
        return ClassifierOutput(self.head(hidden, attention_mask[:, :hidden.size(1)]), hidden)


def read_cross_encoder(source: Source, modules: list[tuple[str, str]],
                       load: LoadOptions) -> tuple[CrossEncoderModel, Source]:
    """A modular CrossEncoder's model (its modules, convert.read_modules) and the source of its transformer's files;
    a module it cannot run is a ValueError naming it."""
    named = f"{source}/modules.json"
    if [kind for kind, _ in modules].count("Transformer") != 1 or modules[0][0] != "Transformer":
        raise ValueError(f"{named}: a CrossEncoder's first module, and only it, must be a Transformer")
    inner = source.subfolder(modules[0][1])  # an old layout keeps the Transformer in 0_Transformer/
    inner = inner if inner.file("config.json", optional=True) else source
    if any(kind == "LogitScore" for kind, _ in modules):
        return read_logit_score(source, modules, inner, load), inner
    steps: list[nn.Module | list[str]] = []
    for i, (kind, folder) in enumerate(modules[1:], start=1):
        if kind == "Pooling":
            steps.append(pooling_modes.read(source, folder))
            continue
        if kind == "LayerNorm":
            norm = convert.sbert.read_layer_norm(source, folder)
            layer = nn.LayerNorm(norm["weight"].numel())  # torch's eps, as the module's nn.LayerNorm(dimension)
            layer.load_state_dict(norm, assign=True)
            steps.append(layer)
            continue
        reads, writes = convert.sbert.read_dense_features(source, folder)
        last = i == len(modules) - 1
        wanted = (convert.sbert.SENTENCE_EMBEDDING, convert.sbert.SCORES if last else convert.sbert.SENTENCE_EMBEDDING)
        if (reads, writes) != wanted:
            raise ValueError(f"{named}: Dense module {folder} reads {reads!r} and writes {writes!r}; minialign runs a "
                             f"head whose Dense modules read and write {wanted[0]!r}, the last writing {wanted[1]!r}")
        steps.append(Dense(**convert.read_dense(source, folder)))
    if not steps or not isinstance(steps[-1], Dense):
        raise ValueError(f"{named}: a CrossEncoder's head must end with a Dense module writing 'scores'")
    head = CrossEncoderHead(steps)
    encoder = build(Encoder, read_checkpoint(inner), **load.only("device", "dtype", "attn_backend"))
    head = head.to(device=resolve_device(load.device), dtype=next(encoder.parameters()).dtype)
    return CrossEncoderModel(encoder, head), inner


def read_logit_score(source: Source, modules: list[tuple[str, str]], inner: Source,
                     load: LoadOptions) -> CrossEncoderModel:
    """A causal LM CrossEncoder (Transformer, LogitScore): the causal Encoder and the LogitScore's vocabulary rows."""
    named = f"{source}/modules.json"
    if [kind for kind, _ in modules] != ["Transformer", "LogitScore"]:
        raise ValueError(f"{named}: a LogitScore module must follow the Transformer directly and end the model, got "
                         f"{[kind for kind, _ in modules]}")
    task = convert.read_sentence_config(inner).get("transformer_task")
    if task not in (None, CAUSAL_TASK):
        raise ValueError(f"{inner}/sentence_bert_config.json: transformer_task {task!r} under a LogitScore module; "
                         f"it reads a causal language model's logits ({CAUSAL_TASK!r})")
    ids = convert.sbert.read_logit_score(source, modules[1][1])
    encoder = build(Encoder, read_checkpoint(inner), **load.only("device", "dtype", "attn_backend"))
    if not encoder.config.causal:
        raise ValueError(f"{inner}: a LogitScore module reads a causal language model's next-token logits; this "
                         f"{encoder.config.arch} model attends both ways")
    wanted = [ids["true_token_id"]] + ([ids["false_token_id"]] if ids["false_token_id"] is not None else [])
    rows = convert.sbert.read_vocab_rows(inner, wanted, tied=encoder.config.tie_word_embeddings)
    head = LogitScoreHead(rows).to(device=resolve_device(load.device), dtype=next(encoder.parameters()).dtype)
    return CrossEncoderModel(encoder, head)


def transformer_window(settings: dict, tokenizer: Tokenizer, positions: int) -> int:
    """A CrossEncoder's Transformer module's window (base/modules/transformer.py): processing_kwargs' max_length
    (its "chat_template", else its "text" settings), else sentence_bert_config.json's max_seq_length, else the
    tokenizer's model_max_length within the model's positions (the positions where the tokenizer saves none).
    settings: the module's sentence_bert_config.json."""
    processing = settings.get("processing_kwargs") or {}
    for value in ((processing.get("chat_template") or {}).get("max_length"),
                  (processing.get("text") or {}).get("max_length"), settings.get("max_seq_length")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return min(tokenizer.saved_max_length or positions, positions)


def read_chat(source: Source, settings: dict, tokenizer: Tokenizer) -> ChatTemplate | None:
    """A causal CrossEncoder's chat template, as its Transformer module reads pairs (sentence_bert_config.json:
    modality_config "message" and its "format", processing_kwargs "chat_template"); None where its pairs are read
    as text (no template, or a modality_config without "message"). settings: its sentence_bert_config.json."""
    modalities = settings.get("modality_config")
    if isinstance(modalities, dict) and "message" not in modalities:
        return None
    message = (modalities or {}).get("message") or {}
    keywords = dict(((settings.get("processing_kwargs") or {}).get("chat_template")) or {})
    restore = bool(keywords.pop("restore_suffix", True))
    chat = ChatTemplate.from_dir(source.path, special_tokens=tokenizer.special_tokens,
                                 message_format=message.get("format", "auto"), keywords=keywords,
                                 restore_suffix=restore, truncation_side=tokenizer.truncation_side)
    if chat is not None:
        chat.check_pairs()
    return chat


class Classifier(Runner):
    truncation_unit, truncation_like = "text(s) or pair(s)", "a transformers tokenizer with truncation=True"
    progress_label = "classifying"
    calibration_pairs = True  # rerankers and pair classifiers read pairs

    def __init__(self, model: ClassifierModel, tokenizer: Tokenizer, *, batch_size: int | None = None,
                 max_tokens: int | None = None, max_length: int | None = None, unpad: bool | None = None,
                 saved_activation: str | None = None, workers: int = 1, compile: bool | str = False,
                 threads: int | None = None, chat: ChatTemplate | None = None,
                 prompts: dict[str, str] | None = None, default_prompt_name: str | None = None):
        """saved_activation: the activation a sentence-transformers CrossEncoder saved with the model
        (its class path), used by activation="auto". chat: the template a causal CrossEncoder renders its inputs
        with (read_chat). prompts, default_prompt_name: as config_sentence_transformers.json saves them; a call's
        prompt goes before the first text of each input (CrossEncoder.predict's prompt), or, with a chat template,
        in a system message before the messages. The other options: Runner._start."""
        self.saved_activation = crossencoder_activation(saved_activation)
        self.chat = chat
        self.prompts, self.default_prompt_name = model_prompts(prompts, default_prompt_name), default_prompt_name
        self._start(model, tokenizer, max_length=max_length, batch_size=batch_size, max_tokens=max_tokens,
                    unpad=unpad, compile=compile, workers=workers, threads=threads,
                    truncation="longest_first")

    @classmethod
    def from_pretrained(cls, src: str | Path, *, max_length: int | None = None,
                        **keywords: Unpack[Loading]) -> Classifier:
        """A transformers *ForSequenceClassification directory or hub id (a CrossEncoder dir too),
        or a minialign directory of one. The keywords every runner takes are products/runner.py's (Loading)."""
        load = LoadOptions.of(keywords, f"{cls.__name__}.from_pretrained")
        source = resolve(src, revision=load.revision, cache_dir=load.cache_dir)  # every file below is read from it
        saved = convert.crossencoder_activation(source)  # a CrossEncoder's saved activation, if any
        prompts, default_prompt_name = convert.read_prompts(source)
        options = {"prompts": prompts, "default_prompt_name": default_prompt_name}
        modules = None
        if convert.read_model_config(source).get("model_type") == "CrossEncoder":  # sentence-transformers' own test
            modules = convert.read_modules(source, supported=convert.sbert.CROSS_ENCODER_MODULES)
        if modules is not None and [kind for kind, _ in modules] != ["Transformer"]:  # a head saved as modules
            model, inner = read_cross_encoder(source, modules, load)
            settings = convert.read_sentence_config(inner)  # the Transformer module's
            tokenizer = load.open_tokenizer(inner, do_lower_case=settings.get("do_lower_case", False))
            saved = saved or CROSS_ENCODER_DEFAULT[model.head.num_labels == 1]
            max_length = max_length or transformer_window(settings, tokenizer, model.encoder.config.max_seq_len)
            if isinstance(model.head, LogitScoreHead):
                options["chat"] = read_chat(inner, settings, tokenizer)
        else:
            ckpt = read_checkpoint(source, task=load.adapter)
            model = build(ClassifierModel, ckpt, require=TRAINED, advice=NO_HEAD, **load.only("device", "dtype",
                                                                                                "attn_backend"))
            tokenizer = load.open_tokenizer(source, ckpt.tokenizer)
        classifier = cls(model, tokenizer, max_length=max_length, saved_activation=saved, **options,
                         **load.engine())
        classifier.source = str(src)
        return classifier

    @property
    def labels(self) -> list[str]:
        """Label names by index (id2label)."""
        return list(self.model.config.labels)

    def activation(self, activation: str = ACTIVATION) -> str:
        """The activation `predict` applies: "auto" is the CrossEncoder's saved one when the model
        carries it, else transformers' text-classification pipeline rule."""
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        if activation != "auto":
            return activation
        return self.saved_activation or pipeline_activation(len(self.labels), self.model.config.problem_type)

    @property
    def reranker(self) -> bool:
        """A one-label model: a cross-encoder reranker (or a regressor), which `rerank` takes."""
        return len(self.labels) == 1

    def settings(self, *, activation: str = ACTIVATION) -> dict:
        return {**super().settings(), "activation": self.activation(activation)}

    def predict(self, texts: Sequence[str] | str, pairs: Sequence[str | None] | str | None = None, *,
                activation: str = ACTIVATION, progress: bool = False, warn_truncation: bool | None = None,
                tally: Truncation | None = None, prompt_name: str | None = None, prompt: str | None = None) -> Tensor:
        """(N, num_labels) float32 scores of texts, or text pairs, or both in one call (pairs[i] None:
        texts[i] alone), row i for input i; (N,) for a one-label model. One text (and one pair text) as
        strings gives that input's row alone: (num_labels,), or a 0-d score for a one-label model (as
        CrossEncoder.predict does for one pair). Text cut by the window is reported as by every runner
        (warn_truncation, tally: products/runner.py)."""
        if isinstance(texts, str):
            if pairs is not None and not isinstance(pairs, str):
                raise ValueError(f"texts is one string, so pairs must be one string or None, got {type(pairs).__name__}")
            return self.predict([texts], None if pairs is None else [pairs], activation=activation, progress=progress,
                                warn_truncation=warn_truncation, tally=tally, prompt_name=prompt_name,
                                prompt=prompt)[0]
        function = self.activation(activation)
        texts = check_texts("texts", texts)
        if pairs is not None:  # None items are single texts: checked as "" for the others' indices
            check_texts("pairs", pairs if isinstance(pairs, str) or not isinstance(pairs, Sequence)
                        else ["" if p is None else p for p in pairs])
            if len(pairs) != len(texts):
                raise ValueError(f"texts and pairs must have equal length, got {len(texts)} and {len(pairs)}")
        text = self.resolve_prompt(prompt_name=prompt_name, prompt=prompt)
        results = self._logits(inputs_of(texts, pairs), progress, prompt=text)
        self._count(results.truncated, warn_truncation, tally)
        return self.activate(results.values, function)

    def resolve_prompt(self, *, prompt_name: str | None = None, prompt: str | None = None) -> str | None:
        """The prompt a call uses (SentenceEncoder.resolve_prompt's rule, sentence-transformers' _resolve_prompt)."""
        return resolve_prompt(self.prompts, self.default_prompt_name, prompt_name=prompt_name, prompt=prompt)

    def _logits(self, inputs: list, progress: bool = False, *, prompt: str | None = None) -> Results:
        if not inputs:
            return Results(torch.empty(0, len(self.labels)), torch.empty(0, dtype=torch.long))
        if self.chat is not None:
            return self._chat_logits(inputs, progress, prompt)
        if prompt:  # sentence-transformers' prepend_prompt_to_texts: before the first text of each input
            inputs = [(prompt + x[0], x[1]) if isinstance(x, tuple) else prompt + x for x in inputs]
        return self.run(inputs, progress=progress)

    def conversations(self, inputs: list, prompt: str | None = None) -> list[list[dict]]:
        """Each input's messages for the chat template: a pair's query and document, a text alone a user message."""
        return [self.chat.pair(*x, prompt=prompt or None) if isinstance(x, tuple) else
                self.chat.pair(x, prompt=prompt or None) for x in inputs]

    @torch.inference_mode()
    def _chat_logits(self, inputs: list, progress: bool, prompt: str | None) -> Results:
        """Inputs rendered by the chat template and run through the engine (each distinct input once)."""
        unique: dict = {}
        where = torch.tensor([unique.setdefault(x, len(unique)) for x in inputs], dtype=torch.long)
        encoded = self.chat.encode(self.tokenizer, self.conversations(list(unique), prompt), self.max_length)
        results = self.engine.run_encoded(encoded, self.forward, progress=self.progress_label if progress else False)
        return Results(results.values[where], results.truncated[where])

    def over_window(self, inputs: Sequence, *, window: int | None = None,
                    prompt: str | None = None) -> list[tuple[int, int]]:
        """Runner.over_window, the prompt counted; with a chat template, on the rendered inputs."""
        if self.chat is None:
            return super().over_window([(prompt + x[0], x[1]) if isinstance(x, tuple) else prompt + x
                                        for x in inputs] if prompt else inputs, window=window)
        window = window or self.max_length
        rendered = [self.chat.render(m) for m in self.conversations(list(inputs), prompt)]
        counts = self.tokenizer.backend.encode_batch(rendered, add_special_tokens=False)
        return [(i, len(e.ids)) for i, e in enumerate(counts) if len(e.ids) > window]

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        """float32 logits of one padded batch (what the batching engine calls)."""
        return self.model(**batch, unpad=self.unpad).logits.float()

    logits = forward  # its name before the runner contract

    def activate(self, logits: Tensor, activation: str = ACTIVATION) -> Tensor:
        """Scores from logits (N, num_labels): the activation applied (see `activation`); (N,) for a
        one-label model."""
        scores = apply_activation(logits, self.activation(activation))
        return scores[:, 0] if self.reranker else scores

    def label_ranking(self, scores: Tensor, *, top_k: int | None = None) -> list[list[tuple[str, float]]]:
        """Per row of scores (N, num_labels) or (N,), every label and its score, best first (the top_k;
        ties in label order)."""
        rows = scores.reshape(scores.size(0), len(self.labels)).tolist()
        return [[(self.labels[i], s) for i, s in self.rank(row, top_k=top_k)] for row in rows]

    @staticmethod
    def rank(scores: Sequence[float], *, top_k: int | None = None) -> list[tuple[int, float]]:
        """(index, score) best first, the top_k of them; ties keep their order."""
        ranked = sorted(enumerate(scores), key=lambda item: item[1], reverse=True)
        return ranked if top_k is None else ranked[:top_k]

    def rerank(self, query: str, documents: Sequence[str], *, top_k: int | None = None, activation: str = ACTIVATION,
               warn_truncation: bool | None = None, tally: Truncation | None = None, prompt_name: str | None = None,
               prompt: str | None = None) -> list[tuple[int, float]]:
        """(index, score) of each document for the query, best first (a one-label model: a reranker)."""
        if not self.reranker:
            raise ValueError(f"rerank needs a one-label model (a cross-encoder reranker); this one has "
                             f"{len(self.labels)} labels: use predict")
        if problem := value_problem(query):
            raise ValueError(f"invalid input: query {problem}")
        function = self.activation(activation)
        text = self.resolve_prompt(prompt_name=prompt_name, prompt=prompt)
        results = self._logits([(query, d) for d in check_texts("documents", documents)], prompt=text)
        self._count(results.truncated, warn_truncation, tally)
        return self.rank(self.activate(results.values, function).tolist(), top_k=top_k)
