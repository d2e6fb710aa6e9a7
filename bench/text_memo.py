"""What a ``TextMemo`` lookup costs, a hit and a miss, on real text (adr/0149, adr/0183).

On ``--texts`` real-text memories (``bench/lib/realtext.py``), in one process per tree, the
trees interleaved over ``--rounds``:

- ``miss_ns``: a miss of a full memo (``--entries`` texts; every text new, so each add stores
  one and evicts the oldest) with ``len`` as the function: the memo's own work;
- ``profile_miss_ns``: the same with the real function, ``profiles.split_profile``;
- ``hit_ns``: a text of ``each`` over batches of 70 texts, all kept.

Best of a few passes each (ns a text). The machine is shared: compare trees within one run.

    git -C /work/main archive main | tar -x -C /tmp/memproxy-before
    .venv/bin/python bench/text_memo.py --smoke                         # CI
    .venv/bin/python bench/text_memo.py --baseline-tree /tmp/memproxy-before
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if "--tree" in sys.argv:  # a worker measures the tree it is given
    sys.path.insert(0, sys.argv[sys.argv.index("--tree") + 1])
else:
    sys.path.insert(0, str(ROOT))


def measure(args: argparse.Namespace) -> dict[str, float]:
    """One tree's figures (ns a text)."""
    from bench.lib import realtext
    from proxy.context.profiles import split_profile
    from proxy.context.words import TextMemo

    texts = [text for _, text in realtext.RealText().texts(args.texts)]
    kept, new = texts[: args.entries], texts[args.entries :]

    def misses(func: Callable[[str], Any]) -> float:
        memo = TextMemo(func, maxsize=args.entries)
        memo.each(kept)
        start = time.perf_counter()
        for text in new:
            memo.add(text)
        return (time.perf_counter() - start) / len(new) * 1e9

    def hits() -> float:
        memo = TextMemo(str.split, maxsize=args.entries)
        memo.each(kept)
        batches = [kept[i : i + 70] for i in range(0, len(kept), 70)]
        start = time.perf_counter()
        for batch in batches:
            memo.each(batch)
        return (time.perf_counter() - start) / len(kept) * 1e9

    return {
        "miss_ns": min(misses(len) for _ in range(3)),
        "profile_miss_ns": min(misses(split_profile) for _ in range(2)),
        "hit_ns": min(hits() for _ in range(5)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=30_000)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline-tree", help="a tree to compare with, interleaved")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tree", help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="tiny run for CI")
    args = parser.parse_args()
    if args.smoke:
        args.texts, args.entries, args.rounds = 300, 100, 1
    if args.worker:
        print(json.dumps(measure(args)))
        return
    trees = [str(ROOT)] + ([args.baseline_tree] if args.baseline_tree else [])
    passed = [a for a in sys.argv[1:] if a not in ("--baseline-tree", args.baseline_tree)]
    rows: dict[str, list[dict[str, float]]] = {tree: [] for tree in trees}
    for _ in range(args.rounds):
        for tree in reversed(trees):
            argv = [sys.executable, __file__, *passed, "--worker", "--tree", tree]
            out = subprocess.run(argv, check=True, capture_output=True, text=True, cwd=tree)
            rows[tree].append(json.loads(out.stdout.splitlines()[-1]))
            print(tree, rows[tree][-1], file=sys.stderr)
    for tree, runs in rows.items():
        medians = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        print(f"{tree}: " + "  ".join(f"{key} {value:.0f}" for key, value in medians.items()))


if __name__ == "__main__":
    main()
