"""LoCoMo dev, in process: candidate-generation and query variants against the default settings.

Issue 16 (item 3) asks for more evidence per token on multi-hop and open-domain questions,
whose missed evidence mostly shares no word with the question. This script measures the
variants of ``bench/lib/query_variants.py`` on the candidates the chat pipeline gets by default
(``top_k`` 50 hybrid hits, the lexical branch's hits beyond them (adr/0136) and the neighbour
turns of the first 10 dialog hits, adr/0122), each
at several token prices, so that a variant is compared with the default at matched median
block tokens (every variant so far moves along the same recall-per-token curve; adr/0129):

- ``default``: the candidates and the question as the product has them;
- ``feedback``: plus up to ``FEEDBACK_MORE`` new hits of a second hybrid search for the
  question and its first ``FEEDBACK_TOP`` hits' texts (embedded together);
- ``fused``: the neighbour turns' seeds in the store's fused order, not by similarity;
- ``rare``: the packer's overlap counts ``RARE_COUNT`` more words, the rarest of the best-ranked
  candidate's;
- ``similar``: ... counts the candidate words within cosine ``SIMILAR_COSINE`` of a question
  word in the shipped static model.

Each row: the share of evidence the candidates hold, recall per category (%), the median
block tokens, and the variant's extra work per question (p50 ms, in process, its own step
only: a second search, a word expansion). The LoCoMo data is read in place (CC BY-NC 4.0).

Run: ``.venv/bin/python bench/locomo_variants.py --prices 0.02,0.026,0.03,0.034``; ``--smoke``
(one conversation, one price) for CI.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib import query_variants as qv
from bench.lib import stats
from bench.lib.locomo_data import CATEGORIES, mean_by_category, questions
from bench.locomo import DEFAULT_DATA
from bench.locomo_replay import (
    ENCODING,
    TENANT,
    carried,
    conversations,
    imported,
    neighbours,
    numbers,
    replay,
)
from bench.store import NOW
from proxy.context.assembler import AssemblerConfig, assemble
from proxy.context.records import Candidate
from proxy.context.render import BlockTokens
from proxy.defaults import LEXICAL_CANDIDATES, MEMORY_MAX_TOKENS, NEIGHBOUR_CANDIDATES
from proxy.memory.embedders import StaticEmbedder
from proxy.memory.near import ranked
from proxy.memory.store import SearchQuery
from proxy.tokenizer import tiktoken_tokenizer

TOP_K = 50  # memory.top_k's default (proxy/settings.py)
FEEDBACK_TOP, FEEDBACK_MORE = 3, 10
RARE_TOP, RARE_COUNT = 1, 2
SIMILAR_COSINE = 0.6
VARIANTS = ("default", "feedback", "fused", "rare", "similar")


@dataclass
class Variant:
    """One variant's candidates and assembly texts per question, and its extra seconds."""

    found: list[list[Candidate]] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    extra: list[float] = field(default_factory=list)


class WordVectors:
    """The shipped model's vector of single words, memoised (a word recurs across questions)."""

    def __init__(self, model: StaticEmbedder) -> None:
        self._model = model
        self._rows: dict[str, np.ndarray] = {}

    def __call__(self, words: Sequence[str]) -> np.ndarray:
        missing = [word for word in words if word not in self._rows]
        if missing:
            self._rows.update(zip(missing, self._model.embed_sync(missing), strict=True))
        return np.array([self._rows[word] for word in words])


def timed(work: Callable[[], Any], into: list[float]) -> Any:
    """``work()``, its seconds appended to ``into``."""
    started = time.perf_counter()
    result = work()
    into.append(time.perf_counter() - started)
    return result


async def collect(
    samples: Sequence[dict[str, Any]], wanted: Sequence[str], tokens: BlockTokens
) -> tuple[list[Any], dict[str, Variant]]:
    """Every question of categories 1-4 and each wanted variant's candidates and texts."""
    model = StaticEmbedder()
    words = WordVectors(model)
    asked = [q for sample in samples for q in questions(sample, CATEGORIES)]
    vectors = model.embed_sync([q.text for q in asked])
    out = {name: Variant() for name in wanted}
    with tempfile.TemporaryDirectory(prefix="memproxy-variants-") as tmp:
        store = await imported(tmp, samples, model)
        try:
            for question, vector in zip(asked, vectors, strict=True):
                query = SearchQuery(
                    vector,
                    question.text,
                    question.sample_id,
                    None,
                    TOP_K,
                    lexical=LEXICAL_CANDIDATES,
                )
                found = await store.search(TENANT, query)
                hits = ranked(found)
                # The first dialog hits of ``hits``, which is by similarity: the product's seeds.
                seeds = qv.fused_seeds(hits, query.user, NEIGHBOUR_CANDIDATES)
                base = await neighbours(store, query, hits, seeds)
                for name, variant in out.items():
                    pool, text = base, question.text
                    if name == "feedback":
                        started = time.perf_counter()
                        more = qv.feedback_text(question.text, hits, FEEDBACK_TOP)
                        again = SearchQuery(
                            model.embed_sync([more])[0], more, query.user, None, FEEDBACK_MORE
                        )
                        have = {hit.record.id for hit in base}
                        extra = [
                            h for h in await store.search(TENANT, again) if h.record.id not in have
                        ]
                        variant.extra.append(time.perf_counter() - started)
                        pool = [*base, *extra]
                    elif name == "fused":
                        fused = qv.fused_seeds(found, query.user, NEIGHBOUR_CANDIDATES)
                        pool = await neighbours(store, query, hits, fused)
                        variant.extra.append(0.0)  # the same calls, other seeds
                    elif name == "rare":
                        order = assemble(
                            base, text, MEMORY_MAX_TOKENS, now=NOW, tokens=tokens
                        ).ranked.candidates
                        picked = timed(
                            functools.partial(
                                qv.rare_words, text, order, base, RARE_TOP, RARE_COUNT
                            ),
                            variant.extra,
                        )
                        text = " ".join([text, *picked])
                    elif name == "similar":
                        picked = timed(
                            functools.partial(qv.similar_words, text, base, words, SIMILAR_COSINE),
                            variant.extra,
                        )
                        text = " ".join([text, *picked])
                    variant.found.append(pool)
                    variant.queries.append(text)
        finally:
            await store.close()
    return asked, out


def rows(
    asked: Sequence[Any], variants: dict[str, Variant], prices: Sequence[float], tokens: BlockTokens
) -> list[dict[str, Any]]:
    """One row per (variant, price)."""
    out = []
    for name, variant in variants.items():
        held = mean_by_category(
            (q.category, carried(q, c)) for q, c in zip(asked, variant.found, strict=True)
        )
        extra = stats.summarize_ms(variant.extra)["p50"] if variant.extra else 0.0
        for price in prices:
            row: dict[str, Any] = {"variant": name, "price": price}
            row["candidates"] = statistics.mean(len(c) for c in variant.found)
            row.update(held=100 * held["overall"], extra_ms_p50=extra)
            config = AssemblerConfig(token_price=price)
            out.append({**row, **replay(asked, variant.found, config, tokens, variant.queries)})
    return out


def main(argv: Sequence[str] | None = None) -> None:
    """Collect every variant's candidates once, then one row per (variant, price)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--prices", default="0.026,0.03,0.034", help="token prices (comma list)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma list")
    parser.add_argument("--smoke", action="store_true", help="one conversation, one price")
    args = parser.parse_args(argv)
    wanted = [name for name in args.variants.split(",") if name]
    unknown = sorted(set(wanted) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; choose from {list(VARIANTS)}")
    samples = conversations(args.data, smoke=args.smoke, name="locomo variants")
    if samples is None:
        return
    prices = numbers(args.prices, float)
    if args.smoke:
        samples, prices = samples[:1], prices[:1]
    tokens = BlockTokens(ENCODING, tiktoken_tokenizer().counter(ENCODING), lines_kept=20_000)
    asked, variants = asyncio.run(collect(samples, wanted, tokens))
    print(f"{len(asked)} questions, {len(samples)} conversations; recall %, in process")
    names = ["overall", *CATEGORIES.values()]
    columns = ["variant", "price", "candidates", "held", "extra_ms_p50"]
    print(
        stats.format_table(
            rows(asked, variants, prices, tokens), [*columns, *names, "median_tokens"]
        )
    )


if __name__ == "__main__":
    main()
