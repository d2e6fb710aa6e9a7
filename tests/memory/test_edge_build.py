"""Background index builds in a child process (adr/0153): a real small shard, a real child.

Each test holds the child between its copy and its swap (``HeldBuild``), so writes, failures
and closes land exactly while a build is under way.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest
import qdrant_edge as qe

from proxy.context.records import MemoryRecord
from proxy.errors import StoreError
from proxy.memory import edge, edge_build, edge_maintenance
from proxy.memory.edge import SHARD_DIR, EdgeStore
from proxy.memory.edge_build import copy_sparse
from proxy.memory.edge_maintenance import unindexed_points
from proxy.memory.edge_shard import INDEXING_THRESHOLD_KB, open_shard
from proxy.memory.store import SearchQuery
from tests.memory.support import record, vector_for, vectors_for

DIMS = 256
POINTS = INDEXING_THRESHOLD_KB * 1024 // (DIMS * 4) + 100  # enough for an indexed segment
SAFETY_S = 60  # a bound on waits that should end at once, never a measured time


class HeldBuild(edge_build.ChildBuild):
    """A child build that stops after its copy until ``release``, and says when it got there."""

    copied = threading.Event()
    release = threading.Event()
    started: ClassVar[list[HeldBuild]] = []

    def __init__(self, source: Path, target: Path) -> None:
        super().__init__(source, target)
        HeldBuild.started.append(self)

    def built(self, timeout_s: float | None = None) -> None:
        HeldBuild.copied.set()
        HeldBuild.release.wait(SAFETY_S)
        super().built(timeout_s)

    def kill(self) -> None:
        super().kill()
        HeldBuild.release.set()  # a closing store wakes the waiting build

    @property
    def pid(self) -> int:
        return self._process.pid

    def ended(self) -> bool:
        return self._process.poll() is not None


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> type[HeldBuild]:
    HeldBuild.copied = threading.Event()
    HeldBuild.release = threading.Event()
    HeldBuild.started = []
    monkeypatch.setattr(edge_maintenance, "ChildBuild", HeldBuild)
    return HeldBuild


async def build_started(tmp_path: Path) -> EdgeStore:
    """A store whose first ``POINTS`` writes started a background build, held after the copy."""
    store = await EdgeStore.open(tmp_path, dimensions=DIMS, optimize_after=POINTS)
    first = [record(f"m{i}", content=f"note {i}") for i in range(POINTS)]
    await store.add(first, vectors_for(first, DIMS))
    assert await asyncio.to_thread(HeldBuild.copied.wait, SAFETY_S)
    return store


async def build_ended(tmp_path: Path) -> None:
    await asyncio.to_thread(edge_maintenance.wait_for_build, tmp_path / SHARD_DIR)


async def test_a_build_keeps_every_write_made_during_it(
    tmp_path: Path, held: type[HeldBuild]
) -> None:
    store = await build_started(tmp_path)
    try:
        later = await write_during_the_build(store)
        held.release.set()
        await build_ended(tmp_path)
        assert os.readlink(tmp_path / SHARD_DIR) == f"{SHARD_DIR}.g1"  # swapped in
        assert not (tmp_path / f"{SHARD_DIR}.g0").exists()  # the old generation is gone
        # The copy's points are in the graph (a rewritten or deleted one may count either way).
        assert unindexed_points(store._shard) <= len(later)
        await expect_every_write(store, len(later))
    finally:
        await store.close()
    reopened = await EdgeStore.open(tmp_path, dimensions=DIMS, optimize_after=None)
    try:
        await expect_every_write(reopened, len(later))
    finally:
        await reopened.close()


async def write_during_the_build(store: EdgeStore) -> list[MemoryRecord]:
    """Adds, a delete, a rating and a supersession while the build runs; the adds returned."""
    later = [record(f"late{i}", content=f"later note {i}") for i in range(150)]
    for i in range(0, len(later), 10):  # more updates than the swap replays under its lock
        await store.add(later[i : i + 10], vectors_for(later[i : i + 10], DIMS))
    assert await store.delete("t1", "m0")
    assert await store.set_usefulness("t1", "m1", 0.9) is not None
    assert await store.supersede("t1", "m2", "late0") is not None
    return later


async def expect_every_write(store: EdgeStore, later: int) -> None:
    assert await store.count("t1") == POINTS - 1 + later
    assert await store.get("t1", "m0") is None
    assert await store.get("t1", f"late{later - 1}") is not None
    useful = await store.get("t1", "m1")
    assert useful is not None
    assert useful.usefulness == 0.9
    superseded = await store.get("t1", "m2")
    assert superseded is not None
    assert superseded.superseded_by == "late0"


async def test_a_killed_child_leaves_the_store_serving(
    tmp_path: Path, held: type[HeldBuild], caplog: pytest.LogCaptureFixture
) -> None:
    store = await build_started(tmp_path)
    try:
        child = held.started[0]
        os.kill(child.pid, signal.SIGKILL)  # the kernel's OOM killer, say
        held.release.set()
        await build_ended(tmp_path)
        assert "background index build of the memory store failed" in caplog.text
        assert os.readlink(tmp_path / SHARD_DIR) == f"{SHARD_DIR}.g0"  # still the old shard
        assert not (tmp_path / f"{SHARD_DIR}.g1").exists()  # its half-built copy dropped
        extra = [record("after", content="written after the failed build")]
        await store.add(extra, vectors_for(extra, DIMS))
        assert await store.count("t1") == POINTS + 1
        assert await store.get("t1", "m5") is not None
        assert unindexed_points(store._shard) == POINTS + 1  # tried again later
    finally:
        await store.close()


async def test_close_during_a_build_leaves_no_child_and_one_shard(
    tmp_path: Path, held: type[HeldBuild]
) -> None:
    store = await build_started(tmp_path)
    child = held.started[0]
    await store.close()
    assert child.ended()  # killed and reaped by close
    await build_ended(tmp_path)
    assert os.readlink(tmp_path / SHARD_DIR) == f"{SHARD_DIR}.g0"
    assert not (tmp_path / f"{SHARD_DIR}.g1").exists()
    reopened = await EdgeStore.open(tmp_path, dimensions=DIMS, optimize_after=None)
    try:
        assert await reopened.count("t1") == POINTS
        query = SearchQuery(vector_for("note 7", DIMS), "note 7", "u1", None, top_k=5)
        assert await reopened.search("t1", query)
    finally:
        await reopened.close()


def test_a_sparse_copy_keeps_the_bytes_and_the_holes(tmp_path: Path) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    with open(source, "wb") as out:
        out.write(b"head")
        out.seek(8 << 20)
        out.write(b"middle")
        out.truncate(32 << 20)  # a shard's page: mostly a hole
    copy_sparse(str(source), str(target))
    assert target.read_bytes() == source.read_bytes()
    assert target.stat().st_blocks * 512 < 1 << 20  # the holes were not written


def test_the_child_leaves_the_copys_payload_indexes_paged_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shard = open_shard(tmp_path / "copy", DIMS)
    shard.close()
    advised: list[tuple[str, int]] = []

    def advise(fd: int, offset: int, length: int, advice: int) -> None:
        advised.append((os.readlink(f"/proc/self/fd/{fd}"), advice))

    monkeypatch.setattr(os, "posix_fadvise", advise, raising=False)
    edge_build.build_copy(tmp_path / "copy")
    index_files = {
        str(path)
        for path in (tmp_path / "copy").rglob("*")
        if path.is_file() and edge_build.PREFETCH_DIR in path.parts
    }
    assert index_files  # the shard's tenant, user, source, ... indexes
    assert sorted(advised) == sorted((path, os.POSIX_FADV_WILLNEED) for path in index_files)


async def test_a_failure_after_the_link_switched_keeps_the_new_generation(
    tmp_path: Path, held: type[HeldBuild], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await build_started(tmp_path)
    try:

        def fails(shard: object) -> int:
            raise RuntimeError("the count after the swap failed")

        monkeypatch.setattr(edge_maintenance, "unindexed_points", fails)
        held.release.set()
        await build_ended(tmp_path)
        assert os.readlink(tmp_path / SHARD_DIR) == f"{SHARD_DIR}.g1"
        assert (tmp_path / f"{SHARD_DIR}.g1" / "edge_config.json").exists()  # the live files
        extra = [record("after", content="written after the swap")]
        await store.add(extra, vectors_for(extra, DIMS))
        assert await store.count("t1") == POINTS + 1
    finally:
        await store.close()
    reopened = await EdgeStore.open(tmp_path, dimensions=DIMS, optimize_after=None)
    try:
        assert await reopened.count("t1") == POINTS + 1
    finally:
        await reopened.close()


def test_the_child_runs_this_code_whatever_the_working_directory_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python -m`` puts the working directory first on the path: a server started in a
    directory holding another ``proxy`` package (an older checkout) must not run that one."""
    shadow = tmp_path / "cwd" / "proxy"
    (shadow / "memory").mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    (shadow / "memory" / "__init__.py").write_text("")
    (shadow / "memory" / "edge_build.py").write_text("raise SystemExit(3)\n")
    monkeypatch.chdir(shadow.parent)
    source = tmp_path / "shard"
    open_shard(source, DIMS).close()
    child = edge_build.ChildBuild(source, tmp_path / "copy")
    try:
        child.ready()
        child.copy()
        child.built()
    finally:
        child.close()
    assert (tmp_path / "copy" / "edge_config.json").exists()


async def test_another_process_opening_a_store_in_use_deletes_nothing(
    tmp_path: Path, held: type[HeldBuild]
) -> None:
    """A CLI run against a served data dir fails on the shard's lock; before it did, it had
    dropped the server's build copy as a crash's leftover."""
    store = await build_started(tmp_path)
    try:
        opener = (
            "import asyncio, sys\n"
            "from proxy.memory.edge import EdgeStore\n"
            f"asyncio.run(EdgeStore.open(sys.argv[1], dimensions={DIMS}, optimize_after=None))\n"
        )
        other = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", opener, str(tmp_path)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert "StoreError" in other.stderr  # the shard's lock
        assert (tmp_path / f"{SHARD_DIR}.g1").is_dir()
        held.release.set()
        await build_ended(tmp_path)
        assert os.readlink(tmp_path / SHARD_DIR) == f"{SHARD_DIR}.g1"  # swapped in
        assert await store.count("t1") == POINTS
    finally:
        await store.close()


class ReplayingShard:
    """The built shard, with ``during`` run at its first replayed update (writes go on
    meanwhile: the first updates are replayed without the write lock)."""

    def __init__(self, shard: object, during: Callable[[], None]) -> None:
        self._shard, self._during = shard, during

    def update(self, operation: object) -> None:
        during, self._during = self._during, lambda: None
        during()
        self._shard.update(operation)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._shard, name)


async def test_writes_made_while_the_recorded_ones_replay_are_kept(
    tmp_path: Path, held: type[HeldBuild], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await build_started(tmp_path)
    try:
        later = [record(f"late{i}", content=f"later note {i}") for i in range(40)]
        for i in range(0, len(later), 2):  # more updates than the swap replays under its lock
            await store.add(later[i : i + 2], vectors_for(later[i : i + 2], DIMS))
        racing = [record("racing", content="written while the replay runs")]

        def during() -> None:
            store.add_sync(racing, vectors_for(racing, DIMS))
            assert store._delete_sync("t1", "late3")
            assert store._update_usefulness_sync("t1", "m4", lambda _: 0.25) is not None

        load = qe.EdgeShard.load
        fake = SimpleNamespace(
            EdgeShard=SimpleNamespace(load=lambda path: ReplayingShard(load(path), during))
        )
        monkeypatch.setattr(edge_maintenance, "qe", fake)
        held.release.set()
        await build_ended(tmp_path)
        assert os.readlink(tmp_path / SHARD_DIR) == f"{SHARD_DIR}.g1"
        assert isinstance(store._shard, ReplayingShard)  # the swapped-in shard serves
        monkeypatch.undo()
        await expect_racing_writes(store, len(later))
    finally:
        await store.close()
    reopened = await EdgeStore.open(tmp_path, dimensions=DIMS, optimize_after=None)
    try:
        await expect_racing_writes(reopened, len(later))
    finally:
        await reopened.close()


async def expect_racing_writes(store: EdgeStore, later: int) -> None:
    assert await store.count("t1") == POINTS + later  # + racing - late3
    assert await store.get("t1", "racing") is not None
    assert await store.get("t1", "late3") is None
    useful = await store.get("t1", "m4")
    assert useful is not None
    assert useful.usefulness == 0.25


class ChattyBuild(edge_build.ChildBuild):
    """A child that answers the copy with a line of its own, then goes on for ever (a library
    printing to its standard output, say)."""

    def __init__(self, source: Path, target: Path) -> None:
        script = (
            "import sys, time\n"
            "print('ready', flush=True)\n"
            "sys.stdin.readline()\n"
            "print('loading segments...', flush=True)\n"
            "time.sleep(3600)\n"
        )
        self.source, self.target = source, target
        self._process = subprocess.Popen(
            [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )


def test_a_child_that_says_anything_else_is_ended_not_waited_for(tmp_path: Path) -> None:
    """The copy step holds every write back: a child that strays from its lines must not
    keep them waiting until it exits on its own."""
    child = ChattyBuild(tmp_path / "shard", tmp_path / "copy")
    failed: list[BaseException] = []

    def copy() -> None:
        try:
            child.ready()
            child.copy()
        except edge_build.BuildFailed as exc:
            failed.append(exc)

    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    thread.join(SAFETY_S)
    try:
        assert not thread.is_alive()
        assert failed
    finally:
        child.close()


def test_the_child_is_out_of_reach_of_the_terminals_interrupt(tmp_path: Path) -> None:
    """Ctrl-C goes to the terminal's whole foreground process group: the child must not get
    it (the server kills it as it closes)."""
    source = tmp_path / "shard"
    open_shard(source, DIMS).close()
    child = edge_build.ChildBuild(source, tmp_path / "copy")
    try:
        child.ready()
        assert os.getpgid(child._process.pid) != os.getpgrp()
    finally:
        child.close()


class StuckBuild(edge_build.ChildBuild):
    """A real child that stops for good in its copy step (``copied`` False) or its build."""

    copying = threading.Event()
    copied = True

    def __init__(self, source: Path, target: Path) -> None:
        said = "print('copied', flush=True)\n" if self.copied else ""
        script = (
            "import sys, time\n"
            "print('ready', flush=True)\n"
            f"sys.stdin.readline()\n{said}"
            "time.sleep(3600)\n"
        )
        self.source, self.target = source, target
        self._process = subprocess.Popen(
            [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def copy(self, timeout_s: float | None = None) -> None:
        StuckBuild.copying.set()  # the caller holds every write back from here
        super().copy(timeout_s)


class StuckCopy(StuckBuild):
    copied = False


async def test_a_child_stuck_in_its_copy_is_killed_and_writes_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    StuckBuild.copying = threading.Event()
    monkeypatch.setattr(edge_maintenance, "ChildBuild", StuckCopy)
    monkeypatch.setattr(edge_maintenance, "COPY_TIMEOUT_S", 0.1)
    store = await EdgeStore.open(tmp_path, dimensions=DIMS, optimize_after=POINTS)
    try:
        first = [record(f"m{i}", content=f"note {i}") for i in range(POINTS)]
        await store.add(first, vectors_for(first, DIMS))
        assert await asyncio.to_thread(StuckBuild.copying.wait, SAFETY_S)
        extra = [record("after", content="written while the child was stuck")]
        await asyncio.wait_for(store.add(extra, vectors_for(extra, DIMS)), SAFETY_S)
        await asyncio.wait_for(build_ended(tmp_path), SAFETY_S)
        assert "took over 0.1 s before 'copied'" in caplog.text
        assert os.readlink(tmp_path / SHARD_DIR) == f"{SHARD_DIR}.g0"
        assert not (tmp_path / f"{SHARD_DIR}.g1").exists()
        assert await store.count("t1") == POINTS + 1
        assert store._maintenance._retry_at > 0  # tried again later, as a failed build
    finally:
        await store.close()


async def test_a_child_stuck_in_its_build_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(edge_maintenance, "ChildBuild", StuckBuild)
    monkeypatch.setattr(edge_maintenance, "BUILD_TIMEOUT_S", 0.1)
    monkeypatch.setattr(edge_maintenance, "BUILD_TIMEOUT_PER_POINT_S", 0.0)
    store = await EdgeStore.open(tmp_path, dimensions=DIMS, optimize_after=POINTS)
    try:
        first = [record(f"m{i}", content=f"note {i}") for i in range(POINTS)]
        await store.add(first, vectors_for(first, DIMS))
        await asyncio.wait_for(build_ended(tmp_path), SAFETY_S)
        assert "took over 0.1 s before 'built'" in caplog.text
        assert os.readlink(tmp_path / SHARD_DIR) == f"{SHARD_DIR}.g0"
        assert await store.count("t1") == POINTS
    finally:
        await store.close()


async def test_a_build_is_abandoned_when_its_record_outgrows_the_bound(
    tmp_path: Path,
    held: type[HeldBuild],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(edge_maintenance, "RECORD_LIMIT_POINTS", 20)
    store = await build_started(tmp_path)
    try:
        later = [record(f"late{i}", content=f"later note {i}") for i in range(30)]
        for i in range(0, len(later), 10):
            await store.add(later[i : i + 10], vectors_for(later[i : i + 10], DIMS))
        assert store._maintenance._recorded is None  # dropped at once, not at the swap
        assert held.started[0].ended()  # its child killed
        await build_ended(tmp_path)
        assert "abandoned" in caplog.text
        assert os.readlink(tmp_path / SHARD_DIR) == f"{SHARD_DIR}.g0"
        assert not (tmp_path / f"{SHARD_DIR}.g1").exists()
        assert await store.count("t1") == POINTS + len(later)
        assert store._maintenance._retry_at > 0
    finally:
        await store.close()


class HeldReads:
    """The old shard, whose first count waits for ``go`` (set when the swap's retire is
    about to close it, or when it closes)."""

    def __init__(self, shard: qe.EdgeShard) -> None:
        self._shard = shard
        self.reading = threading.Event()
        self.go = threading.Event()

    def count(self, request: qe.CountRequest) -> int:
        self.reading.set()
        self.go.wait(SAFETY_S)
        return self._shard.count(request)

    def close(self) -> None:
        self.go.set()
        self._shard.close()

    def __getattr__(self, name: str) -> object:
        return getattr(self._shard, name)


async def test_a_read_holding_the_replaced_shard_still_gets_its_answer(
    tmp_path: Path, held: type[HeldBuild], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await build_started(tmp_path)
    try:
        old = HeldReads(store._maintenance.shard)
        store._maintenance.shard = old  # type: ignore[assignment]
        wait = getattr(edge_maintenance.ShardMaintenance, "_wait_for_readers", None)

        def waits(self: edge_maintenance.ShardMaintenance, shard: qe.EdgeShard) -> None:
            old.go.set()  # the retire waits for the read: let it go on
            if wait is not None:
                wait(self, shard)

        monkeypatch.setattr(
            edge_maintenance.ShardMaintenance, "_wait_for_readers", waits, raising=False
        )
        counting = asyncio.ensure_future(store.count("t1"))
        assert await asyncio.to_thread(old.reading.wait, SAFETY_S)
        held.release.set()
        assert await counting == POINTS  # not "Shard is not initialized"
        await build_ended(tmp_path)
        assert os.readlink(tmp_path / SHARD_DIR) == f"{SHARD_DIR}.g1"
        assert store._maintenance.shard is not old
    finally:
        await store.close()


async def test_no_flush_runs_while_the_swap_replaces_the_handle(
    tmp_path: Path, held: type[HeldBuild], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await build_started(tmp_path)
    try:
        switch = edge_maintenance.switch_generation
        free: list[bool] = []

        def switching(path: Path, generation: int) -> None:
            files = store._maintenance._files  # what ``flush`` takes before the handle
            free.append(files.acquire(blocking=False))
            if free[-1]:
                files.release()
            switch(path, generation)

        monkeypatch.setattr(edge_maintenance, "switch_generation", switching)
        held.release.set()
        await build_ended(tmp_path)
        assert free == [False]
        assert os.readlink(tmp_path / SHARD_DIR) == f"{SHARD_DIR}.g1"
    finally:
        await store.close()


class CountingFlushes:
    """The built shard, counting its flushes."""

    def __init__(self, shard: object) -> None:
        self._shard, self.flushes = shard, 0

    def flush(self) -> None:
        self.flushes += 1
        self._shard.flush()  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._shard, name)


def count_built_flushes(monkeypatch: pytest.MonkeyPatch) -> list[CountingFlushes]:
    """Each shard the swap loads from here on, counting its flushes (in load order)."""
    built: list[CountingFlushes] = []
    load = qe.EdgeShard.load

    def loaded(path: str) -> CountingFlushes:
        built.append(CountingFlushes(load(path)))
        return built[-1]

    monkeypatch.setattr(
        edge_maintenance, "qe", SimpleNamespace(EdgeShard=SimpleNamespace(load=loaded))
    )
    return built


async def test_writes_replayed_into_the_new_shard_are_flushed_when_due(
    tmp_path: Path, held: type[HeldBuild], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await build_started(tmp_path)
    maintenance = store._maintenance
    never = edge_maintenance.FlushPolicy(after_points=10**9, quiet_s=3600.0, max_age_s=3600.0)
    maintenance.flush_policy = never
    try:
        later = [record(f"late{i}", content=f"later note {i}") for i in range(20)]
        await store.add(later, vectors_for(later, DIMS))
        # The old shard persists them: the count of unflushed points is back to 0, but the
        # copy holds them only once replayed, in its WAL.
        await store.flush()
        built = count_built_flushes(monkeypatch)
        maintenance.flush_policy = replace(never, max_age_s=0.0)  # any unflushed point is due
        held.release.set()
        await build_ended(tmp_path)
        assert os.readlink(tmp_path / SHARD_DIR) == f"{SHARD_DIR}.g1"
        await asyncio.to_thread(maintenance.settle)
        assert [shard.flushes for shard in built] == [1]
    finally:
        monkeypatch.undo()
        await store.close()


async def test_close_during_a_copy_with_a_flush_and_a_write_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    StuckBuild.copying = threading.Event()
    monkeypatch.setattr(edge_maintenance, "ChildBuild", StuckCopy)  # only the close ends it
    store = await EdgeStore.open(tmp_path, dimensions=DIMS, optimize_after=POINTS)
    first = [record(f"m{i}", content=f"note {i}") for i in range(POINTS)]
    await store.add(first, vectors_for(first, DIMS))
    assert await asyncio.to_thread(StuckBuild.copying.wait, SAFETY_S)
    maintenance = store._maintenance
    maintenance.flush_policy = edge_maintenance.FlushPolicy(after_points=1)  # every write
    with maintenance._lock:
        assert maintenance._start_flush_if(True)
    maintenance._flusher.submit(maintenance._flush_sync)  # a due flush, waiting for the copy
    extra = [record("after", content="written while the child copied")]
    writing = asyncio.ensure_future(store.add(extra, vectors_for(extra, DIMS)))  # waits too
    await asyncio.wait_for(store.close(), SAFETY_S)  # kills the child: neither waits for ever
    (written,) = await asyncio.wait_for(asyncio.gather(writing, return_exceptions=True), SAFETY_S)
    # The write lands before the shard closes, or fails as the store's error if it comes
    # after; never as the flush thread's (shut down by the close).
    assert written is None or isinstance(written, StoreError), written
    await build_ended(tmp_path)
    assert maintenance._quiet is None
    reopened = await EdgeStore.open(tmp_path, dimensions=DIMS, optimize_after=None)
    try:
        assert await reopened.count("t1") == POINTS + (written is None)
    finally:
        await reopened.close()


async def test_a_build_of_a_never_flushed_replica_swaps_in_with_every_write(
    tmp_path: Path, held: type[HeldBuild], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's replica flushes nothing (adr/0179): the child copies a shard whose every
    point is in its WAL only, replays it at its open, and the swap keeps every write."""
    monkeypatch.setattr(edge_maintenance, "FLUSH_AFTER_POINTS", 1)  # every write is due
    store = await EdgeStore.open(tmp_path, dimensions=DIMS, optimize_after=POINTS, persistent=False)
    copied = CountingFlushes(store._shard)
    store._shard = copied  # type: ignore[assignment]
    built = count_built_flushes(monkeypatch)
    try:
        first = [record(f"m{i}", content=f"note {i}") for i in range(POINTS)]
        await store.add(first, vectors_for(first, DIMS))
        assert await asyncio.to_thread(held.copied.wait, SAFETY_S)
        later = await write_during_the_build(store)
        held.release.set()
        await build_ended(tmp_path)
        assert os.readlink(tmp_path / SHARD_DIR) == f"{SHARD_DIR}.g1"  # swapped in
        assert unindexed_points(store._shard) <= len(later)
        await expect_every_write(store, len(later))
        await asyncio.to_thread(store._maintenance.settle)
        assert copied.flushes == 0  # the copy was of a shard never flushed
        assert [shard.flushes for shard in built] == [0]  # nor are the replayed writes
    finally:
        monkeypatch.undo()
        await store.close()


async def test_a_replica_cuts_its_wal_with_a_build_after_so_many_writes(
    tmp_path: Path, held: type[HeldBuild], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica never flushes and its votes add no unindexed points: past
    ``REPLICA_WAL_CUT_WRITES`` writes since its last copy a build starts, whose flushed copy
    swaps in with a cut WAL (adr/0184); the writes after the copy count toward the next."""
    monkeypatch.setattr(edge, "REPLICA_WAL_CUT_WRITES", 12)
    store = await EdgeStore.open(tmp_path, dimensions=DIMS, optimize_after=None, persistent=False)
    try:
        first = [record(f"m{i}", content=f"note {i}") for i in range(10)]
        await store.add(first, vectors_for(first, DIMS))  # one write
        for i in range(11):
            assert await store.set_usefulness("t1", f"m{i % 10}", 0.5) is not None
        assert await asyncio.to_thread(held.copied.wait, SAFETY_S)
        for i in range(3):
            assert await store.set_usefulness("t1", f"m{i}", 0.9) is not None
        held.release.set()
        await build_ended(tmp_path)
        assert os.readlink(tmp_path / SHARD_DIR) == f"{SHARD_DIR}.g1"  # swapped in
        assert len(held.started) == 1
        assert store._maintenance._uncut == 3
        useful = await store.get("t1", "m2")
        assert useful is not None
        assert useful.usefulness == 0.9
    finally:
        await store.close()
