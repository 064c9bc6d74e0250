"""DeBERTa-v2 and v3, as BERT but for what differs (transformers models/deberta_v2/modeling_deberta_v2.py;
v2 and v3 are the same code under other configs). Its config.json and weight names:
convert/families/deberta_v2.py.

  embeddings   word (+ absolute positions only when position_biased_input, + token types when
               type_vocab_size > 0), summed in that order, projected (no bias) when embedding_size
               differs, LayerNorm, dropout (DebertaV2Embeddings). transformers then multiplies by the
               padding mask: that zeroes padded positions only, which no real token reads, except through
               the v2 convolution, which zeroes its own input there (ConvLayer below).
  attention    disentangled (DisentangledSelfAttention): the scores are content-to-content plus, as
               pos_att_type says, content-to-position (c2p: query i against the relative embedding of
               the bucket of i - j) and position-to-content (p2c: key j against it), each divided by
               sqrt(D * (1 + number of position terms)). The relative embeddings are one table shared by
               every layer (DebertaV2Encoder.rel_embeddings, LayerNorm'd when norm_rel_ebd says so), read
               once per forward (`layer_inputs`), projected by each layer's own query / key projections
               (share_att_key) or by its pos_query_proj / pos_key_proj. The terms are an alignment-score
               function of form DISENTANGLED (nn/score_functions.py): eager runs it whole, sdpa adds the
               position terms, materialised per layer, to its bias (nn/attention.py sdpa), flex looks them up
               by query / key and offset in its score_mod (nn/flex.py), a packed row included.
  layers       BERT's post-LN layers; v2's ConvLayer (conv_kernel_size > 0) after the first one.
  head         no pooler; DebertaV2ForSequenceClassification's head is ContextPooler (dense on the first
               token, pooler_hidden_act) and a Linear.

Offsets depend on positions only: transformers takes them from 0..L-1 whatever the mask, which inside a
right-padded row is each token's offset in its sequence, as in a packed row (the index is built for offsets up
to the row's length), so padded and packed agree.

Shapes: B batch, L sequence length (a packed batch is one row of T tokens), Lq queries, H heads, D head dim,
C hidden size, E embedding size, S span (the relative table has 2S rows).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from minialign.convert.families import deberta_v2 as deberta_v2_format
from minialign.models.bert import Bert, BertConfig
from minialign.models.heads import Heads, MaskedLM, SequenceClassification, TokenClassification
from minialign.nn.activations import activation
from minialign.nn.attention import PreparedMask
from minialign.nn.capture import record
from minialign.nn.config import (ACTIVATION, ANY_INT, BOOL, POSITIVE_INT, PROBABILITY, UNBOUNDED_POSITIONS, Config,
                                 Rule, checked, optional)
from minialign.nn.inputs import ForwardInputs, sequence_positions
from minialign.nn.layers import EncoderLayer, SelfAttention
from minialign.nn.layout import Layout
from minialign.nn.linear import Linear
from minialign.nn.reduce import row_product
from minialign.nn.score_functions import DISENTANGLED


POSITION_TERMS = ("c2p", "p2c")  # pos_att_type: content-to-position, position-to-content


def _position_terms(value) -> tuple[str, ...]:
    """pos_att_type from JSON: a list, or transformers' "p2c|c2p" string."""
    return tuple(x.strip() for x in value.lower().split("|") if x.strip()) if isinstance(value, str) else tuple(value)


def _norms(value) -> set[str] | None:
    return {x.strip() for x in value.lower().split("|")} if isinstance(value, str) else None


@dataclass(frozen=True)
class DebertaV2Config(BertConfig):
    """DeBERTa-v2/v3's config (configuration_deberta_v2.py; config.json: convert/families/deberta_v2.py):
    BERT's fields, the embeddings' width (None: hidden_size), and the disentangled attention's: content-to-
    position / position-to-content terms ("c2p", "p2c") from a relative-embedding table of 2 * span rows
    (span: position_buckets when > 0, else max_relative_positions, itself max_position_embeddings when < 1),
    LayerNorm'd when norm_rel_ebd says "layer_norm", projected by each layer's own query / key projections
    when share_att_key; absolute positions added to the embeddings only when position_biased_input; a
    convolution after the first layer when conv_kernel_size > 0; the classifier's ContextPooler activation
    and dropout (pooler_hidden_act, pooler_dropout)."""

    format = deberta_v2_format.FORMAT
    arch: str = "deberta-v2"
    embedding_size: int | None = checked(optional(POSITIVE_INT), None)
    relative_attention: bool = checked(BOOL, False)
    pos_att_type: tuple[str, ...] = checked(Rule(f"terms among {POSITION_TERMS}", lambda v: isinstance(
        v, (str, tuple, list)) and set(_position_terms(v)) <= set(POSITION_TERMS), _position_terms), ())
    max_relative_positions: int = checked(ANY_INT, -1)
    position_buckets: int = checked(ANY_INT, -1)
    share_att_key: bool = checked(BOOL, False)
    norm_rel_ebd: str = checked(Rule("'none', 'layer_norm' or both joined by '|'", lambda v: (
        _norms(v) is not None and _norms(v) <= {"none", "layer_norm"})), "none")
    position_biased_input: bool = checked(BOOL, True)
    conv_kernel_size: int = checked(Rule("an int, odd when > 0 (padding (k - 1) // 2 keeps the length)",
                                         lambda v: isinstance(v, int) and not isinstance(v, bool)
                                         and (v <= 0 or v % 2 == 1)), 0)
    conv_groups: int = checked(POSITIVE_INT, 1)
    conv_act: str = checked(ACTIVATION, "tanh")
    pooler_activation: str = checked(ACTIVATION, "gelu")
    pooler_dropout: float = checked(PROBABILITY, 0.0)

    def check(self) -> None:
        if self.hidden_size % self.conv_groups:
            raise ValueError(f"Config.conv_groups must be a positive int dividing hidden_size ({self.hidden_size}), "
                             f"got {self.conv_groups!r}")

    @property
    def embedding_width(self) -> int:
        return self.hidden_size if self.embedding_size is None else self.embedding_size

    @property
    def max_seq_len(self) -> int:
        """Without absolute positions (position_biased_input false: relative buckets only) there is no table to
        run out of and transformers takes any length (MiniCheck runs DeBERTa-v3 at 2048 tokens):
        UNBOUNDED_POSITIONS, the runners' window then being the tokenizer's model_max_length."""
        return super().max_seq_len if self.position_biased_input else UNBOUNDED_POSITIONS


# -- relative positions --------------------------------------------------------------------------------

def log_bucket(offset: Tensor, buckets: int, max_position: int) -> Tensor:
    """make_log_bucket_position: offsets i - j inside (-buckets/2, buckets/2) kept, larger ones log-spaced up
    to max_position. Step for step as transformers (the log and the ceil in float32 from a long offset), so
    the bucket boundaries, where the ceil of a rounded log decides, are the same."""
    sign = torch.sign(offset)
    mid = buckets // 2
    # mid - 1 as a Python number (transformers' torch.tensor(mid - 1).type_as(offset) is a blocking copy to a GPU)
    abs_pos = torch.where((offset < mid) & (offset > -mid), mid - 1, offset.abs())
    log_pos = torch.ceil(torch.log(abs_pos / mid) / torch.log(torch.tensor((max_position - 1) / mid)) * (mid - 1)) + mid
    return torch.where(abs_pos <= mid, offset.type_as(log_pos), log_pos * sign).long()


def span(config: Config) -> int:
    """S: the relative table has 2S rows (pos_ebd_size): position_buckets if > 0, else max_relative_positions
    (max_position_embeddings when < 1)."""
    return config.position_buckets if config.position_buckets > 0 else max_relative_positions(config)


def max_relative_positions(config: Config) -> int:
    return config.max_relative_positions if config.max_relative_positions >= 1 else config.max_position_embeddings


def relative_index(config: Config, longest: int, device: torch.device) -> Tensor:
    """(2 * longest - 1,) long: for each offset i - j = -(longest - 1) .. longest - 1, the row of the relative
    table its c2p / p2c term reads: clamp(bucket(i - j) + S, 0, 2S - 1) (build_relative_position, then the
    clamps of disentangled_attention_bias; p2c's -r_pos of j - i is the same row, the buckets being odd)."""
    offsets = torch.arange(1 - longest, longest, dtype=torch.long, device=device)
    if config.position_buckets > 0:
        offsets = log_bucket(offsets, config.position_buckets, max_relative_positions(config))
    s = span(config)
    return (offsets + s).clamp(0, 2 * s - 1)


class RelativeEmbeddings(nn.Module):
    """DebertaV2Encoder.rel_embeddings (2S, C), and its LayerNorm when norm_rel_ebd holds "layer_norm"
    (get_rel_embedding); empty without relative_attention."""

    def __init__(self, config: Config):
        super().__init__()
        self.config = config
        self.table = nn.Embedding(2 * span(config), config.hidden_size) if config.relative_attention else None
        self.norm = (nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
                     if self.table is not None and "layer_norm" in config.norm_rel_ebd else None)

    def forward(self) -> Tensor | None:
        if self.table is None:
            return None
        rel = self.table.weight if self.norm is None else self.norm(self.table.weight)
        rel = record("table", rel)
        return rel  # (2S, C)


# -- embeddings ----------------------------------------------------------------------------------------

class DebertaV2Embeddings(nn.Module):
    """LayerNorm(project(word + position + token_type)), then dropout (DebertaV2Embeddings)."""

    def __init__(self, config: Config):
        super().__init__()
        width = config.embedding_width
        self.word = nn.Embedding(config.vocab_size, width, padding_idx=config.pad_token_id)
        self.position = nn.Embedding(config.max_position_embeddings, width) if config.position_biased_input else None
        self.token_type = nn.Embedding(config.type_vocab_size, width) if config.type_vocab_size > 0 else None
        self.project = Linear(width, config.hidden_size, bias=False) if width != config.hidden_size else None
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def position_ids(self, input_ids: Tensor) -> Tensor:
        """(B, L) -> (B, L): 0, 1, ..., L - 1 (the position_ids buffer)."""
        return sequence_positions(input_ids)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, position_ids: Tensor) -> Tensor:
        """(B, L) each, or a packed (1, T) -> (B, L, C)."""
        x = self.word(input_ids)
        x = record("word", x)
        if self.position is not None:
            position = self.position(position_ids)
            position = record("position", position)
            x = x + position
        if self.token_type is not None:
            token_type = self.token_type(token_type_ids)
            token_type = record("token_type", token_type)
            x = x + token_type
        x = record("sum", x)
        if self.project is not None:
            x = self.project(x)
            x = record("project", x)
        x = self.norm(x)
        x = record("norm", x)
        return self.dropout(x)


# -- disentangled attention ------------------------------------------------------------------------------

@dataclass
class Disentangled:
    """The score function of one layer's forward: content-to-content plus the c2p / p2c terms (form
    DISENTANGLED, nn/score_functions.py). pos_key, pos_query: the relative embeddings projected into each
    head (H, 2S, D), None for a term the config leaves out; index (2R + 1,): the table row of each offset
    i - j = -R..R. Queries sit at positions 0..Lq - 1 and keys at 0..L - 1 of their sequence (Lq = 1: the
    first token), as every backend hands them over (a packed row to flex: in-sequence offsets wherever the
    mask lets a pair through)."""

    pos_key: Tensor | None
    pos_query: Tensor | None
    index: Tensor
    scale: float  # sqrt(D * (1 + number of position terms)) (scaled_size_sqrt)
    form = DISENTANGLED
    recorded: bool = False

    def project(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor, float]:
        return q, k, 1.0 / self.scale

    def position_tables(self, q: Tensor, k: Tensor) -> tuple[Tensor | None, Tensor | None]:
        """(c2p by query (B, H, Lq, 2S), p2c by key (B, H, L, 2S)), divided by the scale before the product
        (half precision then cannot overflow); None for a term the config leaves out."""
        # the tables in q's / k's dtype: a mixed precision's bf16 queries and keys meet fp32 tables (as attention.py
        # _matching casts a prepared bias); .to of the same dtype returns the tensor itself
        pos_key = self.pos_key.to(q.dtype) if self.pos_key is not None else None
        pos_query = self.pos_query.to(k.dtype) if self.pos_query is not None else None
        c2p = row_product(q / self.scale, pos_key.transpose(-1, -2)) if pos_key is not None else None
        p2c = torch.matmul(k / self.scale, pos_query.transpose(-1, -2)) if pos_query is not None else None
        return c2p, p2c

    def rows(self, queries: int, keys: int) -> Tensor:
        """(Lq, L): the table row of each pair (query i, key j)."""
        center = (self.index.numel() - 1) // 2
        i = torch.arange(queries, device=self.index.device)[:, None]
        j = torch.arange(keys, device=self.index.device)[None, :]
        return self.index[i - j + center]

    def position_scores(self, q: Tensor, k: Tensor) -> Tensor | None:
        """c2p + p2c materialised (B, H, Lq, L) (disentangled_attention_bias); None without terms."""
        c2p, p2c = self.position_tables(q, k)
        rows = self.rows(q.size(2), k.size(2))  # (Lq, L)
        terms = None
        if c2p is not None:  # c2p[i, j] = q_i . pos_key[row(i, j)]
            terms = torch.gather(c2p, -1, rows.expand(*c2p.shape[:2], -1, -1))
            self._record("c2p", terms)
        if p2c is not None:  # p2c[i, j] = k_j . pos_query[row(i, j)]
            p2c = torch.gather(p2c, -1, rows.T.expand(*p2c.shape[:2], -1, -1)).transpose(-1, -2)
            self._record("p2c", p2c)
            terms = p2c if terms is None else terms + p2c
        self.recorded = True
        return terms

    def __call__(self, q: Tensor, k: Tensor) -> Tensor:
        """The whole score (B, H, Lq, L): q . (k / scale) + c2p + p2c, in transformers' order."""
        scores = row_product(q, (k / self.scale).transpose(-1, -2))  # one query row: bits that do not follow the batch
        terms = self.position_scores(q, k)
        return scores if terms is None else scores + terms

    def _record(self, role: str, t: Tensor) -> None:
        if not self.recorded:  # once per layer call (a capture's eager twin computes the score twice)
            record(role, t, patchable=False)  # read-only: the score is computed again by the backend


class DisentangledAttention(SelfAttention):
    """DisentangledSelfAttention: BERT's projections (query_proj, key_proj, value_proj as the fused qkv),
    the position projections unless share_att_key, and SelfAttention's forward under the Disentangled score,
    bound once per forward from the relative embeddings (`bind`; the layer passes it as `score`)."""

    def __init__(self, config: Config):
        if config.score_fn != "scaled_dot":
            raise ValueError(f"DeBERTa's attention is its own score function (content and position terms, "
                             f"disentangled): Config.score_fn must be 'scaled_dot', got {config.score_fn!r}")
        super().__init__(config)
        self.score_form = DISENTANGLED  # content and position terms: the backend rows that run them
        kinds = config.pos_att_type
        self.relative = config.relative_attention
        self.scale = math.sqrt(config.head_dim * (1 + len(kinds)))
        self.c2p, self.p2c = "c2p" in kinds, "p2c" in kinds
        own = self.relative and not config.share_att_key
        self.pos_key = Linear(config.hidden_size, config.hidden_size) if own and self.c2p else None
        self.pos_query = Linear(config.hidden_size, config.hidden_size) if own and self.p2c else None
        self.pos_dropout = nn.Dropout(config.hidden_dropout)

    def own_score(self, config: Config) -> None:
        """None: the score is bound per forward (`bind`)."""
        return None

    def prune(self, heads) -> None:
        """Refused: transformers' DebertaV2 has no prune_heads either."""
        raise ValueError("deberta-v2 heads cannot be pruned: its relative-position projections are shared with each "
                         "layer's key and query projections (share_att_key) and the position terms are computed per "
                         "head from them")

    def bind(self, rel: Tensor | None, index: Tensor) -> Disentangled:
        """This forward's score: the relative embeddings through the position projections, (H, 2S, D) each."""
        pos_key = pos_query = None
        if self.relative and (self.c2p or self.p2c):
            rel = self.pos_dropout(rel)
            C = rel.size(-1)
            heads = lambda t: t.view(t.size(0), self.num_heads, -1).transpose(0, 1)  # noqa: E731  (H, 2S, D)
            w, b = self.qkv.weight, self.qkv.bias
            if self.c2p:  # share_att_key: the layer's key_proj, else pos_key_proj
                pos_key = heads(F.linear(rel, w[C:2 * C], b[C:2 * C]) if self.pos_key is None else self.pos_key(rel))
            if self.p2c:
                pos_query = heads(F.linear(rel, w[:C], b[:C]) if self.pos_query is None else self.pos_query(rel))
        return Disentangled(pos_key, pos_query, index, self.scale)


class ConvLayer(nn.Module):
    """v2's ConvLayer after the first layer: LN(h_1 + act(conv(h_0))), with h_0 the embeddings (zero at
    padding, as transformers' masked embeddings), the conv's output zero at padding, and the result too.
    A packed row is convolved padded (sequence by sequence), then packed again."""

    def __init__(self, config: Config):
        super().__init__()
        size = config.conv_kernel_size
        self.conv = nn.Conv1d(config.hidden_size, config.hidden_size, size, padding=(size - 1) // 2,
                              groups=config.conv_groups)
        self.act = activation(config.conv_act)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, embeddings: Tensor, residual: Tensor, queries, padding: Tensor | None,
                layout: Layout) -> Tensor:
        """embeddings (B, L, C) or packed (1, T, C); residual: the first layer's output for the queries."""
        keep = None if layout.packed or padding is None else padding[..., None].to(embeddings.dtype)  # (B, L, 1)
        x = layout.unpack(embeddings) if keep is None else embeddings * keep
        out = self.conv(x.transpose(1, 2)).transpose(1, 2)  # (B, L, C)
        if layout.packed:
            out = layout.pack(out)
        elif keep is not None:
            out = out * keep
        if queries is not None:
            out = queries(out)
        out = self.act(self.dropout(out))
        out = record("conv", out)
        out = self.norm(residual + out)
        if keep is not None:
            out = out * (keep if queries is None else queries(keep))
        out = record("output", out)
        return out


class DebertaV2Layer(EncoderLayer):
    """DebertaV2Layer: BERT's post-LN layer over the disentangled attention; the first one of a v2 config with
    conv_kernel_size > 0 ends with the ConvLayer (DebertaV2Encoder.conv, applied after layer 0)."""

    def __init__(self, config: Config, *, conv: bool = False):
        super().__init__(config)
        self.attention = DisentangledAttention(config)
        self.conv = ConvLayer(config) if conv else None

    def forward(self, x: Tensor, mask: PreparedMask, queries=None, *, rel_embeddings: Tensor | None,
                index: Tensor, padding: Tensor | None, layout: Layout) -> tuple[Tensor, Tensor | None]:
        """The post-LN layer under this forward's Disentangled score (the family's `layer_inputs`: the relative
        embeddings and each offset's table row), then v2's convolution (its padding, the layout)."""
        out, probs = super().forward(x, mask, queries, score=self.attention.bind(rel_embeddings, index))
        if self.conv is not None:
            out = self.conv(x, out, queries, padding, layout)
        return out, probs


# -- the head --------------------------------------------------------------------------------------------

class DebertaV2(Bert):
    config_class = DebertaV2Config
    Embeddings = DebertaV2Embeddings
    parts = {"relative": RelativeEmbeddings}
    pooler = False  # DebertaV2Model has none

    @classmethod
    def layers(cls, config: Config) -> list[nn.Module]:
        return [DebertaV2Layer(config, conv=i == 0 and config.conv_kernel_size > 0) for i in range(config.num_layers)]

    @classmethod
    def layer_inputs(cls, encoder: nn.Module, inputs: ForwardInputs) -> dict[str, Any]:
        """Once per forward: the relative embeddings (get_rel_embedding), the table row of every offset within
        this row's length (or the longest bucket a packed sequence is attended at, layout.span), the layout, and the convolution's padding: (B, L) True at real tokens (ConvLayer's
        input_mask: a 2-D mask, or the keys some query of a 3-D one attends); None: none, or a packed row (no
        padding in it)."""
        mask, layout, position_ids = inputs.attention_mask, inputs.layout, inputs.position_ids
        padding = None
        if mask is not None and not layout.packed and mask.dim() in (2, 3):
            padding = mask.bool() if mask.dim() == 2 else mask.bool().any(-2)
        return {"rel_embeddings": encoder.relative(),
                "index": relative_index(encoder.config, max(position_ids.size(1), layout.span), position_ids.device),
                "padding": padding, "layout": layout}

    @classmethod
    def heads(cls, config: Config) -> Heads:
        """ContextPooler + classifier: out_proj(dropout(act(dense(dropout(h_0))))), pooler_dropout in the pooler,
        pooler_hidden_act its activation, `pooled` recorded after it, as ContextPooler returns it;
        DebertaV2ForTokenClassification: classifier(dropout(h)), the dropout hidden_dropout (not classifier_dropout);
        DebertaV2ForMaskedLM: decoder(LayerNorm(hidden_act(dense(h)))) + bias onto the word embeddings, the dense
        layer mapping onto embedding_size: the legacy head (LegacyDebertaV2LMPredictionHead, `cls.predictions`,
        transformers' default config.legacy=True) and the other (DebertaV2LMPredictionHead,
        `lm_predictions.lm_head`, which needs embedding_size == hidden_size) compute the same; QA BERT's."""
        return Heads(sequence_classification=SequenceClassification(pool="first", dropout_in=config.pooler_dropout,
                                                                    dense_activation=config.pooler_activation,
                                                                    record="dense"),
                     masked_lm=MaskedLM(width="embedding"),
                     token_classification=TokenClassification(dropout="hidden"))
