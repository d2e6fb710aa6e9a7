"""Tests of the prefix-cache benchmark's pure helpers: dialog replay, memories, the share."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from bench import prefix_cache as pc
from bench.tests.test_bench_locomo_data import SAMPLE

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


@given(st.binary(max_size=40), st.binary(max_size=40), st.binary(max_size=40))
def test_common_prefix_is_the_longest_shared_start(head: bytes, a: bytes, b: bytes) -> None:
    n = pc.common_prefix(head + a, head + b)
    assert (head + a)[:n] == (head + b)[:n]
    assert n >= len(head)
    assert n == min(len(head + a), len(head + b)) or (head + a)[n] != (head + b)[n]


def test_prefix_share_and_full_prefix() -> None:
    previous = b'{"model":"m","messages":[{"a":1}]}'
    grown = b'{"model":"m","messages":[{"a":1},{"b":2}]}'
    share, full = pc.prefix_share(previous, grown)
    assert full
    assert share == len(previous[:-2]) / len(grown)
    changed = b'{"model":"m","messages":[{"a":9},{"b":2}]}'
    share, full = pc.prefix_share(previous, changed)
    assert not full
    assert share == len(b'{"model":"m","messages":[{"a":') / len(changed)


def test_dialog_merges_a_speakers_consecutive_lines_and_pairs_turns() -> None:
    lines = pc.dialog(SAMPLE["conversation"], [1, 2])
    assert lines == [
        ("Ann", "I adopted a cat."),
        ("Bob", "Look!"),
        ("Ann", "The cat is called Tom."),
    ]
    assert pc.turn_pairs(lines, "Ann", 5) == [("I adopted a cat.", "Look!")]
    assert pc.turn_pairs(lines, "Bob", 5) == [("Look!", "The cat is called Tom.")]
    merged = pc.dialog(
        {"session_1": [{"speaker": "A", "text": "x"}, {"speaker": "A", "text": "y"}]}, [1]
    )
    assert merged == [("A", "x y")]


def test_items_know_their_session() -> None:
    assert pc.session_of({"metadata": {"session": 3}}) == 3
    assert pc.session_of({"metadata": {"dia_id": ["D4:1", "D2:7"]}}) == 2
    assert pc.session_of({"metadata": {}}) == 0


def test_replays_hold_only_memories_from_before_their_start() -> None:
    [first, _] = pc.replays([SAMPLE], 20, NOW)
    assert first.name == "conv-x-s2"
    assert first.turns == ()  # session 2 has one line: no reply to pair it with
    assert "You are Bob, chatting with your friend Ann." in first.system
    assert first.memories
    assert all(pc.session_of(item) < 2 for item in first.memories)
