"""Claude's tokenizer on real text: its counts against o200k_base and cl100k_base, and its speed.

Every memory LoCoMo's dev conversations make (``bench/lib/locomo_data.build_memories``: dialog
turns, observations, session summaries; CC BY-NC 4.0, read in place) is counted with the
``claude`` encoding (``proxy/claude_tokenizer.py``; raw, before its margin), o200k_base and
cl100k_base. Reports the ratio of the totals, the spread of per-text ratios, and microseconds
per text for each (interleaved rounds; the machine may be shared, compare ratios only). With
the ``tokenizers`` package installed it also checks that every count equals the published
tokenizer file's.

Run: ``.venv/bin/python bench/claude_tokens.py`` (all three conversations) or ``--smoke``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib import locomo_data
from bench.lib.realtext import LOCOMO_PATH
from proxy.bundled_data import claude_tokenizer_file
from proxy.claude_tokenizer import CLAUDE, normalized
from proxy.context.tokens import CL100K, O200K
from proxy.tokenizer import tiktoken_tokenizer

ROUNDS = 3
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def texts_of(path: Path, conversations: int | None) -> list[str]:
    """The contents of every memory of the first ``conversations`` samples (all: ``None``)."""
    samples = json.loads(path.read_text(encoding="utf-8"))[:conversations]
    return [
        str(item["content"])
        for sample in samples
        for item in locomo_data.build_memories(sample, "bench", NOW)
    ]


def timed(count: Callable[[str], int], texts: Sequence[str]) -> tuple[list[int], float]:
    """Counts of ``texts`` and the microseconds per text it took."""
    started = time.perf_counter()
    counts = [count(text) for text in texts]
    return counts, (time.perf_counter() - started) * 1e6 / max(1, len(texts))


def run(args: argparse.Namespace) -> dict[str, object]:
    texts = texts_of(args.data, 1 if args.smoke else None)
    tokenizer = tiktoken_tokenizer()
    claude = tokenizer.encoding(CLAUDE).encode_ordinary
    counters: dict[str, Callable[[str], int]] = {
        "claude_raw": lambda text: len(claude(normalized(text))),
        O200K: tokenizer.counter(O200K),
        CL100K: tokenizer.counter(CL100K),
    }
    counts: dict[str, list[int]] = {}
    micros: dict[str, list[float]] = {name: [] for name in counters}
    for _ in range(1 if args.smoke else ROUNDS):
        for name, count in counters.items():  # interleaved: drift hits all alike
            counts[name], us = timed(count, texts)
            micros[name].append(us)
    total = {name: sum(values) for name, values in counts.items()}
    ratios = [c / o for c, o in zip(counts["claude_raw"], counts[O200K], strict=True) if o >= 20]
    report: dict[str, object] = {
        "texts": len(texts),
        "chars": sum(len(t) for t in texts),
        "tokens": total,
        "claude_raw_over_o200k": round(total["claude_raw"] / total[O200K], 4),
        "claude_raw_over_cl100k": round(total["claude_raw"] / total[CL100K], 4),
        "per_text_ratio_o200k_p5_p50_p95": [
            round(q, 3) for q in statistics.quantiles(ratios, n=20)[::9]
        ]
        if len(ratios) > 20
        else [],
        "us_per_text_median": {n: round(statistics.median(v), 1) for n, v in micros.items()},
    }
    report["matches_published_tokenizer"] = check_reference(texts, counts["claude_raw"])
    return report


def check_reference(texts: Sequence[str], counts: Sequence[int]) -> bool | None:
    """Whether every count equals the published tokenizer's; ``None`` without ``tokenizers``."""
    try:
        import tokenizers
    except ImportError:
        return None
    path = claude_tokenizer_file()
    if path is None:
        return None
    reference = tokenizers.Tokenizer.from_file(str(path))
    return all(
        len(reference.encode(text, add_special_tokens=False).ids) == count
        for text, count in zip(texts, counts, strict=True)
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=LOCOMO_PATH)
    parser.add_argument("--smoke", action="store_true", help="one conversation, one round")
    print(json.dumps(run(parser.parse_args(argv)), indent=2))


if __name__ == "__main__":
    main()
