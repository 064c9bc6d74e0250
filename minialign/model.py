"""The BERT/RoBERTa encoder and AlignScore's alignment model, in reading order.

Shapes: B batch, L sequence length, C hidden size, H heads, D head dim (C = H * D), V vocab.
Mask convention: True / 1 = attend (see attention.attention_bias).

Reference implementations each module matches:
  transformers models/bert/modeling_bert.py and models/roberta/modeling_roberta.py (v4.x-v5.x),
  AlignScore src/alignscore/model.py (BERTAlignModel).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .tracing import capturing, record
from .attention import BACKENDS, AttentionMask, attention, attention_bias, keep_mask
from .config import Config
from .scores import Bilinear, General, make_score_function


def activation_fn(name: str):
    # transformers activations.py: "gelu" is exact erf GELU; "gelu_new" / "gelu_pytorch_tanh" the tanh form.
    if name == "gelu":
        return F.gelu
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "relu":
        return F.relu
    if name == "silu":
        return F.silu
    raise ValueError(f"unknown activation {name!r}")


def roberta_position_ids(input_ids: Tensor, pad_token_id: int) -> Tensor:
    """Positions count real tokens from pad_token_id + 1; pads sit at pad_token_id.
    (modeling_roberta.py create_position_ids_from_input_ids, from fairseq's make_positions)"""
    is_token = input_ids.ne(pad_token_id).int()
    return (torch.cumsum(is_token, dim=1).int() * is_token).long() + pad_token_id


def right_padded_lengths(mask: Tensor) -> Tensor | None:
    """Per-row lengths of a (B, L) mask whose rows are 1s then 0s; None for any other pattern."""
    keep = mask.bool()
    lengths = keep.sum(1)
    prefix = torch.arange(mask.size(1), device=mask.device)[None, :] < lengths[:, None]
    return lengths if bool((keep == prefix).all()) and bool((lengths > 0).all()) else None


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

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None,
                position_ids: Tensor | None = None) -> Tensor:
        if position_ids is None:
            position_ids = self.position_ids(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
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
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.score = make_score_function(config.score_fn, config.num_heads, config.head_dim,
                                         config.max_relative_distance)
        self.output = nn.Linear(config.hidden_size, config.hidden_size)
        self._register_state_dict_hook(_split_qkv)
        self._register_load_state_dict_pre_hook(_fuse_qkv)

    def forward(self, x: Tensor, mask: AttentionMask, need_probs: bool = False,
                first_token_only: bool = False) -> tuple[Tensor, Tensor | None]:
        B, L, C = x.shape
        heads = lambda t: t.view(B, t.size(1), self.num_heads, -1).transpose(1, 2)  # noqa: E731  (B, H, L, D)
        q, k, v = self.qkv(x).split(C, dim=-1)
        if first_token_only:  # only the first token's output is wanted (the pooler's input)
            q = q[:, :1]
        q, k, v = heads(q), heads(k), heads(v)
        if capturing():
            for role, t in (("q", q), ("k", k), ("v", v)):
                record(role, t)
        y, probs = attention(q, k, v, mask, score=self.score, need_probs=need_probs,
                             dropout_p=self.dropout_p if self.training else 0.0)
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
        self.up = nn.Linear(config.hidden_size, config.intermediate_size)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size)
        self.act = activation_fn(config.activation)

    def forward(self, x: Tensor) -> Tensor:
        h = self.act(self.up(x))  # (B, L, I)
        record("intermediate", h)
        return self.down(h)


class EncoderLayer(nn.Module):
    """Post-LN: x = LN(x + drop(attn(x))); x = LN(x + drop(ffn(x)))."""

    def __init__(self, config: Config):
        super().__init__()
        self.attention = SelfAttention(config)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.ffn = FeedForward(config)
        self.ffn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, x: Tensor, mask: AttentionMask, need_probs: bool = False,
                first_token_only: bool = False) -> tuple[Tensor, Tensor | None]:
        record("input", x)
        a, probs = self.attention(x, mask, need_probs, first_token_only)
        if first_token_only:
            x = x[:, :1]
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
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        pooled = torch.tanh(self.dense(x[:, 0]))
        record("output", pooled)
        return pooled


@dataclass
class EncoderOutput:
    last_hidden_state: Tensor  # (B, L, C)
    pooler_output: Tensor  # (B, C)
    hidden_states: tuple[Tensor, ...] | None = None  # embeddings, then each layer: num_layers + 1 of (B, L, C)
    attentions: tuple[Tensor, ...] | None = None  # one (B, H, L, L) per layer


class Encoder(nn.Module):
    """BERT / RoBERTa encoder: embeddings, a stack of encoder layers, pooler."""

    def __init__(self, config: Config, *, attn_backend: str = "sdpa", seed: int | None = None):
        """A randomly initialised encoder (BERT's initialisation; `seed` makes it reproducible)."""
        super().__init__()
        if attn_backend not in BACKENDS:
            raise ValueError(f"unknown attention backend {attn_backend!r}; choose from {BACKENDS}")
        self.config, self.attn_backend = config, attn_backend
        with torch.random.fork_rng(devices=[], enabled=seed is not None):  # a seed leaves the global RNG alone
            self.embeddings = Embeddings(config)
            self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.num_layers))
            self.pooler = Pooler(config)
            init_weights(self, config, seed)

    @classmethod
    def from_pretrained(cls, src: str, **kwargs) -> Encoder:
        """Load from a local HF dir, a hub id, a minialign dir or an AlignScore .ckpt (see loading.load)."""
        from .loading import load

        return load(cls, src, **kwargs)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None, *, output_hidden_states: bool = False, output_attentions: bool = False,
        unpad: bool = False, pooled_only: bool = False,
    ) -> EncoderOutput:
        """input_ids (B, L); attention_mask (B, L), (B, L, L) or (B|1, H|1, L, L), True/1 = attend.

        unpad: run on real tokens only. The batch (a right-padded 2-D mask) is packed into one row;
            embeddings, projections, feed-forward and LayerNorm see real tokens only; attention is
            restricted to each sequence. Outputs come back padded (pad rows zero). A batch without
            padding runs the padded path, the same computation in fewer calls.
        pooled_only: the last layer runs for the first token alone (all the pooler reads);
            last_hidden_state is then None. Ignored when hidden states are asked for.
        """
        self._check_input(input_ids)
        pooled_only = pooled_only and not output_hidden_states
        backend = self._backend(output_attentions)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if position_ids is None:
            position_ids = self.embeddings.position_ids(input_ids)
        if unpad and not torch.compiler.is_compiling() and (attention_mask is None or bool(attention_mask.all())):
            unpad = False  # nothing to remove: the padded path is the same computation in fewer calls
        if unpad and not output_attentions and not capturing():
            return self._forward_packed(input_ids, attention_mask, token_type_ids, position_ids, backend,
                                        output_hidden_states, pooled_only)
        B, L = input_ids.shape
        x = self.embeddings(input_ids, token_type_ids, position_ids)
        mask = self._mask(attention_mask, B, L, x.dtype, backend)
        hidden_states, attentions = [x], []
        for i, layer in enumerate(self.layers):
            last_pooled = pooled_only and i == len(self.layers) - 1
            if last_pooled and backend == "flex":
                mask = AttentionMask("sdpa", bias=attention_bias(attention_mask, B, L, x.dtype))
            x, probs = layer(x, mask, need_probs=output_attentions, first_token_only=last_pooled)
            hidden_states.append(x)
            attentions.append(probs)
        return EncoderOutput(
            last_hidden_state=None if pooled_only else x,
            pooler_output=self.pooler(x),
            hidden_states=tuple(hidden_states) if output_hidden_states else None,
            attentions=tuple(attentions) if output_attentions else None,
        )

    def _backend(self, output_attentions: bool) -> str:
        if output_attentions:
            return "eager"  # the only path that returns probabilities
        if self.attn_backend == "flex" and self.training and self.config.attention_dropout > 0:
            return "sdpa"  # FlexAttention has no dropout
        return self.attn_backend

    def _mask(self, attention_mask: Tensor | None, B: int, L: int, dtype: torch.dtype, backend: str) -> AttentionMask:
        if (attention_mask is not None and tuple(attention_mask.shape) == (B, L)
                and not torch.compiler.is_compiling() and bool(attention_mask.all())):
            attention_mask = None  # no padding: skip the mask (sdpa can then use its fastest kernel)
        if backend != "flex":
            return AttentionMask(backend, bias=attention_bias(attention_mask, B, L, dtype))
        from . import flex

        keep = keep_mask(attention_mask, B, L)
        if keep is None:
            return AttentionMask(backend)
        if keep.is_floating_point():
            return AttentionMask(backend, score_bias=keep.to(dtype).expand(B, self.config.num_heads, L, L))
        lengths = right_padded_lengths(attention_mask) if attention_mask.dim() == 2 else None
        if lengths is not None:
            return AttentionMask(backend, block_mask=flex.padding_block_mask(lengths, L, L))
        return AttentionMask(backend, block_mask=flex.boolean_block_mask(keep.expand(-1, -1, L, L), B, L))

    def _forward_packed(self, input_ids: Tensor, attention_mask: Tensor | None, token_type_ids: Tensor,
                        position_ids: Tensor, backend: str, output_hidden_states: bool,
                        pooled_only: bool) -> EncoderOutput:
        B, L = input_ids.shape
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        lengths = right_padded_lengths(attention_mask) if attention_mask.dim() == 2 else None
        if lengths is None:
            raise ValueError("unpad=True needs a 2-D right-padded attention_mask (each row 1s then 0s)")
        keep = attention_mask.bool()
        x = self.embeddings(input_ids[keep][None], token_type_ids[keep][None], position_ids[keep][None])  # (1, T, C)
        mask = AttentionMask(backend, lengths=lengths.tolist())
        if backend == "flex":
            from .flex import document_block_mask

            document = torch.arange(B, device=x.device).repeat_interleave(lengths)
            mask.block_mask = document_block_mask(document)
        unpack = lambda t: t.new_zeros(B, L, t.size(-1)).index_put_((keep,), t[0])  # noqa: E731
        hidden_states = [x]
        for layer in self.layers[:-1] if pooled_only else self.layers:
            x, _ = layer(x, mask)
            hidden_states.append(x)
        if pooled_only:  # the first tokens against their own sequences, in the padded layout
            last = AttentionMask("eager" if backend == "eager" else "sdpa",
                                 bias=attention_bias(attention_mask, B, L, x.dtype))
            first, _ = self.layers[-1](unpack(x), last, first_token_only=True)
            return EncoderOutput(last_hidden_state=None, pooler_output=self.pooler(first))
        padded = unpack(x)
        return EncoderOutput(
            last_hidden_state=padded,
            pooler_output=self.pooler(padded),
            hidden_states=tuple(unpack(h) for h in hidden_states) if output_hidden_states else None,
        )

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
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = activation_fn(config.activation if config.arch == "bert" else "gelu")
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.decoder = None if config.tie_word_embeddings else nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x: Tensor, word_embeddings: Tensor) -> Tensor:
        weight = word_embeddings if self.decoder is None else self.decoder.weight
        return F.linear(self.norm(self.act(self.dense(x))), weight, self.bias)  # (B, L, V)


@dataclass
class AlignOutput:
    tri_label_logits: Tensor  # (B, 3): 0 aligned, 1 neutral, 2 contradiction
    seq_relationship_logits: Tensor  # (B, 2): 1 aligned
    reg_label_logits: Tensor  # (B, 1)
    prediction_logits: Tensor | None = None  # (B, L, V), only with mlm=True
    last_hidden_state: Tensor | None = None
    pooler_output: Tensor | None = None
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


class AlignModel(nn.Module):
    """AlignScore's BERTAlignModel: an Encoder, the MLM head and three heads on the pooled first token."""

    def __init__(self, config: Config, *, attn_backend: str = "sdpa", seed: int | None = None):
        """A randomly initialised model (BERT's initialisation; `seed` makes it reproducible)."""
        super().__init__()
        self.config = config
        self.encoder = Encoder(config, attn_backend=attn_backend, seed=seed)
        with torch.random.fork_rng(devices=[], enabled=seed is not None):
            self.mlm_head = MLMHead(config)
            self.dropout = nn.Dropout(0.1)  # AlignScore model.py: nn.Dropout(p=0.1), before bin and tri only
            self.bin_layer = nn.Linear(config.hidden_size, 2)
            self.tri_layer = nn.Linear(config.hidden_size, 3)
            self.reg_layer = nn.Linear(config.hidden_size, 1)
            heads = nn.ModuleList([self.mlm_head, self.bin_layer, self.tri_layer, self.reg_layer])
            init_weights(heads, config, None if seed is None else seed + 1)

    @classmethod
    def from_pretrained(cls, src: str, **kwargs) -> AlignModel:
        """Load from an AlignScore .ckpt, a minialign dir, a local HF dir or a hub id (see loading.load)."""
        from .loading import load

        return load(cls, src, **kwargs)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None, *, mlm: bool = False,
        output_hidden_states: bool = False, output_attentions: bool = False, unpad: bool = False,
    ) -> AlignOutput:
        """Heads on the pooled first token. last_hidden_state is computed only when something needs
        every token (mlm=True, hidden states or attentions asked for); otherwise the last layer runs
        for the first token alone. unpad: see Encoder.forward."""
        out = self.encoder(input_ids, attention_mask, token_type_ids, position_ids,
                           output_hidden_states=output_hidden_states, output_attentions=output_attentions,
                           unpad=unpad, pooled_only=not (mlm or output_attentions))
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


@torch.no_grad()
def init_parameter(owner: nn.Module, name: str, param: Tensor, config: Config) -> None:
    """BERT's initialisation, in place (modeling_bert.py _init_weights): normal(0, initializer_range)
    for Linear and Embedding weights (an embedding's padding row zeroed) and score-function
    parameters, LayerNorm weight 1, every bias 0. General and bilinear scores start equal to the
    scaled dot product."""
    if isinstance(owner, (General, Bilinear)):  # start as the scaled dot product: W = I / D^(1/2) resp. I / D^(1/4)
        d = param.size(-1)
        param.copy_(torch.eye(d).expand_as(param) * d ** (-0.5 if isinstance(owner, General) else -0.25))
    elif isinstance(owner, nn.LayerNorm) and name == "weight":
        param.fill_(1.0)
    elif name == "bias":
        param.zero_()
    else:
        param.normal_(0.0, config.initializer_range)
        if isinstance(owner, nn.Embedding) and owner.padding_idx is not None:
            param[owner.padding_idx].zero_()


def init_weights(module: nn.Module, config: Config, seed: int | None = None) -> None:
    """Initialise every parameter of `module`; with a seed, reproducibly and without touching the
    global random state."""
    with torch.random.fork_rng(devices=[], enabled=seed is not None):
        if seed is not None:
            torch.manual_seed(seed)
        for owner in module.modules():
            for name, param in owner.named_parameters(recurse=False):
                init_parameter(owner, name, param, config)
