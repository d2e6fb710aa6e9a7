"""What does ``RetrievalCounter.add`` cost a memory-on request? This tree against another's.

``add`` runs in the request's own task once its response is out (``Prepared.on_status``): at
concurrency 1 its CPU lands between two requests, and after a memory stage the code runs cold.
Each call counts 50 ids drawn from 10,000 (the default top-k over a 10k store), into a counter
that has already seen a few hundred requests; "cold" sweeps 8 MiB of memory before each call,
as a request's search and assembly leave the caches. Reported per call: the calling thread's CPU
(``time.thread_time_ns``), p50 and mean (the mean carries the batched summing), and the pending
counts must come out the same in both trees.

    .venv/bin/python bench/counter_add.py --baseline-tree /tmp/base-main
    .venv/bin/python bench/counter_add.py --smoke     # seconds, for CI
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import random
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proxy.pipeline import counters

IDS = 10_000
PER_REQUEST = 50
SWEEP_BYTES = 8 * 1024 * 1024


class Store:
    """Receives the flush: the counts each tree sends."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    async def increment_retrievals(self, tenant: str, ids: Sequence[str]) -> None:
        self.counts.update(ids)


def load(tree: Path) -> ModuleType:
    """``proxy/pipeline/counters.py`` of ``tree`` as a module of its own."""
    spec = importlib.util.spec_from_file_location(
        "baseline_counters", tree / "proxy" / "pipeline" / "counters.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(modules: dict[str, ModuleType], requests: int, seed: int) -> None:
    """Time ``add`` of each module, interleaved call by call, warm and cold."""
    pool = [str(uuid.UUID(int=random.Random(seed + n).getrandbits(128))) for n in range(IDS)]
    draws = random.Random(seed)
    batches = [tuple(draws.sample(pool, PER_REQUEST)) for _ in range(requests + 300)]
    sweep = bytearray(SWEEP_BYTES)
    results: dict[tuple[str, str], list[int]] = {}
    stores = {}
    for mode in ("warm", "cold"):
        made = {}
        for name, module in modules.items():
            stores[(name, mode)] = store = Store()
            made[name] = module.RetrievalCounter(store, lambda coro: coro.close(), delay_s=60)
        for n, ids in enumerate(batches):
            for name in sorted(made, key=lambda _: draws.random()):
                if mode == "cold":
                    sweep[::64] = bytes(len(sweep[::64]))
                started = time.thread_time_ns()
                made[name].add("tenant", ids)
                took = time.thread_time_ns() - started
                if n >= 300:  # the counter has seen some requests
                    results.setdefault((name, mode), []).append(took)
        for counter in made.values():
            asyncio.run(counter.flush())
    sent = {key: store.counts for key, store in stores.items()}
    if len({tuple(sorted(counts.items())) for counts in sent.values()}) != 1:
        raise SystemExit("the trees sent different counts")
    print(f"{'tree':10s} {'mode':5s} {'p50 us':>8s} {'mean us':>8s}")
    for (name, mode), times in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        p50 = statistics.median(times) / 1000
        mean = statistics.fmean(times) / 1000
        print(f"{name:10s} {mode:5s} {p50:8.2f} {mean:8.2f}")


def main() -> None:
    """Parse arguments, run, print the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline-tree", type=Path, help="another commit's source tree")
    parser.add_argument("--requests", type=int, default=3_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="seconds, for CI")
    args = parser.parse_args()
    if args.smoke:
        args.requests = 50
    modules = {"this": counters}
    if args.baseline_tree is not None:
        modules["baseline"] = load(args.baseline_tree)
    run(modules, args.requests, args.seed)


if __name__ == "__main__":
    main()
