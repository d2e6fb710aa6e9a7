"""``MemoryService``: THE write path of memories, and what the memories API does with them.

Every writer goes through ``MemoryService.write`` (the memories API, ``memproxy memories
import`` and the pipeline's capture, which sees it as a ``MemoryWriter``), so a memory gets the
same treatment wherever it comes from: validated input (``proxy.memory.inputs``), an id (the
client's, else generated), token counts for every stored encoding counted once, one batched
embedding call (a dialog turn's text joined with the turn before it, ``turn_context``),
``store.add`` (an upsert by (tenant, id)), then ``cache.bump_generation(tenant)`` so no cached
search result can hide the write. Validation happens before any of it: a bad batch
writes nothing. A memory written without an id that repeats a live memory of the same user
(``proxy.memory.duplicates``), or an earlier one of its batch, is not stored again: the existing
record stands in for it (write hygiene, adr/0113); with an id it is the caller's upsert.
Searches go through the one read path, ``retriever`` (``retriever.py``), which the chat
pipeline shares.

Usage::

    service = MemoryService(store, embedder, cache)  # the app builds one (proxy/composition.py)
    records = await service.write(tenant.id, [MemoryInput(content=text, user=user,
                                                          source="conversation",
                                                          metadata={"session": sid})])
    # or, from untrusted JSON-like dicts (validated, 400 on bad input):
    records = await service.add(tenant.id, [{"content": text, "user": user}])

Errors: ``RequestError`` (400) for bad input, ``NotFound`` (404) for an unknown id (also one
that belongs to another tenant: the store is keyed by (tenant, id)), ``StoreError`` /
``EmbedderError`` (503) when a backend fails.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

import numpy as np

from proxy.cache.blocks import TurnBlocks
from proxy.cache.protocol import MemoryCache
from proxy.context.records import Candidate, MemoryRecord, index_text
from proxy.context.tokens import O200K
from proxy.defaults import API_PAGE, API_TOP_K, FORGET_SCAN_PAGE, MAX_CONTENT_CHARS
from proxy.errors import BackendError, EmbedderError, NotFound, RequestError
from proxy.memory.duplicates import normal_form, same_memory, words_key
from proxy.memory.embedders import Embedder
from proxy.memory.filters import DIALOG_SOURCE
from proxy.memory.inputs import (
    MAX_TOP_K,
    MemoryInput,
    SetUsefulness,
    Vote,
)
from proxy.memory.parsing import parse_memories
from proxy.memory.retriever import Retrieval, Retriever
from proxy.memory.store import MemoryStore, Page, with_tokens
from proxy.memory.turn_context import clipped, context_key, turn_sources
from proxy.tokenizer import count_tokens

# The one token count the API shows: o200k_base, the encoding of OpenAI's current models
# (gpt-4o, gpt-4.1, o-series). Both stored encodings stay in the record (adr/0070).
API_TOKEN_ENCODING = O200K
ID_PREFIX = "mem_"
# Above this much text, token counting moves to a worker thread (tiktoken lets go of the GIL
# there): the two stored encodings cost ~0.65 us per character (measured, adr/0071), Claude's
# count adds ~55% (0.06 of 0.11 us on LoCoMo text), so the loop stalls at most ~1 ms inline. A
# captured turn (question and answer, ~500-2,000 characters) held the loop 0.5-2 ms at 5,000.
INLINE_COUNT_MAX_CHARS = 1_000
# A thumbs up/down moves usefulness this fraction of the way to 1/0: one vote nudges, a
# consistent signal converges (adr/0072).
FEEDBACK_STEP = 0.2
# Per-user write locks kept before idle ones are dropped (a lock is ~200 B).
MAX_USER_LOCKS = 10_000
# Versions of a memory its history shows (a chain of replacements is followed this far).
HISTORY_LIMIT = 20


def utc_now() -> datetime:
    """The current time, aware UTC (the default clock)."""
    return datetime.now(UTC)


def new_id() -> str:
    """A fresh memory id: ``mem_`` and 32 hex digits of a random uuid."""
    return ID_PREFIX + uuid.uuid4().hex


def build_records(
    tenant: str, inputs: Sequence[MemoryInput], now: datetime, preceding: str = ""
) -> builtins.list[MemoryRecord]:
    """Turn validated inputs into records with ids, times, token counts and dialog turns'
    contexts (``turn_context``; ``preceding``: the text before the batch) (pure but
    CPU-bound)."""
    records = [
        with_tokens(
            MemoryRecord(
                id=item.id if item.id is not None else new_id(),
                tenant=tenant,
                user=item.user,
                source=item.source,
                content=item.content,
                created_at=item.created_at or now,
                confidence=item.confidence,
                usefulness=item.usefulness,
                retrieval_count=item.retrieval_count,
                tokens={},
                metadata=dict(item.metadata),
                expires_at=item.expires_at,
                superseded_by=item.superseded_by,
                supersedes=item.supersedes,
            )
        )
        for item in inputs
    ]
    built: builtins.list[MemoryRecord] = []
    for record, source in zip(records, turn_sources(records, preceding), strict=True):
        context = clipped(source)
        if context:
            # Keyed by the whole source, before the cut (adr/0144).
            record = dataclasses.replace(record, context=context, context_key=context_key(source))
        built.append(record)
    return built


def replaced(old: MemoryRecord, new: MemoryRecord) -> bool:
    """Whether upserting ``new`` over ``old`` forgets ``old``'s text for the copies of it in
    other turns' contexts (adr/0144): other words, another user, or an earlier expiry."""
    if old.user != new.user or context_key(old.content) != context_key(new.content):
        return True
    if new.expires_at is None:
        return False
    return old.expires_at is None or new.expires_at < old.expires_at


def count_api_tokens(text: str) -> int:
    """Tokens of ``text`` in ``API_TOKEN_ENCODING`` (for a record stored without its count)."""
    return count_tokens(text, API_TOKEN_ENCODING)


def memory_object(record: MemoryRecord) -> dict[str, object]:
    """The API shape of a memory (``tokens`` counted in ``API_TOKEN_ENCODING``)."""
    return {
        "object": "memory",
        "id": record.id,
        "user": record.user,
        "source": record.source,
        "content": record.content,
        "tokens": record.token_count(API_TOKEN_ENCODING, count_api_tokens),
        "confidence": record.confidence,
        "usefulness": record.usefulness,
        "retrieval_count": record.retrieval_count,
        "created_at": iso_utc(record.created_at),
        "metadata": dict(record.metadata),
        "expires_at": iso_utc(record.expires_at) if record.expires_at is not None else None,
        "superseded_by": record.superseded_by,
        "supersedes": record.supersedes,
    }


def iso_utc(moment: datetime) -> str:
    """``moment`` in ISO 8601 UTC, ending in Z (the API's form of a time)."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def search_hit_object(candidate: Candidate) -> dict[str, object]:
    """A memory object with the hit's ``similarity`` (0..1)."""
    return {**memory_object(candidate.record), "similarity": round(candidate.similarity, 6)}


def feedback_update(feedback: Vote | SetUsefulness) -> Callable[[float], float]:
    """The change a feedback call asks for: an explicit value is set; a vote moves
    ``FEEDBACK_STEP`` towards 1 or 0. The store applies it to the current value."""
    if isinstance(feedback, SetUsefulness):
        value = feedback.usefulness
        return lambda _current: value
    target = 1.0 if feedback.useful else 0.0
    return lambda current: round(current + FEEDBACK_STEP * (target - current), 6)


def feedback_usefulness(current: float, feedback: Vote | SetUsefulness) -> float:
    """New usefulness after one feedback call on a memory whose usefulness is ``current``."""
    return feedback_update(feedback)(current)


@dataclass(frozen=True)
class Prepared:
    """A batch ready to store: its inputs, their records and embeddings, and the write time."""

    inputs: Sequence[MemoryInput]
    records: builtins.list[MemoryRecord]
    vectors: np.ndarray
    now: datetime


class MemoryWriter(Protocol):
    """The write path as its writers see it (capture, import, the API)."""

    async def write(
        self, tenant: str, inputs: Sequence[MemoryInput], *, preceding: str = ""
    ) -> builtins.list[MemoryRecord]:
        """Write validated memories as one batch (``preceding``: the dialog text just before
        it, the context of its first dialog turn); return the stored records."""
        ...


class MemoryService:
    """Writes, reads, searches and deletes one tenant's memories at a time.

    Holds no state of its own: ``store``, ``embedder`` and ``cache`` belong to whoever created
    them. ``cache`` may be ``None`` (no generation to bump, no cached searches); ``blocks``
    ``None``: no remembered turn blocks to forget on a delete.
    """

    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        cache: MemoryCache | None = None,
        *,
        max_content_chars: int = MAX_CONTENT_CHARS,
        clock: Callable[[], datetime] = utc_now,
        blocks: TurnBlocks | None = None,
    ) -> None:
        self.store = store
        # Earlier turns' blocks (``proxy/cache/blocks.py``): a delete lets none shown before it
        # come back, so a deleted memory leaves every prompt from the next turn on.
        self.blocks = blocks
        self.embedder = embedder
        self.cache = cache
        self.retriever = Retriever(store, embedder, cache, clock=clock)
        self.max_content_chars = max_content_chars
        self._clock = clock
        # Per (tenant, user): a duplicate check and its write run alone, so two identical
        # memories written at once are stored once (in this process).
        self._user_locks: dict[tuple[str, str], asyncio.Lock] = {}

    # -- writing ---------------------------------------------------------------------------

    async def add(
        self, tenant: str, items: Sequence[Mapping[str, object]]
    ) -> builtins.list[MemoryRecord]:
        """Validate raw memory objects (all before any write), then ``write`` them."""
        inputs = parse_memories(builtins.list(items), max_content_chars=self.max_content_chars)
        return await self.write(tenant, inputs)

    async def write(
        self, tenant: str, inputs: Sequence[MemoryInput], *, preceding: str = ""
    ) -> builtins.list[MemoryRecord]:
        """Write validated memories as one batch; return the stored records (upsert by id).
        ``preceding``: the dialog text before the batch (``turn_context``)."""
        return [
            record for record, _ in await self.write_unique(tenant, inputs, preceding=preceding)
        ]

    async def write_unique(
        self, tenant: str, inputs: Sequence[MemoryInput], *, preceding: str = ""
    ) -> builtins.list[tuple[MemoryRecord, bool]]:
        """``write``, telling for each input whether it was stored (``False``: a duplicate,
        answered by the record it repeats)."""
        if not tenant:
            raise RequestError("a tenant is required to write memories", param="tenant")
        if not inputs:
            return []
        return await self._store(tenant, await self._prepare(tenant, inputs, preceding))

    async def import_batches(
        self, tenant: str, batches: Iterable[Sequence[MemoryInput]]
    ) -> AsyncIterator[builtins.list[MemoryRecord]]:
        """``write`` each batch in turn, yielding its records: the same stored points, ids
        aside, as one ``write`` per batch. The next batch's token counts and embedding are
        made (on worker threads) while the current one is stored, so a bulk import keeps both
        cores busy; the stores themselves still happen one batch after another, in order."""
        if not tenant:
            raise RequestError("a tenant is required to write memories", param="tenant")
        preparing: builtins.list[asyncio.Future[Prepared]] = []  # in order, two at most
        try:
            for batch in batches:
                if batch:
                    preparing.append(asyncio.ensure_future(self._prepare(tenant, batch)))
                if len(preparing) == 2:
                    yield await self._stored(tenant, await preparing.pop(0))
            while preparing:
                yield await self._stored(tenant, await preparing.pop(0))
        finally:
            for task in preparing:  # the caller stopped early, or a batch failed
                task.cancel()
            await asyncio.gather(*preparing, return_exceptions=True)

    async def _stored(self, tenant: str, prepared: Prepared) -> builtins.list[MemoryRecord]:
        return [record for record, _ in await self._store(tenant, prepared)]

    async def _prepare(
        self, tenant: str, inputs: Sequence[MemoryInput], preceding: str = ""
    ) -> Prepared:
        """Records (ids, times, token counts) and their embeddings: nothing stored yet."""
        now = self._clock()
        if sum(len(item.content) for item in inputs) > INLINE_COUNT_MAX_CHARS:
            records = await asyncio.to_thread(build_records, tenant, inputs, now, preceding)
        else:
            records = build_records(tenant, inputs, now, preceding)
        # A dialog turn's vector holds the turn before it (adr/0142); BM25 encodes its own
        # text only (the store's ``content``): the joined text lost evidence there.
        vectors = await self._embed([index_text(r.content, r.context) for r in records])
        return Prepared(inputs, records, vectors, now)

    async def _store(
        self, tenant: str, prepared: Prepared
    ) -> builtins.list[tuple[MemoryRecord, bool]]:
        """Store a prepared batch: an upsert when every input has an id, else with hygiene.
        A memory an upsert replaced loses the copies of its text (``forget_copies``)."""
        records = prepared.records
        upserted = [
            r for r, item in zip(records, prepared.inputs, strict=True) if item.id is not None
        ]
        # A batch with hygiene already makes one repeats lookup: its ids are read one by one.
        whole = len(upserted) == len(records)
        olds = await self._stored_versions(tenant, upserted, prepared.now, by_words=whole)
        if whole:
            await self.store.add(records, prepared.vectors)
            await self._invalidate(tenant)
            answer = [(record, True) for record in records]
        else:
            async with self._locks(tenant, {r.user for r in records}):
                answer = await self._write_new(tenant, prepared)
        gone = [old for old, new in zip(olds, upserted, strict=True) if old and replaced(old, new)]
        if gone:
            await self.forget_copies(tenant, gone, keep={r.id for r in records})
        return answer

    async def _stored_versions(
        self, tenant: str, records: Sequence[MemoryRecord], now: datetime, *, by_words: bool
    ) -> builtins.list[MemoryRecord | None]:
        """The stored version of each of ``records`` (by id; ``None``: new). With
        ``by_words`` one ``repeats`` lookup finds those stored live with the same words (a
        re-import); a ``get`` each the rest."""
        if not records:
            return []
        found: dict[str, MemoryRecord] = {}
        if by_words:
            keys = builtins.list({(r.user, words_key(r.content)) for r in records})
            found = {hit.id: hit for hit in await self.store.repeats(tenant, keys, now)}
        missing = [r.id for r in records if r.id not in found]
        for old in await asyncio.gather(*(self.store.get(tenant, i) for i in missing)):
            if old is not None:
                found[old.id] = old
        return [found.get(r.id) for r in records]

    async def _write_new(
        self, tenant: str, prepared: Prepared
    ) -> builtins.list[tuple[MemoryRecord, bool]]:
        """Store the batch's records but those without a client id that repeat a live memory
        of their user or an earlier record of the batch; each of those is answered by what it
        repeats."""
        inputs, records = prepared.inputs, prepared.records
        answer: builtins.list[tuple[MemoryRecord, bool]] = []
        keep: builtins.list[int] = []
        seen: dict[tuple[str, str], MemoryRecord] = {}
        keys = [(r.user, normal_form(r.content)) for r in records]
        # Only the first of a batch's repeats needs looking up, the rest match it in ``seen``.
        first: dict[tuple[str, str], MemoryRecord] = {}
        for item, key, record in zip(inputs, keys, records, strict=True):
            if item.id is None:
                first.setdefault(key, record)
        stored = await self.duplicates_of(tenant, builtins.list(first.values()), prepared.now)
        for index, (item, record, key) in enumerate(zip(inputs, records, keys, strict=True)):
            if item.id is None:
                known = stored.get(key) or seen.get(key)
                if known is not None:
                    answer.append((known, False))
                    continue
            if key[1]:  # a memory without words repeats nothing (``same_memory``)
                seen.setdefault(key, record)
            keep.append(index)
            answer.append((record, True))
        if keep:
            await self.store.add([records[i] for i in keep], prepared.vectors[keep])
            await self._invalidate(tenant)
        return answer

    async def duplicates_of(
        self, tenant: str, records: Sequence[MemoryRecord], now: datetime
    ) -> dict[tuple[str, str], MemoryRecord]:
        """For each of ``records`` that repeats a live memory of its user
        (``duplicates.same_memory``), that memory, keyed by (user, ``normal_form``): one store
        lookup for them all."""
        by_key = {(r.user, words_key(r.content)): r for r in records}
        if not by_key:
            return {}
        found: dict[tuple[str, str], MemoryRecord] = {}
        for hit in await self.store.repeats(tenant, builtins.list(by_key), now):
            record = by_key.get((hit.user, words_key(hit.content)))
            # The key's words, not a hash collision; the first match stands.
            if record is not None and same_memory(hit.content, record.content):
                found.setdefault((record.user, normal_form(record.content)), hit)
        return found

    @contextlib.asynccontextmanager
    async def _locks(self, tenant: str, users: set[str]) -> AsyncIterator[None]:
        """Hold the users' locks, taken in sorted order so two writers never deadlock."""
        async with contextlib.AsyncExitStack() as stack:
            for user in sorted(users):
                await stack.enter_async_context(self._user_lock(tenant, user))
            yield

    def _user_lock(self, tenant: str, user: str) -> asyncio.Lock:
        lock = self._user_locks.get((tenant, user))
        if lock is None:
            if len(self._user_locks) >= MAX_USER_LOCKS:
                # Drop idle locks only: a held one still guards a write.
                for key in [k for k, v in self._user_locks.items() if not v.locked()]:
                    del self._user_locks[key]
            lock = self._user_locks[(tenant, user)] = asyncio.Lock()
        return lock

    async def _embed(self, texts: Sequence[str]) -> np.ndarray:
        try:
            vectors = await self.embedder.embed(texts)
        except BackendError:
            raise
        except Exception as exc:
            raise EmbedderError(f"embedding failed: {type(exc).__name__}: {exc}") from exc
        return np.asarray(vectors, dtype=np.float32)

    async def _invalidate(self, tenant: str) -> None:
        if self.cache is not None:
            await self.cache.bump_generation(tenant)

    async def supersede(self, tenant: str, old_id: str, new_id: str) -> MemoryRecord | None:
        """Mark ``old_id`` superseded by ``new_id`` (kept, out of retrieval); return it, or
        ``None`` when it is gone or already superseded (the first replacement stands).

        One conditional store write (``MemoryStore.supersede``): nothing is re-embedded (the
        text is unchanged, the stored vector stays), and of two writers at once, in one process
        or in several workers sharing the write log, exactly one succeeds.
        """
        if old_id == new_id:
            return None
        marked = await self.store.supersede(tenant, old_id, new_id)
        if marked is not None:
            await self._invalidate(tenant)
        return marked

    async def history(
        self, tenant: str, record: MemoryRecord, limit: int = HISTORY_LIMIT
    ) -> builtins.list[MemoryRecord]:
        """The memories ``record`` replaced, newest first (following ``supersedes``)."""
        older: builtins.list[MemoryRecord] = []
        seen = {record.id}
        link = record.supersedes
        while link is not None and link not in seen and len(older) < limit:
            found = await self.store.get(tenant, link)
            if found is None:
                break
            older.append(found)
            seen.add(link)
            link = found.supersedes
        return older

    # -- reading ---------------------------------------------------------------------------

    async def get(self, tenant: str, memory_id: str) -> MemoryRecord:
        """The tenant's memory ``memory_id``; ``NotFound`` (404) otherwise."""
        record = await self.store.get(tenant, memory_id)
        if record is None:
            raise NotFound(f"No memory with id '{memory_id}'.", param="id")
        return record

    async def list(
        self,
        tenant: str,
        *,
        user: str | None = None,
        source: str | None = None,
        limit: int = API_PAGE,
        after: str | None = None,
    ) -> Page:
        """One page of the tenant's memories (stable order); pass ``last_id`` as ``after``."""
        return await self.store.list(tenant, user=user, source=source, limit=limit, after=after)

    async def search(
        self,
        tenant: str,
        query: str,
        *,
        user: str = "",
        top_k: int = API_TOP_K,
        sources: Sequence[str] | None = None,
    ) -> builtins.list[Candidate]:
        """The ``top_k`` memories of ``user`` plus tenant-shared ones most similar to ``query``,
        by similarity descending (ties by id): a prefix of the result for any larger ``top_k``.
        ``top_k`` is valid (1..``MAX_TOP_K``): the API's models checked it."""
        want = Retrieval(query, user, top_k, sources, pool=MAX_TOP_K)
        return await self.retriever.retrieve(tenant, want)

    # -- deleting and feedback -------------------------------------------------------------

    async def delete(self, tenant: str, memory_id: str) -> None:
        """Delete one memory and the copies of its text in other turns' contexts
        (``forget_copies``); ``NotFound`` if the tenant has none with that id (a repeat)."""
        old = await self.store.get(tenant, memory_id)
        if not await self.store.delete(tenant, memory_id):
            raise NotFound(f"No memory with id '{memory_id}'.", param="id")
        await self._invalidate(tenant)
        if old is not None:
            await self.forget_copies(tenant, [old])
        await self._forget_blocks(tenant)

    async def forget_copies(
        self, tenant: str, gone: Sequence[MemoryRecord], *, keep: Collection[str] = ()
    ) -> int:
        """Re-write without context every dialog turn of the same users whose context was cut
        from the text of one of ``gone`` (by ``context_key``; ``keep``: ids left alone, the
        batch just written), re-embedded from its own text through the store's ordinary
        upsert; return how many (adr/0144). Scans each user's dialog turns, a page at a time:
        deletes and replacements are rare and off the request path."""
        keys: dict[str, set[str]] = {}
        cuts: dict[str, set[str]] = {}
        for record in gone:
            keys.setdefault(record.user, set()).add(context_key(record.content))
            cuts.setdefault(record.user, set()).add(clipped(record.content))
        forgotten = 0
        for user, wanted in keys.items():

            def copy_of(record: MemoryRecord, wanted: set[str] = wanted, user: str = user) -> bool:
                if not record.context or record.id in keep:
                    return False
                if record.context_key:
                    return record.context_key in wanted
                # Written before keys were (adr/0142 alone): the cut text itself.
                return record.context in cuts[user]

            async with self._locks(tenant, {user}):
                after: str | None = None
                while True:
                    page = await self.store.list(
                        tenant, user=user, source=DIALOG_SOURCE, limit=FORGET_SCAN_PAGE, after=after
                    )
                    copies = [
                        dataclasses.replace(record, context="", context_key="")
                        for record in page.records
                        if copy_of(record)
                    ]
                    if copies:
                        vectors = await self._embed([record.content for record in copies])
                        await self.store.add(copies, vectors)
                        forgotten += len(copies)
                    if not page.has_more or page.last_id is None:
                        break
                    after = page.last_id
        if forgotten:
            await self._invalidate(tenant)
        return forgotten

    async def delete_user(self, tenant: str, user: str) -> int:
        """Forget every memory of ``user``; return how many there were (0 is not an error)."""
        deleted = await self.store.delete_user(tenant, user)
        if deleted:
            await self._invalidate(tenant)
            await self._forget_blocks(tenant)
        return deleted

    async def _forget_blocks(self, tenant: str) -> None:
        if self.blocks is not None:
            await self.blocks.forget(tenant)

    async def feedback(
        self, tenant: str, memory_id: str, feedback: Vote | SetUsefulness
    ) -> MemoryRecord:
        """Apply a vote or set usefulness; return the updated memory (``NotFound`` if none).

        The store applies the vote to the current value atomically, so simultaneous votes on
        one memory all count (they used to race as read-then-set).
        """
        update = feedback_update(feedback)
        updated = await self.store.update_usefulness(tenant, memory_id, update)
        if updated is None:
            raise NotFound(f"No memory with id '{memory_id}'.", param="id")
        await self._invalidate(tenant)
        return updated
