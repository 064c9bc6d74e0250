"""The model classes, for every encoder family: the Encoder, and the models with heads on it
(AlignScore's AlignModel, ClassifierModel, MaskedLMModel, TokenClassifierModel, QuestionAnsweringModel), in reading
order. What differs between families is
declared in each family's file (bert.py, roberta.py; family.py lists what a family declares) and read
here; nothing here branches on `Config.arch`.

Shapes: B batch, L sequence length, T real tokens of a packed batch, C hidden size, H heads,
D head dim (C = H * D), V vocab. Layouts (padded or packed) are described in nn/layout.py.
Mask convention: True / 1 = attend (nn/masks.py).

Reference implementations each module matches:
  transformers models/bert/modeling_bert.py and models/roberta/modeling_roberta.py (v4.x-v5.x),
  AlignScore src/alignscore/model.py (BERTAlignModel).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from minialign.loading.pretrained import Pretrained
from minialign.models.family import family_of
from minialign.models.heads import MaskedLM, SequenceClassificationHead, TokenHead
from minialign.nn import layout as layouts
from minialign.nn import masks
from minialign.nn.attention import BACKENDS, Backend, PreparedMask, choose_backend, prepare_mask
from minialign.nn.inputs import AttentionInputs, ForwardInputs
from minialign.nn.config import Config
from minialign.nn.init import init_weights
from minialign.nn.layers import Pooler
from minialign.nn.layout import FINAL_TOKENS, Layout
from minialign.nn.linear import Linear


@dataclass(frozen=True)
class ForwardPlan:
    """One forward's decisions, each made once (Encoder._plan), then read by the forward's steps."""

    attention_mask: Tensor | None  # the user's mask; None: none, or a (B, L) one without padding
    backend: Backend  # the row every layer's attention runs on (attention.choose_backend)
    final_backend: Backend  # the last layer's: `backend`, or a row taking the first tokens' queries alone
    first_only: bool  # the last layer runs for each sequence's first token alone
    layout: Layout  # padded, or the real tokens packed into one row (nn/layout.py)
    windows: tuple[int | None, ...]  # each layer's window, |i - j| <= window (None: every key)


@dataclass
class EncoderOutput:
    last_hidden_state: Tensor  # (B, L, C); (B, 1, C) when only the first tokens were computed
    pooler_output: Tensor | None  # (B, C); None for an encoder built without a pooler
    hidden_states: tuple[Tensor, ...] | None = None  # embeddings, then each layer: num_layers + 1 of (B, L, C)
    attentions: tuple[Tensor, ...] | None = None  # one (B, H, L, L) per layer


class Encoder(Pretrained):
    """An encoder of any family: its embeddings, its stack of layers (and the further parts it
    declares), a pooler. BertModel / RobertaModel."""

    # Loading contract (loading.pretrained): where this model's names sit among a checkpoint's tensors
    # (AlignModel's names), what it reads (owns), and what may be initialised when a checkpoint lacks it.
    checkpoint_prefix = "encoder."
    initialisable = ("pooler",)

    @classmethod
    def owns(cls, config: Config, *, pooler: bool | None = None) -> tuple[str, ...]:
        family = family_of(config)
        with_pooler = family.pooler if pooler is None else pooler
        return ("embeddings", "layers", *family.parts, *(("pooler",) if with_pooler else ()))

    def __init__(self, config: Config, *, attn_backend: str = "sdpa", seed: int | None = None,
                 pooler: bool | None = None):
        """A randomly initialised encoder (BERT's initialisation; `seed` makes it reproducible).
        pooler: build one (None: as the family's bare model does); without one pooler_output is None."""
        super().__init__()
        if attn_backend not in BACKENDS:
            raise ValueError(f"unknown attention backend {attn_backend!r}; choose from {tuple(BACKENDS)}")
        family = family_of(config)
        self.config, self.attn_backend, self.family = config, attn_backend, family
        with torch.random.fork_rng(devices=[], enabled=seed is not None):  # a seed leaves the global RNG alone
            self.embeddings = family.Embeddings(config)
            self.layers = nn.ModuleList(family.layers(config))
            for name, build in family.parts.items():
                self.add_module(name, build(config))
            self.pooler = Pooler(config) if (family.pooler if pooler is None else pooler) else None
            init_weights(self, config, seed)
        if config.pruned_heads:  # a pruned model's config: its checkpoint holds the pruned layers
            self._prune(dict(config.pruned_heads))

    def prune_heads(self, heads_to_prune: dict[int, list[int]]) -> None:
        """Remove attention heads, in place: {layer: [heads]}, heads numbered as in the unpruned layer (transformers
        v4 PreTrainedModel.prune_heads; its config's pruned_heads records them, so a saved model loads pruned). A
        pruned head's output is gone as if a head_mask of 0 silenced it, and its parameters with it. Parameters
        of a pruned layer's attention become new tensors: make an optimizer afterwards."""
        merged = {layer: set(heads) for layer, heads in self.config.pruned_heads}
        for layer, heads in heads_to_prune.items():
            merged.setdefault(layer, set()).update(heads)
        config = replace(self.config, pruned_heads=merged)  # checks every layer and head index
        self._prune(heads_to_prune)
        self.config = config

    def _prune(self, heads_to_prune: dict[int, Any]) -> None:
        if self.family.unprunable:
            raise ValueError(f"{self.config.arch} heads cannot be pruned: {self.family.unprunable}")
        for layer, heads in heads_to_prune.items():
            self.layers[layer].attention.prune(heads)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None, *, output_hidden_states: bool = False, output_attentions: bool = False,
        unpad: bool = False, final_tokens: str = "all", windows_over_custom_mask: bool = True,
        head_mask: Tensor | None = None,
    ) -> EncoderOutput:
        """input_ids (B, L); attention_mask (B, L), (B, L, L) or (B|1, H|1, L, L), True/1 = attend.

        unpad: run on real tokens only. The batch (a right-padded 2-D mask) is packed into one row;
            embeddings, projections, feed-forward and LayerNorm see real tokens only; attention is
            restricted to each sequence. Outputs come back padded (pad rows zero). A batch without
            padding runs the padded layout, the same computation in fewer calls; so do forwards that
            return attentions or run under `capture`.
        final_tokens: whose final states are wanted: "all", or "first" (each sequence's first token,
            all the pooler and a classification head read): the last layer then runs for the first
            tokens alone and last_hidden_state is (B, 1, C). Hidden states, attentions and capture
            ask for every token, so with any of them the forward computes "all".
        windows_over_custom_mask: a family with local layers (ModernBERT) keeps each local layer's window on top
            of a custom (B, L, L) or 4-D mask (True, the default: the layer never sees past its window); False
            drops the windows under such a mask, as transformers does when it is given a 4-D mask
            (masking_utils: a custom mask is taken as it is). A 2-D padding mask always keeps them.
        head_mask: (H,) or (num_layers, H), transformers v4's: each head's attention probabilities times its
            entry (1 keeps the head, 0 silences it), on every backend and layout; the probabilities returned
            by output_attentions are the scaled ones, a capture's `attention.probs` the softmax before it.
            Heads are numbered as in the unpruned model: a pruned head's entry is not read.
        """
        self._check_input(input_ids)
        if final_tokens not in FINAL_TOKENS:
            raise ValueError(f"final_tokens must be one of {FINAL_TOKENS}, got {final_tokens!r}")
        plan = self._plan(input_ids, attention_mask, unpad=unpad, final_tokens=final_tokens,
                          output_hidden_states=output_hidden_states, output_attentions=output_attentions,
                          windows_over_custom_mask=windows_over_custom_mask)
        layout = plan.layout
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if position_ids is None:
            position_ids = self.embeddings.position_ids(input_ids)
        position_ids = layout.pack(position_ids)
        x = self.embeddings(layout.pack(input_ids), layout.pack(token_type_ids), position_ids)
        # the family's per-forward inputs, each built once: what every attention backend's prepare reads (the
        # relative bias by offset: (H, 2 span - 1) or None), and the keyword arguments of every layer
        attention_inputs = AttentionInputs(plan.attention_mask, layout, x.dtype, self.config.num_heads,
                                           relative=self.family.relative_bias(self, layout.span),
                                           device=x.device)
        masks = self._masks(plan, attention_inputs)
        if head_mask is not None:
            masks = [replace(mask, head_scale=scale) for mask, scale in zip(masks, self._head_scales(head_mask, x))]
        inputs = self.family.layer_inputs(self, ForwardInputs(plan.attention_mask, layout, position_ids))
        out = self._layers(x, masks, plan, inputs, output_hidden_states, output_attentions)
        if self.pooler is not None:
            out.pooler_output = self.pooler(out.last_hidden_state)
        return out

    def _plan(self, input_ids: Tensor, attention_mask: Tensor | None, *, unpad: bool, final_tokens: str,
              output_hidden_states: bool, output_attentions: bool, windows_over_custom_mask: bool) -> ForwardPlan:
        """This forward's decisions, each made here once (forward's docstring says what each option asks)."""
        B, L = input_ids.shape
        backend = self._backend(probabilities=output_attentions, query_subset=False)
        packable = attention_mask is not None and not (output_attentions or backend.whole)
        if attention_mask is not None and not (unpad and packable) and self._without_padding(attention_mask, B, L):
            attention_mask = None  # sdpa can then use its fastest kernel. Packed (unpad), a batch without
            # padding stays packed: each sequence is then attended as in any other batch (layout.bucket_length)
        # hidden states, attentions and a recording row (capture) ask for every token of every layer
        first_only = final_tokens == "first" and not (output_hidden_states or output_attentions or backend.whole)
        # the last layer's row: the first tokens' queries alone are a capability of their own (flex lacks it)
        final_backend = self._backend(probabilities=False, query_subset=True) if first_only else backend
        packable = packable and attention_mask is not None
        if packable and (unpad or self._flex_on_cpu(backend, attention_mask)):
            layout = layouts.packed(attention_mask)
        else:
            layout = layouts.padded(B, L)
        windows = self.family.attention_windows(self.config)
        if not windows_over_custom_mask and attention_mask is not None and attention_mask.dim() > 2:
            windows = [None] * len(windows)  # the caller's mask alone, as transformers takes a 4-D one
        return ForwardPlan(attention_mask, backend, final_backend, first_only, layout, tuple(windows))

    @staticmethod
    def _masks(plan: ForwardPlan, inputs: AttentionInputs) -> list[PreparedMask]:
        """Each layer's mask: one per distinct window on the plan's row, each layer handed its own; the last
        layer's for the first tokens alone, on the final row, when the plan says so."""
        by_window = {window: prepare_mask(plan.backend, replace(inputs, window=window))
                     for window in dict.fromkeys(plan.windows)}
        masks = [by_window[window] for window in plan.windows]
        if plan.first_only:
            masks[-1] = prepare_mask(plan.final_backend, replace(inputs, queries="first", window=plan.windows[-1]))
        return masks

    def _layers(self, x: Tensor, masks: list[PreparedMask], plan: ForwardPlan, inputs: dict[str, Any],
                output_hidden_states: bool, output_attentions: bool) -> EncoderOutput:
        """The stack, each layer under its own mask, the last for the first tokens alone when the plan says so;
        x (B, L, C) or packed (1, T, C)."""
        layout = plan.layout
        hidden_states = [layout.unpack(x)] if output_hidden_states else None  # embeddings, then each layer
        attentions = []
        for i, (layer, mask) in enumerate(zip(self.layers, masks, strict=True)):
            final = i == len(self.layers) - 1
            x, probs = layer(x, mask, layout.first_tokens if final and plan.first_only else None, **inputs)
            if output_hidden_states:
                hidden_states.append(layout.unpack(x))
            attentions.append(probs)
        x = self.family.finish(self, x)
        x = layout.batch_first(x) if plan.first_only else layout.unpack(x)  # (B, 1, C) or (B, L, C)
        if output_hidden_states:  # the last state is the finished one (transformers' tie_last_hidden_states)
            hidden_states[-1] = x
        return EncoderOutput(
            last_hidden_state=x,
            pooler_output=None,  # forward adds it
            hidden_states=tuple(hidden_states) if hidden_states is not None else None,
            attentions=tuple(attentions) if output_attentions else None,
        )

    def _head_scales(self, head_mask: Tensor, x: Tensor) -> list[Tensor]:
        """Each layer's (1, H_i, 1, 1) head scale from a head_mask of (H,) or (num_layers, H) (transformers v4
        PreTrainedModel.get_head_mask), the entries of its kept heads."""
        layers, heads = self.config.num_layers, self.config.num_heads
        if not isinstance(head_mask, Tensor) or tuple(head_mask.shape) not in ((heads,), (layers, heads)):
            raise ValueError(f"head_mask must be a tensor of shape ({heads},) or ({layers}, {heads}) (num_layers, "
                             f"num_heads), got {tuple(getattr(head_mask, 'shape', ())) or type(head_mask).__name__}")
        head_mask = head_mask.to(device=x.device, dtype=torch.float32 if not x.is_floating_point() else x.dtype)
        per_layer = head_mask.expand(layers, heads)
        return [per_layer[i, list(self.config.kept_heads(i))].view(1, -1, 1, 1) for i in range(layers)]

    def _backend(self, *, probabilities: bool, query_subset: bool) -> Backend:
        """The row this forward's attention runs on (attention.choose_backend, the one fallback rule), for the
        score form the family declares."""
        return choose_backend(self.attn_backend, probabilities=probabilities,
                              score_form=self.family.score_form(self.config),
                              dropout=self.training and self.config.attention_dropout > 0,
                              query_subset=query_subset)

    @staticmethod
    def _without_padding(attention_mask: Tensor, batch: int, length: int) -> bool:
        """Whether the mask is a (B, L) padding mask with no padding (one host sync; never while compiling)."""
        return (tuple(attention_mask.shape) == (batch, length) and not torch.compiler.is_compiling()
                and bool(attention_mask.all()))

    @staticmethod
    def _flex_on_cpu(backend: Backend, attention_mask: Tensor | None) -> bool:
        """Whether a right-padded batch on the flex backend runs packed whatever `unpad` says: on CPU, torch
        2.13's compiled flex kernel returns wrong values, NaN at times, for some padded batches (rows of 40 tokens
        beside one of 7; not every run), while a packed row under a document BlockMask is exact (tested over
        random length mixes, tests/nn/test_backends.py). The outputs are the same either way (pad rows zero)."""
        return (backend.name == "flex" and attention_mask is not None and attention_mask.device.type == "cpu"
                and attention_mask.dim() == 2 and not torch.compiler.is_compiling()
                and masks.right_padded_lengths(attention_mask) is not None)

    def _check_input(self, input_ids: Tensor) -> None:
        if not isinstance(input_ids, Tensor) or input_ids.dim() != 2 or input_ids.is_floating_point():
            raise ValueError(f"input_ids must be an integer tensor of shape (B, L), got "
                             f"{getattr(input_ids, 'shape', type(input_ids).__name__)}")
        if input_ids.size(1) > self.config.max_seq_len:
            raise ValueError(f"sequence length {input_ids.size(1)} exceeds the model's window of "
                             f"{self.config.max_seq_len} tokens; truncate the input")
        if input_ids.numel() and not torch.compiler.is_compiling():
            lo, hi = torch.stack(torch.aminmax(input_ids)).tolist()  # one host sync
            if lo < 0 or hi >= self.config.vocab_size:
                raise ValueError(f"input_ids hold {lo if lo < 0 else hi}, outside the vocabulary "
                                 f"[0, {self.config.vocab_size})")


def _two_labels(config: Config) -> Config:
    """transformers' default num_labels = 2, where a config has no labels."""
    return config if config.labels else dataclasses.replace(config, labels=("LABEL_0", "LABEL_1"))


class MLMHead(nn.Module):
    """The masked-LM head of any family, built from its declaration (heads.py MaskedLM; default the family's,
    Family.masked_lm): dense -> activation -> LayerNorm -> decoder (+ bias). The decoder is the word-embedding
    matrix unless the config unties it (AlignScore checkpoints carry their own). The activation is the
    family's: BERT's BertLMPredictionHead uses hidden_act, RobertaLMHead exact GELU."""

    def __init__(self, config: Config, kind: MaskedLM | None = None):
        super().__init__()
        self.kind = kind = family_of(config).masked_lm(config) if kind is None else kind
        width = kind.features(config)
        self.dense = self.norm = None  # no transform (heads.py MaskedLM.transform): the decoder reads the states
        if kind.transform:
            self.dense = Linear(config.hidden_size, width, bias=kind.dense_bias,
                                activation=kind.activation or config.activation)
            self.norm = nn.LayerNorm(width, eps=config.layer_norm_eps, bias=kind.norm_bias)
        self.decoder = None if config.tie_word_embeddings else Linear(width, config.vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size)) if kind.decoder_bias else None

    def features(self, x: Tensor) -> Tensor:
        """(..., C) final states -> (..., W): what the decoder maps to the vocabulary."""
        return x if self.dense is None else self.norm(self.dense(x))

    def decode(self, features: Tensor, word_embeddings: Tensor) -> Tensor:
        """(..., W) -> (..., V) logits, on nn/linear.py's kernel for this CPU (as every Linear of the encoder: a
        row's logits then do not depend on how many rows are multiplied with it, which F.linear's do for 1-3 rows)."""
        weight = word_embeddings if self.decoder is None else self.decoder.weight
        return self._kernel(weight)(features)

    def _kernel(self, weight: Tensor) -> Linear:
        """A Linear over the decoder's weight (the word embeddings', shared, when tied) and the head's bias, kept out
        of the state dict and made again when either parameter is replaced (loading assigns new ones)."""
        kernel = self.__dict__.get("_decoder_kernel")
        if kernel is None or kernel.weight is not weight or kernel.bias is not self.bias:
            kernel = Linear(weight.size(1), weight.size(0), bias=False, device="meta")
            kernel.weight = weight if isinstance(weight, nn.Parameter) else nn.Parameter(weight, requires_grad=False)
            kernel.bias = self.bias
            self.__dict__["_decoder_kernel"] = kernel
        return kernel

    def forward(self, x: Tensor, word_embeddings: Tensor) -> Tensor:
        return self.decode(self.features(x), word_embeddings)  # (B, L, V)


@dataclass
class AlignOutput:
    tri_label_logits: Tensor  # (B, 3): 0 aligned, 1 neutral, 2 contradiction
    seq_relationship_logits: Tensor  # (B, 2): 1 aligned
    reg_label_logits: Tensor  # (B, 1)
    prediction_logits: Tensor | None = None  # (B, L, V), only with mlm=True
    last_hidden_state: Tensor | None = None  # (B, L, C) with mlm=True, else (B, 1, C): the first tokens
    pooler_output: Tensor | None = None
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


class _OnEncoder:
    """What a model with heads on `encoder` passes on to it."""

    def prune_heads(self, heads_to_prune: dict[int, list[int]]) -> None:
        """Encoder.prune_heads on this model's encoder; its config records them too."""
        self.encoder.prune_heads(heads_to_prune)
        self.config = replace(self.config, pruned_heads=self.encoder.config.pruned_heads)


class AlignModel(_OnEncoder, Pretrained):
    """AlignScore's BERTAlignModel: an Encoder, the MLM head and three heads on the pooled first token."""

    checkpoint_prefix = ""  # see Encoder: a checkpoint's tensors are under AlignModel's names
    initialisable = ("mlm_head", "bin_layer", "tri_layer", "reg_layer")

    @classmethod
    def owns(cls, config: Config) -> tuple[str, ...]:
        return (*(f"encoder.{part}" for part in Encoder.owns(config, pooler=True)),
                "mlm_head", "bin_layer", "tri_layer", "reg_layer")

    def __init__(self, config: Config, *, attn_backend: str = "sdpa", seed: int | None = None):
        """A randomly initialised model (BERT's initialisation; `seed` makes it reproducible)."""
        super().__init__()
        if config.embedding_width != config.hidden_size:
            raise ValueError(f"AlignModel needs embeddings as wide as the encoder: its MLM head maps hidden_size "
                             f"({config.hidden_size}) onto the word embeddings, which this {config.arch} config makes "
                             f"embedding_size ({config.embedding_width}) wide; load it as an Encoder or ClassifierModel")
        self.config = config
        self.encoder = Encoder(config, attn_backend=attn_backend, seed=seed, pooler=True)  # the heads read it
        with torch.random.fork_rng(devices=[], enabled=seed is not None):
            self.mlm_head = MLMHead(config)
            self.dropout = nn.Dropout(0.1)  # AlignScore model.py: nn.Dropout(p=0.1), before bin and tri only
            self.bin_layer = Linear(config.hidden_size, 2)
            self.tri_layer = Linear(config.hidden_size, 3)
            self.reg_layer = Linear(config.hidden_size, 1)
            heads = nn.ModuleList([self.mlm_head, self.bin_layer, self.tri_layer, self.reg_layer])
            init_weights(heads, config, None if seed is None else seed + 1)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None, *, mlm: bool = False,
        output_hidden_states: bool = False, output_attentions: bool = False, unpad: bool = False,
        head_mask: Tensor | None = None,
    ) -> AlignOutput:
        """Heads on the pooled first token; the MLM head (every token) only with mlm=True. Without it
        the last layer runs for the first tokens alone (Encoder.forward final_tokens="first"), and
        last_hidden_state is (B, 1, C). unpad: see Encoder.forward."""
        out = self.encoder(input_ids, attention_mask, token_type_ids, position_ids,
                           output_hidden_states=output_hidden_states, output_attentions=output_attentions,
                           unpad=unpad, final_tokens="all" if mlm else "first", head_mask=head_mask)
        pooled = out.pooler_output
        return AlignOutput(
            tri_label_logits=self.tri_layer(self.dropout(pooled)),
            seq_relationship_logits=self.bin_layer(self.dropout(pooled)),
            reg_label_logits=self.reg_layer(pooled),
            prediction_logits=self.mlm_head(out.last_hidden_state, self.encoder.embeddings.word.weight) if mlm else None,
            last_hidden_state=out.last_hidden_state,
            pooler_output=pooled,
            hidden_states=out.hidden_states,
            attentions=out.attentions,
        )


@dataclass
class ClassifierOutput:
    logits: Tensor  # (B, num_labels)
    last_hidden_state: Tensor | None = None  # (B, 1, C): the first tokens, unless states are asked for
    pooler_output: Tensor | None = None  # where the family's classifier keeps the pooler (BERT)
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


class ClassifierModel(_OnEncoder, Pretrained):
    """<Family>ForSequenceClassification: an Encoder (with a pooler where the family's head reads it) and the
    sequence-classification head the family declares (Family.sequence_classification, heads.py)."""

    checkpoint_prefix = ""
    initialisable = ("classifier",)
    architecture = "ForSequenceClassification"

    @classmethod
    def owns(cls, config: Config) -> tuple[str, ...]:
        pooler = family_of(config).sequence_classification(config).uses_pooler
        return (*(f"encoder.{part}" for part in Encoder.owns(config, pooler=pooler)), "classifier")

    def __init__(self, config: Config, *, attn_backend: str = "sdpa", seed: int | None = None):
        super().__init__()
        config = _two_labels(config)
        kind = family_of(config).sequence_classification(config)
        self.config = config
        self.encoder = Encoder(config, attn_backend=attn_backend, seed=seed, pooler=kind.uses_pooler)
        with torch.random.fork_rng(devices=[], enabled=seed is not None):
            self.classifier = SequenceClassificationHead(config, kind)
            init_weights(self.classifier, config, None if seed is None else seed + 1)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None, *, output_hidden_states: bool = False, output_attentions: bool = False,
        unpad: bool = False, head_mask: Tensor | None = None,
    ) -> ClassifierOutput:
        """Logits on the first token, the last layer running for it alone (Encoder final_tokens="first"); a
        head that pools every token (SequenceClassification.tokens "all") gets them and the mask."""
        tokens = self.classifier.kind.tokens
        out = self.encoder(input_ids, attention_mask, token_type_ids, position_ids,
                           output_hidden_states=output_hidden_states, output_attentions=output_attentions,
                           unpad=unpad, final_tokens=tokens, head_mask=head_mask)
        logits = self.classifier(out, attention_mask)
        return ClassifierOutput(logits, out.last_hidden_state, out.pooler_output, out.hidden_states, out.attentions)



@dataclass
class MaskedLMOutput:
    logits: Tensor  # (B, L, V)
    last_hidden_state: Tensor | None = None  # (B, L, C)
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


class MaskedLMModel(_OnEncoder, Pretrained):
    """<Family>ForMaskedLM: an Encoder (no pooler) and the masked-LM head the family declares (Family.masked_lm,
    heads.py MaskedLM), its decoder the word embeddings unless the config unties it (a checkpoint whose decoder
    equals the word embeddings, or lacks it, loads tied: loading/checkpoints.py)."""

    checkpoint_prefix = ""
    initialisable = ("mlm_head",)
    hf_layout = "hf_head"  # save_pretrained(layout="hf"): transformers' *ForMaskedLM, AutoModelForMaskedLM's
    architecture = "ForMaskedLM"

    @classmethod
    def owns(cls, config: Config) -> tuple[str, ...]:
        return (*(f"encoder.{part}" for part in Encoder.owns(config, pooler=False)), "mlm_head")

    @classmethod
    def checkpoint_names(cls, config: Config) -> dict[str, str]:
        """ModernBERT's dense and norm sit among a checkpoint's names as the classifier's (heads.py MaskedLM.at)."""
        at = family_of(config).masked_lm(config).at
        return {} if at == "mlm_head" else {f"mlm_head.{part}": f"{at}.{part}" for part in ("dense", "norm")}

    def __init__(self, config: Config, *, attn_backend: str = "sdpa", seed: int | None = None):
        super().__init__()
        self.config = config
        self.encoder = Encoder(config, attn_backend=attn_backend, seed=seed, pooler=False)
        with torch.random.fork_rng(devices=[], enabled=seed is not None):
            self.mlm_head = MLMHead(config)
            init_weights(self.mlm_head, config, None if seed is None else seed + 1)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None, *, output_hidden_states: bool = False, output_attentions: bool = False,
        unpad: bool = False, head_mask: Tensor | None = None,
    ) -> MaskedLMOutput:
        """Every token's logits (B, L, V); pad rows are the head applied to zero states. unpad: see Encoder.forward.
        A product that needs the logits of real tokens only, or a few at a time, calls `mlm_head.features` and
        `mlm_head.decode` on the states it picks (products/sparse.py)."""
        out = self.encoder(input_ids, attention_mask, token_type_ids, position_ids,
                           output_hidden_states=output_hidden_states, output_attentions=output_attentions,
                           unpad=unpad, head_mask=head_mask)
        logits = self.mlm_head(out.last_hidden_state, self.encoder.embeddings.word.weight)
        return MaskedLMOutput(logits, out.last_hidden_state, out.hidden_states, out.attentions)


@dataclass
class TokenClassifierOutput:
    logits: Tensor  # (B, L, num_labels); pad positions hold the head applied to zero states
    last_hidden_state: Tensor | None = None  # (B, L, C)
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


class TokenClassifierModel(_OnEncoder, Pretrained):
    """<Family>ForTokenClassification: an Encoder (no pooler) and the token-classification head the family declares
    (Family.token_classification, heads.py TokenClassification): one row of logits per token. Which class a
    checkpoint is for comes from its config.json's `architectures` (models/auto.py): BERT's token head and its
    sequence head have the same names."""

    checkpoint_prefix = ""
    initialisable = ("classifier",)
    hf_layout = "hf_head"  # save_pretrained(layout="hf"): transformers' *ForTokenClassification
    architecture = "ForTokenClassification"

    @classmethod
    def owns(cls, config: Config) -> tuple[str, ...]:
        return (*(f"encoder.{part}" for part in Encoder.owns(config, pooler=False)), "classifier")

    def __init__(self, config: Config, *, attn_backend: str = "sdpa", seed: int | None = None):
        super().__init__()
        self.config = config = _two_labels(config)
        self.encoder = Encoder(config, attn_backend=attn_backend, seed=seed, pooler=False)
        with torch.random.fork_rng(devices=[], enabled=seed is not None):
            self.classifier = TokenHead(config, family_of(config).token_classification(config), len(config.labels))
            init_weights(self.classifier, config, None if seed is None else seed + 1)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None, *, output_hidden_states: bool = False, output_attentions: bool = False,
        unpad: bool = False, head_mask: Tensor | None = None,
    ) -> TokenClassifierOutput:
        """Every token's logits (B, L, num_labels). unpad: see Encoder.forward."""
        out = self.encoder(input_ids, attention_mask, token_type_ids, position_ids,
                           output_hidden_states=output_hidden_states, output_attentions=output_attentions,
                           unpad=unpad, head_mask=head_mask)
        logits = self.classifier(out.last_hidden_state)
        return TokenClassifierOutput(logits, out.last_hidden_state, out.hidden_states, out.attentions)


@dataclass
class QuestionAnsweringOutput:
    start_logits: Tensor  # (B, L): each token's score as the answer's first token
    end_logits: Tensor  # (B, L): as its last token
    last_hidden_state: Tensor | None = None  # (B, L, C)
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


class QuestionAnsweringModel(_OnEncoder, Pretrained):
    """<Family>ForQuestionAnswering (extractive QA): an Encoder (no pooler) and the head the family declares
    (Family.question_answering, heads.py QuestionAnswering): two logits per token, split into start and end
    (BertForQuestionAnswering.forward: logits.split(1, dim=-1))."""

    checkpoint_prefix = ""
    initialisable = ("qa_outputs",)
    hf_layout = "hf_head"  # save_pretrained(layout="hf"): transformers' *ForQuestionAnswering
    architecture = "ForQuestionAnswering"

    @classmethod
    def owns(cls, config: Config) -> tuple[str, ...]:
        return (*(f"encoder.{part}" for part in Encoder.owns(config, pooler=False)), "qa_outputs")

    @classmethod
    def checkpoint_names(cls, config: Config) -> dict[str, str]:
        """ModernBERT's head sits among a checkpoint's names as the classifier's (heads.py QuestionAnswering.at)."""
        at = family_of(config).question_answering(config).at
        return {} if at == "qa_outputs" else {"qa_outputs": at}

    def __init__(self, config: Config, *, attn_backend: str = "sdpa", seed: int | None = None):
        super().__init__()
        config = _two_labels(config)
        if len(config.labels) != 2:
            raise ValueError(f"a question-answering head has two outputs (start, end logits): num_labels 2, got "
                             f"{len(config.labels)} labels {config.labels!r}")
        self.config = config
        self.encoder = Encoder(config, attn_backend=attn_backend, seed=seed, pooler=False)
        with torch.random.fork_rng(devices=[], enabled=seed is not None):
            self.qa_outputs = TokenHead(config, family_of(config).question_answering(config), 2)
            init_weights(self.qa_outputs, config, None if seed is None else seed + 1)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None, *, output_hidden_states: bool = False, output_attentions: bool = False,
        unpad: bool = False, head_mask: Tensor | None = None,
    ) -> QuestionAnsweringOutput:
        """Every token's start and end logits, (B, L) each. unpad: see Encoder.forward."""
        out = self.encoder(input_ids, attention_mask, token_type_ids, position_ids,
                           output_hidden_states=output_hidden_states, output_attentions=output_attentions,
                           unpad=unpad, head_mask=head_mask)
        logits = self.qa_outputs(out.last_hidden_state)  # (B, L, 2)
        start, end = logits.unbind(dim=-1)
        return QuestionAnsweringOutput(start.contiguous(), end.contiguous(), out.last_hidden_state, out.hidden_states,
                                       out.attentions)
