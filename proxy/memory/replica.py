"""``ReplicaStore``: one worker's replica of the embedded store, kept in step by the write log.

With ``server.workers > 1`` and ``store.kind: edge`` each worker process searches its own copy
of the shard, so the search CPU of every worker runs in parallel (adr/0105). Writes from any
worker go through the shared ``WriteLog``; a replica applies every entry it has not seen before
it answers a read. The check is one ``fstat`` of the log, so a write acknowledged by any worker
is visible to every read that starts after it, on every worker (staleness bound: none).

Layout under ``store.data_dir``: ``memories/`` is the primary shard, ``memories.log`` the writes
made since it was last brought up to date, ``replicas/<pid>-*/`` each worker's copy. A replica
starts as a copy of the primary plus the whole log. Only the server's supervisor process updates
the primary (``absorb_log``, before the workers start and after they stop), so the primary never
changes while a replica copies it; a worker that dies and is restarted simply copies again.
"""

from __future__ import annotations

import asyncio
import builtins
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from proxy.context.records import Candidate, MemoryRecord
from proxy.errors import ConfigError, StoreError
from proxy.memory.edge import SHARD_DIR, EdgeStore
from proxy.memory.edge_counts import COUNTS_FILE
from proxy.memory.edge_shard import CONFIG_FILE
from proxy.memory.store import (
    Page,
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

# The log's operations: each replays one ``EdgeStore`` write with the same arguments.
ADD, DELETE, DELETE_USER, INCREMENT, USEFULNESS = "add", "delete", "delete_user", "inc", "use"
PURGE = "purge"


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
    raise StoreError(f"unknown write log operation {op!r}")


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
        entries, _ = await asyncio.to_thread(log.read, 0)
        for entry, _end in entries:
            await apply(store, entry)
        if entries:
            await store.flush()  # the log goes next: its writes must be in the shard's segments
        log.truncate()
    finally:
        log.close()
    return len(entries)


class ReplicaStore:
    """A ``MemoryStore``: reads from this process's replica, writes through the shared log."""

    def __init__(self, replica: EdgeStore, log: WriteLog, directory: Path) -> None:
        self.dimensions = replica.dimensions
        self.hybrid = replica.hybrid
        self.directory = directory
        self._replica = replica
        self._log = log
        self._offset = 0  # the log is applied up to here
        self._lock = asyncio.Lock()  # one catch-up or write at a time in this process
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="replica-log")
        self._closed = False

    @classmethod
    async def open(
        cls,
        data_dir: str | os.PathLike[str],
        *,
        dimensions: int,
        hybrid: bool,
        record_cache_entries: int,
    ) -> ReplicaStore:
        """Copy the primary shard under ``data_dir`` into a new replica and apply the log."""
        data = Path(data_dir)
        (data / REPLICAS_DIR).mkdir(parents=True, exist_ok=True)
        directory = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=data / REPLICAS_DIR))
        try:
            primary = data / SHARD_DIR
            if (primary / CONFIG_FILE).exists():
                await asyncio.to_thread(shutil.copytree, primary, directory / SHARD_DIR)
            # Retrieval counts live beside the shard, not in it (adr/0103): copy them along.
            if (data / COUNTS_FILE).exists():
                await asyncio.to_thread(shutil.copy2, data / COUNTS_FILE, directory / COUNTS_FILE)
            replica = await EdgeStore.open(
                directory,
                dimensions=dimensions,
                hybrid=hybrid,
                record_cache_entries=record_cache_entries,
            )
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        store = cls(replica, WriteLog(data / LOG_FILE), directory)
        try:
            await store.sync()
        except BaseException:
            await store.close()
            raise
        return store

    async def _in_thread(self, func: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, func, *args)

    async def sync(self) -> None:
        """Apply the log entries other processes appended since this replica last looked."""
        if self._log.size() == self._offset:
            return
        # Shielded, as writes are: a caller's timeout must not cut an entry's apply short, or
        # the entry would be applied again next time (a retrieval count twice).
        await asyncio.shield(self._locked_catch_up())

    async def _locked_catch_up(self) -> None:
        async with self._lock:
            await self._catch_up()

    async def _catch_up(self) -> None:
        """Apply every whole entry past ``_offset`` (the caller holds ``_lock``)."""
        entries, _ = await self._in_thread(self._log.read, self._offset)
        for entry, end in entries:
            await apply(self._replica, entry)
            self._offset = end  # per entry: a failed apply is retried, never applied twice

    async def _write(self, prepare: Callable[[], Awaitable[Entry | None]]) -> object:
        """Append the entry ``prepare`` makes (``None``: nothing to write) and apply it here.

        Under the log's lock, after catching up: ``prepare`` sees every earlier write of every
        worker, so read-modify-write updates (votes) are atomic across processes. Shielded: a
        cancelled caller stops waiting, but the write (or its wait for the lock) carries on
        and releases the lock, never leaving it held or an entry half applied.
        """
        return await asyncio.shield(self._locked_write(prepare))

    async def _locked_write(self, prepare: Callable[[], Awaitable[Entry | None]]) -> object:
        async with self._lock:
            await self._in_thread(self._log.lock)
            try:
                await self._catch_up()
                entry = await prepare()
                if entry is None:
                    return None
                try:
                    end = await self._in_thread(self._log.append, entry, self._offset)
                except OSError as exc:
                    raise StoreError(f"cannot append to the memory write log: {exc}") from exc
                result = await apply(self._replica, entry)
                self._offset = end
                return result
            finally:
                self._log.unlock()

    async def add(self, records: Sequence[MemoryRecord], vectors: np.ndarray) -> None:
        """Upsert records by (tenant, id); returns once the batch is in the log and applied."""
        check_vectors(records, vectors, self.dimensions)
        if not records:
            return
        # Counted once, here: every replica applies the counts in the entry.
        counted = await self._in_thread(lambda: [with_tokens(r) for r in records])
        entry: Entry = (ADD, (counted, np.asarray(vectors, dtype=np.float32)))
        await self._write(lambda: _ready(entry))

    async def get(self, tenant: str, memory_id: str) -> MemoryRecord | None:
        """Return the memory or ``None`` (also when it belongs to another tenant)."""
        require_tenant(tenant)
        await self.sync()
        return await self._replica.get(tenant, memory_id)

    async def list(
        self, tenant: str, *, user: str | None, source: str | None, limit: int, after: str | None
    ) -> Page:
        """Return up to ``limit`` memories in point-id order, starting after id ``after``."""
        require_tenant(tenant)
        await self.sync()
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

    async def increment_retrievals(self, tenant: str, ids: Sequence[str]) -> None:
        """Add one to a memory's retrieval count per occurrence of its id."""
        require_tenant(tenant)
        if ids:
            await self._write(lambda: _ready((INCREMENT, (tenant, tuple(ids)))))

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

        updated = await self._write(prepare)
        return updated if isinstance(updated, MemoryRecord) else None

    async def count(self, tenant: str) -> int:
        """Return how many memories the tenant has."""
        require_tenant(tenant)
        await self.sync()
        return await self._replica.count(tenant)

    async def repeats(
        self, tenant: str, user: str, words: str, live_at: datetime
    ) -> builtins.list[MemoryRecord]:
        """The user's live memories with the words key ``words``, every worker's writes seen."""
        require_tenant(tenant)
        await self.sync()
        return await self._replica.repeats(tenant, user, words, live_at)

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
        try:
            await self._replica.close()
        finally:
            self._log.close()
            self._thread.shutdown(wait=True)
            shutil.rmtree(self.directory, ignore_errors=True)


async def _ready(entry: Entry) -> Entry:
    return entry
