"""Import throughput: memories per second into the embedded store, three ways.

1. ``service``: ``MemoryService.import_batches`` in-process (the shared write path: validation
   already done, token counts for two encodings, one static-embedding call and one repeats
   lookup per batch, EdgeStore ``add``; the next batch prepared while one is stored), the floor
   under both user-facing paths.
2. ``cli``: ``memproxy memories import FILE`` as a subprocess on a JSONL file. Reported twice:
   the command's own rate (timed from its first write) and the wall-clock rate including the
   process start, model load and the validation pass.
3. ``api``: ``POST /v1/memories`` batches against ``memproxy serve`` (a subprocess), from
   ``--concurrency`` client threads.

Each path imports the same memories into a fresh data dir: real text by default
(``bench/lib/realtext.py``: LoCoMo items, then generated ones), or the synthetic templates
(``bench/lib/memories.py``) with ``--text synthetic``; ``--text both`` runs the two, the
service path interleaved batch by batch. Run: ``.venv/bin/python bench/import.py``
(20,000 memories, ~a minute); ``--smoke`` (500 memories, seconds). ``--baseline-tree DIR``
also runs the CLI and API paths from another source tree (``git archive <commit> | tar -x -C
DIR``), interleaved with this one, for before/after figures from one run. Results go to
``bench/results/import_<text>.json`` (not in smoke mode). The machine is shared with other
work: figures are noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.lib import realtext  # noqa: E402
from bench.lib.memories import synthetic_memories  # noqa: E402
from bench.lib.report import save_results  # noqa: E402
from bench.lib.servers import memproxy, python_env, served_from  # noqa: E402

DEFAULT_SIZE = 20_000
SMOKE_SIZE = 500
DEFAULT_BATCH = 500
DEFAULT_CONCURRENCY = 2
# The API is never asked to reach the upstream here; any URL will do.
UNUSED_UPSTREAM = "http://127.0.0.1:9/v1"
API_KEY = {"Authorization": "Bearer sk-bench-import"}  # its own passthrough tenant


def bench_service(
    sets: dict[str, list[dict[str, Any]]], batch: int, data_dir: Path
) -> list[dict[str, Any]]:
    """In-process ``MemoryService.write`` on EdgeStore with the shipped static embedder.

    With several sets (text kinds) each gets its own store and their batches alternate, the
    order swapping every batch, so machine drift falls on all alike.
    """
    from proxy.memory.edge import EdgeStore
    from proxy.memory.embedders import StaticEmbedder
    from proxy.memory.parsing import parse_memories
    from proxy.memory.service import MemoryService

    async def run() -> dict[str, float]:
        embedder = StaticEmbedder()
        services, inputs, elapsed = {}, {}, {}
        for kind, items in sets.items():
            store = await EdgeStore.open(data_dir / kind, dimensions=embedder.dimensions)
            services[kind] = MemoryService(store, embedder, None)
            inputs[kind] = [
                parse_memories(items[i : i + batch], max_content_chars=8000)
                for i in range(0, len(items), batch)
            ]
            await services[kind].write("warm", inputs[kind][0][:1])
            elapsed[kind] = 0.0
        # The CLI's path: each batch is stored while the next is counted and embedded.
        streams = {kind: services[kind].import_batches("bench", inputs[kind]) for kind in sets}
        kinds = list(sets)
        for n in range(max(len(chunks) for chunks in inputs.values())):
            for kind in kinds[n % len(kinds) :] + kinds[: n % len(kinds)]:
                if n < len(inputs[kind]):
                    started = time.perf_counter()
                    await anext(streams[kind])
                    elapsed[kind] += time.perf_counter() - started
        for service in services.values():
            await service.store.close()
        return elapsed

    elapsed = asyncio.run(run())
    return [
        {
            "path": "service",
            "text": kind,
            "memories": len(sets[kind]),
            "seconds": round(elapsed[kind], 3),
            "memories_per_s": round(len(sets[kind]) / elapsed[kind], 1),
        }
        for kind in sets
    ]


def bench_cli(
    items: list[dict[str, Any]], batch: int, data_dir: Path, work: Path, tree: Path = ROOT
) -> dict[str, Any]:
    """``memproxy memories import`` in a subprocess, run from the source ``tree``."""
    source = work / "memories.jsonl"
    source.write_text("".join(json.dumps(item) + "\n" for item in items))
    env = python_env(MEMPROXY_DATA_DIR=str(data_dir))
    env["PYTHONPATH"] = str(tree.resolve())
    # No shared keyless tenant (adr/0086): the CLI names its tenant, the API sends a key.
    argv = [sys.executable, "-m", "proxy", "memories", "import", str(source), "--quiet"]
    argv += ["--tenant", "bench", "--force"]  # a tenant of its own, reached by no key
    cpu = children_cpu_s()
    started = time.perf_counter()
    done = subprocess.run(
        [*argv, "--batch-size", str(batch)], env=env, cwd=tree, capture_output=True, check=False
    )
    wall = time.perf_counter() - started
    cpu = children_cpu_s() - cpu
    if done.returncode != 0:
        raise RuntimeError(f"import failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    summary = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return {
        "path": "cli",
        "memories": summary["imported"],
        "seconds_wall": round(wall, 3),
        "memories_per_s": summary["memories_per_s"],
        "memories_per_s_wall": round(summary["imported"] / wall, 1),
        # The whole command's CPU (start-up, model load and validation included): on a shared
        # machine a steadier measure of its cost than the rates.
        "cpu_s": round(cpu, 2),
    }


def children_cpu_s() -> float:
    """User + system CPU seconds of this process's finished children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def bench_api(
    items: list[dict[str, Any]], batch: int, concurrency: int, data_dir: Path, tree: Path = ROOT
) -> dict[str, Any]:
    """``POST /v1/memories`` batches from ``concurrency`` threads against ``memproxy serve``
    run from the source ``tree``."""
    chunks = [items[i : i + batch] for i in range(0, len(items), batch)]
    server = memproxy(UNUSED_UPSTREAM, data_dir)
    if tree != ROOT:
        server = served_from(server, tree, "memproxy-before")
    with (
        server,
        httpx.Client(base_url=server.base_url, headers=API_KEY, timeout=300) as client,
    ):
        client.post("/v1/memories", json={"content": "warm up"}).raise_for_status()

        def post(chunk: list[dict[str, Any]]) -> None:
            response = client.post("/v1/memories", json={"memories": chunk})
            if response.status_code != 201:
                raise RuntimeError(f"{response.status_code}: {response.text[:300]}")

        started = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(post, chunks))
        elapsed = time.perf_counter() - started
    return {
        "path": "api",
        "memories": len(items),
        "concurrency": concurrency,
        "seconds": round(elapsed, 3),
        "memories_per_s": round(len(items) / elapsed, 1),
    }


def main() -> None:
    """Run the three paths and print (and save) the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=DEFAULT_SIZE)
    parser.add_argument("--batch", type=int, default=DEFAULT_BATCH)
    parser.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY)
    parser.add_argument("--smoke", action="store_true", help="a few hundred memories, seconds")
    parser.add_argument(
        "--text",
        choices=("real", "synthetic", "both"),
        default="real",
        help="both: the service path interleaves the two kinds, the others run each in turn",
    )
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        help="also import with this source tree (e.g. an older commit's `git archive`): the CLI "
        "and API paths of both, interleaved, in one run",
    )
    args = parser.parse_args()
    size = SMOKE_SIZE if args.smoke else args.size
    kinds = ["real", "synthetic"] if args.text == "both" else [args.text]
    if "real" in kinds and not realtext.available():
        if not args.smoke:
            raise SystemExit(f"real text needs the LoCoMo data at {realtext.LOCOMO_PATH}")
        print("LoCoMo data absent: smoke run on synthetic text", file=sys.stderr)
        kinds = ["synthetic"]
    sets = {
        kind: realtext.RealText().memories(size, user="bench-user")
        if kind == "real"
        else synthetic_memories(size, user="bench-user")
        for kind in kinds
    }
    rows = []
    with tempfile.TemporaryDirectory(prefix="memproxy-import-") as tmp:
        work = Path(tmp)
        rows += bench_service(sets, args.batch, work / "service")
        trees = {"": ROOT}
        if args.baseline_tree is not None:
            trees = {"before": args.baseline_tree, "after": ROOT}
        for kind, items in sets.items():
            for n, (label, tree) in enumerate(trees.items()):
                where = work / f"cli-{kind}-{n}"
                cli = bench_cli(items, args.batch, where, work, tree)
                rows.append({**cli, "text": kind, "tree": label})
            # The API runs in the other order, so neither tree always goes first.
            for n, (label, tree) in reversed(list(enumerate(trees.items()))):
                where = work / f"api-{kind}-{n}"
                api = bench_api(items, args.batch, args.concurrency, where, tree)
                rows.append({**api, "text": kind, "tree": label})
    print(f"import throughput, {size:,} memories per text kind, batches of {args.batch}")
    for row in rows:
        extra = (
            f"  (wall incl. start: {row['memories_per_s_wall']:,} /s, CPU {row['cpu_s']} s)"
            if row["path"] == "cli"
            else ""
        )
        print(
            f"  {row['text']:<10} {row['path']:<8} {row.get('tree', ''):<7}"
            f"{row['memories_per_s']:>10,} memories/s{extra}"
        )
    if not args.smoke:
        figures = {"text": args.text, "size": size, "batch": args.batch, "rows": rows}
        path = save_results(f"import_{args.text}", figures)
        print(f"saved {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
