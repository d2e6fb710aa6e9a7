"""Generations in a file several processes map: bumps seen by every handle, none lost."""

from __future__ import annotations

import asyncio
import multiprocessing
from pathlib import Path

from proxy.cache.shared_generations import SharedGenerations

BUMPS_PER_PROCESS = 200


async def test_a_bump_through_one_handle_is_seen_by_another(tmp_path: Path) -> None:
    one, two = SharedGenerations(tmp_path / "g"), SharedGenerations(tmp_path / "g")
    before = await two.current("acme")
    assert await one.bump("acme") == before + 1  # type: ignore[operator]
    assert await two.current("acme") == before + 1  # type: ignore[operator]
    assert await two.current("other") == 0
    one.close()
    two.close()


async def test_counters_survive_reopening(tmp_path: Path) -> None:
    """Never reset: a restarted worker must not meet a number an earlier result was keyed by."""
    first = SharedGenerations(tmp_path / "g")
    await first.bump("acme")
    first.close()
    again = SharedGenerations(tmp_path / "g")
    assert await again.current("acme") == 1
    again.close()


def _bump_many(path: str) -> None:
    generations = SharedGenerations(path)

    async def bump() -> None:
        for _ in range(BUMPS_PER_PROCESS):
            await generations.bump("acme")

    asyncio.run(bump())
    generations.close()


def test_concurrent_bumps_from_processes_all_count(tmp_path: Path) -> None:
    path = str(tmp_path / "g")
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_bump_many, args=(path,)) for _ in range(3)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    generations = SharedGenerations(path)
    assert asyncio.run(generations.current("acme")) == 3 * BUMPS_PER_PROCESS
    generations.close()
