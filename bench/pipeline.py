"""What does the memory path cost? memproxy with ``X-Memory-Mode: off`` vs memory on.

The memories are real text by default (``bench/lib/realtext.py``: LoCoMo turns, observations
and summaries, then text generated from them) and every request asks a new LoCoMo question.
``--text synthetic`` uses the old template memories and numbered template questions;
``--text both`` runs the two side by side in one interleaved run.

Part 1, end to end, in one interleaved run against one ``python -m proxy serve`` process per
text kind (the embedded store holding ``--memories`` memories of the bench tenant, the local
static embedder, the in-process cache, default deadlines) in front of the bench's lean fake
upstream: every request asks a different question (no cache hits), half of the cells with
``X-Memory-Mode: off``. Reports the latency the memory path adds (p50, p99) at concurrency 1,
the memory-on share of memory-off throughput at concurrency 50, and the memory-on answers'
``Server-Timing`` stages (p50) at concurrency 1. With 2 CPUs or more the load generator and the
fake upstream run on the lower half of them and every server on the upper half (``--no-pin``:
wherever the OS puts them), so every server, whichever slot it has, meets the same conditions.
The cells run in a balanced order (``loadgen.cell_plan``; ``--order rotated`` for the order before
2026-11-25): every round of c=1 before any round of c=50, and in each round every target in
every position, each cell ``--seconds`` over the number of targets, once every server is idle
(docs/benchmarks.md, "The first slot"). ``--json`` also gives every cell as it ran
(``cells``: round, position, the cell before it, p50, memory stage, other servers' CPU).

Part 2, in process: ``Pipeline.prepare`` alone at 1k, 10k and 100k memories (``--sizes``),
latency per stage read from its ``Server-Timing`` header (budget, query, cache, embed, search,
assemble, inject; recall only when served) and the share of requests that stayed within the
deadline (not degraded).
With ``--text both`` the two stores answer alternate requests.

Targets (issues 5 and 14, 2-core machine): added p50 <= 3 ms and p99 <= 10 ms at concurrency 1
with 10k real-text memories.

    .venv/bin/python bench/pipeline.py                  # a few minutes (100k seeding included)
    .venv/bin/python bench/pipeline.py --text both --sizes 10000
    .venv/bin/python bench/pipeline.py --variant-config counts-off.yaml   # A/B a setting
    .venv/bin/python bench/pipeline.py --baseline-tree /tmp/main-tree    # A/B another commit
    .venv/bin/python bench/pipeline.py --redis --baseline-tree /tmp/main-tree  # ... over Redis
    .venv/bin/python bench/pipeline.py --smoke          # seconds, for CI
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib import loadgen, realtext, stats
from bench.lib.memories import synthetic_memories
from bench.lib.servers import (
    ROOT,
    ServerProcess,
    cpu_sides,
    fake_upstream,
    memproxy,
    pin,
    served_from,
    start_redis,
)
from proxy.apis.openai_chat import OPENAI_CHAT
from proxy.cache.local import LocalCache
from proxy.cache.request_cache import RequestCache
from proxy.context.allocation import BudgetCalculator
from proxy.context.limits import ModelLimits
from proxy.defaults import MEMORY_TOP_K
from proxy.memory.edge import EdgeStore
from proxy.memory.embedders import StaticEmbedder
from proxy.memory.inputs import MemoryInput
from proxy.memory.retriever import Retriever
from proxy.memory.service import MemoryService
from proxy.metrics import Metrics
from proxy.pipeline.pipeline import Pipeline
from proxy.settings import load_settings
from proxy.tenancy import Tenant, TenantResolver
from proxy.tokenizer import tiktoken_tokenizer

TARGET_ADDED_P50_MS = 3.0
TARGET_ADDED_P99_MS = 10.0
API_KEY = "sk-bench-pipeline"
SEED_BATCH = 1_000
STAGES = ("budget", "query", "recall", "cache", "embed", "search", "assemble", "inject", "memory")
TEXTS = ("real", "synthetic")
MODEL = "gpt-4o-mini"
BASE = "@base"  # the suffix of the cells served from --baseline-tree
CAPTURE = "+capture"  # the suffix of the memory-on cells that capture (--capture)
# Store size after the run, per capturing process (``store_size``): the store grows under capture.
STORE_SIZES: dict[str, int] = {}
# Every end-to-end cell as it ran, round by round (``loadgen.cell_record``), for ``--json``.
CELLS: list[dict[str, Any]] = []


def bench_tenant() -> str:
    """The tenant memproxy derives from ``API_KEY`` (passthrough mode)."""
    return TenantResolver(load_settings(env={})).for_key(API_KEY).id


def to_inputs(items: list[dict[str, Any]]) -> list[MemoryInput]:
    """Memory dicts as validated write inputs."""
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


def memory_items(text: str, count: int) -> list[dict[str, Any]]:
    """``count`` tenant-shared memory dicts of the ``text`` kind (``real`` or ``synthetic``)."""
    if text == "real":
        return realtext.RealText().memories(count, user="")
    return synthetic_memories(count, user="")


def question_bodies(text: str) -> Callable[[bool], loadgen.Body]:
    """A per-cell factory of request bodies, each request a new question of the ``text`` kind."""
    if text == "real":
        questions = realtext.RealText().questions()  # one stream: no repeats across cells
        return lambda stream: realtext.QuestionBodies(questions, MODEL, stream)
    cells = iter(range(1, 1_000_000))
    return lambda stream: loadgen.unique_chat_bodies(
        stream, model=MODEL, base=next(cells) * loadgen.UNIQUE_STRIDE
    )


async def seed_store(
    store: EdgeStore, embedder: StaticEmbedder, tenant: str, count: int, text: str = "real"
) -> float:
    """Write ``count`` memories (tenant-shared) through the service; build the index."""
    started = time.perf_counter()
    service = MemoryService(store, embedder, None)
    inputs = to_inputs(memory_items(text, count))
    for start in range(0, count, SEED_BATCH):
        await service.write(tenant, inputs[start : start + SEED_BATCH])
    await store.optimize()
    return time.perf_counter() - started


# -- part 1: end to end ----------------------------------------------------------------------


def end_to_end(
    args: argparse.Namespace, embedder: StaticEmbedder, texts: tuple[str, ...]
) -> list[dict[str, Any]]:
    """Memory off vs on through memproxy processes; one row per text kind, config and c.

    One process per text kind with the default settings serves both ``{text}-off`` and
    ``{text}-on``; each ``--variant-config`` YAML adds a process (its own copy of the seeded
    store) serving ``{text}-on+{name}``, compared with the same memory-off cells. A
    ``--baseline-tree`` (another commit's source, e.g. ``git archive``) adds a process run from
    that tree serving ``{text}-off@base`` and ``{text}-on@base``, compared with its own off cells;
    every cell of every process is interleaved in one run, so the trees meet the same load.
    With ``--redis`` every process caches in one ``redis-server`` started here, each in a
    database of its own (their keys would otherwise meet: the same tenant and questions).
    """
    seconds, rounds = (0.5, 1) if args.smoke else (args.seconds, args.rounds)
    count = 300 if args.smoke else args.memories
    concurrencies = (1, 50)
    streams = (False, True) if args.stream else (False,)
    capture = args.capture != "off"
    # (suffix, config, source tree, whether the process also serves the memory-off cells,
    # whether its memory-on requests capture)
    Config = tuple[str, Path | None, Path | None, bool, bool]
    configs: list[Config] = [("", None, None, True, False)]
    configs += [(f"+{path.stem}", path, None, False, False) for path in args.variant_config]
    if capture:
        configs.append((CAPTURE, None, None, False, True))
    if args.baseline_tree is not None:
        configs.append((BASE, None, args.baseline_tree, True, False))
        if capture:
            configs.append((CAPTURE + BASE, None, args.baseline_tree, False, True))
    # The load generator (this process), the fake upstream and Redis on one side of the CPUs,
    # every memproxy server on the other: the same placement for every slot (docs/benchmarks.md,
    # "The pipeline benchmark's slots").
    sides = None if args.no_pin else cpu_sides(os.sched_getaffinity(0))
    load_cpus, server_cpus = sides if sides is not None else (None, None)
    with contextlib.ExitStack() as stack:
        # Capturing, every answer differs (as a model's do: stored, not a repeat) and comes
        # gzipped, as OpenAI sends it: what capture reads back.
        upstream = (
            fake_upstream(chunks=args.answer_words, compress=True, echo=True, cpus=load_cpus)
            if capture
            else fake_upstream(cpus=load_cpus)
        )
        fake = stack.enter_context(upstream)
        redis_url = None
        if args.redis:
            redis_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="mp-redis-"))
            redis, redis_url = start_redis(Path(redis_dir))
            stack.callback(redis.wait)
            stack.callback(redis.kill)
            if load_cpus is not None:
                pin(redis.pid, load_cpus)
        databases = itertools.count()
        targets, bodies = [], {}
        server_cpu: dict[str, Callable[[], float]] = {}
        engine_cpu: dict[str, Callable[[], float]] = {}
        # Every slot gets the same conditions (docs/benchmarks.md, "The pipeline benchmark's
        # slots"): its store seeded by a child process running its tree's code (this tree's
        # too, so the bench process stays a lean load generator), all stores seeded before any
        # server starts (none warms while another seeds), every server run from its tree alike,
        # and the load only once every server is idle.
        starting: list[tuple[str, str, bool, bool, ServerProcess]] = []
        for text in texts:
            for suffix, config, tree, with_off, captures in configs:
                data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="mp-pipeline-"))
                # Each tree seeds its own store: the shard layout and index build are part of
                # what is compared.
                took = seed_from_tree(tree or ROOT, Path(data_dir), text, count)
                print(f"seeded {count} {text} memories in {took:.1f} s", file=sys.stderr)
                if captures:  # counted once the process has stopped (runs before the cleanup)
                    name = f"{text}{suffix}"
                    stack.callback(store_size, STORE_SIZES, name, Path(data_dir), embedder)
                extra = {"MEMPROXY_ACCESS_LOG": "false"}
                if redis_url is not None:
                    database = next(databases)
                    extra["MEMPROXY_REDIS_URL"] = f"{redis_url.removesuffix('/0')}/{database}"
                if config is not None:
                    extra["MEMPROXY_CONFIG"] = str(config)
                server = memproxy(
                    fake.base_url + "/v1", Path(data_dir), extra_env=extra, cpus=server_cpus
                )
                if tree is not None:
                    server = served_from(server, tree, f"memproxy{suffix}")
                starting.append((text, suffix, with_off, captures, server))
        if load_cpus is not None:  # after the seeding, which builds indexes on every CPU
            stack.callback(pin, os.getpid(), os.sched_getaffinity(0))
            pin(os.getpid(), load_cpus)
        for text, suffix, with_off, captures, server in starting:
            proxy = stack.enter_context(server)
            auth = {"Authorization": f"Bearer {API_KEY}"}
            modes = ("off", "on") if with_off else ("on",)
            pid = proxy.pid
            # One reader per process, shared by its cells: the run tells the processes apart.
            reader = None if pid is None else (lambda pid=pid: loadgen.process_cpu_s(pid))
            engine = None if pid is None else (lambda pid=pid: loadgen.engine_cpu_s(pid))
            for mode in modes:
                name = f"{text}-{mode}{suffix if mode == 'on' or suffix == BASE else ''}"
                headers = {**auth, "X-Memory-Mode": "off"} if mode == "off" else auth
                if captures:
                    headers = {**headers, "X-Memory-Capture": args.capture}
                targets.append(loadgen.Target(name, proxy.base_url, headers))
                bodies[name] = question_bodies(text)
                if reader is not None and engine is not None:
                    server_cpu[name] = reader
                    engine_cpu[name] = engine
        for read_cpu in server_cpu.values():  # e.g. a record cache still warming after open
            loadgen.settled_cpu(read_cpu)
        results = loadgen.run_interleaved(
            targets,
            concurrencies=concurrencies,
            seconds=seconds,
            rounds=rounds,
            streams=streams,
            bodies=bodies,
            server_cpu=server_cpu,
            engine_cpu=engine_cpu,
            cells=CELLS,
            balanced=args.order == "balanced",
        )
    rows = []
    for text in texts:
        for suffix, _, tree, _, _ in configs:
            off_name = f"{text}-off{BASE}" if tree is not None else f"{text}-off"
            for stream in streams:
                for concurrency in concurrencies:
                    off_sample = results[(off_name, concurrency, stream)]
                    on_sample = results[(f"{text}-on{suffix}", concurrency, stream)]
                    row = e2e_row(f"{text}{suffix}", count, concurrency, off_sample, on_sample)
                    if args.stream:
                        row = {"stream": stream, **row}
                    rows.append(row)
    return rows


def store_size(sizes: dict[str, int], name: str, data_dir: Path, embedder: StaticEmbedder) -> None:
    """Record in ``sizes[name]`` how many memories the bench tenant has in ``data_dir``."""

    async def count() -> int:
        store = await EdgeStore.open(data_dir, dimensions=embedder.dimensions)
        try:
            return await store.count(bench_tenant())
        finally:
            await store.close()

    sizes[name] = asyncio.run(count())


SEED_IN_TREE = """
import asyncio, sys, time
from pathlib import Path
from bench import pipeline
from bench.lib import realtext
from proxy.memory.edge import EdgeStore
from proxy.memory.embedders import StaticEmbedder

where, kind, count, locomo = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
corpus = realtext.load_corpus(locomo)
realtext.load_corpus = lambda path=locomo: corpus  # the data lives beside this tree, not that


async def seed():
    embedder = StaticEmbedder()
    store = await EdgeStore.open(where, dimensions=embedder.dimensions)
    try:
        tenant = pipeline.bench_tenant()
        return await pipeline.seed_store(store, embedder, tenant, count, kind)
    finally:
        await store.close()


print(asyncio.run(seed()))
"""


def seed_from_tree(tree: Path, data_dir: Path, text: str, count: int) -> float:
    """Seed ``data_dir`` with ``tree``'s own code (its shard layout); return the seconds."""
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    argv = [sys.executable, "-c", SEED_IN_TREE, str(data_dir), text, str(count)]
    argv.append(str(realtext.LOCOMO_PATH))
    done = subprocess.run(argv, cwd=tree, env=env, check=True, capture_output=True, text=True)
    return float(done.stdout.strip().splitlines()[-1])


def e2e_row(
    name: str, count: int, concurrency: int, off_sample: loadgen.Sample, on_sample: loadgen.Sample
) -> dict[str, Any]:
    """One end-to-end table row: memory on against memory off, plus on's stage p50s."""
    off, on = off_sample.summary(), on_sample.summary()
    row: dict[str, Any] = {
        "text": name,
        "memories": count,
        "c": concurrency,
        "off_p50_ms": off["p50_ms"],
        "on_p50_ms": on["p50_ms"],
        "added_p50_ms": on["p50_ms"] - off["p50_ms"],
        "added_p99_ms": on["p99_ms"] - off["p99_ms"],
        # Request by request (latency minus its memory stage), on against off: what lies
        # outside the stage without the stage's spread moving the medians.
        "outside_p50_ms": stats.percentile(on_sample.outside_ms, 50)
        - stats.percentile(off_sample.outside_ms, 50),
        "off_rps": off["rps"],
        "on_rps": on["rps"],
        "rps_ratio": stats.ratio(on["rps"], off["rps"]),
        "errors": off["errors"] + on["errors"],
        # Everything the server spent per answer, after-response work (capture) included.
        "off_cpu_ms": off["server_cpu_ms_per_req"],
        "on_cpu_ms": on["server_cpu_ms_per_req"],
        # Of it, the store's search pool threads' (0: the search ran on the calling thread).
        "on_engine_ms": on["engine_cpu_ms_per_req"],
        "injected": stats.ratio(on_sample.memory_status.get("injected", 0), on_sample.requests),
    }
    for stage in STAGES:
        values = on_sample.stages_ms.get(stage)
        if values:
            row[f"{stage}_p50"] = stats.percentile(values, 50)
    return row


# -- part 2: stages in process ---------------------------------------------------------------


async def stage_latency(
    embedder: StaticEmbedder,
    size: int,
    requests: int,
    top_ks: list[int],
    data_dir: Path,
    texts: tuple[str, ...],
) -> list[dict[str, Any]]:
    """Seed ``size`` memories per text kind, then time ``requests`` new questions per top-k.

    The kinds answer alternate requests (their order swapping each time), so machine drift
    falls on both alike.
    """
    tenant = bench_tenant()
    stores: dict[str, EdgeStore] = {}
    seeded: dict[str, float] = {}
    rows = []
    try:
        for text in texts:
            where = data_dir / f"{text}-{size}"
            store = await EdgeStore.open(where, dimensions=embedder.dimensions)
            try:
                seeded[text] = await seed_store(store, embedder, tenant, size, text)
            finally:
                await store.close()
            # Opened again, as a served process opens a seeded store: the steady state (record
            # cache warmed after open), not a first search of every memory.
            stores[text] = store = await EdgeStore.open(where, dimensions=embedder.dimensions)
            await store.warmed()
        # One pipeline and tenant per top-k, both from settings with it as ``memory.top_k``, as a
        # deployment would be: X-Memory-Top-K could only lower the tenant's top_k, and a lowered
        # one also drops the lexical candidates (adr/0136), so a header would measure fewer
        # candidates than a configured top_k brings. The top-k values answer alternate requests
        # (their order swapping), like the text kinds.
        pipelines = {
            (text, top_k): bench_pipeline(stores[text], embedder, top_k)
            for text in texts
            for top_k in top_ks
        }
        tenants = {top_k: bench_tenant_settings(top_k) for top_k in top_ks}
        builds = {text: question_bodies(text)(False) for text in texts}
        timings: dict[tuple[str, int], dict[str, list[float]]] = {}
        statuses: dict[tuple[str, int], Counter[str]] = {}
        for n in range(requests + 20):
            for top_k in loadgen.rotated(list(top_ks), n):
                for text in loadgen.rotated(list(texts), n):
                    cell = (text, top_k)
                    body = json.loads(builds[text](n * len(top_ks) + top_ks.index(top_k)))
                    prepared = await pipelines[cell].prepare(tenants[top_k], {}, body, OPENAI_CHAT)
                    if n < 20:  # warm-up
                        continue
                    status = prepared.response_headers["X-Memory-Status"]
                    statuses.setdefault(cell, Counter())[status] += 1
                    timing = prepared.response_headers["Server-Timing"]
                    for stage, ms in loadgen.parse_server_timing(timing).items():
                        timings.setdefault(cell, {}).setdefault(stage, []).append(ms / 1000.0)
        for top_k in top_ks:
            for text in texts:
                cell = (text, top_k)
                row: dict[str, Any] = {
                    "text": text,
                    "memories": size,
                    "top_k": top_k,
                    "seed_s": seeded[text],
                }
                for stage in STAGES:
                    if timings.get(cell, {}).get(stage):
                        summary = stats.summarize_ms(timings[cell][stage])
                        row[f"{stage}_p50"] = summary["p50"]
                        row[f"{stage}_p99"] = summary["p99"]
                row["injected"] = stats.ratio(statuses[cell]["injected"], requests)
                row["degraded"] = stats.ratio(statuses[cell]["degraded"], requests)
                rows.append(row)
    finally:
        for store in stores.values():
            await store.close()
    return rows


def bench_tenant_settings(top_k: int | None = None) -> Tenant:
    """The bench key's tenant under the default settings (``memory.top_k`` set when given): its
    memory limits are what a request's options start from, so they must match the pipeline's."""
    settings = load_settings(env={}, overrides={"memory.top_k": top_k})
    return TenantResolver(settings).for_key(API_KEY)


def bench_pipeline(
    store: EdgeStore, embedder: StaticEmbedder, top_k: int | None = None
) -> Pipeline:
    """A ``Pipeline`` on ``store`` with the default settings (``memory.top_k`` set when given)
    and an in-process cache."""
    settings = load_settings(env={}, overrides={"memory.top_k": top_k})
    cache = RequestCache(LocalCache(10_000), shared_retrievals=False)  # as served without Redis
    return Pipeline(
        settings.memory,
        calculator=BudgetCalculator(ModelLimits(), tiktoken_tokenizer(), memory_cap=None),
        retriever=Retriever(store, embedder, cache),
        counts=cache,
        metrics=Metrics(),
        spawn=lambda coro: coro.close(),  # after-response work is not measured here
    )


def label(row: dict[str, Any]) -> str:
    """A row's name in the verdicts: its text kind and variant, and whether it streamed."""
    return f"{row['text']}{' stream' if row.get('stream') else ''}"


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """The target checks at concurrency 1, and the throughput ratio at 50."""
    lines = []
    for row in rows:
        if row["c"] == 1:
            for q, target in (("p50", TARGET_ADDED_P50_MS), ("p99", TARGET_ADDED_P99_MS)):
                added = row[f"added_{q}_ms"]
                lines.append(
                    f"{'PASS' if added <= target else 'MISS'} {label(row)}: added {q} at c=1: "
                    f"{added:.2f} ms (target <= {target} ms)"
                )
        else:
            lines.append(
                f"INFO {label(row)}: throughput at c={row['c']}: memory on = "
                f"{row['rps_ratio']:.0%} of memory off"
            )
    return lines


def main() -> None:
    """Run both parts and print the tables and verdicts."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="seconds, for CI")
    parser.add_argument("--seconds", type=float, default=4.0, help="per cell and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memories", type=int, default=10_000, help="end-to-end store size")
    parser.add_argument(
        "--sizes",
        default="1000,10000,100000",
        help='part 2 store sizes ("" for none: end to end only)',
    )
    parser.add_argument("--requests", type=int, default=300, help="part 2 requests per size")
    parser.add_argument(
        "--top-k",
        default=str(MEMORY_TOP_K),
        help="part 2 memory.top_k values, each a pipeline of its own (comma list; default: the "
        "product's default)",
    )
    parser.add_argument(
        "--text",
        choices=(*TEXTS, "both"),
        default="real",
        help="memories and questions: real text (LoCoMo-based), the synthetic templates, or both",
    )
    parser.add_argument(
        "--variant-config",
        type=Path,
        action="append",
        default=[],
        metavar="YAML",
        help="end to end: also serve memory on from a process with this config (repeatable)",
    )
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        help="end to end: also serve memory off and on from this source tree (git archive)",
    )
    parser.add_argument(
        "--redis",
        action="store_true",
        help="end to end: the processes cache in a redis-server (started here), not in-process",
    )
    parser.add_argument(
        "--capture",
        choices=("off", "turn", "user"),
        default="off",
        help="end to end: also serve memory on from a process whose requests send "
        "X-Memory-Capture with this mode (and one from --baseline-tree); the fake upstream then "
        "gzips its answers and makes each differ",
    )
    parser.add_argument(
        "--answer-words",
        type=int,
        default=40,
        help="with --capture: fixed words after the echoed question in each fake answer",
    )
    parser.add_argument("--stream", action="store_true", help="end to end: also streamed cells")
    parser.add_argument(
        "--no-pin",
        action="store_true",
        help="end to end: leave every process where the OS puts it (by default the load "
        "generator and the fake upstream run on one half of the CPUs, every server on the other)",
    )
    parser.add_argument(
        "--order",
        choices=("balanced", "rotated"),
        default="balanced",
        help="end to end: the cells' order (loadgen.cell_plan): balanced (every c=1 round "
        "before any c=50 one, each round every target in every position, every server idle "
        "before each cell) or rotated (the order before 2026-11-25: the targets rotated by one "
        "each round, c=1 and c=50 alternating)",
    )
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    texts = TEXTS if args.text == "both" else (args.text,)
    if args.smoke:  # CI covers the capturing and streamed cells too
        args.capture = "turn" if args.capture == "off" else args.capture
        args.stream = True
    if "real" in texts and not realtext.available():
        if not args.smoke:
            raise SystemExit(f"real text needs the LoCoMo data at {realtext.LOCOMO_PATH}")
        # A machine without the data still smoke-tests the benchmark's machinery.
        print("LoCoMo data absent: smoke run on synthetic text", file=sys.stderr)
        texts = ("synthetic",)
    embedder = StaticEmbedder()
    e2e_rows = [] if args.skip_e2e else end_to_end(args, embedder, texts)
    sizes = [200] if args.smoke else [int(s) for s in args.sizes.split(",") if s]
    top_ks = [MEMORY_TOP_K] if args.smoke else [int(k) for k in args.top_k.split(",") if k]
    requests = 20 if args.smoke else args.requests
    stage_rows = []
    with tempfile.TemporaryDirectory(prefix="memproxy-stages-") as data_dir:
        for size in sizes:
            stage_rows += asyncio.run(
                stage_latency(embedder, size, requests, top_ks, Path(data_dir), texts)
            )
            print(f"  stages at {size} memories done", file=sys.stderr)
    stage_columns = [f"{stage}_p50" for stage in STAGES]
    if e2e_rows:
        columns = [c for c in e2e_rows[0] if c not in stage_columns]
        print(stats.format_table(e2e_rows, columns))
        print("\nServer-Timing of memory-on answers at c=1, p50 ms:")
        staged = [r for r in e2e_rows if r["c"] == 1]
        named = [c for c in ("stream", "text") if c in staged[0]]
        print(stats.format_table(staged, [*named, *[c for c in stage_columns if c in staged[0]]]))
        for line in verdicts(e2e_rows):
            print(line)
        for name, size in STORE_SIZES.items():
            print(f"INFO {name}: {size:,} memories in the store after the run")
    if stage_rows:  # none with ``--sizes ""``: end to end only
        columns = (
            ["text", "memories", "top_k"]
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
        print(json.dumps({"end_to_end": e2e_rows, "cells": CELLS, "stages": stage_rows}, indent=2))
    if any(row["errors"] for row in e2e_rows):
        raise SystemExit("requests failed during the benchmark")


if __name__ == "__main__":
    main()
