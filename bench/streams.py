"""Streaming fidelity under load: N concurrent streams of M chunks at an interval, memory on.

Every stream must arrive byte for byte as the upstream sent it: no chunk lost, merged, split
into a different event or reordered, ``[DONE]`` last. Each stream asks for its own model name,
which the fake echoes in every event, so a chunk relayed to the wrong client would also show.
The same load is sent straight to the fake upstream and through memproxy (memory on, every user
has memories, so each request runs retrieval and injection); the figure reported is the
*added* inter-chunk gap p99: p99 of gaps through memproxy minus p99 of gaps direct.

    .venv/bin/python bench/streams.py                 # 256 streams x 64 chunks x 20 ms
    .venv/bin/python bench/streams.py --smoke         # seconds, for CI
    .venv/bin/python bench/streams.py --memory off    # the proxy without the memory pipeline

The fake upstream (``bench/lib/fake_upstream.py``, gzip when the client accepts it, as OpenAI)
and memproxy (``python -m proxy serve``) run as separate processes; the machine is shared, so
figures carry that noise.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.fake_upstream import stream_events

STREAMS, CHUNKS, INTERVAL_MS = 256, 64, 20.0
SMOKE = (16, 8, 10.0)
USERS = 16
MEMORIES_PER_USER = 20
EVENT_END = b"\n\n"


@dataclass
class StreamResult:
    """One stream as the client saw it."""

    model: str
    status: int
    memory_status: str | None
    body: bytes = b""
    arrivals: list[float] = field(default_factory=list)  # when each event was complete
    error: str | None = None

    def problems(self, chunks: int) -> list[str]:
        """What is wrong with this stream (empty when it is exact)."""
        if self.error:
            return [f"{self.model}: {self.error}"]
        if self.status != 200:
            return [f"{self.model}: status {self.status}"]
        expected = b"".join(stream_events(self.model, chunks))
        if self.body == expected:
            return []
        got = self.body.split(EVENT_END)
        want = expected.split(EVENT_END)
        for i, (a, b) in enumerate(zip(got, want, strict=False)):
            if a != b:
                return [f"{self.model}: event {i} differs: {a[:80]!r} != {b[:80]!r}"]
        return [f"{self.model}: {len(got) - 1} events, expected {len(want) - 1}"]


def chat_body(model: str, user: str) -> bytes:
    """A streaming chat request whose question matches the seeded memories."""
    question = f"What does {user} like to drink in the morning and where do they travel?"
    return orjson.dumps(
        {
            "model": model,
            "stream": True,
            "user": user,
            "messages": [{"role": "user", "content": question}],
        }
    )


async def one_stream(
    session: aiohttp.ClientSession, url: str, i: int, chunks: int, interval_ms: float
) -> StreamResult:
    """Run one stream, noting when each SSE event became complete."""
    model = f"fidelity-{i}"
    user = f"user-{i % USERS}"
    headers = {
        "Content-Type": "application/json",
        "Authorization": "Bearer sk-bench-streams",
        "X-Fake-Chunks": str(chunks),
        "X-Fake-Interval-Ms": str(interval_ms),
        "X-Memory-User": user,
    }
    try:
        async with session.post(url, data=chat_body(model, user), headers=headers) as response:
            result = StreamResult(model, response.status, response.headers.get("x-memory-status"))
            parts: list[bytes] = []
            pending = b""
            async for data in response.content.iter_any():
                now = time.perf_counter()
                parts.append(data)
                pending += data
                while EVENT_END in pending:
                    _, pending = pending.split(EVENT_END, 1)
                    result.arrivals.append(now)
            result.body = b"".join(parts)
            return result
    except (aiohttp.ClientError, TimeoutError) as exc:
        return StreamResult(model, 0, None, error=f"{type(exc).__name__}: {exc}")


async def run_streams(
    url: str, streams: int, chunks: int, interval_ms: float
) -> list[StreamResult]:
    """Start ``streams`` streams at once against ``url`` (a chat completions URL)."""
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        return await asyncio.gather(
            *(one_stream(session, url, i, chunks, interval_ms) for i in range(streams))
        )


def gaps_ms(results: Sequence[StreamResult]) -> list[float]:
    """Inter-event gaps after the first content event (the interval the upstream paces)."""
    out: list[float] = []
    for result in results:
        times = result.arrivals[1:]  # the first event carries the pipeline's time, not a gap
        out.extend((b - a) * 1000 for a, b in itertools.pairwise(times))
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(results: Sequence[StreamResult], chunks: int) -> dict[str, Any]:
    """Fidelity and gap figures of one run."""
    gaps = gaps_ms(results)
    problems = [p for r in results for p in r.problems(chunks)]
    statuses: dict[str, int] = {}
    for r in results:
        key = r.memory_status or "none"
        statuses[key] = statuses.get(key, 0) + 1
    return {
        "streams": len(results),
        "exact": sum(not r.problems(chunks) for r in results),
        "done": sum(r.body.endswith(b"data: [DONE]\n\n") for r in results),
        "problems": problems[:10],
        "memory_status": statuses,
        "gap_p50_ms": round(percentile(gaps, 0.5), 2),
        "gap_p99_ms": round(percentile(gaps, 0.99), 2),
        "gap_max_ms": round(max(gaps, default=0.0), 2),
    }


def seed(base_url: str) -> None:
    """Give every user memories the question will retrieve."""
    import httpx

    with httpx.Client(base_url=base_url, timeout=60) as client:
        for u in range(USERS):
            user = f"user-{u}"
            memories = [
                {
                    "user": user,
                    "content": f"{user} drinks {drink} every morning and travelled to {place}.",
                }
                for drink, place in zip(
                    ["green tea", "espresso", "oat latte", "matcha"] * 5,
                    ["Lisbon", "Kyoto", "Oslo", "Quito", "Hanoi"] * 4,
                    strict=False,
                )
            ][:MEMORIES_PER_USER]
            response = client.post(
                "/v1/memories",
                json={"memories": memories},
                headers={"Authorization": "Bearer sk-bench-streams"},
            )
            if response.status_code != 201:
                raise RuntimeError(f"seeding failed: {response.status_code} {response.text[:200]}")


def with_deadline(env: dict[str, str], config: Any, deadline_ms: float | None) -> dict[str, str]:
    """Point memproxy at a config file relaxing the memory deadlines (None: unchanged)."""
    if deadline_ms is None:
        return env
    config.write(
        f"memory:\n  deadline_ms: {deadline_ms}\n  stage_timeouts:\n"
        f"    embed_ms: {deadline_ms}\n    search_ms: {deadline_ms}\n"
    )
    config.flush()
    return {**env, "MEMPROXY_CONFIG": config.name}


def main(argv: Sequence[str] | None = None) -> int:
    """Run direct and through memproxy; print JSON; exit 1 on any fidelity problem."""
    from bench.lib.servers import fake_upstream, memproxy

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=STREAMS)
    parser.add_argument("--chunks", type=int, default=CHUNKS)
    parser.add_argument("--interval-ms", type=float, default=INTERVAL_MS)
    parser.add_argument("--memory", choices=("on", "off"), default="on")
    parser.add_argument("--smoke", action="store_true", help="16 x 8 x 10 ms, for CI")
    parser.add_argument(
        "--deadline-ms",
        type=float,
        help="memory pipeline deadline and stage timeouts (default: the product's 50 ms); "
        "a burst of N simultaneous starts exceeds 50 ms and those streams go 'degraded'",
    )
    args = parser.parse_args(argv)
    streams, chunks, interval = (
        SMOKE if args.smoke else (args.streams, args.chunks, args.interval_ms)
    )
    fake = fake_upstream(compress=True, name="fake-streams")
    env = {
        "MEMPROXY_MEMORY_ENABLED": "true" if args.memory == "on" else "false",
        "MEMPROXY_ACCESS_LOG": "false",
    }
    report: dict[str, Any] = {"streams": streams, "chunks": chunks, "interval_ms": interval}
    with (
        tempfile.TemporaryDirectory() as data,
        tempfile.NamedTemporaryFile("w", suffix=".yaml") as config,
        fake,
        memproxy(
            f"{fake.base_url}/v1",
            Path(data),
            extra_env=with_deadline(env, config, args.deadline_ms),
        ) as proxy,
    ):
        if args.memory == "on":
            seed(proxy.base_url)
        report["deadline_ms"] = args.deadline_ms or "default"
        # Warm both paths (connections, model load, caches) before measuring.
        asyncio.run(run_streams(f"{proxy.base_url}/v1/chat/completions", 4, 2, 1))
        direct = asyncio.run(
            run_streams(f"{fake.base_url}/v1/chat/completions", streams, chunks, interval)
        )
        proxied = asyncio.run(
            run_streams(f"{proxy.base_url}/v1/chat/completions", streams, chunks, interval)
        )
    report["direct"] = summary(direct, chunks)
    report["memproxy"] = summary(proxied, chunks)
    report["added_gap_p99_ms"] = round(
        report["memproxy"]["gap_p99_ms"] - report["direct"]["gap_p99_ms"], 2
    )
    print(json.dumps(report, indent=2))
    ok = report["memproxy"]["exact"] == streams and report["direct"]["exact"] == streams
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
