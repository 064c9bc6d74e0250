"""MaxSim: late-interaction scores between texts' token vectors (ColBERT), without a model.

    maxsim(queries, documents)            # (Q, D) float32
    maxsim_pairwise(queries, documents)   # (N,) float32: query i against document i

As sentence-transformers 6.2 has it (sentence_transformers/util/similarity.py, maxsim and maxsim_pairwise):
score(q, d) = sum over q's vectors of the largest dot product with any of d's vectors; meanmaxsim divides by q's
number of vectors. A document without any vector scores EMPTY_DOCUMENT_SCORE (-1e9), below every real document,
as there. Each side is a list of (tokens, dim) tensors, one (tokens, dim) tensor (one text), or a padded
(N, tokens, dim) tensor whose all-zero rows are padding. MultiVectorEncoder.similarity (multivector.py) calls it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from minialign.nn.linear import row_products
from minialign.nn.reduce import token_sum

SIMILARITIES = ("maxsim", "meanmaxsim")  # a model's similarity_fn_name (meanmaxsim: length_normalize)
EMPTY_DOCUMENT_SCORE = -1e9  # util/similarity.py _EMPTY_DOCUMENT_SCORE: a document with no vector
CHUNK_ELEMENTS = 100_000_000  # util/similarity.py _MAXSIM_CHUNK_ELEMENT_BUDGET: one chunk's documents + scores
# maxsim_pairwise's pairs per product: G pairs' queries against their G documents in one packed product, of which the
# G diagonal blocks are kept (G times the arithmetic, a G-th of the calls). 1000 pairs of 32 x 180 vectors, dim 128,
# AMD EPYC: G = 1 131 ms, 2 82, 4 51, 8 51, 16 65 (each call's weight packing and dispatch outweigh the products)
PAIRS_PER_PRODUCT = 4


def _count(embeddings: Sequence[Tensor] | Tensor) -> int:
    """How many texts' vectors: a (tokens, dim) tensor is one text."""
    return 1 if isinstance(embeddings, Tensor) and embeddings.dim() == 2 else len(embeddings)


def _padded(embeddings: Sequence[Tensor] | Tensor) -> tuple[Tensor, Tensor]:
    """(N, T, dim) vectors and their (N, T) mask from a list of (tokens, dim) tensors, one (tokens, dim) tensor
    (one text), or a padded (N, T, dim) tensor whose all-zero rows are padding (util/similarity.py
    _pad_multi_vector_inputs, _zero_row_mask)."""
    if isinstance(embeddings, Tensor):
        if embeddings.dim() == 2:
            embeddings = [embeddings]
        elif embeddings.dim() == 3:
            x = embeddings if embeddings.is_floating_point() else embeddings.float()
            return x, x.any(dim=-1)
        else:
            raise ValueError(f"multi-vector embeddings must be (tokens, dim) or (N, tokens, dim), "
                             f"got {tuple(embeddings.shape)}")
    items = list(embeddings)
    if not all(isinstance(t, Tensor) and t.dim() == 2 for t in items):
        raise ValueError("multi-vector embeddings must be a list of (tokens, dim) tensors")
    items = [t if t.is_floating_point() else t.float() for t in items]
    lengths = torch.tensor([len(t) for t in items])
    x = torch.nn.utils.rnn.pad_sequence(items, batch_first=True)
    return x, torch.arange(x.size(1))[None, :] < lengths[:, None]


def maxsim(queries: Sequence[Tensor] | Tensor, documents: Sequence[Tensor] | Tensor, *, length_normalize: bool = False,
           chunk_elements: int | None = None) -> Tensor:
    """(Q, D) float32: for query q and document d, the sum over q's vectors of the largest dot product with
    any of d's (util/similarity.py maxsim, _maxsim_score_documents: padding never wins the max; the sum in
    float32); length_normalize divides by q's number of vectors (at least 1: meanmaxsim). A document with no
    vector scores EMPTY_DOCUMENT_SCORE. Documents are scored in chunks of about `chunk_elements` elements."""
    n_docs = _count(documents)
    if _count(queries) == 0 or n_docs == 0:  # nothing to score (padding refuses an empty list)
        return torch.zeros(_count(queries), n_docs)
    a, a_mask = _padded(queries)
    budget = chunk_elements or CHUNK_ELEMENTS
    docs = [documents] if isinstance(documents, Tensor) and documents.dim() == 2 else documents
    columns, start = [], 0
    while start < n_docs:  # a chunk of documents whose padded vectors and (Q, S, chunk, T) scores fit the budget
        end, width = start + 1, len(docs[start]) if not isinstance(docs, Tensor) else docs.size(1)
        while end < n_docs:
            grown = max(width, len(docs[end]) if not isinstance(docs, Tensor) else docs.size(1))
            if (end + 1 - start) * grown * (a.size(0) * a.size(1) + a.size(2)) > budget:
                break
            end, width = end + 1, grown
        b, b_mask = _padded(docs[start:end])
        columns.append(_maxsim_chunk(a, a_mask, b.to(a.device), b_mask.to(a.device)))
        start = end
    scores = torch.cat(columns, dim=1)
    if length_normalize:
        scores = scores / a_mask.sum(1).clamp(min=1).to(scores)[:, None]
    return scores


def _maxsim_chunk(a: Tensor, a_mask: Tensor, b: Tensor, b_mask: Tensor) -> Tensor:
    """(A, B) scores of padded queries (A, S, dim) against padded documents (B, T, dim)."""
    if b.size(1) == 0:
        return torch.full((a.size(0), b.size(0)), EMPTY_DOCUMENT_SCORE)
    A, S, H = a.shape
    B, T, _ = b.shape  # every element's bits independent of the other queries and documents (linear.row_products)
    scores = row_products(a.reshape(A * S, H), b.reshape(B * T, H)).view(A, S, B, T).permute(0, 2, 1, 3)
    scores.masked_fill_(~b_mask[None, :, None, :], torch.finfo(scores.dtype).min)
    # in query-token order: a query's score the same bits whatever the other queries' lengths (nn/reduce.py)
    scores = token_sum(scores.max(dim=-1).values.float() * a_mask[:, None, :], dim=-1)  # (A, B)
    return scores.masked_fill(~b_mask.any(dim=-1)[None, :], EMPTY_DOCUMENT_SCORE)


def _pair_blocks(a: Tensor, b: Tensor, group: int = PAIRS_PER_PRODUCT) -> Tensor:
    """(N, S, T): query i's vectors (a: (N, S, dim)) against document i's (b: (N, T, dim)), PAIRS_PER_PRODUCT pairs
    per product, each pair's block taken from its diagonal: every element the bits of the pair alone, whatever rows
    and columns share its product (linear.row_products), so a pair's score does not depend on the others."""
    N, S, H = a.shape
    T = b.size(1)
    blocks = []
    for start in range(0, N, group):
        g = min(group, N - start)
        full = row_products(a[start:start + g].reshape(g * S, H), b[start:start + g].reshape(g * T, H))
        own = torch.arange(g, device=a.device)
        blocks.append(full.view(g, S, g, T)[own, :, own, :])
    return torch.cat(blocks)


def maxsim_pairwise(queries: Sequence[Tensor] | Tensor, documents: Sequence[Tensor] | Tensor, *,
                    length_normalize: bool = False) -> Tensor:
    """(N,) float32: MaxSim of query i against document i (util/similarity.py maxsim_pairwise)."""
    if _count(queries) != _count(documents):
        raise ValueError(f"queries and documents must be as many to score as pairs, got {_count(queries)} and "
                         f"{_count(documents)}")
    if _count(queries) == 0:
        return torch.zeros(0)
    a, a_mask = _padded(queries)
    b, b_mask = _padded(documents)
    if b.size(1) == 0:
        return torch.full((len(a),), EMPTY_DOCUMENT_SCORE)
    b = b.to(a.device)
    scores = _pair_blocks(a, b)  # (N, S, T)
    scores.masked_fill_(~b_mask.to(a.device)[:, None, :], torch.finfo(scores.dtype).min)
    scores = token_sum(scores.max(dim=-1).values.float() * a_mask, dim=-1)
    scores = scores.masked_fill(~b_mask.to(a.device).any(dim=-1), EMPTY_DOCUMENT_SCORE)
    if length_normalize:
        scores = scores / a_mask.sum(1).clamp(min=1).to(scores)
    return scores
