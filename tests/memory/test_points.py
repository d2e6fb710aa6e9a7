"""A memory as a Qdrant point (``proxy.memory.points``): point ids and payload round trips."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.context.records import SOURCES, MemoryRecord
from proxy.errors import StoreError
from proxy.memory.points import CONTEXT_KEY, from_payload, owned, point_id, to_payload
from proxy.memory.store import with_tokens
from tests.memory.support import record

names = st.text(min_size=1, max_size=40)


@given(tenant_a=names, tenant_b=names, memory_id=st.text(max_size=60))
def test_point_ids_differ_across_tenants(tenant_a: str, tenant_b: str, memory_id: str) -> None:
    a, b = point_id(tenant_a, memory_id), point_id(tenant_b, memory_id)
    assert (a == b) == (tenant_a == tenant_b)
    assert uuid.UUID(a).version == 5


@pytest.mark.parametrize(
    ("left", "right"),
    [(("a", "b:c"), ("a:b", "c")), (("a", "1:b"), ("a:1", "b")), (("t", "x"), ("t", "x "))],
)
def test_point_ids_do_not_collide_on_separators(
    left: tuple[str, str], right: tuple[str, str]
) -> None:
    assert point_id(*left) != point_id(*right)


def test_point_id_is_stable() -> None:
    # Pinned: a change would orphan every stored memory.
    assert point_id("t1", "m1") == "7ec41e76-4ed7-5cb3-b9e9-649075504fc9"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(
    content=st.text(min_size=1, max_size=200),
    user=st.text(max_size=20),
    source=st.sampled_from(SOURCES),
    confidence=st.floats(0, 1),
    usefulness=st.floats(0, 1),
    count=st.integers(0, 10**6),
    offset_minutes=st.integers(-600, 600),
    metadata=st.dictionaries(st.text(max_size=10), json_values, max_size=4),
)
def test_payload_round_trips(
    content: str,
    user: str,
    source: str,
    confidence: float,
    usefulness: float,
    count: int,
    offset_minutes: int,
    metadata: dict[str, object],
) -> None:
    created = datetime(2025, 5, 1, 12, 0, tzinfo=timezone(timedelta(minutes=offset_minutes)))
    original = MemoryRecord(
        id="m",
        tenant="t",
        user=user,
        source=source,
        content=content,
        created_at=created,
        confidence=confidence,
        usefulness=usefulness,
        retrieval_count=count,
        tokens={"o200k_base": 3, "cl100k_base": 4},
        metadata=metadata,
    )
    back = from_payload(to_payload(original))
    assert back == original  # datetimes compare as instants
    assert back.created_at.tzinfo == UTC


def fresh(text: str) -> str:
    """An equal string that is a new object (as each payload read from the shard holds)."""
    return "".join(list(text))


def test_decoded_records_share_their_few_values() -> None:
    """Tenant, user, source and token-count encodings are one object across records (what a
    request compares and hashes for each candidate); a source is the code's own literal."""
    payloads = []
    for memory_id in ("m1", "m2"):
        payload = to_payload(with_tokens(record(memory_id, tenant="tenant-a", user="user-b")))
        payload = {
            key: fresh(value) if isinstance(value, str) else value for key, value in payload.items()
        }
        payload["source"] = fresh("conversation")
        payload["tokens"] = {fresh(name): count for name, count in payload["tokens"].items()}
        payloads.append(payload)
    assert payloads[0]["tenant"] is not payloads[1]["tenant"]
    first, second = (from_payload(payload) for payload in payloads)
    assert first.tenant is second.tenant
    assert first.user is second.user
    assert first.source is second.source is "conversation"  # noqa: F632 (the point: identity)
    assert first.tokens
    assert all(name is other for name, other in zip(first.tokens, second.tokens, strict=True))
    assert first.id != second.id


def test_naive_created_at_is_refused() -> None:
    naive = replace(record("m1"), created_at=datetime(2025, 1, 1))
    with pytest.raises(StoreError):
        to_payload(naive)


def test_owned_rejects_other_tenants_and_missing_payloads() -> None:
    payload = to_payload(with_tokens(record("m1", tenant="A")))
    assert owned(payload, "A") is not None
    assert owned(payload, "B") is None
    assert owned(None, "A") is None


def test_a_turns_context_is_written_only_when_set_and_old_points_read_without() -> None:
    """adr/0142: a point written before the context existed reads as a turn without one."""
    turn = MemoryRecord(
        "m", "t", "u", "conversation", "Yes!", datetime(2025, 5, 1, tzinfo=UTC), context="Ready?"
    )
    payload = to_payload(turn)
    assert payload[CONTEXT_KEY] == "Ready?"
    assert from_payload(payload) == turn
    del payload[CONTEXT_KEY]
    assert from_payload(payload) == replace(turn, context="")
    assert CONTEXT_KEY not in to_payload(replace(turn, context=""))


def test_a_record_pickled_before_the_context_existed_is_written_without_one() -> None:
    # A write log left by the version before adr/0142 holds records with one field fewer.
    turn = MemoryRecord("m", "t", "u", "conversation", "Yes!", datetime(2025, 5, 1, tzinfo=UTC))
    old = MemoryRecord.__new__(MemoryRecord)
    old.__setstate__(turn.__getstate__()[:-1])  # type: ignore[attr-defined]
    assert CONTEXT_KEY not in to_payload(old)
    assert from_payload(to_payload(old)) == turn
