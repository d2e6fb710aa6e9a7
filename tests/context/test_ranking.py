"""Property tests for the engine's typed scoring: the seed's formulas, and the seed's loose
rules give the same figures on typed inputs."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from proxy.context import ranking, scorer
from proxy.context.records import Candidate, MemoryRecord

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


@given(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, 0.5, 0.8]))
def test_unit_clamps_and_defaults_nan(value: float, default: float) -> None:
    expected = default if math.isnan(value) else min(1.0, max(0.0, value))
    assert ranking.unit(value, default) == expected == scorer.unit(value, default)


@given(st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(10**6), 10**6))
def test_frequency_is_the_capped_share_of_50(count: float) -> None:
    expected = 0.0 if math.isnan(count) else min(1.0, max(0.0, count / 50))
    assert ranking.frequency(count) == expected == scorer.frequency(count)


@given(
    st.floats(min_value=-400, max_value=5_000, allow_nan=False),
    st.integers(min_value=-12, max_value=12),
)
def test_recency_decays_from_any_offset(days: float, hours: int) -> None:
    created = (NOW - timedelta(days=days)).astimezone(timezone(timedelta(hours=hours)))
    age = (NOW - created).total_seconds() / 86_400
    expected = math.exp(-0.05 * max(0.0, age))
    assert ranking.recency(created, NOW) == expected
    assert scorer.recency(created.isoformat(), NOW) == expected


TIES = [k / 2_000_000 for k in (15_625, 46_875, 78_125, 1_984_375)]  # exact halves at 6 digits


@given(
    st.floats(allow_nan=True, allow_infinity=True)
    | st.floats(min_value=-2.0, max_value=2.0)
    | st.sampled_from([*TIES, *(-t for t in TIES), 0.0, -0.0, 1e-7, 5e-7, 999.9999995])
)
def test_rounded_is_round_to_six_digits(value: float) -> None:
    expected = round(value, 6)
    got = ranking.rounded(value)
    assert repr(got) == repr(expected)  # the same float, sign of zero and NaN included


@given(
    st.floats(min_value=-0.5, max_value=1.5) | st.just(math.nan),
    st.floats(min_value=-400, max_value=5_000, allow_nan=False),
    st.floats(allow_nan=True, allow_infinity=False),
    st.floats(allow_nan=True, allow_infinity=False),
    st.integers(min_value=-5, max_value=200),
)
def test_components_are_the_scored_figures(
    similarity: float, days: float, usefulness: float, confidence: float, count: int
) -> None:
    record = MemoryRecord(
        "m",
        "t",
        "u",
        "learnings",
        "text",
        NOW - timedelta(days=days),
        confidence=confidence,
        usefulness=usefulness,
        retrieval_count=count,
    )
    candidate = Candidate(record, similarity)
    parts = ranking.components(candidate, NOW)
    scored = ranking.score_candidate(candidate, NOW)
    assert ranking.composite(*parts) == scored.composite_score
    assert parts == (
        scored.relevance_score,
        scored.recency_score,
        scored.usefulness_score,
        scored.confidence_score,
        scored.frequency_score,
    )


@given(
    st.lists(
        st.tuples(
            st.floats(min_value=-0.5, max_value=1.5) | st.just(math.nan),
            st.floats(min_value=-400, max_value=5_000, allow_nan=False),
            st.floats(allow_nan=True, allow_infinity=False),
            st.floats(allow_nan=True, allow_infinity=False),
            st.integers(min_value=-5, max_value=200),
            st.sampled_from([UTC, timezone(timedelta(hours=-7, minutes=-30))]),
        ),
        max_size=8,
    )
)
def test_composites_are_each_candidates_composite_to_the_bit(
    rows: list[tuple[float, float, float, float, int, timezone]],
) -> None:
    candidates = [
        Candidate(
            MemoryRecord(
                f"m{n}",
                "t",
                "u",
                "learnings",
                "text",
                (NOW - timedelta(days=days)).astimezone(zone),
                confidence=confidence,
                usefulness=usefulness,
                retrieval_count=count,
            ),
            similarity,
        )
        for n, (similarity, days, usefulness, confidence, count, zone) in enumerate(rows)
    ]
    relevances, totals = ranking.composites(candidates, NOW)
    parts = [ranking.components(candidate, NOW) for candidate in candidates]
    assert relevances == [p[0] for p in parts]
    assert [t.hex() for t in totals] == [ranking.composite(*p).hex() for p in parts]


@given(
    st.lists(
        st.tuples(
            st.floats(min_value=-0.5, max_value=1.5) | st.just(math.nan),
            st.floats(min_value=-400, max_value=5_000, allow_nan=False),
            st.sampled_from([*ranking.BASE_RELEVANCE, "other"]),
            st.floats(min_value=0.0, max_value=1.0),
        ),
        max_size=8,
    ),
    st.sampled_from([(0.2, 0.8), (1.0, 0.0), (0.5, 0.5), (0.0, 1.0)]),
)
def test_final_scores_are_the_reference_formulas_to_the_bit(
    rows: list[tuple[float, float, str, float]], weights: tuple[float, float]
) -> None:
    # One loop with every call inlined: each figure must be what the plain formulas give.
    composite_weight, keyword_weight = weights
    candidates = [
        Candidate(
            MemoryRecord(f"m{n}", "t", "u", source, "text", NOW - timedelta(days=days)),
            similarity,
        )
        for n, (similarity, days, source, _) in enumerate(rows)
    ]
    overlaps = [overlap for *_, overlap in rows]
    got = ranking.final_scores(candidates, overlaps, NOW, composite_weight, keyword_weight)
    for at, (candidate, overlap) in enumerate(zip(candidates, overlaps, strict=True)):
        parts = ranking.components(candidate, NOW)
        composite = ranking.composite(*parts)
        base = ranking.BASE_RELEVANCE.get(candidate.record.source, ranking.DEFAULT_BASE_RELEVANCE)
        synth = ranking.fragment_score(base, overlap)
        final = composite_weight * composite + keyword_weight * synth
        query_share = composite_weight * ranking.WEIGHT_RELEVANCE * parts[0]
        prior = final - (query_share + keyword_weight * ranking.OVERLAP_WEIGHT * overlap)
        assert got.relevances[at] == parts[0]
        assert got.composites[at].hex() == composite.hex()
        assert got.synths[at].hex() == synth.hex()
        assert got.finals[at].hex() == final.hex()
        assert got.priors[at].hex() == max(prior, 0.0).hex()
