"""The context a dialog turn is embedded with (adr/0142): pure table tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from proxy.context.records import MemoryRecord, index_text
from proxy.memory.duplicates import words_key
from proxy.memory.turn_context import clipped, context_key, turn_contexts, turn_sources

AT = datetime(2026, 1, 1, tzinfo=UTC)


def turn(
    content: str,
    user: str = "u",
    session: object = 1,
    source: str = "conversation",
    minute: float = 0.0,
    expires: float | None = None,
) -> MemoryRecord:
    metadata = {} if session is None else {"session": session}
    at = AT + timedelta(minutes=minute)
    until = AT + timedelta(days=expires) if expires is not None else None
    return MemoryRecord("m", "t", user, source, content, at, metadata=metadata, expires_at=until)


@pytest.mark.parametrize(
    ("turns", "preceding", "expected"),
    [
        ([], "", []),
        ([], "before", []),
        # Each turn takes the one before it in its session (one time: the batch's order).
        ([turn("a"), turn("b"), turn("c")], "", ["", "a", "b"]),
        # The batch's first dialog turn takes the text before the batch (capture).
        ([turn("q"), turn("answer")], "last reply", ["last reply", "q"]),
        # Not a dialog turn: no context, and it is no turn's context either.
        ([turn("a"), turn("fact", source="learnings"), turn("b")], "", ["", "", "a"]),
        ([turn("fact", source="learnings"), turn("a")], "before", ["", "before"]),
        # Sessions and users are apart; a session 1 is not a session "1".
        ([turn("a", session=1), turn("b", session=2), turn("c", session=1)], "", ["", "", "a"]),
        ([turn("a", session=1), turn("b", session="1")], "", ["", ""]),
        ([turn("a", user="x"), turn("b", user="y")], "", ["", ""]),
        # Turns without a session form one.
        ([turn("a", session=None), turn("b", session=None)], "", ["", "a"]),
        # Time order, not the batch's (an export lists memories in id order).
        ([turn("c", minute=2), turn("a", minute=0), turn("b", minute=1)], "", ["b", "", "a"]),
        # The turn before must be beside it (NEIGHBOUR_WINDOW_S): not one further back whose
        # successor is in another batch.
        ([turn("a", minute=0), turn("c", minute=2.5)], "", ["", ""]),
        ([turn("a", minute=0), turn("b", minute=2)], "", ["", "a"]),
        # A copy must not outlive its original (adr/0144): no context from a turn that expires
        # before this one; one that lives as long or longer is fine.
        ([turn("a", expires=1), turn("b")], "", ["", ""]),
        ([turn("a", expires=1), turn("b", expires=2)], "", ["", ""]),
        ([turn("a", expires=2), turn("b", expires=2)], "", ["", "a"]),
        ([turn("a"), turn("b", expires=1)], "", ["", "a"]),
    ],
)
def test_turn_contexts(turns: list[MemoryRecord], preceding: str, expected: list[str]) -> None:
    assert turn_contexts(turns, preceding) == expected


def test_a_long_context_keeps_its_end() -> None:
    assert turn_contexts([turn("x" * 5 + "yz"), turn("b")], limit=3) == ["", "xyz"]
    assert turn_contexts([turn("b")], "abcdef", limit=4) == ["cdef"]


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [("", 3, ""), ("abc", 3, "abc"), ("abcd", 3, "bcd"), ("abc", 0, "")],
)
def test_clipped(text: str, limit: int, expected: str) -> None:
    assert clipped(text, limit) == expected


@pytest.mark.parametrize(
    ("content", "context", "expected"),
    [
        ("turn", "", "turn"),
        ("turn", "before", "before\nturn"),
    ],
)
def test_index_text(content: str, context: str, expected: str) -> None:
    assert index_text(content, context) == expected


def test_sources_are_whole_and_keyed_like_the_memory_they_come_from() -> None:
    long = "x" * 2_000 + " end"
    assert turn_sources([turn(long), turn("b")]) == ["", long]
    assert turn_contexts([turn(long), turn("b")])[1] == long[-1_000:]
    # The words key: what the source's own memory is stored (and found) under.
    assert context_key("My PIN is 4921.") == words_key("my pin is 4921")
