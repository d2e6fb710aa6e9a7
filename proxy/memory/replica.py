"""``ReplicaStore``: one worker's replica of the embedded store, kept in step by the write log.

With ``server.workers > 1`` and ``store.kind: edge`` each worker process searches its own copy
of the shard, so the search CPU of every worker runs in parallel (adr/0105). Writes from any
worker go through the shared ``WriteLog``; a replica applies every entry it has not seen before
it answers a read. The check is one load from the log's shared state, so a write acknowledged by
any worker is visible to every read that starts after it, on every worker (staleness bound:
none). Retrieval counts are the exception (adr/0154): a read does not wait for another worker's
counts, which reach it within ``LOG_FOLD_CHECK_S`` (the follower) or at this worker's next
write; a worker's own counts it sees at once. ``list`` waits for them too: what it reads is
written back whole. A writer holds the log's lock only to append: it applies its entry after
letting the lock go (adr/0141), so a worker stalled mid-apply holds up nobody else.

Layout under ``store.data_dir``: ``memories/`` is the primary shard, ``memories.log`` the writes
it has not absorbed yet (``memories.log.state``: the log's positions, adr/0120),
``replicas/<pid>-*/`` each worker's copy. A replica starts as a copy of the primary plus the log
from where the primary stopped. Only the server's supervisor process updates the primary: before
the workers start and after they stop (``absorb_log``), and while they run, whenever the log has
grown by ``store.log_fold_bytes`` (``fold_log``): it applies the new entries to the primary and
cuts off the front of the log what every replica has applied, so the log stays about that size
however long the server runs. The primary's lock keeps a replica from copying it half updated.
A replica is never opened again (deleted at close, or by the next start's ``absorb_log``): the
log and the primary hold every write, so it flushes nothing (adr/0179).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from proxy.context.records import Candidate, MemoryRecord
from proxy.defaults import LOG_COUNT_IDS_PER_APPLY, LOG_FOLD_CHECK_S
from proxy.errors import ConfigError, StoreError
from proxy.memory.edge import SHARD_DIR, EdgeStore
from proxy.memory.edge_build import copy_shard
from proxy.memory.edge_counts import COUNTS_FILE
from proxy.memory.edge_maintenance import building
from proxy.memory.edge_shard import CONFIG_FILE
from proxy.memory.store import (
    Found,
    Page,
    RepeatKey,
    SearchQuery,
    TurnsQuery,
    check_vectors,
    require_tenant,
    with_tokens,
)
from proxy.memory.write_log import Entry, WriteLog

LOG_FILE = "memories.log"
REPLICAS_DIR = "replicas"
T = TypeVar("T")
LOGGER = logging.getLogger("memproxy.store")

# The log's operations: each replays one ``EdgeStore`` write with the same arguments.
ADD, DELETE, DELETE_USER, INCREMENT, USEFULNESS = "add", "delete", "delete_user", "inc", "use"
PURGE, SUPERSEDE = "purge", "supersede"


async def apply(store: EdgeStore, entry: Entry) -> object:
    """Apply one log entry to ``store``; what the write returns (``delete``'s bool, ...)."""
    op, args = entry
    if op == ADD:
        records, vectors = args
        if vectors.shape[1] != store.dimensions:
            raise ConfigError(
                f"the memory write log holds vectors of {vectors.shape[1]} dimensions, the "
                f"embedder makes {store.dimensions}; use the embedder it was built with or a "
                "new data_dir",
                param="store.data_dir",
            )
        await store.add(records, vectors)
        return None
    if op == DELETE:
        return await store.delete(*args)
    if op == DELETE_USER:
        return await store.delete_user(*args)
    if op == INCREMENT:
        await store.increment_retrievals(*args)
        return None
    if op == USEFULNESS:
        return await store.set_usefulness(*args)
    if op == PURGE:
        return await store.purge_expired(*args)
    if op == SUPERSEDE:
        return await store.supersede(*args)  # conditional: a replay changes nothing twice
    raise StoreError(f"unknown write log operation {op!r}")


def coalesced(
    entries: Iterable[tuple[Entry, int]], limit: int = LOG_COUNT_IDS_PER_APPLY
) -> Iterator[tuple[Entry, int]]:
    """``entries`` (each with the position after it) in order, each run of consecutive
    retrieval counts of one tenant as one entry of up to ``limit`` ids, at the run's end.

    Adding one per occurrence commutes, so one apply does for the run: with several workers
    every replica (and the primary) applies every worker's counts, one ``increment_retrievals``
    per 64-id entry (adr/0154), and a catch-up or a fold folds mostly counts. A run is still one
    apply: its entries are applied together or not at all."""
    tenant: str | None = None
    ids: builtins.list[str] = []
    last = 0
    for entry, end in entries:
        op, args = entry
        if op == INCREMENT and args[0] == tenant and len(ids) + len(args[1]) <= limit:
            ids.extend(args[1])
            last = end
            continue
        if tenant is not None:
            yield (INCREMENT, (tenant, tuple(ids))), last
            tenant = None
        if op == INCREMENT:
            tenant, ids, last = args[0], list(args[1]), end
            continue
        yield entry, end
    if tenant is not None:
        yield (INCREMENT, (tenant, tuple(ids))), last


async def absorb_log(store: EdgeStore, data_dir: str | os.PathLike[str]) -> int:
    """Apply the write log to the primary ``store`` (no replica may be running) and empty it;
    remove replica copies left by earlier runs. Returns how many entries it applied."""
    data = Path(data_dir)
    shutil.rmtree(data / REPLICAS_DIR, ignore_errors=True)
    path = data / LOG_FILE
    if not path.exists():
        return 0
    log = WriteLog(path)
    try:
        applied = await _fold(store, log)
        await asyncio.to_thread(_cut_all, log)
    finally:
        log.close()
    return applied


def _cut_all(log: WriteLog) -> None:
    log.lock()
    try:
        log.release_all()  # no replica runs now: slots left by killed workers go too
        log.cut_before(log.end)
    finally:
        log.unlock()


async def fold_log(store: EdgeStore, log: WriteLog, min_bytes: int) -> int:
    """While the workers run: once the log holds ``min_bytes``, apply what the primary
    ``store`` has not to it and cut off the front of the log what every live replica has
    applied too. Returns the bytes cut (0: not due, or a replica lags; the next call cuts what
    it has applied since)."""
    if log.end - log.base < min_bytes:
        return 0
    await _fold(store, log)
    return await asyncio.to_thread(_cut_applied, log)


async def _fold(store: EdgeStore, log: WriteLog) -> int:
    """Apply the entries the primary has not applied yet; how many there were. Replicas may
    copy the primary only before or after: it is changed under the primary lock."""
    start = log.primary

    def read() -> tuple[builtins.list[tuple[Entry, int]], int]:
        log.lock_shared()  # against a cut moving the bytes meanwhile; writers append on
        try:
            return log.read(max(start, log.base))
        finally:
            log.unlock()

    entries, _ = await asyncio.to_thread(read)
    if not entries:
        return 0
    done = start
    await asyncio.to_thread(log.lock_primary, shared=False)
    try:
        for entry, end in coalesced(entries):
            await apply(store, entry)
            done = end  # a failed apply stops here: the next fold starts with it, once
    finally:
        try:
            if done != start:
                # A copy or the next start begins at ``done``: its writes must be in the
                # shard's segments and the counts table, not only in this process.
                await store.flush()
                log.set_primary(done)
        finally:
            log.unlock_primary()
    return len(entries)


def _cut_applied(log: WriteLog) -> int:
    log.lock()
    try:
        return log.cut_before(min([log.primary, *log.replica_positions()]))
    finally:
        log.unlock()


class LogFolder:
    """The supervisor's thread that runs ``fold_while_running`` on the primary (its own event
    loop: the supervisor's main thread is serving the workers meanwhile)."""

    def __init__(self, store: EdgeStore, data_dir: str | os.PathLike[str], min_bytes: int) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=lambda: asyncio.run(fold_while_running(store, data_dir, min_bytes, self._stop)),
            name="memory-log-fold",
            daemon=True,
        )

    def start(self) -> LogFolder:
        """Start folding; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop and wait for a fold under way to finish."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


async def fold_while_running(
    store: EdgeStore, data_dir: str | os.PathLike[str], min_bytes: int, stop: threading.Event
) -> None:
    """The supervisor's loop: ``fold_log`` every ``LOG_FOLD_CHECK_S`` until ``stop`` is set.
    A failed fold is logged and tried again: the log only grows meanwhile."""
    log = WriteLog(Path(data_dir) / LOG_FILE)
    try:
        while not await asyncio.to_thread(stop.wait, LOG_FOLD_CHECK_S):
            try:
                await fold_log(store, log, min_bytes)
            except Exception:
                LOGGER.exception("folding the memory write log into the primary failed")
    finally:
        log.close()


class ReplicaStore:
    """A ``MemoryStore``: reads from this process's replica, writes through the shared log."""

    def __init__(
        self, replica: EdgeStore, log: WriteLog, directory: Path, *, slot: int, start: int
    ) -> None:
        self.dimensions = replica.dimensions
        self.hybrid = replica.hybrid
        self.directory = directory
        self._replica = replica
        self._log = log
        self._slot = slot  # where this replica tells the supervisor how far it has applied
        self._offset = start  # the log is applied up to here
        self._lock = asyncio.Lock()  # one catch-up or write at a time in this process
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="replica-log")
        self._closed = False
        self._follower: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls,
        data_dir: str | os.PathLike[str],
        *,
        dimensions: int,
        hybrid: bool,
        record_cache_entries: int,
        search_threads: int | None = None,
    ) -> ReplicaStore:
        """Copy the primary shard under ``data_dir`` into a new replica and apply the log."""
        data = Path(data_dir)
        (data / REPLICAS_DIR).mkdir(parents=True, exist_ok=True)
        directory = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=data / REPLICAS_DIR))
        log = WriteLog(data / LOG_FILE)
        slot = None
        try:
            slot, start = await asyncio.to_thread(_copy_primary, data, directory, log)
            replica = await EdgeStore.open(
                directory,
                dimensions=dimensions,
                hybrid=hybrid,
                record_cache_entries=record_cache_entries,
                search_threads=search_threads,
                warm_up=False,  # after the log is applied: its writes would void the pages
                # Deleted at close or by the next start's ``absorb_log``, never opened again:
                # the log and the primary hold the writes, so no flush (adr/0179).
                persistent=False,
            )
        except BaseException:
            if slot is not None:
                log.release(slot)
            log.close()
            shutil.rmtree(directory, ignore_errors=True)
            raise
        store = cls(replica, log, directory, slot=slot, start=start)
        try:
            await store.catch_up()
        except BaseException:
            await store.close()
            raise
        replica.start_warm_up()
        store._follower = asyncio.create_task(store._follow())
        return store

    async def _follow(self) -> None:
        """Catch up every ``LOG_FOLD_CHECK_S`` without waiting for a read: a worker that gets
        no requests would otherwise hold every fold's cut at its position (adr/0120), and
        reads leave other workers' retrieval counts to this (adr/0154)."""
        while True:
            await asyncio.sleep(LOG_FOLD_CHECK_S)
            try:
                await self.catch_up()
            except Exception as exc:  # the next read or round tries again
                LOGGER.warning("memory replica could not catch up with the write log: %s", exc)

    async def _in_thread(self, func: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, func, *args)

    async def sync(self) -> None:
        """Apply what a read must see: the log up to its barrier, i.e. every entry but other
        workers' retrieval counts appended after the last entry of another kind (adr/0154)."""
        if self._log.barrier > self._offset:
            await self.catch_up()

    async def catch_up(self) -> None:
        """Apply every log entry other processes appended since this replica last looked."""
        if self._log.end == self._offset:
            return
        # Shielded, as writes are: a caller's timeout must not cut an entry's apply short, or
        # the entry would be applied again next time (a retrieval count twice).
        await asyncio.shield(self._locked_catch_up())

    async def _locked_catch_up(self) -> None:
        async with self._lock:
            await self._catch_up(self._read_shared)

    def _read_shared(self, offset: int) -> tuple[builtins.list[tuple[Entry, int]], int]:
        self._log.lock_shared()  # a fold's cut moves the bytes: not while reading them
        try:
            return self._log.read(offset)
        finally:
            self._log.unlock()

    async def _catch_up(
        self,
        read: Callable[[int], tuple[builtins.list[tuple[Entry, int]], int]],
        until: int | None = None,
    ) -> object:
        """Apply every whole entry past ``_offset`` (the caller holds ``_lock``); what the
        entry ending at ``until`` returned (``None`` if none)."""
        entries, _ = await self._in_thread(read, self._offset)
        return await self._apply(entries, until)

    async def _apply(self, entries: Sequence[tuple[Entry, int]], until: int | None) -> object:
        """Apply ``entries``, the log's from ``_offset`` on (the caller holds ``_lock``); what
        the entry ending at ``until`` returned. Runs of counts are applied as one
        (``coalesced``): what a count returns is ``None`` whichever entry of a run it was."""
        result: object = None
        try:
            for entry, end in coalesced(entries):
                applied = await apply(self._replica, entry)
                self._offset = end  # per apply: a failed one is retried, never applied twice
                if end == until:
                    result = applied
        finally:
            self._log.publish(self._slot, self._offset)
        return result

    def _append(self, entry: Entry, barrier: bool) -> tuple[builtins.list[tuple[Entry, int]], int]:
        """In one call under the log's exclusive lock: the entries others appended since
        ``_offset``, then ``entry`` appended; those entries and ``entry``'s end. The lock is
        held for a read and a write, never across a hop back to a busy event loop (the other
        workers' writers and catch-ups wait for it)."""
        self._log.lock()
        try:
            behind = self._log.read(self._offset)[0] if self._log.end != self._offset else []
            return behind, self._append_locked(entry, barrier)
        finally:
            self._log.unlock()

    async def _write(
        self,
        prepare: Callable[[], Awaitable[Entry | None]],
        *,
        read_first: bool = False,
        barrier: bool = True,
    ) -> object:
        """Append the entry ``prepare`` makes (``None``: nothing to write), then apply the log
        up to it here; what applying it returned.

        Only the append holds the log's lock: the entry is applied after the lock is let go
        (adr/0141), so a worker stalled while it applies blocks no other worker's reads or
        writes. The log's order is still the one every replica applies, and the call returns
        once this replica has applied its own entry (reads see their own writes). With
        ``read_first`` (read-modify-write updates: votes, supersession) the replica catches up
        under the lock before ``prepare``, which then sees every earlier write of every worker,
        so those updates are atomic across processes. Without ``barrier`` (retrieval counts)
        other workers' reads do not wait for the entry (adr/0154). Shielded: a cancelled caller
        stops waiting, but the write (or its wait for the lock) carries on and releases the
        lock, never leaving it held or an entry half applied.
        """
        return await asyncio.shield(self._locked_write(prepare, read_first, barrier))

    async def _locked_write(
        self, prepare: Callable[[], Awaitable[Entry | None]], read_first: bool, barrier: bool
    ) -> object:
        async with self._lock:
            if not read_first:
                entry = await prepare()
                if entry is None:
                    return None
                # One hop: the lock, the entries others appended, the append, the unlock.
                behind, end = await self._in_thread(self._append, entry, barrier)
                # Entries appended by others before this one are applied first, in log order;
                # this one as written, not read back (it is the log's from ``behind`` on).
                return await self._apply([*behind, (entry, end)], end)
            # Most of the catching up outside the lock: under it, only what came since.
            await self._catch_up(self._read_shared)
            await self._in_thread(self._log.lock)
            try:
                await self._catch_up(self._log.read)  # the exclusive lock covers the read
                entry = await prepare()
                if entry is None:
                    return None
                # Caught up under the lock: nothing lies between ``_offset`` and this entry.
                end = await self._in_thread(self._append_locked, entry, barrier)
            finally:
                self._log.unlock()
            return await self._apply([(entry, end)], end)

    def _append_locked(self, entry: Entry, barrier: bool) -> int:
        """Append ``entry`` (the caller holds the log's lock); its end."""
        try:
            return self._log.append(entry, barrier=barrier)
        except OSError as exc:
            raise StoreError(f"cannot append to the memory write log: {exc}") from exc

    async def add(self, records: Sequence[MemoryRecord], vectors: np.ndarray) -> None:
        """Upsert records by (tenant, id); returns once the batch is in the log and applied."""
        check_vectors(records, vectors, self.dimensions)
        if not records:
            return
        # Counted once, here: every replica applies the counts in the entry.
        counted = await self._in_thread(lambda: [with_tokens(r) for r in records])
        entry: Entry = (ADD, (counted, np.asarray(vectors, dtype=np.float32)))

        async def prepare() -> Entry:
            # Caught up under the log's lock (``read_first``): a batch refused here never
            # reaches the log, where every replica (and the primary at start) would refuse it
            # at every catch-up and stop applying the log behind it (adr/0139). Without the
            # catch-up a colliding write another worker logged a moment ago would slip past.
            await self._replica.refuse_collisions(counted)
            return entry

        await self._write(prepare, read_first=True)

    async def get(self, tenant: str, memory_id: str) -> MemoryRecord | None:
        """Return the memory or ``None`` (also when it belongs to another tenant)."""
        require_tenant(tenant)
        await self.sync()
        return await self._replica.get(tenant, memory_id)

    async def list(
        self, tenant: str, *, user: str | None, source: str | None, limit: int, after: str | None
    ) -> Page:
        """Return up to ``limit`` memories in point-id order, starting after id ``after``,
        every worker's retrieval counts applied."""
        require_tenant(tenant)
        # Not ``sync``: the records a list reads are written back whole, counts included, when
        # a deleted memory's copies are forgotten (adr/0144); one that left another worker's
        # counts to the follower would write back the count from before them, on every
        # replica. Listing is off the request path: the catch-up costs no read's latency.
        await self.catch_up()
        return await self._replica.list(tenant, user=user, source=source, limit=limit, after=after)

    async def delete(self, tenant: str, memory_id: str) -> bool:
        """Delete one memory; ``False`` if there was none."""
        require_tenant(tenant)
        return bool(await self._write(lambda: _ready((DELETE, (tenant, memory_id)))))

    async def delete_user(self, tenant: str, user: str) -> int:
        """Delete every memory of ``user``; return how many there were."""
        require_tenant(tenant)
        deleted = await self._write(lambda: _ready((DELETE_USER, (tenant, user))))
        return deleted if isinstance(deleted, int) else 0

    async def search(self, tenant: str, query: SearchQuery) -> builtins.list[Candidate]:
        """Return the best ``top_k`` memories of the user and the tenant-shared ones."""
        require_tenant(tenant)
        await self.sync()
        return await self._replica.search(tenant, query)

    async def search_near(
        self, tenant: str, query: SearchQuery, seeds: int, window_s: float
    ) -> Found:
        """The ranked hits and the turns beside the best of them, in one call of the replica."""
        require_tenant(tenant)
        await self.sync()
        return await self._replica.search_near(tenant, query, seeds, window_s)

    async def increment_retrievals(self, tenant: str, ids: Sequence[str]) -> None:
        """Add one to a memory's retrieval count per occurrence of its id."""
        require_tenant(tenant)
        if ids:
            # Off the read barrier (adr/0154): the worker's next read does not wait for it.
            entry: Entry = (INCREMENT, (tenant, tuple(ids)))
            await self._write(lambda: _ready(entry), barrier=False)

    async def set_usefulness(
        self, tenant: str, memory_id: str, usefulness: float
    ) -> MemoryRecord | None:
        """Set a memory's usefulness; return the updated memory or ``None``."""
        return await self.update_usefulness(tenant, memory_id, lambda _: usefulness)

    async def update_usefulness(
        self, tenant: str, memory_id: str, update: Callable[[float], float]
    ) -> MemoryRecord | None:
        """Set usefulness to ``update(current)`` with no other update in between, in any
        worker: the value is computed under the log's lock and logged as a plain set."""
        require_tenant(tenant)

        async def prepare() -> Entry | None:
            current = await self._replica.get(tenant, memory_id)
            if current is None:
                return None
            return (USEFULNESS, (tenant, memory_id, update(current.usefulness)))

        updated = await self._write(prepare, read_first=True)
        return updated if isinstance(updated, MemoryRecord) else None

    async def supersede(self, tenant: str, memory_id: str, by: str) -> MemoryRecord | None:
        """Mark the memory superseded by ``by`` if it is not yet, in any worker: checked under
        the log's lock and logged only when it applies, so of two workers at once one wins."""
        require_tenant(tenant)

        async def prepare() -> Entry | None:
            current = await self._replica.get(tenant, memory_id)
            if current is None or current.superseded_by is not None:
                return None
            return (SUPERSEDE, (tenant, memory_id, by))

        marked = await self._write(prepare, read_first=True)
        return marked if isinstance(marked, MemoryRecord) else None

    async def count(self, tenant: str) -> int:
        """Return how many memories the tenant has."""
        require_tenant(tenant)
        await self.sync()
        return await self._replica.count(tenant)

    async def repeats(
        self, tenant: str, keys: Collection[RepeatKey], live_at: datetime
    ) -> builtins.list[MemoryRecord]:
        """The live memories with one of ``keys``, every worker's writes seen."""
        require_tenant(tenant)
        await self.sync()
        return await self._replica.repeats(tenant, keys, live_at)

    async def turns_near(self, tenant: str, query: TurnsQuery) -> builtins.list[Candidate]:
        """The dialog turns ``query`` asks for, every worker's writes seen."""
        require_tenant(tenant)
        await self.sync()
        return await self._replica.turns_near(tenant, query)

    async def purge_expired(self, before: datetime) -> int:
        """Delete expired memories in every replica: the purge is a logged write (each worker's
        purger may log one; a second finds nothing)."""
        purged = await self._write(lambda: _ready((PURGE, (before,))))
        return purged if isinstance(purged, int) else 0

    async def ready(self) -> bool:
        """Whether the replica is open."""
        return not self._closed and await self._replica.ready()

    async def close(self) -> None:
        """Close the replica and the log handle and delete the copy (once)."""
        if self._closed:
            return
        self._closed = True
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follower
        try:
            async with self._lock:  # a shielded catch-up or write still running ends first
                await self._replica.close()
        finally:
            self._log.release(self._slot)
            self._log.close()
            self._thread.shutdown(wait=True)
            # A build outlasting the close still uses the copy: the next start's
            # ``absorb_log`` deletes every replica left behind.
            if not building(self.directory / SHARD_DIR):
                shutil.rmtree(self.directory, ignore_errors=True)


async def _ready(entry: Entry) -> Entry:
    return entry


def _copy_primary(data: Path, directory: Path, log: WriteLog) -> tuple[int, int]:
    """Copy the primary shard and its counts into ``directory``; this replica's slot and the
    log position the copy starts from. Under the primary's lock (shared: a fold waits), and the
    slot is taken before it is released, so no fold cuts what the copy still has to apply."""
    log.lock_primary(shared=True)
    try:
        primary = data / SHARD_DIR
        if (primary / CONFIG_FILE).exists():
            # Sparse: the WAL's 32 MB segments are mostly holes (a plain copy wrote every zero).
            copy_shard(primary, directory / SHARD_DIR)
        # Retrieval counts live beside the shard, not in it (adr/0103): copy them along.
        if (data / COUNTS_FILE).exists():
            shutil.copy2(data / COUNTS_FILE, directory / COUNTS_FILE)
        start = log.primary
        log.lock()
        try:
            return log.claim(start), start
        finally:
            log.unlock()
    finally:
        log.unlock_primary()
