"""Table and property tests for the position rule: where a block goes, and putting blocks back."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.context.position import Slot, fitting, place, slot

B = "<memories>\nx\n</memories>"
CC = {"type": "ephemeral"}


def user(content: Any, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": content, **extra}


def text(t: str, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": t, **extra}


SYS = {"role": "system", "content": "Be terse."}
ASSISTANT = {"role": "assistant", "content": "ok"}


@pytest.mark.parametrize(
    ("turns", "expected"),
    [
        ([SYS, user("hi")], Slot(1, 0)),
        ([SYS, user("a"), ASSISTANT, user("b")], Slot(3, 0)),
        ([user("a"), ASSISTANT], Slot(0, 0)),  # the latest *user* turn, not the last message
        ([SYS], None),
        ([], None),
        ([SYS, user(42)], None),  # content of no shape that takes text
        ([SYS, user("a"), ASSISTANT, user({"x": 1})], Slot(1, 0)),
        ([user(None)], Slot(0, 0)),
        ([user([text("a"), text("b")])], Slot(0, 0)),
        # Behind the last breakpoint of the turn, never in front of it.
        ([user([text("a", cache_control=CC), text("b")])], Slot(0, 1)),
        ([user([text("a"), text("b", cache_control=CC)])], Slot(0, 2)),
        ([user("a", cache_control=CC)], Slot(0, 1)),  # the whole message is the breakpoint
        ([user([text("a")], cache_control=CC)], Slot(0, 1)),
        # A breakpoint in an earlier message is in front of the latest turn anyway.
        ([{"role": "system", "content": [text("s", cache_control=CC)]}, user("a")], Slot(1, 0)),
        # A breakpoint after the latest user turn: behind it, in a tool result ...
        (
            [
                user("a"),
                {"role": "assistant", "content": None, "tool_calls": []},
                {"role": "tool", "content": [text("r", cache_control=CC)]},
            ],
            Slot(2, 1),
        ),
        # ... and nowhere when it is on an assistant turn.
        ([user("a"), {"role": "assistant", "content": [text("r", cache_control=CC)]}], None),
        ([user("a"), {"role": "tool", "content": "r"}], Slot(0, 0)),
    ],
)
def test_slot_table(turns: list[dict[str, Any]], expected: Slot | None) -> None:
    assert slot(turns) == expected


def test_adapters_choose_roles_pinned_parts_and_text_parts() -> None:
    # Anthropic: tool_result blocks come first in their message, so the block goes behind them.
    turns = [user([{"type": "tool_result", "tool_use_id": "t"}, text("and?")])]
    where = slot(turns, pinned=lambda part: part.get("type") == "tool_result")
    assert where == Slot(0, 1)
    # Responses: a different text part shape.
    result, filled = place(
        turns, [(where, B)], text_part=lambda t: {"type": "input_text", "text": t}
    )
    assert result[0]["content"][1] == {"type": "input_text", "text": B}
    assert filled == [where]


@pytest.mark.parametrize(
    ("content", "after", "expected"),
    [
        ("hi", 0, B + "\n\nhi"),
        ("hi", 1, "hi\n\n" + B),
        ("hi", 2, None),
        ("", 0, B),
        (None, 0, B),
        (None, 1, None),
        ([text("a")], 0, [text(B), text("a")]),
        ([text("a")], 1, [text("a"), text(B)]),
        ([text("a")], 2, None),
        ([], 0, [text(B)]),
        (42, 0, None),
    ],
)
def test_place_table(content: Any, after: int, expected: Any) -> None:
    turns = [SYS, user(content)]
    before = copy.deepcopy(turns)
    result, filled = place(turns, [(Slot(1, after), B)])
    assert turns == before
    if expected is None:
        assert result == turns
        assert filled == []
    else:
        assert result == [SYS, user(expected)]
        assert filled == [Slot(1, after)]


def test_place_puts_every_block_back_and_skips_what_no_longer_fits() -> None:
    turns = [SYS, user("a"), ASSISTANT, user("b"), ASSISTANT, user("c")]
    blocks = [(Slot(1, 0), "B1"), (Slot(3, 0), "B3"), (Slot(9, 0), "gone"), (Slot(5, 0), "B5")]
    result, filled = place(turns, blocks)
    assert [m["content"] for m in result] == [
        "Be terse.",
        "B1\n\na",
        "ok",
        "B3\n\nb",
        "ok",
        "B5\n\nc",
    ]
    assert filled == [Slot(1, 0), Slot(3, 0), Slot(5, 0)]
    # At most one block a message: the first given wins.
    again, filled = place(turns, [(Slot(1, 0), "B1"), (Slot(1, 0), "other")])
    assert again[1]["content"] == "B1\n\na"
    assert filled == [Slot(1, 0)]


def test_earlier_turns_stay_byte_identical() -> None:
    turns = [SYS, user("a"), ASSISTANT, user("b")]
    result, _ = place(turns, [(slot(turns) or Slot(0, 0), B)])
    assert result[:3] == turns[:3]


@pytest.mark.parametrize(
    ("tokens", "room", "kept"),
    [([], 0, 0), ([10, 20], 30, 2), ([10, 20], 29, 1), ([10, 20], 9, 0), ([0, 5], 0, 1)],
)
def test_fitting_keeps_the_earliest(tokens: list[int], room: int, kept: int) -> None:
    assert fitting(tokens, room) == kept


contents = st.text(max_size=10) | st.lists(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=5)}), max_size=3
)
turn = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool"]), "content": contents}
)


@given(st.lists(turn, max_size=8))
def test_a_new_block_changes_only_its_own_message(turns: list[dict[str, Any]]) -> None:
    before = copy.deepcopy(turns)
    where = slot(turns)
    if where is None:
        assert not any(t["role"] == "user" for t in turns)
        return
    result, filled = place(turns, [(where, B)])
    assert turns == before
    assert filled == [where]
    assert [m for i, m in enumerate(result) if i != where.index] == [
        m for i, m in enumerate(turns) if i != where.index
    ]
    assert result[where.index] != turns[where.index]
    # Every message after the slot is the application's too: the block is in the latest turn.
    assert all(t["role"] != "user" for t in turns[where.index + 1 :])
