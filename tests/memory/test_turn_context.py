"""The context a dialog turn is embedded with (adr/0142): pure table tests."""

from __future__ import annotations

import pytest

from proxy.context.records import index_text
from proxy.memory.inputs import MemoryInput
from proxy.memory.turn_context import clipped, turn_contexts


def turn(
    content: str, user: str = "u", session: object = 1, source: str = "conversation"
) -> MemoryInput:
    metadata = {} if session is None else {"session": session}
    return MemoryInput(content=content, user=user, source=source, metadata=metadata)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("inputs", "preceding", "expected"),
    [
        ([], "", []),
        # Each turn takes the one before it in its session.
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
    ],
)
def test_turn_contexts(inputs: list[MemoryInput], preceding: str, expected: list[str]) -> None:
    assert turn_contexts(inputs, preceding) == expected


def test_a_long_context_keeps_its_end() -> None:
    assert turn_contexts([turn("x" * 5 + "yz"), turn("b")], limit=3) == ["", "xyz"]
    assert turn_contexts([turn("b")], "abcdef", limit=4) == ["cdef"]


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [("", 3, ""), ("abc", 3, "abc"), ("abcd", 3, "bcd")],
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
