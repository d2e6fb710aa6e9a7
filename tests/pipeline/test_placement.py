"""The position in the pipeline: blocks in the latest turn, earlier ones put back, the budget they
take, reuse on a tool round trip, the system fallback, and what explain shows."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from proxy.apis.openai_chat import OPENAI_CHAT
from proxy.apis.openai_responses import RESPONSES
from proxy.cache import keys
from proxy.cache.blocks import (
    CachedTurnBlocks,
    Recalled,
    Remembered,
    TurnBlocks,
    prefix_keys,
    stamp_key,
)
from proxy.cache.local import LocalCache
from proxy.cache.outcome import record_unserved
from proxy.cache.request_cache import RequestCache
from proxy.context.budget import TokenBudgetCalculator
from proxy.context.position import Slot
from proxy.context.records import Candidate, MemoryRecord
from proxy.context.render import BLOCK_OPEN
from proxy.memory.retriever import Retriever
from proxy.memory.service import MemoryService
from proxy.memory.store import SearchQuery
from proxy.metrics import Metrics
from proxy.pipeline.contract import Prepared
from proxy.pipeline.pipeline import Pipeline
from proxy.pipeline.placement import Placement, recalled
from proxy.relay import starter
from proxy.settings import MemorySettings
from proxy.tenancy import Tenant
from tests.fakes.embedder import FakeEmbedder
from tests.fakes.store import FakeStore
from tests.fakes.tasks import tasks_created

DIMS = 4
NOW = datetime(2026, 11, 22, tzinfo=UTC)
TENANT = Tenant("t1", MemorySettings())
FACTS = ["The dog is called Biscuit.", "The user lives in Lisbon.", "The user likes tea."]
SYSTEM = {"role": "system", "content": "Be terse."}


def records(contents: list[str]) -> list[MemoryRecord]:
    return [
        MemoryRecord(f"m{i}", "t1", "", "learnings", text, NOW) for i, text in enumerate(contents)
    ]


class Spawned:
    """A spawner starting each job as a task, as the app's ``Background`` does."""

    def __init__(self) -> None:
        self.tasks: list[asyncio.Task[None]] = []

    def __call__(self, job: Coroutine[Any, Any, None]) -> None:
        self.tasks.append(asyncio.get_running_loop().create_task(job))

    async def run(self) -> None:
        """Wait for every job started so far (the next request then sees what they wrote)."""
        await asyncio.gather(*self.tasks)


async def gone_upstream(prepared: Prepared) -> None:
    """What the route starts once the request has gone upstream: the turn's block is kept."""
    if prepared.on_sent is not None:
        await prepared.on_sent()


def build(
    blocks: Callable[[CachedTurnBlocks], TurnBlocks] = lambda kept: kept,
    store: FakeStore | None = None,
) -> tuple[Pipeline, Spawned, LocalCache]:
    """A pipeline over the fake store (``store``, else one holding ``FACTS``); its turn blocks
    are ``blocks`` of the ones kept in the returned cache."""
    raw = LocalCache(1000)
    cache = RequestCache(raw)
    spawned = Spawned()
    store = store if store is not None else FakeStore(records(FACTS), dimensions=DIMS)
    pipeline = Pipeline(
        MemorySettings(deadline_ms=2000.0),
        calculator=TokenBudgetCalculator(memory_cap=None),
        retriever=Retriever(store, FakeEmbedder(DIMS), cache),
        counts=cache,
        metrics=Metrics(),
        spawn=spawned,
        clock=lambda: NOW,
        blocks=blocks(CachedTurnBlocks(raw, ttl_s=60)),
    )
    return pipeline, spawned, raw


def chat(*turns: str) -> dict[str, Any]:
    """A conversation: user and assistant turns alternating, the last one the user's."""
    roles = ["user", "assistant"]
    messages = [{"role": roles[i % 2], "content": t} for i, t in enumerate(turns)]
    return {"model": "gpt-4o", "messages": [SYSTEM, *messages]}


async def test_the_block_goes_in_the_latest_turn_and_comes_back_next_turn() -> None:
    pipeline, _, _ = build()
    first = await pipeline.prepare(
        TENANT,
        {"x-memory-max-tokens": "30", "x-memory-budget-rule": "fill"},
        chat("dog?"),
        OPENAI_CHAT,
    )
    await gone_upstream(first)
    sent = first.body["messages"]
    assert sent[0] == SYSTEM
    assert sent[1]["content"].startswith(BLOCK_OPEN)
    assert sent[1]["content"].endswith("\n\ndog?")
    second = await pipeline.prepare(
        TENANT,
        {"x-memory-max-tokens": "30", "x-memory-budget-rule": "fill"},
        chat("dog?", "Biscuit.", "tea?"),
        OPENAI_CHAT,
    )
    assert second.body["messages"][: len(sent)] == sent  # the previous prompt, byte for byte
    assert second.response_headers["X-Memory-Status"] == "injected"
    shown = [m["content"] for m in second.body["messages"] if m["role"] == "user"]
    # Memories the first block shows are not repeated by the second.
    for fact in FACTS:
        assert "\n".join(shown).count(fact) <= 1


async def test_re_inserted_blocks_take_their_tokens_from_the_window() -> None:
    pipeline, _, raw = build()
    history = chat("dog?", "Biscuit.", "tea?")
    [key] = prefix_keys(
        "t1", ("", *TENANT.memory.sources, "o200k_base", ""), history["messages"], [1]
    )
    assert key is not None
    stamp = (await CachedTurnBlocks(raw, 60).recall("t1", [])).stamp
    assert stamp is not None
    big = Remembered("<memories>\nold\n</memories>", 0, 127_000, ("m9",), stamp)
    await CachedTurnBlocks(raw, 60).remember(key, big)
    explained = await pipeline.prepare(TENANT, {"x-memory-mode": "explain"}, history, OPENAI_CHAT)
    assert explained.reply is not None
    document = orjson.loads(bytes(explained.reply.body))
    # gpt-4o: 128k window; 127k of old blocks cannot go back with the reserves: left out.
    assert document["placement"]["reinserted"] == []
    assert document["placement"]["left_out"] == 1
    small = Remembered("<memories>\nold\n</memories>", 0, 100, ("m9",), stamp)
    await CachedTurnBlocks(raw, 60).remember(key, small)
    explained = await pipeline.prepare(TENANT, {"x-memory-mode": "explain"}, history, OPENAI_CHAT)
    assert explained.reply is not None
    document = orjson.loads(bytes(explained.reply.body))
    assert document["placement"]["reinserted"] == [{"message": 1, "part": 0, "tokens": 100}]
    assert document["placement"]["reinserted_tokens"] == 100
    assert document["placement"]["message"] == 3
    assert document["messages"][1]["content"].startswith("<memories>\nold")


def test_room_is_the_cap_or_what_the_window_leaves_after_re_inserted_blocks() -> None:
    block = Remembered("b", 0, 300, ())
    placement = Placement("turn", Slot(3, 0), earlier=((Slot(1, 0), block),))
    assert placement.room(memory_tokens=1000, available_tokens=5000) == 1000
    assert placement.room(memory_tokens=1000, available_tokens=1100) == 800
    assert placement.room(memory_tokens=1000, available_tokens=200) == 0


def test_recalled_reuses_the_latest_turns_block_and_keeps_the_earliest_that_fit() -> None:
    one, two, here = (Remembered(f"b{i}", 0, 50, (f"m{i}",)) for i in range(3))
    placement = Placement("turn", Slot(5, 0))
    got = recalled(placement, [1, 3, 5], ["k1", "k3", "k5"], [one, two, here], 60)
    assert got.reused == here
    assert got.key == "k5"
    assert got.earlier == ((Slot(1, 0), one),)
    assert got.left_out == 1
    assert got.visible == {"m0"}
    moved = recalled(Placement("turn", Slot(5, 1)), [5], ["k5"], [here], 60)
    assert moved.reused is None  # a breakpoint moved the slot: retrieve afresh


async def test_a_tool_round_trip_reuses_the_turns_block() -> None:
    pipeline, _, _ = build()
    request = chat("dog?")
    first = await pipeline.prepare(TENANT, {}, request, OPENAI_CHAT)
    await gone_upstream(first)
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function"}]}
    result = {"role": "tool", "tool_call_id": "c", "content": "42"}
    again = {**request, "messages": [*request["messages"], call, result]}
    second = await pipeline.prepare(TENANT, {}, again, OPENAI_CHAT)
    assert second.body["messages"][:2] == first.body["messages"]
    assert "assemble" not in second.response_headers["Server-Timing"]  # nothing chosen anew
    assert (
        second.response_headers["X-Memory-Injected"] == first.response_headers["X-Memory-Injected"]
    )


class AfterSearch:
    """Turn blocks whose recall answers only once a search has started: a pipeline that
    recalled before searching would wait for it until its deadline."""

    def __init__(self, kept: TurnBlocks, searched: asyncio.Event) -> None:
        self.kept, self.searched = kept, searched

    async def recall(self, tenant: str, keys: Sequence[str]) -> Recalled:
        await self.searched.wait()
        return await self.kept.recall(tenant, keys)

    async def stamp(self, tenant: str) -> int | None:
        return await self.kept.stamp(tenant)

    async def remember(self, key: str, block: Remembered) -> None:
        await self.kept.remember(key, block)

    async def forget(self, tenant: str) -> None:
        await self.kept.forget(tenant)


class SignallingStore(FakeStore):
    """The fake store, setting ``searched`` when a search comes in."""

    def __init__(self, searched: asyncio.Event) -> None:
        super().__init__(records(FACTS), dimensions=DIMS)
        self.searched = searched

    async def search(self, tenant: str, query: SearchQuery) -> list[Candidate]:
        self.searched.set()
        return await super().search(tenant, query)


async def test_the_recall_of_earlier_blocks_runs_alongside_the_search() -> None:
    """One cache round trip fewer in series: the same blocks come back, found while the
    search runs (a Redis recall no longer adds its round trip to the request)."""
    searched = asyncio.Event()
    headers = {"x-memory-max-tokens": "30", "x-memory-budget-rule": "fill"}
    pipeline, _, _ = build(
        blocks=lambda kept: AfterSearch(kept, searched), store=SignallingStore(searched)
    )
    first = await pipeline.prepare(TENANT, headers, chat("dog?"), OPENAI_CHAT)
    await gone_upstream(first)
    assert first.response_headers["X-Memory-Status"] == "injected"
    searched.clear()
    second = await pipeline.prepare(
        TENANT,
        {**headers, "x-memory-mode": "explain"},
        chat("dog?", "Biscuit.", "tea?"),
        OPENAI_CHAT,
    )
    assert second.reply is not None
    document = orjson.loads(bytes(second.reply.body))
    assert second.response_headers["X-Memory-Status"] == "injected"
    assert document["placement"]["reinserted"] == [
        {"message": 1, "part": 0, "tokens": document["placement"]["reinserted_tokens"]}
    ]
    assert document["messages"][1] == first.body["messages"][1]  # the same block, put back


async def test_with_the_in_process_cache_a_request_starts_no_task() -> None:
    """A recall that never waits is over before a search task would have run: the search runs
    after it in the request's own task, and the cache writes, which never wait either, run as
    the request goes upstream (each task cost the loop ~5 us)."""
    pipeline, spawned, _ = build()
    headers = {"x-memory-max-tokens": "30", "x-memory-budget-rule": "fill"}
    with tasks_created() as created:
        first = await pipeline.prepare(TENANT, headers, chat("dog?"), OPENAI_CHAT)
        assert first.on_sent is not None
        starter(spawned, first.on_sent)()  # the request went upstream: the writes run
    assert first.response_headers["X-Memory-Status"] == "injected"
    assert created == []
    second = await pipeline.prepare(TENANT, headers, chat("dog?", "Biscuit.", "tea?"), OPENAI_CHAT)
    assert second.body["messages"][1] == first.body["messages"][1]  # the block was kept


async def test_a_deleted_memory_never_comes_back_in_an_earlier_block() -> None:
    store = FakeStore(records(FACTS), dimensions=DIMS)
    pipeline, _, raw = build(store=store)
    service = MemoryService(store, FakeEmbedder(DIMS), blocks=CachedTurnBlocks(raw, ttl_s=60))
    headers = {"x-memory-max-tokens": "30", "x-memory-budget-rule": "fill"}
    first = await pipeline.prepare(TENANT, headers, chat("dog?"), OPENAI_CHAT)
    await gone_upstream(first)
    shown = first.body["messages"][1]["content"]
    assert shown.startswith(BLOCK_OPEN)
    deleted = next(i for i, fact in enumerate(FACTS) if fact in shown)
    again = await pipeline.prepare(TENANT, headers, chat("dog?", "Biscuit.", "tea?"), OPENAI_CHAT)
    assert again.body["messages"][1]["content"] == shown  # put back while nothing is deleted
    await service.delete("t1", f"m{deleted}")
    after = await pipeline.prepare(TENANT, headers, chat("dog?", "Biscuit.", "tea?"), OPENAI_CHAT)
    assert after.body["messages"][1] == {"role": "user", "content": "dog?"}  # not put back
    assert all(FACTS[deleted] not in str(m["content"]) for m in after.body["messages"])


class DeletedDuringSearch(FakeStore):
    """The fake store where, once a search has read the memories, every one it found is
    deleted (store, caches, turn blocks) before the search answers; ``deleted`` is then set."""

    def __init__(self, deleted: asyncio.Event) -> None:
        super().__init__(records(FACTS), dimensions=DIMS)
        self.deleted = deleted
        self.service: MemoryService | None = None

    async def search(self, tenant: str, query: SearchQuery) -> list[Candidate]:
        found = await super().search(tenant, query)
        if self.service is not None and not self.deleted.is_set():
            for hit in found:
                await self.service.delete(tenant, hit.record.id)
            self.deleted.set()
        return found


class AfterDelete(AfterSearch):
    """Turn blocks whose recall answers only once the delete is done."""


async def test_a_delete_between_the_search_and_the_recall_keeps_no_block_showing_it() -> None:
    """The search has returned memories, their delete completes, then the recall reads the
    moved stamp: the block showing them must not be remembered as shown after the delete."""
    deleted = asyncio.Event()
    store = DeletedDuringSearch(deleted)
    pipeline, _, raw = build(blocks=lambda kept: AfterDelete(kept, deleted), store=store)
    store.service = MemoryService(store, FakeEmbedder(DIMS), blocks=CachedTurnBlocks(raw, 60))
    headers = {"x-memory-max-tokens": "30", "x-memory-budget-rule": "fill"}
    first = await pipeline.prepare(TENANT, headers, chat("dog?"), OPENAI_CHAT)
    await gone_upstream(first)
    assert deleted.is_set()
    assert first.body["messages"][1]["content"].startswith(BLOCK_OPEN)  # shown this once
    later = await pipeline.prepare(TENANT, headers, chat("dog?", "Biscuit.", "tea?"), OPENAI_CHAT)
    assert later.body["messages"][1] == {"role": "user", "content": "dog?"}  # not put back
    assert all(fact not in str(m["content"]) for m in later.body["messages"] for fact in FACTS)


class Reads(LocalCache):
    """The in-process cache, noting the keys of each read (one entry a round trip)."""

    def __init__(self) -> None:
        super().__init__(1000)
        self.reads: list[list[str]] = []

    async def get(self, key: str) -> bytes | None:
        self.reads.append([key])
        return await super().get(key)

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        self.reads.append(list(keys))
        return await super().get_many(keys)


async def test_the_forget_stamp_costs_no_round_trip_of_its_own() -> None:
    """The stamp read before the search brings the generation the search's cache key needs
    (with Redis: one round trip before the search, as without the stamp)."""
    raw = Reads()
    cache = RequestCache(raw)
    pipeline = Pipeline(
        MemorySettings(deadline_ms=2000.0),
        calculator=TokenBudgetCalculator(memory_cap=None),
        retriever=Retriever(FakeStore(records(FACTS), dimensions=DIMS), FakeEmbedder(DIMS), cache),
        metrics=Metrics(),
        spawn=Spawned(),
        clock=lambda: NOW,
        blocks=CachedTurnBlocks(raw, ttl_s=60),
    )
    headers = {"x-memory-max-tokens": "30", "x-memory-budget-rule": "fill"}
    await pipeline.prepare(TENANT, headers, chat("cat?"), OPENAI_CHAT)  # the counters start
    for turns in (("dog?",), ("dog?", "Biscuit.", "tea?")):
        raw.reads.clear()
        prepared = await pipeline.prepare(TENANT, headers, chat(*turns), OPENAI_CHAT)
        assert prepared.response_headers["X-Memory-Status"] == "injected"
        generation, stamp = keys.generation_key("t1"), stamp_key("t1")
        assert sorted([generation, stamp]) in [sorted(keys) for keys in raw.reads]
        assert [generation] not in raw.reads  # never read on its own


class Failing:
    """Turn blocks whose backend fails: ``raises`` as an exception, else as misses the cache
    could not serve (what the byte caches do when Redis is down)."""

    def __init__(self, raises: bool) -> None:
        self.raises = raises

    async def recall(self, tenant: str, keys: Sequence[str]) -> Recalled:
        if self.raises:
            raise ConnectionError("cache down")
        record_unserved()
        return Recalled([None] * len(keys), None)

    async def stamp(self, tenant: str) -> int | None:
        if self.raises:
            raise ConnectionError("cache down")
        record_unserved()
        return None

    async def remember(self, key: str, block: Remembered) -> None:
        """Nothing is kept."""

    async def forget(self, tenant: str) -> None:
        """Nothing to forget."""


@pytest.mark.parametrize("raises", [True, False], ids=["raises", "unserved"])
async def test_a_failing_block_cache_degrades_the_request_but_memories_still_go_in(
    raises: bool,
) -> None:
    pipeline, _, _ = build(blocks=lambda _kept: Failing(raises))
    prepared = await pipeline.prepare(TENANT, {}, chat("dog?", "Biscuit.", "tea?"), OPENAI_CHAT)
    assert prepared.response_headers["X-Memory-Status"] == "degraded"
    assert int(prepared.response_headers["X-Memory-Injected"]) > 0
    assert prepared.body["messages"][3]["content"].startswith(BLOCK_OPEN)
    assert prepared.body["messages"][1] == {"role": "user", "content": "dog?"}  # nothing back


async def test_explain_shows_where_the_block_went() -> None:
    pipeline, _, _ = build()
    for position, message in (("turn", 1), ("system", 0)):
        headers = {"x-memory-mode": "explain", "x-memory-position": position}
        prepared = await pipeline.prepare(TENANT, headers, chat("dog?"), OPENAI_CHAT)
        assert prepared.reply is not None
        document = orjson.loads(bytes(prepared.reply.body))
        assert document["placement"]["position"] == position
        assert document["placement"]["message"] == message
        assert BLOCK_OPEN in document["messages"][message]["content"]


async def test_the_setting_chooses_the_position_and_the_header_overrides_it() -> None:
    pipeline, _, _ = build()
    tenant = Tenant("t1", MemorySettings(position="system"))
    prepared = await pipeline.prepare(tenant, {}, chat("dog?"), OPENAI_CHAT)
    assert BLOCK_OPEN in prepared.body["messages"][0]["content"]
    prepared = await pipeline.prepare(
        tenant, {"x-memory-position": "turn"}, chat("dog?"), OPENAI_CHAT
    )
    assert BLOCK_OPEN in prepared.body["messages"][1]["content"]
    await gone_upstream(prepared)


def responses(*turns: str, **fields: object) -> dict[str, Any]:
    """A Responses API request whose ``input`` holds the conversation (no stored context)."""
    items: list[dict[str, Any]] = []
    for i, said in enumerate(turns):
        if i % 2:
            part = {"type": "output_text", "text": said}
            items.append({"type": "message", "role": "assistant", "content": [part]})
        else:
            items.append({"role": "user", "content": [{"type": "input_text", "text": said}]})
    return {"model": "gpt-4o", "instructions": "Be terse.", "input": items, **fields}


async def test_responses_blocks_come_back_in_the_input_items_that_held_them() -> None:
    pipeline, _, _ = build()
    headers = {"x-memory-max-tokens": "30", "x-memory-budget-rule": "fill"}
    first = await pipeline.prepare(TENANT, headers, responses("dog?"), RESPONSES)
    await gone_upstream(first)
    sent = first.body["input"]
    assert sent[0]["content"][0]["type"] == "input_text"
    assert sent[0]["content"][0]["text"].startswith(BLOCK_OPEN)
    assert first.body["instructions"] == "Be terse."
    second = await pipeline.prepare(
        TENANT, headers, responses("dog?", "Biscuit.", "tea?"), RESPONSES
    )
    assert second.body["input"][: len(sent)] == sent  # the previous prompt, byte for byte
    assert second.response_headers["X-Memory-Status"] == "injected"
    assert second.body["input"][2]["content"][0]["text"].startswith(BLOCK_OPEN)


async def test_a_continued_responses_request_gets_no_block_put_back() -> None:
    """With ``previous_response_id`` the earlier blocks are upstream already: the same input
    after another response is another conversation, and its block is not reused."""
    pipeline, _, _ = build()
    first = await pipeline.prepare(
        TENANT, {}, responses("dog?", previous_response_id="resp_1"), RESPONSES
    )
    await gone_upstream(first)
    assert first.body["input"][0]["content"][0]["text"].startswith(BLOCK_OPEN)
    retried = await pipeline.prepare(
        TENANT, {}, responses("dog?", previous_response_id="resp_1"), RESPONSES
    )
    assert "assemble" not in retried.response_headers["Server-Timing"]  # the same turn: reused
    other = await pipeline.prepare(
        TENANT, {}, responses("dog?", previous_response_id="resp_2"), RESPONSES
    )
    assert "assemble" in other.response_headers["Server-Timing"]  # chosen anew


async def test_hashing_a_long_conversation_for_its_blocks_runs_off_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Runs of one character are few tokens for many bytes: the size that decides where the
    prefix keys are hashed is the messages' bytes, not their exact token counts."""
    from proxy.pipeline import pipeline as pipeline_module

    threads: list[int] = []

    def spy(*args: Any) -> Any:
        threads.append(threading.get_ident())
        return prefix_keys(*args)

    monkeypatch.setattr(pipeline_module, "prefix_keys", spy)
    pipeline, _, _ = build()
    long_turn = "a" * 200_000  # 200 KB in ~25k tokens: 4 bytes a token would say 100 KB
    ask = chat(long_turn, "ok", long_turn, "ok", "what is my dog called?")
    await pipeline.prepare(TENANT, {"x-memory-mode": "explain"}, ask, OPENAI_CHAT)
    assert threads
    assert threading.get_ident() not in threads


async def test_a_dropped_search_adds_no_stage_the_headers_did_not_show() -> None:
    """A search beside the recall, dropped because the turn's block is reused, is cancelled:
    its stage clock stops only when the task next runs, after ``prepare`` returned. The stage
    histograms (observed in ``on_status``, after the response) must see the stages the
    request's ``Server-Timing`` shows, not that late mark."""
    searched = asyncio.Event()
    store = SignallingStore(searched)
    raw = LocalCache(1000)
    pipeline = Pipeline(
        MemorySettings(deadline_ms=2000.0),
        calculator=TokenBudgetCalculator(memory_cap=None),
        retriever=Retriever(store, FakeEmbedder(DIMS), None),  # no cache: every turn searches
        counts=RequestCache(raw),
        metrics=Metrics(),
        spawn=Spawned(),
        clock=lambda: NOW,
        blocks=AfterSearch(CachedTurnBlocks(raw, ttl_s=60), searched),
    )
    request = chat("dog?")
    first = await pipeline.prepare(TENANT, {}, request, OPENAI_CHAT)
    await gone_upstream(first)
    if first.on_status is not None:  # the route's call once the response is out
        first.on_status(200)
    registry = pipeline.metrics.registry

    def observed(stage: str) -> float:
        labels = {"stage": stage}
        return registry.get_sample_value("memproxy_memory_stage_seconds_count", labels) or 0.0

    assert observed("search") == 1
    searched.clear()
    store.search_mode = "hang"  # the second turn's search is still running when it is dropped
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function"}]}
    result = {"role": "tool", "tool_call_id": "c", "content": "42"}
    again = {**request, "messages": [*request["messages"], call, result]}
    second = await pipeline.prepare(TENANT, {}, again, OPENAI_CHAT)
    timing = second.response_headers["Server-Timing"]
    assert "search;dur=" not in timing  # the block was reused, the search dropped
    for _ in range(5):  # the response goes out: the loop runs the cancelled search's task
        await asyncio.sleep(0)
    if second.on_status is not None:
        second.on_status(200)
    assert observed("search") == 1  # the first request's only
