"""Search at 10k real-text memories: main's shard layout against this one, in one process.

Both stores hold the same seeded real-text memories (``bench/lib/realtext.py``, tenant-shared).
They differ in the two things issue 14's search work changed (docs/benchmarks.md, "Search at
10k real-text memories"):

- ``main``: the shard as main left it, never indexed (9,476 distinct memories of 256
  dimensions are under Qdrant's 10 MB indexing threshold), and the liveness condition on every
  search;
- ``branch``: indexed by ``optimize()`` (``edge_shard.INDEXING_THRESHOLD_KB``), liveness only
  for tenants that can hold a dead memory (adr/0116).

Each new question goes through ``Pipeline.prepare`` on both, alternating which goes first: the
``Server-Timing`` search stage is compared (p50, p90, ratio), and so is the store's
``search_sync`` alone (no thread hop: on a loaded machine the hop's wake-ups can hide the
search's own cost), in wall time and in the process's CPU time (what a loaded machine does not
inflate: the process runs nothing else meanwhile). The direct call comes second for its question,
so its records are cached. Quality: the share of ``main``'s top 50 (an exact scan) that ``branch``
returns too.

    .venv/bin/python bench/search_layout.py            # 10k memories, 300 questions
    .venv/bin/python bench/search_layout.py --smoke
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import pipeline as bp
from bench.lib import loadgen, stats
from proxy.apis.openai_chat import OPENAI_CHAT
from proxy.memory.edge import EdgeStore
from proxy.memory.embedders import StaticEmbedder
from proxy.memory.service import MemoryService
from proxy.memory.store import SearchQuery
from proxy.settings import load_settings
from proxy.tenancy import TenantResolver

WARM_UP = 20


async def seed_unindexed(path: Path, embedder: StaticEmbedder, count: int, text: str) -> None:
    """``bp.seed_store`` without its index build: the layout main leaves at 10k real text."""
    store = await EdgeStore.open(path, dimensions=embedder.dimensions, optimize_after=None)
    try:
        service = MemoryService(store, embedder, None)
        inputs = bp.to_inputs(bp.memory_items(text, count))
        for start in range(0, count, bp.SEED_BATCH):
            await service.write(bp.bench_tenant(), inputs[start : start + bp.SEED_BATCH])
    finally:
        await store.close()


async def compare(root: Path, count: int, requests: int, text: str) -> dict[str, float]:
    embedder = StaticEmbedder()
    await seed_unindexed(root / "main", embedder, count, text)
    shutil.copytree(root / "main", root / "branch")
    main = await EdgeStore.open(root / "main", dimensions=embedder.dimensions, optimize_after=None)
    main._lifecycle.may_hold = lambda tenant, look_up: True  # type: ignore[method-assign]
    branch = await EdgeStore.open(root / "branch", dimensions=embedder.dimensions)
    try:
        await branch.optimize()
        for name, store in (("main", main), ("branch", branch)):
            info = store._shard.info()  # the layouts compared: segments and indexed vectors
            print(
                f"{name}: {info.segments_count} segments, {info.indexed_vectors_count} indexed "
                f"vectors, {info.points_count} points",
                file=sys.stderr,
            )
        tenant = TenantResolver(load_settings(env={})).for_key(bp.API_KEY)
        stores = {"main": main, "branch": branch}
        pipelines = {name: bp.bench_pipeline(store, embedder, 50) for name, store in stores.items()}
        bodies = bp.question_bodies(text)(False)
        search: dict[str, list[float]] = {"main": [], "branch": []}
        direct: dict[str, list[float]] = {"main": [], "branch": []}
        cpu_ms: dict[str, list[float]] = {"main": [], "branch": []}
        overlap = []
        for n in range(requests + WARM_UP):
            body = json.loads(bodies(n))
            question = body["messages"][-1]["content"]
            vector = embedder.embed_sync([question])[0]
            query = SearchQuery(vector, question, "", None, 50, live_at=datetime.now(UTC))
            found: dict[str, set[str]] = {}
            for name in loadgen.rotated(["main", "branch"], n):
                prepared = await pipelines[name].prepare(
                    tenant, {"x-memory-top-k": "50"}, body, OPENAI_CHAT
                )
                started, cpu = time.perf_counter(), time.process_time()
                hits = stores[name].search_sync(tenant.id, query, vector)
                took = (time.perf_counter() - started) * 1000
                spent = (time.process_time() - cpu) * 1000
                found[name] = {c.record.id for c in hits}
                if n >= WARM_UP:
                    timing = loadgen.parse_server_timing(prepared.response_headers["Server-Timing"])
                    search[name].append(timing["search"])
                    direct[name].append(took)
                    cpu_ms[name].append(spent)
            overlap.append(len(found["main"] & found["branch"]) / max(1, len(found["main"])))
    finally:
        await main.close()
        await branch.close()
    row: dict[str, float] = {}
    for label, figures in (("stage", search), ("store", direct), ("cpu", cpu_ms)):
        for name, values in figures.items():
            for q in (50, 90):
                row[f"{label}_{name}_{q}"] = stats.percentile(values, q)
        row[f"{label}_ratio"] = row[f"{label}_branch_50"] / row[f"{label}_main_50"]
    row["top50_overlap"] = sum(overlap) / len(overlap)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--smoke", action="store_true", help="seconds, for CI")
    args = parser.parse_args()
    text = "real" if bp.realtext.available() else "synthetic"
    count, requests = (300, 10) if args.smoke else (args.memories, args.requests)
    with tempfile.TemporaryDirectory(prefix="mp-search-layout-") as root:
        row = asyncio.run(compare(Path(root), count, requests, text))
    print(f"{count} {text} memories, {requests} questions, p50 / p90 ms:")
    labels = (
        ("stage", "Server-Timing search"),
        ("store", "search_sync alone"),
        ("cpu", "its CPU time"),
    )
    for label, what in labels:
        for name in ("main", "branch"):
            p50, p90 = row[f"{label}_{name}_50"], row[f"{label}_{name}_90"]
            print(f"  {what:21s} {name:7s} p50 {p50:.3f}  p90 {p90:.3f}")
        print(f"  {what:21s} branch/main p50: {row[f'{label}_ratio']:.2f}")
    print(f"  top-50 overlap with main's exact scan: {row['top50_overlap']:.4f}")


if __name__ == "__main__":
    main()
