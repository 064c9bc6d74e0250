"""The BERT/RoBERTa encoder and AlignScore's alignment model, in reading order.

Shapes: B batch, L sequence length, T real tokens of a packed batch, C hidden size, H heads,
D head dim (C = H * D), V vocab. Layouts (padded or packed) are described in layout.py.
Mask convention: True / 1 = attend (see attention.attention_bias).

Reference implementations each module matches:
  transformers models/bert/modeling_bert.py and models/roberta/modeling_roberta.py (v4.x-v5.x),
  AlignScore src/alignscore/model.py (BERTAlignModel).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from minialign.nn import layout as layouts
from minialign.nn.attention import BACKENDS, PreparedMask, attention, choose_backend, prepare_mask
from minialign.loading.pretrained import Pretrained
from minialign.nn.config import Config
from minialign.nn.layout import FINAL_TOKENS, Layout
from minialign.nn.linear import Linear
from minialign.nn.init import init_weights
from minialign.nn.score_functions import make_score_function
from minialign.nn.capture import capturing, record


def roberta_position_ids(input_ids: Tensor, pad_token_id: int) -> Tensor:
    """Positions count real tokens from pad_token_id + 1; pads sit at pad_token_id.
    (modeling_roberta.py create_position_ids_from_input_ids, from fairseq's make_positions)"""
    is_token = input_ids.ne(pad_token_id).int()
    return (torch.cumsum(is_token, dim=1).int() * is_token).long() + pad_token_id


class Embeddings(nn.Module):
    """LayerNorm(word + position + token_type), then dropout."""

    def __init__(self, config: Config):
        super().__init__()
        self.config = config
        self.word = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        roberta = config.arch == "roberta"
        self.position = nn.Embedding(config.max_position_embeddings, config.hidden_size,
                                     padding_idx=config.pad_token_id if roberta else None)
        self.token_type = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def position_ids(self, input_ids: Tensor) -> Tensor:
        if self.config.arch == "roberta":
            return roberta_position_ids(input_ids, self.config.pad_token_id)
        return torch.arange(input_ids.size(1), device=input_ids.device).expand_as(input_ids)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, position_ids: Tensor) -> Tensor:
        """(B, L) each, or a packed (1, T); the Encoder fills token types and positions once."""
        word, token_type, position = self.word(input_ids), self.token_type(token_type_ids), self.position(position_ids)
        x = word + token_type + position  # (B, L, C)
        if capturing():
            for role, t in (("word", word), ("position", position), ("token_type", token_type), ("sum", x)):
                record(role, t)
        x = self.norm(x)
        record("norm", x)
        return self.dropout(x)


class SelfAttention(nn.Module):
    """Multi-head self-attention: Q, K, V projections, attention per head, output projection.

    Q, K and V are one (3C, C) matmul; the state dict still names them query / key / value
    (split on save, fused on load), so checkpoints and the converter see the usual names."""

    def __init__(self, config: Config):
        super().__init__()
        self.num_heads, self.dropout_p = config.num_heads, config.attention_dropout
        self.qkv = Linear(config.hidden_size, 3 * config.hidden_size)
        self.score = make_score_function(config.score_fn, config.num_heads, config.head_dim,
                                         config.max_relative_distance)
        self.output = Linear(config.hidden_size, config.hidden_size)
        self._register_state_dict_hook(_split_qkv)
        self._register_load_state_dict_pre_hook(_fuse_qkv)

    def forward(self, x: Tensor, mask: PreparedMask,
                queries: Callable[[Tensor], Tensor] | None = None) -> tuple[Tensor, Tensor | None]:
        """x (B, L, C). `queries` picks the query tokens (default: all), e.g. Layout.first_tokens."""
        B, L, C = x.shape
        heads = lambda t: t.view(B, t.size(1), self.num_heads, -1).transpose(1, 2)  # noqa: E731  (B, H, L, D)
        q, k, v = self.qkv(x).split(C, dim=-1)
        if queries is not None:
            q = queries(q)
        q, k, v = heads(q), heads(k), heads(v)
        if capturing():
            for role, t in (("q", q), ("k", k), ("v", v)):
                record(role, t)
        y, probs = attention(q, k, v, mask, score=self.score, dropout_p=self.dropout_p if self.training else 0.0)
        record("context", y)
        out = self.output(y.transpose(1, 2).reshape(B, q.size(2), C))
        record("output", out)
        return out, probs


_QKV = ("query", "key", "value")


def _split_qkv(module, state_dict, prefix, local_metadata):
    for kind in ("weight", "bias"):
        fused = state_dict.pop(f"{prefix}qkv.{kind}")
        for name, part in zip(_QKV, fused.chunk(3, dim=0)):
            state_dict[f"{prefix}{name}.{kind}"] = part
    return state_dict


def _fuse_qkv(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
    for kind in ("weight", "bias"):
        names = [f"{prefix}{name}.{kind}" for name in _QKV]
        if all(n in state_dict for n in names):
            state_dict[f"{prefix}qkv.{kind}"] = torch.cat([state_dict.pop(n) for n in names], dim=0)


class FeedForward(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.up = Linear(config.hidden_size, config.intermediate_size, activation=config.activation)
        self.down = Linear(config.intermediate_size, config.hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        h = self.up(x)  # activation(x W^T + b): (B, L, I)
        record("intermediate", h)
        return self.down(h)


class EncoderLayer(nn.Module):
    """Post-LN: x = LN(x + drop(attn(x))); x = LN(x + drop(ffn(x)))."""

    # Mixed precision (Encoder.compute_dtype) runs the matmuls that write into the residual stream in the
    # lower dtype; those that read from it (Q/K/V, the feed-forward's up projection) and attention stay in
    # the weights' dtype: rounded to bf16, queries, keys and GELU's inputs caused most of a trained model's
    # score deviation, while a bf16 rounding of an update is small next to the stream it is added to
    # (BENCHMARKS.md, "Precision", has the recipes measured).
    MIXED_PRECISION = ("attention.output", "ffn.down")

    def __init__(self, config: Config):
        super().__init__()
        self.attention = SelfAttention(config)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.ffn = FeedForward(config)
        self.ffn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, x: Tensor, mask: PreparedMask,
                queries: Callable[[Tensor], Tensor] | None = None) -> tuple[Tensor, Tensor | None]:
        """Returns the new states of the `queries` tokens (default: all) and the attention
        probabilities when the backend gives them."""
        record("input", x)
        a, probs = self.attention(x, mask, queries)
        if queries is not None:
            x = queries(x)
        x = x + self.dropout(a)
        record("attention_residual", x)
        x = self.attention_norm(x)
        record("attention_norm", x)
        f = self.ffn(x)
        record("ffn_output", f)
        x = x + self.dropout(f)
        record("ffn_residual", x)
        x = self.ffn_norm(x)
        record("output", x)
        return x, probs


class Pooler(nn.Module):
    """tanh(W h_0 + b) on the first token ([CLS] / <s>)."""

    def __init__(self, config: Config):
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        pooled = torch.tanh(self.dense(x[:, 0]))
        record("output", pooled)
        return pooled


@dataclass
class EncoderOutput:
    last_hidden_state: Tensor  # (B, L, C); (B, 1, C) when only the first tokens were computed
    pooler_output: Tensor | None  # (B, C); None for an encoder built without a pooler
    hidden_states: tuple[Tensor, ...] | None = None  # embeddings, then each layer: num_layers + 1 of (B, L, C)
    attentions: tuple[Tensor, ...] | None = None  # one (B, H, L, L) per layer


class Encoder(Pretrained):
    """BERT / RoBERTa encoder: embeddings, a stack of encoder layers, pooler."""

    # Loading contract (loading.build): where this model's weights sit among a checkpoint's tensors
    # (minialign's AlignModel names), and its modules that may be initialised when a checkpoint lacks them.
    checkpoint_prefix = "encoder."
    initialisable = ("pooler",)

    @staticmethod
    def skipped_weights(config: Config) -> tuple[str, ...]:
        """Checkpoint names under checkpoint_prefix this model does not read (none)."""
        return ()

    def __init__(self, config: Config, *, attn_backend: str = "sdpa", seed: int | None = None, pooler: bool = True):
        """A randomly initialised encoder (BERT's initialisation; `seed` makes it reproducible).
        pooler=False builds none (RobertaForSequenceClassification has none); pooler_output is then None."""
        super().__init__()
        if attn_backend not in BACKENDS:
            raise ValueError(f"unknown attention backend {attn_backend!r}; choose from {tuple(BACKENDS)}")
        self.config, self.attn_backend = config, attn_backend
        with torch.random.fork_rng(devices=[], enabled=seed is not None):  # a seed leaves the global RNG alone
            self.embeddings = Embeddings(config)
            self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.num_layers))
            self.pooler = Pooler(config) if pooler else None
            init_weights(self, config, seed)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None, *, output_hidden_states: bool = False, output_attentions: bool = False,
        unpad: bool = False, final_tokens: str = "all",
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
        """
        self._check_input(input_ids)
        if final_tokens not in FINAL_TOKENS:
            raise ValueError(f"final_tokens must be one of {FINAL_TOKENS}, got {final_tokens!r}")
        first_only = final_tokens == "first" and not (output_hidden_states or output_attentions or capturing())
        B, L = input_ids.shape
        if (attention_mask is not None and tuple(attention_mask.shape) == (B, L)
                and not torch.compiler.is_compiling() and bool(attention_mask.all())):
            attention_mask = None  # no padding: skip the mask (sdpa can then use its fastest kernel)
        if unpad and attention_mask is not None and not output_attentions and not capturing():
            layout = layouts.packed(attention_mask)
        else:
            layout = layouts.padded(B, L)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if position_ids is None:
            position_ids = self.embeddings.position_ids(input_ids)
        x = self.embeddings(layout.pack(input_ids), layout.pack(token_type_ids), layout.pack(position_ids))
        out = self._layers(x, attention_mask, layout, first_only, output_hidden_states, output_attentions)
        if self.pooler is not None:
            out.pooler_output = self.pooler(out.last_hidden_state)
        return out

    def _layers(self, x: Tensor, attention_mask: Tensor | None, layout: Layout, first_only: bool,
                output_hidden_states: bool, output_attentions: bool) -> EncoderOutput:
        every = self._mask(attention_mask, layout, "all", x.dtype, output_attentions)
        last = self._mask(attention_mask, layout, "first", x.dtype, False) if first_only else every
        hidden_states = [layout.unpack(x)] if output_hidden_states else None  # embeddings, then each layer
        attentions = []
        for i, layer in enumerate(self.layers):
            final = i == len(self.layers) - 1
            x, probs = layer(x, last if final else every, layout.first_tokens if final and first_only else None)
            if output_hidden_states:
                hidden_states.append(layout.unpack(x))
            attentions.append(probs)
        x = layout.batch_first(x) if first_only else layout.unpack(x)
        return EncoderOutput(
            last_hidden_state=x,
            pooler_output=None,  # forward adds it
            hidden_states=tuple(hidden_states) if hidden_states is not None else None,
            attentions=tuple(attentions) if output_attentions else None,
        )

    def _mask(self, attention_mask: Tensor | None, layout: Layout, queries: str, dtype: torch.dtype,
              probabilities: bool) -> PreparedMask:
        backend = choose_backend(self.attn_backend, probabilities=probabilities,
                                 score_form=self.layers[0].attention.score.form,
                                 dropout=self.training and self.config.attention_dropout > 0,
                                 query_subset=queries == "first")
        return prepare_mask(backend, attention_mask, layout, queries=queries, dtype=dtype,
                            num_heads=self.config.num_heads)

    def _check_input(self, input_ids: Tensor) -> None:
        if not isinstance(input_ids, Tensor) or input_ids.dim() != 2 or input_ids.is_floating_point():
            raise ValueError(f"input_ids must be an integer tensor of shape (B, L), got "
                             f"{getattr(input_ids, 'shape', type(input_ids).__name__)}")
        if input_ids.size(1) > self.config.max_seq_len:
            raise ValueError(f"sequence length {input_ids.size(1)} exceeds the model's window of "
                             f"{self.config.max_seq_len} tokens; truncate the input")
        if input_ids.numel() and not torch.compiler.is_compiling():
            lo, hi = int(input_ids.min()), int(input_ids.max())
            if lo < 0 or hi >= self.config.vocab_size:
                raise ValueError(f"input_ids hold {lo if lo < 0 else hi}, outside the vocabulary "
                                 f"[0, {self.config.vocab_size})")


class MLMHead(nn.Module):
    """dense -> activation -> LayerNorm -> decoder + bias. The decoder is the word-embedding matrix
    unless the config unties it (AlignScore checkpoints carry their own).
    BERT: BertLMPredictionHead (activation = hidden_act); RoBERTa: RobertaLMHead (always exact GELU)."""

    def __init__(self, config: Config):
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size,
                            activation=config.activation if config.arch == "bert" else "gelu")
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.decoder = None if config.tie_word_embeddings else Linear(config.hidden_size, config.vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x: Tensor, word_embeddings: Tensor) -> Tensor:
        weight = word_embeddings if self.decoder is None else self.decoder.weight
        return F.linear(self.norm(self.dense(x)), weight, self.bias)  # (B, L, V)


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


class AlignModel(Pretrained):
    """AlignScore's BERTAlignModel: an Encoder, the MLM head and three heads on the pooled first token."""

    checkpoint_prefix = ""  # see Encoder: a checkpoint's tensors are under AlignModel's names
    initialisable = ("mlm_head", "bin_layer", "tri_layer", "reg_layer")

    @staticmethod
    def skipped_weights(config: Config) -> tuple[str, ...]:
        """Checkpoint names this model does not read (logged, not an error)."""
        return ("classifier.",)

    def __init__(self, config: Config, *, attn_backend: str = "sdpa", seed: int | None = None):
        """A randomly initialised model (BERT's initialisation; `seed` makes it reproducible)."""
        super().__init__()
        self.config = config
        self.encoder = Encoder(config, attn_backend=attn_backend, seed=seed)
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
    ) -> AlignOutput:
        """Heads on the pooled first token; the MLM head (every token) only with mlm=True. Without it
        the last layer runs for the first tokens alone (Encoder.forward final_tokens="first"), and
        last_hidden_state is (B, 1, C). unpad: see Encoder.forward."""
        out = self.encoder(input_ids, attention_mask, token_type_ids, position_ids,
                           output_hidden_states=output_hidden_states, output_attentions=output_attentions,
                           unpad=unpad, final_tokens="all" if mlm else "first")
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


class ClassificationHead(nn.Module):
    """transformers' sequence-classification heads, one formula per family:
    BERT (BertForSequenceClassification): logits = out_proj(dropout(pooled));
    RoBERTa (RobertaClassificationHead): logits = out_proj(dropout(tanh(dense(dropout(h_0))))), no pooler.
    Dropout is classifier_dropout, else hidden_dropout."""

    def __init__(self, config: Config):
        super().__init__()
        if not config.labels:
            raise ValueError("a classification head needs labels (Config.labels, from id2label / num_labels)")
        self.dropout = nn.Dropout(config.hidden_dropout if config.classifier_dropout is None else config.classifier_dropout)
        self.dense = Linear(config.hidden_size, config.hidden_size) if config.arch == "roberta" else None
        self.out_proj = Linear(config.hidden_size, len(config.labels))

    def forward(self, encoded: EncoderOutput) -> Tensor:
        if self.dense is None:
            return self.out_proj(self.dropout(encoded.pooler_output))  # (B, num_labels)
        x = torch.tanh(self.dense(self.dropout(encoded.last_hidden_state[:, 0])))
        return self.out_proj(self.dropout(x))


@dataclass
class ClassifierOutput:
    logits: Tensor  # (B, num_labels)
    last_hidden_state: Tensor | None = None  # (B, 1, C): the first tokens, unless states are asked for
    pooler_output: Tensor | None = None  # BERT only
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


class ClassifierModel(Pretrained):
    """BertForSequenceClassification / RobertaForSequenceClassification: an Encoder (with a pooler
    for BERT only) and the ClassificationHead on its first token."""

    checkpoint_prefix = ""
    initialisable = ("classifier",)

    @staticmethod
    def skipped_weights(config: Config) -> tuple[str, ...]:
        """Checkpoint names this model does not read (logged, not an error): other heads, and the
        pooler of a RoBERTa backbone (its classifier reads the first token)."""
        return ("mlm_head.", "bin_layer.", "tri_layer.", "reg_layer.") + (
            ("encoder.pooler.",) if config.arch == "roberta" else ())

    def __init__(self, config: Config, *, attn_backend: str = "sdpa", seed: int | None = None):
        super().__init__()
        if not config.labels:  # transformers' default: num_labels = 2
            config = dataclasses.replace(config, labels=("LABEL_0", "LABEL_1"))
        self.config = config
        self.encoder = Encoder(config, attn_backend=attn_backend, seed=seed, pooler=config.arch == "bert")
        with torch.random.fork_rng(devices=[], enabled=seed is not None):
            self.classifier = ClassificationHead(config)
            init_weights(self.classifier, config, None if seed is None else seed + 1)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None, *, output_hidden_states: bool = False, output_attentions: bool = False,
        unpad: bool = False,
    ) -> ClassifierOutput:
        """Logits on the first token; the last layer runs for it alone (Encoder final_tokens="first")."""
        out = self.encoder(input_ids, attention_mask, token_type_ids, position_ids,
                           output_hidden_states=output_hidden_states, output_attentions=output_attentions,
                           unpad=unpad, final_tokens="first")
        return ClassifierOutput(self.classifier(out), out.last_hidden_state, out.pooler_output,
                                out.hidden_states, out.attentions)
