"""Near-duplicate removal by word Jaccard similarity, exact and fast (size bands, word bits).

``dedup_order`` walks items best first and keeps each unless its word set is more than
``threshold`` (0.8) similar to a kept one, so the higher-scored of two duplicates survives.
The result equals the all-pairs walk (tested) and is idempotent.

Two sets can only be more than t similar when their sizes are within a factor t (Jaccard is at
most the smaller size over the larger), so an item is compared only with the kept sets in its
size band: the kept sizes are held sorted and two bisections find the band. Within the band a
``Signature`` bounds the shared words without touching them: one of ``BITS`` bits per word (by
its hash) and ``lost``, how many of the set's words share a bit with another of its words. The
shared words of A and B set shared bits, and at most ``min(lost)`` of them collide, so
``shared <= popcount(bits_A & bits_B) + min(lost_A, lost_B)``; and Jaccard
``shared / (|A| + |B| - shared)`` grows with ``shared``. One bound for the whole band (the
largest popcount, the item's own ``lost``, the band's smallest size) rules out every kept set
in it at once, as it does for all but one or two items of a request; only then are the band's
sets checked one by one, bound first and the true Jaccard last. Float divisions round
monotonically, so a bound at or under the threshold never hides a duplicate the exact test
would find.

On 50 real-text candidates (LoCoMo turns, observations, summaries) the band holds ~6 kept sets
per item and the bound lets ~1 pair a request through to the exact test; the prefix-filter walk
this replaces sorted every set by the request's word rarity (0.45 ms a request,
docs/benchmarks.md). A signature costs one pass over a set's words; ``text_signature`` keeps
it per memory text (and not the set it came from), ``profiles.text_profile`` with the text's
match set for the assembler. With hundreds of items of like sizes the bands grow with the items (500
sets: ~1.2x the prefix filter's time, once signatures are kept);
the request path assembles 50 to 100.
"""

from __future__ import annotations

import functools
from bisect import bisect_right
from collections.abc import Iterable, Sequence

from proxy.context.words import TextMemo, split_dedup_words
from proxy.defaults import DUPLICATE_JACCARD as DUPLICATE_JACCARD  # re-exported
from proxy.defaults import TEXT_PROFILES_MEMOISED
from proxy.errors import ConfigError

BITS = 256  # a few bits per word of a long summary: collisions stay rare, an AND stays cheap
MASK = BITS - 1

Signature = tuple[frozenset[str], int, int, int]  # (words, size, word bits, lost)
NO_SIGNATURE: Signature = (frozenset(), 0, 0, 0)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """Word-set Jaccard similarity; two empty sets are identical (1.0)."""
    if not a and not b:
        return 1.0
    shared = len(a & b)
    return shared / (len(a) + len(b) - shared)


def word_signature(words: frozenset[str]) -> Signature:
    """``words``, their count, their bits (one per word, by hash) and the words whose bit
    another of them set first (``lost``)."""
    bits = 0
    for word in words:  # faster than set(map(...)) of bit positions: no slot-wrapper calls
        bits |= 1 << (hash(word) & MASK)
    return words, len(words), bits, len(words) - bits.bit_count()


# ``word_signature`` memoised (``dedup_words`` hands out one set per text, a set keeps its hash).
signature = functools.lru_cache(maxsize=TEXT_PROFILES_MEMOISED)(word_signature)


def split_signature(text: str) -> Signature:
    """The ``signature`` of ``dedup_words(text)``; ``text_signature`` memoises it: a memory is
    a candidate of many requests. Only that memo keeps it: for a text met for the first time,
    filling the set's and the signature's memos as well cost more than computing both
    (adr/0127)."""
    return word_signature(split_dedup_words(text))


text_signature = TextMemo(split_signature)


def dedup_order(
    word_sets: Sequence[frozenset[str]], order: Iterable[int], threshold: float = DUPLICATE_JACCARD
) -> tuple[list[int], list[int]]:
    """Walk ``order`` (best first) and keep each set unless Jaccard > ``threshold`` with a kept one.

    Returns (kept, dropped) indices: ``dedup_walk`` on the sets' signatures.
    """
    order = list(order)
    signatures = [NO_SIGNATURE] * len(word_sets)
    for i in order:
        signatures[i] = signature(word_sets[i])
    return dedup_walk(signatures, order, threshold)


def dedup_walk(
    signatures: Sequence[Signature], order: Iterable[int], threshold: float = DUPLICATE_JACCARD
) -> tuple[list[int], list[int]]:
    """``dedup_order`` on signatures (``signatures[i]`` for each ``i`` in ``order``).

    Invariants: an item is dropped exactly when a kept item before it in ``order`` is more than
    ``threshold`` similar (two empty sets are identical: only the first empty one is kept);
    kept and dropped partition ``order``, each in walk order.
    """
    if not 0.0 <= threshold < 1.0:
        raise ConfigError("dedup threshold must be in [0, 1)", param="dedup_threshold")
    # The kept non-empty sets in size order, and their sizes and bits side by side.
    band_sets: list[Signature] = []
    sizes: list[int] = []
    bits_of: list[int] = []
    kept: list[int] = []
    dropped: list[int] = []
    empty_kept = False
    for i in order:
        item = signatures[i]
        _, size, bits, lost = item
        if not size:
            (dropped if empty_kept else kept).append(i)
            empty_kept = True
            continue
        # Kept sizes n with n > t * size, and n <= size / t (a superset of size > t * n).
        low = bisect_right(sizes, threshold * size)
        high = bisect_right(sizes, size / threshold, low) if threshold > 0 else len(sizes)
        if low < high:
            # A plain loop: ``max(map(bit_count, map(bits.__and__, ...)))`` over a band of ~5
            # spent more in its method-wrapper calls than in the ANDs (the walk: 0.78x).
            most = 0
            for other in bits_of[low:high]:
                shared = (bits & other).bit_count()
                if shared > most:
                    most = shared
            most += lost
            if most / (size + sizes[low] - most) > threshold and duplicate_in(
                item, band_sets[low:high], threshold
            ):
                dropped.append(i)
                continue
        kept.append(i)
        at = bisect_right(sizes, size, low, high)  # t * size <= size <= size / t
        band_sets.insert(at, item)
        sizes.insert(at, size)
        bits_of.insert(at, bits)
    return kept, dropped


def duplicate_in(item: Signature, band: Sequence[Signature], threshold: float) -> bool:
    """True when a set of ``band`` (non-empty) is more than ``threshold`` similar to ``item``'s:
    each pair's size and bit bounds first, then the true Jaccard."""
    words, size, bits, lost = item
    for other, n, other_bits, other_lost in band:
        if n <= threshold * size or size <= threshold * n:
            continue
        most = (bits & other_bits).bit_count() + min(lost, other_lost)
        if most / (size + n - most) <= threshold:
            continue
        shared = len(words & other)  # both non-empty: the union is never 0
        if shared / (size + n - shared) > threshold:
            return True
    return False
