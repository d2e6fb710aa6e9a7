"""Cache benchmark: what the cache costs per call, and what a dead or frozen Redis costs.

Measures, against a ``redis-server`` this script starts on a free port (no persistence):

1. per-call latency (p50/p99) of ``LocalCache`` and ``RedisCache`` get / set / get_many(50),
   and the raw ``redis.asyncio`` call without our deadline + breaker wrapper (its overhead);
2. the pipeline's calls through ``RequestCache``: a search-result hit of 50 candidates (the
   generation read, then the near cache, or a get + decode without it), storing one, an
   embedding hit, and token counts of a 50-message conversation whose history is cached;
3. latency under 50 concurrent callers, and how many calls a given per-call deadline would turn
   into misses (chooses the default deadline, ADR 0032);
4. failure costs with the default settings: a frozen Redis (SIGSTOP) and a killed one, the calls
   and time until the breaker opens and their latency, the cost per call while it is open, and
   how long after the resume the cache serves again (bounded by the cool-down).

Run: ``.venv/bin/python bench/cache.py`` (about a minute), ``--smoke`` for CI (seconds).
The machine is shared with other work: treat p99 as noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from bench.lib.report import save_results
from bench.lib.servers import start_redis
from bench.lib.stats import format_table, summarize_ms
from proxy.cache import Cache, LocalCache, RedisCache, RequestCache, RetrievalKey
from proxy.cache.redis_cache import connect
from proxy.context.records import Candidate, MemoryRecord
from proxy.tokenizer import count_tokens

TENANT = "bench-tenant"
CONCURRENCY = 50
DEADLINES_MS = (2.0, 5.0, 10.0, 20.0)
CANDIDATES = 50  # the default top_k
MESSAGES = 50


async def timed(fn: Callable[[], Awaitable[Any]], n: int) -> dict[str, float]:
    """Call ``fn`` ``n`` times in sequence and summarise the latencies in ms."""
    for _ in range(min(n, 50)):
        await fn()
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - started)
    return summarize_ms(samples)


def candidates() -> list[Candidate]:
    """Realistic search hits (contents of a few hundred characters)."""
    now = datetime.now(UTC)
    return [
        Candidate(
            MemoryRecord(
                id=f"mem-{i}",
                tenant=TENANT,
                user="alice",
                source="learnings",
                content=f"The user prefers concise answers with examples, item {i}. " * 4,
                created_at=now,
                tokens={"o200k_base": 48, "cl100k_base": 50},
                metadata={"session": "s1", "tags": ["style"]},
            ),
            similarity=0.9 - i * 0.05,
        )
        for i in range(CANDIDATES)
    ]


async def per_call(url: str, n: int) -> list[dict[str, Any]]:
    """Section 1: primitive calls on both backends."""
    rows: list[dict[str, Any]] = []
    value = b"x" * 1024
    keys50 = [f"mp:v1:{TENANT}:k{i}" for i in range(50)]
    raw = connect(url)
    backends: list[tuple[str, Cache]] = [
        ("local", LocalCache(100_000)),
        ("redis", RedisCache(connect(url), timeout_ms=1000)),
    ]
    for name, cache in backends:
        await cache.set_many(dict.fromkeys(keys50, value), 600)
        calls: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("get 1KiB", partial(cache.get, keys50[0])),
            ("set 1KiB", partial(cache.set, keys50[1], value, 600)),
            ("get_many 50", partial(cache.get_many, keys50)),
            ("incr", partial(cache.incr, "mp:v1:n")),
        ]
        for call, fn in calls:
            rows.append({"backend": name, "call": call, **await timed(fn, n)})
    rows.append(
        {"backend": "redis raw", "call": "get 1KiB", **await timed(lambda: raw.get(keys50[0]), n)}
    )
    for _, cache in backends:
        await cache.close()
    await raw.aclose()
    return rows


async def request_paths(url: str, n: int) -> list[dict[str, Any]]:
    """Section 2: the pipeline's one-line calls, hits only, with and without the near cache."""
    rows: list[dict[str, Any]] = []
    texts = [f"message {i}: " + "some conversation text " * 20 for i in range(MESSAGES)]
    vector = np.random.default_rng(0).standard_normal(256).astype(np.float32)
    hits = candidates()
    query = "what do I like?"
    # "no near" turns both near caches off (search results and token counts).
    variants: list[tuple[str, Cache, int]] = [
        ("local", LocalCache(100_000), 256),
        ("local, no near", LocalCache(100_000), 0),
        ("redis", RedisCache(connect(url), timeout_ms=1000), 256),
        ("redis, no near", RedisCache(connect(url), timeout_ms=1000), 0),
    ]
    for name, cache, near in variants:
        rc = RequestCache(cache, near_entries=near, near_token_entries=near * 100)
        key = await rc.retrieval_key(TENANT, "alice", query, top_k=CANDIDATES, sources=None)
        await rc.set_retrieval(key, hits)
        await rc.set_embedding(TENANT, "static", 256, query, vector)
        await rc.count_tokens(TENANT, "o200k_base", texts)

        async def retrieval_hit(rc: RequestCache = rc) -> None:
            k = await rc.retrieval_key(TENANT, "alice", query, top_k=CANDIDATES, sources=None)
            found = await rc.get_retrieval(k)
            assert found is not None
            assert len(found) == CANDIDATES

        async def embedding_hit(rc: RequestCache = rc) -> None:
            assert await rc.get_embedding(TENANT, "static", 256, query) is not None

        async def counts_hit(rc: RequestCache = rc) -> None:
            await rc.count_tokens(TENANT, "o200k_base", texts)

        async def store_result(rc: RequestCache = rc, key: RetrievalKey | None = key) -> None:
            await rc.set_retrieval(key, hits)

        calls = [
            (f"retrieval hit ({CANDIDATES} hits)", retrieval_hit),
            (f"set_retrieval ({CANDIDATES} hits)", store_result),
        ]
        calls.append((f"token counts {MESSAGES} msgs", counts_hit))
        if not near:
            calls.append(("embedding hit (256 d)", embedding_hit))
        for call, fn in calls:
            rows.append({"backend": name, "call": call, **await timed(fn, n)})
        await rc.close()
    return rows


async def concurrent(url: str, n: int) -> dict[str, Any]:
    """Section 3: 50 callers at once; share of calls over each candidate deadline."""
    cache = RedisCache(connect(url), timeout_ms=1000)
    await cache.set("mp:v1:c", b"x" * 1024, 600)
    samples: list[float] = []

    async def worker(calls: int, record: bool) -> None:
        for _ in range(calls):
            started = time.perf_counter()
            await cache.get("mp:v1:c")
            if record:
                samples.append(time.perf_counter() - started)

    # Warm-up: open the pool's connections first, so connects are not counted as call latency.
    await asyncio.gather(*(worker(5, False) for _ in range(CONCURRENCY)))
    await asyncio.gather(*(worker(n // CONCURRENCY, True) for _ in range(CONCURRENCY)))
    await cache.close()
    over = {
        f"over {d:g} ms": sum(s * 1000 > d for s in samples) / len(samples) for d in DEADLINES_MS
    }
    return {"concurrency": CONCURRENCY, **summarize_ms(samples), **over}


async def until_open(cache: RedisCache, limit_s: float = 10.0) -> dict[str, Any]:
    """Call ``get`` until the breaker opens; return calls, time taken and per-call latency."""
    samples: list[float] = []
    started = time.perf_counter()
    while cache.breaker.state != "open" and time.perf_counter() - started < limit_s:
        t0 = time.perf_counter()
        assert await cache.get("k") is None
        samples.append(time.perf_counter() - t0)
    return {
        "calls to open": len(samples),
        "ms to open": (time.perf_counter() - started) * 1000,
        **summarize_ms(samples),
    }


async def until_served(cache: RedisCache, limit_s: float = 30.0) -> float:
    """Poll ``get`` every 10 ms until Redis serves again; return the seconds it took."""
    started = time.perf_counter()
    while await cache.get("k") != b"v" and time.perf_counter() - started < limit_s:
        await cache.set("k", b"v", 600)
        await asyncio.sleep(0.01)
    return time.perf_counter() - started


async def failures(url: str, process: subprocess.Popen[bytes], n: int) -> list[dict[str, Any]]:
    """Section 4: frozen and killed Redis with the default deadline and breaker."""
    rows: list[dict[str, Any]] = []
    cache = RedisCache(connect(url))  # defaults: 10 ms deadline, 5 failures over 0.5 s, 5 s
    await cache.set("k", b"v", 600)
    os.kill(process.pid, signal.SIGSTOP)
    try:
        rows.append({"case": "frozen (SIGSTOP), closed", **await until_open(cache)})
        rows.append({"case": "breaker open", **await timed(lambda: cache.get("k"), n)})
    finally:
        os.kill(process.pid, signal.SIGCONT)
    rows.append(
        {"case": "resumed: served again after (ms)", "p50": 1000 * await until_served(cache)}
    )

    process.kill()
    process.wait()
    rows.append({"case": "killed, closed", **await until_open(RedisCache(connect(url)))})
    await cache.close()
    return rows


def tiktoken_baseline(n: int) -> dict[str, Any]:
    """What counting the same 50 messages costs without any cache."""
    texts = [f"message {i}: " + "some conversation text " * 20 for i in range(MESSAGES)]
    count_tokens(texts[0], "o200k_base")
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        for text in texts:
            count_tokens(text, "o200k_base")
        samples.append(time.perf_counter() - started)
    return {
        "backend": "none (tiktoken)",
        "call": f"token counts {MESSAGES} msgs",
        **summarize_ms(samples),
    }


async def main(smoke: bool) -> None:
    """Run every section and print tables; save the figures under bench/results/."""
    n = 200 if smoke else 5000
    with tempfile.TemporaryDirectory() as directory:
        process, url = start_redis(Path(directory))
        try:
            calls = await per_call(url, n)
            paths = [*await request_paths(url, n), tiktoken_baseline(min(n, 1000))]
            load = await concurrent(url, 2000 if smoke else 50_000)
            broken = await failures(url, process, n)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    columns = ["backend", "call", "p50", "p90", "p99", "max"]
    print("per call (ms)\n" + format_table(calls, columns))
    print("\nrequest-path helpers, hits (ms)\n" + format_table(paths, columns))
    print(f"\n{CONCURRENCY} concurrent callers, redis get (ms)\n" + format_table([load]))
    columns = ["case", "calls to open", "ms to open", "p50", "p99", "max"]
    print("\nfailures, default settings (ms per call)\n" + format_table(broken, columns))
    if not smoke:
        path = save_results(
            "cache",
            {"per_call": calls, "request_paths": paths, "concurrent": load, "failures": broken},
        )
        print(f"\nsaved {path}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="a few hundred calls, for CI")
    asyncio.run(main(parser.parse_args().smoke))
