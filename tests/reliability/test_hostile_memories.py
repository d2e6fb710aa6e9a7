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

import uuid
from pathlib import Path
from typing import Any

import pytest

from proxy.app import create_app
from tests.fakes.upstream import FakeServer
from tests.reliability.support import assert_openai_error, memory_settings, running


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
