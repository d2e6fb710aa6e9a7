"""Background upkeep of the embedded shard: periodic flushes and index builds.

Edge has no background optimizer of its own. ``ShardMaintenance`` starts a flush once
``FLUSH_AFTER_POINTS`` points were written since the last (added, updated in place or deleted:
the WAL replays each at open), once writes that added points have paused for ``FLUSH_QUIET_S``
(votes and deletes alone wait for their age, adr/0188) or once the oldest unflushed one is
``FLUSH_MAX_AGE_S`` old (``FlushPolicy``; a crash replays the unflushed points at open, and
replaced payload blocks are reclaimed only by a flush; the points of a failed flush count
again, and the next waits ``FLUSH_RETRY_S``), and an HNSW build once ``optimize_after`` points
are outside the graph. Neither may hold up the write that triggered it or the searches, which
keep running meanwhile on the unindexed segments (adr/0011): a flush runs on its own thread,
but the engine holds the GIL through it (its fsyncs: 0.03-0.26 s at 10k memories by the disk's
load, however few points it persists), so flushes are rationed by writes rather than run every
few seconds (adr/0160); a build (seconds to minutes) in a child process (adr/0153,
``edge_build``): the engine holds the GIL for the whole build, which on a thread here froze the
event loop for 8-11 s at 10k memories. A store whose files are deleted unread (a worker's
replica) starts no flush by itself at all (``background_flushes``, adr/0179); its WAL keeps
every segment until a build's swap, so it starts a build after ``wal_cut_after`` writes of any
kind since its last copy (adr/0184).

A background build copies the shard (writes wait for the copy), records every update from
then on (``update``: every write of the store goes through it), and when the child is done
opens the indexed copy, replays the recorded updates into it and swaps it in under the write
lock, then switches the shard's link to it (``edge_shard``): readers see one shard or the
other, both holding every acknowledged write, and so does a process that crashes at any step
(the replayed writes are in the new shard's WAL only: they count as unflushed since the copy).
A child that fails or is killed leaves the store serving unindexed; the next writes try again.
So does one stuck in its copy or its build (killed past ``COPY_TIMEOUT_S`` or
``BUILD_TIMEOUT_S``), and a build during which more than ``RECORD_LIMIT_POINTS`` are written.
Reads hold the handle they took open (``reading``): the replaced shard closes after the last.
Closing kills a running child and drops its copy.

Unindexed points are counted from the shard when it opens, then per write (adr/0124): a store
grown over many processes, or through the API in smaller batches than the threshold, is still
indexed; one that opens with ``optimize_after`` of them builds at once (``build_if_due``,
adr/0189: a process stopped during its build loses the build's work, and the next may only
read). An explicit ``optimize`` (bulk loads, the supervisor before workers copy the primary:
no request is served there) builds in this process.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import qdrant_edge as qe

from proxy.defaults import FLUSH_AFTER_POINTS, FLUSH_MAX_AGE_S, FLUSH_QUIET_S, FLUSH_RETRY_S
from proxy.memory.edge_build import BuildFailed, ChildBuild
from proxy.memory.edge_shard import current_generation, generation_dir, switch_generation

CLOSE_WAIT_S = 2.0
# A child over this long in its copy step is killed and the writes it held back go on (the
# store serves unindexed and tries again later): the copy took 0.15 s at 10k memories, so
# this is a stuck child, not a slow disk.
COPY_TIMEOUT_S = 10.0
# A child over this long in its build is killed likewise: a generous bound (the build took
# seconds at 10k memories), scaled with the shard's points so a large store still builds.
BUILD_TIMEOUT_S = 600.0
BUILD_TIMEOUT_PER_POINT_S = 0.01
# Points written during a build are recorded (vectors included) to replay into the copy:
# past this many the build is abandoned (child killed, record dropped, tried again later)
# rather than grow the record without bound; ~60 MB at 256 dimensions with their payloads.
RECORD_LIMIT_POINTS = 20_000
# A failed background build is tried again after this long (and the next write), not at once:
# a child that cannot build (a full disk) would otherwise be restarted on every write.
RETRY_AFTER_S = 60.0
# Recorded updates (an ``add`` is one, up to a batch of points) replayed into the new shard
# without the write lock, until this few remain: writes wait only for the last few.
REPLAY_LOCKED = 8
LOGGER = logging.getLogger("memproxy.store")

# Background builds still running per shard directory, so this process never opens a shard
# again while a build of the one it closed still works on its files.
_BUILDS: dict[Path, threading.Thread] = {}
_BUILDS_LOCK = threading.Lock()


def unindexed_points(shard: qe.EdgeShard) -> int:
    """Points whose dense vector is not in the graph yet. ``ShardInfo`` counts the indexed
    vectors of both kinds, and every point's sparse vector is indexed on write (its inverted
    index), so the graph holds ``indexed_vectors_count - points_count`` of them."""
    info = shard.info()
    return max(0, 2 * info.points_count - info.indexed_vectors_count)


def building(path: Path) -> bool:
    """Whether a background build left running by ``close`` still works on the shard at
    ``path`` (its files must stay until it ends)."""
    with _BUILDS_LOCK:
        build = _BUILDS.get(path.absolute())
    return build is not None and build.is_alive()


def wait_for_build(path: Path) -> None:
    """Block until a background build left running on the shard at ``path`` has ended."""
    with _BUILDS_LOCK:
        build = _BUILDS.get(path.absolute())
    if build is not None:
        build.join()


class Timer(Protocol):
    """A started one-shot timer (``threading.Timer``; tests fire theirs by hand)."""

    def cancel(self) -> None: ...


def start_timer(
    after_s: float, action: Callable[[], None], name: str = "edge-flush-quiet"
) -> Timer:
    """Run ``action`` on a daemon thread named ``name`` ``after_s`` from now."""
    timer = threading.Timer(after_s, action)
    timer.name = name
    timer.daemon = True
    timer.start()
    return timer


@dataclass(frozen=True)
class FlushPolicy:
    """When a background flush is due (adr/0160)."""

    after_points: int = FLUSH_AFTER_POINTS
    quiet_s: float = FLUSH_QUIET_S
    max_age_s: float = FLUSH_MAX_AGE_S
    retry_s: float = FLUSH_RETRY_S  # after a failed flush, none starts before this long

    def due(
        self, unflushed: int, since_write_s: float, age_s: float, *, pause: bool = True
    ) -> bool:
        """Whether to flush ``unflushed`` points written since the last flush, the newest
        ``since_write_s`` ago and the oldest ``age_s`` ago: enough of them, any once writes
        have paused (if ``pause``: some were added), or any once the oldest is old enough."""
        if unflushed <= 0:
            return False
        return (
            unflushed >= self.after_points
            or (pause and since_write_s >= self.quiet_s)
            or age_s >= self.max_age_s
        )


class ShardReads:
    """The shard's read calls, each on the current handle and holding it open meanwhile
    (``ShardMaintenance.reading``): a build's swap never closes a handle a read still uses."""

    def __init__(self, maintenance: ShardMaintenance) -> None:
        self._maintenance = maintenance

    def info(self) -> qe.ShardInfo:
        with self._maintenance.reading() as shard:
            return shard.info()

    def count(self, request: qe.CountRequest) -> int:
        with self._maintenance.reading() as shard:
            return shard.count(request)

    def query(self, request: qe.QueryRequest) -> list[qe.ScoredPoint]:
        with self._maintenance.reading() as shard:
            return shard.query(request)

    def scroll(self, request: qe.ScrollRequest) -> tuple[list[qe.Record], qe.PointId | None]:
        with self._maintenance.reading() as shard:
            return shard.scroll(request)

    def retrieve(
        self,
        ids: list[qe.PointId],
        with_payload: qe.WithPayloadType | None = None,
        with_vector: qe.WithVectorType | None = None,
    ) -> list[qe.Record]:
        with self._maintenance.reading() as shard:
            return shard.retrieve(ids, with_payload, with_vector)


class ShardMaintenance:
    """Schedules the shard's flushes and index builds; holds the shard's current handle."""

    def __init__(
        self,
        shard: qe.EdgeShard,
        optimize_after: int | None,
        *,
        path: Path | None = None,
        unindexed: int = 0,
        flush_policy: FlushPolicy | None = None,
        background_flushes: bool = True,
        wal_cut_after: int | None = None,
    ) -> None:
        self.optimize_after = optimize_after
        # Writes (updates of any kind) after which a build starts to cut the WAL; None: never.
        self.wal_cut_after = wal_cut_after
        # False: no flush starts by itself (a replica deleted at close, adr/0179); an explicit
        # ``flush`` still runs.
        self.background_flushes = background_flushes
        # Read at construction, not as a default argument: tests set the module's constants.
        self.flush_policy = flush_policy or FlushPolicy(
            FLUSH_AFTER_POINTS, FLUSH_QUIET_S, FLUSH_MAX_AGE_S, FLUSH_RETRY_S
        )
        self.shard = shard  # replaced by a background build's swap
        # The link's path, not its target: one key per shard whatever its generation.
        self._path = None if path is None else path.absolute()
        self._optimizer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="edge-optimize")
        self._flusher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="edge-flush")
        self._lock = threading.Lock()
        self._building = threading.Lock()  # one build at a time, background or explicit
        self._writes = threading.Lock()  # every update, and a build's copy and swap
        self._files = threading.Lock()  # a flush never rewrites files a build copies
        self._recorded: list[qe.UpdateOperation] | None = None  # updates since a build's copy
        self._recorded_points = 0
        self._abandoned = False  # the record grew past its bound: the build must not swap
        # The handle and its readers: a read takes the handle under this lock, and a handle
        # a build replaced is closed only once no read holds it (``_retire``).
        self._handles = threading.Condition()
        self._readers: dict[int, int] = {}  # id(handle) -> reads under way
        self._child: ChildBuild | None = None
        self._stopping = threading.Event()
        self._optimizing = False
        self._flushing = False
        self._unindexed = unindexed
        self._unflushed = 0  # points written (of any update) since the last flush started
        self._added_unflushed = False  # some of them were added: a pause flushes them
        self._uncut = 0  # updates since the last build's copy (``wal_cut_after``)
        self._last_write = time.monotonic()
        self._first_unflushed = self._last_write  # when the oldest unflushed point came
        self._quiet: Timer | None = None  # checks for a pause in the writes
        self._start_timer: Callable[[float, Callable[[], None]], Timer] = start_timer
        self._flush_retry_at = 0.0  # a failed flush holds the next one back until then
        self._retry_at = 0.0
        self._build: threading.Thread | None = None
        self._after_build: Callable[[], None] | None = None

    @contextmanager
    def reading(self) -> Iterator[qe.EdgeShard]:
        """The shard's current handle, kept open (a build's swap or not) until this exits."""
        with self._handles:
            shard = self.shard
            key = id(shard)
            self._readers[key] = self._readers.get(key, 0) + 1
        try:
            yield shard
        finally:
            with self._handles:
                left = self._readers.pop(key) - 1
                if left:
                    self._readers[key] = left
                else:
                    self._handles.notify_all()

    def update(
        self, operation: qe.UpdateOperation, points: int = 1, *, added: bool = False
    ) -> None:
        """Apply ``operation`` (of ``points`` points; ``added``: new ones) to the shard; a
        background build replays it into its copy, or is abandoned if that record grows too
        large. Then start a flush or a build cutting the WAL if one is due."""
        with self._writes:
            self.shard.update(operation)
            if self._recorded is not None:
                self._recorded.append(operation)
                self._recorded_points += points
                if self._recorded_points > RECORD_LIMIT_POINTS:
                    self._abandon()
        self._after_update(points, added)

    def _after_update(self, points: int, added: bool) -> None:
        """Note ``points`` more written to the WAL, whatever the update (an add, a payload
        update such as a vote, a delete): each is replayed at open until a flush and lost
        with the WAL's unsynced pages in a machine crash, so each counts towards one by
        points and age; a pause flushes only added points (adr/0188). And one more update
        towards a build that cuts a replica's WAL (payload updates and deletes never reach
        ``after_write``'s count of unindexed points)."""
        with self._lock:
            now = time.monotonic()
            self._last_write = now
            flush = self._count_unflushed(points, now, now, added=added)
            build = False
            if self.wal_cut_after is not None:
                self._uncut += 1
                build = self._uncut >= self.wal_cut_after and not self._optimizing
                build = build and now >= self._retry_at and not self._stopping.is_set()
                if build:
                    self._optimizing = True
        if flush:
            self._submit_flush()
        if build:
            self._start_build()

    def _abandon(self) -> None:
        """Drop the record and kill the child (the caller holds the write lock)."""
        self._recorded = None
        self._abandoned = True
        with self._lock:
            child = self._child
        if child is not None:
            child.kill()  # the build's thread gets ``BuildFailed``

    def after_write(self, points: int) -> None:
        """Note ``points`` new points outside the graph (``update`` counted them for a
        flush); start an index build when one is due."""
        with self._lock:
            self._unindexed += points
            threshold = self.optimize_after
            build = threshold is not None and self._unindexed >= threshold and not self._optimizing
            build = build and time.monotonic() >= self._retry_at and not self._stopping.is_set()
            if build:
                self._unindexed = 0
                self._optimizing = True
        if build:
            self._start_build()

    def build_if_due(self) -> None:
        """Start a build if the points already outside the graph reach ``optimize_after``
        (those counted at open: a process stopped during its build leaves them all there, and
        one that only reads would otherwise scan them for ever, adr/0189)."""
        self.after_write(0)

    def _count_unflushed(self, points: int, oldest: float, now: float, *, added: bool) -> bool:
        """Note ``points`` unflushed (``added``: new ones), the oldest written at ``oldest``;
        whether a flush starts now (else a check is armed). Under ``_lock``."""
        if self._unflushed == 0 or oldest < self._first_unflushed:
            self._first_unflushed = oldest
        self._unflushed += points
        self._added_unflushed = self._added_unflushed or added
        return self._check_flush(now)

    def _check_flush(self, now: float) -> bool:
        """Whether a flush starts now (marked started); if not, and points wait, a quiet check
        is armed for when one may be due, unless a flush runs: its end checks (under
        ``_lock``)."""
        if self._unflushed <= 0 or self._stopping.is_set() or not self.background_flushes:
            return False
        policy, pause = self.flush_policy, self._added_unflushed
        since = now - self._last_write
        age = now - self._first_unflushed
        due = policy.due(self._unflushed, since, age, pause=pause)
        if self._start_flush_if(due and now >= self._flush_retry_at):
            return True
        if not self._flushing:
            # A pause may make one due (added points only), their age, or the end of a
            # failed flush's wait: votes alone wake no sooner than their age (adr/0188).
            wake = policy.max_age_s - age
            if pause:
                wake = min(wake, policy.quiet_s - since)
            self._watch_quiet(max(wake, self._flush_retry_at - now, 0.05))
        return False

    def _submit_flush(self) -> None:
        """Hand a started flush (``_start_flush_if``) to the flush thread."""
        try:
            self._flusher.submit(self._flush_sync)
        except RuntimeError:  # closed meanwhile (a write racing ``close``): the close flushes
            self._flushing = False

    def _start_build(self) -> None:
        # A daemon thread: an executor's threads are joined at interpreter exit, which would
        # make a shutdown wait for the whole build.
        thread = threading.Thread(target=self._optimize_sync, name="edge-optimize", daemon=True)
        self._build = thread
        if self._path is not None:
            with _BUILDS_LOCK:
                _BUILDS[self._path] = thread
        thread.start()

    def _start_flush_if(self, due: bool) -> bool:
        """Mark a background flush started if ``due`` and none runs (under ``_lock``)."""
        if not due or self._flushing or self._stopping.is_set():
            return False
        self._flushing = True
        return True

    def _watch_quiet(self, after_s: float) -> None:
        """Check for a pause in the writes ``after_s`` from now (under ``_lock``): one timer
        per pause, not one per write."""
        if self._quiet is not None or self._stopping.is_set():
            return
        self._quiet = self._start_timer(after_s, self._on_quiet)

    def _on_quiet(self) -> None:
        with self._lock:
            self._quiet = None
            # Written to since, or a failed flush's wait not over: armed again for later; a
            # flush still running: its end checks (re-armed here, a timer a running flush
            # outlasts would fire every 50 ms on a new thread until it ended).
            flush = self._check_flush(time.monotonic())
        if flush:
            self._submit_flush()

    def flush(self) -> None:
        """Flush the shard now (never while a build copies its files or swaps the handle:
        the swap holds this lock too, so the handle flushed is the current one). If it fails,
        the points it was to persist count as unflushed again."""
        with self._lock:
            taken, oldest, added = self._unflushed, self._first_unflushed, self._added_unflushed
            self._unflushed, self._added_unflushed = 0, False
        try:
            with self._files:
                self.shard.flush()
        except BaseException:
            with self._lock:
                if taken and (self._unflushed == 0 or oldest < self._first_unflushed):
                    self._first_unflushed = oldest
                self._unflushed += taken
                self._added_unflushed = self._added_unflushed or added
            raise

    def _flush_sync(self) -> None:
        failed = False
        try:
            self.flush()
        except Exception:  # a background thread has no caller: log, the WAL still holds the data
            LOGGER.exception("background flush of the memory store failed")
            failed = True
        finally:
            with self._lock:
                self._flushing = False
                now = time.monotonic()
                if failed:  # a failing disk: not one flush per write
                    self._flush_retry_at = now + self.flush_policy.retry_s
                # Writes that came during the flush: one more now if due, else a quiet check.
                flush = self._check_flush(now)
            if flush:
                self._submit_flush()

    def _optimize_sync(self) -> bool:
        try:
            with self._building:
                if self._path is None:  # a shard without files of its own (tests' fakes)
                    return self.shard.optimize()
                return self._build_in_child(self._path)
        except Exception:  # searches still work on unindexed segments; try again later
            if self._stopping.is_set():
                LOGGER.info("background index build of the memory store stopped: it closed")
            else:
                LOGGER.exception("background index build of the memory store failed")
            with self._lock:  # the points it did not index are still due
                self._unindexed += self.optimize_after or 0
                self._retry_at = time.monotonic() + RETRY_AFTER_S
            return False
        finally:
            with self._lock:
                self._optimizing = False
                after, self._after_build = self._after_build, None
            if after is not None:
                after()
            if self._path is not None:
                with _BUILDS_LOCK:
                    if _BUILDS.get(self._path) is threading.current_thread():
                        del _BUILDS[self._path]

    def _build_in_child(self, path: Path) -> bool:
        """Build the index in a child on a copy, then swap the copy in (the module's doc)."""
        generation = current_generation(path) + 1
        target = generation_dir(path, generation)
        shutil.rmtree(target, ignore_errors=True)  # a copy a crash left (opening drops it too)
        child = ChildBuild(path.resolve(), target)
        swapped = False
        try:
            with self._lock:
                self._child = child
            if self._stopping.is_set():
                raise BuildFailed("the store closed")
            child.ready()
            points = self.shard.info().points_count
            phases = [time.monotonic()]
            with self._writes, self._files:
                child.copy(COPY_TIMEOUT_S)
                self._recorded, self._recorded_points, self._abandoned = [], 0, False
                with self._lock:
                    self._uncut = 0  # the built copy's WAL is cut; what comes next is replayed
            phases.append(time.monotonic())
            try:
                child.built(BUILD_TIMEOUT_S + BUILD_TIMEOUT_PER_POINT_S * points)
            finally:
                self._check_abandoned()
            phases.append(time.monotonic())
            if self._stopping.is_set():
                raise BuildFailed("the store closed")
            # Its CPU apart from its wall time: on a loaded machine the wall time is mostly
            # waiting for a core, the CPU what the engine does with the GIL held.
            opening = time.thread_time()
            built = qe.EdgeShard.load(str(target))
            open_cpu = time.thread_time() - opening
            phases.append(time.monotonic())
            old, replayed = self._swap(path, generation, built, phases)
            # From here the link names ``target``: nothing may delete it any more.
            swapped = True
            # The replayed writes are only in the new shard's WAL (a flush of the old one does
            # not persist them): unflushed since the copy, whatever the count said, so a pause
            # or their age flushes them as it would any write (adr/0160's bound on a machine
            # crash).
            with self._lock:
                flush = replayed > 0 and self._count_unflushed(
                    replayed, phases[1], time.monotonic(), added=True
                )
            if flush:
                self._submit_flush()
            self._retire(path, generation, old, built, phases)
            took = [f"{b - a:.2f}" for a, b in itertools.pairwise(phases)]
            LOGGER.info(
                "index build of the memory store done (seconds: copy %s, build in a child %s, "
                "open %s (CPU %.2f), replay %s, swap %s, close the old shard %s)",
                *took[:3],
                open_cpu,
                *took[3:],
            )
        finally:
            with self._lock:
                self._child = None
            child.close()
            with self._writes:
                self._recorded, self._abandoned = None, False
            if not swapped:
                shutil.rmtree(target, ignore_errors=True)
        return True

    def _swap(
        self, path: Path, generation: int, built: qe.EdgeShard, phases: list[float]
    ) -> tuple[qe.EdgeShard, int]:
        """Replay the updates recorded since the copy into ``built`` and make it the shard;
        return the shard it replaced and the points replayed. ``BuildFailed`` (``built``
        closed) if the store closes first."""
        replayed = 0
        try:
            while True:
                with self._writes:
                    self._check_abandoned()
                    recorded = self._recorded or []
                    if len(recorded) <= REPLAY_LOCKED or self._stopping.is_set():
                        break
                    replayed += self._recorded_points
                    self._recorded, self._recorded_points = [], 0
                for operation in recorded:  # writes go on meanwhile, recorded again
                    built.update(operation)
            phases.append(time.monotonic())
            with self._writes, self._files:
                if self._stopping.is_set():
                    raise BuildFailed("the store closed")
                self._check_abandoned()
                for operation in self._recorded or []:
                    built.update(operation)
                replayed += self._recorded_points
                # ``built`` holds every acknowledged write: the link may name it now.
                switch_generation(path, generation)
                with self._handles:
                    old, self.shard = self.shard, built
                self._recorded = None
        except BaseException:
            built.close()
            raise
        phases.append(time.monotonic())
        return old, replayed

    def _check_abandoned(self) -> None:
        if self._abandoned:
            raise BuildFailed(
                f"over {RECORD_LIMIT_POINTS} points written during the index build: abandoned"
            )

    def _wait_for_readers(self, shard: qe.EdgeShard) -> None:
        """Block until no read holds ``shard`` (a handle no read can take any more)."""
        with self._handles:
            self._handles.wait_for(lambda: id(shard) not in self._readers)

    def _retire(
        self,
        path: Path,
        generation: int,
        old: qe.EdgeShard,
        built: qe.EdgeShard,
        phases: list[float],
    ) -> None:
        """After the swap: count what the replay left unindexed, close the replaced shard once
        its last readers are done and drop its generation (whatever fails on the way)."""
        try:
            unindexed = unindexed_points(built)  # the replayed writes, counted anew
            with self._lock:
                self._unindexed = unindexed
        finally:
            self._wait_for_readers(old)
            retired = time.monotonic()
            try:
                # A background flush may have taken ``old`` just before the swap: never close
                # the shard under its flush.
                with self._files:
                    old.close()
            finally:
                phases.append(phases[-1] + time.monotonic() - retired)  # the wait is no cost
                shutil.rmtree(generation_dir(path, generation - 1), ignore_errors=True)

    def settle(self) -> None:
        """Wait for a background flush already started (blocking; its thread runs in order)."""
        self._flusher.submit(lambda: None).result()

    def _optimize_now(self) -> bool:
        with self._building:
            return self.shard.optimize()

    async def optimize(self) -> bool:
        """Build the HNSW index for everything written so far in this process (waits until
        done; for bulk loads, where no request is being served)."""
        with self._lock:
            self._unindexed = 0
        return await asyncio.get_running_loop().run_in_executor(self._optimizer, self._optimize_now)

    def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        """Kill a background build's child, wait for a running flush and for the build's
        thread at most ``wait_s``; stop the threads."""
        self._stopping.set()
        with self._lock:
            child = self._child
            quiet, self._quiet = self._quiet, None
        if quiet is not None:
            quiet.cancel()
        if child is not None:
            child.kill()
        self._optimizer.shutdown(wait=True)
        self._flusher.shutdown(wait=True)
        if self._build is not None:
            self._build.join(wait_s)

    def when_idle(self, action: Callable[[], None]) -> bool:
        """Run ``action`` now if no background build runs (True), else when it ends (False)."""
        with self._lock:
            if self._optimizing:
                self._after_build = action
                return False
        action()
        return True
