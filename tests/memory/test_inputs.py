"""The rules of the memories API's input models (``proxy.memory.inputs``), one table per rule."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from proxy.errors import RequestError
from proxy.memory.inputs import (
    MAX_BATCH_MEMORIES,
    MAX_METADATA_BYTES,
    MAX_METADATA_DEPTH,
    CreatedAt,
    ImportedMemory,
    InputLimits,
    MemoryInput,
    SetUsefulness,
    Vote,
    is_blank,
)
from proxy.memory.parsing import (
    parse_feedback,
    parse_imported,
    parse_list_query,
    parse_search,
    parse_write_body,
)

LIMITS = InputLimits(max_content_chars=50)
CREATED_AT: TypeAdapter[datetime] = TypeAdapter(CreatedAt)
# JSON Schema's (ECMA-262) \s: what the OpenAPI document's pattern calls whitespace.
ECMA_SPACE = set("\t\n\v\f\r \u00a0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff") | {
    chr(c) for c in range(0x2000, 0x200B)
}


def one(memory: dict[str, Any]) -> MemoryInput:
    (parsed,) = parse_write_body(memory, max_content_chars=LIMITS.max_content_chars)
    return parsed


def refused(memory: dict[str, Any]) -> RequestError:
    with pytest.raises(RequestError) as info:
        one(memory)
    assert info.value.status == 400
    return info.value


def check(field: str, value: Any, ok: bool) -> None:
    """A memory with ``field`` set to ``value`` is kept as sent, or refused naming ``field``."""
    memory = {"content": "x", field: value}
    if ok:
        assert getattr(one(memory), field) == value
    else:
        assert refused(memory).param == field


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-01T12:00:00Z", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("2024-05-01T12:00:00", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("2024-05-01T14:00:00+02:00", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("2024-05-01", datetime(2024, 5, 1, tzinfo=UTC)),
        ("2024-05-01 12:00:00.250Z", datetime(2024, 5, 1, 12, 0, 0, 250000, tzinfo=UTC)),
        ("2024-02-29", datetime(2024, 2, 29, tzinfo=UTC)),
    ],
)
def test_created_at_parsing(text: str, expected: datetime) -> None:
    parsed = one({"content": "x", "created_at": text}).created_at
    assert parsed == expected
    assert parsed is not None
    assert parsed.tzinfo is UTC


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "yesterday",
        "2024-02-30",
        "2023-02-29",
        "12:00",
        "20240501",
        " 2024-05-01",
        "2024-05-01\n",
        1714550400,
        [],
        True,
    ],
)
def test_bad_created_at_is_a_clear_400(bad: Any) -> None:
    error = refused({"content": "x", "created_at": bad})
    assert error.param == "created_at"
    assert "ISO 8601" in error.message


@pytest.mark.parametrize(
    "outside", ["9999-12-31T23:30:00-05:00", "9999-12-31T20:00-23:59", "1000-01-01T00:30+01:00"]
)
def test_times_outside_utc_years_1000_9999_are_refused(outside: str) -> None:
    error = refused({"content": "x", "created_at": outside})
    assert (error.param, "1000-9999" in error.message) == ("created_at", True)


@given(
    st.datetimes(
        min_value=datetime(1000, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.just(timezone(timedelta(hours=-7))),
    )
)
def test_created_at_round_trips_any_aware_time(moment: datetime) -> None:
    assert CREATED_AT.validate_python(moment.isoformat()) == moment


def test_code_may_pass_a_datetime_naive_meaning_utc() -> None:
    assert MemoryInput(content="x", created_at=datetime(2024, 5, 1)).created_at == datetime(
        2024, 5, 1, tzinfo=UTC
    )
    with pytest.raises(ValidationError):  # the years rule holds for code too
        MemoryInput(content="x", created_at=datetime(999, 12, 31))


def test_defaults_and_null_fields() -> None:
    parsed = one({"content": "x", "user": None, "metadata": None, "source": None, "id": None})
    assert parsed == MemoryInput(content="x")
    assert (parsed.user, parsed.source, parsed.confidence, parsed.usefulness) == (
        "",
        "learnings",
        0.8,
        0.5,
    )
    assert (parsed.id, parsed.created_at, parsed.metadata, parsed.retrieval_count) == (
        None,
        None,
        {},
        0,
    )
    with pytest.raises(ValidationError):  # the validated value cannot be changed afterwards
        parsed.content = "y"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("parse", "body"),
    [(one, {"content": "x"}), (lambda body: parse_search(body, LIMITS), {"query": "0"})],
)
def test_an_unknown_key_is_refused_even_when_null(parse: Any, body: dict[str, Any]) -> None:
    # Found by the OpenAPI fuzz: ``{"query": "0", "": null}`` was searched as if the key were
    # absent, because null meant "the default" for every key, known or not.
    parse(body)
    for unknown in ("", "colour"):
        with pytest.raises(RequestError):
            parse({**body, unknown: None})


def test_single_memory_and_batch_bodies() -> None:
    assert [m.content for m in parse_write_body({"content": "a"}, max_content_chars=5)] == ["a"]
    batch = parse_write_body(
        {"memories": [{"content": "a"}, {"content": "b"}]}, max_content_chars=5
    )
    assert [m.content for m in batch] == ["a", "b"]
    full = parse_write_body(
        {"memories": [{"content": "a"}] * MAX_BATCH_MEMORIES}, max_content_chars=5
    )
    assert len(full) == MAX_BATCH_MEMORIES
    with pytest.raises(RequestError) as info:
        parse_write_body(
            {"memories": [{"content": "a"}] * (MAX_BATCH_MEMORIES + 1)}, max_content_chars=5
        )
    assert (info.value.param, info.value.code) == ("memories", "batch_too_large")


@pytest.mark.parametrize(
    ("content", "ok"),
    [
        ("x", True),
        (" x ", True),
        ("x" * 50, True),
        ("x" * 51, False),
        ("", False),
        (" \t\n", False),
        ("\x1e", False),  # Python whitespace, not JSON Schema's
        ("\ufeff", False),  # JSON Schema whitespace, not Python's
        ("\u3000\u2028", False),
        ("\u200b", True),  # zero-width space is whitespace to neither
    ],
)
def test_content_is_not_blank_and_within_the_tenant_limit(content: str, ok: bool) -> None:
    check("content", content, ok)


def test_without_limits_code_may_build_longer_content() -> None:
    assert len(MemoryInput(content="x" * 100).content) == 100
    with pytest.raises(ValidationError):
        MemoryInput(content="\ufeff")


def test_blank_is_python_and_json_schema_whitespace_together() -> None:
    for code in range(0x10000):
        char = chr(code)
        assert is_blank(char) == (char.isspace() or char in ECMA_SPACE), hex(code)


@pytest.mark.parametrize(
    ("memory_id", "ok"),
    [
        ("a", True),
        ("Doc_1.a:b@c+d=e~f-g", True),
        ("~" * 256, True),
        ("x" * 257, False),
        ("", False),
        ("a/b", False),
        ("a b", False),
        ("é", False),
        ("a\n", False),
        ("search", False),
        ("searches", True),
        (5, False),
    ],
)
def test_ids(memory_id: Any, ok: bool) -> None:
    check("id", memory_id, ok)


@pytest.mark.parametrize(
    ("value", "ok"),
    [(0, True), (1, True), (0.25, True), (True, False), (1.01, False), (-0.1, False), ("1", False)],
)
def test_fractions_are_numbers_in_0_1_not_booleans(value: Any, ok: bool) -> None:
    for name in ("confidence", "usefulness"):
        check(name, value, ok)
    with pytest.raises(ValidationError):  # only code can pass a NaN
        MemoryInput(content="x", confidence=math.nan)


def nested(depth: int) -> Any:
    value: Any = 1
    for i in range(depth - 1):
        value = [value] if i % 2 else {"k": value}
    return {"k": value}


@pytest.mark.parametrize(
    ("metadata", "ok"),
    [
        ({}, True),
        (nested(MAX_METADATA_DEPTH), True),
        (nested(MAX_METADATA_DEPTH + 1), False),
        ({"k": "x" * (MAX_METADATA_BYTES - 8)}, True),
        ({"k": "x" * (MAX_METADATA_BYTES - 7)}, False),
        ([], False),
        ("{}", False),
    ],
)
def test_metadata_is_a_small_shallow_object(metadata: Any, ok: bool) -> None:
    check("metadata", metadata, ok)


@pytest.mark.parametrize(
    ("user", "ok"), [("", True), ("u" * 256, True), ("u" * 257, False), (7, False)]
)
def test_users(user: Any, ok: bool) -> None:
    check("user", user, ok)


@pytest.mark.parametrize(
    ("raw", "limit"),
    [("5", 5), (" 7 ", 7), ("100", 100), ("0", None), ("-1", None), ("³", None), ("1e3", None)],
)
def test_query_string_integers_are_ascii_digits(raw: str, limit: int | None) -> None:
    if limit is not None:
        assert parse_list_query({"limit": raw}).limit == limit
    else:
        with pytest.raises(RequestError) as info:
            parse_list_query({"limit": raw})
        assert info.value.param == "limit"


def test_list_query_defaults() -> None:
    query = parse_list_query({"after": ""})
    assert (query.user, query.source, query.limit, query.after) == (None, None, 20, None)
    assert parse_list_query({"user": ""}).user == ""  # the tenant-shared scope


@pytest.mark.parametrize(
    ("top_k", "expected"),
    [(1, 1), (200, 200), (104.0, 104), (0, None), (201, None), (1.5, None), (True, None)],
)
def test_json_integers_refuse_booleans_and_fractions(top_k: Any, expected: int | None) -> None:
    body = {"query": "tea", "top_k": top_k}
    if expected is not None:
        assert parse_search(body, LIMITS).top_k == expected
    else:
        with pytest.raises(RequestError) as info:
            parse_search(body, LIMITS)
        assert info.value.param == "top_k"


def test_search_defaults_and_content_limit() -> None:
    search = parse_search({"query": "tea", "user": None, "top_k": None, "sources": None}, LIMITS)
    assert (search.user, search.top_k, search.sources) == ("", 10, None)
    with pytest.raises(RequestError) as info:
        parse_search({"query": "x" * 51}, LIMITS)
    assert info.value.param == "query"


@pytest.mark.parametrize(
    ("body", "parsed"),
    [
        ({"useful": True}, Vote(useful=True)),
        ({"useful": False}, Vote(useful=False)),
        ({"usefulness": 0}, SetUsefulness(usefulness=0.0)),
        ({}, None),
        ({"useful": True, "usefulness": 1}, None),
        ({"useful": 1}, None),
        ({"usefulness": True}, None),
        ({"useful": None}, None),
    ],
)
def test_feedback_is_exactly_one_vote_or_value(body: dict[str, Any], parsed: Any) -> None:
    if parsed is not None:
        assert parse_feedback(body) == parsed
    else:
        with pytest.raises(RequestError):
            parse_feedback(body)


def test_imports_keep_the_retrieval_count_the_api_refuses() -> None:
    imported = parse_imported({"content": "x", "retrieval_count": 7}, LIMITS)
    assert isinstance(imported, ImportedMemory)
    assert imported.retrieval_count == 7
    assert parse_imported({"content": "x"}, LIMITS).retrieval_count == 0
    for bad in (-1, True, 1.5, "7"):
        with pytest.raises(RequestError) as info:
            parse_imported({"content": "x", "retrieval_count": bad}, LIMITS)
        assert info.value.param == "retrieval_count"
    assert refused({"content": "x", "retrieval_count": 7}).param == "retrieval_count"


def test_expires_at_is_a_time_like_created_at() -> None:
    parsed = one({"content": "x", "expires_at": "2026-05-01T12:00:00+02:00"})
    assert parsed.expires_at == datetime(2026, 5, 1, 10, tzinfo=UTC)
    assert one({"content": "x"}).expires_at is None
    assert one({"content": "x", "expires_at": None}).expires_at is None
    assert refused({"content": "x", "expires_at": "next week"}).param == "expires_at"
