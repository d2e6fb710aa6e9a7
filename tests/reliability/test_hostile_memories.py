"""Hostile memories: no single write may poison a tenant's memory.

A memory the API accepts must stay readable: after each hostile-but-accepted write the tenant's
list, search and chat (memory injected, not degraded) still work. A write the API cannot keep
readable must be refused with a 4xx in OpenAI's shape.

Found here: metadata nested ~130-250 levels deep was accepted (201), then Qdrant Edge could not
decode the payload (``recursion limit exceeded``), so every list of that tenant answered 503 and
every chat went ``degraded``; the inputs now refuse metadata nested deeper than
``MAX_METADATA_DEPTH``.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

import pytest

from proxy.app import create_app
from tests.fakes.upstream import FakeServer
from tests.reliability.support import assert_openai_error, memory_settings, running

KEYED = {"Authorization": "Bearer sk-hostile-memories"}


def nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


HOSTILE_MEMORIES: list[dict[str, Any]] = [
    {"content": "tea " + "\u0000\u202e\ufeff\U0010ffff"},
    {"content": "tea", "metadata": nested(20)},
    {"content": "tea", "metadata": {"k": nested(60)}},
    {"content": "tea", "metadata": {"k": nested(140)}},
    {"content": "tea", "metadata": {"k": nested(200)}},
    {"content": "tea", "metadata": {"k": nested(300)}},
    {"content": "tea", "metadata": {"big": 2**63 - 1, "small": -(2**63), "f": 1e308}},
    {"content": "tea", "metadata": {"": None, "\u0000": "nul key", "k" * 1000: "long key"}},
    {"content": "tea " * 1500},
    {"content": "tea", "user": "\u00ff\u0000"},
    {"content": "tea", "id": "~" * 256},
]


@pytest.mark.parametrize("memory", HOSTILE_MEMORIES, ids=lambda m: str(m)[:40])
async def test_an_accepted_memory_never_poisons_the_tenant(
    fake: FakeServer, tmp_path: Path, memory: dict[str, Any]
) -> None:
    app = create_app(memory_settings(fake.url, tmp_path))
    auth = {"Authorization": f"Bearer sk-{uuid.uuid4().hex}"}
    chat = {
        "model": "gpt-4o",
        "user": str(memory.get("user", "")) or "nobody",
        "messages": [{"role": "user", "content": "what about tea?"}],
    }
    async with running(app) as client:
        assert (
            await client.post("/v1/memories", json={"content": "likes tea"}, headers=auth)
        ).status_code == 201
        written = await client.post("/v1/memories", json=memory, headers=auth)
        if written.status_code != 201:
            assert_openai_error(written, 400)
        listed = await client.get("/v1/memories", headers=auth)
        searched = await client.post("/v1/memories/search", json={"query": "tea"}, headers=auth)
        answered = await client.post("/v1/chat/completions", json=chat, headers=auth)
    assert listed.status_code == 200, listed.text
    assert searched.status_code == 200, searched.text
    assert answered.status_code == 200
    assert answered.headers["x-memory-status"] == "injected"


# --- times and faults ------------------------------------------------------------------------
# Found here: a created_at past year 9999 once in UTC answered 503 "backend failed" (an
# OverflowError taken for an outage); every unexpected exception of the memories API answered
# 503, so a bug looked like a backend outage.


@pytest.mark.parametrize(
    "created_at",
    ["9999-12-31T23:30:00-05:00", "9999-12-31T20:00-23:59", "1000-01-01T00:30:00+01:00"],
)
async def test_times_outside_utc_years_1000_9999_are_400(
    fake: FakeServer, tmp_path: Path, created_at: str
) -> None:
    app = create_app(memory_settings(fake.url, tmp_path))
    async with running(app) as client:
        client.headers.update(KEYED)
        one = await client.post("/v1/memories", json={"content": "tea", "created_at": created_at})
        batch = await client.post(
            "/v1/memories",
            json={"memories": [{"content": "a"}, {"content": "b", "created_at": created_at}]},
        )
        listed = await client.get("/v1/memories")
    assert_openai_error(one, 400)
    assert one.json()["error"]["param"] == "created_at"
    assert_openai_error(batch, 400)
    assert batch.json()["error"]["param"] == "memories[1].created_at"
    assert listed.json()["data"] == []  # nothing of either write was kept


class BuggyStore:
    """A store with a bug: every call raises what no backend failure raises."""

    def __getattr__(self, name: str) -> Any:
        async def fail(*args: Any, **kwargs: Any) -> Any:
            raise AttributeError(f"'NoneType' object has no attribute {name!r}")

        return fail


async def test_a_bug_is_a_500_logged_once_not_a_503(
    fake: FakeServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(memory_settings(fake.url, tmp_path), store=BuggyStore())
    with caplog.at_level(logging.WARNING):
        async with running(app) as client:
            client.headers.update(KEYED)
            listed = await client.get("/v1/memories")
    assert_openai_error(listed, 500)
    assert listed.json()["error"]["type"] == "server_error"
    logged = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(logged) == 1
    assert logged[0].exc_info is not None  # with its traceback


class FailingShard:
    """Qdrant Edge's shard when its engine fails: a bare ``Exception`` from every call."""

    def __getattr__(self, name: str) -> Any:
        def fail(*args: Any, **kwargs: Any) -> Any:
            raise Exception("Service runtime error: No space left on device")

        return fail


async def test_a_failing_store_engine_is_a_503(fake: FakeServer, tmp_path: Path) -> None:
    """The embedded engine's own errors are an outage (503), told apart from our bugs."""
    app = create_app(memory_settings(fake.url, tmp_path))
    async with running(app) as client:
        client.headers.update(KEYED)
        store = app.state.services.memories.store
        shard, store._shard = store._shard, FailingShard()
        try:
            listed = await client.get("/v1/memories")
            written = await client.post("/v1/memories", json={"content": "tea"})
            chat = await client.post(
                "/v1/chat/completions",
                json={"model": "gpt-4o", "messages": [{"role": "user", "content": "tea?"}]},
            )
        finally:
            store._shard = shard
    assert_openai_error(listed, 503, "memory_backend_unavailable")
    assert_openai_error(written, 503, "memory_backend_unavailable")
    assert chat.status_code == 200  # a chat request degrades instead
    assert chat.headers["x-memory-status"] == "degraded"
