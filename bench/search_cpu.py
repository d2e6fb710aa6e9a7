"""What does the Python around a chat search's engine calls cost, against a baseline tree?

A chat search (``EdgeStore._search_near_sync``: top_k, lexical candidates, neighbour seeds, as
the chat pipeline asks) spends its time in the engine's queries and in the Python around them
(filters, fusion, records, candidates, the neighbour turns). The stage bench
(``bench/pipeline.py``) times the whole search by the wall clock, whose run-to-run noise on a
shared machine (~0.1-0.5 ms at 10k memories) hides a change of a few tens of microseconds.

Here each search is also timed by its thread's CPU time (``time.thread_time``): the Python
around the engine calls and the calls' own conversions, while the engine's search pool works
on its own threads and a thread waiting for a core is not charged. One store of ``--memories``
real-text memories is seeded and indexed as ``bench/pipeline.py`` seeds it, with this tree's
code, and copied afresh for each run. A run is a child process in this tree or in
``--baseline-tree`` (a ``git archive`` of another commit, whose code reads the same files): it
sends ``--questions`` new LoCoMo questions through the chat pipeline with the store's searches
recorded, then replays the recorded searches ``--rounds`` times. Runs alternate between the
trees.

    .venv/bin/python bench/search_cpu.py --smoke                        # seconds, for CI
    .venv/bin/python bench/search_cpu.py --baseline-tree /tmp/base-X    # 10k memories, 3 runs each
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import pipeline
from bench.lib import realtext

RUN_IN_TREE = """
import asyncio, json, sys, time
from pathlib import Path
from bench import pipeline
from bench.lib import realtext
from proxy.apis.openai_chat import OPENAI_CHAT
from proxy.memory.edge import EdgeStore
from proxy.memory.embedders import StaticEmbedder

where, questions, rounds, locomo = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
corpus = realtext.load_corpus(Path(locomo))
realtext.load_corpus = lambda path=locomo: corpus  # the data lives beside this tree, not that


def p50(values):
    return sorted(values)[len(values) // 2] * 1e6


async def run():
    embedder = StaticEmbedder()
    store = await EdgeStore.open(where, dimensions=embedder.dimensions)
    try:
        await store.warmed()
        calls = []
        search = store._search_near_sync

        def recorded(*args):
            calls.append(args)
            return search(*args)

        store._search_near_sync = recorded  # on the loop's thread (inline) or a store thread
        store._search_near_sized = recorded
        chat = pipeline.bench_pipeline(store, embedder)
        tenant = pipeline.bench_tenant_settings()
        build = pipeline.question_bodies("real")(False)
        for n in range(questions):
            await chat.prepare(tenant, {}, json.loads(build(n)), OPENAI_CHAT)
        cpu, wall = [], []
        for _ in range(rounds):
            for args in calls:
                started, spent = time.perf_counter(), time.thread_time()
                search(*args)
                cpu.append(time.thread_time() - spent)
                wall.append(time.perf_counter() - started)
        return {
            "searches": len(calls),
            "cpu_p50_us": p50(cpu),
            "cpu_mean_us": sum(cpu) / len(cpu) * 1e6,
            "wall_p50_us": p50(wall),
        }
    finally:
        await store.close()


print(json.dumps(asyncio.run(run())))
"""


def run_in_tree(
    tree: Path, seeded: Path, scratch: Path, args: argparse.Namespace
) -> dict[str, float]:
    """One run of ``tree``'s code on a fresh copy of the seeded store."""
    if scratch.exists():
        shutil.rmtree(scratch)
    shutil.copytree(seeded, scratch)
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    argv = [sys.executable, "-c", RUN_IN_TREE, str(scratch), str(args.questions)]
    argv += [str(args.rounds), str(realtext.LOCOMO_PATH)]
    done = subprocess.run(argv, cwd=tree, env=env, check=True, capture_output=True, text=True)
    found: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages, as ``uptime`` gives them."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="seconds, for CI")
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--questions", type=int, default=400, help="searches recorded per run")
    parser.add_argument("--rounds", type=int, default=7, help="replays of them per run")
    parser.add_argument("--runs", type=int, default=3, help="runs per tree")
    parser.add_argument("--baseline-tree", type=Path, help="also run this source tree's code")
    args = parser.parse_args()
    if args.smoke:
        args.memories, args.questions, args.rounds, args.runs = 300, 20, 1, 1
    if not realtext.available():
        sys.exit(f"real text needs the LoCoMo data at {realtext.LOCOMO_PATH}")
    here = Path(__file__).resolve().parent.parent
    trees = [("main", here)]
    if args.baseline_tree is not None:
        trees.insert(0, ("baseline", args.baseline_tree))
    with tempfile.TemporaryDirectory(prefix="search-cpu-") as scratch_dir:
        scratch = Path(scratch_dir)
        seconds = pipeline.seed_from_tree(here, scratch / "seeded", "real", args.memories)
        print(f"seeded {args.memories} real-text memories in {seconds:.1f} s", flush=True)
        print("run  tree      load (1/5/15 min)  searches  cpu_p50_us  cpu_mean_us  wall_p50_us")
        for run in range(1, args.runs + 1):
            for name, tree in trees:
                load = load_average()
                found = run_in_tree(tree, scratch / "seeded", scratch / "copy", args)
                print(
                    f"{run:>3}  {name:<8}  {load:<17}  {found['searches']:>8.0f}"
                    f"  {found['cpu_p50_us']:>10.0f}  {found['cpu_mean_us']:>11.0f}"
                    f"  {found['wall_p50_us']:>11.0f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
