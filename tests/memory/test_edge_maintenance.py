"""ShardMaintenance: when flushes and index builds start, with a recording fake shard (the
child builds on real shards: ``test_edge_build``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from proxy.memory import edge_maintenance
from proxy.memory.edge_maintenance import ShardMaintenance


class RecordingShard:
    """Counts flushes and builds; a build can be held open to test overlap."""

    def __init__(self) -> None:
        self.flushes = 0
        self.builds = 0
        self.updates: list[object] = []
        self.release = threading.Event()
        self.release.set()

    def flush(self) -> None:
        self.flushes += 1

    def update(self, operation: object) -> None:
        self.updates.append(operation)

    def optimize(self) -> bool:
        self.builds += 1
        self.release.wait(5)
        return True


def added(maintenance: ShardMaintenance, points: int) -> None:
    """What ``EdgeStore.add`` tells its maintenance about a batch of ``points`` new points."""
    maintenance.update(f"upsert {points}", points, added=True)  # type: ignore[arg-type]
    maintenance.after_write(points)


@pytest.mark.parametrize(
    ("optimize_after", "writes", "builds"),
    [
        (None, [10_000], 0),  # explicit optimize() only
        (100, [60, 39], 0),  # 99 new points: not yet
        (100, [60, 40], 1),
        (100, [250], 1),  # one build however far past the threshold
    ],
)
def test_index_builds_start_at_the_threshold(
    optimize_after: int | None, writes: list[int], builds: int
) -> None:
    shard = RecordingShard()
    maintenance = ShardMaintenance(shard, optimize_after)  # type: ignore[arg-type]
    for points in writes:
        maintenance.after_write(points)
    maintenance.close()  # waits for the threads
    assert shard.builds == builds


@pytest.mark.parametrize(
    ("unflushed", "since_write_s", "age_s", "due"),
    [
        (0, 3600.0, 3600.0, False),  # nothing written since the last flush
        (1, 0.0, 0.0, False),  # one point, writes still coming
        (1999, 1.9, 29.9, False),
        (2000, 0.0, 0.0, True),  # enough points, however busy
        (5000, 0.0, 0.0, True),
        (1, 2.0, 2.0, True),  # writes have paused: persist what there is
        (10, 0.1, 30.0, True),  # never paused, but the oldest has waited long enough
    ],
)
def test_a_flush_is_due_by_points_a_pause_or_age(
    unflushed: int, since_write_s: float, age_s: float, due: bool
) -> None:
    policy = edge_maintenance.FlushPolicy(after_points=2000, quiet_s=2.0, max_age_s=30.0)
    assert policy.due(unflushed, since_write_s, age_s) is due


@pytest.mark.parametrize(
    ("writes", "flushes"),
    [
        ([60, 39], 0),  # 99 points: not yet (and no pause: the quiet check is an hour away)
        ([60, 40], 1),
        ([250], 1),
    ],
)
def test_writes_start_a_flush_at_the_point_count(writes: list[int], flushes: int) -> None:
    shard = RecordingShard()
    policy = edge_maintenance.FlushPolicy(after_points=100, quiet_s=3600.0, max_age_s=3600.0)
    maintenance = ShardMaintenance(shard, None, flush_policy=policy)  # type: ignore[arg-type]
    for points in writes:
        added(maintenance, points)
    maintenance.close()  # waits for a running flush; a pending quiet check is dropped
    assert shard.flushes == flushes


@pytest.mark.parametrize(("quiet_s", "flushes"), [(0.0, 1), (3600.0, 0)])
def test_a_pause_in_the_writes_starts_a_flush(quiet_s: float, flushes: int) -> None:
    shard = RecordingShard()
    busy = edge_maintenance.FlushPolicy(after_points=100, quiet_s=3600.0, max_age_s=3600.0)
    maintenance = ShardMaintenance(shard, None, flush_policy=busy)  # type: ignore[arg-type]
    added(maintenance, 1)  # not due: the write itself starts no flush
    maintenance.flush_policy = replace(busy, quiet_s=quiet_s)
    maintenance._on_quiet()  # the quiet check, run now rather than by its timer
    maintenance.settle()
    assert shard.flushes == flushes
    maintenance.close()


@pytest.mark.parametrize(("max_age_s", "flushes"), [(0.0, 1), (3600.0, 0)])
def test_a_write_flushes_once_the_oldest_unflushed_is_old_enough(
    max_age_s: float, flushes: int
) -> None:
    shard = RecordingShard()
    policy = edge_maintenance.FlushPolicy(after_points=100, quiet_s=3600.0, max_age_s=max_age_s)
    maintenance = ShardMaintenance(shard, None, flush_policy=policy)  # type: ignore[arg-type]
    added(maintenance, 1)
    maintenance.close()
    assert shard.flushes == flushes


def test_a_flush_resets_the_count_of_unflushed_points() -> None:
    shard = RecordingShard()
    policy = edge_maintenance.FlushPolicy(after_points=100, quiet_s=3600.0, max_age_s=3600.0)
    maintenance = ShardMaintenance(shard, None, flush_policy=policy)  # type: ignore[arg-type]
    added(maintenance, 60)
    maintenance.flush()  # an explicit flush (the API's, or a close's) persisted those
    added(maintenance, 60)
    maintenance.close()
    assert shard.flushes == 1


def test_a_running_build_is_not_started_twice() -> None:
    shard = RecordingShard()
    shard.release.clear()  # the first build runs until released
    maintenance = ShardMaintenance(shard, 10)  # type: ignore[arg-type]
    maintenance.after_write(10)
    maintenance.after_write(10)  # due again while the first still runs
    shard.release.set()
    maintenance.close()
    assert shard.builds == 1


def test_points_unindexed_at_open_count_toward_a_build() -> None:
    shard = RecordingShard()
    maintenance = ShardMaintenance(shard, 100, unindexed=80)  # type: ignore[arg-type]
    maintenance.after_write(20)
    maintenance.close()
    assert shard.builds == 1


@pytest.mark.parametrize(("unindexed", "builds"), [(99, 0), (100, 1), (250, 1)])
def test_points_unindexed_at_open_start_a_build_without_a_write(
    unindexed: int, builds: int
) -> None:
    """A process stopped during its build left them all outside the graph; the next may only
    read (adr/0189)."""
    shard = RecordingShard()
    maintenance = ShardMaintenance(shard, 100, unindexed=unindexed)  # type: ignore[arg-type]
    maintenance.build_if_due()
    maintenance.close()
    assert shard.builds == builds


def test_no_build_at_open_without_a_threshold() -> None:
    shard = RecordingShard()
    maintenance = ShardMaintenance(shard, None, unindexed=10_000)  # type: ignore[arg-type]
    maintenance.build_if_due()  # the supervisor's primary: its explicit ``optimize`` builds
    maintenance.close()
    assert shard.builds == 0


def test_close_waits_for_a_long_in_process_build_only_a_little() -> None:
    """A shard without a directory of its own builds on a thread (a child build needs files
    to copy): closing waits for it a little, and it closes the shard when it ends."""
    shard = RecordingShard()
    shard.release.clear()  # the build runs until released
    maintenance = ShardMaintenance(shard, 10)  # type: ignore[arg-type]
    maintenance.after_write(10)
    maintenance.close(wait_s=0.01)  # returns with the build still running
    closed: list[str] = []
    assert not maintenance.when_idle(lambda: closed.append("shard"))
    assert closed == []  # the shard stays open under the build
    shard.release.set()
    assert maintenance._build is not None
    maintenance._build.join(5)
    assert closed == ["shard"]  # the build closed it when it ended
    assert maintenance.when_idle(lambda: closed.append("again"))  # idle now: runs at once
    assert closed == ["shard", "again"]


def test_updates_are_recorded_only_while_a_build_asks() -> None:
    shard = RecordingShard()
    maintenance = ShardMaintenance(shard, None)  # type: ignore[arg-type]
    maintenance.update("before")  # type: ignore[arg-type]
    maintenance._recorded = []  # what a build does once its copy is made
    maintenance.update("during")  # type: ignore[arg-type]
    maintenance.close()
    assert shard.updates == ["before", "during"]
    assert maintenance._recorded == ["during"]


async def test_an_explicit_build_waits_for_a_background_one() -> None:
    shard = RecordingShard()
    shard.release.clear()
    running = threading.Event()
    overlapped: list[bool] = []

    def optimize() -> bool:
        overlapped.append(running.is_set())
        running.set()
        shard.release.wait(5)
        running.clear()
        return True

    shard.optimize = optimize  # type: ignore[method-assign]
    maintenance = ShardMaintenance(shard, 10)  # type: ignore[arg-type]
    maintenance.after_write(10)  # a background build starts and holds
    explicit = asyncio.ensure_future(maintenance.optimize())
    await asyncio.sleep(0.05)
    shard.release.set()
    assert await explicit
    maintenance.close()
    assert overlapped == [False, False]


class SlowFlushShard:
    """Its flush waits for a close (a bounded wait: without it the close lands mid-flush)."""

    def __init__(self) -> None:
        self.flushing = threading.Event()
        self.closed = threading.Event()
        self.in_flush = False
        self.closed_mid_flush: bool | None = None

    def flush(self) -> None:
        self.in_flush = True
        self.flushing.set()
        self.closed.wait(0.5)
        self.in_flush = False

    def close(self) -> None:
        self.closed_mid_flush = self.in_flush
        self.closed.set()

    def info(self) -> SimpleNamespace:
        return SimpleNamespace(points_count=0, indexed_vectors_count=0)


def test_the_replaced_shard_is_not_closed_under_its_flush(tmp_path: Path) -> None:
    old, built = SlowFlushShard(), SlowFlushShard()
    maintenance = ShardMaintenance(old, None)  # type: ignore[arg-type]
    flush = threading.Thread(target=maintenance.flush)
    flush.start()
    assert old.flushing.wait(60)  # the flush holds ``old``
    maintenance.shard = built  # the swap
    maintenance._retire(tmp_path / "memories", 1, old, built, [0.0])  # type: ignore[arg-type]
    flush.join()
    assert old.closed_mid_flush is False


def test_a_write_racing_close_starts_no_flush_and_does_not_fail() -> None:
    shard = RecordingShard()
    policy = edge_maintenance.FlushPolicy(after_points=1, quiet_s=3600.0, max_age_s=3600.0)
    maintenance = ShardMaintenance(shard, None, flush_policy=policy)  # type: ignore[arg-type]
    maintenance.close()
    added(maintenance, 5)  # a write still under way on another thread: the close flushes
    assert shard.flushes == 0
    assert maintenance._quiet is None


class HandTimers:
    """Timers that never fire by themselves: a test fires them (no clock in the test)."""

    def __init__(self) -> None:
        self.armed: list[Callable[[], None]] = []

    def start(self, after_s: float, action: Callable[[], None]) -> SimpleNamespace:
        self.armed.append(action)
        return SimpleNamespace(cancel=lambda: None)

    def fire_last(self) -> None:
        self.armed[-1]()


class HeldFlushShard(RecordingShard):
    """Its flushes wait until ``go``; the first ``failures`` of them fail."""

    def __init__(self, failures: int = 0) -> None:
        super().__init__()
        self.go = threading.Event()
        self.go.set()
        self.in_flush = threading.Event()
        self.failures = failures

    def flush(self) -> None:
        self.in_flush.set()
        self.go.wait(SAFETY_S)
        super().flush()
        if self.failures:
            self.failures -= 1
            raise OSError("disk full")


SAFETY_S = 60  # a bound on waits that should end at once, never a measured time


def held_maintenance(
    shard: RecordingShard, policy: edge_maintenance.FlushPolicy
) -> tuple[ShardMaintenance, HandTimers]:
    maintenance = ShardMaintenance(shard, None, flush_policy=policy)  # type: ignore[arg-type]
    timers = HandTimers()
    maintenance._start_timer = timers.start  # type: ignore[assignment]
    return maintenance, timers


@pytest.mark.parametrize(
    ("quiet_checks_during_flush", "timers_armed"),
    [
        (0, 1),  # armed by the first write, before the flush
        (1, 1),  # it fires while the flush runs: not armed again, the flush's end checks
        (3, 1),  # (it was re-armed 50 ms on, on a new thread, for as long as the flush ran)
    ],
)
def test_a_quiet_check_is_not_re_armed_while_a_flush_runs(
    quiet_checks_during_flush: int, timers_armed: int
) -> None:
    shard = HeldFlushShard()
    shard.go.clear()
    busy = edge_maintenance.FlushPolicy(after_points=10, quiet_s=3600.0, max_age_s=3600.0)
    maintenance, timers = held_maintenance(shard, busy)
    added(maintenance, 5)  # not due: a quiet check is armed
    added(maintenance, 5)  # due by points: a flush, held in the engine
    assert shard.in_flush.wait(SAFETY_S)
    maintenance.flush_policy = replace(busy, quiet_s=0.0)  # from now on, writes have paused
    added(maintenance, 1)  # during the flush: its end is what checks for it
    for _ in range(quiet_checks_during_flush):
        timers.fire_last()
    assert len(timers.armed) == timers_armed
    shard.go.set()
    maintenance.settle()  # the flush's end finds the write due (a pause): one more flush
    maintenance.settle()
    assert shard.flushes == 2
    maintenance.close()


@pytest.mark.parametrize(
    ("retry_s", "writes_after", "flushes", "unflushed"),
    [
        # the failed flush's 100 points count again: due at once when retries wait for nothing
        (0.0, [], 2, 0),
        # a failing disk: no flush before the retry wait, however many writes come
        (3600.0, [], 1, 100),
        (3600.0, [1, 1], 1, 102),
    ],
)
def test_a_failed_flush_counts_its_points_as_unflushed_again(
    retry_s: float, writes_after: list[int], flushes: int, unflushed: int
) -> None:
    shard = HeldFlushShard(failures=1)
    policy = edge_maintenance.FlushPolicy(
        after_points=100, quiet_s=3600.0, max_age_s=3600.0, retry_s=retry_s
    )
    maintenance, _ = held_maintenance(shard, policy)
    added(maintenance, 100)
    maintenance.settle()  # the failed flush
    maintenance.settle()  # and the one its end started, if any
    for points in writes_after:
        added(maintenance, points)
    maintenance.settle()
    assert (shard.flushes, maintenance._unflushed) == (flushes, unflushed)
    maintenance.close()


def test_a_failed_explicit_flush_counts_its_points_as_unflushed_again() -> None:
    shard = HeldFlushShard(failures=1)
    policy = edge_maintenance.FlushPolicy(after_points=100, quiet_s=3600.0, max_age_s=3600.0)
    maintenance, _ = held_maintenance(shard, policy)
    added(maintenance, 60)
    with pytest.raises(OSError, match="disk full"):
        maintenance.flush()
    added(maintenance, 40)  # 100 unflushed: due by points
    maintenance.settle()
    assert shard.flushes == 2
    maintenance.close()


@pytest.mark.parametrize("due_by", ["points", "age", "pause"])
@pytest.mark.parametrize(("background_flushes", "flushes"), [(True, 1), (False, 0)])
def test_a_store_without_background_flushes_starts_none_by_points_age_or_pause(
    due_by: str, background_flushes: bool, flushes: int
) -> None:
    """A replica's (adr/0179): however due a flush is, none starts by itself."""
    shard = RecordingShard()
    busy = edge_maintenance.FlushPolicy(after_points=100, quiet_s=3600.0, max_age_s=3600.0)
    policy = {
        "points": replace(busy, after_points=1),
        "age": replace(busy, max_age_s=0.0),
        "pause": busy,
    }[due_by]
    maintenance = ShardMaintenance(
        shard,  # type: ignore[arg-type]
        None,
        flush_policy=policy,
        background_flushes=background_flushes,
    )
    added(maintenance, 5)
    if due_by == "pause":
        maintenance.flush_policy = replace(busy, quiet_s=0.0)
        maintenance._on_quiet()  # the quiet check, run now rather than by its timer
    maintenance.settle()
    maintenance.close()
    assert shard.flushes == flushes


def test_an_explicit_flush_runs_without_background_flushes() -> None:
    shard = RecordingShard()
    maintenance = ShardMaintenance(shard, None, background_flushes=False)  # type: ignore[arg-type]
    added(maintenance, 5)
    maintenance.flush()
    maintenance.close()
    assert shard.flushes == 1


@pytest.mark.parametrize(
    ("wal_cut_after", "updates", "builds"),
    [
        (None, 50, 0),  # a store of its own: its flushes cut the WAL
        (10, 9, 0),
        (10, 10, 1),
        (10, 25, 1),  # one build however far past the count
    ],
)
def test_a_replica_starts_a_build_after_so_many_updates(
    wal_cut_after: int | None, updates: int, builds: int
) -> None:
    """A replica flushes nothing and its payload updates and deletes add no unindexed points:
    only a build's swap cuts its WAL, so updates of any kind start one (adr/0184)."""
    shard = RecordingShard()
    shard.release.clear()  # a build started runs until every update is in
    maintenance = ShardMaintenance(
        shard,  # type: ignore[arg-type]
        None,
        background_flushes=False,
        wal_cut_after=wal_cut_after,
    )
    for n in range(updates):
        maintenance.update(n)  # type: ignore[arg-type]
    shard.release.set()
    maintenance.close()
    assert shard.builds == builds
    assert shard.flushes == 0


@pytest.mark.parametrize(
    ("due_by", "updates", "flushes"),
    [
        ("points", 99, 0),
        ("points", 100, 1),  # as many as added points would need
        ("age", 1, 1),
        ("pause", 1, 0),  # a pause flushes added points only: a vote waits for its age
    ],
)
def test_updates_in_place_start_a_flush_by_points_or_age(
    due_by: str, updates: int, flushes: int
) -> None:
    """A store that only takes votes (payload updates) or deletes: the WAL replays each at
    open until a flush and a machine crash loses them, so they count towards one by points
    and age; not by a pause, which would flush after every lone vote (adr/0188)."""
    shard = RecordingShard()
    busy = edge_maintenance.FlushPolicy(after_points=100, quiet_s=3600.0, max_age_s=3600.0)
    policy = replace(busy, max_age_s=0.0) if due_by == "age" else busy
    maintenance, timers = held_maintenance(shard, policy)
    for n in range(updates):
        maintenance.update(f"set_payload {n}")  # type: ignore[arg-type]
    if due_by == "pause":
        maintenance.flush_policy = replace(busy, quiet_s=0.0)  # writes have paused
        timers.fire_last()  # the check the update armed
    maintenance.settle()
    maintenance.close()
    assert shard.flushes == flushes


@pytest.mark.parametrize(("first_added", "flushes"), [(True, 1), (False, 0)])
def test_a_pause_flushes_updates_in_place_with_added_points(
    first_added: bool, flushes: int
) -> None:
    shard = RecordingShard()
    busy = edge_maintenance.FlushPolicy(after_points=100, quiet_s=3600.0, max_age_s=3600.0)
    maintenance, timers = held_maintenance(shard, busy)
    maintenance.update("upsert", added=first_added)  # type: ignore[arg-type]
    maintenance.update("set_payload")  # type: ignore[arg-type]
    maintenance.flush_policy = replace(busy, quiet_s=0.0)  # writes have paused
    timers.fire_last()
    maintenance.settle()
    assert shard.flushes == flushes
    maintenance.flush_policy = replace(busy, max_age_s=0.0)  # ...and the oldest is old enough
    timers.fire_last()  # the check re-armed if nothing was due (else a spent one)
    maintenance.settle()
    maintenance.close()
    assert shard.flushes == 1
