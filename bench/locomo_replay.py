"""LoCoMo evidence recall, replayed in process: which candidates, and which rule picks from them.

``bench/locomo.py`` measures what the served defaults inject; this script finds out why. It
imports the LoCoMo conversations (the dev split by default; CC BY-NC 4.0: read in place, never
copied) into an embedded store as ``bench/store.py --recall`` does, keeps every question's
hybrid candidates for each pool size, then replays ``assemble`` on them under each variant:
the token price, and neighbour turns on or off (ADR 0114). It reports the share of evidence
the pool holds, the recall of what is packed (per category) and the median block tokens. One
pass costs seconds, so rules can be compared on the same candidates; the served run differs by
up to ~1 point (its store is another import).

Candidate-generation experiments (issue 16, item 3), off unless asked:

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
- ``--context WHERE:BEFORE[+AFTER][*WEIGHT]`` (comma list): a contextual index, each beside
  the plain one on its own import. A dialog turn is embedded (``dense``), BM25-encoded
  (``bm25``) or both with the ``BEFORE`` turns before it and ``AFTER`` after it in its session
  (the joined text; with ``*WEIGHT`` the context's vector added at that weight); the record's
  text, what the block shows, stays the turn. ``score`` indexes nothing (for the probe below).
- ``--score-context``: a probe beside each ``--context`` row: the assembler scores a turn by
  that joined text (its overlap with the question), the block tokens still counted on the
  turn's own text (the product's assembler reads only the record's text).
- ``--neighbours-on``: print only the rows with neighbour gains on (the default).

Every row also has ``off_topic``: the median block tokens of ``bench/locomo.py``'s
``OFF_TOPIC`` questions asked of every conversation under that row's settings.

Run: ``.venv/bin/python bench/locomo_replay.py --pools 50,100 --prices 0.02,0.022,0.033``;
``--smoke`` (one conversation, one pool and price) for CI.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib import stats
from bench.lib.locomo_data import CATEGORIES, evidence_recall, mean_by_category, questions
from bench.locomo import DEFAULT_DATA, OFF_TOPIC
from bench.store import NOW, locomo_records
from proxy.context.assembler import AssemblerConfig, assemble
from proxy.context.neighbours import adjacent_turns
from proxy.context.records import Candidate, MemoryRecord
from proxy.context.render import BlockTokens
from proxy.defaults import MEMORY_MAX_TOKENS, NEIGHBOUR_WINDOW_S
from proxy.memory import lexical
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


@dataclass(frozen=True)
class Context:
    """What a dialog turn is indexed with besides its own text (issue 16): the ``before`` turns
    before it and the ``after`` turns after it in its session, for the dense vector, the BM25
    vector or both (``where``); ``weight`` < 1 mixes the context's vector in at that weight
    instead of indexing the joined text."""

    where: str = "none"  # none | both | dense | bm25 | score (indexed alone, a probe)
    before: int = 0
    after: int = 0
    weight: float = 1.0

    @property
    def label(self) -> str:
        """The row label: ``none`` or ``WHERE:BEFORE[+AFTER][*WEIGHT]``."""
        if self.where == "none":
            return "none"
        tail = f"+{self.after}" if self.after else ""
        mix = f"*{self.weight:g}" if self.weight != 1.0 else ""
        return f"{self.where}:{self.before}{tail}{mix}"


def context_spec(text: str) -> Context:
    """``WHERE:BEFORE[+AFTER][*WEIGHT]`` (or ``none``) as a ``Context``."""
    if text == "none":
        return Context()
    where, _, rest = text.partition(":")
    rest, _, weight = rest.partition("*")
    before, _, after = rest.partition("+")
    if where not in ("both", "dense", "bm25", "score") or not before:
        raise SystemExit(f"--context wants WHERE:BEFORE[+AFTER][*WEIGHT], not {text!r}")
    return Context(where, int(before), int(after or 0), float(weight or 1.0))


def turn_contexts(records: Sequence[MemoryRecord], context: Context) -> list[list[str]]:
    """For each record, the texts of the dialog turns around it in its session (empty for
    anything but a dialog turn)."""
    out: list[list[str]] = [[] for _ in records]
    sessions: dict[Any, list[int]] = {}
    for index, record in enumerate(records):
        if record.source == DIALOG:
            sessions.setdefault(record.metadata.get("session"), []).append(index)
    for turns in sessions.values():
        turns.sort(key=lambda i: records[i].created_at)
        for at, index in enumerate(turns):
            around = [
                *turns[max(0, at - context.before) : at],
                *turns[at + 1 : at + 1 + context.after],
            ]
            out[index] = [records[i].content for i in around]
    return out


def joined(content: str, around: Sequence[str]) -> str:
    """The index text of a turn: its context, then itself, one a line."""
    return "\n".join([*around, content])


@contextlib.contextmanager
def lexical_texts(texts: dict[str, list[str]], weight: float) -> Iterator[None]:
    """Make the store's BM25 document encoder index a turn with its context: the content
    ``texts`` maps to a context is encoded with it (joined, or mixed in at ``weight``);
    restored on exit. A bench-only stand-in for the product's index text."""
    original = lexical.encode_document

    def encode(text: str) -> lexical.SparsePair:
        around = texts.get(text)
        if not around:
            return original(text)
        if weight == 1.0:
            return original(joined(text, around))
        mixed = dict(zip(*original(text), strict=True))
        for index, value in zip(*original(" ".join(around)), strict=True):
            mixed[index] = mixed.get(index, 0.0) + weight * value
        return list(mixed), list(mixed.values())

    lexical.encode_document = encode
    try:
        yield
    finally:
        lexical.encode_document = original


def dense_rows(
    model: SyncEmbedder,
    records: Sequence[MemoryRecord],
    around: Sequence[Sequence[str]],
    context: Context,
) -> np.ndarray:
    """The stored vectors: each record's own text, or with its context when asked."""
    if context.where not in ("both", "dense"):
        return model.embed_sync([r.content for r in records])
    if context.weight == 1.0:
        return model.embed_sync(
            [joined(r.content, a) for r, a in zip(records, around, strict=True)]
        )
    own = model.embed_sync([r.content for r in records])
    extra = model.embed_sync([" ".join(a) for a in around])
    has = np.array([bool(a) for a in around], dtype=np.float32)[:, None]
    return normalise_rows(own + context.weight * has * extra)


async def imported(
    path: str, samples: Sequence[dict[str, Any]], model: SyncEmbedder, context: Context = Context()
) -> EdgeStore:
    """A new embedded store at ``path`` holding every memory of ``samples``, dialog turns
    indexed with ``context`` (the caller closes it)."""
    store = await EdgeStore.open(path, dimensions=model.dimensions, optimize_after=None)
    for sample in samples:
        records = locomo_records(sample)
        around = turn_contexts(records, context)
        vectors = dense_rows(model, records, around, context)
        if context.where in ("both", "bm25"):
            # One record at a time: two turns with the same text may have different contexts.
            for record, row, near in zip(records, vectors, around, strict=True):
                with lexical_texts({record.content: near}, context.weight):
                    await store.add([record], row[None, :])
        else:
            await store.add(records, vectors)
    return store


@dataclass
class Pools:
    """One embedder's questions and their candidates per (pool, seeds), and the same for the
    ``OFF_TOPIC`` questions asked of every conversation."""

    asked: list[Any]
    found: dict[tuple[int, int], list[list[Candidate]]]
    off_topic: list[str]
    off_found: dict[tuple[int, int], list[list[Candidate]]]
    index_texts: dict[str, str] = field(default_factory=dict)


async def candidates(
    samples: Sequence[dict[str, Any]],
    pools: Sequence[int],
    embedder: SyncEmbedder | None = None,
    seeds: Sequence[int] = (0,),
    *,
    lexical: bool = False,
    context: Context = Context(),
) -> Pools:
    """Every question of categories 1-4 and its ranked hybrid candidates for each pool size,
    with the neighbours of its first ``s`` dialog turns for each ``s`` in ``seeds`` (and with
    ``lexical`` the BM25 branch's hits beyond the pool); dialog turns indexed with
    ``context``."""
    model = embedder if embedder is not None else StaticEmbedder()
    asked = [q for sample in samples for q in questions(sample, CATEGORIES)]
    off = [(str(sample["sample_id"]), text) for sample in samples for text in OFF_TOPIC]
    vectors = model.embed_sync([q.text for q in asked])
    off_vectors = model.embed_sync([text for _, text in off])
    found: dict[tuple[int, int], list[list[Candidate]]] = {}
    off_found: dict[tuple[int, int], list[list[Candidate]]] = {}
    index_texts: dict[str, str] = {}
    if context.where != "none":
        for sample in samples:
            records = locomo_records(sample)
            for record, around in zip(records, turn_contexts(records, context), strict=True):
                if around:
                    index_texts[record.id] = joined(record.content, around)
    with tempfile.TemporaryDirectory(prefix="memproxy-replay-") as tmp:
        store = await imported(tmp, samples, model, context)
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
                    off_found[pool, count] = [
                        await with_neighbours(
                            store, SearchQuery(v, text, user, None, pool, lexical=lexical), count
                        )
                        for (user, text), v in zip(off, off_vectors, strict=True)
                    ]
        finally:
            await store.close()
    return Pools(asked, found, [text for _, text in off], off_found, index_texts)


def off_topic_tokens(
    texts: Sequence[str],
    pool: list[list[Candidate]],
    config: AssemblerConfig,
    tokens: BlockTokens,
    scored_as: dict[str, str] | None = None,
) -> float:
    """The median block tokens of the off-topic questions under ``config``."""
    sizes = []
    for text, hits in zip(texts, pool, strict=True):
        if scored_as:
            sizes.append(assemble_scored_as(hits, text, config, tokens, scored_as)[1])
        else:
            packed = assemble(hits, text, MEMORY_MAX_TOKENS, now=NOW, tokens=tokens, config=config)
            sizes.append(packed.rendered_tokens)
    return statistics.median(sizes)


def carried(question: Any, memories: Sequence[Candidate]) -> float:
    """Evidence recall of ``memories`` for ``question``."""
    return evidence_recall(question.evidence, [{"metadata": m.record.metadata} for m in memories])


def replay(
    asked: Sequence[Any],
    pool: list[list[Candidate]],
    config: AssemblerConfig,
    tokens: BlockTokens,
    queries: Sequence[str] | None = None,
    scored_as: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Recall per category (%) and block tokens of ``config`` on every question's ``pool``;
    ``queries``: the text each question is assembled for (default: the question's);
    ``scored_as``: a probe, the assembler scores these memories by this text (block tokens
    still counted on their own text)."""
    pairs, sizes = [], []
    texts = queries if queries is not None else [question.text for question in asked]
    for question, hits, text in zip(asked, pool, texts, strict=True):
        if scored_as:
            packed, size = assemble_scored_as(hits, text, config, tokens, scored_as)
        else:
            packed = assemble(hits, text, MEMORY_MAX_TOKENS, now=NOW, tokens=tokens, config=config)
            size = packed.rendered_tokens
        pairs.append((question.category, carried(question, packed.memories)))
        sizes.append(size)
    row: dict[str, Any] = {k: 100 * v for k, v in mean_by_category(pairs).items()}
    row["median_tokens"] = statistics.median(sizes)
    return row


def assemble_scored_as(
    hits: Sequence[Candidate],
    text: str,
    config: AssemblerConfig,
    tokens: BlockTokens,
    scored_as: dict[str, str],
) -> tuple[Any, int]:
    """``assemble`` with each memory of ``scored_as`` scored by that text (its stored token
    counts, its own text's, price it), and the tokens of the block of the packed memories'
    own texts."""
    own = {hit.record.id: hit.record for hit in hits}
    shown = [
        Candidate(
            replace(h.record, content=scored_as.get(h.record.id, h.record.content)), h.similarity
        )
        for h in hits
    ]
    packed = assemble(shown, text, MEMORY_MAX_TOKENS, now=NOW, tokens=tokens, config=config)
    if not packed.packed_ids:
        return packed, 0
    records = [own[i] for i in packed.packed_ids]
    size = tokens.framing([r.source for r in records]) + sum(
        tokens.line(r.content, r.tokens[ENCODING])[1] for r in records
    )
    return packed, size


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
    parser.add_argument(
        "--context",
        default="",
        help="dialog turns indexed with context: WHERE:BEFORE[+AFTER][*WEIGHT] (comma list; "
        "WHERE both|dense|bm25), each beside the plain index",
    )
    parser.add_argument(
        "--score-context",
        action="store_true",
        help="a probe: also replay each --context with the assembler scoring turns by their "
        "index text (block tokens counted on the turn's own text)",
    )
    parser.add_argument(
        "--neighbours-on", action="store_true", help="print only the rows with neighbour gains on"
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
    contexts = [Context(), *(context_spec(s) for s in args.context.split(",") if s)]
    rows = []
    for name, embedder in embedders.items():
        for context in contexts:
            found = asyncio.run(
                candidates(samples, pools, embedder, seeds, lexical=args.lexical, context=context)
            )
            rows.extend(replay_rows(name, found, prices, tokens, context.label))
            if args.score_context and context.where != "none":
                probe = replay_rows(
                    name, found, prices, tokens, context.label + " scored", score_context=True
                )
                rows.extend(probe)
    if args.neighbours_on:
        rows = [row for row in rows if row["neighbours"] == "on"]
    names = ["overall", *CATEGORIES.values()]
    print(f"{len(found.asked)} questions, {len(samples)} conversations; recall %, in process")
    columns = ["embedder", "context", "pool", "seeds", "candidates", "held", "price", "neighbours"]
    print(stats.format_table(rows, [*columns, *names, "median_tokens", "off_topic"]))
    if len(embedders) > 1:
        times = embed_times(embedders, [q.text for q in found.asked])
        for name, seconds in times.items():
            print(
                f"{name}: one question embedded in {stats.summarize_ms(seconds)['p50']:.3f} ms p50"
            )


def replay_rows(
    name: str,
    found: Pools,
    prices: Sequence[float],
    tokens: BlockTokens,
    context: str = "none",
    *,
    score_context: bool = False,
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
                row = {"embedder": name, "context": context, "pool": pool, "seeds": count}
                row.update(candidates=size, held=100 * held["overall"], price=price)
                row["neighbours"] = "on" if window >= 0 else "off"
                scored_as = found.index_texts if score_context else None
                row.update(replay(asked, lists, config, tokens, scored_as=scored_as))
                off = found.off_found[pool, count]
                row["off_topic"] = off_topic_tokens(found.off_topic, off, config, tokens, scored_as)
                rows.append(row)
    return rows


if __name__ == "__main__":
    main()
