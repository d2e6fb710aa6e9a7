"""What is left inside the memory stage, part by part, and does a change keep every block?

Two modes, each over one store of ``--memories`` real-text memories seeded and indexed as
``bench/pipeline.py`` seeds it (with this tree's code), copied afresh for each child process,
reopened and warmed as a served process opens it; ``--questions`` new LoCoMo questions go
through ``Pipeline.prepare`` after 20 warm-up ones, as ``bench/pipeline.py``'s part 2 sends them.

- ``--parts`` (this tree): where a request's memory stage goes. The engine's calls are timed
  one by one and named by what asks for them (the dense branch, the BM25 branch, the dense
  cosines of the lexical-only hits by id, the neighbour turns' cosines by id, an engine
  neighbour lookup); the search's own Python is the rest of ``_search_near_sync``; assemble's
  steps are its module-level calls, timed in place, and the rest of the call. Each figure is
  p50 and mean microseconds a request (a step a request does not run counts 0 in the mean).
  Timers cost ~0.2 us a call: read shares, not absolutes.
- ``--baseline-tree DIR`` (A/B): runs alternate between that tree (a ``git archive`` of another
  commit) and this one, in the order A B B A, ``--runs`` times each. A run reports the
  Server-Timing p50 of the search, assemble and memory stages, and the thread CPU of a
  ``prepare`` (``time.thread_time``: the loop's own work; the engine's pool works on its
  threads). Every run also digests each request's forwarded body (``Prepared.encoded``, the
  bytes sent upstream) with its ``X-Memory-Injected`` and ``X-Memory-Tokens``: the bench fails
  unless every run of every tree injected the same bytes for every question.

    .venv/bin/python bench/stage_parts.py --smoke                          # seconds, for CI
    .venv/bin/python bench/stage_parts.py --parts                          # 10k memories
    .venv/bin/python bench/stage_parts.py --baseline-tree /tmp/base-X      # A B B A, x2
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

WARM_UP = 20
DEGRADED = "degraded "

# A child process: this code runs in the tree under test (its ``proxy`` and ``bench``).
RUN_IN_TREE = r"""
import asyncio, collections, hashlib, json, statistics, sys, time
from pathlib import Path
from bench import pipeline
from bench.lib import realtext
from proxy.apis.openai_chat import OPENAI_CHAT
from proxy.memory.edge import EdgeStore
from proxy.memory.embedders import StaticEmbedder

where, questions, locomo, parts = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
WARM_UP = int(sys.argv[5])
corpus = realtext.load_corpus(Path(locomo))
realtext.load_corpus = lambda path=locomo: corpus  # the data lives beside this tree, not that
clock = time.perf_counter_ns
spent = collections.Counter()  # this request's ns by part
calls = collections.Counter()  # this request's engine calls by kind
# The engine's calls by what asks for them: search_hits' calls in order, the rest by caller.
BRANCHES = ("engine: dense branch", "engine: BM25 branch", "engine: cosines of lexical-only hits")
CALLERS = {
    "_turns_from_index": "engine: neighbour cosines by id",
    "_turns_once": "engine: neighbour lookup",
}


def timed(label, func):
    def call(*args, **kwargs):
        started = clock()
        try:
            return func(*args, **kwargs)
        finally:
            spent[label] += clock() - started
    return call


class TimedShard:
    # The shard handle with its read calls timed and named by their caller.
    def __init__(self, shard):
        self._shard = shard

    def __getattr__(self, name):
        found = getattr(self._shard, name)
        if name not in ("query", "retrieve", "count", "scroll", "query_batch"):
            return found

        def call(*args, **kwargs):
            frame = sys._getframe(1)
            if frame.f_code.co_name in ("query", "retrieve", "count", "scroll"):
                frame = frame.f_back  # ShardReads' wrappers
            caller = frame.f_code.co_name
            if caller == "search_hits" and name == "query":
                kind = BRANCHES[min(calls["search_hits"], 2)]
                calls["search_hits"] += 1
            else:
                kind = CALLERS.get(caller, f"engine: {name} from {caller}")
            started = clock()
            try:
                return found(*args, **kwargs)
            finally:
                spent[kind] += clock() - started
                calls[kind] += 1
        return call


def instrument(store):
    import proxy.context.assembler as assembler
    import proxy.memory.edge as edge
    import proxy.pipeline.pipeline as chat_pipeline

    maintenance = store._maintenance
    maintenance.shard = TimedShard(maintenance.shard)
    store._search_near_sync = timed("search: _search_near_sync", store._search_near_sync)
    for name in ("search_hits", "ranked", "turns_query", "nearest"):
        setattr(edge, name, timed(f"search: {name}", getattr(edge, name)))
    store._candidates = timed("search: _candidates", store._candidates)
    store._turns_from_index = timed("search: _turns_from_index", store._turns_from_index)
    steps = (
        "normalise_words", "query_forms", "unambiguous", "idf_weights", "final_scores",
        "priorities_of", "shortlist", "dedup_walk", "neighbour_gains", "priced_values",
        "select_optimal", "select_greedy", "render_rows",
    )
    for name in steps:
        if hasattr(assembler, name):
            setattr(assembler, name, timed(f"assemble: {name}", getattr(assembler, name)))

    class TimedMemo:
        def __init__(self, memo):
            self._memo = memo

        def each(self, texts):
            return timed("assemble: text_profile.each", self._memo.each)(texts)

        def __call__(self, text):
            return timed("assemble: text_profile", self._memo)(text)

    assembler.text_profile = TimedMemo(assembler.text_profile)
    chat_pipeline.assemble = timed("assemble", chat_pipeline.assemble)


def p50(values):
    return statistics.median(values) if values else 0.0


async def run():
    embedder = StaticEmbedder()
    store = await EdgeStore.open(where, dimensions=embedder.dimensions)
    try:
        await store.warmed()
        if parts:
            instrument(store)
        chat = pipeline.bench_pipeline(store, embedder)
        tenant = pipeline.bench_tenant_settings()
        build = pipeline.question_bodies("real")(False)
        digests, cpu, stages = [], [], collections.defaultdict(list)
        spent_rows, call_rows = [], []
        for n in range(WARM_UP + questions):
            body = json.loads(build(n))
            spent.clear()
            calls.clear()
            started = time.thread_time()
            prepared = await chat.prepare(tenant, {}, body, OPENAI_CHAT)
            used = time.thread_time() - started
            if n < WARM_UP:
                continue
            headers = prepared.response_headers
            sent = prepared.encoded if prepared.encoded is not None else b""
            seen = f"{headers['X-Memory-Injected']}/{headers['X-Memory-Tokens']}/".encode()
            status = headers["X-Memory-Status"]
            digests.append(f"{status} {hashlib.sha256(seen + sent).hexdigest()}")
            cpu.append(used * 1e6)
            for part in headers["Server-Timing"].split(","):
                name, _, ms = part.strip().partition(";dur=")
                stages[name].append(float(ms) * 1000.0)
            if parts:  # what the timed calls inside a part leave: its own Python
                engine = sum(v for k, v in spent.items() if k.startswith("engine"))
                spent["search: Python (all but the engine)"] = (
                    spent["search: _search_near_sync"] - engine
                )
                steps = sum(v for k, v in spent.items() if k.startswith("assemble: "))
                spent["assemble: the rest"] = spent["assemble"] - steps
                spent_rows.append(dict(spent))
                call_rows.append({k: v for k, v in calls.items() if k != "search_hits"})
        found = {
            "questions": questions,
            "digests": digests,
            "cpu_p50_us": p50(cpu),
            "stages_p50_us": {name: p50(values) for name, values in stages.items()},
        }
        if parts:  # a part a request did not run counts 0 for it
            labels = {label for row in spent_rows for label in row}
            kinds = {kind for row in call_rows for kind in row}
            found["parts"] = {}
            for label in labels:
                values = [row.get(label, 0) / 1000.0 for row in spent_rows]
                count = statistics.fmean([row.get(label, 0) for row in call_rows])
                found["parts"][label] = [
                    p50(values), statistics.fmean(values), count if label in kinds else None
                ]
            found["stages_mean_us"] = {n: statistics.fmean(v) for n, v in stages.items()}
        return found
    finally:
        await store.close()


print(json.dumps(asyncio.run(run())))
"""


def run_in_tree(
    tree: Path, seeded: Path, scratch: Path, questions: int, parts: bool = False
) -> dict[str, object]:
    """One child process of ``tree``'s code on a fresh copy of the seeded store."""
    if scratch.exists():
        shutil.rmtree(scratch)
    shutil.copytree(seeded, scratch)
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    argv = [sys.executable, "-c", RUN_IN_TREE, str(scratch), str(questions)]
    argv += [str(realtext.LOCOMO_PATH), "1" if parts else "0", str(WARM_UP)]
    done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"the run in {tree} failed:\n{done.stderr[-3000:]}")
    found: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages, as ``uptime`` gives them."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def abba(names: list[str], runs: int) -> list[str]:
    """The order of the runs: A B B A, repeated ``runs`` times (``names`` A and B; one name:
    that name ``2 * runs`` times)."""
    if len(names) == 1:
        return names * (2 * runs)
    first, second = names
    return [first, second, second, first] * runs


def differing(digests: dict[str, list[list[str]]]) -> list[int]:
    """The questions whose digest (``"status sha256"``) is not the same in every run of every
    tree. A request degraded in one run (its memory deadline passed on a loaded machine: it
    forwards the client's body) says nothing of the code and is left out (``degraded``)."""
    runs = [run for tree in digests.values() for run in tree]
    if not runs:
        return []
    return [
        i
        for i in range(len(runs[0]))
        if len({run[i] for run in runs if not run[i].startswith(DEGRADED)}) > 1
    ]


def degraded(digests: dict[str, list[list[str]]]) -> int:
    """How many (question, run) pairs degraded."""
    return sum(d.startswith(DEGRADED) for tree in digests.values() for run in tree for d in run)


def print_parts(found: dict[str, object]) -> None:
    """The ``--parts`` table: stages from Server-Timing, then the parts, largest mean first."""
    stages = found["stages_p50_us"]
    means = found.get("stages_mean_us", {})
    assert isinstance(stages, dict)
    assert isinstance(means, dict)
    print("stage (Server-Timing)            p50 us   mean us")
    for name, value in stages.items():
        print(f"{name:<32} {value:>7.1f}  {means.get(name, 0.0):>8.1f}")
    parts = found["parts"]
    assert isinstance(parts, dict)
    print("\npart                                                 p50 us   mean us  calls/req")
    for label, (median, mean, count) in sorted(parts.items(), key=lambda kv: -kv[1][1]):
        calls = f"{count:>9.2f}" if count is not None else ""
        print(f"{label:<52} {median:>7.1f}  {mean:>8.1f}  {calls}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="seconds, for CI")
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--questions", type=int, default=400, help="measured per run")
    parser.add_argument("--runs", type=int, default=2, help="A B B A sequences")
    parser.add_argument("--parts", action="store_true", help="this tree's parts, instrumented")
    parser.add_argument("--baseline-tree", type=Path, help="A/B against this source tree")
    args = parser.parse_args()
    if args.smoke:
        args.memories, args.questions, args.runs = 300, 10, 1
        args.parts = True
    if not realtext.available():
        sys.exit(f"real text needs the LoCoMo data at {realtext.LOCOMO_PATH}")
    here = Path(__file__).resolve().parent.parent
    trees = {"this": here}
    if args.baseline_tree is not None:
        trees = {"baseline": args.baseline_tree, "this": here}
    with tempfile.TemporaryDirectory(prefix="stage-parts-") as scratch_dir:
        scratch = Path(scratch_dir)
        seconds = pipeline.seed_from_tree(here, scratch / "seeded", "real", args.memories)
        print(f"seeded {args.memories} real-text memories in {seconds:.1f} s", flush=True)
        if args.parts:
            print(f"load (1/5/15 min) {load_average()}")
            found = run_in_tree(here, scratch / "seeded", scratch / "copy", args.questions, True)
            print_parts(found)
            if args.baseline_tree is None:
                return
        digests: dict[str, list[list[str]]] = {name: [] for name in trees}
        print(
            "\nrun  tree      load (1/5/15 min)  cpu_p50_us  search_p50  assemble_p50  memory_p50"
        )
        for number, name in enumerate(abba(list(trees), args.runs), 1):
            load = load_average()
            found = run_in_tree(trees[name], scratch / "seeded", scratch / "copy", args.questions)
            run_digests = found["digests"]
            stages = found["stages_p50_us"]
            assert isinstance(run_digests, list)
            assert isinstance(stages, dict)
            digests[name].append(run_digests)
            print(
                f"{number:>3}  {name:<8}  {load:<17}  {found['cpu_p50_us']:>10.0f}"
                f"  {stages.get('search', 0.0):>10.0f}  {stages.get('assemble', 0.0):>12.0f}"
                f"  {stages.get('memory', 0.0):>10.0f}",
                flush=True,
            )
        bad = differing(digests)
        total = len(next(iter(digests.values()))[0])
        print(
            f"forwarded bodies identical in every run: {total - len(bad)} of {total} questions"
            f" ({degraded(digests)} degraded requests, left out)"
        )
        if bad:
            sys.exit(f"the injected bodies differ for questions {bad[:20]}")


if __name__ == "__main__":
    main()
