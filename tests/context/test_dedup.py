"""Table and property tests for prefix-filter dedup."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.context.dedup import dedup_order, jaccard
from proxy.context.words import normalise_words
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
def test_prefix_filter_dedup_equals_all_pairs(sets: list[frozenset[str]], threshold: float) -> None:
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
