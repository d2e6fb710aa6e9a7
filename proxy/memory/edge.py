"""``EdgeStore``: Qdrant's engine in-process (qdrant-edge-py), persistent under a data dir.

The shard's API is synchronous, so every call runs on a small dedicated thread pool instead of
the event loop, except a chat request's search of a small store when nothing else holds what it
needs: the engine holds the GIL through a query, so there the hop only added its wake-ups
(``edge_inline``, adr/0172). Every engine call holds the GIL (a query too, adr/0167), most
for a millisecond or less, an index build for seconds: that one runs in a child process
(adr/0153). The shard tolerates concurrent callers (measured: parallel queries and upserts
from four threads); read-modify-write updates (retrieval counts, usefulness, delete_user's
count) still take a lock so two of them never interleave.

Durability: updates go through the shard's write-ahead log. ``add`` returns once ``update`` has
returned, i.e. the batch is in the WAL; that survives the process being killed (SIGKILL) and is
replayed on the next open. Flushes (in the background while writes come in, and on close; none
in a worker's replica, whose files are deleted unread, adr/0179) and index builds are
``edge_maintenance.ShardMaintenance``'s. See adr/0011. Retrieval counts are not
payload updates: they live in ``edge_counts.RetrievalCounts`` beside the shard (adr/0103).

A store that fits its record cache decodes every memory into it in the background after it
opens (``_warm_sync``): a restarted process then searches as one that has run for a while. Cold,
a quarter of a 10k-memory search's records were payload reads, ~0.3-0.5 ms a search for its
first few hundred searches (docs/benchmarks.md). At 100k memories a search read ~37 payloads
and asked the engine for the neighbour turns, its index unfilled: 5.1 against 2.2 ms warm
(adr/0182).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import qdrant_edge as qe

from proxy.context.profiles import prepare as prepare_profiles
from proxy.context.profiles import text_profile
from proxy.context.records import Candidate, MemoryRecord
from proxy.defaults import (
    HYBRID,
    INLINE_SEARCH_MAX_POINTS,
    OPTIMIZE_AFTER_POINTS,
    REPLICA_WAL_CUT_WRITES,
)
from proxy.errors import ConfigError, StoreError
from proxy.handoff import run_on
from proxy.memory import lexical
from proxy.memory.edge_counts import COUNTS_FILE, RetrievalCounts
from proxy.memory.edge_ids import NEW_STORES, U64_IDS, PointIds, Scheme, ids_at
from proxy.memory.edge_inline import Lock, StoreState, free, inline
from proxy.memory.edge_lifecycle import LifecycleTenants
from proxy.memory.edge_maintenance import (
    ShardMaintenance,
    ShardReads,
    unindexed_points,
    wait_for_build,
)
from proxy.memory.edge_query import (
    FEW_PARAMS,
    expired_filter,
    key_of,
    lifecycle_filters,
    list_filter,
    nearest,
    others_filter,
    repeat_filter,
    search_hits,
    tenant_filter,
    turns_filter,
)
from proxy.memory.edge_shard import drop_stale_generations, open_shard, settle_generations
from proxy.memory.edge_tenants import ShardTenants
from proxy.memory.edge_turns import DialogTurns, listed_at
from proxy.memory.edge_users import TenantUsers
from proxy.memory.filters import DIALOG_SOURCE, scope_users, windows
from proxy.memory.near import near_turns, ranked, turns_failed, turns_query
from proxy.memory.points import (
    COUNT_FIELDS,
    DENSE_VECTOR,
    RETRIEVAL_COUNT_KEY,
    SPARSE_VECTOR,
    SUPERSEDED_KEY,
    TENANT_KEY,
    from_payload,
    owned,
    owned_or_fail,
    repeats_among,
    to_payload,
)
from proxy.memory.record_cache import DEFAULT_MAX_ENTRIES, RecordCache
from proxy.memory.store import (
    NEAR_TURNS,
    Found,
    Page,
    RepeatKey,
    SearchQuery,
    TurnsQuery,
    check_query,
    check_vector,
    check_vectors,
    require_tenant,
    with_tokens,
)
from proxy.memory.vectors import clip_similarity

SHARD_DIR = "memories"
REPEATS_PAGE = 1_024  # memories a repeat lookup reads a page at a time
DELETE_PAGE = 4_096  # ids a delete by filter reads a page at a time, to drop their counts
# Memories the record cache's warm-up decodes per shard read: ~7 ms of Python a page, so the
# event loop gets the interpreter back often while a restarted store warms up.
WARM_PAGE = 512
DEFAULT_WORKERS = 2
# What a write reads back of the points it is about to overwrite: whose they are (adr/0139).
NAME_FIELDS: tuple[str, ...] = (TENANT_KEY, "id")
# Inline searches between two readings of the shard's size (each on a hopped search): a store
# growing past ``INLINE_SEARCH_MAX_POINTS`` is noticed within this many searches, and one read
# over it and shrinking back under it within this many hops.
INLINE_SIZE_EVERY = 256
T = TypeVar("T")
LOGGER = logging.getLogger("memproxy.store")


def is_engine_error(exc: BaseException) -> bool:
    """Whether the shard itself failed: qdrant-edge raises a bare ``Exception`` for every
    engine error ("Service runtime error: ...") and ``OSError`` for its files, and a Rust panic
    inside it surfaces as pyo3's ``PanicException``. Its ``ValueError`` or ``TypeError`` mean we
    passed it something wrong: a bug, not an outage."""
    return type(exc) is Exception or isinstance(exc, OSError) or is_engine_panic(exc)


def is_engine_panic(exc: BaseException) -> bool:
    """A panic in the Rust engine. pyo3 raises it as ``pyo3_runtime.PanicException``, a
    ``BaseException`` (so ``except Exception`` lets it through and a chat request would fail
    on a store's bug); the module exists only once a panic happened, so it is told by name."""
    return any(
        cls.__name__ == "PanicException" and cls.__module__ == "pyo3_runtime"
        for cls in type(exc).__mro__
    )


@contextlib.contextmanager
def engine_errors() -> Iterator[None]:
    """The engine's failures raised inside as ``StoreError``s."""
    try:
        yield
    except BaseException as exc:  # a panic is a BaseException; anything else is re-raised
        if is_engine_error(exc):
            raise StoreError(f"the memory store failed: {exc}") from exc
        raise


def collision(memory_id: str) -> StoreError:
    """The error of a write whose 64-bit point id names another memory (adr/0139)."""
    return StoreError(
        f"memory {memory_id!r} cannot be stored: its point id is another memory's "
        "(a 64-bit hash collision); store it under another id"
    )


# A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``; the slots'
# own descriptors set them directly: 0.4 against 1.0 us a candidate, ~90 a search. Only for a
# class whose fields are these two and that checks nothing (``test_edge``).
_NEW_OBJECT = object.__new__
_SET_RECORD = Candidate.__dict__["record"].__set__
_SET_SIMILARITY = Candidate.__dict__["similarity"].__set__


def candidate(record: MemoryRecord, similarity: float) -> Candidate:
    """``Candidate(record, similarity)``, built without the frozen ``__init__``."""
    made: Candidate = _NEW_OBJECT(Candidate)
    _SET_RECORD(made, record)
    _SET_SIMILARITY(made, similarity)
    return made


def stored_or_fail(payload: dict[str, Any] | None) -> MemoryRecord:
    """The record of a hit of a query without the tenant condition, whoever's it is (the
    caller checks the tenant)."""
    if not payload:
        raise StoreError("search returned a point without its payload")
    return from_payload(payload)


class EdgeStore:
    """A ``MemoryStore`` on an embedded Qdrant Edge shard; build it with ``EdgeStore.open``."""

    def __init__(
        self,
        shard: qe.EdgeShard,
        executor: ThreadPoolExecutor,
        *,
        dimensions: int,
        hybrid: bool,
        optimize_after: int | None = OPTIMIZE_AFTER_POINTS,
        record_cache_entries: int = DEFAULT_MAX_ENTRIES,
        counts: RetrievalCounts | None = None,
        path: Path | None = None,
        unindexed: int = 0,
        ids: PointIds = U64_IDS,
        persistent: bool = True,
    ) -> None:
        self.dimensions = dimensions
        self.hybrid = hybrid
        self.optimize_after = optimize_after
        self.persistent = persistent
        self._executor = executor
        self._maintenance = ShardMaintenance(
            shard,
            optimize_after,
            path=path,
            unindexed=unindexed,
            background_flushes=persistent,
            # No flush cuts a replica's WAL: a build's swap does (adr/0184).
            wal_cut_after=None if persistent else REPLICA_WAL_CUT_WRITES,
        )
        self._reads = ShardReads(self._maintenance)  # every read: a swap never closes its shard
        self._closed = False
        self._rmw_lock = threading.Lock()
        self.record_cache_entries = record_cache_entries
        self._counts = counts if counts is not None else RetrievalCounts()
        self._records = RecordCache(record_cache_entries, count_of=self._counts.get)
        self._lifecycle = LifecycleTenants()
        self._users = TenantUsers()
        self._tenants = ShardTenants()
        self._turns = DialogTurns(record_cache_entries)
        # Each write's notes in the index and its shard write, one write at a time: two writes
        # of one turn (an upsert and a delete) interleaved could leave the index noting the
        # earlier one while the shard holds the later, and a turn missing there is never found.
        self._turn_writes = threading.Lock()
        self._warming: Future[int] | None = None
        # A rebuild (a store thread) checks ``_closed`` and notes its future as ``_warming``
        # under this; ``close`` (the loop) marks the store closed under it: so a rebuild
        # submitted as the store closes is the ``_warming`` that ``close`` waits for.
        self._warm_lock = threading.Lock()
        self._ids = ids
        # What decides whether a search runs on the loop (``edge_inline``): the calls on the
        # store's threads (one token each), the shard's size as a hopped search last read it,
        # and the inline searches left until it is read again.
        self._calls: set[object] = set()
        self._waiting = 0  # searches at their loop turn before running inline
        self._points: int | None = None
        self._inline_left = 0
        # A store larger than its record cache reads payloads from the shard in a search: that
        # search stays on a store thread (the bound was measured with every record cached).
        self.inline_max_points = min(INLINE_SEARCH_MAX_POINTS, record_cache_entries)

    @property
    def _shard(self) -> qe.EdgeShard:
        """The shard's current handle: a background index build swaps in another (adr/0153);
        every update goes through ``self._maintenance.update``, every read through
        ``self._reads`` (which keeps the handle it took open until done)."""
        return self._maintenance.shard

    @_shard.setter
    def _shard(self, shard: qe.EdgeShard) -> None:
        """Replace the handle (tests wrap the engine to count or fail its calls)."""
        self._maintenance.shard = shard

    @classmethod
    async def open(
        cls,
        data_dir: str | Path,
        *,
        dimensions: int,
        hybrid: bool = HYBRID,
        workers: int = DEFAULT_WORKERS,
        optimize_after: int | None = OPTIMIZE_AFTER_POINTS,
        record_cache_entries: int = DEFAULT_MAX_ENTRIES,
        search_threads: int | None = None,
        warm_up: bool = True,
        point_ids: Scheme = NEW_STORES,
        persistent: bool = True,
    ) -> EdgeStore:
        """Open (or create) the store under ``data_dir``; loading runs off the event loop.

        ``hybrid`` fuses BM25 with dense results at search time (sparse vectors are always
        written, so it can be switched per process). ``optimize_after`` unindexed points (those
        found at open count too, and start one at once: adr/0189) start a background index
        build; ``None`` leaves it to explicit ``optimize()`` calls (bulk loads).
        ``search_threads`` sizes the engine's search pool (``edge_shard.shard_config``; the
        composition root picks it, adr/0131). ``warm_up`` False leaves the record cache's
        warm-up to a later ``start_warm_up`` call.
        ``point_ids`` names the points of a store created here (``edge_ids``, adr/0139); an
        existing store keeps its own. ``persistent`` False: the owner deletes the files after
        ``close`` and never opens them again (a worker's replica, adr/0179), so nothing flushes
        them but an explicit ``flush`` (no background flush, none at close) and the retrieval
        counts stay in memory.
        """
        if dimensions <= 0:
            raise ConfigError(f"embedding dimensions must be positive, got {dimensions}")
        path = Path(data_dir) / SHARD_DIR
        executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="edge-store")
        loop = asyncio.get_running_loop()
        shard: qe.EdgeShard | None = None
        try:
            # A build this process left running on these files (``close``) ends first.
            await loop.run_in_executor(executor, wait_for_build, path)
            await loop.run_in_executor(executor, settle_generations, path)
            ids = await loop.run_in_executor(executor, ids_at, path, point_ids)
            shard = await loop.run_in_executor(
                executor, open_shard, path, dimensions, search_threads
            )
            await loop.run_in_executor(executor, drop_stale_generations, path)
            unindexed = await loop.run_in_executor(executor, unindexed_points, shard)
            counts = await loop.run_in_executor(
                executor, RetrievalCounts.load, Path(data_dir) / COUNTS_FILE
            )
            if not persistent:
                counts.path = None  # read once, never saved: nothing reads the file again
        except BaseException:
            if shard is not None:  # its WAL lock too: until closed, no open here succeeds
                with contextlib.suppress(Exception):
                    shard.close()
            executor.shutdown(wait=False)
            raise
        store = cls(
            shard,
            executor,
            dimensions=dimensions,
            hybrid=hybrid,
            optimize_after=optimize_after,
            record_cache_entries=record_cache_entries,
            counts=counts,
            path=path,
            unindexed=unindexed,
            ids=ids,
            persistent=persistent,
        )
        # Points a closed process left outside the graph (its build cut short by the close)
        # are indexed now, not at some later write: a server that only reads never writes.
        store._maintenance.build_if_due()
        if warm_up:
            store.start_warm_up()
        return store

    def start_warm_up(self) -> None:
        """Start filling the record cache in the background (once; ``warmed`` waits for it)."""
        if self._warming is None and not self._closed:
            # A thread's future, not the loop's: a store may be closed from another event loop.
            self._warming = self._executor.submit(self._warm_sync)

    async def warmed(self) -> int:
        """Wait for the record cache's warm-up after ``open``; return how many memories it
        decoded (0: the store does not fit the cache, or the warm-up stopped)."""
        if self._warming is None:
            return 0
        return await asyncio.shield(asyncio.wrap_future(self._warming))

    def _warm_sync(self) -> int:
        """Decode every memory into the record cache if they all fit, a page at a time, and
        profile their texts for the assembler if those fit their memo; each page is kept only
        if no write came while it was read (``RecordCache.store``). A store larger than the
        cache is left to the searches: which records they need is theirs to say. A failure
        here costs speed only: it is logged and the warm-up stops."""
        cache, merged, turns = self._records, self._counts.merged, self._turns
        kept, read_all = 0, False
        try:
            # A rebuild submitted as the store closed (``_rebuild_turns``) reads nothing, not
            # even the shard's size.
            if self._closed or not cache.max_entries:
                return 0
            points = self._reads.info().points_count
            if points > cache.max_entries:
                return 0
            # The texts' profiles only if they all fit their memo (smaller than the record
            # cache, adr/0182): a larger store's pages, in id order, would push each other out.
            profile = points <= text_profile.maxsize
            turns.start()  # the same read fills the dialog turns' index (edge_turns)
            offset: Any = None
            while not self._closed:
                generation = cache.generation
                request = qe.ScrollRequest(
                    offset=offset, limit=WARM_PAGE, with_payload=True, with_vector=False
                )
                found, offset = self._reads.scroll(request)
                page = {
                    (key := key_of(point.id)): merged(key, from_payload(point.payload or {}))
                    for point in found
                }
                turns.load(
                    (key, record.tenant, record.user, ts)
                    for key, record in page.items()
                    if (ts := listed_at(record)) is not None
                )
                if cache.store(page, generation):
                    kept += len(page)
                # What the assembler derives from each text, ahead of its first request: a
                # question meets ~15 memories no earlier one did (proxy/context/profiles.py).
                if profile:
                    prepare_profiles(page.values())
                if offset is None:
                    read_all = True
                    break
        except Exception as exc:
            LOGGER.warning("warming the record cache failed (searches read payloads): %s", exc)
        finally:
            turns.finish(read_all)
        return kept

    def _rebuild_turns(self) -> None:
        """After a write failed and gave the dialog turns' index up (``DialogTurns.abandon``),
        build it again as the warm-up did (the record cache's pages come along): at the
        first write that succeeds after it, so an engine failing its writes is not read in
        full again each time, and once at a time. It runs as ``_warming``: ``close`` waits
        for it (it stops after its page), and searches hop meanwhile as during the warm-up.
        A store never warmed (``start_warm_up`` not called) is left to its warm-up."""
        with self._warm_lock:
            warming = self._warming
            if warming is None or not warming.done() or self._closed:
                return
            if self._turns.take_rebuild():
                with contextlib.suppress(RuntimeError):  # the executor stopped: no rebuild
                    self._warming = self._executor.submit(self._warm_sync)

    async def _run(self, func: Callable[..., T], *args: Any) -> T:
        """Run a blocking shard call on the store's threads; the engine's failures are
        ``StoreError``s. The call counts in ``_calls`` from its submit to its end."""
        token = object()
        self._calls.add(token)
        try:
            with engine_errors():
                return await run_on(self._executor, self._tracked, token, func, args)
        except asyncio.CancelledError:
            # A call left before it started never runs, so never drops its token; one that
            # started drops it again when it ends (dropped early here: a hop, not a lock).
            self._calls.discard(token)
            raise

    def _tracked(self, token: object, func: Callable[..., T], args: tuple[Any, ...]) -> T:
        """``func(*args)`` on a store thread, dropping its token from ``_calls`` when done."""
        try:
            return func(*args)
        finally:
            self._calls.discard(token)

    def _inline(self, alone: bool) -> bool:
        """Whether a search may run on the event loop's thread now (``edge_inline``); ``alone``:
        the search's ``SearchQuery.alone``."""
        warming = self._warming
        state = StoreState(
            alone=alone,
            closed=self._closed,
            warming=warming is not None and not warming.done(),
            calls=len(self._calls) + self._waiting,
            points=self._points,
            searches_left=self._inline_left,
        )
        return inline(state, self.inline_max_points) and free(self._search_locks())

    def _search_locks(self) -> tuple[Lock, ...]:
        """Every lock a search takes: the shard handle's (``ShardMaintenance.reading``), the
        record cache's, the dialog turns' index's and the retrieval count table's. The
        lifecycle, user and tenant notes take theirs only after a shard lookup, which the
        search's first call per tenant and user makes (on a hop: the size is not read yet)."""
        return (
            self._maintenance._handles,
            self._records._lock,
            self._turns._lock,
            self._counts._lock,
        )

    async def add(self, records: Sequence[MemoryRecord], vectors: np.ndarray) -> None:
        """Upsert records by (tenant, id); returns once the batch is in the write-ahead log."""
        check_vectors(records, vectors, self.dimensions)
        if records:
            await self._run(self.add_sync, records, vectors)

    def add_sync(self, records: Sequence[MemoryRecord], vectors: np.ndarray) -> None:
        """Blocking ``add`` (for bulk loaders that already run off the event loop)."""
        check_vectors(records, vectors, self.dimensions)
        rows = np.asarray(vectors, dtype=np.float32).tolist()
        key = self._ids.key
        written = [key(r.tenant, r.id) for r in records]
        self._refuse_collisions(records, written)
        points = []
        turns: builtins.list[tuple[int, str, str, float | None]] = []
        for record, row, pid in zip(records, rows, written, strict=True):
            full = with_tokens(record)
            indices, values = lexical.encode_document(full.content)
            vector = {DENSE_VECTOR: row, SPARSE_VECTOR: qe.SparseVector(indices, values)}
            payload = to_payload(full)
            points.append(qe.Point(self._ids.wire(pid), vector, payload))
            turns.append((pid, record.tenant, record.user, listed_at(full)))
        # Before the write is visible: a search from now on filters these tenants on liveness,
        # and on the user where another user's memory arrives.
        self._lifecycle.note(
            r.tenant for r in records if r.expires_at is not None or r.superseded_by is not None
        )
        self._users.note({(r.tenant, r.user) for r in records})
        self._tenants.note({r.tenant for r in records})
        with self._turn_writes:
            self._turns.write(turns)
            try:
                self._maintenance.update(
                    qe.UpdateOperation.upsert_points(points), len(points), added=True
                )
            except BaseException:
                # Noted before the write: the index may have moved turns the shard kept.
                self._turns.abandon()
                raise
            # Again once visible: an index build may have read the points before the write.
            self._turns.write(turns)
        self._counts.drop(written)  # the payload carries the record's own count again
        self._records.invalidate(written)
        self._rebuild_turns()
        self._maintenance.after_write(len(points))

    async def refuse_collisions(self, records: Sequence[MemoryRecord]) -> None:
        """Raise the ``StoreError`` ``add`` would raise for a batch whose 64-bit point ids
        name other memories (adr/0139), without writing (``ReplicaStore`` checks before it
        logs a batch)."""
        key = self._ids.key
        await self._run(self._refuse_collisions, records, [key(r.tenant, r.id) for r in records])

    def _refuse_collisions(self, records: Sequence[MemoryRecord], keys: Sequence[int]) -> None:
        """Refuse a write whose 64-bit point id already names another memory (adr/0139):
        an upsert would replace that memory. UUID ids are taken not to collide."""
        if self._ids.scheme != "u64":
            return
        names: dict[int, tuple[str, str]] = {}
        for record, key in zip(records, keys, strict=True):
            if names.setdefault(key, (record.tenant, record.id)) != (record.tenant, record.id):
                raise collision(record.id)
        held = self._reads.retrieve(list(names), list(NAME_FIELDS), False)
        for point in held:
            payload, name = point.payload or {}, names[key_of(point.id)]
            if (payload.get(TENANT_KEY), payload.get("id")) != name:
                raise collision(name[1])

    async def optimize(self) -> bool:
        """Build the HNSW index for everything written so far (blocks until done)."""
        return await self._maintenance.optimize()

    async def get(self, tenant: str, memory_id: str) -> MemoryRecord | None:
        """Return the memory or ``None`` (also when it belongs to another tenant)."""
        require_tenant(tenant)
        return await self._run(self._get_sync, tenant, memory_id)

    def _get_sync(self, tenant: str, memory_id: str) -> MemoryRecord | None:
        found = self._reads.retrieve([self._point_id(tenant, memory_id)], True, False)
        return self._owned(found[0], tenant, memory_id) if found else None

    def _point_id(self, tenant: str, memory_id: str) -> int | str:
        """The point id of (tenant, memory id), as the shard takes it."""
        return self._ids.wire(self._ids.key(tenant, memory_id))

    def _owned(self, point: Any, tenant: str, memory_id: str | None = None) -> MemoryRecord | None:
        """The tenant's record of a retrieved point, with its current retrieval count; with
        ``memory_id``, only if it is that memory (a 64-bit id may name another, adr/0139)."""
        record = owned(point.payload, tenant)
        if record is None or (memory_id is not None and record.id != memory_id):
            return None
        return self._counts.merged(key_of(point.id), record)

    async def list(
        self, tenant: str, *, user: str | None, source: str | None, limit: int, after: str | None
    ) -> Page:
        """Return a page of memories in point-id order, starting after the memory ``after``."""
        require_tenant(tenant)
        return await self._run(self._list_sync, tenant, user, source, limit, after)

    def _list_sync(
        self, tenant: str, user: str | None, source: str | None, limit: int, after: str | None
    ) -> Page:
        if limit <= 0:
            return Page(records=[], has_more=False, last_id=None)
        offset = self._point_id(tenant, after) if after is not None else None
        # One extra for the cursor itself (scroll starts at it, inclusive) and one for has_more.
        request = qe.ScrollRequest(
            offset=offset,
            limit=limit + 2,
            filter=list_filter(tenant, user, source),
            with_payload=True,
            with_vector=False,
        )
        found, _ = self._reads.scroll(request)
        records = [r for r in (self._owned(p, tenant) for p in found) if r is not None]
        if after is not None and records and records[0].id == after:
            records = records[1:]
        page = records[:limit]
        return Page(
            records=page,
            has_more=len(records) > limit,
            last_id=page[-1].id if page else None,
        )

    async def delete(self, tenant: str, memory_id: str) -> bool:
        """Delete one memory; ``False`` if the tenant has no memory with that id."""
        require_tenant(tenant)
        return await self._run(self._delete_sync, tenant, memory_id)

    def _delete_sync(self, tenant: str, memory_id: str) -> bool:
        pid = self._point_id(tenant, memory_id)
        with self._rmw_lock:
            found = self._reads.retrieve([pid], True, False)
            if not found or self._owned(found[0], tenant, memory_id) is None:
                return False
            with self._turn_writes:
                self._maintenance.update(qe.UpdateOperation.delete_points([pid]))
                self._turns.drop([key_of(pid)])
            self._counts.drop([key_of(pid)])
            self._records.invalidate([key_of(pid)])
        return True

    async def delete_user(self, tenant: str, user: str) -> int:
        """Delete every memory of ``user`` in the tenant; return how many there were."""
        require_tenant(tenant)
        return await self._run(self._delete_user_sync, tenant, user)

    def _delete_user_sync(self, tenant: str, user: str) -> int:
        scope = list_filter(tenant, user, None)
        with self._rmw_lock:
            count = self._delete_matching(scope)
        return count

    async def search(self, tenant: str, query: SearchQuery) -> builtins.list[Candidate]:
        """Return the best ``top_k`` memories of the user and the tenant's shared memories."""
        require_tenant(tenant)
        vector = check_query(query, self.dimensions)
        if query.top_k <= 0:
            return []
        return await self._run(self.search_sync, tenant, query, vector)

    def search_sync(
        self, tenant: str, query: SearchQuery, vector: np.ndarray, dense: qe.Query | None = None
    ) -> builtins.list[Candidate]:
        """Blocking ``search`` (the benchmark uses it to measure the cost of offloading);
        ``dense``: the vector's query (``edge_query.nearest``) if the caller has it."""
        at, user = query.live_at, query.user
        # Whether the search needs its liveness, user and tenant conditions: only if the tenant
        # may hold a dead memory (edge_lifecycle), another user's memory (edge_users), or the
        # shard another tenant's (edge_tenants).
        lives = at is None or self._lifecycle.may_hold(
            tenant, lambda: self._holds_lifecycle(tenant)
        )
        users = self._users.others(tenant, user, lambda: self._holds_others(tenant, user))
        tenants = self._shares_shard(tenant)
        if lives and users and tenants:
            return self._search_once(tenant, query, vector, dense=dense)
        # Search without them, but check what comes back: a write may have raced the lookup.
        found = self._search_once(
            tenant,
            query if lives else replace(query, live_at=None),
            vector,
            users=users,
            tenants=tenants,
            dense=dense,
        )
        if not tenants and not all(hit.record.tenant == tenant for hit in found):
            # Another tenant's memories say nothing of this tenant's liveness or users.
            self._tenants.note_others()
            return self._search_once(tenant, query, vector, dense=dense)
        dead = at is not None and not lives and not all(hit.record.live(at) for hit in found)
        seen = scope_users(user)
        foreign = not users and not all(hit.record.user in seen for hit in found)
        if not dead and not foreign:
            return found
        if dead:
            self._lifecycle.note([tenant])
        if foreign:
            self._users.note_others(tenant, user)
        return self._search_once(tenant, query, vector, dense=dense)

    def _shares_shard(self, tenant: str) -> bool:
        """Whether the shard may hold another tenant's memory than ``tenant``'s."""
        return self._tenants.others(tenant, self._shard_tenants)

    async def search_near(
        self, tenant: str, query: SearchQuery, seeds: int, window_s: float
    ) -> Found:
        """The ranked hits and the dialog turns beside the first ``seeds`` dialog hits, in one
        call: the lookup runs in the search's own call, seeded by its hits (a second hop cost
        ~0.13 ms of each chat request's search stage; docs/benchmarks.md). On the event loop's
        thread when ``edge_inline`` allows (it then never waits, so a stage timeout cannot cut
        it: adr/0172), else on a store thread."""
        require_tenant(tenant)
        vector = check_query(query, self.dimensions)
        if query.top_k <= 0:
            return Found([], [])
        if self._inline(query.alone):
            # Only a search whose request is alone in its memory stage gets here: under load
            # the others hop at once, as before adr/0172 (served at c=50, 0.5 % of searches ran
            # inline, 2.5 % without the rule: docs/benchmarks.md). One loop turn first: a stage
            # timeout or memory deadline already passed fires here (nothing can cut the search
            # itself), and another search that reaches this turn meanwhile says the loop is
            # busy: both hop (adr/0172).
            self._waiting += 1
            try:
                await asyncio.sleep(0)
            finally:
                self._waiting -= 1
            if self._inline(query.alone):  # a write or another search may have come meanwhile
                self._inline_left -= 1
                with engine_errors():
                    return self._search_near_sync(tenant, query, vector, seeds, window_s)
        return await self._run(self._search_near_sized, tenant, query, vector, seeds, window_s)

    def _search_near_sized(
        self, tenant: str, query: SearchQuery, vector: np.ndarray, seeds: int, window_s: float
    ) -> Found:
        """``_search_near_sync`` on a store thread, reading the shard's size first when the
        inline searches are due to read it (``edge_inline``)."""
        if self._inline_left <= 0:
            try:
                self._points = self._reads.info().points_count
                self._inline_left = INLINE_SIZE_EVERY
            except Exception as exc:  # the search says what failed; it stays on a thread
                if not is_engine_error(exc):
                    raise
        elif self._points is None or self._points > self.inline_max_points:
            # No search of a store read over the bound runs inline to use the readings up:
            # its hops do, or a store that deletes bring under the bound would hop until a
            # restart.
            self._inline_left -= 1
        return self._search_near_sync(tenant, query, vector, seeds, window_s)

    def _search_near_sync(
        self, tenant: str, query: SearchQuery, vector: np.ndarray, seeds: int, window_s: float
    ) -> Found:
        dense = nearest(vector)  # one for the search and the lookup
        hits = ranked(self.search_sync(tenant, query, vector, dense))
        chosen, turns = turns_query(query, hits, seeds, window_s)
        if turns is None:
            return Found(hits, [])
        try:
            beside = self._turns_from_index(tenant, hits, chosen, turns, dense)
            if beside is not None:
                return Found(hits, beside)
            near = self._turns_near_sync(tenant, turns, dense)
        except Exception as exc:  # the hits stand without their neighbours
            turns_failed(exc)
            return Found(hits, None)
        return Found(hits, near_turns(hits, chosen, near, window_s))

    def _turns_from_index(
        self,
        tenant: str,
        hits: builtins.list[Candidate],
        seeds: builtins.list[Candidate],
        query: TurnsQuery,
        dense: qe.Query,
    ) -> builtins.list[Candidate] | None:
        """``near_turns`` of the turns ``query`` asks for, from the dialog turns' index
        (``edge_turns``): the engine only scores the turns kept. ``None``: ask the engine (the
        index is not complete, one of its entries is stale, or the engine's limit would have
        cut the turns by cosine)."""
        spans = windows(query)
        keys = self._turns.near(tenant, query.user, spans)
        if keys is None or len(keys) > NEAR_TURNS * len(query.times):
            return None
        records = self._records_of(tenant, keys)
        at, user = query.live_at, query.user
        near: builtins.list[Candidate] = []
        key_of_id: dict[str, int] = {}
        for key in keys:
            record = records.get(key)
            if record is None:  # deleted by a filter: the index still lists it
                continue
            if record.user != user or record.source != DIALOG_SOURCE:
                return None  # a write raced the index
            ts = record.created_at.timestamp()
            for low, high in spans:
                if low <= ts <= high:
                    break
            else:
                return None  # likewise
            if record.live(at):
                near.append(candidate(record, 0.0))  # adjacency reads times, not cosines
                key_of_id[record.id] = key
        if key_of_id.keys() <= {seed.record.id for seed in seeds}:
            # Only the seeds lie in their windows, and a seed is a hit: no turn is left to add.
            # 287 of 500 chat searches of the bench's 10k real-text store (docs/benchmarks.md),
            # where ``near_turns`` built the hits' ids and sorted the turns for nothing.
            return []
        kept = near_turns(hits, seeds, near, query.window_s)
        if not kept:
            return []
        wire = self._ids.wire
        wanted = [key_of_id[turn.record.id] for turn in kept]
        scored = self._ids.scored(
            self._reads.query(
                qe.QueryRequest(
                    limit=len(wanted),
                    query=dense,
                    filter=qe.Filter(must=[qe.HasIdCondition({wire(key) for key in wanted})]),
                    with_payload=False,
                    params=FEW_PARAMS,
                )
            )
        )
        return [
            candidate(turn.record, score if 0.0 <= score <= 1.0 else clip_similarity(score))
            for turn, key in zip(kept, wanted, strict=True)
            if (score := scored.get(key)) is not None
        ]

    def _holds_others(self, tenant: str, user: str) -> bool:
        """Whether the shard holds a memory of ``tenant`` that a search of ``user`` may not see."""
        return bool(
            self._reads.count(qe.CountRequest(exact=True, filter=others_filter(tenant, user)))
        )

    def _shard_tenants(self) -> builtins.list[str] | None:
        """Which tenants the shard holds, as far as one tells one from several: none, its
        sole tenant, or a tenant and another; ``None`` if the shard could not tell (the
        search keeps its tenant condition: a lookup is a saving, not a reason to fail)."""
        try:
            first = self._one_tenant(None)
            if first is None:
                return []
            if not first:
                return None  # a point without its tenant: nothing to tell from
            not_first = qe.FieldCondition(TENANT_KEY, match=qe.MatchValue(first))
            other = self._one_tenant(qe.Filter(must_not=[not_first]))
        except Exception as exc:
            if not is_engine_error(exc):
                raise
            LOGGER.warning("looking up the shard's tenants failed (searches filter): %s", exc)
            return None
        return [first] if other is None else [first, other]

    def _one_tenant(self, scope: qe.Filter | None) -> str | None:
        """The tenant of one point ``scope`` matches (any one: an existence check, not a
        count); ``None`` if none matches, "" if the point has no tenant."""
        request = qe.ScrollRequest(
            limit=1, filter=scope, with_payload=[TENANT_KEY], with_vector=False
        )
        found, _ = self._reads.scroll(request)
        if not found:
            return None
        tenant = (found[0].payload or {}).get(TENANT_KEY)
        return tenant if isinstance(tenant, str) else ""

    def _holds_lifecycle(self, tenant: str) -> bool:
        """Whether the shard holds a memory of ``tenant`` with an expiry or a successor."""
        return any(
            self._reads.count(qe.CountRequest(exact=True, filter=found))
            for found in lifecycle_filters(tenant)
        )

    def _search_once(
        self,
        tenant: str,
        query: SearchQuery,
        vector: np.ndarray,
        *,
        users: bool = True,
        tenants: bool = True,
        dense: qe.Query | None = None,
    ) -> builtins.list[Candidate]:
        with self._maintenance.reading() as shard:
            keys, cosine = search_hits(
                shard,
                tenant,
                query,
                vector,
                hybrid=self.hybrid,
                ids=self._ids,
                users=users,
                tenants=tenants,
                dense=dense,
            )
        return self._candidates(tenant, keys, cosine, scoped=tenants)

    def _candidates(
        self,
        tenant: str,
        keys: builtins.list[int],
        cosine: dict[int, float],
        *,
        scoped: bool = True,
    ) -> builtins.list[Candidate]:
        """The points ``keys`` as candidates with their records and ``cosine``s (0.0 for a
        key without one); ``scoped`` False: the hits of a query without the tenant condition,
        whose records the caller checks."""
        records = self._records_of(tenant, keys, scoped=scoped)
        record_of, score_of = records.get, cosine.get
        made: builtins.list[Candidate] = []
        add = made.append
        for key in keys:
            # A hit deleted between the search and the payload read is simply gone.
            record = record_of(key)
            if record is not None:
                score = score_of(key, 0.0)
                # Stored vectors are normalised, so a cosine is nearly always in range already.
                add(candidate(record, score if 0.0 <= score <= 1.0 else clip_similarity(score)))
        return made

    def _records_of(
        self, tenant: str, keys: builtins.list[int], *, scoped: bool = True
    ) -> dict[int, MemoryRecord]:
        """The records of ``keys``: cached ones, the rest read from the shard (then cached).
        ``scoped``: the keys came from a query with the tenant condition, so another tenant's
        record is a bug (``StoreError``); else it may be a write that raced ``edge_tenants``'s
        lookup, which the caller looks for."""
        found, generation = self._records.lookup(keys)
        wire = self._ids.wire
        missing: builtins.list[Any] = (
            [] if len(found) == len(keys) else [wire(key) for key in keys if key not in found]
        )
        if missing:
            merged = self._counts.merged
            fetched = {
                (key := key_of(point.id)): merged(
                    key,
                    owned_or_fail(point.payload, tenant)
                    if scoped
                    else stored_or_fail(point.payload),
                )
                for point in self._reads.retrieve(missing, True, False)
            }
            self._records.store(fetched, generation)
            found.update(fetched)
        if not scoped:
            return found
        for record in found.values():
            if record.tenant != tenant:  # defence in depth, as for payloads read from the shard
                raise StoreError("a search returned another tenant's memory")
        return found

    async def increment_retrievals(self, tenant: str, ids: Sequence[str]) -> None:
        """Add one to a memory's retrieval count per occurrence of its id in ``ids``."""
        require_tenant(tenant)
        if ids:
            key = self._ids.key
            deltas = Counter(key(tenant, i) for i in ids)
            await self._run(self._increment_sync, tenant, deltas)

    def _increment_sync(self, tenant: str, deltas: Counter[int]) -> None:
        # Never a shard write (adr/0103): new counts go to the table beside the shard. An id in
        # the table is a point of this tenant that exists (point ids derive from the tenant, the
        # table only takes ids read as the tenant's, and every delete or rewrite drops its entry
        # under this lock), so only ids not counted yet are read, for whether they exist in the
        # tenant and the counts they were written with. Most ids of a busy store are counted.
        with self._rmw_lock:
            counts: dict[int, int] = {}
            unread: builtins.list[Any] = []  # UUIDs; the shard takes a list of ids of any kind
            for key, delta in deltas.items():
                current = self._counts.get(key)
                if current is None:
                    unread.append(self._ids.wire(key))
                else:
                    counts[key] = current + delta
            found = self._reads.retrieve(unread, list(COUNT_FIELDS), False) if unread else []
            for point in found:
                payload = point.payload
                if not payload or payload.get(TENANT_KEY) != tenant:
                    continue
                key = key_of(point.id)
                counts[key] = int(payload.get(RETRIEVAL_COUNT_KEY) or 0) + deltas[key]
            self._counts.set_many(counts)
            self._records.update_counts(counts)
        self._counts.save_if_due()  # on a thread of its own, which logs a failure

    async def set_usefulness(
        self, tenant: str, memory_id: str, usefulness: float
    ) -> MemoryRecord | None:
        """Set a memory's usefulness; return the updated memory, or ``None`` if there is none."""
        return await self.update_usefulness(tenant, memory_id, lambda _: usefulness)

    async def update_usefulness(
        self, tenant: str, memory_id: str, update: Callable[[float], float]
    ) -> MemoryRecord | None:
        """Set usefulness to ``update(current)`` under the read-modify-write lock."""
        require_tenant(tenant)
        return await self._run(self._update_usefulness_sync, tenant, memory_id, update)

    def _update_usefulness_sync(
        self, tenant: str, memory_id: str, update: Callable[[float], float]
    ) -> MemoryRecord | None:
        pid = self._point_id(tenant, memory_id)
        with self._rmw_lock:
            found = self._reads.retrieve([pid], True, False)
            current = self._owned(found[0], tenant, memory_id) if found else None
            if current is None:
                return None
            value = update(current.usefulness)
            self._maintenance.update(qe.UpdateOperation.set_payload([pid], {"usefulness": value}))
            self._records.invalidate([key_of(pid)])
            after = self._reads.retrieve([pid], True, False)
        return self._owned(after[0], tenant, memory_id)

    async def supersede(self, tenant: str, memory_id: str, by: str) -> MemoryRecord | None:
        """Mark the memory superseded by ``by`` if it is not yet, under the read-modify-write
        lock (a payload update: the vector stays)."""
        require_tenant(tenant)
        return await self._run(self._supersede_sync, tenant, memory_id, by)

    def _supersede_sync(self, tenant: str, memory_id: str, by: str) -> MemoryRecord | None:
        pid = self._point_id(tenant, memory_id)
        with self._rmw_lock:
            found = self._reads.retrieve([pid], True, False)
            current = self._owned(found[0], tenant, memory_id) if found else None
            if current is None or current.superseded_by is not None:
                return None
            # Before the write is visible, as ``add`` does: a superseded memory is dead.
            self._lifecycle.note([tenant])
            with self._turn_writes:
                self._maintenance.update(
                    qe.UpdateOperation.set_payload([pid], {SUPERSEDED_KEY: by})
                )
                # Once visible (never before: a failed mark leaves the turn live), under the
                # index's write lock as a delete: superseded is final (``edge_turns``).
                self._turns.drop([key_of(pid)])
            self._records.invalidate([key_of(pid)])
            after = self._reads.retrieve([pid], True, False)
        return self._owned(after[0], tenant, memory_id)

    async def count(self, tenant: str) -> int:
        """Return how many memories the tenant has."""
        require_tenant(tenant)
        return await self._run(
            lambda: self._reads.count(qe.CountRequest(exact=True, filter=tenant_filter(tenant)))
        )

    async def repeats(
        self, tenant: str, keys: Collection[RepeatKey], live_at: datetime
    ) -> builtins.list[MemoryRecord]:
        """The live memories whose (user, words key) is one of ``keys``: one filtered scroll
        (a page at a time) for a whole batch."""
        require_tenant(tenant)
        if not keys:
            return []
        return await self._run(self._repeats_sync, tenant, keys, live_at.timestamp())

    def _repeats_sync(
        self, tenant: str, keys: Collection[RepeatKey], live_at: float
    ) -> builtins.list[MemoryRecord]:
        scope = repeat_filter(tenant, keys, live_at)
        found = self._scrolled(scope, page=REPEATS_PAGE, with_payload=True)
        return repeats_among([p.payload for p in found], tenant, keys)

    async def turns_near(self, tenant: str, query: TurnsQuery) -> builtins.list[Candidate]:
        """The dialog turns ``query`` asks for, with their cosines."""
        require_tenant(tenant)
        vector = check_vector(query.vector, self.dimensions)
        if not query.times:
            return []
        return await self._run(self._turns_near_sync, tenant, query, nearest(vector))

    def _turns_near_sync(
        self, tenant: str, query: TurnsQuery, dense: qe.Query
    ) -> builtins.list[Candidate]:
        # A dense query over the window's turns returns their cosines without payloads or
        # vectors; records come from the record cache as a search's do. A scroll returning
        # payloads and vectors cost 1.3 ms p50 on LoCoMo dev (search 1.2 ms), this 0.6 ms
        # (search 1.4 ms). Without the tenant condition where it excludes nothing
        # (edge_tenants), checked as a search's hits are.
        tenants = self._shares_shard(tenant)
        found = self._turns_once(tenant, query, dense, tenants=tenants)
        if tenants or all(turn.record.tenant == tenant for turn in found):
            return found
        self._tenants.note_others()
        return self._turns_once(tenant, query, dense, tenants=True)

    def _turns_once(
        self, tenant: str, query: TurnsQuery, dense: qe.Query, *, tenants: bool
    ) -> builtins.list[Candidate]:
        found = self._reads.query(
            qe.QueryRequest(
                limit=NEAR_TURNS * len(query.times),
                query=dense,
                filter=turns_filter(tenant, query, tenants=tenants),
                with_payload=False,
                params=FEW_PARAMS,
            )
        )
        cosine = self._ids.scored(found)
        return self._candidates(tenant, list(cosine), cosine, scoped=tenants)

    async def purge_expired(self, before: datetime) -> int:
        """Delete every memory expired at or before ``before``; return how many."""
        return await self._run(self._purge_sync, expired_filter(before.timestamp()))

    def _purge_sync(self, expired: qe.Filter) -> int:
        with self._rmw_lock:
            count = self._delete_matching(expired)
        return count

    def _delete_matching(self, scope: qe.Filter) -> int:
        """Delete the points ``scope`` matches and drop their retrieval counts (the caller holds
        the read-modify-write lock); return how many there were."""
        count = self._reads.count(qe.CountRequest(exact=True, filter=scope))
        if not count:
            return 0
        # Under the index's write lock: no upsert comes between reading the keys and deleting.
        with self._turn_writes:
            keys: builtins.list[int] | None = None
            if len(self._counts) or self._turns.listing:
                matching = self._scrolled(scope, page=DELETE_PAGE, with_payload=False)
                keys = [key_of(point.id) for point in matching]
                # The increments trust the table to hold only live points: forget these first.
                self._counts.drop(keys)
            self._maintenance.update(qe.UpdateOperation.delete_points_by_filter(scope))
            if keys is not None:
                # Else the deleted turns stay listed and count against the index's bound.
                self._turns.drop(keys)
        self._records.clear()
        return count

    def _scrolled(self, scope: qe.Filter, *, page: int, with_payload: bool) -> Iterator[Any]:
        """Every point ``scope`` matches, read ``page`` points at a time (no vectors)."""
        offset: Any = None
        while True:
            request = qe.ScrollRequest(
                offset=offset,
                limit=page,
                filter=scope,
                with_payload=with_payload,
                with_vector=False,
            )
            found, offset = self._reads.scroll(request)
            yield from found
            if offset is None:
                return

    async def ready(self) -> bool:
        """Whether the shard is open: it lives in this process, nothing else can be down."""
        return not self._closed

    async def flush(self) -> None:
        """Persist segments and the retrieval counts table now (the WAL already holds every
        acknowledged write; the counts table is only saved every few seconds otherwise). On
        return no background flush is running either: the files stay as they are until the
        next write (the supervisor's primary is copied by replicas, adr/0120)."""
        await self._run(self._flush_sync)

    def _flush_sync(self) -> None:
        self._maintenance.settle()
        self._counts.save()
        self._maintenance.flush()

    async def close(self) -> None:
        """Flush (a ``persistent`` store), close the shard and stop the threads (once). A
        running background index build's child process is killed and its copy dropped."""
        if self._closed:
            return
        with self._warm_lock:  # held by a rebuild only while it is submitted (microseconds)
            self._closed = True
        await self.warmed()  # stops after the page it is reading
        await self._run(self._close_sync)
        self._executor.shutdown(wait=True)

    def _close_sync(self) -> None:
        self._maintenance.close()
        # No save of the counts is left armed; a replica's files are deleted next, unread:
        # neither their save nor a flush buys anything.
        self._counts.close(save=self.persistent)
        if self.persistent:
            self._maintenance.flush()
        if not self._maintenance.when_idle(lambda: self._shard.close()):
            LOGGER.warning("closing the memory store during an index build: it ends on its own")
