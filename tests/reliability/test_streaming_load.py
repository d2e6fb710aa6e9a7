"""Streaming fidelity under concurrent load, memory on, over real sockets.

A scaled-down run of ``bench/streams.py`` (which does 256 streams x 64 chunks x 20 ms and
reports the added inter-chunk p99): here 48 streams x 16 chunks x 10 ms, so the suite stays
fast on a shared 2-core machine. Every stream must arrive byte for byte as the fake sent it
(each stream has its own model name, echoed in every event: a chunk on the wrong stream shows),
``[DONE]`` last, and every request must really have gone through retrieval and injection.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from bench.streams import run_streams, seed, summary
from proxy.app import create_app
from tests.fakes.upstream import FakeServer
from tests.reliability.support import MemoryProxy, memory_settings

STREAMS, CHUNKS, INTERVAL_MS = 48, 16, 10.0


async def test_concurrent_streams_arrive_exact_with_memory_on(
    fake: FakeServer, tmp_path: Path
) -> None:
    app = create_app(memory_settings(fake.url, tmp_path))
    with MemoryProxy(app) as proxy:
        root = f"http://{proxy.host}:{proxy.port}"
        seed(root)
        results = await run_streams(f"{proxy.url}/chat/completions", STREAMS, CHUNKS, INTERVAL_MS)
        async with httpx.AsyncClient() as client:
            alive = await client.get(f"{root}/healthz")
    report = summary(results, CHUNKS)
    assert report["problems"] == []
    assert report["exact"] == STREAMS
    assert report["done"] == STREAMS
    # Memory was really on: each request retrieved and injected the user's memories.
    assert report["memory_status"] == {"injected": STREAMS}
    streamed = [r for r in fake.fake.requests if r.json().get("stream")]
    assert len(streamed) == STREAMS
    assert all(r.finished for r in streamed)
    system = streamed[0].json()["messages"][0]
    assert system["role"] == "system"
    assert "drinks" in system["content"]
    assert alive.status_code == 200
