"""Table and property tests for exact dedup (size bands and word bits)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.context.dedup import (
    dedup_order,
    dedup_walk,
    jaccard,
    signature,
    text_signature,
)
from proxy.context.words import dedup_words, normalise_words
from proxy.errors import ConfigError


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("a b c d e", "a b c d e", 1.0),
        ("a b", "c d", 0.0),
        ("a b c d", "a b c d e", 0.8),
        ("", "", 1.0),
    ],
)
def test_jaccard(a: str, b: str, expected: float) -> None:
    assert jaccard(normalise_words(a), normalise_words(b)) == pytest.approx(expected)


@pytest.mark.parametrize("threshold", [-0.1, 1.0, 1.5])
def test_bad_threshold_is_rejected(threshold: float) -> None:
    with pytest.raises(ConfigError):
        dedup_order([], [], threshold)


vocab = st.sampled_from([f"w{n}" for n in range(12)])


word_sets = st.lists(st.frozensets(vocab, max_size=8), max_size=30)


def brute_force(sets: list[frozenset[str]], threshold: float) -> list[int]:
    kept: list[int] = []
    for i, words in enumerate(sets):
        if all(jaccard(words, sets[j]) <= threshold for j in kept):
            kept.append(i)
    return kept


@settings(max_examples=300)
@given(word_sets, st.sampled_from([0.0, 0.3, 0.5, 0.8, 0.9]))
def test_dedup_equals_all_pairs(sets: list[frozenset[str]], threshold: float) -> None:
    kept, dropped = dedup_order(sets, range(len(sets)), threshold)
    assert kept == brute_force(sets, threshold)
    assert sorted(kept + dropped) == list(range(len(sets)))


@given(word_sets)
def test_dedup_is_idempotent(sets: list[frozenset[str]]) -> None:
    kept, _ = dedup_order(sets, range(len(sets)))
    survivors = [sets[i] for i in kept]
    again, dropped = dedup_order(survivors, range(len(survivors)))
    assert again == list(range(len(survivors)))
    assert dropped == []


# Long sets over a wide vocabulary: 256 bits hold them with many collisions (``lost`` > 0), and
# near-duplicates (one set edited by a few words) sit next to unrelated sets of every size.
wide = st.sampled_from([f"word{n}" for n in range(600)])


@st.composite
def long_sets(draw: st.DrawFn) -> list[frozenset[str]]:
    sets: list[frozenset[str]] = []
    for _ in range(draw(st.integers(1, 12))):
        if any(sets) and draw(st.booleans()):
            base = set(draw(st.sampled_from([s for s in sets if s])))
            drop = draw(st.lists(st.sampled_from(sorted(base)), max_size=max(1, len(base) // 8)))
            sets.append(frozenset((base - set(drop)) | set(draw(st.lists(wide, max_size=10)))))
        else:
            sets.append(frozenset(draw(st.lists(wide, min_size=0, max_size=260))))
    return draw(st.permutations(sets))


@settings(max_examples=200)
@given(long_sets(), st.sampled_from([0.0, 0.5, 0.8, 0.9]))
def test_dedup_equals_all_pairs_on_long_sets_whose_bits_collide(
    sets: list[frozenset[str]], threshold: float
) -> None:
    kept, dropped = dedup_order(sets, range(len(sets)), threshold)
    assert kept == brute_force(sets, threshold)
    assert sorted(kept + dropped) == list(range(len(sets)))


@given(st.frozensets(wide, max_size=300), st.frozensets(wide, max_size=300))
def test_signature_bounds_the_shared_words(a: frozenset[str], b: frozenset[str]) -> None:
    words_a, size_a, bits_a, lost_a = signature(a)
    words_b, size_b, bits_b, lost_b = signature(b)
    assert (words_a, size_a, words_b, size_b) == (a, len(a), b, len(b))
    assert bits_a.bit_count() + lost_a == len(a)
    assert len(a & b) <= (bits_a & bits_b).bit_count() + min(lost_a, lost_b)


def test_dedup_walk_follows_the_order_given() -> None:
    sets = [normalise_words(t) for t in ("a b c d e", "x y", "a b c d e f", "x y")]
    # Best first: the later of two duplicates (5/6 and 2/2 alike) goes, whatever its index.
    assert dedup_order(sets, [2, 0, 1, 3]) == ([2, 1], [0, 3])
    assert dedup_order(sets, [3, 1, 0, 2]) == ([3, 0], [1, 2])
    assert dedup_order([frozenset(), frozenset(), sets[1]], [1, 0, 2]) == ([1, 2], [0])


def test_text_signatures_are_memoised() -> None:
    text = "Melanie: I ran a charity race for mental health last Saturday."
    assert text_signature(text) is text_signature(text)
    assert text_signature(text) == signature(dedup_words(text))


def test_a_new_texts_signature_fills_only_its_own_memo() -> None:
    # adr/0127: the set's and the signature's memos cost more to fill than both cost to build.
    text = "Caroline: the pottery class on Tuesday made a bowl I am proud of, really."
    before = (dedup_words.cache_info().currsize, signature.cache_info().currsize)
    made = text_signature(text)
    assert (dedup_words.cache_info().currsize, signature.cache_info().currsize) == before
    assert made == signature(dedup_words(text))


@settings(max_examples=300)
@given(word_sets, st.sampled_from([0.0, 0.3, 0.8, 0.9]), st.randoms(use_true_random=False))
def test_the_walk_equals_all_pairs_in_any_order(
    sets: list[frozenset[str]], threshold: float, rng: random.Random
) -> None:
    # The assembler walks in final-score order, not index order; left-out items (the bundle's
    # drops) carry no signature of their own.
    order = list(range(len(sets)))
    rng.shuffle(order)
    walked = order[: len(order) * 3 // 4]
    signatures = [signature(words) for words in sets]
    kept, dropped = dedup_walk(signatures, walked, threshold)
    assert kept == [walked[k] for k in brute_force([sets[i] for i in walked], threshold)]
    assert sorted(kept + dropped) == sorted(walked)
