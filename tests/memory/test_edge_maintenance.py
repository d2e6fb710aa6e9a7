"""ShardMaintenance: when flushes and index builds start, with a recording fake shard (the
child builds on real shards: ``test_edge_build``)."""

from __future__ import annotations

import asyncio
import threading
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


def test_a_flush_waits_for_the_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    shard = RecordingShard()
    monkeypatch.setattr(edge_maintenance, "FLUSH_INTERVAL_S", 3600.0)
    maintenance = ShardMaintenance(shard, None)  # type: ignore[arg-type]
    maintenance.after_write(1)
    monkeypatch.setattr(edge_maintenance, "FLUSH_INTERVAL_S", 0.0)
    maintenance.after_write(1)
    maintenance.close()
    assert shard.flushes == 1  # the first write came before the interval had passed


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
    maintenance._stopping.set()  # closing: no grace period before ``old`` closes
    maintenance._retire(tmp_path / "memories", 1, old, built, [0.0])  # type: ignore[arg-type]
    flush.join()
    assert old.closed_mid_flush is False
