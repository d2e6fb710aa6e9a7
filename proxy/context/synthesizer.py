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

import itertools
import math
import re
import string
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from proxy.context.tokens import O200K, get_encoding
from proxy.errors import ConfigError

BASE_RELEVANCE: dict[str, float] = {
    "learnings": 0.7,
    "playbook": 0.6,
    "conversation": 0.5,
    "summaries": 0.4,
}
DEFAULT_BASE_RELEVANCE = 0.5
BASE_WEIGHT = 0.5
OVERLAP_WEIGHT = 0.5
DUPLICATE_JACCARD = 0.8
DEFAULT_MAX_TOKENS = 4_500
WORD = re.compile(r"[^\W_]+")
# A stem of 3+ letters, then one suffix, at the end of a space-separated word.
STEM = re.compile(r"\b([^\W_]{3,}?)(?:ing|ed|es|(?<!s)s)\b")
# Function words carry no topic; dropping them keeps "how do I ..." from matching everything.
STOPWORDS = frozenset(
    [
        "a",
        "about",
        "after",
        "all",
        "also",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "been",
        "before",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "hers",
        "him",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "just",
        "me",
        "my",
        "no",
        "not",
        "of",
        "on",
        "or",
        "our",
        "out",
        "she",
        "so",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "up",
        "us",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
    ]
)
NO_WORDS: frozenset[str] = frozenset()
PUNCTUATION_TO_SPACE = str.maketrans(
    dict.fromkeys(
        string.punctuation + "\u2018\u2019\u201c\u201d\u2026\u2013\u2014\u00ab\u00bb\u00bf\u00a1",
        " ",
    )
)


@dataclass(frozen=True, slots=True)
class MemoryFragment:
    """One memory from one source; ``relevance`` is filled by scoring (0..1)."""

    source: str
    content: str
    relevance: float = 0.0
    timestamp: str = ""  # informational, never used for ranking
    base_relevance: float = DEFAULT_BASE_RELEVANCE


def stem(word: str) -> str:
    """Strip one common English suffix (-ing, -ed, -es, -s but not -ss), keeping 3+ letters."""
    return STEM.sub(r"\1", word)


def normalise_words(
    text: str, *, stopwords: frozenset[str] = NO_WORDS, stemmed: bool = False
) -> frozenset[str]:
    """Case-folded words without punctuation, optionally without stopwords and stemmed."""
    words = frozenset(WORD.findall(text.casefold()))
    if stopwords:
        words = words - stopwords
    if stemmed:
        # One regex pass over the unique words is several times faster than a Python loop.
        return frozenset(STEM.sub(r"\1", " ".join(words)).split())
    return words


def dedup_words(text: str) -> frozenset[str]:
    """Case-folded words split at whitespace and punctuation: the sets dedup compares.

    ``str.translate`` plus ``split`` run in C, several times faster than the word regex; they
    split at ASCII and common typographic punctuation only.
    """
    return frozenset(text.casefold().translate(PUNCTUATION_TO_SPACE).split())


def keyword_overlap(query_words: frozenset[str], content_words: frozenset[str]) -> float:
    """Fraction of the query's words present in the content; 0 for an empty query."""
    if not query_words:
        return 0.0
    return len(query_words & content_words) / len(query_words)


def query_matcher(query_words: frozenset[str], *, stemmed: bool) -> Callable[[str], set[str]]:
    """Return a function giving the query words found in a text (one compiled regex scan).

    ``len(found) / len(query_words)`` equals ``keyword_overlap(query_words,
    normalise_words(text, ...))``; with ``stemmed`` a query stem also matches the stem plus one
    of the suffixes ``stem`` strips (equal to comparing stemmed word sets except for rare words
    whose shortest stem differs).
    """
    if not query_words:
        return lambda text: set()
    alternatives = "|".join(sorted(map(re.escape, query_words), key=len, reverse=True))
    suffix = "(?:ing|ed|es|s)?" if stemmed else ""
    pattern = re.compile(rf"(?<![^\W_])({alternatives}){suffix}(?![^\W_])")

    def found(text: str) -> set[str]:
        return set(pattern.findall(text.casefold()))

    return found


def overlap_matcher(query_words: frozenset[str], *, stemmed: bool) -> Callable[[str], float]:
    """A fast ``keyword_overlap(query_words, normalise_words(text, ...))`` for many texts."""
    found = query_matcher(query_words, stemmed=stemmed)
    size = max(1, len(query_words))
    return lambda text: len(found(text)) / size


def idf_weights(matches: Sequence[set[str]]) -> dict[str, float]:
    """BM25-style IDF of each query word over the candidates: ``ln(1 + (N - df + .5)/(df + .5))``.

    Only words some candidate contains get a weight, so a query word no memory has does not
    shrink every overlap alike.
    """
    total = len(matches)
    df = Counter(itertools.chain.from_iterable(matches))
    return {word: math.log(1.0 + (total - n + 0.5) / (n + 0.5)) for word, n in df.items()}


def weighted_overlap(found: set[str], weights: dict[str, float]) -> float:
    """Share of the query's IDF mass (over words some candidate has) found in one text."""
    mass = sum(weights.values())
    return sum(weights[word] for word in found) / mass if mass > 0 else 0.0


def fragment_score(base_relevance: float, overlap: float) -> float:
    """The seed's ``base * 0.5 + overlap * 0.5``."""
    return base_relevance * BASE_WEIGHT + overlap * OVERLAP_WEIGHT


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """Word-set Jaccard similarity; two empty sets are identical (1.0)."""
    if not a and not b:
        return 1.0
    shared = len(a & b)
    return shared / (len(a) + len(b) - shared)


def dedup_order(
    word_sets: Sequence[frozenset[str]], order: Iterable[int], threshold: float = DUPLICATE_JACCARD
) -> tuple[list[int], list[int]]:
    """Walk ``order`` (best first) and keep each set unless Jaccard > ``threshold`` with a kept one.

    Returns (kept, dropped) indices. Exact: prefix filtering. Each set is ordered by one global
    order (rarest word first, then alphabetical, so prefixes are selective); a pair with
    Jaccard >= t must share a word within both prefixes of length ``n - ceil(t * n) + 1``, so
    only those pairs are compared, and the true Jaccard decides.
    """
    if not 0.0 <= threshold < 1.0:
        raise ConfigError("dedup threshold must be in [0, 1)", param="dedup_threshold")
    order = list(order)
    frequency = Counter(itertools.chain.from_iterable(word_sets[i] for i in order))
    rarity = frequency.__getitem__
    index: dict[str, list[int]] = {}
    kept: list[int] = []
    dropped: list[int] = []
    empty_kept = False
    for i in order:
        words = word_sets[i]
        if not words:
            (dropped if empty_kept else kept).append(i)
            empty_kept = True
            continue
        size = len(words)
        # Two C-level sorts give the total order (rarest first, then alphabetical).
        ranked = sorted(sorted(words), key=rarity)
        # The small epsilon only lengthens the prefix, which can never lose a pair.
        prefix = ranked[: size - math.ceil(threshold * size - 1e-9) + 1]
        if is_duplicate(words, prefix, index, word_sets, threshold):
            dropped.append(i)
            continue
        kept.append(i)
        for word in prefix:
            index.setdefault(word, []).append(i)
    return kept, dropped


def is_duplicate(
    words: frozenset[str],
    prefix: Sequence[str],
    index: dict[str, list[int]],
    word_sets: Sequence[frozenset[str]],
    threshold: float,
) -> bool:
    """True when a kept set sharing a prefix word is more than ``threshold`` similar."""
    size = len(words)
    seen: set[int] = set()
    for word in prefix:
        for j in index.get(word, ()):
            if j in seen:
                continue
            seen.add(j)
            other = word_sets[j]
            # Jaccard <= min/max size: skip pairs whose sizes alone rule a duplicate out.
            if min(size, len(other)) <= threshold * max(size, len(other)):
                continue
            if jaccard(words, other) > threshold:
                return True
    return False


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
