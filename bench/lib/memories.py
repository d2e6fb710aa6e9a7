"""Synthetic memories for load benchmarks, stored through ``POST /v1/memories``.

The overhead benchmark needs memproxy "with memory on" to search a realistic store (10k memories
for the benchmark user) on every request. The texts are generated from templates with a fixed
seed, so every run stores the same memories; sources and dates vary like a real user's would.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

SEED = 20261122
BATCH = 200
SOURCES_WEIGHTED = (("learnings", 5), ("conversation", 3), ("summaries", 1), ("playbook", 1))
PEOPLE = ("Ana", "Ben", "Chloe", "Dev", "Elif", "Femi", "Grace", "Hiro", "Ines", "Jonas")
PLACES = ("Lisbon", "Osaka", "Nairobi", "Oslo", "Lima", "Toronto", "Hanoi", "Porto", "Cusco")
THINGS = (
    "vegetarian food",
    "window seats",
    "early meetings",
    "dark mode",
    "jazz",
    "hiking boots",
    "Python",
    "spreadsheets",
    "green tea",
    "trail running",
    "sci-fi novels",
    "board games",
)
TEMPLATES = (
    "The user prefers {thing} and mentioned it again on {day}.",
    "{person} is the user's colleague and leads the {place} office.",
    "The user is planning a trip to {place} with {person} in {month}.",
    "The user dislikes {thing}; suggest alternatives when it comes up.",
    "{person} recommended {thing} to the user during a call about the {place} project.",
    "Deadline for the {place} report is {day}; the user asked for a reminder two days before.",
    "The user's budget for the {place} trip is {amount} euros including hotels.",
    "When writing code the user wants examples in {thing_code} with type hints.",
    "The user and {person} talked about {thing} and agreed to revisit it in {month}.",
)
MONTHS = ("January", "March", "May", "July", "September", "November")
CODE = ("Python", "TypeScript", "Go", "Rust")


def _weighted_sources(rng: random.Random) -> str:
    names = [name for name, _ in SOURCES_WEIGHTED]
    weights = [weight for _, weight in SOURCES_WEIGHTED]
    return rng.choices(names, weights)[0]


def synthetic_memories(
    count: int, user: str, now: datetime | None = None, seed: int = SEED
) -> list[dict[str, Any]]:
    """Return ``count`` memory items for ``user``, dated over the year before ``now``."""
    rng = random.Random(seed)
    now = now or datetime.now(UTC)
    items = []
    for index in range(count):
        text = rng.choice(TEMPLATES).format(
            thing=rng.choice(THINGS),
            thing_code=rng.choice(CODE),
            person=rng.choice(PEOPLE),
            place=rng.choice(PLACES),
            month=rng.choice(MONTHS),
            day=f"{rng.randint(1, 28)} {rng.choice(MONTHS)}",
            amount=rng.randrange(300, 5000, 50),
        )
        created = now - timedelta(minutes=rng.randint(0, 365 * 24 * 60))
        items.append(
            {
                "user": user,
                "source": _weighted_sources(rng),
                "content": f"{text} (note {index})",
                "created_at": created.isoformat(),
                "confidence": round(rng.uniform(0.5, 1.0), 2),
                "metadata": {"bench": "synthetic", "n": index},
            }
        )
    return items


def batches(
    items: Sequence[dict[str, Any]], size: int = BATCH
) -> Iterator[Sequence[dict[str, Any]]]:
    """Yield ``items`` in slices of at most ``size``."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def seed_memories(
    base_url: str, items: Sequence[dict[str, Any]], headers: dict[str, str] | None = None
) -> float:
    """Store ``items`` through ``POST /v1/memories`` in batches; return the seconds it took."""
    started = time.perf_counter()
    with httpx.Client(base_url=base_url, headers=headers or {}, timeout=120) as client:
        for batch in batches(items):
            response = client.post("/v1/memories", json={"memories": list(batch)})
            if response.status_code != 201:
                raise RuntimeError(f"seeding failed {response.status_code}: {response.text[:300]}")
    return time.perf_counter() - started
