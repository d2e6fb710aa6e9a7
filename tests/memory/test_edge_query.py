"""Helpers of the embedded store's queries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

import numpy as np
import pytest
import qdrant_edge as qe

from proxy.memory.edge_ids import UUID_IDS
from proxy.memory.edge_query import key_of, scope_filter, turns_filter
from proxy.memory.points import (
    EXPIRES_TS_KEY,
    SOURCE_KEY,
    SUPERSEDED_KEY,
    TENANT_KEY,
    USER_KEY,
    point_id,
    point_key,
)
from proxy.memory.store import SearchQuery, TurnsQuery

PID = point_id("t1", "m1")


@pytest.mark.parametrize("given", [PID, UUID(PID), PID.upper()])
def test_key_of_gives_the_uuids_integer_for_every_spelling(given: str | UUID) -> None:
    assert key_of(given) == UUID(PID).int == point_key("t1", "m1")
    assert UUID(str(UUID_IDS.wire(key_of(given)))) == UUID(PID)  # the shard reads this form too


def test_key_of_refuses_what_is_not_a_uuid() -> None:
    with pytest.raises(ValueError, match="hexadecimal"):
        key_of("not-a-uuid")


def test_the_neighbour_filter_is_flat() -> None:
    """The scope's clauses and the windows in one filter: nesting the scope cost ~15 us of
    thread CPU per lookup (docs/benchmarks.md); the engine ANDs the clauses either way."""
    at = datetime(2026, 3, 1, tzinfo=UTC)
    times = (at - timedelta(hours=1), at - timedelta(hours=2))
    found = turns_filter("t1", TurnsQuery("u1", np.zeros(4, dtype=np.float32), times, 60.0, at))
    clauses = [*(found.must or []), *(found.must_not or []), *(found.should or [])]
    assert not any(isinstance(clause, qe.Filter) for clause in clauses)
    assert [c.key for c in found.must] == [TENANT_KEY, USER_KEY, SOURCE_KEY, SUPERSEDED_KEY]
    assert [c.key for c in found.must_not] == [EXPIRES_TS_KEY]
    assert [(c.range.gte, c.range.lte) for c in found.should or []] == [
        (t.timestamp() - 60.0, t.timestamp() + 60.0) for t in times
    ]


def test_a_search_left_nothing_to_filter_on_has_no_filter() -> None:
    """An empty filter is not free to the engine: a search of the only tenant's shared scope
    without liveness passes none (``edge_tenants``)."""
    query = SearchQuery(np.zeros(4, dtype=np.float32), "x", "u1", None, 5)
    assert scope_filter("t1", query, users=False, tenants=False) is None
    kept = scope_filter("t1", query, tenants=False)
    assert kept is not None
    assert [c.key for c in kept.must or []] == [USER_KEY]
    scoped = scope_filter("t1", query)
    assert scoped is not None
    assert [c.key for c in scoped.must or []] == [TENANT_KEY, USER_KEY]
