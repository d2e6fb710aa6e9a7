"""Static embedder speed: load time, size on disk, single-query latency, batch throughput.

Answers four questions about ``proxy.memory.embedders.StaticEmbedder`` (ADR 0020, 0021):

1. How big is the shipped model and how long does it take to load?
2. What does one short query cost: encoding on the event loop ("inline") versus a hop to a
   worker thread (``asyncio.to_thread``)? This decides ``INLINE_MAX_CHARS``.
3. Where does inline stop being cheap: latency by input length.
4. Bulk import: texts/s through ``embed()`` (thread path), and the longest stall the event loop
   sees meanwhile.

Run: ``.venv/bin/python bench/embed.py`` (about a minute), ``--smoke`` for CI (seconds).
The machine is shared with other work: read p99 and the stall figures as noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.stats import format_table, summarize_ms
from proxy.memory.embedders import INLINE_MAX_CHARS, StaticEmbedder, resolve_model_dir

SEED = 20
QUERY = "What did Caroline say about the adoption agencies she was researching?"
LENGTHS = (64, 256, 1_000, 4_000, 16_000)
TICK_S = 0.001


def word_pool(embedder: StaticEmbedder) -> list[str]:
    """Whole-word, alphabetic vocabulary entries, to build realistic synthetic texts."""
    tokens = embedder._model.tokens  # the bench may look inside; the app does not
    return [t for t in tokens if t.isalpha() and len(t) > 2]


def make_texts(words: Sequence[str], count: int, mean_words: int, rng: random.Random) -> list[str]:
    """``count`` sentences of roughly ``mean_words`` words each."""
    return [
        " ".join(rng.choices(words, k=max(1, int(rng.gauss(mean_words, mean_words / 3)))))
        for _ in range(count)
    ]


def time_calls(call: Callable[[], object], repeat: int) -> list[float]:
    """Wall time of ``repeat`` calls, after a short warm-up."""
    for _ in range(min(50, repeat)):
        call()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return samples


async def time_async(make: Callable[[], Awaitable[object]], repeat: int) -> list[float]:
    """Wall time of ``repeat`` awaited coroutines, after a short warm-up."""
    for _ in range(min(50, repeat)):
        await make()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        await make()
        samples.append(time.perf_counter() - started)
    return samples


def bench_load(repeat: int) -> list[dict[str, object]]:
    """Model size on disk and load time (import of model2vec excluded, it is paid once)."""
    path = resolve_model_dir(None)
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    loads = [time_calls(StaticEmbedder, 1)[0] for _ in range(repeat)]
    stats = summarize_ms(loads)
    return [
        {"measure": "model size on disk (MB)", "value": size / 1e6},
        {"measure": f"model load, p50 of {repeat} (ms)", "value": stats["p50"]},
    ]


async def bench_single(embedder: StaticEmbedder, repeat: int) -> list[dict[str, object]]:
    """One short query: encoding alone, inline ``embed()``, and a forced thread hop."""
    rows = []
    cases: list[tuple[str, list[float]]] = [
        ("embed_sync (encoding alone)", time_calls(lambda: embedder.embed_sync([QUERY]), repeat)),
        ("await embed() (inline)", await time_async(lambda: embedder.embed([QUERY]), repeat)),
        (
            "await to_thread(embed_sync)",
            await time_async(lambda: asyncio.to_thread(embedder.embed_sync, [QUERY]), repeat),
        ),
    ]
    for name, samples in cases:
        stats = summarize_ms(samples)
        rows.append({"single query": name, "p50 ms": stats["p50"], "p99 ms": stats["p99"]})
    return rows


def bench_lengths(
    embedder: StaticEmbedder, words: Sequence[str], repeat: int
) -> list[dict[str, object]]:
    """Inline encoding cost by input length, to place the inline/thread threshold."""
    rng = random.Random(SEED)
    rows = []
    for chars in LENGTHS:
        text = " ".join(rng.choices(words, k=chars // 6))[:chars]
        stats = summarize_ms(time_calls(partial(embedder.embed_sync, [text]), repeat))
        path = "inline" if len(text) <= INLINE_MAX_CHARS else "thread"
        rows.append({"chars": chars, "embed_sync p50 ms": stats["p50"], "embed() path": path})
    return rows


async def bench_batch(
    embedder: StaticEmbedder, words: Sequence[str], count: int
) -> list[dict[str, object]]:
    """Bulk throughput through ``embed()`` and the event loop's longest stall meanwhile."""
    texts = make_texts(words, count, mean_words=25, rng=random.Random(SEED))
    stalls: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            started = time.perf_counter()
            await asyncio.sleep(TICK_S)
            stalls.append(time.perf_counter() - started - TICK_S)

    tick = asyncio.create_task(ticker())
    started = time.perf_counter()
    vectors = await embedder.embed(texts)
    elapsed = time.perf_counter() - started
    done.set()
    await tick
    sync_started = time.perf_counter()
    embedder.embed_sync(texts)
    sync_elapsed = time.perf_counter() - sync_started
    stall = summarize_ms(stalls)
    return [
        {"batch": f"{len(texts)} texts via embed()", "texts/s": len(texts) / elapsed},
        {"batch": f"{len(texts)} texts via embed_sync()", "texts/s": len(texts) / sync_elapsed},
        {"batch": "loop stall during embed(), p99 ms", "texts/s": stall["p99"]},
        {"batch": "loop stall during embed(), max ms", "texts/s": stall["max"]},
        {"batch": f"output {vectors.shape} {vectors.dtype}", "texts/s": float(vectors.shape[0])},
    ]


async def run(smoke: bool) -> None:
    """Run every section and print its table."""
    repeat = 200 if smoke else 5_000
    started = time.perf_counter()
    embedder = StaticEmbedder()
    print(f"first load (cold, includes importing model2vec): {time.perf_counter() - started:.2f} s")
    words = word_pool(embedder)
    print(format_table(bench_load(2 if smoke else 5)), end="\n\n")
    print(format_table(await bench_single(embedder, repeat)), end="\n\n")
    print(format_table(bench_lengths(embedder, words, 50 if smoke else 500)), end="\n\n")
    print(format_table(await bench_batch(embedder, words, 2_000 if smoke else 50_000)))


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="a few seconds, for CI")
    args = parser.parse_args(argv)
    asyncio.run(run(args.smoke))


if __name__ == "__main__":
    main()
