"""Unified memory block: source base relevance, keyword overlap, dedup, budget (seed, fixed).

``score = base_relevance * 0.5 + keyword_overlap * 0.5`` where ``keyword_overlap`` is the
fraction of the query's words found in the fragment. Fixes over the seed: words are normalised
(case-folded, punctuation stripped, so "networking?" matches "networking"), tokens are counted
with the real tokenizer, and near-duplicate removal (word Jaccard > 0.8, the higher score kept)
uses exact prefix filtering instead of comparing all pairs.

Integration contract (stable): the pure helpers ``normalise_words``, ``keyword_overlap``,
``fragment_score``, ``dedup_order`` and ``render_line`` are what the assembler uses on typed
candidates; ``MemorySynthesizer`` keeps the seed's ``add_fragments``/``synthesize`` API.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from proxy.context.dedup import DUPLICATE_JACCARD, dedup_order, is_duplicate, jaccard
from proxy.context.tokens import O200K, get_encoding
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

__all__ = [
    "BASE_RELEVANCE",
    "DUPLICATE_JACCARD",
    "NO_WORDS",
    "STOPWORDS",
    "MemoryFragment",
    "MemorySynthesizer",
    "dedup_order",
    "dedup_words",
    "describe",
    "flatten",
    "fragment_score",
    "idf_weights",
    "is_duplicate",
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

BASE_RELEVANCE: dict[str, float] = {
    "learnings": 0.7,
    "playbook": 0.6,
    "conversation": 0.5,
    "summaries": 0.4,
}
DEFAULT_BASE_RELEVANCE = 0.5
BASE_WEIGHT = 0.5
OVERLAP_WEIGHT = 0.5


@dataclass(frozen=True, slots=True)
class MemoryFragment:
    """One memory from one source; ``relevance`` is filled by scoring (0..1)."""

    source: str
    content: str
    relevance: float = 0.0
    timestamp: str = ""  # informational, never used for ranking
    base_relevance: float = DEFAULT_BASE_RELEVANCE


def fragment_score(base_relevance: float, overlap: float) -> float:
    """The seed's ``base * 0.5 + overlap * 0.5``."""
    return base_relevance * BASE_WEIGHT + overlap * OVERLAP_WEIGHT


def flatten(content: str) -> str:
    """One line of text: newlines and runs of whitespace become single spaces."""
    return " ".join(content.split())


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
    ) -> None:
        self.max_tokens = max_tokens
        self.encoding = encoding
        self.dedup_threshold = dedup_threshold
        self.stopwords = stopwords
        self.stemmed = stemmed
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
        query_words = self.words(query)
        word_sets = [self.words(f.content) for f in self._fragments]
        scored = [
            replace(f, relevance=fragment_score(f.base_relevance, keyword_overlap(query_words, w)))
            for f, w in zip(self._fragments, word_sets, strict=True)
        ]
        order = sorted(range(len(scored)), key=lambda i: -scored[i].relevance)
        # Dedup compares contents with the stopwords kept: they are part of what makes two
        # sentences the same sentence.
        dedup_sets = [dedup_words(f.content) for f in scored]
        kept, _ = dedup_order(dedup_sets, order, self.dedup_threshold)
        return [scored[i] for i in kept]

    def select(self, query: str) -> list[MemoryFragment]:
        """The ranked fragments that fit ``max_tokens`` once rendered (skip and continue)."""
        enc = get_encoding(self.encoding)
        chosen: list[MemoryFragment] = []
        used = 0
        for fragment in self.ranked(query):
            # +1 for the newline joining it to the previous line.
            cost = len(enc.encode_ordinary(render_line(fragment.source, fragment.content)))
            cost += 1 if chosen else 0
            if used + cost <= self.max_tokens:
                chosen.append(fragment)
                used += cost
        while chosen and len(enc.encode_ordinary(render(chosen))) > self.max_tokens:
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
