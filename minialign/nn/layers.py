"""The layers every encoder family shares, in reading order: self-attention, feed-forward, the
post-LN encoder layer, the pooler. A family (minialign/models/<family>.py) builds its stack from
these or from its own, declared there; nothing here knows which family it serves.

Shapes: B batch, L sequence length (or T tokens of a packed row, as (1, T, ...)), Lq query tokens,
C hidden size, H heads, D head dim (C = H * D), I intermediate size. Mask convention: True / 1 =
attend (masks.py). References: transformers models/bert/modeling_bert.py (BertSelfAttention,
BertSelfOutput, BertIntermediate, BertOutput, BertLayer, BertPooler).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
import torch.nn as nn
from torch import Tensor

from minialign.nn.activations import activation
from minialign.nn.attention import PreparedMask, attention
from minialign.nn.capture import asks, capturing, record, unobserved
from minialign.nn.config import Config
from minialign.nn.int8 import Int8Linear
from minialign.nn.linear import Linear, MixedPrecisionLinear
from minialign.nn.rotary import apply_rotary
from minialign.nn.score_functions import make_score_function, score_form


class SelfAttention(nn.Module):
    """Multi-head self-attention: Q, K, V projections, attention per head, output projection.

    Q, K and V are one (3C, C) matmul; the state dict still names them query / key / value
    (split on save, fused on load: `split_qkv`, `fuse_qkv`), so checkpoints and the converter see
    the usual names; `fused_names`: it names the fused qkv, for a family whose checkpoints hold one
    (ModernBERT's Wqkv). `rotary`: (cos, sin) tables (B, L, D) rotating queries and keys (nn/rotary.py);
    `score`: this forward's score function, where a family binds one per forward (DeBERTa's, from the relative
    embeddings), else the attention's own (`own_score`: Config.score_fn's, score_functions.py); `score_form`, the
    form of those scores (score_functions.py DOT, OFFSET, ...), decides which attention backends can run them.
    `kv_heads`: grouped-query attention (Ainslie et al. 2023; transformers models/llama/modeling_llama.py
    LlamaAttention, EuroBERT's): fewer key / value heads than query heads (None: as many), each shared by
    num_heads / kv_heads consecutive query heads. qkv is then ((H + 2 KV) * D, C), Q's rows first; the keys and
    values are expanded to H heads before the backend (repeat_kv, as repeat_interleave), so every backend runs
    them unchanged. Three options of the decoder-born families (transformers models/qwen3/modeling_qwen3.py
    Qwen3Attention, models/gemma3/modeling_gemma3.py Gemma3Attention): `qk_norm`, a norm over each head's D made for
    the queries and one for the keys (q_norm, k_norm), applied before the rotation; `query_scale`, a factor on the
    rotated queries (Gemma 3's scores by query_pre_attn_scalar^-1/2: sqrt(D / query_pre_attn_scalar), the backends
    scaling by D^-1/2); `output_bias`, the output projection's own bias (Qwen 2's: none, beside biased q / k / v). The
    output projection reads H * D (C where heads are C / H wide)."""

    def __init__(self, config: Config, *, bias: bool = True, fused_names: bool = False, kv_heads: int | None = None,
                 output_bias: bool | None = None, qk_norm: Callable[[int], nn.Module] | None = None,
                 query_scale: float = 1.0):
        super().__init__()
        self.num_heads, self.dropout_p = config.num_heads, config.attention_dropout
        self.num_kv_heads = config.num_heads if kv_heads is None else kv_heads
        if not isinstance(self.num_kv_heads, int) or self.num_kv_heads < 1 or config.num_heads % self.num_kv_heads:
            raise ValueError(f"SelfAttention: kv_heads must be a positive int dividing num_heads ({config.num_heads}), "
                             f"got {kv_heads!r}")
        self.head_dim = config.head_dim
        self.heads = tuple(range(config.num_heads))  # the heads it has, numbered as in the unpruned layer (prune)
        width = (config.num_heads + 2 * self.num_kv_heads) * config.head_dim  # 3C without grouped queries
        self.qkv = Linear(config.hidden_size, width, bias=bias)
        self.score = self.own_score(config)
        self.score_form = score_form(config.score_fn)  # the form of its scores: the backend rows that run them
        self.output = Linear(config.num_heads * config.head_dim, config.hidden_size,
                             bias=bias if output_bias is None else output_bias)
        self.q_norm, self.k_norm = (qk_norm(config.head_dim), qk_norm(config.head_dim)) if qk_norm else (None, None)
        self.query_scale = query_scale
        if not fused_names:
            self._register_state_dict_hook(split_qkv)
            self._register_load_state_dict_pre_hook(fuse_qkv)

    def own_score(self, config: Config) -> nn.Module | None:
        """The score function this attention holds (its parameters are the layer's); None: one is bound per
        forward and passed as `score`."""
        return make_score_function(config.score_fn, config.num_heads, config.head_dim, config.max_relative_distance)

    def forward(self, x: Tensor, mask: PreparedMask, queries: Callable[[Tensor], Tensor] | None = None,
                rotary: tuple[Tensor, Tensor] | None = None, *,
                score: nn.Module | None = None) -> tuple[Tensor, Tensor | None]:
        """x (B, L, C). `queries` picks the query tokens (default: all), e.g. Layout.first_tokens."""
        B, L, _ = x.shape
        inner = self.num_heads * self.head_dim  # C, or less once heads are pruned
        kv_inner = self.num_kv_heads * self.head_dim  # inner, or less with grouped queries
        heads = lambda t, n: t.view(B, t.size(1), n, -1).transpose(1, 2)  # noqa: E731  (B, n, L, D)
        q, k, v = self.qkv(x).split([inner, kv_inner, kv_inner], dim=-1)  # (B, L, H * D), (B, L, KV * D) twice
        if self.q_norm is not None:  # each head's query and key normed, before the rotation (q_norm, k_norm)
            q, k = (norm(t.view(B, L, -1, self.head_dim)).view(B, L, t.size(-1))
                    for norm, t in ((self.q_norm, q), (self.k_norm, k)))
        if rotary is not None:  # every token rotated at its own position, before any query is picked
            q, k = (apply_rotary(t.view(B, L, -1, self.head_dim), *rotary).view(B, L, t.size(-1)) for t in (q, k))
        if self.query_scale != 1.0:
            q = q * self.query_scale
        if queries is not None:
            q = queries(q)  # (B, Lq, C)
        q, k, v = heads(q, self.num_heads), heads(k, self.num_kv_heads), heads(v, self.num_kv_heads)
        if self.num_kv_heads != self.num_heads:  # each key / value head to its group of query heads (repeat_kv)
            groups = self.num_heads // self.num_kv_heads
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)  # (B, H, L, D)
        q = record("q", q)
        k = record("k", k)
        v = record("v", v)
        y, probs = attention(q, k, v, mask, score=self.score if score is None else score,
                             dropout_p=self.dropout_p if self.training else 0.0)
        y = record("context", y)  # (B, H, Lq, D)
        if asks("head_outputs"):  # each head's write, on request only: (B, H, Lq, C), H times the output's size
            writes = head_writes(y, self.output.weight)
            patched = record("head_outputs", writes)
            if patched is not writes:  # a patch changed a head's write: the output is the sum of the writes
                out = patched.sum(1) + (self.output.bias if self.output.bias is not None else 0)
                return record("output", out.to(y.dtype)), probs
        # y (or the copy reshape makes of it) is read again only by a capture or a hook
        out = self.output(y.transpose(1, 2).reshape(B, q.size(2), inner), scratch=unobserved(self.output))  # (B, Lq, C)
        out = record("output", out)
        return out, probs

    def prune(self, heads: Iterable[int]) -> None:
        """Remove these heads, numbered as in the unpruned layer (those already gone are skipped): their rows of
        Q, K and V, their columns of the output projection, their rows of a score function's per-head parameters
        (transformers v4 BertSelfAttention.prune_heads with pytorch_utils.prune_linear_layer). The output is
        what the unpruned layer gives with those heads' contexts zeroed (a head_mask of 0 on them)."""
        gone = set(heads)
        keep = [i for i, head in enumerate(self.heads) if head not in gone]
        if len(keep) == len(self.heads):
            return
        if not keep:
            raise ValueError(f"pruning heads {sorted(gone)} would leave the layer none; keep at least one")
        if self.num_kv_heads != self.num_heads:
            raise ValueError(f"heads of grouped-query attention ({self.num_heads} query heads sharing "
                             f"{self.num_kv_heads} key / value heads) cannot be pruned one by one")
        for name in ("qkv", "output"):
            if type(getattr(self, name)) is not Linear:
                raise ValueError(f"prune heads before choosing a precision: attention.{name} is a "
                                 f"{type(getattr(self, name)).__name__}, whose kernel keeps weights of its own")
        D, inner = self.head_dim, self.num_heads * self.head_dim
        rows = torch.tensor([i * D + d for i in keep for d in range(D)])  # the kept heads' features
        self.qkv.keep(outputs=torch.cat([rows + part * inner for part in range(3)]))  # Q, K, V stacked
        self.output.keep(inputs=rows)
        if self.score is not None:  # every score function's parameters are per head, heads first (score_functions.py)
            for name, parameter in list(self.score.named_parameters(recurse=False)):
                setattr(self.score, name, nn.Parameter(parameter.detach()[keep].clone(),
                                                       requires_grad=parameter.requires_grad))
        self.heads = tuple(self.heads[i] for i in keep)
        self.num_heads = self.num_kv_heads = len(keep)


def head_writes(context: Tensor, weight: Tensor) -> Tensor:
    """Each head's write into the residual stream: its context (B, H, Lq, D) through its D columns of the output
    projection's weight (C, H * D) -> (B, H, Lq, C); their sum over heads plus the projection's bias is the
    attention's output (TransformerLens' hook_result; Elhage et al. 2021, "A Mathematical Framework for Transformer
    Circuits": the output projection split by head)."""
    H, D = context.size(1), context.size(-1)
    per_head = weight.to(context.dtype).view(weight.size(0), H, D)  # (C, H, D)
    return torch.einsum("bhld,chd->bhlc", context, per_head)


QKV = ("query", "key", "value")


def split_qkv(module, state_dict, prefix, local_metadata):
    """State-dict hook: the fused qkv.{weight,bias} saved as query / key / value (key and value KV * D rows each
    with grouped queries)."""
    sizes = [module.num_heads * module.head_dim] + [module.num_kv_heads * module.head_dim] * 2
    for kind in ("weight", "bias"):
        fused = state_dict.pop(f"{prefix}qkv.{kind}", None)
        if fused is None:
            continue  # a layer without biases
        for name, part in zip(QKV, fused.split(sizes, dim=0)):
            state_dict[f"{prefix}{name}.{kind}"] = part
    return state_dict


def fuse_qkv(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
    """Load pre-hook: query / key / value in a state dict concatenated into qkv."""
    for kind in ("weight", "bias"):
        names = [f"{prefix}{name}.{kind}" for name in QKV]
        if all(n in state_dict for n in names):
            state_dict[f"{prefix}qkv.{kind}"] = torch.cat([state_dict.pop(n) for n in names], dim=0)


class FeedForward(nn.Module):
    """down(activation(up(x))) (BertIntermediate + the dense layer of BertOutput)."""

    # Inference on the CPU runs the rows in slices whose (rows, I) intermediate stays under this many bytes: below
    # glibc's largest mmap threshold (32 MiB), so the buffer is reused from the heap instead of being mapped and
    # faulted in afresh by every layer (a 2621-token roberta-base batch spent ~20% of its forward there), and
    # peak memory no longer grows with the batch's I-wide activations. Each row's result is the same. A measure
    # against the CPU allocator, so the CPU's alone: on a GPU (the caching allocator reuses its blocks) slices
    # only multiply the launches (64 x 512 roberta-base bf16: 16 slices and a cat per layer, ~1,270 ops per forward
    # against ~325 unsliced on an H200) and leave each slice's down projection less than one wave of the GPU.
    SLICE_BYTES = 12 << 20

    def __init__(self, config: Config, *, bias: bool = True):
        super().__init__()
        self.up = self.up_projection(config, bias=bias)
        self.down = Linear(config.intermediate_size, config.hidden_size, bias=bias)

    @staticmethod
    def up_projection(config: Config, *, bias: bool) -> Linear:
        """C -> I, the activation fused into it."""
        return Linear(config.hidden_size, config.intermediate_size, bias=bias, activation=config.activation)

    def forward(self, x: Tensor) -> Tensor:
        rows = x.numel() // x.shape[-1]
        step = self.slice_rows(x)
        if rows <= step or x.device.type != "cpu" or capturing() or torch.is_grad_enabled():
            return self.rows(x)
        flat = x.reshape(rows, x.shape[-1])
        out = torch.cat([self.rows(part) for part in flat.split(step)])
        return out.reshape(*x.shape[:-1], self.down.out_features)

    def rows(self, x: Tensor) -> Tensor:
        """The feed-forward of some rows: down(activation(x W^T + b)), (..., C) -> (..., C)."""
        h = self.up(x)  # (..., I)
        h = record("intermediate", h)
        return self.down(h, scratch=unobserved(self.up, self.down))  # h is read again only by a capture or a hook

    def slice_rows(self, x: Tensor) -> int:
        """The rows of one inference slice: a multiple of 64, at least 64."""
        return max(64, self.SLICE_BYTES // (self.up.out_features * x.element_size()) // 64 * 64)


class GatedFeedForward(FeedForward):
    """A gated linear unit (Shazeer 2020, "GLU Variants Improve Transformer"): up (C -> 2I) gives two halves,
    one activated and one not, down(dropout(act(activated) * other)); GeGLU with GELU, SwiGLU with SiLU. Run in
    FeedForward's inference slices. `activated`: which half of up's output the activation reads, "first"
    (ModernBertMLP's Wi -> input, gate; Llama's gate_proj stacked before up_proj) or "second" (an up_gate
    projection whose gate comes last). `split_names`: its state dict names the halves as two layers, `gate`
    (the activated one) and `value`, for a family whose checkpoints hold two (Llama's gate_proj / up_proj,
    NomicBERT's fc12 / fc11); the fused `up` otherwise. The dropout is the family's (ModernBERT's mlp_dropout).
    `up_bias`: whether up has a bias, where it differs from down's (`bias`; None: the same)."""

    HALVES = ("first", "second")

    def __init__(self, config: Config, *, bias: bool = True, activated: str = "first", dropout: float = 0.0,
                 activation_name: str | None = None, split_names: bool = False, up_bias: bool | None = None):
        if activated not in self.HALVES:
            raise ValueError(f"GatedFeedForward: activated is 'first' or 'second', not {activated!r}")
        super().__init__(config, bias=bias)
        if up_bias is not None and up_bias != bias:  # up's bias apart from down's (GteMLP: gate / up none, down one)
            self.up = self.up_projection(config, bias=up_bias)
        self.activated = activated
        self.act = activation(activation_name or config.activation)
        self.dropout = nn.Dropout(dropout)
        if split_names:
            self._register_state_dict_hook(split_gate)
            self._register_load_state_dict_pre_hook(fuse_gate, with_module=True)

    @staticmethod
    def up_projection(config: Config, *, bias: bool) -> Linear:
        """C -> 2I: both halves in one matmul; the activation applies to one half alone (`rows`)."""
        return Linear(config.hidden_size, 2 * config.intermediate_size, bias=bias)

    def rows(self, x: Tensor) -> Tensor:
        first, second = self.up(x).chunk(2, dim=-1)  # (..., I) each
        gate, value = (first, second) if self.activated == "first" else (second, first)
        h = self.act(gate) * value
        h = record("intermediate", h)
        # h is read again only by a capture or a hook (dropout: h itself at inference)
        return self.down(self.dropout(h), scratch=unobserved(self.down))  # (..., C)


GATE_HALVES = ("gate", "value")  # the split names of a GatedFeedForward's up, in the order of `activated="first"`


def split_gate(module, state_dict, prefix, local_metadata):
    """State-dict hook: the fused up.{weight,bias} saved as gate (the activated half) and value."""
    for kind in ("weight", "bias"):
        fused = state_dict.pop(f"{prefix}up.{kind}", None)
        if fused is None:
            continue  # a layer without biases
        halves = fused.chunk(2, dim=0)
        if module.activated == "second":
            halves = halves[::-1]
        for name, part in zip(GATE_HALVES, halves):
            state_dict[f"{prefix}{name}.{kind}"] = part
    return state_dict


def fuse_gate(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
    """Load pre-hook: gate and value in a state dict stacked into up, in the order `activated` reads."""
    for kind in ("weight", "bias"):
        names = [f"{prefix}{name}.{kind}" for name in GATE_HALVES]
        if all(n in state_dict for n in names):
            parts = [state_dict.pop(n) for n in names]
            if module.activated == "second":
                parts = parts[::-1]
            state_dict[f"{prefix}up.{kind}"] = torch.cat(parts, dim=0)


# Which Linear layers of an encoder layer each precision's variant takes (nn/precision.py, apply_precision): the
# one declaration, read by every family's layer (EncoderLayer and its subclasses, ModernBertLayer).
PRECISION_LAYERS: dict[type[Linear], tuple[str, ...]] = {
    # Mixed precision (dtype="auto", Pretrained.compute_dtype) runs the matmuls that write into the residual stream
    # in the lower dtype; those that read from it (Q/K/V, the feed-forward's up projection) and attention stay in
    # the weights' dtype: rounded to bf16, queries, keys and GELU's inputs caused most of a trained model's score
    # deviation, while a bf16 rounding of an update is small next to the stream it is added to (BENCHMARKS.md,
    # "Precision", has the recipes measured).
    MixedPrecisionLinear: ("attention.output", "ffn.down"),
    # The quantized mode (loading's dtype="int8", nn/int8.py) runs these products in int8: all four, every Linear
    # of the layer. Measured on the real all-MiniLM-L6-v2 and Python's documentation (BENCHMARKS.md, "int8",
    # per-token inputs with smoothing and 4 fp32 outlier channels): each alone keeps top-10 neighbour overlap
    # 0.977-0.995, all four 0.969-0.974 (three without ffn.down 0.977) at 1.22-1.35x fp32's encode speed (three:
    # 1.13-1.18x); with one input range per call, as torch.ao and the ONNX qint8 export quantize, all four gave
    # 0.865. attention.output alone is about as fast as fp32 (0.98-1.03x), but leaving it in fp32 moved the
    # rerank figures by ties only.
    Int8Linear: ("attention.qkv", "attention.output", "ffn.up", "ffn.down"),
}


class EncoderLayer(nn.Module):
    """Post-LN: x = LN(x + drop(attn(x))); x = LN(x + drop(ffn(x))) (BertLayer). `window`: how far its queries
    see (keys with |i - j| <= window; None: every key), read by the Encoder's plan (models/family.py)."""

    precision_layers = PRECISION_LAYERS
    window: int | None = None

    def __init__(self, config: Config):
        super().__init__()
        self.attention = SelfAttention(config)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.ffn = FeedForward(config)
        self.ffn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.attention_dropout = self.dropout  # on the attention output (a family may have none there)

    def forward(self, x: Tensor, mask: PreparedMask, queries: Callable[[Tensor], Tensor] | None = None, *,
                score: nn.Module | None = None,
                rotary: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor | None]:
        """x (B, L, C) -> the new states of the `queries` tokens (default: all) (B, Lq, C), and the
        attention probabilities (B, H, Lq, L) when the backend gives them. `score`, `rotary`: SelfAttention's (a
        family's per-forward score function; the (cos, sin) tables of a rotary family: GTE, NomicBERT, jina-v3)."""
        x = record("input", x)
        a, probs = self.attention(x, mask, queries, rotary=rotary, score=score)
        if queries is not None:
            x = queries(x)
        x = x + self.attention_dropout(a)
        x = record("attention_residual", x)
        x = self.attention_norm(x)
        x = record("attention_norm", x)
        f = self.ffn(x)
        f = record("ffn_output", f)
        x = x + self.dropout(f)
        x = record("ffn_residual", x)
        x = self.ffn_norm(x)
        x = record("output", x)
        return x, probs


class PreNormLayer(nn.Module):
    """Pre-norm: x = x + attn(attention_norm(x)); x = x + ffn(ffn_norm(x)), from its four parts (the Llama-shaped
    layer without a cache: EuroBertDecoderLayer, Qwen2DecoderLayer, Qwen3DecoderLayer). Every key is attended
    (`window` None); `rotary`: the (cos, sin) tables (B, L, D) its attention rotates by."""

    precision_layers = PRECISION_LAYERS  # EncoderLayer's: the same names, the same reasons
    window: int | None = None

    def __init__(self, attention_norm: nn.Module, attention: SelfAttention, ffn_norm: nn.Module, ffn: FeedForward):
        super().__init__()
        self.attention_norm, self.attention, self.ffn_norm, self.ffn = attention_norm, attention, ffn_norm, ffn

    def forward(self, x: Tensor, mask: PreparedMask, queries: Callable[[Tensor], Tensor] | None = None, *,
                rotary: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor | None]:
        """x (B, L, C) -> the new states of the `queries` tokens (default: all) (B, Lq, C), and the attention
        probabilities (B, H, Lq, L) when the backend gives them."""
        x = record("input", x)
        normed = self.attention_norm(x)
        normed = record("attention_norm", normed)  # pre-LN: what the attention reads
        a, probs = self.attention(normed, mask, queries, rotary=rotary)
        if queries is not None:
            x = queries(x)
        x = x + a
        x = record("attention_residual", x)
        normed = self.ffn_norm(x)
        normed = record("ffn_norm", normed)  # pre-LN: what the feed-forward reads
        f = self.ffn(normed)
        f = record("ffn_output", f)
        x = x + f
        x = record("ffn_residual", x)
        x = record("output", x)  # pre-LN: the residual is the layer's output (capture's names, as EncoderLayer's)
        return x, probs


class Pooler(nn.Module):
    """tanh(W h_0 + b) on the first token ([CLS] / <s>) (BertPooler)."""

    def __init__(self, config: Config):
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        pooled = torch.tanh(self.dense(x[:, 0]))  # (B, C)
        pooled = record("output", pooled)
        return pooled


class RMSNorm(nn.RMSNorm):
    """weight * x / sqrt(mean(x^2) + eps), computed in float32 and cast back before the weight (transformers
    models/llama/modeling_llama.py LlamaRMSNorm, EuroBertRMSNorm; T5's LayerNorm): no mean subtracted, no bias.
    torch's nn.RMSNorm with transformers' order of rounding (its parameters and state dict are torch's)."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__(hidden_size, eps=eps)

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)
