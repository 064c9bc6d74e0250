"""The Encoder, for every encoder family: embeddings, a stack of layers, the family's finish, a pooler, and
the forward's plan (its decisions, each made once). What differs between families is declared in each
family's file (bert.py, roberta.py; family.py lists what a family declares) and read here; nothing here
branches on `Config.arch`. The models with heads on it are head_models.py's.

Shapes: B batch, L sequence length, T real tokens of a packed batch, C hidden size, H heads,
D head dim (C = H * D). Layouts (padded or packed) are described in nn/layout.py.
Mask convention: True / 1 = attend (nn/masks.py).

Reference implementations: transformers models/bert/modeling_bert.py (BertModel) and
models/roberta/modeling_roberta.py (v4.x-v5.x).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from minialign.loading.pretrained import Pretrained
from minialign.models.family import family_of
from minialign.nn import layout as layouts
from minialign.nn import masks
from minialign.nn.attention import BACKENDS, Backend, PreparedMask, choose_backend, prepare_mask
from minialign.nn.capture import forward_mask
from minialign.nn.inputs import AttentionInputs, ForwardInputs
from minialign.nn.config import Config
from minialign.nn.init import init_weights
from minialign.nn.layers import Pooler
from minialign.nn.score_functions import DISENTANGLED
from minialign.nn.layout import FINAL_TOKENS, HostBatch, Layout, Picked, check_id_range


@dataclass(frozen=True)
class ForwardPlan:
    """One forward's decisions, each made once (Encoder._plan), then read by the forward's steps."""

    attention_mask: Tensor | None  # the user's mask; None: none, or a (B, L) one without padding
    backend: Backend  # the row every layer's attention runs on (attention.choose_backend)
    final_backend: Backend  # the last layer's: `backend`, or a row taking some tokens' queries alone (first, picked)
    first_only: bool  # the last layer runs for each sequence's first token alone
    layout: Layout  # padded, or the real tokens packed into one row (nn/layout.py)
    windows: tuple[int | None, ...]  # each layer's window, |i - j| <= window (None: every key)
    wanted: Tensor | None = None  # final_tokens as a (B, L) bool mask
    picked: Picked | None = None  # final_tokens as a mask, packed: the last layer runs for these tokens alone
    final_queries: Callable[[Tensor], Tensor] | None = None  # the last layer's query tokens (None: every token)


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
        if self.family.relative_bias(self, 1) is not None:
            raise ValueError(f"{self.config.arch} heads cannot be pruned: its relative-position bias is one table of "
                             f"every head, computed once per forward and added to every layer's scores")
        for layer, heads in heads_to_prune.items():
            self.layers[layer].attention.prune(heads)  # raises where the layer's attention cannot be pruned

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None, *, output_hidden_states: bool = False, output_attentions: bool = False,
        unpad: bool = False, final_tokens: str | Tensor = "all", windows_over_custom_mask: bool = True,
        head_mask: Tensor | None = None, host: HostBatch | None = None, start_at_layer: int | None = None,
        residual: Tensor | None = None,
    ) -> EncoderOutput:
        """input_ids (B, L); attention_mask (B, L), (B, L, L) or (B|1, H|1, L, L), True/1 = attend.

        unpad: run on real tokens only. The batch (a right-padded 2-D mask) is packed into one row;
            embeddings, projections, feed-forward and LayerNorm see real tokens only; attention is
            restricted to each sequence. Outputs come back padded (pad rows zero). A batch without
            padding runs the padded layout, the same computation in fewer calls; so do forwards that
            return attentions or run under `capture`.
        final_tokens: whose final states are wanted: "all", or "first" (each sequence's first token,
            all the pooler and a classification head read): the last layer then runs for the first
            tokens alone and last_hidden_state is (B, 1, C). Or a (B, L) bool mask, True at the tokens
            wanted (a token classifier whose labels are read on some tokens, such as LettuceDetect's on the
            answer): last_hidden_state is (B, L, C), zero at the others; packed (unpad) on the CPU, the last
            layer runs for the wanted tokens alone (not for DeBERTa, whose position terms take every query; nor
            while compiling). Hidden states, attentions and
            capture ask for every token, so with any of them the forward computes "all" (a mask's others
            still zero in last_hidden_state).
        windows_over_custom_mask: a family with local layers (ModernBERT) keeps each local layer's window on top
            of a custom (B, L, L) or 4-D mask (True, the default: the layer never sees past its window); False
            drops the windows under such a mask, as transformers does when it is given a 4-D mask
            (masking_utils: a custom mask is taken as it is). A 2-D padding mask always keeps them.
        head_mask: (H,) or (num_layers, H), transformers v4's: each head's attention probabilities times its
            entry (1 keeps the head, 0 silences it), on every backend and layout; the probabilities returned
            by output_attentions are the scaled ones, a capture's `attention.probs` the softmax before it.
            Heads are numbered as in the unpruned model: a pruned head's entry is not read.
        host: what the host knows of a right-padded batch it built (nn/layout.py HostBatch: each sequence's length,
            the ids' range; the batching engine passes it): the layout, the packing and the vocabulary check are then
            taken from it, and the forward waits on the device for none of them (no host sync). It must describe
            attention_mask (a 2-D padding mask, row i lengths[i] ones then zeros, or None with every length L)
            and input_ids, which the caller vouches for.
        start_at_layer, residual: run layers start_at_layer.. on `residual` (B, L, C), the residual stream entering
            that layer (a capture's `layers.{i}.input` of the same inputs), in place of the embeddings and the layers
            before it (TransformerLens' forward(start_at_layer=)); input_ids and the mask still give the positions,
            the mask and the layout. hidden_states then start with `residual`. Activation patching resumes its
            patched copies at the first layer they patch (nn/patching.py).
        """
        if torch.compiler.is_compiling():
            host = None  # a compiled forward depends on shapes alone (dynamo would guard on each length it read)
        check_input_ids(input_ids, self.config, host)
        forward_mask(attention_mask)  # an open capture's real tokens (nn/capture.py), before anything is recorded
        plan = self._plan(input_ids, attention_mask, unpad=unpad, final_tokens=final_tokens, host=host,
                          output_hidden_states=output_hidden_states, output_attentions=output_attentions,
                          windows_over_custom_mask=windows_over_custom_mask)
        layout = plan.layout
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if position_ids is None:
            position_ids = self.embeddings.position_ids(input_ids)
        position_ids = layout.pack(position_ids)
        if start_at_layer is None:
            x = self.embeddings(layout.pack(input_ids), layout.pack(token_type_ids), position_ids)  # (B|1, L|T, C)
            start_at_layer = 0
        else:
            x = layout.pack(self._resumed(input_ids, start_at_layer, residual))
        # the family's per-forward inputs, each built once: what every attention backend's prepare reads (the
        # relative bias by offset: (H, 2 span - 1) or None; the mask's kind, causal or not), and the keyword
        # arguments of every layer
        attention_inputs = AttentionInputs(plan.attention_mask, layout, x.dtype, self.config.num_heads,
                                           relative=self.family.relative_bias(self, layout.span), device=x.device,
                                           causal=self.config.causal)
        masks = self._masks(plan, attention_inputs)
        if head_mask is not None:
            scales = head_scales(self.config, head_mask, x)  # (1, H_i, 1, 1) per layer
            masks = [replace(mask, head_scale=scale) for mask, scale in zip(masks, scales)]
        inputs = self.family.layer_inputs(self, ForwardInputs(plan.attention_mask, layout, position_ids))
        hidden_states = [layout.unpack(x)] if output_hidden_states else None  # embeddings, then each layer
        attentions = []
        for i, (layer, mask) in enumerate(zip(self.layers, masks, strict=True)):
            if i < start_at_layer:
                continue
            final = i == len(self.layers) - 1
            x, probs = layer(x, mask, plan.final_queries if final else None, **inputs)
            if output_hidden_states:
                hidden_states.append(layout.unpack(x))
            attentions.append(probs)
        x = self.family.finish(self, x)
        if plan.first_only:
            x = layout.batch_first(x)  # (B, 1, C)
        elif plan.picked is not None:  # the picked tokens' rows, into (B, L, C) zeros
            B, L = input_ids.shape
            x = x.new_zeros(B * L, x.size(-1)).index_copy_(0, layout.indices[plan.picked.tokens], x[0]).view(B, L, -1)
        else:
            x = layout.unpack(x)  # (B, L, C)
            if plan.wanted is not None:  # the mask's others zero, whatever ran
                x = x.masked_fill(~plan.wanted[..., None], 0.0)
        if output_hidden_states:  # the last state is the finished one (transformers' tie_last_hidden_states)
            hidden_states[-1] = x
        return EncoderOutput(
            last_hidden_state=x,
            pooler_output=self.pooler(x) if self.pooler is not None else None,
            hidden_states=tuple(hidden_states) if hidden_states is not None else None,
            attentions=tuple(attentions) if output_attentions else None,
        )

    def _resumed(self, input_ids: Tensor, start_at_layer: int, residual: Tensor | None) -> Tensor:
        """forward's `residual`, checked: (B, L, C) for input_ids (B, L), and a layer to start at."""
        layers, width = len(self.layers), self.config.hidden_size
        if isinstance(start_at_layer, bool) or not isinstance(start_at_layer, int) or not 0 <= start_at_layer < layers:
            raise ValueError(f"start_at_layer must be a layer index in 0..{layers - 1}, got {start_at_layer!r}")
        expected = (*input_ids.shape, width)
        if not isinstance(residual, Tensor) or tuple(residual.shape) != expected:
            got = tuple(residual.shape) if isinstance(residual, Tensor) else type(residual).__name__
            raise ValueError(f"start_at_layer={start_at_layer} needs the residual stream entering that layer, "
                             f"(B, L, C) = {expected}, got {got}")
        return residual

    def _plan(self, input_ids: Tensor, attention_mask: Tensor | None, *, unpad: bool, final_tokens: str,
              output_hidden_states: bool, output_attentions: bool, windows_over_custom_mask: bool,
              host: HostBatch | None = None) -> ForwardPlan:
        """This forward's decisions, each made here once (forward's docstring says what each option asks)."""
        B, L = input_ids.shape
        wanted = wanted_tokens(final_tokens, B, L)
        backend = self._backend(probabilities=output_attentions, query_subset=False)
        packable = attention_mask is not None and not (output_attentions or backend.whole)
        if attention_mask is not None and not (unpad and packable) and without_padding(attention_mask, B, L, host):
            attention_mask = None  # sdpa can then use its fastest kernel. Packed (unpad), a batch without
            # padding stays packed: each sequence is then attended as in any other batch (layout.bucket_length)
        # hidden states, attentions and a recording row (capture) ask for every token of every layer
        first_only = isinstance(final_tokens, str) and final_tokens == "first" and not (output_hidden_states or output_attentions or backend.whole)
        # the last layer's row: the first tokens' queries alone are a capability of their own (flex lacks it)
        final_backend = self._backend(probabilities=False, query_subset=True) if first_only else backend
        packable = packable and attention_mask is not None
        if packable and (unpad or flex_on_cpu(backend, attention_mask, host)):
            layout = layouts.packed(attention_mask, host)
        else:
            layout = layouts.padded(B, L)
        windows = tuple(layer.window for layer in self.layers)
        if not windows_over_custom_mask and attention_mask is not None and attention_mask.dim() > 2:
            windows = (None,) * len(windows)  # the caller's mask alone, as transformers takes a 4-D one
        picked = None
        # the picked tokens' queries alone: packed, on the CPU (their calls are read on the host), outside a compile,
        # every token's states not asked for, and a score form whose terms follow a query's position (DeBERTa's
        # disentangled terms take the queries at positions 0.. : Disentangled.rows)
        if (wanted is not None and layout.packed and input_ids.device.type == "cpu"
                and not torch.compiler.is_compiling() and self.layers[0].attention.score_form != DISENTANGLED
                and not (output_hidden_states or output_attentions or backend.whole)):
            picked = layout.picked(wanted)
        if picked is not None:
            final_backend = self._backend(probabilities=False, query_subset=True)
        final_queries = layout.first_tokens if first_only else picked
        return ForwardPlan(attention_mask, backend, final_backend, first_only, layout, windows, wanted, picked,
                           final_queries)

    @staticmethod
    def _masks(plan: ForwardPlan, inputs: AttentionInputs) -> list[PreparedMask]:
        """Each layer's mask: one per distinct window on the plan's row, each layer handed its own; the last
        layer's for the first tokens alone, on the final row, when the plan says so."""
        by_window = {window: prepare_mask(plan.backend, replace(inputs, window=window))
                     for window in dict.fromkeys(plan.windows)}
        masks = [by_window[window] for window in plan.windows]
        if plan.first_only:
            masks[-1] = prepare_mask(plan.final_backend, replace(inputs, queries="first", window=plan.windows[-1]))
        elif plan.picked is not None:
            masks[-1] = prepare_mask(plan.final_backend, replace(inputs, queries="picked", picked=plan.picked,
                                                                 window=plan.windows[-1]))
        return masks

    def _backend(self, *, probabilities: bool, query_subset: bool) -> Backend:
        """The row this forward's attention runs on (attention.choose_backend, the one fallback rule), for the
        form of the scores the layers' attention computes."""
        return choose_backend(self.attn_backend, probabilities=probabilities,
                              score_form=self.layers[0].attention.score_form,
                              dropout=self.training and self.config.attention_dropout > 0,
                              query_subset=query_subset)


def wanted_tokens(final_tokens: str | Tensor, batch: int, length: int) -> Tensor | None:
    """Encoder.forward's final_tokens checked: None for a name of FINAL_TOKENS, the (B, L) bool mask itself."""
    if isinstance(final_tokens, str):
        if final_tokens not in FINAL_TOKENS:
            raise ValueError(f"final_tokens must be one of {FINAL_TOKENS} or a (B, L) bool mask, got {final_tokens!r}")
        return None
    if not isinstance(final_tokens, Tensor) or final_tokens.dtype != torch.bool \
            or tuple(final_tokens.shape) != (batch, length):
        got = (f"{final_tokens.dtype} {tuple(final_tokens.shape)}" if isinstance(final_tokens, Tensor)
               else type(final_tokens).__name__)
        raise ValueError(f"final_tokens must be one of {FINAL_TOKENS} or a ({batch}, {length}) bool mask, got {got}")
    return final_tokens


def without_padding(attention_mask: Tensor, batch: int, length: int, host: HostBatch | None = None) -> bool:
    """Whether the mask is a (B, L) padding mask with no padding: from the host's lengths where given, else
    read from the mask (one host sync; never while compiling)."""
    if tuple(attention_mask.shape) != (batch, length):
        return False
    if host is not None:
        return all(n == length for n in host.lengths)
    return not torch.compiler.is_compiling() and bool(attention_mask.all())


def flex_on_cpu(backend: Backend, attention_mask: Tensor | None, host: HostBatch | None = None) -> bool:
    """Whether a right-padded batch on the flex backend runs packed whatever `unpad` says: on CPU, torch
    2.13's compiled flex kernel returns wrong values, NaN at times, for some padded batches (rows of 40 tokens
    beside one of 7; not every run), while a packed row under a document BlockMask is exact (tested over
    random length mixes, tests/nn/test_backends.py). The outputs are the same either way (pad rows zero)."""
    return (backend.name == "flex" and attention_mask is not None and attention_mask.device.type == "cpu"
            and attention_mask.dim() == 2 and not torch.compiler.is_compiling()
            and (host is not None or masks.right_padded_lengths(attention_mask) is not None))


def check_input_ids(input_ids: Tensor, config: Config, host: HostBatch | None = None) -> None:
    """input_ids (B, L): integers within the vocabulary, no longer than the model's window; the range read from
    the host's facts where given (HostBatch, no host sync), which must have one length per row."""
    if not isinstance(input_ids, Tensor) or input_ids.dim() != 2 or input_ids.is_floating_point():
        raise ValueError(f"input_ids must be an integer tensor of shape (B, L), got "
                         f"{getattr(input_ids, 'shape', type(input_ids).__name__)}")
    if input_ids.size(1) > config.max_seq_len:
        raise ValueError(f"sequence length {input_ids.size(1)} exceeds the model's window of "
                         f"{config.max_seq_len} tokens; truncate the input")
    if host is not None:
        if not isinstance(host, HostBatch) or len(host.lengths) != input_ids.size(0):
            raise ValueError(f"host must be a HostBatch with one length per row of input_ids "
                             f"({input_ids.size(0)}), got {host!r}")
        host.check_vocabulary(config.vocab_size)
    elif input_ids.numel() and not torch.compiler.is_compiling():
        lo, hi = torch.stack(torch.aminmax(input_ids)).tolist()  # one host sync
        check_id_range(lo, hi, config.vocab_size)


def head_scales(config: Config, head_mask: Tensor, x: Tensor) -> list[Tensor]:
    """Each layer's (1, H_i, 1, 1) head scale from a head_mask of (H,) or (num_layers, H) (transformers v4
    PreTrainedModel.get_head_mask), the entries of its kept heads."""
    layers, heads = config.num_layers, config.num_heads
    if not isinstance(head_mask, Tensor) or tuple(head_mask.shape) not in ((heads,), (layers, heads)):
        raise ValueError(f"head_mask must be a tensor of shape ({heads},) or ({layers}, {heads}) (num_layers, "
                         f"num_heads), got {tuple(getattr(head_mask, 'shape', ())) or type(head_mask).__name__}")
    head_mask = head_mask.to(device=x.device, dtype=torch.float32 if not x.is_floating_point() else x.dtype)
    per_layer = head_mask.expand(layers, heads)
    return [per_layer[i, list(config.kept_heads(i))].view(1, -1, 1, 1) for i in range(layers)]
