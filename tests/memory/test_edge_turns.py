"""The embedded store's index of dialog turns (``edge_turns``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.context.records import MemoryRecord
from proxy.memory.edge_turns import DialogTurns, listed_at
from proxy.memory.filters import DIALOG_SOURCE
from tests.memory.support import record

BIG = 1 << 127  # a UUID store's keys are 128-bit


def built(*turns: tuple[int, str, str, float], max_turns: int | None = None) -> DialogTurns:
    index = DialogTurns(max_turns)
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


# What the index lists of a record: a dialog turn not superseded, at its creation time. Expired
# turns stay (expiry is each search's ``live_at``'s); an empty mark reads back as none.
AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.mark.parametrize(
    ("memory", "listed"),
    [
        (record("a", source=DIALOG_SOURCE), AT.timestamp()),
        (record("a", source="notes"), None),
        (record("a", source=DIALOG_SOURCE, superseded_by="b"), None),
        (record("a", source=DIALOG_SOURCE, superseded_by=""), AT.timestamp()),
        (record("a", source=DIALOG_SOURCE, expires_at=AT - timedelta(days=1)), AT.timestamp()),
    ],
)
def test_the_index_lists_dialog_turns_not_superseded(
    memory: MemoryRecord, listed: float | None
) -> None:
    assert listed_at(memory) == listed


def test_an_abandoned_index_asks_for_one_rebuild() -> None:
    """A write failed after its notes: the store is to build the index again, once."""
    index = built((1, "t1", "u1", 10.0))
    index.abandon()
    assert index.near("t1", "u1", [(0.0, 100.0)]) is None
    assert index.take_rebuild()
    assert not index.take_rebuild()  # taken: one build at a time
    index.start()
    index.abandon()  # during the build: it stops, and another is due
    assert index.take_rebuild()
    index.start()
    index.load([(1, "t1", "u1", 10.0)])
    index.finish(True)
    assert index.near("t1", "u1", [(0.0, 100.0)]) == [1]


def never_built() -> DialogTurns:
    return DialogTurns(max_turns=1)


def past_its_bound() -> DialogTurns:
    index = built((1, "t1", "u1", 10.0), max_turns=1)
    index.write([(2, "t1", "u1", 20.0)])
    return index


def read_in_part() -> DialogTurns:
    index = DialogTurns(max_turns=1)
    index.start()
    index.load([(1, "t1", "u1", 10.0)])
    index.finish(False)
    return index


@pytest.mark.parametrize("given_up", [never_built, past_its_bound, read_in_part])
def test_an_index_given_up_asks_for_no_rebuild(given_up: Callable[[], DialogTurns]) -> None:
    """Never built (the warm-up is the store's), given up past ``max_turns`` (a build would
    give up again) or after a build that did not read the shard (it would fail again): a
    failed write after that asks for no build."""
    index = given_up()
    assert not index.complete
    index.abandon()
    assert not index.take_rebuild()


class Shard:
    """The store's side of the index, as ``EdgeStore`` drives it: each write noted before and
    after it is visible, a failed one noted and abandoned, deletes and supersessions dropped
    once visible, and builds that read the shard a page at a time, in key order, while writes
    go on (as the warm-up's scroll does)."""

    PAGE = 2

    def __init__(self) -> None:
        self.points: dict[int, MemoryRecord] = {}
        self.index = DialogTurns()
        self.reading: int | None = None  # a build's offset: the last key it read

    @staticmethod
    def noted(key: int, memory: MemoryRecord) -> tuple[int, str, str, float | None]:
        return (key, memory.tenant, memory.user, listed_at(memory))

    def upsert(self, key: int, memory: MemoryRecord) -> None:
        self.index.write([self.noted(key, memory)])
        self.points[key] = memory
        self.index.write([self.noted(key, memory)])

    def fail(self, key: int, memory: MemoryRecord) -> None:
        self.index.write([self.noted(key, memory)])
        self.index.abandon()  # the shard kept what it held

    def delete(self, key: int) -> None:
        if self.points.pop(key, None) is not None:
            self.index.drop([key])

    def supersede(self, key: int) -> None:
        memory = self.points.get(key)
        if memory is not None and memory.superseded_by is None:
            self.points[key] = replace(memory, superseded_by="later")
            self.index.drop([key])

    def rebuild(self) -> None:
        """The store's next successful write: a build if one is due and none runs."""
        if self.reading is None and self.index.take_rebuild():
            self.start()

    def start(self) -> None:
        self.index.start()
        self.reading = -1

    def read_page(self) -> None:
        if self.reading is None:
            return
        keys = sorted(key for key in self.points if key > self.reading)[: self.PAGE]
        self.index.load(
            (key, memory.tenant, memory.user, ts)
            for key in keys
            if (ts := listed_at(memory := self.points[key])) is not None
        )
        if len(keys) < self.PAGE:
            self.index.finish(True)
            self.reading = None
        else:
            self.reading = keys[-1]

    def live_turns(
        self, tenant: str, user: str, low: float = -math.inf, high: float = math.inf
    ) -> list[int]:
        """Brute force: the keys of the user's live dialog turns created from ``low`` to
        ``high``, in time order (then key)."""
        return [
            key
            for ts, key in sorted(
                (memory.created_at.timestamp(), key)
                for key, memory in self.points.items()
                if (memory.tenant, memory.user) == (tenant, user)
                and memory.source == DIALOG_SOURCE
                and memory.live(AT)
            )
            if low <= ts <= high
        ]


OWNERS = [("t1", "u1"), ("t1", "u2"), ("t2", "u1")]
memories = st.builds(
    lambda owner, source, minute, superseded: replace(
        record("m", tenant=owner[0], user=owner[1], source=source, superseded_by=superseded),
        created_at=AT + timedelta(minutes=minute),
    ),
    st.sampled_from(OWNERS),
    st.sampled_from([DIALOG_SOURCE, DIALOG_SOURCE, "notes"]),
    st.integers(0, 5),
    st.sampled_from([None, None, None, "older"]),
)
keys = st.integers(0, 7)
steps = st.one_of(
    st.tuples(st.just("upsert"), keys, memories),
    st.tuples(st.just("fail"), keys, memories),
    st.tuples(st.just("delete"), keys),
    st.tuples(st.just("supersede"), keys),
    st.tuples(st.just("rebuild")),
    st.tuples(st.just("page")),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(steps, max_size=40))
def test_after_any_writes_the_index_lists_exactly_the_live_turns(
    ops: list[tuple[object, ...]],
) -> None:
    """Property: after any sequence of upserts, failed upserts, deletes, supersessions, builds
    and build pages (the first build started as the store opens), a complete index's ``near``
    equals a brute-force answer over the shard's turns not superseded, and once the last
    build has read all and a build due after a failed write has run, the index answers."""
    shard = Shard()
    shard.start()
    for op in ops:
        match op:
            case ("upsert", int(key), MemoryRecord() as memory):
                shard.upsert(key, memory)
                shard.rebuild()
            case ("fail", int(key), MemoryRecord() as memory):
                shard.fail(key, memory)
            case ("delete", int(key)):
                shard.delete(key)
            case ("supersede", int(key)):
                shard.supersede(key)
            case ("rebuild",):
                shard.rebuild()
            case _:
                shard.read_page()
        if shard.index.complete:
            for tenant, user in OWNERS:
                everything = [(-math.inf, math.inf)]
                assert shard.index.near(tenant, user, everything) == shard.live_turns(tenant, user)
                # A window's bounds fall on a turn's time, between two, or past the ends.
                for first, last in ((-1, 0), (1, 3), (2.5, 4.5), (5, 6)):
                    low = (AT + timedelta(minutes=first)).timestamp()
                    high = (AT + timedelta(minutes=last)).timestamp()
                    assert shard.index.near(tenant, user, [(low, high)]) == shard.live_turns(
                        tenant, user, low, high
                    )
    while shard.reading is not None:
        shard.read_page()
    shard.rebuild()
    while shard.reading is not None:
        shard.read_page()
    assert shard.index.complete
    for tenant, user in OWNERS:
        assert shard.index.near(tenant, user, [(-math.inf, math.inf)]) == shard.live_turns(
            tenant, user
        )
