"""What does the memory path cost? memproxy with ``X-Memory-Mode: off`` vs memory on.

Part 1, end to end, in one interleaved run against one ``python -m proxy serve`` process (the
embedded store holding ``--memories`` memories of the bench tenant, the local static embedder,
the in-process cache, default deadlines) in front of the bench's lean fake upstream: every
request asks a different question (no cache hits), half of the cells with ``X-Memory-Mode: off``.
Reports the latency the memory path adds (p50, p99) at concurrency 1 and the memory-on share of
memory-off throughput at concurrency 50.

Part 2, in process: ``Pipeline.prepare`` alone at 1k, 10k and 100k memories (``--sizes``),
latency per stage read from its ``Server-Timing`` header (budget, query, cache, embed, search,
assemble, inject) and the share of requests that stayed within the deadline (not degraded).

Targets (issue 5, 2-core machine): added p50 <= 3 ms and p99 <= 10 ms at concurrency 1.

    .venv/bin/python bench/pipeline.py            # a few minutes (100k seeding included)
    .venv/bin/python bench/pipeline.py --smoke    # seconds, for CI
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib import loadgen, stats
from bench.lib.memories import synthetic_memories
from bench.lib.servers import fake_upstream, memproxy
from proxy.cache.local import LocalCache
from proxy.cache.request_cache import RequestCache
from proxy.context.budget import TokenBudgetCalculator
from proxy.context.limits import ModelLimits
from proxy.memory.edge import EdgeStore
from proxy.memory.embedders import StaticEmbedder
from proxy.memory.inputs import MemoryInput
from proxy.memory.service import MemoryService
from proxy.metrics import Metrics
from proxy.pipeline.pipeline import Pipeline
from proxy.settings import load_settings
from proxy.tenancy import TenantResolver

TARGET_ADDED_P50_MS = 3.0
TARGET_ADDED_P99_MS = 10.0
API_KEY = "sk-bench-pipeline"
SEED_BATCH = 1_000
STAGES = ("budget", "query", "cache", "embed", "search", "assemble", "inject", "memory")


def bench_tenant() -> str:
    """The tenant memproxy derives from ``API_KEY`` (passthrough mode)."""
    return TenantResolver(load_settings(env={})).for_key(API_KEY).id


def to_inputs(items: list[dict[str, Any]]) -> list[MemoryInput]:
    """Synthetic memory dicts as validated write inputs."""
    return [
        MemoryInput(
            content=item["content"],
            user=item["user"],
            source=item["source"],
            confidence=item["confidence"],
            created_at=datetime.fromisoformat(item["created_at"]),
            metadata=item["metadata"],
        )
        for item in items
    ]


async def seed_store(store: EdgeStore, embedder: StaticEmbedder, tenant: str, count: int) -> float:
    """Write ``count`` synthetic memories (tenant-shared) through the service; build the index."""
    started = time.perf_counter()
    service = MemoryService(store, embedder, None, max_batch=SEED_BATCH)
    inputs = to_inputs(synthetic_memories(count, user=""))
    for start in range(0, count, SEED_BATCH):
        await service.write(tenant, inputs[start : start + SEED_BATCH])
    await store.optimize()
    return time.perf_counter() - started


# -- part 1: end to end ----------------------------------------------------------------------


def end_to_end(args: argparse.Namespace, embedder: StaticEmbedder) -> list[dict[str, Any]]:
    """Memory off vs on through a real memproxy process; one row per concurrency."""
    seconds, rounds = (0.5, 1) if args.smoke else (args.seconds, args.rounds)
    count = 300 if args.smoke else args.memories
    with tempfile.TemporaryDirectory(prefix="memproxy-pipeline-") as data_dir:

        async def seed() -> float:
            store = await EdgeStore.open(data_dir, dimensions=embedder.dimensions)
            try:
                return await seed_store(store, embedder, bench_tenant(), count)
            finally:
                await store.close()

        took = asyncio.run(seed())
        print(f"seeded {count} memories in {took:.1f} s", file=sys.stderr)
        extra = {"MEMPROXY_ACCESS_LOG": "false"}
        with (
            fake_upstream() as fake,
            memproxy(fake.base_url + "/v1", Path(data_dir), extra_env=extra) as proxy,
        ):
            auth = {"Authorization": f"Bearer {API_KEY}"}
            targets = [
                loadgen.Target("memory-off", proxy.base_url, {**auth, "X-Memory-Mode": "off"}),
                loadgen.Target("memory-on", proxy.base_url, auth),
            ]
            results = loadgen.run_interleaved(
                targets,
                concurrencies=(1, 50),
                seconds=seconds,
                rounds=rounds,
                unique_queries=True,
            )
    rows = []
    for concurrency in (1, 50):
        off = results[("memory-off", concurrency, False)].summary()
        on = results[("memory-on", concurrency, False)].summary()
        rows.append(
            {
                "memories": count,
                "c": concurrency,
                "off_p50_ms": off["p50_ms"],
                "on_p50_ms": on["p50_ms"],
                "added_p50_ms": on["p50_ms"] - off["p50_ms"],
                "added_p99_ms": on["p99_ms"] - off["p99_ms"],
                "off_rps": off["rps"],
                "on_rps": on["rps"],
                "rps_ratio": stats.ratio(on["rps"], off["rps"]),
                "errors": off["errors"] + on["errors"],
            }
        )
    return rows


# -- part 2: stages in process ---------------------------------------------------------------


def parse_timing(value: str) -> dict[str, float]:
    """``Server-Timing`` as {stage: ms}."""
    out = {}
    for part in value.split(","):
        name, _, dur = part.strip().partition(";dur=")
        out[name] = float(dur)
    return out


async def stage_latency(
    embedder: StaticEmbedder, size: int, requests: int, top_ks: list[int], data_dir: Path
) -> list[dict[str, Any]]:
    """Seed ``size`` memories once, then time ``requests`` unique questions per top-k value."""
    tenant = bench_tenant()
    store = await EdgeStore.open(data_dir / f"n{size}", dimensions=embedder.dimensions)
    rows = []
    try:
        seeded = await seed_store(store, embedder, tenant, size)
        settings = load_settings(env={})
        tenant_obj = TenantResolver(settings).for_key(API_KEY)
        for top_k in top_ks:
            pipeline = Pipeline(
                settings.memory,
                calculator=TokenBudgetCalculator(ModelLimits(), memory_cap=None),
                store=store,
                embedder=embedder,
                cache=RequestCache(LocalCache(10_000)),
                metrics=Metrics(),
                spawn=lambda coro: coro.close(),  # after-response work is not measured here
            )
            build = loadgen.unique_chat_bodies(False, model="gpt-4o-mini", base=size + top_k)
            headers = {"x-memory-top-k": str(top_k)}
            timings: dict[str, list[float]] = {stage: [] for stage in STAGES}
            statuses: Counter[str] = Counter()
            for n in range(requests + 20):
                body = json.loads(build(n))
                prepared = await pipeline.prepare(tenant_obj, headers, body)
                if n < 20:  # warm-up
                    continue
                statuses[prepared.response_headers["X-Memory-Status"]] += 1
                timing = prepared.response_headers["Server-Timing"]
                for stage, ms in parse_timing(timing).items():
                    timings.setdefault(stage, []).append(ms / 1000.0)
            row: dict[str, Any] = {"memories": size, "top_k": top_k, "seed_s": seeded}
            for stage in STAGES:
                if timings.get(stage):
                    summary = stats.summarize_ms(timings[stage])
                    row[f"{stage}_p50"] = summary["p50"]
                    row[f"{stage}_p99"] = summary["p99"]
            row["injected"] = stats.ratio(statuses["injected"], requests)
            row["degraded"] = stats.ratio(statuses["degraded"], requests)
            rows.append(row)
    finally:
        await store.close()
    return rows


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """The target checks at concurrency 1, and the throughput ratio at 50."""
    lines = []
    for row in rows:
        if row["c"] == 1:
            for q, target in (("p50", TARGET_ADDED_P50_MS), ("p99", TARGET_ADDED_P99_MS)):
                added = row[f"added_{q}_ms"]
                lines.append(
                    f"{'PASS' if added <= target else 'MISS'} added {q} at c=1: {added:.2f} ms "
                    f"(target <= {target} ms)"
                )
        else:
            lines.append(
                f"INFO throughput at c={row['c']}: memory on = {row['rps_ratio']:.0%} of memory off"
            )
    return lines


def main() -> None:
    """Run both parts and print the tables and verdicts."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="seconds, for CI")
    parser.add_argument("--seconds", type=float, default=4.0, help="per cell and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memories", type=int, default=10_000, help="end-to-end store size")
    parser.add_argument("--sizes", default="1000,10000,100000", help="part 2 store sizes")
    parser.add_argument("--requests", type=int, default=300, help="part 2 requests per size")
    parser.add_argument("--top-k", default="50,100", help="part 2 X-Memory-Top-K values")
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    embedder = StaticEmbedder()
    e2e_rows = [] if args.skip_e2e else end_to_end(args, embedder)
    sizes = [200] if args.smoke else [int(s) for s in args.sizes.split(",") if s]
    top_ks = [50] if args.smoke else [int(k) for k in args.top_k.split(",") if k]
    requests = 20 if args.smoke else args.requests
    stage_rows = []
    with tempfile.TemporaryDirectory(prefix="memproxy-stages-") as data_dir:
        for size in sizes:
            stage_rows += asyncio.run(
                stage_latency(embedder, size, requests, top_ks, Path(data_dir))
            )
            print(f"  stages at {size} memories done", file=sys.stderr)
    if e2e_rows:
        print(stats.format_table(e2e_rows))
        for line in verdicts(e2e_rows):
            print(line)
    columns = (
        ["memories", "top_k"]
        + [
            f"{stage}_{q}"
            for stage in STAGES
            for q in ("p50", "p99")
            if f"{stage}_{q}" in stage_rows[0]
        ]
        + ["injected", "degraded"]
    )
    print(stats.format_table(stage_rows, columns))
    if args.json:
        print(json.dumps({"end_to_end": e2e_rows, "stages": stage_rows}, indent=2))
    if any(row["errors"] for row in e2e_rows):
        raise SystemExit("requests failed during the benchmark")


if __name__ == "__main__":
    main()
