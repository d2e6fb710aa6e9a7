"""LoCoMo evidence recall, replayed in process: which candidates, and which rule picks from them.

``bench/locomo.py`` measures what the served defaults inject; this script finds out why. It
imports the LoCoMo conversations (the dev split by default; CC BY-NC 4.0: read in place, never
copied) into an embedded store as ``bench/store.py --recall`` does, keeps every question's
hybrid candidates for each pool size, then replays ``assemble`` on them under each variant:
the token price, and neighbour turns on or off (ADR 0114). It reports the share of evidence
the pool holds, the recall of what is packed (per category) and the median block tokens. One
pass costs seconds, so rules can be compared on the same candidates; the served run differs by
up to ~1 point (its store is another import).

Run: ``.venv/bin/python bench/locomo_replay.py --pools 50,100 --prices 0.02,0.022,0.033``;
``--smoke`` (one conversation, one pool and price) for CI.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib import stats
from bench.lib.locomo_data import CATEGORIES, evidence_recall, mean_by_category, questions
from bench.locomo import DEFAULT_DATA
from bench.store import NOW, locomo_records
from proxy.context.assembler import AssemblerConfig, assemble
from proxy.context.records import Candidate
from proxy.context.render import BlockTokens
from proxy.defaults import MEMORY_MAX_TOKENS, NEIGHBOUR_WINDOW_S
from proxy.memory.edge import EdgeStore
from proxy.memory.embedders import StaticEmbedder
from proxy.memory.retriever import ranked
from proxy.memory.store import SearchQuery
from proxy.tokenizer import tiktoken_tokenizer

ENCODING = "o200k_base"  # gpt-4o's, as bench/locomo.py asks
TENANT = "locomo"


async def candidates(
    samples: Sequence[dict[str, Any]], pools: Sequence[int]
) -> tuple[list[Any], dict[int, list[list[Candidate]]]]:
    """Every question of categories 1-4 and its ranked hybrid candidates for each pool size."""
    embedder = StaticEmbedder()
    asked = [q for sample in samples for q in questions(sample, CATEGORIES)]
    vectors = embedder.embed_sync([q.text for q in asked])
    found: dict[int, list[list[Candidate]]] = {}
    with tempfile.TemporaryDirectory(prefix="memproxy-replay-") as tmp:
        store = await EdgeStore.open(tmp, dimensions=embedder.dimensions, optimize_after=None)
        try:
            for sample in samples:
                records = locomo_records(sample)
                await store.add(records, embedder.embed_sync([r.content for r in records]))
            for pool in pools:
                found[pool] = [
                    ranked(
                        await store.search(TENANT, SearchQuery(v, q.text, q.sample_id, None, pool))
                    )
                    for q, v in zip(asked, vectors, strict=True)
                ]
        finally:
            await store.close()
    return asked, found


def carried(question: Any, memories: Sequence[Candidate]) -> float:
    """Evidence recall of ``memories`` for ``question``."""
    return evidence_recall(question.evidence, [{"metadata": m.record.metadata} for m in memories])


def replay(
    asked: Sequence[Any], pool: list[list[Candidate]], config: AssemblerConfig, tokens: BlockTokens
) -> dict[str, Any]:
    """Recall per category (%) and block tokens of ``config`` on every question's ``pool``."""
    pairs, sizes = [], []
    for question, hits in zip(asked, pool, strict=True):
        packed = assemble(
            hits, question.text, MEMORY_MAX_TOKENS, now=NOW, tokens=tokens, config=config
        )
        pairs.append((question.category, carried(question, packed.memories)))
        sizes.append(packed.rendered_tokens)
    row: dict[str, Any] = {k: 100 * v for k, v in mean_by_category(pairs).items()}
    row["median_tokens"] = statistics.median(sizes)
    return row


def main(argv: Sequence[str] | None = None) -> None:
    """Collect candidates once, then print one row per (pool, price, neighbours)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--pools", default="50,100", help="candidates per question (comma list)")
    parser.add_argument("--prices", default="0.02,0.022", help="token prices (comma list)")
    parser.add_argument(
        "--smoke", action="store_true", help="one conversation, one pool, one price"
    )
    args = parser.parse_args(argv)
    if not args.data.is_file():
        if args.smoke:  # the data set is external (never in the repo)
            print(f"locomo replay smoke SKIPPED (no LoCoMo data at {args.data})")
            return
        raise SystemExit(f"LoCoMo data not found at {args.data}")
    samples = json.loads(args.data.read_text())
    pools = [int(p) for p in args.pools.split(",") if p]
    prices = [float(p) for p in args.prices.split(",") if p]
    if args.smoke:
        samples, pools, prices = samples[:1], pools[:1], prices[:1]
    asked, found = asyncio.run(candidates(samples, pools))
    tokens = BlockTokens(ENCODING, tiktoken_tokenizer().counter(ENCODING), lines_kept=20_000)
    rows = []
    for pool in pools:
        held = mean_by_category(
            (q.category, carried(q, c)) for q, c in zip(asked, found[pool], strict=True)
        )
        for price in prices:
            for window in (-1.0, NEIGHBOUR_WINDOW_S):
                config = AssemblerConfig(token_price=price, neighbour_window=window)
                row = {"pool": pool, "held": 100 * held["overall"], "price": price}
                row["neighbours"] = "on" if window >= 0 else "off"
                rows.append({**row, **replay(asked, found[pool], config, tokens)})
    names = ["overall", *CATEGORIES.values()]
    print(f"{len(asked)} questions, {len(samples)} conversations; recall %, in process")
    print(
        stats.format_table(rows, ["pool", "held", "price", "neighbours", *names, "median_tokens"])
    )


if __name__ == "__main__":
    main()
