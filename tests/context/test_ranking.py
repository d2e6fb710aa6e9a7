"""Property tests for the engine's typed scoring: the seed's formulas, and the seed's loose
rules give the same figures on typed inputs."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from proxy.context import ranking, scorer

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
