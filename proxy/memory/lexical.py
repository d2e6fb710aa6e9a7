"""Lexical (BM25) sparse vectors for hybrid retrieval.

Memory questions hinge on names, dates and rare words that a small dense model blurs. Qdrant
scores sparse vectors by dot product and, with the IDF modifier, multiplies in each term's
inverse document frequency at query time; so a document carries BM25's saturated, length-
normalised term frequencies and a query carries 1.0 per distinct term. Tokenising, stop words,
stemming and hashing terms to indices come from Qdrant Edge's own ``Bm25`` (the same model Qdrant
uses server-side), so both stores index identical vectors.
"""

from __future__ import annotations

import functools

import qdrant_edge as qe

# Memories are a sentence or two, not the 256-token pages BM25's default assumes; a matching
# average keeps length normalisation from flattening every short memory to the same weight.
AVG_DOC_TOKENS = 24.0
BM25_K = 1.2
BM25_B = 0.75
LANGUAGE = "english"

SparsePair = tuple[list[int], list[float]]


@functools.cache
def bm25_model() -> qe.Bm25:
    """Return the process-wide BM25 encoder (stateless; building it loads stemmer tables)."""
    return qe.Bm25(qe.Bm25Config(k=BM25_K, b=BM25_B, avg_len=AVG_DOC_TOKENS, language=LANGUAGE))


def encode_document(text: str) -> SparsePair:
    """Return the sparse (indices, values) of a memory's content."""
    vector = bm25_model().embed_document(text)
    return list(vector.indices), list(vector.values)


def encode_query(text: str) -> SparsePair:
    """Return the sparse (indices, values) of a query: weight 1.0 per distinct term."""
    vector = bm25_model().embed_query(text)
    return list(vector.indices), list(vector.values)
