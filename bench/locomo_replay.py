"""LoCoMo evidence recall, replayed in process: which candidates, and which rule picks from them.

``bench/locomo.py`` measures what the served defaults inject; this script finds out why. It
imports the LoCoMo conversations (the dev split by default; CC BY-NC 4.0: read in place, never
copied) into an embedded store as ``bench/store.py --recall`` does, keeps every question's
hybrid candidates for each pool size, then replays ``assemble`` on them under each variant:
the token price, and neighbour turns on or off (ADR 0114). It reports the share of evidence
the pool holds, the recall of what is packed (per category) and the median block tokens. One
pass costs seconds, so rules can be compared on the same candidates; the served run differs by
up to ~1 point (its store is another import).

Two candidate-generation experiments (issue 16, item 3), off unless asked:

- ``--seeds N[,M]``: each pool plus the dialog turns beside (same user, at most
  ``NEIGHBOUR_WINDOW_S`` apart) its first N dialog turns in similarity order, scored with their
  own cosine, as ``memory.neighbour_candidates: N`` gets them (ADR 0122); 0: none.
- ``--lexical``: each pool plus the hits of the hybrid search's BM25 branch that the fused
  pool leaves out, as ``memory.lexical_candidates`` gets them (ADR 0136).
- ``--table TOKENIZER.json:WEIGHTS.safetensors``: embed with another static model, a token
  table averaged and normalised (e.g. the wheel of ``wordllama``: ``pip download wordllama
  --no-deps``, unzip, ``wordllama/tokenizers/l2_supercat_tokenizer_config.json`` and
  ``wordllama/weights/l2_supercat_256.safetensors``). Its rows sit beside the shipped model's,
  with each model's single-query embed time (p50 over the questions, the two interleaved).

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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib import stats
from bench.lib.locomo_data import CATEGORIES, evidence_recall, mean_by_category, questions
from bench.locomo import DEFAULT_DATA
from bench.store import NOW, locomo_records
from proxy.context.assembler import AssemblerConfig, assemble
from proxy.context.neighbours import adjacent_turns
from proxy.context.records import Candidate
from proxy.context.render import BlockTokens
from proxy.defaults import MEMORY_MAX_TOKENS, NEIGHBOUR_WINDOW_S
from proxy.memory.edge import EdgeStore
from proxy.memory.embedders import StaticEmbedder, normalise_rows
from proxy.memory.near import ranked
from proxy.memory.store import SearchQuery, TurnsQuery
from proxy.tokenizer import tiktoken_tokenizer

ENCODING = "o200k_base"  # gpt-4o's, as bench/locomo.py asks
TENANT = "locomo"
DIALOG = "conversation"  # the source of dialog turns
SHIPPED = "shipped"  # the row label of the shipped static model


class SyncEmbedder(Protocol):
    """What the replay needs of an embedder: its width and a synchronous ``embed_sync``."""

    dimensions: int

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised float32 rows, one per text."""
        ...


class TableEmbedder:
    """A static model given as one token table: a text is the normalised mean of its tokens'
    rows (what model2vec and wordllama compute), no special tokens, no truncation."""

    def __init__(self, tokenizer: Path, weights: Path) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(str(tokenizer))
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        tables = list(load_file(str(weights)).values())
        if len(tables) != 1 or tables[0].ndim != 2:
            raise SystemExit(f"{weights} must hold exactly one 2-D table")
        self._table = np.asarray(tables[0], dtype=np.float32)
        self.dimensions = int(self._table.shape[1])

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        """One row per text; a text without tokens is the zero row."""
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        encoded = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        for row, tokens in enumerate(encoded):
            if tokens.ids:
                out[row] = self._table[tokens.ids].mean(axis=0)
        return normalise_rows(out)


async def with_neighbours(store: EdgeStore, query: SearchQuery, seeds: int) -> list[Candidate]:
    """The ranked hits of ``query`` and the turns beside its first ``seeds`` dialog hits, as the
    chat pipeline's retriever gets them (``store.turns_near``, ``adjacent_turns``)."""
    hits = ranked(await store.search(TENANT, query))
    first = [hit for hit in hits if hit.record.source == DIALOG][:seeds]
    return await neighbours(store, query, hits, first)


async def neighbours(
    store: EdgeStore, query: SearchQuery, hits: list[Candidate], seeds: list[Candidate]
) -> list[Candidate]:
    """``hits`` and the turns beside ``seeds`` (the retriever's adr/0122 step)."""
    if not seeds:
        return hits
    times = tuple(seed.record.created_at for seed in seeds)
    turns = TurnsQuery(query.user, query.vector, times, NEIGHBOUR_WINDOW_S, NOW)
    near = await store.turns_near(TENANT, turns)
    have = {hit.record.id for hit in hits}
    return [*hits, *adjacent_turns(seeds, near, have, window=NEIGHBOUR_WINDOW_S)]


async def imported(path: str, samples: Sequence[dict[str, Any]], model: SyncEmbedder) -> EdgeStore:
    """A new embedded store at ``path`` holding every memory of ``samples`` (the caller closes
    it)."""
    store = await EdgeStore.open(path, dimensions=model.dimensions, optimize_after=None)
    for sample in samples:
        records = locomo_records(sample)
        await store.add(records, model.embed_sync([r.content for r in records]))
    return store


@dataclass
class Pools:
    """One embedder's questions and their candidates per (pool, seeds)."""

    asked: list[Any]
    found: dict[tuple[int, int], list[list[Candidate]]]


async def candidates(
    samples: Sequence[dict[str, Any]],
    pools: Sequence[int],
    embedder: SyncEmbedder | None = None,
    seeds: Sequence[int] = (0,),
    *,
    lexical: bool = False,
) -> Pools:
    """Every question of categories 1-4 and its ranked hybrid candidates for each pool size,
    with the neighbours of its first ``s`` dialog turns for each ``s`` in ``seeds`` (and with
    ``lexical`` the BM25 branch's hits beyond the pool)."""
    model = embedder if embedder is not None else StaticEmbedder()
    asked = [q for sample in samples for q in questions(sample, CATEGORIES)]
    vectors = model.embed_sync([q.text for q in asked])
    found: dict[tuple[int, int], list[list[Candidate]]] = {}
    with tempfile.TemporaryDirectory(prefix="memproxy-replay-") as tmp:
        store = await imported(tmp, samples, model)
        try:
            for pool in pools:
                for count in seeds:
                    found[pool, count] = [
                        await with_neighbours(
                            store,
                            SearchQuery(v, q.text, q.sample_id, None, pool, lexical=lexical),
                            count,
                        )
                        for q, v in zip(asked, vectors, strict=True)
                    ]
        finally:
            await store.close()
    return Pools(asked, found)


def carried(question: Any, memories: Sequence[Candidate]) -> float:
    """Evidence recall of ``memories`` for ``question``."""
    return evidence_recall(question.evidence, [{"metadata": m.record.metadata} for m in memories])


def replay(
    asked: Sequence[Any],
    pool: list[list[Candidate]],
    config: AssemblerConfig,
    tokens: BlockTokens,
    queries: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Recall per category (%) and block tokens of ``config`` on every question's ``pool``;
    ``queries``: the text each question is assembled for (default: the question's)."""
    pairs, sizes = [], []
    texts = queries if queries is not None else [question.text for question in asked]
    for question, hits, text in zip(asked, pool, texts, strict=True):
        packed = assemble(hits, text, MEMORY_MAX_TOKENS, now=NOW, tokens=tokens, config=config)
        pairs.append((question.category, carried(question, packed.memories)))
        sizes.append(packed.rendered_tokens)
    row: dict[str, Any] = {k: 100 * v for k, v in mean_by_category(pairs).items()}
    row["median_tokens"] = statistics.median(sizes)
    return row


def embed_times(embedders: dict[str, SyncEmbedder], texts: Sequence[str]) -> dict[str, list[float]]:
    """Seconds per single-text ``embed_sync`` of each embedder, the embedders interleaved text
    by text so that other work on the machine falls on all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in embedders}
    for text in texts:
        for name, embedder in embedders.items():
            started = time.perf_counter()
            embedder.embed_sync([text])
            times[name].append(time.perf_counter() - started)
    return times


def table_embedder(spec: str) -> TableEmbedder:
    """``TOKENIZER.json:WEIGHTS.safetensors`` as a ``TableEmbedder``."""
    tokenizer, _, weights = spec.partition(":")
    if not weights:
        raise SystemExit("--table wants TOKENIZER.json:WEIGHTS.safetensors")
    return TableEmbedder(Path(tokenizer), Path(weights))


def numbers(text: str, kind: Callable[[str], Any]) -> list[Any]:
    """A comma list of numbers."""
    return [kind(item) for item in text.split(",") if item]


def conversations(path: Path, *, smoke: bool, name: str) -> list[dict[str, Any]] | None:
    """The LoCoMo conversations at ``path``; ``None`` for a smoke run without them (printed as
    SKIPPED: the data set is external, never in the repo)."""
    if not path.is_file():
        if smoke:
            print(f"{name} smoke SKIPPED (no LoCoMo data at {path})")
            return None
        raise SystemExit(f"LoCoMo data not found at {path}")
    samples: list[dict[str, Any]] = json.loads(path.read_text())
    return samples


def main(argv: Sequence[str] | None = None) -> None:
    """Collect candidates once per embedder, then print one row per (embedder, pool, seeds,
    price, neighbour gains)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--pools", default="50,100", help="candidates per question (comma list)")
    parser.add_argument("--prices", default="0.02,0.022", help="token prices (comma list)")
    parser.add_argument("--seeds", default="0", help="dialog turns whose neighbours are added")
    parser.add_argument(
        "--lexical", action="store_true", help="add the BM25 branch's hits beyond each pool"
    )
    parser.add_argument("--table", help="another static model: TOKENIZER.json:WEIGHTS.safetensors")
    parser.add_argument(
        "--smoke", action="store_true", help="one conversation, one pool, one price"
    )
    args = parser.parse_args(argv)
    samples = conversations(args.data, smoke=args.smoke, name="locomo replay")
    if samples is None:
        return
    pools, prices = numbers(args.pools, int), numbers(args.prices, float)
    seeds = numbers(args.seeds, int) or [0]
    if args.smoke:
        samples, pools, prices = samples[:1], pools[:1], prices[:1]
    embedders: dict[str, SyncEmbedder] = {SHIPPED: StaticEmbedder()}
    if args.table:
        embedders[Path(args.table.partition(":")[2]).stem] = table_embedder(args.table)
    tokens = BlockTokens(ENCODING, tiktoken_tokenizer().counter(ENCODING), lines_kept=20_000)
    rows = []
    for name, embedder in embedders.items():
        found = asyncio.run(candidates(samples, pools, embedder, seeds, lexical=args.lexical))
        rows.extend(replay_rows(name, found, prices, tokens))
    names = ["overall", *CATEGORIES.values()]
    print(f"{len(found.asked)} questions, {len(samples)} conversations; recall %, in process")
    columns = ["embedder", "pool", "seeds", "candidates", "held", "price", "neighbours"]
    print(stats.format_table(rows, [*columns, *names, "median_tokens"]))
    if len(embedders) > 1:
        times = embed_times(embedders, [q.text for q in found.asked])
        for name, seconds in times.items():
            print(
                f"{name}: one question embedded in {stats.summarize_ms(seconds)['p50']:.3f} ms p50"
            )


def replay_rows(
    name: str, found: Pools, prices: Sequence[float], tokens: BlockTokens
) -> list[dict[str, Any]]:
    """One row per (pool, seeds, price, neighbour gains off/on) of one embedder's candidates."""
    asked, rows = found.asked, []
    for (pool, count), lists in found.found.items():
        held = mean_by_category(
            (q.category, carried(q, c)) for q, c in zip(asked, lists, strict=True)
        )
        size = statistics.mean(len(c) for c in lists)
        for price in prices:
            for window in (-1.0, NEIGHBOUR_WINDOW_S):
                config = AssemblerConfig(token_price=price, neighbour_window=window)
                row = {"embedder": name, "pool": pool, "seeds": count, "candidates": size}
                row.update(held=100 * held["overall"], price=price)
                row["neighbours"] = "on" if window >= 0 else "off"
                rows.append({**row, **replay(asked, lists, config, tokens)})
    return rows


if __name__ == "__main__":
    main()
