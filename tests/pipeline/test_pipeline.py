"""``Pipeline.prepare`` in process with fake backends: statuses, headers, no mutation, caching."""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Coroutine, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.exceptions import ConnectionError as RedisConnectionError

from proxy.apis.adapter import ApiAdapter
from proxy.apis.anthropic_messages import ANTHROPIC_MESSAGES
from proxy.apis.openai_chat import OPENAI_CHAT
from proxy.apis.openai_responses import RESPONSES
from proxy.cache.breaker import CircuitBreaker
from proxy.cache.local import LocalCache
from proxy.cache.redis_cache import RedisCache
from proxy.cache.request_cache import CacheTTLs, RequestCache
from proxy.context.billing import message_key
from proxy.context.budget import MODEL_OVERRIDES, ModelLimit, ModelLimits, TokenBudgetCalculator
from proxy.context.records import Candidate, MemoryRecord, index_text
from proxy.context.render import BLOCK_CLOSE, BLOCK_OPEN
from proxy.defaults import MAX_CONTENT_CHARS, NEIGHBOUR_WINDOW_S
from proxy.memory.near import ranked
from proxy.memory.retriever import Retriever
from proxy.memory.service import MemoryService
from proxy.memory.store import Found
from proxy.metrics import Metrics
from proxy.pipeline import pipeline as pipeline_module
from proxy.pipeline.capture import FactRequest, captured
from proxy.pipeline.contract import Completion
from proxy.pipeline.explain import NOTE_BOUNDS
from proxy.pipeline.options import parse_options
from proxy.pipeline.pipeline import Pipeline, Run, StageFailed
from proxy.pipeline.query import strip_block
from proxy.settings import MemorySettings
from proxy.tenancy import Tenant
from proxy.tokenizer import count_tokens, tiktoken_tokenizer
from tests.fakes.embedder import FakeEmbedder
from tests.fakes.store import FakeStore, SearchMode
from tests.fakes.tokenizer import SpyTokenizer

DIMS = 4
NOW = datetime(2026, 11, 22, tzinfo=UTC)
SETTINGS = MemorySettings()
TENANT = Tenant("t1", SETTINGS)


BISCUIT = MemoryRecord(
    id="m1",
    tenant="t1",
    user="",
    source="learnings",
    content="The user's dog is called Biscuit.",
    created_at=NOW,
)


def biscuit_store(search: SearchMode = "ok") -> FakeStore:
    """A store holding one memory every query finds."""
    return FakeStore([BISCUIT], dimensions=DIMS, search=search)


def build(
    store: Any = None,
    embedder: Any = None,
    lookups: list[tuple[str, int, int]] | None = None,
    calculator: TokenBudgetCalculator | None = None,
) -> Pipeline:
    def spawn(coro: Coroutine[Any, Any, None]) -> None:
        coro.close()

    def hook(kind: str, hits: int, misses: int) -> None:
        if lookups is not None:
            lookups.append((kind, hits, misses))

    cache = RequestCache(LocalCache(100), on_lookup=hook)
    return Pipeline(
        MemorySettings(deadline_ms=200.0),
        calculator=calculator or TokenBudgetCalculator(memory_cap=None),
        retriever=retriever(store, embedder, cache),
        counts=cache,
        metrics=Metrics(),
        spawn=spawn,
        clock=lambda: NOW,
    )


def retriever(store: Any, embedder: Any, cache: RequestCache | None) -> Retriever | None:
    """The read path over the fakes; ``None`` (the store could not be opened) without both."""
    if store is None or embedder is None:
        return None
    return Retriever(store, embedder, cache)


def body(*contents: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": c} for c in contents]}


async def test_injects_into_a_new_body() -> None:
    original = body("what is my dog called?")
    before = copy.deepcopy(original)
    prepared = await build(biscuit_store(), FakeEmbedder(DIMS)).prepare(
        TENANT, {}, original, OPENAI_CHAT
    )
    assert original == before
    assert prepared.body is not original
    turn = prepared.body["messages"][0]  # position turn: in the latest user message
    assert turn["role"] == "user"
    assert turn["content"].startswith(BLOCK_OPEN)
    assert turn["content"].endswith("\n\nwhat is my dog called?")
    assert "Biscuit" in turn["content"]
    headers = prepared.response_headers
    assert headers["X-Memory-Status"] == "injected"
    assert headers["X-Memory-Injected"] == "1"


class AddedCounts:
    """Stands in for ``RetrievalCounter``: records what would be counted."""

    def __init__(self) -> None:
        self.added: list[tuple[str, Sequence[str]]] = []

    def add(self, tenant: str, ids: Sequence[str]) -> None:
        self.added.append((tenant, ids))


@pytest.mark.parametrize(
    ("answered", "counted"),
    [(0, False), (200, True), (399, True), (400, False), (429, False), (502, False)],
)
async def test_injected_memories_are_counted_from_the_status_alone(
    answered: int, counted: bool
) -> None:
    """Without capture the answer is never read (no ``on_complete``, adr/0134): the injected
    memories' retrievals are counted from the status the route hands ``on_status``, only when
    the upstream accepted the request (0: the client left before any answer, which says
    nothing about the upstream, so nothing is counted)."""
    pipeline = build(biscuit_store(), FakeEmbedder(DIMS))
    pipeline.counter = counts = AddedCounts()  # type: ignore[assignment]
    prepared = await pipeline.prepare(TENANT, {}, body("what is my dog called?"), OPENAI_CHAT)
    assert prepared.on_complete is None
    assert prepared.on_status is not None
    prepared.on_status(answered)
    assert counts.added == ([(TENANT.id, (BISCUIT.id,))] if counted else [])


async def test_nothing_injected_nothing_counted() -> None:
    pipeline = build(FakeStore([], dimensions=DIMS), FakeEmbedder(DIMS))
    pipeline.counter = counts = AddedCounts()  # type: ignore[assignment]
    prepared = await pipeline.prepare(TENANT, {}, body("what is my dog called?"), OPENAI_CHAT)
    assert prepared.response_headers["X-Memory-Status"] == "empty"
    assert prepared.on_status is not None  # the stage histograms still wait for it
    prepared.on_status(200)
    assert counts.added == []


def stage_count(pipeline: Pipeline, stage: str) -> float | None:
    value: float | None = pipeline.metrics.registry.get_sample_value(
        "memproxy_memory_stage_seconds_count", {"stage": stage}
    )
    return value


async def test_the_stage_histograms_are_observed_once_the_response_is_out() -> None:
    # Off the request's path to the upstream: ~40 us of a memory-on request served at c=1.
    pipeline = build(biscuit_store(), FakeEmbedder(DIMS))
    prepared = await pipeline.prepare(TENANT, {}, body("what is my dog called?"), OPENAI_CHAT)
    assert "search;dur=" in prepared.response_headers["Server-Timing"]
    assert stage_count(pipeline, "search") is None
    assert prepared.on_status is not None
    prepared.on_status(0)  # whatever the answer: the request's stages took their time
    assert stage_count(pipeline, "search") == 1
    assert stage_count(pipeline, "total") == 1


@pytest.mark.parametrize(
    ("store", "embedder", "reason"),
    [
        (biscuit_store("raise"), FakeEmbedder(DIMS), "search_error"),
        (biscuit_store("hang"), FakeEmbedder(DIMS), "search_timeout"),
        (biscuit_store(), FakeEmbedder(DIMS, fail=True), "embed_error"),
        (None, FakeEmbedder(DIMS), "store_unavailable"),
        (biscuit_store(), None, "store_unavailable"),
    ],
)
async def test_failures_forward_the_original_body(store: Any, embedder: Any, reason: str) -> None:
    pipeline = build(store, embedder)
    original = body("what is my dog called?")
    prepared = await pipeline.prepare(TENANT, {}, original, OPENAI_CHAT)
    assert prepared.body is original  # the client's bytes go upstream unchanged
    assert prepared.response_headers["X-Memory-Status"] == "degraded"
    assert int(prepared.response_headers["X-Memory-Budget"]) > 0
    value = pipeline.metrics.registry.get_sample_value(
        "memproxy_memory_degraded_total", {"reason": reason}
    )
    assert value == 1


async def test_the_deadline_bounds_the_whole_stage() -> None:
    pipeline = build(biscuit_store("hang"), FakeEmbedder(DIMS))
    pipeline.deadline_s, pipeline.search_s = 0.05, 5.0
    prepared = await pipeline.prepare(TENANT, {}, body("dog?"), OPENAI_CHAT)
    assert prepared.response_headers["X-Memory-Status"] == "degraded"
    value = pipeline.metrics.registry.get_sample_value(
        "memproxy_memory_degraded_total", {"reason": "deadline"}
    )
    assert value == 1


@pytest.mark.parametrize(
    "messages", [["junk", {"role": "user", "content": "dog?"}], "not a list", None, [1, 2]]
)
async def test_malformed_messages_are_forwarded_untouched(messages: Any) -> None:
    original = {"model": "gpt-4o", "messages": messages}
    prepared = await build(biscuit_store(), FakeEmbedder(DIMS)).prepare(
        TENANT, {}, original, OPENAI_CHAT
    )
    assert prepared.body is original
    assert prepared.response_headers["X-Memory-Status"] == "empty"


def long_body(*contents: str) -> dict[str, Any]:
    """A gpt-4 (8k window) conversation whose byte-length bound does not settle the budget."""
    padding = " and more words about the dog" * 40
    messages = [{"role": "user", "content": c + padding} for c in contents]
    return {"model": "gpt-4", "messages": messages}


async def test_a_conversation_counts_only_its_new_messages() -> None:
    lookups: list[tuple[str, int, int]] = []
    pipeline = build(biscuit_store(), FakeEmbedder(DIMS), lookups)
    first = await pipeline.prepare(TENANT, {}, long_body("a", "b", "dog?"), OPENAI_CHAT)
    assert first.on_sent is not None
    await first.on_sent()  # the cache writes, started once the request has gone upstream
    lookups.clear()
    await pipeline.prepare(TENANT, {}, long_body("a", "b", "dog?", "and the cat?"), OPENAI_CHAT)
    tokens = [(hits, misses) for kind, hits, misses in lookups if kind == "tokens"]
    assert tokens == [(3, 1)]


async def test_a_budget_the_byte_bound_settles_counts_nothing() -> None:
    tokenizer = SpyTokenizer(tiktoken_tokenizer())
    calculator = TokenBudgetCalculator(memory_cap=None, tokenizer=tokenizer)
    lookups: list[tuple[str, int, int]] = []
    prepared = await build(biscuit_store(), FakeEmbedder(DIMS), lookups, calculator).prepare(
        TENANT, {}, body("what is my dog called?"), OPENAI_CHAT
    )
    # Only the memory block's framing and line were counted, no text of the request.
    assert all("dog called" not in text and text != "user" for text in tokenizer.counted)
    assert prepared.response_headers["X-Memory-Status"] == "injected"
    assert prepared.response_headers["X-Memory-Budget"] == str(SETTINGS.max_tokens)
    assert [kind for kind, _, _ in lookups if kind == "tokens"] == []  # no count-cache trip


PETS = [
    "The user's dog is called Biscuit.",
    "Biscuit is a beagle who hates rain.",
    "The user walks the dog every morning at seven.",
    "The user's café order is a flat white; ﬁne with oat milk.",
]


@pytest.mark.parametrize(
    ("api", "request_body"),
    [
        (OPENAI_CHAT, body("what is my dog called?")),
        (
            ANTHROPIC_MESSAGES,
            {
                "model": "claude-sonnet-4-5",
                "max_tokens": 256,
                "messages": [{"role": "user", "content": "what is my dog called?"}],
            },
        ),
    ],
    ids=["chat-o200k", "messages-claude"],
)
async def test_candidates_are_never_counted_again_whatever_the_api(
    api: ApiAdapter, request_body: dict[str, Any]
) -> None:
    """A memory keeps its count in every encoding a request may use, Claude's included: a
    Messages request for a Claude model costs no tokenizer pass per candidate, as chat does."""
    memories = [replace(BISCUIT, id=f"m{i}", content=text) for i, text in enumerate(PETS)]
    tiktoken_tokenizer().warm()  # the encodings' first use is not what this is about
    tokenizer = SpyTokenizer(tiktoken_tokenizer())
    calculator = TokenBudgetCalculator(memory_cap=None, tokenizer=tokenizer)
    store = FakeStore(memories, dimensions=DIMS)
    prepared = await build(store, FakeEmbedder(DIMS), None, calculator).prepare(
        TENANT, {"x-memory-mode": "explain"}, request_body, api
    )
    assert prepared.response_headers["X-Memory-Status"] == "injected"
    assert not set(PETS) & set(tokenizer.counted)


async def test_no_messages_or_mode_off_do_no_backend_work() -> None:
    store, embedder = biscuit_store(), FakeEmbedder(DIMS)
    pipeline = build(store, embedder)
    off = await pipeline.prepare(TENANT, {"x-memory-mode": "off"}, body("dog?"), OPENAI_CHAT)
    assert off.response_headers["X-Memory-Status"] == "off"
    empty = await pipeline.prepare(TENANT, {}, {"model": "gpt-4o", "messages": []}, OPENAI_CHAT)
    assert empty.response_headers["X-Memory-Status"] == "empty"
    assert store.searches == 0
    assert embedder.calls == []


class ContentStore:
    """Returns the given contents as candidates."""

    def __init__(self, contents: Sequence[str]) -> None:
        self.contents = contents

    async def search(self, tenant: str, query: Any) -> list[Candidate]:
        return [
            Candidate(
                MemoryRecord(
                    id=f"m{i}",
                    tenant=tenant,
                    user="",
                    source="learnings",
                    content=text,
                    created_at=NOW,
                ),
                0.5,
            )
            for i, text in enumerate(self.contents)
        ]

    async def search_near(self, tenant: str, query: Any, seeds: int, window_s: float) -> Found:
        return Found(ranked(await self.search(tenant, query)), [])


@settings(max_examples=40)
@given(
    st.lists(st.text(min_size=1, max_size=200), max_size=30),
    st.integers(min_value=0, max_value=400),
)
def test_the_block_never_exceeds_the_budget(contents: list[str], cap: int) -> None:
    pipeline = build(ContentStore(contents), FakeEmbedder(DIMS))
    headers = {"x-memory-max-tokens": str(cap)}
    prepared = asyncio.run(
        pipeline.prepare(TENANT, headers, body("tell me everything"), OPENAI_CHAT)
    )
    status = prepared.response_headers["X-Memory-Status"]
    budget = int(prepared.response_headers["X-Memory-Budget"])
    assert budget == cap
    if status != "injected":
        assert prepared.body["messages"] == body("tell me everything")["messages"]
        return
    content = prepared.body["messages"][-1]["content"]
    block = content[: content.index(BLOCK_CLOSE) + len(BLOCK_CLOSE)]
    assert count_tokens(block, "o200k_base") == int(prepared.response_headers["X-Memory-Tokens"])
    assert int(prepared.response_headers["X-Memory-Tokens"]) <= budget


async def test_a_memory_line_is_rendered_once_across_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import proxy.context.render as module

    rendered: list[str] = []
    plain, clean = module.line_text, module.is_clean

    def spy(content: str) -> str:
        rendered.append(content)
        return plain(content)

    def checked(content: str) -> bool:  # where a line is counted from its stored count first
        rendered.append(content)
        return clean(content)

    monkeypatch.setattr(module, "line_text", spy)
    monkeypatch.setattr(module, "is_clean", checked)
    pipeline = build(biscuit_store(), FakeEmbedder(DIMS))
    first = await pipeline.prepare(TENANT, {}, body("what is my dog called?"), OPENAI_CHAT)
    second = await pipeline.prepare(TENANT, {}, body("and what does my dog eat?"), OPENAI_CHAT)
    assert rendered == ["The user's dog is called Biscuit."]
    assert first.response_headers["X-Memory-Tokens"] == second.response_headers["X-Memory-Tokens"]
    content = second.body["messages"][-1]["content"]  # position turn: block, blank line, text
    block = content[: content.index(BLOCK_CLOSE) + len(BLOCK_CLOSE)]
    assert int(second.response_headers["X-Memory-Tokens"]) == count_tokens(block, "o200k_base")


# --- budget work off the loop, and bodies that cannot be re-encoded ----------------------------


# A model with a window 16 MB of text could fit: only exact counting can decide for it.
HUGE_WINDOW = "huge-window-model"
LIMITS = ModelLimits({**MODEL_OVERRIDES, HUGE_WINDOW: ModelLimit(4_000_000, 32_000)})


def running_pipeline(*, cache: bool = True, deadline_ms: float = 200.0) -> Pipeline:
    """A pipeline whose background writes really run (``build`` drops them)."""

    tasks: set[asyncio.Task[None]] = set()

    def spawn(coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    counts = RequestCache(LocalCache(100)) if cache else None
    return Pipeline(
        MemorySettings(deadline_ms=deadline_ms),
        calculator=TokenBudgetCalculator(LIMITS, memory_cap=None),
        retriever=retriever(biscuit_store(), FakeEmbedder(DIMS), counts),
        counts=counts,
        metrics=Metrics(),
        spawn=spawn,
        clock=lambda: NOW,
    )


def degraded_by(pipeline: Pipeline, reason: str) -> float | None:
    value: float | None = pipeline.metrics.registry.get_sample_value(
        "memproxy_memory_degraded_total", {"reason": reason}
    )
    return value


async def test_work_that_cannot_finish_in_time_is_not_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pipeline = running_pipeline(cache=False, deadline_ms=50.0)
    started: list[Any] = []
    monkeypatch.setattr(pipeline.offloader, "run", lambda *a, **k: started.append(a))
    huge = {"model": HUGE_WINDOW, "messages": [{"role": "user", "content": "tea " * 1_000_000}]}
    prepared = await pipeline.prepare(TENANT, {}, huge, OPENAI_CHAT)  # 4 MB: ~70 ms at the fastest
    assert prepared.response_headers["X-Memory-Status"] == "degraded"
    assert prepared.body is huge
    assert started == []
    assert degraded_by(pipeline, "budget_timeout") == 1


async def test_large_counts_run_off_the_loop_and_late_ones_are_still_cached() -> None:
    pipeline = running_pipeline(deadline_ms=1_000.0)
    calculate = pipeline.calculator.calculate_request
    release = threading.Event()

    def slow(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is not threading.main_thread():
            release.wait(5)  # an exact count on the worker, held past the deadline
        return calculate(*args, **kwargs)

    pipeline.calculator.calculate_request = slow  # type: ignore[method-assign]
    pipeline.deadline_s = 0.1

    def conversation_of(*contents: str) -> dict[str, Any]:
        # 120 KB: the byte bound cannot settle gpt-4o's budget, and it is too big to count inline.
        messages = [{"role": "user", "content": c} for c in ("a " * 60_000, *contents)]
        return {"model": "gpt-4o", "messages": messages}

    conversation = conversation_of("dog?")
    first = await pipeline.prepare(TENANT, {}, conversation, OPENAI_CHAT)
    assert first.response_headers["X-Memory-Status"] == "degraded"
    assert first.body is conversation
    assert degraded_by(pipeline, "budget_timeout") == 1
    release.set()
    cache = pipeline.counts
    assert cache is not None
    keys = [message_key(m, "o200k_base") for m in conversation["messages"]]
    for _ in range(200):  # the worker finishes, then its counts are written
        if None not in await cache.get_token_counts(TENANT.id, "o200k_base", keys):
            break
        await asyncio.sleep(0.01)
    counts = await cache.get_token_counts(TENANT.id, "o200k_base", keys)
    exact = TokenBudgetCalculator().calculate_request(conversation).message_counts
    assert counts == list(exact)
    release.clear()  # the next turn counts only its new message: on the loop, no worker needed
    second = await pipeline.prepare(
        TENANT, {}, conversation_of("dog?", "and the cat?"), OPENAI_CHAT
    )
    assert second.response_headers["X-Memory-Status"] == "injected"


async def test_explain_says_when_its_figures_are_bounds() -> None:
    pipeline = running_pipeline()
    huge = {"model": "gpt-4o", "messages": [{"role": "user", "content": "a" * 16_000_000}]}
    prepared = await pipeline.prepare(TENANT, {"x-memory-mode": "explain"}, huge, OPENAI_CHAT)
    assert prepared.reply is not None
    document = orjson.loads(bytes(prepared.reply.body))
    assert document["budget"]["counting"] == "lower_bound"
    assert document["budget"]["memory_tokens"] == 0
    assert document["notes"] == [NOTE_BOUNDS]
    small = await pipeline.prepare(TENANT, {"x-memory-mode": "explain"}, body("dog?"), OPENAI_CHAT)
    assert small.reply is not None
    plain = orjson.loads(bytes(small.reply.body))
    assert plain["budget"]["counting"] == "exact"  # exact figures where they cost no worker
    assert "notes" not in plain


def deep(depth: int) -> Any:
    value: Any = "tea"
    for _ in range(depth):
        value = [value]
    return value


async def test_a_body_nested_too_deep_to_re_encode_goes_as_sent() -> None:
    pipeline = running_pipeline()
    original = {**body("what is my dog called?"), "x": deep(300)}
    prepared = await pipeline.prepare(TENANT, {}, original, OPENAI_CHAT)
    assert prepared.body is original  # the route then forwards the client's bytes
    assert prepared.response_headers["X-Memory-Status"] == "degraded"
    assert prepared.response_headers["X-Memory-Injected"] == "0"
    assert degraded_by(pipeline, "encode") == 1


async def test_explain_of_messages_too_deep_to_show_answers_200() -> None:
    pipeline = running_pipeline()
    original = {"model": "gpt-4o", "messages": [{"role": "user", "content": ["dog?", deep(300)]}]}
    prepared = await pipeline.prepare(TENANT, {"x-memory-mode": "explain"}, original, OPENAI_CHAT)
    assert prepared.reply is not None
    assert prepared.reply.status_code == 200
    document = orjson.loads(bytes(prepared.reply.body))
    assert document["messages"] is None
    assert document["notes"]


# --- cache degradation is per request -----------------------------------------------------------


class TenantFailingRedis:
    """A Redis client whose every command on one tenant's keys fails like a refused connection."""

    def __init__(self, failing: str) -> None:
        self.failing = f":{failing}:"
        self.data: dict[str, bytes] = {}

    def _check(self, key: str) -> None:
        if self.failing in key:
            raise RedisConnectionError("Connection refused")

    async def get(self, key: str) -> bytes | None:
        self._check(key)
        return self.data.get(key)

    async def set(self, key: str, value: bytes, px: int) -> None:
        self._check(key)
        self.data[key] = value

    async def incrby(self, key: str, amount: int) -> int:
        self._check(key)
        value = int(self.data.get(key, b"0")) + amount
        self.data[key] = str(value).encode()
        return value


class GatedEmbedder(FakeEmbedder):
    """Holds the first request's query until the second request has made its cache calls."""

    def __init__(self, held: str) -> None:
        super().__init__()
        self.held = held
        self.released = asyncio.Event()

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        if texts[0].startswith(self.held):
            await self.released.wait()
        else:
            self.released.set()
        return await super().embed(texts)


async def test_a_cache_failure_degrades_only_the_request_whose_calls_failed() -> None:
    # Two requests in flight at once over one Redis that fails only the "bad" tenant's keys:
    # "good" is held between its (served) cache calls and its status while "bad"'s fail. A
    # process-wide "last call served" flag would report bad's failure on good too.
    good, bad = Tenant("good", SETTINGS), Tenant("bad", SETTINGS)
    redis = RedisCache(TenantFailingRedis("bad"), breaker=CircuitBreaker(failure_threshold=1000))
    cache = RequestCache(redis, CacheTTLs(embedding_s=0, token_count_s=0))
    pipeline = Pipeline(
        MemorySettings(deadline_ms=2_000.0),
        calculator=TokenBudgetCalculator(memory_cap=None),
        retriever=Retriever(
            FakeStore([replace(BISCUIT, tenant="good"), replace(BISCUIT, tenant="bad")]),
            GatedEmbedder(held="good"),
            cache,
        ),
        counts=cache,
        metrics=Metrics(),
        spawn=lambda coro: coro.close(),
        clock=lambda: NOW,
    )
    served, failed = await asyncio.gather(
        pipeline.prepare(good, {}, body("good: what is my dog called?"), OPENAI_CHAT),
        pipeline.prepare(bad, {}, body("bad: what is my dog called?"), OPENAI_CHAT),
    )
    assert served.response_headers["X-Memory-Status"] == "injected"
    assert failed.response_headers["X-Memory-Status"] == "degraded"
    assert failed.response_headers["X-Memory-Injected"] == "1"  # the store still answered
    assert degraded_by(pipeline, "cache") == 1


@pytest.mark.parametrize("mode", ["inject", "explain"])
async def test_a_continued_response_holds_half_the_window_back(mode: str) -> None:
    """Both ways the budget is found (bounds when they settle it, exact counts in explain)."""
    tenant = Tenant("t1", MemorySettings(max_tokens=1_000_000))  # no cap hides the budget
    pipeline = build(biscuit_store(), FakeEmbedder(DIMS))
    ask = {"model": "gpt-4o", "instructions": "Be brief.", "input": "what is my dog called?"}
    headers = {"x-memory-mode": mode}
    alone = await pipeline.prepare(tenant, headers, ask, RESPONSES)
    continued = await pipeline.prepare(
        tenant, headers, {**ask, "previous_response_id": "resp_1"}, RESPONSES
    )
    held = int(alone.response_headers["X-Memory-Budget"]) - int(
        continued.response_headers["X-Memory-Budget"]
    )
    assert held == MODEL_OVERRIDES["gpt-4o"].context_window // 2


async def test_responses_block_goes_before_the_latest_user_input_by_default() -> None:
    ask = {"model": "gpt-4o", "instructions": "Be brief.", "input": "what is my dog called?"}
    prepared = await build(biscuit_store(), FakeEmbedder(DIMS)).prepare(TENANT, {}, ask, RESPONSES)
    assert prepared.response_headers["X-Memory-Status"] == "injected"
    assert prepared.body["instructions"] == "Be brief."  # the prompt's start stays the app's
    block, _, own = prepared.body["input"].partition("\n\n")  # a string input stays a string
    assert own == ask["input"]
    assert block.startswith(BLOCK_OPEN)
    assert "Biscuit" in block
    assert prepared.encoded == orjson.dumps(prepared.body)


async def test_responses_block_goes_after_the_instructions_with_position_system() -> None:
    ask = {"model": "gpt-4o", "instructions": "Be brief.", "input": "what is my dog called?"}
    headers = {"x-memory-position": "system"}
    pipeline = build(biscuit_store(), FakeEmbedder(DIMS))
    prepared = await pipeline.prepare(TENANT, headers, ask, RESPONSES)
    assert prepared.response_headers["X-Memory-Status"] == "injected"
    own, _, block = prepared.body["instructions"].partition("\n\n")
    assert own == "Be brief."
    assert block.startswith(BLOCK_OPEN)
    assert "Biscuit" in block
    assert prepared.body["input"] == ask["input"]
    assert prepared.encoded == orjson.dumps(prepared.body)


async def test_bounds_never_settle_a_continued_response_above_its_counted_budget() -> None:
    """Digits and spaces cost a token a byte: the upper bound is the exact count, and without
    the held room it would leave the whole cap (settled, never counted)."""
    pipeline = build(biscuit_store(), FakeEmbedder(DIMS))
    digits = " ".join(str(i % 10) for i in range(1_500))  # 2,999 tokens of gpt-4's 8,192
    ask = {"model": "gpt-4", "input": digits, "previous_response_id": "resp_1"}
    budgets = []
    for mode in ("inject", "explain"):  # explain counts small requests exactly
        headers = {"x-memory-mode": mode, "x-memory-max-tokens": "1000"}
        prepared = await pipeline.prepare(TENANT, headers, ask, RESPONSES)
        budgets.append(int(prepared.response_headers["X-Memory-Budget"]))
    assert budgets == [0, 0]


@pytest.mark.parametrize(("memories", "on_loop"), [(40, True), (150, False)])
async def test_a_large_assembly_runs_off_the_loop(
    monkeypatch: pytest.MonkeyPatch, memories: int, on_loop: bool
) -> None:
    threads: list[int] = []
    real = pipeline_module.assemble

    def spy(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline_module, "assemble", spy)
    records = [replace(BISCUIT, id=f"m{i}", content=f"Biscuit fact {i}.") for i in range(memories)]
    tenant = Tenant("t1", MemorySettings(top_k=200))
    pipeline = build(FakeStore(records, dimensions=DIMS), FakeEmbedder(DIMS))
    prepared = await pipeline.prepare(tenant, {}, body("what is my dog called?"), OPENAI_CHAT)
    assert prepared.response_headers["X-Memory-Status"] == "injected"
    assert (threads == [threading.get_ident()]) is on_loop
    assert len(threads) == 1


@pytest.mark.parametrize("enabled", [True, False])
def test_neighbour_turns_reach_the_adaptive_rule_only(enabled: bool) -> None:
    """``memory.neighbour_turns`` (adr/0114) sets the assembler's window; fill never uses it."""
    cache = RequestCache(LocalCache(10))
    pipeline = Pipeline(
        MemorySettings(neighbour_turns=enabled),
        calculator=TokenBudgetCalculator(memory_cap=None),
        retriever=None,
        counts=cache,
        metrics=Metrics(),
        spawn=lambda coro: coro.close(),
        clock=lambda: NOW,
    )
    for (_, rule), config in pipeline.configs.items():
        if rule == "fill":
            assert config.token_price == 0.0  # the window only acts with a price
        else:
            assert (config.neighbour_window == NEIGHBOUR_WINDOW_S) is enabled
            assert (config.neighbour_window < 0) is not enabled


@pytest.mark.parametrize("seeds", [0, 1])
async def test_neighbour_candidates_reach_the_retrieval(seeds: int) -> None:
    """``memory.neighbour_candidates`` (adr/0122): the turns beside the first dialog hit join
    the ``top_k`` candidates; 0 adds none."""
    turns = [
        replace(
            BISCUIT,
            id=f"t{i}",
            user="u1",
            source="conversation",
            content=f"Turn {i} about biscuits.",
            created_at=NOW - timedelta(minutes=10 - i),
        )
        for i in range(3)
    ]
    cache = RequestCache(LocalCache(100))
    pipeline = Pipeline(
        MemorySettings(deadline_ms=200.0, neighbour_candidates=seeds),
        calculator=TokenBudgetCalculator(memory_cap=None),
        retriever=retriever(FakeStore(turns, dimensions=DIMS), FakeEmbedder(DIMS), cache),
        counts=cache,
        metrics=Metrics(),
        spawn=lambda coro: coro.close(),
        clock=lambda: NOW,
    )
    tenant = Tenant("t1", MemorySettings(top_k=1))
    headers = {"x-memory-mode": "explain", "x-memory-user": "u1"}
    prepared = await pipeline.prepare(tenant, headers, body("biscuits?"), OPENAI_CHAT)
    assert prepared.reply is not None
    document = orjson.loads(bytes(prepared.reply.body))
    seen = sorted(m["id"] for m in [*document["memories"], *document["dropped"]])
    # All turns are equally similar: the search's one hit is t0 (ties by id), t1 is beside it.
    assert seen == (["t0", "t1"] if seeds else ["t0"])
    assert document["candidates"] == len(seen)


def searching_pipeline(store: FakeStore, settings: MemorySettings) -> Pipeline:
    """A pipeline over ``store`` whose queries the tests read back."""
    return Pipeline(
        settings,
        calculator=TokenBudgetCalculator(memory_cap=None),
        retriever=retriever(store, FakeEmbedder(DIMS), None),
        counts=RequestCache(LocalCache(100)),
        metrics=Metrics(),
        spawn=lambda coro: coro.close(),
        clock=lambda: NOW,
    )


@pytest.mark.parametrize("enabled", [False, True])
async def test_lexical_candidates_reach_the_search(enabled: bool) -> None:
    """``memory.lexical_candidates`` (adr/0136): the chat pipeline asks the store for the
    lexical branch's hits beyond the fused ``top_k``."""
    store = FakeStore([BISCUIT], dimensions=DIMS)
    pipeline = searching_pipeline(
        store, MemorySettings(deadline_ms=200.0, lexical_candidates=enabled)
    )
    tenant = Tenant("t1", MemorySettings())
    headers = {"x-memory-mode": "explain", "x-memory-user": "u1"}
    await pipeline.prepare(tenant, headers, body("biscuits?"), OPENAI_CHAT)
    assert [query.lexical for query in store.queries] == [enabled]


@pytest.mark.parametrize(
    ("tenant_top_k", "header", "lexical"),
    [(50, None, True), (50, "50", True), (50, "3", False), (3, None, False), (3, "50", False)],
)
async def test_a_lowered_top_k_is_a_hard_bound_without_lexical_extras(
    tenant_top_k: int, header: str | None, lexical: bool
) -> None:
    """A top_k below the deployment's, from the header or the tenant's limit, asks no extras."""
    store = FakeStore([BISCUIT], dimensions=DIMS)
    settings = MemorySettings(deadline_ms=200.0, top_k=50, lexical_candidates=True)
    pipeline = searching_pipeline(store, settings)
    tenant = Tenant("t1", MemorySettings(top_k=tenant_top_k))
    headers = {"x-memory-mode": "explain", "x-memory-user": "u1"}
    if header is not None:
        headers["x-memory-top-k"] = header
    await pipeline.prepare(tenant, headers, body("biscuits?"), OPENAI_CHAT)
    assert [query.lexical for query in store.queries] == [lexical]


class GatedStore(FakeStore):
    """A store that notes each search's ``alone`` hint, then holds it until ``gate`` opens."""

    def __init__(self, records: list[MemoryRecord]) -> None:
        super().__init__(records, dimensions=DIMS)
        self.alone: list[bool] = []
        self.gate = asyncio.Event()

    async def search(self, tenant: str, query: Any) -> list[Candidate]:
        self.alone.append(query.alone)
        await self.gate.wait()
        return await super().search(tenant, query)


async def test_a_search_is_alone_only_with_no_other_request_in_its_memory_stage() -> None:
    """The hint that lets the embedded store search on the loop's thread (adr/0172): a request
    searching while another is in its memory stage is not alone, and one after both is."""
    store = GatedStore([BISCUIT])
    pipeline = searching_pipeline(store, MemorySettings(deadline_ms=5_000.0))
    headers = {"x-memory-mode": "explain", "x-memory-user": "u1"}

    def ask() -> asyncio.Task[Any]:
        return asyncio.ensure_future(
            pipeline.prepare(TENANT, headers, body("biscuits?"), OPENAI_CHAT)
        )

    async def searching(count: int) -> None:
        for _ in range(1_000):  # bounded: a request that never searches fails the assert
            if len(store.alone) >= count:
                return
            await asyncio.sleep(0)

    first = ask()
    await searching(1)
    second = ask()  # while the first is in its memory stage
    await searching(2)
    store.gate.set()
    await asyncio.gather(first, second)
    await ask()
    assert store.alone == [True, False, True]


def nested(depth: int) -> object:
    value: object = "deep"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("mode", ["inject", "off", "explain"])
@pytest.mark.parametrize(
    ("api", "ask"),
    [
        (
            RESPONSES,
            {
                "model": "gpt-4o",
                "input": [
                    {"type": "reasoning", "summary": nested(300)},
                    {"role": "user", "content": "what is my dog called?"},
                ],
            },
        ),
        (
            ANTHROPIC_MESSAGES,
            {
                "model": "claude-sonnet-4-5",
                "max_tokens": 100,
                "messages": [
                    {
                        "role": "assistant",
                        "content": [
                            {
                                "type": "tool_use",
                                "id": "t1",
                                "name": "f",
                                "input": {"a": nested(300)},
                            }
                        ],
                    },
                    {"role": "user", "content": "what is my dog called?"},
                ],
            },
        ),
    ],
)
async def test_a_body_the_adapter_cannot_read_goes_as_sent(
    api: ApiAdapter, ask: dict[str, object], mode: str
) -> None:
    """Nesting orjson reads but cannot write, inside a part the adapter serialises: memory on
    must pass it as memory off does (it was a 500)."""
    prepared = await build(biscuit_store(), FakeEmbedder(DIMS)).prepare(
        TENANT, {"x-memory-mode": mode}, ask, api
    )
    if mode == "explain":  # answered, saying why nothing would be injected
        assert prepared.reply is not None
        assert prepared.reply.status_code == 200
    else:
        assert prepared.body is ask
    status = "off" if mode == "off" else "degraded"
    assert prepared.response_headers["X-Memory-Status"] == status


class RecordingFacts:
    """Stands in for ``FactCapture``: records what the pipeline would queue."""

    def __init__(self) -> None:
        self.submitted: list[FactRequest] = []

    def submit(self, *args: Any) -> bool:
        self.submitted.append(args[-1])
        return True


@pytest.mark.parametrize(
    ("api", "ask", "queued"),
    [
        (OPENAI_CHAT, body("I moved to Berlin."), True),
        (
            ANTHROPIC_MESSAGES,
            {
                "model": "claude-sonnet-4-5",
                "max_tokens": 9,
                "messages": body("I moved.")["messages"],
            },
            False,
        ),
    ],
)
async def test_facts_use_only_openai_credentials(
    api: ApiAdapter, ask: dict[str, object], queued: bool
) -> None:
    """Extraction calls the OpenAI-compatible upstream with the request's credentials: an
    Anthropic key must never go there (it is counted as an unsupported API instead)."""
    facts = RecordingFacts()
    pipeline = build(biscuit_store(), FakeEmbedder(DIMS))
    pipeline.facts = facts  # type: ignore[assignment]
    headers = {"x-memory-capture": "facts", "x-api-key": "sk-ant-secret"}
    prepared = await pipeline.prepare(TENANT, headers, ask, api)
    # Nothing to read the answer for when it cannot be queued (adr/0134).
    assert (prepared.on_complete is not None) is queued
    if prepared.on_complete is not None:
        await prepared.on_complete(Completion(status=200, streamed=False, ok=True, text="Noted."))
    assert bool(facts.submitted) is queued
    unsupported = pipeline.metrics.registry.get_sample_value(
        "memproxy_extraction_failures_total", {"reason": "unsupported_api"}
    )
    assert (unsupported or 0) == (0 if queued else 1)


@pytest.mark.parametrize(
    ("capture", "contexts"),
    [
        # The user's message is embedded with the answer before it, the answer with the
        # message (adr/0142); the records keep their own text. ``user`` capture stores no
        # answer, so none is the context of the user's message either (adr/0144).
        ("user", {"and the kids?": ""}),
        ("turn", {"and the kids?": "We saw the dinosaurs.", "They loved it.": "and the kids?"}),
    ],
)
async def test_a_captured_turn_is_stored_with_its_context(
    capture: str, contexts: dict[str, str]
) -> None:
    store = FakeStore([], dimensions=DIMS)
    embedder = FakeEmbedder(DIMS)
    pipeline = build(store, embedder)
    pipeline.writer = MemoryService(store, embedder)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What did you do at the museum?"},
        {"role": "assistant", "content": "We saw the dinosaurs."},
        {"role": "user", "content": "and the kids?"},
    ]
    headers = {"x-memory-capture": capture, "x-memory-user": "u"}
    prepared = await pipeline.prepare(
        TENANT, headers, {"model": "gpt-4o", "messages": messages}, OPENAI_CHAT
    )
    assert prepared.on_complete is not None
    await prepared.on_complete(Completion(200, streamed=False, ok=True, text="They loved it."))
    stored = {r.content: r.context for added, _ in store.adds for r in added}
    assert stored == contexts
    assert embedder.calls[-1] == [index_text(c, contexts[c]) for c in contexts]


async def test_a_body_with_base64_shaped_like_big_numbers_gets_its_memories() -> None:
    pipeline = running_pipeline()
    image = "data:image/png;base64," + "QU7e+19Zk9e+200/" * 1000
    original = body("what is my dog called?")
    original["messages"][-1]["content"] = [
        {"type": "text", "text": "what is my dog called?"},
        {"type": "image_url", "image_url": {"url": image}},
    ]
    prepared = await pipeline.prepare(TENANT, {}, original, OPENAI_CHAT)
    assert prepared.response_headers["X-Memory-Status"] == "injected"
    assert degraded_by(pipeline, "encode") is None


@pytest.mark.parametrize(
    ("said", "on_loop"),
    [
        ("and the kids?", True),
        # Over CAPTURE_ON_LOOP_BYTES of fenced text: stripping it would hold the loop.
        ("<memories>old</memories> and the kids? " * 3_000, False),
    ],
)
async def test_a_large_turn_is_read_for_capture_on_a_thread(
    said: str, on_loop: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[int] = []

    def recorded(*args: Any) -> Any:
        threads.append(threading.get_ident())
        return captured(*args)

    monkeypatch.setattr(pipeline_module, "captured", recorded)
    store = FakeStore([], dimensions=DIMS)
    pipeline = build(store, FakeEmbedder(DIMS))
    pipeline.writer = MemoryService(store, FakeEmbedder(DIMS))
    messages = [{"role": "user", "content": said}]
    headers = {"x-memory-capture": "user", "x-memory-user": "u"}
    prepared = await pipeline.prepare(
        TENANT, headers, {"model": "gpt-4o", "messages": messages}, OPENAI_CHAT
    )
    assert prepared.on_complete is not None
    await prepared.on_complete(Completion(200, streamed=False, ok=True, text="They loved it."))
    assert len(threads) == 1
    assert (threads[0] == threading.get_ident()) is on_loop
    stored = [r.content for added, _ in store.adds for r in added]
    assert stored == [strip_block(said).strip()[:MAX_CONTENT_CHARS]]


def stage_run(timeout_s: float) -> Run:
    """A request's run whose ``embed`` stage has ``timeout_s``."""
    chat = body("dog?")
    options = parse_options(SETTINGS, {}, chat)
    return Run(TENANT, options, OPENAI_CHAT, OPENAI_CHAT.conversation(chat), {"embed": timeout_s})


async def test_a_stage_that_never_waits_sets_no_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only work that waits can be interrupted; a timer costs the loop ~4 us to set and clear."""
    armed: list[float] = []
    timeout, timeout_at = asyncio.timeout, asyncio.timeout_at

    def arm(at: float) -> float:
        armed.append(at)
        return at

    monkeypatch.setattr(asyncio, "timeout", lambda delay: timeout(arm(delay)))
    monkeypatch.setattr(asyncio, "timeout_at", lambda when: timeout_at(arm(when)))

    async def at_once() -> int:
        return 1

    async def waiting() -> int:
        await asyncio.sleep(0)
        return 2

    run = stage_run(1.0)
    assert await run.run("embed", at_once()) == 1
    assert armed == []
    assert await run.run("embed", waiting()) == 2
    assert len(armed) == 1
    assert set(run.clock.stages) == {"embed"}


async def test_a_stage_times_out_from_its_start_not_its_first_wait() -> None:
    """A first part that overran the stage's time leaves none for what comes after it."""

    async def slow_then_waits() -> int:
        loop = asyncio.get_running_loop()
        spent = loop.time() + 0.02  # the stage's 10 ms spent before its first wait
        while loop.time() < spent:
            pass
        await asyncio.sleep(0)
        return 1

    run = stage_run(0.01)
    with pytest.raises(StageFailed):
        await run.run("embed", slow_then_waits())
    assert run.reasons == ["embed_timeout"]
