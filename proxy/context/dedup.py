"""Near-duplicate removal by word Jaccard similarity, exact and fast (prefix filtering).

``dedup_order`` walks items best first and keeps each unless its word set is more than
``threshold`` (0.8) similar to a kept one, so the higher-scored of two duplicates survives.
Instead of comparing all pairs it indexes a short prefix of each kept set (rarest words first);
a pair above the threshold must share a prefix word, so only those pairs are compared. The result
equals the all-pairs walk (tested) and is idempotent.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Sequence

from proxy.errors import ConfigError

DUPLICATE_JACCARD = 0.8


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
    """True when a kept set sharing a prefix word is more than ``threshold`` similar.

    ``jaccard`` and the size bound are inlined: this loop runs ~180 times a request, and the
    calls were half its cost.
    """
    size = len(words)
    low = threshold * size
    seen: set[int] = set()
    for word in prefix:
        for j in index.get(word, ()):
            if j in seen:
                continue
            seen.add(j)
            other = word_sets[j]
            n = len(other)
            # Jaccard <= min/max size: skip pairs whose sizes alone rule a duplicate out.
            if n <= low or size <= threshold * n:
                continue
            shared = len(words & other)  # both non-empty: the union is never 0
            if shared / (size + n - shared) > threshold:
                return True
    return False
