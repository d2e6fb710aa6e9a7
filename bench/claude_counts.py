"""Assemble time of a Claude request with and without the memories' stored Claude counts.

A ``/v1/messages`` request for a Claude model assembles in the ``claude`` encoding. Memories
written before they kept a Claude count (``proxy/tokenizer.py``, ``count_all``) had every
candidate's content counted again in each request; memories written now carry it. This times
``assemble`` as the pipeline runs it (its default settings, one memoising ``BlockTokens`` per
variant, as the pipeline keeps one per encoding) on 50 real-text candidates per request
(``bench/lib/realtext.py``: LoCoMo memories, a new question each request), three variants
interleaved request by request in a rotating order, so a shared machine's drift hits all alike:

- ``chat``: o200k_base, stored counts (a chat request for gpt-4o);
- ``messages-recount``: ``claude``, records without a Claude count (before);
- ``messages-stored``: ``claude``, records with it (after).

    .venv/bin/python bench/claude_counts.py --requests 400
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib import stats
from bench.lib.realtext import NOW, RealText
from proxy.claude_tokenizer import CLAUDE
from proxy.context.assembler import AssemblerConfig, assemble
from proxy.context.records import Candidate, MemoryRecord
from proxy.context.render import BlockTokens
from proxy.context.tokens import O200K, STORED_ENCODINGS
from proxy.defaults import NEIGHBOUR_WINDOW_S
from proxy.pipeline.pipeline import LINE_CACHE_ENTRIES
from proxy.settings import MemorySettings
from proxy.tokenizer import count_all, tiktoken_tokenizer

CANDIDATES = 50
POOL = 2_000  # real LoCoMo memories the candidates are drawn from


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    source = RealText()
    tokenizer = tiktoken_tokenizer()
    tokenizer.warm()
    settings = MemorySettings()
    config = AssemblerConfig(
        packer=settings.packer,
        max_tokens=None,
        token_price=settings.token_price if settings.budget_rule == "adaptive" else 0.0,
        absolute_overlap=settings.budget_rule == "adaptive",
        neighbour_window=NEIGHBOUR_WINDOW_S if settings.neighbour_turns else -1.0,
    )
    rng = random.Random(args.seed)
    stored = [
        MemoryRecord(
            f"m{i}",
            "t",
            "u",
            kind,
            text,
            NOW - timedelta(hours=rng.randint(1, 9_000)),
            tokens=count_all(text),
        )
        for i, (kind, text) in enumerate(source.texts(POOL))
    ]
    # Before: the counts memories kept until they kept Claude's too.
    old = [
        replace(r, tokens={k: v for k, v in r.tokens.items() if k in STORED_ENCODINGS})
        for r in stored
    ]
    variants = {
        "chat": (
            stored,
            BlockTokens(O200K, tokenizer.counter(O200K), lines_kept=LINE_CACHE_ENTRIES),
        ),
        "messages-recount": (
            old,
            BlockTokens(CLAUDE, tokenizer.counter(CLAUDE), lines_kept=LINE_CACHE_ENTRIES),
        ),
        "messages-stored": (
            stored,
            BlockTokens(CLAUDE, tokenizer.counter(CLAUDE), lines_kept=LINE_CACHE_ENTRIES),
        ),
    }
    names = list(variants)
    timings: dict[str, list[float]] = {name: [] for name in names}
    questions = itertools.islice(source.questions(), args.requests)
    for index, question in enumerate(questions):
        picks = rng.sample(range(POOL), CANDIDATES)
        similarities = sorted((rng.uniform(0.2, 0.9) for _ in picks), reverse=True)
        order = names[index % len(names) :] + names[: index % len(names)]
        for name in order:
            records, tokens = variants[name]
            hits = [Candidate(records[i], s) for i, s in zip(picks, similarities, strict=True)]
            started = time.perf_counter()
            assemble(
                hits,
                query=question,
                budget=settings.max_tokens,
                now=NOW,
                tokens=tokens,
                config=config,
            )
            timings[name].append((time.perf_counter() - started) * 1000.0)
    report = {
        name: {
            "p50_ms": round(stats.percentile(values, 50), 3),
            "p90_ms": round(stats.percentile(values, 90), 3),
        }
        for name, values in timings.items()
    }
    p50 = {name: report[name]["p50_ms"] for name in names}
    report["ratio_recount_to_stored_p50"] = round(
        p50["messages-recount"] / p50["messages-stored"], 2
    )
    report["ratio_stored_to_chat_p50"] = round(p50["messages-stored"] / p50["chat"], 2)
    report["requests"] = args.requests
    report["candidates"] = CANDIDATES
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
