"""Validation cost of a memories write: a 1,000-memory batch through the input models.

Times ``parse_write_body`` (what ``POST /v1/memories`` and ``service.add`` run on a decoded
body, ``proxy.memory.parsing``) on batches of ``MAX_BATCH_MEMORIES`` memories with every field
set (real text by default, ``bench/lib/realtext.py``; ``--text synthetic``). With ``--against
REV`` the hand-written validation of git revision REV (its ``proxy/memory/inputs.py``, from
before adr/0091) runs on the same batches, interleaved round by round with the order swapped
each round, so the ratio comes from one run on one machine state. Run:
``.venv/bin/python bench/validation.py --against 4bb4043`` (~10 s); ``--smoke`` (a few rounds).
The machine is shared with other work: read the ratio, not the absolute times.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.lib import realtext  # noqa: E402
from bench.lib.memories import synthetic_memories  # noqa: E402
from proxy.memory.inputs import MAX_BATCH_MEMORIES  # noqa: E402
from proxy.memory.parsing import parse_write_body  # noqa: E402

ROUNDS = 40
SMOKE_ROUNDS = 3
MAX_CONTENT_CHARS = 8000
Validate = Callable[[dict[str, Any]], list[Any]]


def batch_bodies(text: str, rounds: int) -> list[dict[str, Any]]:
    """One ``{"memories": [...]}`` body per round, each with its own ids (every field set)."""
    items = (
        realtext.RealText().memories(MAX_BATCH_MEMORIES, user="bench-user")
        if text == "real"
        else synthetic_memories(MAX_BATCH_MEMORIES, user="bench-user")
    )
    return [
        {
            "memories": [
                {**item, "id": f"r{n}-{i}", "usefulness": 0.5} for i, item in enumerate(items)
            ]
        }
        for n in range(rounds)
    ]


def validation_at(revision: str) -> Validate:
    """``parse_write_body`` of ``proxy/memory/inputs.py`` at a git revision (loaded from git)."""
    source = subprocess.run(
        ["git", "show", f"{revision}:proxy/memory/inputs.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    spec = importlib.util.spec_from_loader(f"inputs_at_{revision}", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    exec(compile(source, f"{revision}:proxy/memory/inputs.py", "exec"), module.__dict__)
    parse: Callable[..., list[Any]] = module.parse_write_body
    return lambda body: parse(body, max_content_chars=MAX_CONTENT_CHARS)


def current(body: dict[str, Any]) -> list[Any]:
    """Today's validation."""
    return parse_write_body(body, max_content_chars=MAX_CONTENT_CHARS)


def measure(ways: dict[str, Validate], bodies: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Seconds per batch for each way, interleaved (order swapped every round)."""
    names = list(ways)
    for name in names:  # warm up: first calls build caches (pydantic, regexes)
        assert len(ways[name](bodies[0])) == MAX_BATCH_MEMORIES
    times: dict[str, list[float]] = {name: [] for name in names}
    for n, body in enumerate(bodies):
        for name in names if n % 2 == 0 else reversed(names):
            started = time.perf_counter()
            ways[name](body)
            times[name].append(time.perf_counter() - started)
    return times


def main() -> None:
    """Time the validation of 1,000-memory batches and print per-batch medians (and ratio)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", metavar="REV", help="also time this revision's validation")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--text", choices=("real", "synthetic"), default="real")
    parser.add_argument("--smoke", action="store_true", help="a few rounds, seconds")
    args = parser.parse_args()
    text = args.text
    if text == "real" and not realtext.available():
        if not args.smoke:
            raise SystemExit(f"real text needs the LoCoMo data at {realtext.LOCOMO_PATH}")
        text = "synthetic"
    bodies = batch_bodies(text, SMOKE_ROUNDS if args.smoke else args.rounds)
    ways: dict[str, Validate] = {"current": current}
    if args.against:
        ways[args.against] = validation_at(args.against)
    times = measure(ways, bodies)
    print(
        f"validation of {MAX_BATCH_MEMORIES:,}-memory batches ({text} text), {len(bodies)} rounds"
    )
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, median in medians.items():
        per_memory = median / MAX_BATCH_MEMORIES * 1e6
        print(f"  {name:<12} {median * 1e3:8.2f} ms per batch  {per_memory:6.2f} us per memory")
    if args.against:
        print(f"  current / {args.against}: {medians['current'] / medians[args.against]:.2f}")


if __name__ == "__main__":
    main()
