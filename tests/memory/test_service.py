"""MemoryService: the one write path, with fake backends (its input: tests/memory/test_inputs)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.context.records import MemoryRecord
from proxy.errors import EmbedderError, NotFound, RequestError
from proxy.memory.edge import EdgeStore
from proxy.memory.inputs import MemoryInput, SetUsefulness, Vote
from proxy.memory.parsing import parse_memories
from proxy.memory.service import (
    FEEDBACK_STEP,
    INLINE_COUNT_MAX_CHARS,
    MemoryService,
    feedback_usefulness,
    memory_object,
)
from proxy.memory.turn_context import context_key
from proxy.tokenizer import count_tokens
from tests.fakes.cache import FakeCache
from tests.fakes.embedder import FakeEmbedder
from tests.fakes.store import FakeStore

DIM = 4
UP = Vote(useful=True)
NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def make(**kwargs: Any) -> tuple[MemoryService, FakeStore, FakeEmbedder, FakeCache]:
    store, embedder, cache = FakeStore(dimensions=DIM), FakeEmbedder(DIM, **kwargs), FakeCache()
    service = MemoryService(store, embedder, cache, max_content_chars=50, clock=lambda: NOW)
    return service, store, embedder, cache


async def test_write_builds_records_embeds_once_adds_and_bumps() -> None:
    service, store, embedder, cache = make()
    records = await service.add(
        "t1", [{"content": "Alice likes tea", "id": "a"}, {"content": "Bob", "user": "bob"}]
    )
    assert records[0].id == "a"
    assert records[1].id.startswith("mem_")
    assert all(r.tenant == "t1" and r.created_at == NOW for r in records)
    assert records[0].tokens == {
        "o200k_base": count_tokens("Alice likes tea", "o200k_base"),
        "cl100k_base": count_tokens("Alice likes tea", "cl100k_base"),
        "claude": count_tokens("Alice likes tea", "claude"),
    }
    assert embedder.calls == [["Alice likes tea", "Bob"]]
    (added, vectors) = store.adds[0]
    assert added == records
    assert vectors.shape == (2, DIM)
    assert cache.bumps == ["t1"]


async def test_invalid_batch_writes_and_embeds_nothing() -> None:
    service, store, embedder, cache = make()
    with pytest.raises(RequestError) as info:
        await service.add("t1", [{"content": "fine"}, {"content": "x" * 51}])
    assert info.value.param == "memories[1].content"
    assert (store.adds, embedder.calls, cache.bumps) == ([], [], [])


async def test_embedder_failure_is_a_503_and_writes_nothing() -> None:
    service, store, _, cache = make(fail=True)
    with pytest.raises(EmbedderError) as info:
        await service.add("t1", [{"content": "fine"}])
    assert info.value.status == 503
    assert (store.adds, cache.bumps) == ([], [])


@pytest.fixture
def offloaded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the functions the service runs on a thread (``asyncio.to_thread``)."""
    names: list[str] = []
    real_to_thread = asyncio.to_thread

    async def spy(func: Any, *args: Any) -> Any:
        names.append(func.__name__)
        return await real_to_thread(func, *args)

    monkeypatch.setattr("proxy.memory.service.asyncio.to_thread", spy)
    return names


async def test_large_batches_count_tokens_off_the_loop_with_the_same_result(
    offloaded: list[str],
) -> None:
    service, _, _, _ = make()
    service.max_content_chars = 10_000
    await service.add("t1", [{"content": "small"}])
    assert offloaded == []
    text = "word " * 1000
    count = INLINE_COUNT_MAX_CHARS // len(text) + 2
    records = await service.add("t1", [{"content": text}] * count)
    assert offloaded == ["build_records"]
    assert len(records) == count
    assert all(r.tokens["o200k_base"] == count_tokens(text) for r in records)


async def test_a_captured_turn_is_counted_off_the_loop(offloaded: list[str]) -> None:
    # adr/0166: a question and its answer (~1,500 characters) held the loop 0.5-2 ms inline.
    service, _, _, _ = make()
    turn = [
        MemoryInput(content="What did Caroline research last week? " * 10, user="u"),
        MemoryInput(content="She researched adoption agencies. " * 30, user="u"),
    ]
    assert 1_000 < sum(len(item.content) for item in turn) < 2_000
    await service.write("t1", turn)
    assert offloaded == ["build_records"]


async def test_empty_write_and_missing_tenant() -> None:
    service, store, _, _ = make()
    assert await service.write("t1", []) == []
    with pytest.raises(RequestError):
        await service.write("", [MemoryInput(content="x")])
    assert store.adds == []


async def test_simultaneous_votes_on_one_memory_all_count(tmp_path: Path) -> None:
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        service = MemoryService(store, FakeEmbedder(DIM), FakeCache(), clock=lambda: NOW)
        await service.add("t1", [{"content": "x", "id": "m"}])
        await asyncio.gather(*(service.feedback("t1", "m", UP) for _ in range(5)))
        expected = 0.5
        for _ in range(5):  # the same five votes, one after the other
            expected = feedback_usefulness(expected, UP)
        assert (await service.get("t1", "m")).usefulness == pytest.approx(expected)
    finally:
        await store.close()


async def test_get_delete_and_feedback_are_tenant_scoped() -> None:
    service, _, _, cache = make()
    await service.add("t1", [{"content": "x", "id": "m"}])
    with pytest.raises(NotFound):
        await service.get("t2", "m")
    with pytest.raises(NotFound):
        await service.feedback("t2", "m", UP)
    with pytest.raises(NotFound):
        await service.delete("t2", "m")
    updated = await service.feedback("t1", "m", UP)
    assert updated.usefulness == pytest.approx(0.5 + FEEDBACK_STEP * 0.5)
    await service.delete("t1", "m")
    with pytest.raises(NotFound):
        await service.delete("t1", "m")
    assert cache.bumps == ["t1", "t1", "t1"]


async def test_search_uses_the_cached_query_embedding_and_scopes() -> None:
    service, store, _, cache = make()
    # A playbook memory: the store honours the source filter (the old fake ignored it).
    await service.add("t1", [{"content": "x", "source": "playbook"}])
    hits = await service.search("t1", "x", user="u", top_k=3, sources=["playbook"])
    assert len(hits) == 1
    assert cache.embeds == 1
    # The write's duplicate check searched first; the API's search is the last one.
    assert store.queries[-1].user == "u"
    assert store.queries[-1].sources == ("playbook",)
    assert store.queries[-1].live_at == NOW


@given(
    st.floats(0, 1),
    st.lists(st.booleans(), max_size=30),
)
def test_feedback_votes_stay_in_range_and_move_towards_the_vote(
    start: float, votes: list[bool]
) -> None:
    value = start
    for vote in votes:
        new = feedback_usefulness(value, Vote(useful=vote))
        assert 0.0 <= new <= 1.0
        assert (new >= value - 1e-6) if vote else (new <= value + 1e-6)
        value = new


def test_explicit_usefulness_is_set_as_is() -> None:
    assert feedback_usefulness(0.9, SetUsefulness(usefulness=0.3)) == 0.3


def test_memory_object_shape() -> None:
    record = MemoryRecord(
        id="m",
        tenant="t",
        user="u",
        source="playbook",
        content="hello world",
        created_at=datetime(2024, 1, 1, tzinfo=timezone(timedelta(hours=2))),
        tokens={"o200k_base": 2, "cl100k_base": 2},
        metadata={"a": 1},
    )
    shaped = memory_object(record)
    assert shaped["created_at"] == "2023-12-31T22:00:00Z"
    assert shaped["tokens"] == 2
    assert "tenant" not in shaped


# -- write hygiene (adr/0113) -------------------------------------------------------------------


async def test_a_duplicate_without_an_id_is_not_stored_again() -> None:
    service, store, _, cache = make()
    first = await service.add("t1", [{"content": "I live in Porto.", "user": "u"}])
    again = await service.add("t1", [{"content": "i live in porto", "user": "u"}])
    assert again == first  # the stored memory answers for the repeat
    assert len(store.adds) == 1
    assert cache.bumps == ["t1"]  # nothing changed, nothing to invalidate
    assert await store.count("t1") == 1


async def test_a_duplicate_in_one_batch_is_stored_once() -> None:
    service, store, _, _ = make()
    records = await service.add(
        "t1", [{"content": "Likes tea"}, {"content": "likes TEA!"}, {"content": "Likes coffee"}]
    )
    assert records[1] == records[0]
    assert [r.content for r in store.adds[0][0]] == ["Likes tea", "Likes coffee"]


async def test_other_users_other_words_and_explicit_ids_are_stored() -> None:
    service, store, _, _ = make()
    await service.add("t1", [{"content": "I live in Porto.", "user": "u"}])
    await service.add("t1", [{"content": "I live in Porto.", "user": "v"}])
    await service.add("t1", [{"content": "I live in Lisbon.", "user": "u"}])
    # With an id it is the caller's upsert: stored as asked.
    await service.add("t1", [{"content": "I live in Porto.", "user": "u", "id": "mine"}])
    assert await store.count("t1") == 4


async def test_a_duplicate_of_an_expired_or_superseded_memory_is_stored() -> None:
    service, store, _, _ = make()
    await service.add(
        "t1",
        [
            {"id": "gone", "content": "In Lisbon", "expires_at": "2025-01-01T00:00:00Z"},
            {"id": "old", "content": "Lives in Porto"},
        ],
    )
    old = await service.get("t1", "old")
    await store.add(
        [dataclasses.replace(old, superseded_by="new")], np.ones((1, DIM), np.float32) / 2
    )
    records = await service.add("t1", [{"content": "in lisbon"}, {"content": "lives in porto"}])
    assert [r.id for r in records] != ["gone", "old"]
    assert await store.count("t1") == 4


async def test_simultaneous_identical_writes_store_one_memory() -> None:
    service, store, _, _ = make()
    results = await asyncio.gather(
        *(service.add("t1", [{"content": "I live in Porto.", "user": "u"}]) for _ in range(5))
    )
    assert len({r[0].id for r in results}) == 1
    assert await store.count("t1") == 1


async def test_expires_at_is_stored_and_shown() -> None:
    service, _, _, _ = make()
    (record,) = await service.add(
        "t1", [{"content": "In Lisbon this week", "expires_at": "2025-01-09T00:00:00+01:00"}]
    )
    assert record.expires_at == datetime(2025, 1, 8, 23, tzinfo=UTC)
    shown = memory_object(record)
    assert shown["expires_at"] == "2025-01-08T23:00:00Z"
    assert (shown["superseded_by"], shown["supersedes"]) == (None, None)


async def test_supersede_is_one_conditional_write_without_embedding() -> None:
    service, store, embedder, cache = make()
    await service.add("t1", [{"content": "Lives in Porto", "id": "old"}])
    embedder.calls.clear()
    cache.bumps.clear()
    marked = await service.supersede("t1", "old", "new")
    assert marked is not None
    assert marked.superseded_by == "new"
    assert embedder.calls == []  # the text did not change: its stored vector stays
    assert len(store.adds) == 1  # no second upsert of the old record
    assert cache.bumps == ["t1"]
    assert await service.supersede("t1", "old", "newer") is None
    assert await service.supersede("t1", "old", "old") is None
    assert cache.bumps == ["t1"]  # nothing changed, nothing invalidated


async def test_a_batch_looks_its_repeats_up_once() -> None:
    service, store, _, _ = make()
    await service.add("t1", [{"content": "I live in Porto.", "user": "u"}])
    items = [
        {"content": "i live in porto", "user": "u"},
        {"content": "I live in Porto.", "user": "v"},
        {"content": "Likes tea", "user": "u"},
        {"content": "likes tea", "user": "u"},
        {"content": "Likes coffee", "user": "v", "id": "c"},
    ]
    store.repeat_lookups = 0
    records = await service.add("t1", items)
    assert store.repeat_lookups == 1
    assert records[0].id != records[1].id
    assert records[3] == records[2]
    assert await store.count("t1") == 4


# -- bulk import ---------------------------------------------------------------------------------

# A history with every kind of repeat: of a stored memory, inside a batch, across batches, of
# another user's memory, of an expired memory, written with an id, and a blank-worded one.
HISTORY = [
    {"content": "I live in Porto.", "user": "u"},
    {"content": "Likes tea", "user": "u"},
    {"content": "likes TEA!", "user": "u"},
    {"content": "i live in porto", "user": "u"},
    {"content": "I live in Porto.", "user": "v"},
    {"content": "In Lisbon", "user": "u"},
    {"content": "Likes tea", "user": "u", "id": "explicit"},
    {"content": "Likes coffee", "user": "v"},
    {"content": "...", "user": "u"},
    {"content": "!!!", "user": "u"},
    {"content": "likes coffee", "user": "v"},
    {"content": "Was in Paris", "user": "u"},
    {"content": "LIKES TEA", "user": "u"},
]
EARLIER = [
    {"id": "stored", "content": "Was in Paris", "user": "u"},
    {"id": "gone", "content": "in lisbon", "user": "u", "expires_at": "2025-01-01T00:00:00Z"},
]


async def written_one_by_one_and_imported(
    batch: int,
) -> tuple[tuple[list[str], list[tuple[str, str]]], tuple[list[str], list[tuple[str, str]]]]:
    """(which input answers each input, what is stored) both ways, into two fresh stores."""
    outcomes = []
    for bulk in (False, True):
        service, store, _, _ = make()
        await service.add("t1", EARLIER)
        inputs = parse_memories(HISTORY, max_content_chars=50)
        if bulk:
            chunks = [inputs[i : i + batch] for i in range(0, len(inputs), batch)]
            records = [r async for done in service.import_batches("t1", chunks) for r in done]
        else:
            records = [r for item in inputs for r in await service.write("t1", [item])]
        # Generated ids differ between runs: name each answer by the input that first got it.
        first = {}
        for index, record in enumerate(records):
            first.setdefault(record.id, str(index))
        answers = [first[r.id] if r.id not in {"stored", "gone"} else r.id for r in records]
        page = await store.list("t1", user=None, source=None, limit=100, after=None)
        outcomes.append((answers, sorted((r.user, r.content) for r in page.records)))
    return outcomes[0], outcomes[1]


@pytest.mark.parametrize("batch", [1, 2, 3, 5, 13])
async def test_import_batches_store_what_one_write_per_memory_stores(batch: int) -> None:
    one_by_one, imported = await written_one_by_one_and_imported(batch)
    assert imported == one_by_one
    answers, stored = imported
    assert [answers[2], answers[3], answers[11]] == ["1", "0", "stored"]  # repeats
    assert answers[5:7] == ["5", "6"]  # of an expired memory; with an id
    assert answers[8:10] == ["8", "9"]  # no words: never a repeat
    assert len(stored) == len(EARLIER) + len(set(answers) - {"stored"})


async def test_import_prepares_the_next_batch_while_storing_the_current() -> None:
    second_embedded = asyncio.Event()

    class Embedder(FakeEmbedder):
        async def embed(self, texts: Sequence[str]) -> np.ndarray:
            if self.calls:
                second_embedded.set()
            return await super().embed(texts)

    class Store(FakeStore):
        async def add(self, records: Sequence[MemoryRecord], vectors: np.ndarray) -> None:
            if not self.adds:  # the first batch's write waits until the second is embedded
                await asyncio.wait_for(second_embedded.wait(), 5)
            await super().add(records, vectors)

    store = Store(dimensions=DIM)
    service = MemoryService(store, Embedder(DIM), None, clock=lambda: NOW)
    chunks = [parse_memories([{"content": f"note {i}"}], max_content_chars=50) for i in range(3)]
    done = [r async for written in service.import_batches("t1", chunks) for r in written]
    assert [r.content for r in done] == ["note 0", "note 1", "note 2"]
    assert [[r.content for r in added] for added, _ in store.adds] == [
        ["note 0"],
        ["note 1"],
        ["note 2"],
    ]


async def test_an_import_that_fails_keeps_the_batches_before_it() -> None:
    class Embedder(FakeEmbedder):
        async def embed(self, texts: Sequence[str]) -> np.ndarray:
            if texts == ["bad"]:
                raise RuntimeError("model crashed")
            return await super().embed(texts)

    store = FakeStore(dimensions=DIM)
    service = MemoryService(store, Embedder(DIM), None, clock=lambda: NOW)
    chunks = [parse_memories([{"content": c}], max_content_chars=50) for c in ("ok", "bad", "x")]
    written: list[MemoryRecord] = []

    async def run() -> None:
        async for records in service.import_batches("t1", chunks):
            written.extend(records)

    with pytest.raises(EmbedderError):
        await run()
    assert [r.content for r in written] == ["ok"]
    assert await store.count("t1") == 1


# -- a dialog turn's context (adr/0142) ---------------------------------------------------------


async def test_a_dialog_turn_is_embedded_with_the_turn_before_it() -> None:
    service, store, embedder, _ = make()
    turns = [
        {"content": "Kids love dinosaurs", "source": "conversation", "metadata": {"session": 1}},
        {"content": "A fact", "source": "learnings"},
        {"content": "They were stoked!", "source": "conversation", "metadata": {"session": 1}},
    ]
    records = await service.add("t1", turns)
    # Dense only: the vector holds the turn before; the record's text stays the turn's own.
    assert embedder.calls == [
        ["Kids love dinosaurs", "A fact", "Kids love dinosaurs\nThey were stoked!"]
    ]
    assert [r.content for r in records] == ["Kids love dinosaurs", "A fact", "They were stoked!"]
    assert [r.context for r in records] == ["", "", "Kids love dinosaurs"]
    assert store.adds[0][0] == records
    assert "context" not in memory_object(records[2])
    assert memory_object(records[2])["content"] == "They were stoked!"


async def test_the_text_before_a_batch_is_its_first_turns_context() -> None:
    service, _, embedder, _ = make()
    said = MemoryInput(content="Yes, twice", user="u", source="conversation")
    (record,) = await service.write("t1", [said], preceding="Did you go?")
    assert record.context == "Did you go?"
    assert embedder.calls == [["Did you go?\nYes, twice"]]


async def test_a_turns_repeat_is_found_by_its_own_text_not_its_context() -> None:
    # Write hygiene (adr/0113) compares the turns' own texts: a "Yes" after another question
    # repeats the stored "Yes", which answers for it, context and all (adr/0142).
    service, store, _, _ = make()

    def turns(*texts: str) -> list[MemoryInput]:
        return [MemoryInput(content=t, user="u", source="conversation") for t in texts]

    first = await service.write("t1", turns("Paris?", "Yes"))
    again = await service.write_unique("t1", turns("Kids?", "Yes"))
    assert [(r.content, r.context, new) for r, new in again] == [
        ("Kids?", "", True),
        ("Yes", "Paris?", False),
    ]
    assert again[1][0] == first[1]
    assert [r.content for r in store.adds[-1][0]] == ["Kids?"]


async def test_forget_copies_rewrites_only_the_users_copies_page_by_page(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # adr/0144: the scan pages through the user's dialog turns (a page of one here), finds the
    # copies by context key, or by the cut text for a point written before keys existed, and
    # leaves another user's, the kept ids' and other contexts alone.
    import proxy.memory.service as module

    monkeypatch.setattr(module, "FORGET_SCAN_PAGE", 1)
    service, store, embedder, cache = make()
    gone = MemoryRecord("x", "t1", "u", "conversation", "Secret text", NOW)
    key = context_key("Secret text")

    def turn(memory_id: str, user: str = "u", context: str = "", key: str = "") -> MemoryRecord:
        return MemoryRecord(
            memory_id, "t1", user, "conversation", memory_id, NOW, context=context, context_key=key
        )

    turns = [
        turn("copy", context="Secret text", key=key),
        turn("legacy", context="Secret text"),
        turn("kept", context="Secret text", key=key),
        turn("other", context="Other text", key=context_key("Other text")),
        turn("theirs", user="v", context="Secret text", key=key),
    ]
    await store.add(turns, np.ones((len(turns), DIM), dtype=np.float32))
    assert await service.forget_copies("t1", [gone], keep={"kept"}) == 2
    page = await store.list("t1", user=None, source=None, limit=99, after=None)
    assert {r.id: (r.context, r.context_key) for r in page.records} == {
        "copy": ("", ""),
        "legacy": ("", ""),
        "kept": ("Secret text", key),
        "other": ("Other text", context_key("Other text")),
        "theirs": ("Secret text", key),
    }
    # Re-embedded from their own text, in one call a page; the searches cached before go.
    assert sorted(text for call in embedder.calls for text in call) == ["copy", "legacy"]
    assert cache.bumps == ["t1"]
