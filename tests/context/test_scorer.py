"""Table and property tests for the composite scorer (seed milestone 3.5.4)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.context import ranking, scorer
from proxy.context.records import Candidate, MemoryRecord
from proxy.context.scorer import MemoryScorer

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


def mem(**fields: Any) -> dict[str, Any]:
    """A dict memory as the seed's tests build them."""
    return {"content": "x", **fields}


def test_scorer_weights_sum_to_one() -> None:
    total = (
        scorer.WEIGHT_RELEVANCE
        + scorer.WEIGHT_RECENCY
        + scorer.WEIGHT_USEFULNESS
        + scorer.WEIGHT_CONFIDENCE
        + scorer.WEIGHT_FREQUENCY
    )
    assert total == pytest.approx(1.0, abs=1e-12)
    assert (scorer.WEIGHT_RELEVANCE, scorer.WEIGHT_RECENCY, scorer.WEIGHT_USEFULNESS) == (
        0.40,
        0.25,
        0.20,
    )
    assert (scorer.WEIGHT_CONFIDENCE, scorer.WEIGHT_FREQUENCY) == (0.10, 0.05)


def test_relevance_dominates_is_false_as_documented_in_adr_0040() -> None:
    relevant = mem(
        similarity=1.0,
        created_at=(NOW - timedelta(days=100_000)).isoformat(),
        usefulness_score=0.0,
        confidence=0.0,
        retrieval_count=0,
    )
    popular = mem(
        similarity=0.0,
        created_at=NOW.isoformat(),
        usefulness_score=1.0,
        confidence=1.0,
        retrieval_count=50,
    )
    first, second = MemoryScorer().score([relevant, popular], now=NOW)
    assert first.memory is popular
    assert first.composite_score == pytest.approx(0.60)
    assert second.composite_score == pytest.approx(0.40)


@pytest.mark.parametrize(
    ("age_days", "expected"),
    [(0, 1.0), (14, math.exp(-0.7)), (28, math.exp(-1.4)), (365, math.exp(-18.25))],
)
def test_recency_decay_14_day_half_life(age_days: int, expected: float) -> None:
    created = (NOW - timedelta(days=age_days)).isoformat()
    [scored] = MemoryScorer().score([mem(created_at=created)], now=NOW)
    assert scored.recency_score == pytest.approx(expected, abs=1e-6)
    if age_days == 14:
        assert scored.recency_score == pytest.approx(0.5, abs=0.01)


@pytest.mark.parametrize(("count", "expected"), [(0, 0.0), (25, 0.5), (50, 1.0), (100, 1.0)])
def test_frequency_caps_at_50(count: int, expected: float) -> None:
    [scored] = MemoryScorer().score([mem(retrieval_count=count)], now=NOW)
    assert scored.frequency_score == expected


@pytest.mark.parametrize("created_at", [None, "", "not a date", 12345])
def test_unknown_memory_age_neutral(created_at: Any) -> None:
    [scored] = MemoryScorer().score([mem(created_at=created_at)], now=NOW)
    assert scored.recency_score == 0.5


def test_scores_sorted_descending() -> None:
    memories = [mem(similarity=s) for s in (0.1, 0.9, 0.5, 0.7, 0.3)]
    scored = MemoryScorer().score(memories, now=NOW)
    assert [s.relevance_score for s in scored] == [0.9, 0.7, 0.5, 0.3, 0.1]
    composites = [s.composite_score for s in scored]
    assert composites == sorted(composites, reverse=True)


@pytest.mark.parametrize(
    ("created_at", "expected_age_days"),
    [
        # An offset is converted, not overwritten: 12:00+02:00 is 10:00 UTC, 2 hours before NOW.
        ("2026-01-15T12:00:00+02:00", 2 / 24),
        ("2026-01-15T10:00:00", 2 / 24),  # naive means UTC
        ("2026-01-15T10:00:00Z", 2 / 24),
        (datetime(2026, 1, 15, 5, 0, tzinfo=timezone(timedelta(hours=-7))), 0.0),
    ],
)
def test_timezones_are_converted(created_at: Any, expected_age_days: float) -> None:
    assert scorer.recency(created_at, NOW) == pytest.approx(math.exp(-0.05 * expected_age_days))


def test_future_created_at_scores_one() -> None:
    assert scorer.recency((NOW + timedelta(days=30)).isoformat(), NOW) == 1.0


@pytest.mark.parametrize(
    ("field", "value", "attribute", "expected"),
    [
        ("similarity", None, "relevance_score", 0.0),
        ("similarity", float("nan"), "relevance_score", 0.0),
        ("similarity", 1.7, "relevance_score", 1.0),
        ("similarity", -0.3, "relevance_score", 0.0),
        ("similarity", "0.25", "relevance_score", 0.25),
        ("usefulness_score", None, "usefulness_score", 0.5),
        ("usefulness_score", 2.0, "usefulness_score", 1.0),
        ("usefulness", 0.9, "usefulness_score", 0.9),
        ("confidence", None, "confidence_score", 0.8),
        ("confidence", float("nan"), "confidence_score", 0.8),
        ("confidence", -1, "confidence_score", 0.0),
        ("retrieval_count", None, "frequency_score", 0.0),
        ("retrieval_count", -5, "frequency_score", 0.0),
        ("retrieval_count", float("nan"), "frequency_score", 0.0),
        ("retrieval_count", "many", "frequency_score", 0.0),
    ],
)
def test_fields_are_clamped(field: str, value: Any, attribute: str, expected: float) -> None:
    [scored] = MemoryScorer().score([mem(**{field: value})], now=NOW)
    assert getattr(scored, attribute) == expected
    assert 0.0 <= scored.composite_score <= 1.0


def test_typed_candidates_match_dict_path() -> None:
    created = NOW - timedelta(days=3)
    record = MemoryRecord(
        id="m1",
        tenant="t",
        user="u",
        source="learnings",
        content="likes tea",
        created_at=created,
        confidence=0.6,
        usefulness=0.7,
        retrieval_count=10,
        tokens={"o200k_base": 3},
    )
    [typed] = MemoryScorer().score_candidates(
        [Candidate(record, 0.42)], now=NOW, encoding="o200k_base"
    )
    [plain] = MemoryScorer().score(
        [
            mem(
                similarity=0.42,
                created_at=created.isoformat(),
                usefulness_score=0.7,
                confidence=0.6,
                retrieval_count=10,
            )
        ],
        now=NOW,
    )
    assert typed.composite_score == plain.composite_score
    assert typed.tokens == 3


unit_floats = st.floats(min_value=0.0, max_value=1.0)


@given(
    st.lists(unit_floats, min_size=5, max_size=5),
    st.integers(min_value=0, max_value=4),
    unit_floats,
)
def test_score_is_monotone_in_each_component(parts: list[float], index: int, bump: float) -> None:
    higher = list(parts)
    higher[index] = max(parts[index], bump)
    assert scorer.composite(*higher) >= scorer.composite(*parts)


@given(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-100, max_value=10_000),
    st.integers(min_value=-400, max_value=400),
)
def test_components_stay_in_unit_interval(similarity: float, count: int, age: int) -> None:
    memory = mem(
        similarity=similarity,
        retrieval_count=count,
        created_at=(NOW - timedelta(days=age)).isoformat(),
    )
    [scored] = MemoryScorer().score([memory], now=NOW)
    for value in (
        scored.relevance_score,
        scored.recency_score,
        scored.frequency_score,
        scored.composite_score,
    ):
        assert 0.0 <= value <= 1.0


@given(st.integers(min_value=0, max_value=2000), st.integers(min_value=0, max_value=2000))
def test_older_never_scores_higher(age_a: int, age_b: int) -> None:
    older, newer = max(age_a, age_b), min(age_a, age_b)
    assert scorer.recency(NOW - timedelta(days=older), NOW) <= scorer.recency(
        NOW - timedelta(days=newer), NOW
    )


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        (0, 0.0),
        (1, 0.02),
        (25, 0.5),
        (49, 0.98),
        (50, 1.0),
        (51, 1.0),
        (10**6, 1.0),
        (2**60, 1.0),
        (-1, 0.0),
        (-(10**6), 0.0),
        (None, 0.0),
        (float("nan"), 0.0),
        (3.5, 0.07),
        ("7", 0.14),
        ("x", 0.0),
    ],
)
def test_loose_counts_convert_to_the_engine_frequency(count: Any, expected: float) -> None:
    assert scorer.frequency(count) == expected
    if isinstance(count, int | float):  # what a typed record can hold: the engine's own rule
        assert ranking.frequency(count) == scorer.frequency(count)


@given(st.integers(min_value=-(10**20), max_value=10**20))
def test_typed_frequency_equals_the_seed_rule_for_ints(count: int) -> None:
    assert ranking.frequency(count) == scorer.frequency(count)
