"""How long does capture hold the event loop? Loop lag while captured turns are written.

One process per tree and case, in process (no HTTP): a store seeded with ``--memories``
real-text memories (``bench/lib/realtext.py``), the ``Pipeline`` with the ``MemoryService``
writer as served, and a ticker coroutine that wakes every millisecond and records how late it
woke (what any other request on the loop would wait). Each turn asks a new LoCoMo question with
``X-Memory-Capture: turn`` through ``Pipeline.prepare``, then its ``on_complete`` hook reads an
answer of ``--words`` words (gzip-compressed, as OpenAI sends it; streamed one word an event, or
whole) and writes the turn, as ``completion_hook`` does after a response; turns run back to
back with 3 ms between them. Reported per tree and case: ticker lag p50 / p99 / max, the event
loop thread's CPU per turn, the hook's wall time, the store size after the run.
``--baseline-tree`` runs the same cases from another source tree, the trees alternating case by
case and round by round (compare within one run: the machine is shared).

    .venv/bin/python bench/capture_lag.py --baseline-tree /tmp/main-tree
    .venv/bin/python bench/capture_lag.py --smoke       # seconds, for CI
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

# A child (``--child``) imports the tree its PYTHONPATH names, not this file's.
if __package__ in (None, "") and "--child" not in sys.argv:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib import realtext, stats

TICK_S = 0.001
GAP_S = 0.003  # between two turns: the loop idles, as between requests
GZIP_WBITS = 31
CASES = (("stream", 1000), ("whole", 300))  # (answer shape, words)
MODEL = "gpt-4o-mini"


def gzipped(pieces: list[bytes]) -> list[bytes]:
    """``pieces`` as one gzip stream flushed piece by piece (a compressed SSE stream)."""
    coder = zlib.compressobj(wbits=GZIP_WBITS)
    out = [coder.compress(piece) + coder.flush(zlib.Z_SYNC_FLUSH) for piece in pieces]
    return [*out, coder.flush()]


def answer_pieces(text: str, stream: bool) -> list[bytes]:
    """An OpenAI chat answer of ``text``: one SSE event a word, or one whole body."""
    if not stream:
        message = {"role": "assistant", "content": text}
        body = {
            "object": "chat.completion",
            "model": MODEL,
            "choices": [{"index": 0, "message": message}],
        }
        return [json.dumps(body).encode()]
    events = []
    for word in text.split():
        choice = {"index": 0, "delta": {"content": word + " "}, "finish_reason": None}
        chunk = {"object": "chat.completion.chunk", "model": MODEL, "choices": [choice]}
        events.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    return [*events, b"data: [DONE]\n\n"]


async def one_case(stream: bool, words: int, turns: int, memories: int) -> dict[str, Any]:
    """Run ``turns`` captured turns with the ticker; the row of this tree and case."""
    from bench import pipeline as bench_pipeline
    from proxy.apis.answer import Answer, completion_hook
    from proxy.apis.openai_chat import OPENAI_CHAT
    from proxy.cache.local import LocalCache
    from proxy.cache.request_cache import RequestCache
    from proxy.context.allocation import BudgetCalculator
    from proxy.context.limits import ModelLimits
    from proxy.memory.edge import EdgeStore
    from proxy.memory.embedders import StaticEmbedder
    from proxy.memory.service import MemoryService
    from proxy.metrics import Metrics
    from proxy.pipeline.pipeline import Pipeline
    from proxy.settings import load_settings
    from proxy.tenancy import TenantResolver
    from proxy.tokenizer import tiktoken_tokenizer

    embedder = StaticEmbedder()
    with tempfile.TemporaryDirectory(prefix="mp-capture-lag-") as where:
        store = await EdgeStore.open(where, dimensions=embedder.dimensions)
        try:
            tenant = bench_pipeline.bench_tenant()
            await bench_pipeline.seed_store(store, embedder, tenant, memories, "real")
            settings = load_settings(env={})
            owner = TenantResolver(settings).for_key(bench_pipeline.API_KEY)
            cache = RequestCache(LocalCache(10_000), shared_retrievals=False)
            service = MemoryService(store, embedder, cache)
            spawned: list[Any] = []
            pipeline = Pipeline(
                settings.memory,
                calculator=BudgetCalculator(ModelLimits(), tiktoken_tokenizer(), memory_cap=None),
                retriever=service.retriever,
                counts=cache,
                writer=service,
                metrics=Metrics(),
                spawn=spawned.append,
            )
            corpus = realtext.RealText()
            filler = [m["content"] for m in corpus.memories(memories + 1_000, user="")][memories:]
            questions = corpus.questions()
            hooks = []
            for n in range(turns):
                question = next(questions)
                body = {"model": MODEL, "stream": stream}
                body["messages"] = [{"role": "user", "content": question}]
                headers = {"x-memory-capture": "turn"}
                prepared = await pipeline.prepare(owner, headers, body, OPENAI_CHAT)
                for job in spawned:  # cache writes: not what is measured
                    job.close()
                spawned.clear()
                text = " ".join(f"{question} {' '.join(filler[n : n + 40])}".split()[:words])
                chunks = gzipped(answer_pieces(text, stream))
                answer = Answer(200, stream, True, chunks, ((b"content-encoding", b"gzip"),))
                assert prepared.on_complete is not None
                hooks.append(
                    (completion_hook(OPENAI_CHAT.read_completion, prepared.on_complete), answer)
                )
            lags: list[float] = []
            done = asyncio.Event()

            async def ticker() -> None:
                loop = asyncio.get_running_loop()
                while not done.is_set():
                    due = loop.time() + TICK_S
                    await asyncio.sleep(TICK_S)
                    lags.append(max(0.0, loop.time() - due) * 1000)

            ticking = asyncio.create_task(ticker())
            await asyncio.sleep(0.01)
            lags.clear()
            cpu, walls = [], []
            for hook, answer in hooks:
                cpu0, wall0 = time.thread_time(), time.perf_counter()
                await hook(answer)
                cpu.append((time.thread_time() - cpu0) * 1000)
                walls.append((time.perf_counter() - wall0) * 1000)
                await asyncio.sleep(GAP_S)
            done.set()
            await ticking
            size = await store.count(tenant)
        finally:
            await store.close()
    lag = stats.summarize_ms([ms / 1000 for ms in lags])
    return {
        "answer": "stream" if stream else "whole",
        "words": words,
        "lag_p50_ms": lag["p50"],
        "lag_p99_ms": lag["p99"],
        "lag_max_ms": max(lags),
        "loop_cpu_ms_p50": stats.percentile(cpu, 50),
        "hook_p50_ms": stats.percentile(walls, 50),
        "store_after": size,
    }


def run_case(tree: Path, stream: bool, words: int, turns: int, memories: int) -> dict[str, Any]:
    """``one_case`` in a child process running ``tree``'s code."""
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        "stream" if stream else "whole",
    ]
    argv += [str(words), str(turns), str(memories)]
    done = subprocess.run(argv, cwd=tree, env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    """Run every case for every tree, interleaved; print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--smoke", action="store_true", help="seconds, for CI")
    parser.add_argument("--turns", type=int, default=150, help="captured turns per case")
    parser.add_argument("--memories", type=int, default=2_000, help="seeded store size")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--baseline-tree", type=Path, help="also run this source tree")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        shape, words, turns, memories = args.child
        row = asyncio.run(one_case(shape == "stream", int(words), int(turns), int(memories)))
        print(json.dumps(row))
        return
    if not realtext.available():
        if args.smoke:
            print("LoCoMo data absent: capture_lag smoke skipped", file=sys.stderr)
            return
        raise SystemExit(f"real text needs the LoCoMo data at {realtext.LOCOMO_PATH}")
    here = Path(__file__).resolve().parents[1]
    trees = {"this tree": here}
    if args.baseline_tree is not None:
        trees["baseline"] = args.baseline_tree
    turns, memories = (10, 200) if args.smoke else (args.turns, args.memories)
    cases = [("stream", 50), ("whole", 50)] if args.smoke else list(CASES)
    rows = []
    for round_no in range(args.rounds):
        for index, (shape, words) in enumerate(cases):
            names = list(trees) if (round_no + index) % 2 == 0 else list(trees)[::-1]
            for name in names:
                row = run_case(trees[name], shape == "stream", words, turns, memories)
                rows.append({"tree": name, "round": round_no + 1, **row})
                print(
                    f"  {name} {shape} {words} words: lag p99 {row['lag_p99_ms']:.2f} ms",
                    file=sys.stderr,
                )
    print(stats.format_table(rows))


if __name__ == "__main__":
    main()
