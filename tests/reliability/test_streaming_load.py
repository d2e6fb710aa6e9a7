"""Streaming fidelity under concurrent load, memory on, over real sockets.

The suite's counterpart of ``bench/streams.py`` (256 streams x 64 chunks x 20 ms, with the added
inter-chunk p99): here 48 streams x 16 chunks x 10 ms, so the suite stays fast on a shared
2-core machine. Every stream must arrive byte for byte as the fake sent it (each stream has its
own model name, echoed in every event: a chunk on the wrong stream shows), ``[DONE]`` last, and
every request must really have gone through retrieval and injection.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import orjson

from proxy.app import create_app
from tests.fakes.upstream import FakeServer, stream_events
from tests.reliability.support import MemoryProxy, memory_settings

STREAMS, CHUNKS, INTERVAL_MS = 48, 16, 10.0
USERS = 16
KEY = "Bearer sk-streams"


def seed(client: httpx.Client) -> None:
    """Give every user memories the question retrieves."""
    for u in range(USERS):
        user = f"user-{u}"
        memories = [
            {"user": user, "content": f"{user} drinks {drink} every morning."}
            for drink in ("green tea", "espresso", "oat latte", "matcha")
        ]
        response = client.post("/v1/memories", json={"memories": memories})
        assert response.status_code == 201, response.text


async def one_stream(client: httpx.AsyncClient, url: str, i: int) -> tuple[str, str | None, bytes]:
    """One stream: its model, ``X-Memory-Status`` and the body as received."""
    model, user = f"fidelity-{i}", f"user-{i % USERS}"
    question = f"What does {user} like to drink in the morning?"
    body = {"model": model, "stream": True, "messages": [{"role": "user", "content": question}]}
    headers = {
        "X-Fake-Chunks": str(CHUNKS),
        "X-Fake-Interval-Ms": str(INTERVAL_MS),
        "X-Memory-User": user,
    }
    async with client.stream("POST", url, content=orjson.dumps(body), headers=headers) as reply:
        assert reply.status_code == 200
        received = b"".join([part async for part in reply.aiter_bytes()])
        return model, reply.headers.get("x-memory-status"), received


async def test_concurrent_streams_arrive_exact_with_memory_on(
    fake: FakeServer, tmp_path: Path
) -> None:
    app = create_app(memory_settings(fake.url, tmp_path))
    with MemoryProxy(app) as proxy:
        root = f"http://{proxy.host}:{proxy.port}"
        with httpx.Client(base_url=root, headers={"Authorization": KEY}, timeout=60) as client:
            seed(client)
        limits = httpx.Limits(max_connections=STREAMS)
        async with httpx.AsyncClient(headers={"Authorization": KEY}, limits=limits) as client:
            url = f"{proxy.url}/chat/completions"
            results = await asyncio.gather(*(one_stream(client, url, i) for i in range(STREAMS)))
            alive = await client.get(f"{root}/healthz")
    wrong = [
        model
        for model, _, received in results
        if received != b"".join(stream_events(model, 1, CHUNKS, tools=False, usage=False))
    ]
    assert wrong == []
    assert all(received.endswith(b"data: [DONE]\n\n") for _, _, received in results)
    # Memory was really on: each request retrieved and injected the user's memories.
    assert [status for _, status, _ in results] == ["injected"] * STREAMS
    streamed = [r for r in fake.fake.requests if r.json().get("stream")]
    assert len(streamed) == STREAMS
    assert all(r.finished for r in streamed)
    latest = streamed[0].json()["messages"][-1]  # position turn: the block in the user's turn
    assert latest["role"] == "user"
    assert "drinks" in latest["content"]
    assert alive.status_code == 200
