"""M3Encoder: BGE-M3's three outputs from one forward, as FlagEmbedding's BGEM3FlagModel gives them.

    m3 = M3Encoder.from_pretrained("path/to/bge-m3")          # an XLM-RoBERTa directory + FlagEmbedding's heads
    out = m3.encode(["a text", "another"], return_sparse=True, return_colbert_vecs=True)
    out["dense_vecs"]        # (N, hidden) float32: the first token's state, normalised
    out["lexical_weights"]   # [{"token id": weight}]: relu(sparse_linear(state)) per token, the largest per id
    out["colbert_vecs"]      # [(tokens - 1, dim)] float32: colbert_linear(state) of every token but the first

The reference is FlagEmbedding (FlagOpen/FlagEmbedding): BGEM3FlagModel is inference/embedder/encoder_only/m3.py's
M3Embedder (FlagEmbedding 1.3; FlagEmbedding/bge_m3.py's BGEM3FlagModel before it, the same formulas), over the
model of finetune/embedder/encoder_only/m3/modeling.py (EncoderOnlyEmbedderM3ModelForInference.forward). Its
defaults, and ours:
  - normalize_embeddings=True: dense and colbert vectors are L2-normalised (the forward's F.normalize, dim=-1);
    encode(normalize_embeddings=False) gives them raw.
  - pooling_method="cls": the dense vector is the first token's final state (_dense_embedding).
  - use_fp16=True on a GPU (forced off on the CPU): FlagEmbedding then returns fp16 arithmetic in float32 arrays.
    Here the weights' dtype is the loading's (fp32 by default, Loading.dtype); outputs are float32 torch tensors.
  - max_length: FlagEmbedding 1.2's encode default is 8192 (bge_m3.py, BGEM3FlagModel.encode), BAAI/bge-m3's
    window, which its model card passes too; 1.3 on (M3Embedder.encode: passage_max_length) cuts at 512 unless told.
    Here the default is the model's window (the smallest of the tokenizer's and the position table's,
    Runner._start: 8192 for BAAI/bge-m3); a call's max_length may be smaller (max_length=512: 1.3's default).
Texts are cut at the end to the window, special tokens kept, as transformers' truncation=True does; the cut is
reported as by every runner (products/runner.py).

Heads: sparse_linear.pt and colbert_linear.pt beside the checkpoint (convert/flagembedding.py reads them). A
directory without one loads (its dense vectors need neither), and a call that asks for what the missing head
gives (return_sparse, return_colbert_vecs) is a ValueError naming the file; FlagEmbedding would instead
initialise the head at random and log a line.

Batches go through the shared batching engine (deduplicated, sorted by length, packed), whose forward is
ragged here: one entry per text (runtime/engine.py), its token ids, weights and vectors, so a text's outputs
are the same whatever it is batched with. Differences from FlagEmbedding's forms: torch tensors instead of
numpy arrays; lexical_weights are plain dicts of Python floats (FlagEmbedding: defaultdict(int) of
np.float32), so compute_lexical_matching_score sums in float64 where FlagEmbedding's sum stays float32.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Unpack

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from minialign import convert
from minialign.loading import build, read_checkpoint, resolve_device
from minialign.models.encoder import Encoder
from minialign.nn.linear import Linear
from minialign.products.choices import M3_RETURN_COLBERT_VECS, M3_RETURN_DENSE, M3_RETURN_SPARSE
from minialign.products.runner import LoadOptions, Loading, Runner, batch_lengths
from minialign.runtime.engine import Truncation
from minialign.sources import resolve
from minialign.text.tokenizer import Tokenizer
from minialign.text.validation import check_texts

OUTPUTS = ("dense_vecs", "lexical_weights", "colbert_vecs")  # BGEM3FlagModel.encode's keys, in its order


# The heads run on token states x (T, C), T the tokens of a whole batch: each row must come out the same whatever
# T is. A matrix product does that except where it runs as a matrix-vector one (another kernel, summing otherwise):
# a one-row product (so one row runs as two, the copy dropped), and a one-column one, the sparse head (so its
# weight is applied as a product and a sum along each row).

def by_rows(layer: nn.Linear, x: Tensor) -> Tensor:
    """layer(x) (T, out), row by row the same whatever T is."""
    return layer(x.repeat(2, 1))[:1] if x.size(0) == 1 else layer(x)


def one_column(layer: nn.Linear, x: Tensor) -> Tensor:
    """layer(x) (T,) for a Linear(C, 1), row by row the same whatever T is."""
    return (x * layer.weight[0]).sum(dim=-1) + layer.bias[0]


def linear(weights: dict[str, Tensor]) -> nn.Linear:
    """A Linear holding a head's {"weight", "bias"} (convert.read_m3_heads): minialign's (nn/linear.py), whose
    product gives a row the same bits whatever the row count (torch's F.linear, MKL's sgemm, does not)."""
    weight = weights["weight"]
    layer = Linear(weight.size(1), weight.size(0))
    layer.load_state_dict(weights, assign=True)
    return layer


class M3Encoder(Runner):
    truncation_unit, truncation_like = "text(s)", "FlagEmbedding"
    progress_label = "embedding"

    def __init__(self, encoder: Encoder, tokenizer: Tokenizer, *, sparse_linear: nn.Linear | None = None,
                 colbert_linear: nn.Linear | None = None, max_length: int | None = None,
                 heads_from: str | None = None, batch_size: int | None = None, max_tokens: int | None = None,
                 unpad: bool | None = None, workers: int = 1, compile: bool | str = False, threads: int | None = None):
        """sparse_linear: Linear(hidden, 1), each token's weight; colbert_linear: Linear(hidden, dim), each
        token's vector (None: that output is not offered). heads_from: where the heads were looked for, named
        by the error a call for a missing head raises. The other options: Runner._start."""
        for name, layer, out in (("sparse_linear", sparse_linear, 1), ("colbert_linear", colbert_linear, None)):
            if layer is not None and (layer.in_features != encoder.config.hidden_size
                                      or out is not None and layer.out_features != out):
                raise ValueError(f"{name} is Linear({layer.in_features}, {layer.out_features}); the model's states "
                                 f"are {encoder.config.hidden_size} wide")
        self.sparse_linear, self.colbert_linear = sparse_linear, colbert_linear
        self.heads_from = heads_from
        self._start(encoder, tokenizer, max_length=max_length, batch_size=batch_size, max_tokens=max_tokens,
                    unpad=unpad, compile=compile, workers=workers, threads=threads)
        self.unused_tokens = unused_token_ids(tokenizer)

    @classmethod
    def from_pretrained(cls, src: str | Path, *, max_length: int | None = None,
                        **keywords: Unpack[Loading]) -> M3Encoder:
        """An XLM-RoBERTa directory or hub id in transformers' layout, as BAAI/bge-m3 is (config.json,
        model.safetensors or pytorch_model.bin, tokenizer.json), with FlagEmbedding's sparse_linear.pt and
        colbert_linear.pt beside it (either may be absent: the module docstring). max_length: the window
        (default: the model's). The keywords every runner takes are products/runner.py's (Loading)."""
        load = LoadOptions.of(keywords, f"{cls.__name__}.from_pretrained")
        source = resolve(src, revision=load.revision, cache_dir=load.cache_dir)
        ckpt = read_checkpoint(source, task=load.adapter)
        encoder = build(Encoder, ckpt, **load.only("device", "dtype", "attn_backend"))
        heads = convert.read_m3_heads(source, encoder.config.hidden_size)
        device, dtype = resolve_device(load.device), next(encoder.parameters()).dtype
        sparse, colbert = (None if heads[name] is None else linear(heads[name]).to(device=device, dtype=dtype)
                           for name in ("sparse", "colbert"))
        tokenizer = load.open_tokenizer(source, ckpt.tokenizer)
        m3 = cls(encoder, tokenizer, sparse_linear=sparse, colbert_linear=colbert, max_length=max_length,
                 heads_from=str(source), **load.engine())
        m3.source = str(src)
        return m3

    @property
    def encoder(self) -> Encoder:
        """The model (the runner's `model`)."""
        return self.model

    @property
    def dimension(self) -> int:
        """Size of one dense vector."""
        return self.model.config.hidden_size

    @property
    def colbert_dimension(self) -> int | None:
        """Size of one colbert vector (None: no colbert head)."""
        return None if self.colbert_linear is None else self.colbert_linear.out_features

    def settings(self, **options) -> dict:
        return {**super().settings(), "max_length": self.max_length, **options}

    def encode(self, texts: Sequence[str] | str, *, batch_size: int | None = None, max_length: int | None = None,
               return_dense: bool = M3_RETURN_DENSE, return_sparse: bool = M3_RETURN_SPARSE,
               return_colbert_vecs: bool = M3_RETURN_COLBERT_VECS,
               normalize_embeddings: bool = True, show_progress_bar: bool = False, warn_truncation: bool | None = None,
               tally: Truncation | None = None) -> dict:
        """BGEM3FlagModel.encode's dict: "dense_vecs" ((N, hidden) float32), "lexical_weights" (one dict per
        text: token id as a string -> weight) and "colbert_vecs" (one (tokens - 1, dim) float32 tensor per text),
        each None unless asked for; one string gives one text's outputs (a vector, a dict, a tensor), as
        FlagEmbedding does. max_length: this call's window, at most the model's (default: it). An empty text
        gives what FlagEmbedding gives for it: the first token's vector, no lexical weights, one colbert vector
        (the closing </s>). Text cut by the window is reported as by every runner (warn_truncation, tally)."""
        options = dict(batch_size=batch_size, max_length=max_length, return_dense=return_dense,
                       return_sparse=return_sparse, return_colbert_vecs=return_colbert_vecs,
                       normalize_embeddings=normalize_embeddings, show_progress_bar=show_progress_bar,
                       warn_truncation=warn_truncation, tally=tally)
        if isinstance(texts, str):
            out = self.encode([texts], **options)
            return {key: None if value is None else value[0] for key, value in out.items()}
        texts = check_texts("texts", texts)
        if not (return_dense or return_sparse or return_colbert_vecs):  # the model's assert, as an error
            raise ValueError("choose one or more of return_dense, return_sparse, return_colbert_vecs")
        for wanted, head, name in ((return_sparse, self.sparse_linear, "sparse"),
                                   (return_colbert_vecs, self.colbert_linear, "colbert")):
            if wanted and head is None:
                raise ValueError(f"{self.heads_from or 'this model'}: no {convert.M3_HEADS[name]}, FlagEmbedding's "
                                 f"{name} head; return_{'sparse' if name == 'sparse' else 'colbert_vecs'} needs it "
                                 f"(dense vectors do not)")
        window = self.max_length if max_length is None else max_length
        if window > self.max_length:
            raise ValueError(f"max_length {max_length} is over the model's {self.max_length}-token window")
        entries: list[dict[str, Tensor]] = []
        if texts:
            constants = {"sparse": int(return_sparse), "colbert": int(return_colbert_vecs)}
            results = self.run(texts, progress=show_progress_bar, batch_size=batch_size, constants=constants,
                               max_length=max_length)
            self._count(results.truncated, warn_truncation, tally, window=window)
            entries = results.values
        out: dict = dict.fromkeys(OUTPUTS)
        if return_dense:
            dense = torch.stack([e["dense"] for e in entries]) if entries else torch.empty(0, self.dimension)
            out["dense_vecs"] = F.normalize(dense, dim=-1) if normalize_embeddings else dense
        if return_sparse:
            out["lexical_weights"] = [self._lexical_weights(e["ids"], e["weights"]) for e in entries]
        if return_colbert_vecs:
            # identical texts share one engine entry: each gets its own tensor
            out["colbert_vecs"] = [F.normalize(e["colbert"], dim=-1) if normalize_embeddings else e["colbert"].clone()
                                   for e in entries]
        return out

    def _lexical_weights(self, ids: Tensor, weights: Tensor) -> dict[str, float]:
        """One text's token weights as FlagEmbedding's _process_token_weights (M3Embedder.encode_single_device)
        makes them: the unused tokens (cls, eos, pad, unk) and weights of 0 left out, each id (as a string) with
        its largest weight, ids in the order they first appear with a positive weight."""
        result: dict[str, float] = {}
        for idx, w in zip(ids.tolist(), weights.tolist()):
            if idx not in self.unused_tokens and w > 0:
                key = str(idx)
                if w > result.get(key, 0):
                    result[key] = w
        return result

    def forward(self, batch: dict[str, Tensor]) -> list[dict[str, Tensor]]:
        """One padded batch -> one entry per text (a ragged forward, runtime/engine.py): "dense", its first token's
        final state; with the batch's `sparse` flag, "ids" and "weights", each real token's id and
        relu(sparse_linear(state)) (EncoderOnlyEmbedderM3Model._sparse_embedding, token weights); with its `colbert`
        flag, "colbert", colbert_linear(state) of every real token but the first (_colbert_embedding:
        colbert_linear(last_hidden_state[:, 1:]) times the mask, of which M3Embedder keeps tokens_num - 1 rows).
        The heads run on the real tokens of the batch packed into one matrix, as the encoder's own layers do. A batch
        for dense vectors alone runs the last layer for the first tokens only (Encoder final_tokens="first"): the
        same vectors up to float rounding (4e-9 measured) as a call that also asks for the other outputs."""
        batch = dict(batch)
        sparse, colbert = bool(batch.pop("sparse", 0)), bool(batch.pop("colbert", 0))
        hidden = self.model(**batch, unpad=self.unpad,
                            final_tokens="all" if sparse or colbert else "first").last_hidden_state  # (B, L|1, C)
        entries = [{"dense": state} for state in hidden[:, 0].contiguous()]  # (B, C): rows of its own storage
        if not (sparse or colbert):
            return entries
        mask = batch["attention_mask"][:, :hidden.size(1)].bool()  # (B, L), right-padded
        lengths = batch_lengths(batch)
        if sparse:
            weights = torch.relu(one_column(self.sparse_linear, hidden[mask]))  # (T,)
            for entry, ids, w in zip(entries, batch["input_ids"][mask].split(lengths), weights.split(lengths)):
                entry["ids"], entry["weights"] = ids, w
        if colbert:
            rest = mask.clone()
            rest[:, 0] = False  # the first token's vector is not used (M3Embedder: "we don't use the embedding of cls")
            vectors = by_rows(self.colbert_linear, hidden[rest])  # (T - B, dim)
            for entry, v in zip(entries, vectors.split([n - 1 for n in lengths])):
                entry["colbert"] = v
        return entries

    # -- scores, as M3Embedder's --

    @staticmethod
    def compute_lexical_matching_score(lexical_weights_1: dict | list[dict],
                                       lexical_weights_2: dict | list[dict]) -> float | Tensor:
        """The sum over the tokens two texts share of the product of their weights (M3Embedder
        .compute_lexical_matching_score): two dicts give a float, two lists of dicts a (len 1, len 2) float32
        tensor (FlagEmbedding: a numpy array); anything else is a ValueError, as there."""
        def single(lw1: dict, lw2: dict) -> float:
            return sum((weight * lw2[token] for token, weight in lw1.items() if token in lw2), 0.0)

        if isinstance(lexical_weights_1, dict) and isinstance(lexical_weights_2, dict):
            return single(lexical_weights_1, lexical_weights_2)
        if isinstance(lexical_weights_1, list) and isinstance(lexical_weights_2, list):
            return torch.tensor([[single(a, b) for b in lexical_weights_2] for a in lexical_weights_1],
                                dtype=torch.float32).reshape(len(lexical_weights_1), len(lexical_weights_2))
        raise ValueError("lexical weights must be two dicts or two lists of dicts (encode's lexical_weights)")

    @staticmethod
    def colbert_score(q_reps: Tensor, p_reps: Tensor) -> Tensor:
        """Late interaction of a query's and a passage's colbert vectors (M3Embedder.colbert_score): each query
        vector's largest dot product with a passage vector, summed and divided by the query's vector count; a
        0-d tensor. Takes tensors (or numpy arrays, as FlagEmbedding does), (n, dim) each."""
        q_reps, p_reps = torch.as_tensor(q_reps), torch.as_tensor(p_reps)
        if (q_reps.dim() != 2 or p_reps.dim() != 2 or q_reps.size(1) != p_reps.size(1) or not q_reps.size(0)
                or not p_reps.size(0)):
            raise ValueError(f"colbert_score takes (n, dim) query and (m, dim) passage vectors, n, m > 0, got "
                             f"{tuple(q_reps.shape)} and {tuple(p_reps.shape)}")
        token_scores = torch.einsum("in,jn->ij", q_reps, p_reps)
        return token_scores.max(-1).values.sum() / q_reps.size(0)

    def convert_id_to_token(self, lexical_weights: dict | list[dict]) -> dict | list[dict]:
        """Lexical weights keyed by each token's text instead of its id (M3Embedder.convert_id_to_token: the
        tokenizer's decode of the one id, special tokens kept); a list of one dict gives that dict, as there."""
        items = [lexical_weights] if isinstance(lexical_weights, dict) else list(lexical_weights)
        converted = [{self.tokenizer.decode([int(i)], skip_special_tokens=False): w for i, w in item.items()}
                     for item in items]
        return converted[0] if len(converted) == 1 else converted


def unused_token_ids(tokenizer: Tokenizer) -> frozenset[int]:
    """The ids whose weights lexical_weights leaves out: the cls, eos, pad and unk tokens, as FlagEmbedding
    collects them (M3Embedder.encode_single_device, _process_token_weights: the roles its tokenizer's
    special_tokens_map names, so a BERT tokenizer, which names no eos, keeps [SEP]'s weight). Tokenizer files that
    name no special token but the pad one get XLMRobertaTokenizer's defaults (BGE-M3's class): the tokens the
    post-processor puts around a text (<s>, </s>) and <unk> where the vocabulary has it."""
    named = tokenizer.special_tokens
    if set(named) == {"pad_token"}:
        named = {"cls_token": tokenizer.start_token, "eos_token": tokenizer.end_token, "unk_token": "<unk>", **named}
    tokens = [named.get(role) for role in ("cls_token", "eos_token", "pad_token", "unk_token")]
    return frozenset(i for t in tokens if t is not None and (i := tokenizer.backend.token_to_id(t)) is not None)
