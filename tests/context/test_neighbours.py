"""Neighbour gains (adr/0114): a dialog turn is worth what the turn beside it is worth.

Invariants of ``neighbour_gains`` checked here: no gain falls, none exceeds the largest input
gain, a negative window changes nothing, a raised gain is some neighbour's original gain (no
chains), the result does not depend on the input order. And in ``assemble``: the reply to a
turn the question names is injected though it shares no word with the question.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.context.assembler import AssemblerConfig, assemble
from proxy.context.neighbours import adjacent_turns, neighbour_gains
from proxy.context.records import Candidate, MemoryRecord
from proxy.defaults import NEIGHBOUR_WINDOW_S
from tests.context.support import block_tokens

T0 = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
NOW = T0 + timedelta(days=1)
TOKENS = block_tokens("o200k_base")


def at(*minutes: float) -> list[datetime]:
    return [T0 + timedelta(minutes=m) for m in minutes]


@pytest.mark.parametrize(
    ("gains", "minutes", "groups", "window", "expected"),
    [
        ([0.5, 0.0], [0, 1], "aa", 120, [0.5, 0.5]),  # the reply inherits the question's turn
        ([0.0, 0.5], [0, 1], "aa", 120, [0.5, 0.5]),  # and the turn before it too
        ([0.5, 0.0], [0, 3], "aa", 120, [0.5, 0.0]),  # too far apart in time
        ([0.5, 0.0], [0, 1], "ab", 120, [0.5, 0.0]),  # another user or source
        ([0.5, 0.0], [0, 1], "aa", -1, [0.5, 0.0]),  # off
        ([0.5, 0.0, 0.0], [0, 1, 2], "aaa", 120, [0.5, 0.5, 0.0]),  # no chains
        ([0.2, 0.1, 0.4], [0, 1, 2], "aaa", 120, [0.2, 0.4, 0.4]),  # the larger neighbour
        ([0.0, 0.5, 0.0], [0, 1, 1.5], "aba", 120, [0.0, 0.5, 0.0]),  # neighbours within a group
        ([0.3, 0.0], [1, 0], "aa", 60, [0.3, 0.3]),  # input order does not matter; window inclusive
        ([0.7], [0], "a", 120, [0.7]),
        ([], [], "", 120, []),
        ([0.5, 0.0], [0, 0], [None, None], 120, [0.5, 0.0]),  # not turns: no neighbours
        ([0.5, 0.0, 0.0], [0, 1, 2], ["a", None, "a"], 120, [0.5, 0.0, 0.5]),  # skipped over
    ],
)
def test_neighbour_gains_table(
    gains: list[float],
    minutes: list[float],
    groups: str | list[str | None],
    window: float,
    expected: list[float],
) -> None:
    assert neighbour_gains(gains, at(*minutes), list(groups), window=window) == expected


items = st.lists(
    st.tuples(st.floats(0, 1), st.integers(0, 20), st.sampled_from("abc")), max_size=30
)


@settings(max_examples=200, deadline=None)
@given(items, st.floats(-10, 300), st.randoms(use_true_random=False))
def test_neighbour_gains_invariants(
    rows: list[tuple[float, int, str]], window: float, rnd: object
) -> None:
    gains = [g for g, _, _ in rows]
    times = at(*(m for _, m, _ in rows))
    groups = [g for _, _, g in rows]
    out = neighbour_gains(gains, times, groups, window=window)
    assert len(out) == len(gains)
    for before, after in zip(gains, out, strict=True):
        assert after >= before
        assert after in gains  # its own or a neighbour's original gain: no chains, no mixing
    if window < 0:
        assert out == gains
    # Distinct (time, position) keys: shuffling the input permutes the output alike.
    order = list(range(len(rows)))
    rnd.shuffle(order)  # type: ignore[attr-defined]
    unique = len({(t, g) for t, g in zip(times, groups, strict=True)}) == len(rows)
    if unique:
        shuffled = neighbour_gains(
            [gains[i] for i in order],
            [times[i] for i in order],
            [groups[i] for i in order],
            window=window,
        )
        assert shuffled == [out[i] for i in order]


def turn(name: str, content: str, similarity: float, minute: int, user: str = "u") -> Candidate:
    record = MemoryRecord(
        id=name,
        tenant="t",
        user=user,
        source="conversation",
        content=content,
        created_at=T0 + timedelta(minutes=minute),
    )
    return Candidate(record, similarity)


QUESTION = "What does Caroline do to destress after work?"
ASKED = turn("asked", "Melanie: Caroline, what do you do to destress after work?", 0.6, 0)
REPLY = turn("reply", "Yoga mostly, and long runs by the river.", 0.3, 1)
LATER = turn("later", "I painted the fence green last weekend.", 0.3, 30)


def test_the_reply_beside_a_named_turn_is_injected() -> None:
    with_neighbours = assemble([ASKED, REPLY, LATER], QUESTION, 1_000, now=NOW, tokens=TOKENS)
    assert {m.id for m in with_neighbours.packed} == {"asked", "reply"}
    off = AssemblerConfig(neighbour_window=-1)
    alone = assemble([ASKED, REPLY, LATER], QUESTION, 1_000, now=NOW, tokens=TOKENS, config=off)
    assert {m.id for m in alone.packed} == {"asked"}
    assert "reply" in alone.dropped["floor"]


def test_turns_of_another_user_share_nothing() -> None:
    other = turn("other", REPLY.record.content, 0.3, 1, user="v")
    result = assemble([ASKED, other], QUESTION, 1_000, now=NOW, tokens=TOKENS)
    assert {m.id for m in result.packed} == {"asked"}


def test_memories_written_together_are_not_turns() -> None:
    """Learnings imported in one batch share a time; only dialog turns are neighbours."""
    reply = dataclasses.replace(REPLY.record, created_at=ASKED.record.created_at)
    turns = [ASKED, Candidate(reply, 0.1)]
    assert {m.id for m in assemble(turns, QUESTION, 1_000, now=NOW, tokens=TOKENS).packed} == {
        "asked",
        "reply",
    }
    learned = [
        Candidate(dataclasses.replace(c.record, source="learnings"), c.similarity) for c in turns
    ]
    result = assemble(learned, QUESTION, 1_000, now=NOW, tokens=TOKENS)
    assert {m.id for m in result.packed} == {"asked"}


def test_the_fill_rule_is_unchanged() -> None:
    fill = AssemblerConfig(token_price=0.0, absolute_overlap=False)
    off = AssemblerConfig(token_price=0.0, absolute_overlap=False, neighbour_window=-1)
    pool = [ASKED, REPLY, LATER]
    assert (
        assemble(pool, QUESTION, 60, now=NOW, tokens=TOKENS, config=fill).block
        == assemble(pool, QUESTION, 60, now=NOW, tokens=TOKENS, config=off).block
    )


def at_minute(rid: str, minute: float, similarity: float = 0.5) -> Candidate:
    """A dialog turn ``minute`` minutes after ``T0``."""
    record = MemoryRecord(
        id=rid,
        tenant="t",
        user="u",
        source="conversation",
        content=rid,
        created_at=T0 + timedelta(minutes=minute),
    )
    return Candidate(record, similarity)


# A dialog a minute a turn (a..d), then e an hour later; b2 shares b's time (ties by id).
LINE = {
    c.record.id: c
    for c in [at_minute("a", 0), at_minute("b", 1), at_minute("b2", 1), at_minute("c", 2)]
}
LINE.update(d=at_minute("d", 3), e=at_minute("e", 63))


@pytest.mark.parametrize(
    ("seeds", "have", "expected"),
    [
        (["c"], [], ["b2", "d"]),  # just before (the later of b, b2 by id) and just after
        (["a"], [], ["b"]),  # nothing before the first turn
        (["d"], [], ["c"]),  # e is an hour away: outside the window
        (["c"], ["b2"], ["d"]),  # already a candidate: left out, not replaced by b
        (["a", "c"], [], ["b", "b2", "d"]),  # each once, in seed order
        (["b", "b2"], [], ["a", "c"]),  # each other's neighbours, both candidates already
        ([], [], []),
    ],
)
def test_adjacent_turns_are_the_nearest_in_time_on_each_side(
    seeds: list[str], have: list[str], expected: list[str]
) -> None:
    near = list(reversed(LINE.values()))  # the store's order is none in particular
    chosen = adjacent_turns(
        [LINE[s] for s in seeds], near, {*seeds, *have}, window=NEIGHBOUR_WINDOW_S
    )
    assert [c.record.id for c in chosen] == expected


def test_an_adjacent_turn_missing_from_near_is_not_looked_past() -> None:
    """A seed not among ``near`` still finds the turns on either side of its time."""
    seed = at_minute("x", 1.5)
    chosen = adjacent_turns([seed], list(LINE.values()), {"x"}, window=NEIGHBOUR_WINDOW_S)
    assert [c.record.id for c in chosen] == ["b2", "c"]
