"""Value encodings: exact round trips (hypothesis) and corrupt input rejected, never served."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.cache import codec
from proxy.context.records import SOURCES, Candidate, MemoryRecord

TENANT = "acme"

# JSON-native values: what the memories API accepts as metadata.
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
finite = st.floats(allow_nan=False, allow_infinity=False)
created = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)


@st.composite
def candidates(draw: st.DrawFn) -> Candidate:
    record = MemoryRecord(
        id=draw(st.text(min_size=1, max_size=40)),
        tenant=TENANT,
        user=draw(st.text(max_size=20)),
        source=draw(st.sampled_from(SOURCES)),
        content=draw(st.text(max_size=300)),
        created_at=draw(created),
        confidence=draw(finite),
        usefulness=draw(finite),
        retrieval_count=draw(st.integers(min_value=0, max_value=2**40)),
        tokens=draw(st.dictionaries(st.text(max_size=12), st.integers(0, 10**6), max_size=3)),
        metadata=draw(st.dictionaries(st.text(max_size=12), json_values, max_size=4)),
        expires_at=draw(st.none() | created),
        supersedes=draw(st.none() | st.text(min_size=1, max_size=40)),
        context=draw(st.text(max_size=100)),
    )
    return Candidate(record=record, similarity=draw(finite))


@settings(deadline=None)  # a shared CI machine must not turn slowness into failures
@given(st.lists(candidates(), max_size=6))
def test_candidates_round_trip_exactly(hits: list[Candidate]) -> None:
    decoded = codec.decode_candidates(codec.encode_candidates(hits), TENANT)
    assert decoded == hits
    for after in decoded:
        assert after.record.created_at.utcoffset() == timedelta(0)
        assert type(after.record.retrieval_count) is int


def test_non_utc_offsets_survive_too() -> None:
    when = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=timezone(timedelta(hours=-3, minutes=-30)))
    hit = Candidate(MemoryRecord("m", TENANT, "u", "learnings", "c", when), 0.5)
    assert codec.decode_candidates(codec.encode_candidates([hit]), TENANT)[0].record.created_at == (
        when
    )


def _one_row() -> list[object]:
    hit = Candidate(MemoryRecord("m", TENANT, "u", "learnings", "c", datetime.now(UTC)), 0.9)
    rows: list[list[object]] = orjson.loads(codec.encode_candidates([hit]))
    return rows[0]


@pytest.mark.parametrize(
    ("index", "value"),
    [
        (1, "globex"),  # another tenant's record must never be served to this one
        (0, 5),  # id not a string
        (5, "2024-01-01T00:00:00"),  # naive datetime
        (5, "yesterday"),
        (6, None),  # confidence lost (NaN would have become null)
        (8, True),  # bool is not a count
        (9, []),  # tokens not an object
        (9, {"o200k_base": "12"}),
        (10, "meta"),
        (13, None),  # a turn's context not a string
    ],
)
def test_corrupt_rows_are_rejected(index: int, value: object) -> None:
    row = _one_row()
    row[index] = value
    with pytest.raises(codec.CacheDecodeError):
        codec.decode_candidates(orjson.dumps([row]), TENANT)


@pytest.mark.parametrize("data", [b"", b"{", b"{}", b"[1]", b"[[1,2]]", b"\xff\xfe"])
def test_garbage_is_rejected(data: bytes) -> None:
    with pytest.raises(codec.CacheDecodeError):
        codec.decode_candidates(data, TENANT)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_scores_are_not_encoded(bad: float) -> None:
    hit = Candidate(MemoryRecord("m", TENANT, "u", "learnings", "c", datetime.now(UTC)), bad)
    with pytest.raises(codec.CacheDecodeError):
        codec.encode_candidates([hit])


def test_metadata_json_cannot_carry_is_not_encoded() -> None:
    record = MemoryRecord(
        "m", TENANT, "u", "learnings", "c", datetime.now(UTC), metadata={"n": 2**70}
    )
    with pytest.raises(codec.CacheDecodeError):
        codec.encode_candidates([Candidate(record, 0.5)])


@settings(deadline=None)  # a shared CI machine must not turn slowness into failures
@given(
    st.lists(finite.map(lambda x: np.float32(x) if abs(x) < 3e38 else np.float32(0)), max_size=64)
)
def test_vectors_round_trip_bit_exactly(values: list[np.float32]) -> None:
    vector = np.array(values, dtype=np.float32)
    decoded = codec.decode_vector(codec.encode_vector(vector), len(values))
    assert decoded.dtype == np.float32
    assert decoded.tobytes() == vector.tobytes()
    decoded[:] = 1  # a private, writable copy


def test_vector_of_the_wrong_length_is_rejected() -> None:
    data = codec.encode_vector(np.ones(8, dtype=np.float32))
    with pytest.raises(codec.CacheDecodeError):
        codec.decode_vector(data, 16)


@pytest.mark.parametrize(
    ("data", "ok"), [(b"0", 0), (b"12345", 12345), (b"-1", None), (b"x", None)]
)
def test_counts(data: bytes, ok: int | None) -> None:
    if ok is None:
        with pytest.raises(codec.CacheDecodeError):
            codec.decode_count(data)
    else:
        assert codec.decode_count(data) == ok
        assert codec.decode_count(codec.encode_count(ok)) == ok
