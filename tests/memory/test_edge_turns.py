"""The embedded store's index of dialog turns (``edge_turns``)."""

from __future__ import annotations

import pytest

from proxy.memory.edge_turns import DialogTurns

BIG = 1 << 127  # a UUID store's keys are 128-bit


def built(*turns: tuple[int, str, str, float]) -> DialogTurns:
    index = DialogTurns()
    index.start()
    index.load(turns)
    index.finish(True)
    return index


LINE = built(
    (5, "t1", "u1", 50.0),
    (1, "t1", "u1", 10.0),
    (BIG, "t1", "u1", 20.0),
    (2, "t1", "u1", 20.0),
    (3, "t1", "u1", 30.0),
    (4, "t1", "u2", 20.0),
    (6, "t2", "u1", 20.0),
)


@pytest.mark.parametrize(
    ("windows", "keys"),
    [
        ([(15.0, 25.0)], [2, BIG]),  # same time: by key
        ([(10.0, 30.0)], [1, 2, BIG, 3]),  # both bounds included
        ([(25.0, 35.0), (5.0, 15.0)], [1, 3]),  # windows in any order, keys in time order
        ([(5.0, 25.0), (15.0, 35.0)], [1, 2, BIG, 3]),  # overlapping: each key once
        ([(31.0, 49.0)], []),
        ([], []),
    ],
)
def test_near_lists_the_users_turns_within_any_window(
    windows: list[tuple[float, float]], keys: list[int]
) -> None:
    assert LINE.near("t1", "u1", windows) == keys


def test_near_is_per_tenant_and_user() -> None:
    assert LINE.near("t1", "u2", [(0.0, 100.0)]) == [4]
    assert LINE.near("t2", "u1", [(0.0, 100.0)]) == [6]
    assert LINE.near("t2", "u2", [(0.0, 100.0)]) == []


def test_an_index_not_built_or_given_up_does_not_answer() -> None:
    index = DialogTurns()
    index.write([(1, "t1", "u1", 10.0)])
    assert index.near("t1", "u1", [(0.0, 100.0)]) is None
    index.start()
    index.load([(1, "t1", "u1", 10.0)])
    assert index.near("t1", "u1", [(0.0, 100.0)]) is None  # still building
    index.finish(False)
    assert not index.complete
    assert index.near("t1", "u1", [(0.0, 100.0)]) is None


def test_writes_move_add_and_drop_turns() -> None:
    index = built((1, "t1", "u1", 10.0), (2, "t1", "u1", 20.0))
    index.write([(1, "t1", "u1", 30.0), (3, "t1", "u1", 15.0), (2, "t1", "u1", None)])
    assert index.near("t1", "u1", [(0.0, 100.0)]) == [3, 1]
    index.write([(3, "t1", "u2", 15.0)])  # another user's now
    index.drop([1, 99])
    assert index.near("t1", "u1", [(0.0, 100.0)]) == []
    assert index.near("t1", "u2", [(0.0, 100.0)]) == [3]


def test_a_build_skips_what_was_written_or_deleted_while_it_read() -> None:
    """A page the build read before a write may hold the point's old version; the write's
    own entry stands, and a deleted point is not brought back."""
    index = DialogTurns()
    index.start()
    index.write([(1, "t1", "u1", 40.0)])
    index.drop([2])
    index.load([(1, "t1", "u1", 10.0), (2, "t1", "u1", 20.0), (3, "t1", "u1", 30.0)])
    index.finish(True)
    assert index.near("t1", "u1", [(0.0, 100.0)]) == [3, 1]
    index.load([(4, "t1", "u1", 10.0)])  # no build running: ignored
    assert index.near("t1", "u1", [(0.0, 100.0)]) == [3, 1]


def test_an_index_past_its_size_gives_up_until_the_next_build() -> None:
    """A store grown past its record cache in one process: the index stops growing."""
    index = DialogTurns(max_turns=2)
    index.start()
    index.load([(1, "t1", "u1", 10.0), (2, "t1", "u1", 20.0)])
    index.finish(True)
    index.write([(3, "t1", "u1", None)])  # not a turn
    assert index.near("t1", "u1", [(0.0, 100.0)]) == [1, 2]
    index.write([(3, "t1", "u2", 30.0)])
    assert index.near("t1", "u1", [(0.0, 100.0)]) is None
    index.write([(4, "t1", "u1", 40.0)])
    assert index.near("t1", "u1", [(0.0, 100.0)]) is None
    index.start()
    index.load([(1, "t1", "u1", 10.0), (2, "t1", "u1", 20.0), (3, "t1", "u2", 30.0)])
    index.finish(True)
    assert not index.complete  # the build read more than fits
