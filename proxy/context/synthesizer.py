"""Seed compatibility: the memory synthesizer (one ranked, deduplicated block), over the engine.

``MemorySynthesizer`` keeps the seed's ``add_fragments``/``synthesize`` API: fragments from
the memory sources, ``score = base_relevance * 0.5 + keyword_overlap * 0.5`` where
``keyword_overlap`` is the fraction of the query's words found in the fragment, near-duplicates
(word Jaccard > 0.8) removed keeping the higher score, then ``[source] content`` lines in score
order while they fit ``max_tokens`` (skip and continue). Fixes over the seed: words are
normalised (case-folded, punctuation stripped, so "networking?" matches "networking"), tokens
are counted with the real tokenizer, and dedup is exact (size bands and word bits, ``dedup.py``)
instead of all pairs.

Every step is the engine's: ``ranking.fragment_score``, ``words.overlap_matcher`` (the
assembler's matcher), ``dedup.dedup_order`` on ``words.dedup_words`` and
``knapsack.select_greedy`` without the 3-skip stop. With ``stemmed=True`` (an extension; the
seed has no stemming) a query word is found as the assembler finds it (``words.query_matcher``).
The engine's word helpers are re-exported here, as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from proxy.context.dedup import DUPLICATE_JACCARD, dedup_order, jaccard
from proxy.context.knapsack import select_greedy
from proxy.context.ranking import (
    BASE_RELEVANCE,
    BASE_WEIGHT,
    DEFAULT_BASE_RELEVANCE,
    OVERLAP_WEIGHT,
    fragment_score,
)
from proxy.context.render import flatten
from proxy.context.tokens import O200K, Tokenizer
from proxy.context.words import (
    NO_WORDS,
    STOPWORDS,
    dedup_words,
    idf_weights,
    keyword_overlap,
    normalise_words,
    overlap_matcher,
    query_matcher,
    stem,
    weighted_overlap,
)
from proxy.defaults import MEMORY_MAX_TOKENS as DEFAULT_MAX_TOKENS
from proxy.tokenizer import tiktoken_tokenizer

__all__ = [
    "BASE_RELEVANCE",
    "BASE_WEIGHT",
    "DEFAULT_BASE_RELEVANCE",
    "DUPLICATE_JACCARD",
    "NO_WORDS",
    "OVERLAP_WEIGHT",
    "STOPWORDS",
    "MemoryFragment",
    "MemorySynthesizer",
    "dedup_order",
    "dedup_words",
    "describe",
    "flatten",
    "fragment_score",
    "idf_weights",
    "jaccard",
    "keyword_overlap",
    "normalise_words",
    "overlap_matcher",
    "query_matcher",
    "render",
    "render_line",
    "stem",
    "weighted_overlap",
]


@dataclass(frozen=True, slots=True)
class MemoryFragment:
    """One memory from one source; ``relevance`` is filled by scoring (0..1)."""

    source: str
    content: str
    relevance: float = 0.0
    timestamp: str = ""  # informational, never used for ranking
    base_relevance: float = DEFAULT_BASE_RELEVANCE


def render_line(source: str, content: str) -> str:
    """``[source] content`` on one line."""
    return f"[{source}] {flatten(content)}"


class MemorySynthesizer:
    """Collects fragments from the memory sources and renders one ranked, deduplicated block."""

    def __init__(
        self,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        *,
        encoding: str = O200K,
        dedup_threshold: float = DUPLICATE_JACCARD,
        stopwords: frozenset[str] = NO_WORDS,
        stemmed: bool = False,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        self.max_tokens = max_tokens
        self.encoding = encoding
        self.dedup_threshold = dedup_threshold
        self.stopwords = stopwords
        self.stemmed = stemmed
        self.tokenizer = tokenizer if tokenizer is not None else tiktoken_tokenizer()
        self._fragments: list[MemoryFragment] = []

    def add_fragments(
        self,
        source: str,
        contents: Iterable[str],
        base_relevance: float | None = None,
        timestamp: str = "",
    ) -> None:
        """Add fragments of ``source``; the base relevance defaults to the source's."""
        base = (
            base_relevance
            if base_relevance is not None
            else BASE_RELEVANCE.get(source, DEFAULT_BASE_RELEVANCE)
        )
        self._fragments.extend(MemoryFragment(source, c, 0.0, timestamp, base) for c in contents)

    def words(self, text: str) -> frozenset[str]:
        """Normalised words under this synthesizer's settings."""
        return normalise_words(text, stopwords=self.stopwords, stemmed=self.stemmed)

    def ranked(self, query: str) -> list[MemoryFragment]:
        """Scored fragments, duplicates removed, highest relevance first (stable)."""
        overlap = overlap_matcher(self.words(query), stemmed=self.stemmed)
        scored = [
            replace(f, relevance=fragment_score(f.base_relevance, overlap(f.content)))
            for f in self._fragments
        ]
        order = sorted(range(len(scored)), key=lambda i: -scored[i].relevance)
        # Dedup compares contents with the stopwords kept: they are part of what makes two
        # sentences the same sentence.
        dedup_sets = [dedup_words(f.content) for f in scored]
        kept, _ = dedup_order(dedup_sets, order, self.dedup_threshold)
        return [scored[i] for i in kept]

    def select(self, query: str) -> list[MemoryFragment]:
        """The ranked fragments that fit ``max_tokens`` once rendered (skip and continue)."""
        count = self.tokenizer.counter(self.encoding)
        ranked = self.ranked(query)
        # n lines cost their tokens and n - 1 joining newlines: each line + 1 within the
        # budget + 1. Estimated by parts, so the rendered block is checked below.
        costs = [count(render_line(f.source, f.content)) + 1 for f in ranked]
        values = [f.relevance for f in ranked]
        fits = select_greedy(values, costs, self.max_tokens + 1, max_skips=len(ranked) + 1)
        chosen = [ranked[i] for i in fits.indices]
        while chosen and count(render(chosen)) > self.max_tokens:
            chosen.pop()
        return chosen

    def synthesize(self, query: str) -> str:
        """The block: one ``[source] content`` line per kept fragment, within ``max_tokens``."""
        return render(self.select(query))


def render(fragments: Sequence[MemoryFragment]) -> str:
    """Join fragments as ``[source] content`` lines."""
    return "\n".join(render_line(f.source, f.content) for f in fragments)


def describe(fragment: MemoryFragment) -> dict[str, Any]:
    """A JSON-friendly view of a fragment (for explain output and logs)."""
    return {
        "source": fragment.source,
        "content": fragment.content,
        "relevance": round(fragment.relevance, 6),
        "timestamp": fragment.timestamp,
    }
