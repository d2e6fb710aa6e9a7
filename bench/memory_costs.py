"""Where does the memory path spend its time on real text, and what would make it cheaper?

In process, on one seeded store per text kind (real text from ``bench/lib/realtext.py``, and
the synthetic templates), every question new. Each request's memory path is cut into its parts
and each part is timed on its own, the kinds alternating request by request:

- search: query embedding, BM25 query encoding, the dense branch, the BM25 branch, fusion and
  the dense rescoring of lexical-only hits, record reads (``RecordCache``);
- assemble: query-word matching over the candidates, scoring, dedup word sets and the dedup
  walk, the knapsack, rendering/counting; and the whole ``assemble`` call.

Beside the times it reports what drives them: BM25 query terms, the documents their posting
lists hold in the scope, candidate length, lexical-only hits, duplicates dropped.

``--variants`` also times prototype fixes, bench-side only (nothing in ``proxy/`` changes):

- ``prune``: the BM25 query keeps only terms held by at most ``--max-df`` of the scope's
  memories (a document-frequency table the store would keep at write time);
- ``memo``: matchable words per memory computed once (as if stored at write time) instead of
  per request (the engine itself memoises dedup word sets and matchable words per text);
- ``top30``: 30 candidates instead of 50;
- ``dense``: no BM25 branch at all (the floor, for scale; costs recall).

Each variant reports its top-50 overlap with the default search and whether the injected
block changed, so a speed gain is never read without its quality cost.

    .venv/bin/python bench/memory_costs.py                     # 10k memories, ~2 minutes
    .venv/bin/python bench/memory_costs.py --variants all      # plus the prototypes
    .venv/bin/python bench/memory_costs.py --profile real      # cProfile of Pipeline.prepare
    .venv/bin/python bench/memory_costs.py --assemble-again real   # assemble as served vs repeated
    .venv/bin/python bench/memory_costs.py --smoke
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import json
import pstats
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import qdrant_edge as qe

from bench import pipeline as bench_pipeline
from bench.lib import loadgen, realtext, stats
from proxy.apis.openai_chat import OPENAI_CHAT
from proxy.context.assembler import AssemblerConfig, assemble
from proxy.context.dedup import dedup_walk, text_signature
from proxy.context.knapsack import select_optimal
from proxy.context.ranking import (
    BASE_RELEVANCE,
    DEFAULT_BASE_RELEVANCE,
    fragment_score,
    score_candidate,
)
from proxy.context.records import Candidate
from proxy.context.render import BlockTokens, render_within
from proxy.context.words import (
    ASCII_WORD_FOLD,
    STOPWORDS,
    idf_weights,
    normalise_words,
)
from proxy.context.words import query_matcher as plain_query_matcher
from proxy.memory import lexical
from proxy.memory.edge import EdgeStore
from proxy.memory.edge_query import DENSE_PARAMS, key_of, scope_filter
from proxy.memory.embedders import StaticEmbedder
from proxy.memory.fusion import RRF_K, fuse_ranks
from proxy.memory.points import DENSE_VECTOR, SPARSE_VECTOR
from proxy.memory.store import SearchQuery
from proxy.memory.vectors import clip_similarity
from proxy.pipeline.pipeline import LINE_CACHE_ENTRIES
from proxy.tokenizer import tiktoken_tokenizer

VARIANTS = ("prune", "memo", "top30", "dense")
ENCODING = "o200k_base"
BUDGET = 4_500  # a gpt-4o-mini request with a short prompt: memory.max_tokens caps it
SEARCH_PARTS = ("embed", "encode_query", "dense", "sparse", "fuse_rescore", "records")
ASSEMBLE_PARTS = ("match", "score", "dedup_words", "dedup_walk", "pack", "render", "assemble")
PARTS = SEARCH_PARTS + ASSEMBLE_PARTS


# -- the parts of one request ------------------------------------------------------------------


class Scope:
    """A seeded store with its BM25 document frequencies (what ``prune`` needs)."""

    def __init__(self, store: EdgeStore, df: Counter[int], documents: int) -> None:
        self.store = store
        self.df = df
        self.documents = documents


async def seeded_scope(
    text: str, size: int, embedder: StaticEmbedder, where: Path
) -> tuple[Scope, float]:
    """Seed ``size`` memories of ``text`` like ``bench/pipeline.py``; count BM25 df's."""
    store = await EdgeStore.open(where / text, dimensions=embedder.dimensions)
    took = await bench_pipeline.seed_store(
        store, embedder, bench_pipeline.bench_tenant(), size, text
    )
    df: Counter[int] = Counter()
    for item in bench_pipeline.memory_items(text, size):
        df.update(set(lexical.encode_document(item["content"])[0]))
    return Scope(store, df, size), took


def timed(parts: dict[str, float], name: str, started: float) -> float:
    """Add the ms since ``started`` to ``parts[name]``; return the new start."""
    now = time.perf_counter()
    parts[name] = parts.get(name, 0.0) + (now - started) * 1000.0
    return now


def search_parts(
    scope: Scope,
    embedder: StaticEmbedder,
    question: str,
    top_k: int,
    variant: str | None,
    max_df: float,
) -> tuple[list[Candidate], dict[str, float], dict[str, float]]:
    """``edge_query.search_hits`` + record reads, step by step; returns hits, ms, facts.

    A copy of the store's steps with clocks between them (the store has no hooks for that);
    ``bench/tests/test_memory_costs.py`` checks it still finds exactly what the store finds.
    """
    store = scope.store
    shard = store._shard  # the bench times the store's own steps
    tenant = bench_pipeline.bench_tenant()
    parts: dict[str, float] = {}
    t = time.perf_counter()
    vector = embedder.embed_sync([question])[0]
    t = timed(parts, "embed", t)
    query = SearchQuery(vector, question, "", None, top_k)
    scope_f = scope_filter(tenant, query)
    indices, values = lexical.encode_query(question) if variant != "dense" else ([], [])
    terms = len(indices)
    if variant == "prune" and indices:
        limit = max_df * scope.documents
        kept = [(i, v) for i, v in zip(indices, values, strict=True) if scope.df[i] <= limit]
        indices, values = [i for i, _ in kept], [v for _, v in kept]
    posting = sum(scope.df[i] for i in indices)
    t = timed(parts, "encode_query", t)
    dense = qe.Query.Nearest(vector.tolist(), using=DENSE_VECTOR)
    dense_found = shard.query(
        qe.QueryRequest(
            limit=top_k, query=dense, filter=scope_f, with_payload=False, params=DENSE_PARAMS
        )
    )
    t = timed(parts, "dense", t)
    cosine = {key_of(p.id): p.score for p in dense_found}
    lexical_ids: dict[int, Any] = {}
    if indices:
        sparse = qe.Query.Nearest(qe.SparseVector(indices, values), using=SPARSE_VECTOR)
        found = shard.query(
            qe.QueryRequest(limit=top_k, query=sparse, filter=scope_f, with_payload=False)
        )
        lexical_ids = {key_of(p.id): p.id for p in found}
    t = timed(parts, "sparse", t)
    fused = fuse_ranks([list(cosine), list(lexical_ids)], k=RRF_K, limit=top_k)
    ids = [pid for pid, _ in fused]
    missing = [lexical_ids[pid] for pid in ids if pid not in cosine]
    if missing:
        rescored = shard.query(
            qe.QueryRequest(
                limit=len(missing),
                query=dense,
                filter=qe.Filter(must=[qe.HasIdCondition(set(missing))]),
                with_payload=False,
                params=DENSE_PARAMS,
            )
        )
        cosine.update((key_of(p.id), p.score) for p in rescored)
    t = timed(parts, "fuse_rescore", t)
    records = store._records_of(tenant, ids)
    hits = [Candidate(records[p], clip_similarity(cosine.get(p, 0.0))) for p in ids if p in records]
    timed(parts, "records", t)
    facts = {
        "bm25_terms": float(terms),
        "bm25_terms_used": float(len(indices)),
        "posting_docs": float(posting),
        "lexical_only": float(len(missing)),
    }
    return hits, parts, facts


def assemble_parts(
    hits: Sequence[Candidate], question: str, tokens: BlockTokens
) -> tuple[dict[str, float], dict[str, float]]:
    """The assembler's steps (``assembler.assemble``) timed one by one on ``hits``."""
    parts: dict[str, float] = {}
    now = datetime.now(UTC)
    t = time.perf_counter()
    query_words = normalise_words(question, stopwords=STOPWORDS, stemmed=True)
    found_in = MATCHER["match"](query_words, stemmed=True)
    matches = [found_in(c.record.content) for c in hits]
    t = timed(parts, "match", t)
    weights = idf_weights(matches)
    mass = sum(weights.values()) or 1.0
    scored = [score_candidate(c, now) for c in hits]
    costs = [c.record.token_count(ENCODING, tokens.count) + tokens.newline for c in hits]
    values = [
        (
            0.2 * s.composite_score
            + 0.8
            * fragment_score(
                BASE_RELEVANCE.get(c.record.source, DEFAULT_BASE_RELEVANCE),
                sum(weights[w] for w in found) / mass,
            )
        )
        ** 4
        for c, s, found in zip(hits, scored, matches, strict=True)
    ]
    t = timed(parts, "score", t)
    signatures = [text_signature(c.record.content) for c in hits]  # word sets, memoised
    t = timed(parts, "dedup_words", t)
    kept, dropped = dedup_walk(signatures, range(len(hits)))
    t = timed(parts, "dedup_walk", t)
    solution = select_optimal([values[i] for i in kept], [costs[i] for i in kept], BUDGET)
    chosen = [kept[j] for j in solution.indices]
    t = timed(parts, "pack", t)
    counts = [c.record.token_count(ENCODING, tokens.count) for c in hits]
    render_within([c.record for c in hits], counts, values, costs, chosen, BUDGET, tokens)
    timed(parts, "render", t)
    words = [len(c.record.content.split()) for c in hits]
    facts = {
        "query_words": float(len(query_words)),
        "matched_words": float(sum(len(m) for m in matches)),
        "candidates": float(len(hits)),
        "cand_words_mean": sum(words) / len(words) if words else 0.0,
        "duplicates": float(len(dropped)),
    }
    return parts, facts


# -- the ``memo`` prototype: per-memory word data computed once ---------------------------------


@functools.lru_cache(maxsize=200_000)
def stored_match_words(text: str) -> frozenset[str]:
    """The words ``query_matcher`` looks up in an ASCII text, once per memory text."""
    return frozenset(text.encode().translate(ASCII_WORD_FOLD).decode().split())


def memo_query_matcher(query_words: frozenset[str], *, stemmed: bool) -> Callable[[str], set[str]]:
    """``words.query_matcher`` reading each ASCII memory's stored word set."""
    slow = plain_query_matcher(query_words, stemmed=stemmed)
    forms: dict[str, str] = {}
    for word in sorted(query_words, key=len):
        for ending in ("", "ing", "ed", "es", "s") if stemmed else ("",):
            forms[word + ending] = word
    keys, lookup = forms.keys(), forms.__getitem__

    def found(text: str) -> set[str]:
        if text.isascii():
            return set(map(lookup, keys & stored_match_words(text)))
        return slow(text)

    return found


# The matcher the ``match`` part times (``use_memo`` swaps it).
MATCHER: dict[str, Callable[..., Callable[[str], set[str]]]] = {"match": plain_query_matcher}


def use_memo(enabled: bool) -> None:
    """Time the ``match`` part with the memoised matcher (or the plain one). The engine's own
    ``assemble`` keeps each text's match set and dedup signature in one memo
    (``profiles.text_profile``), so the variant changes that part only."""
    MATCHER["match"] = memo_query_matcher if enabled else plain_query_matcher


# -- the run ------------------------------------------------------------------------------------


def questions_of(text: str) -> Iterator[str]:
    """New questions of the ``text`` kind, as ``bench/pipeline.py`` asks them."""
    if text == "real":
        yield from realtext.RealText().questions()
    build = loadgen.unique_chat_bodies(False, base=7 * loadgen.UNIQUE_STRIDE)
    n = 0
    while True:
        yield json.loads(build(n))["messages"][-1]["content"]
        n += 1


def one_request(
    scope: Scope,
    embedder: StaticEmbedder,
    question: str,
    variant: str | None,
    max_df: float,
    tokens: BlockTokens,
) -> tuple[dict[str, float], dict[str, float], list[Candidate], str]:
    """All parts of one request under ``variant``; returns ms, facts, hits and the block."""
    top_k = 30 if variant == "top30" else 50
    use_memo(variant == "memo")
    try:
        hits, parts, facts = search_parts(scope, embedder, question, top_k, variant, max_df)
        more_parts, more_facts = assemble_parts(hits, question, tokens)
        t = time.perf_counter()
        block = assemble(
            hits,
            question,
            BUDGET,
            now=datetime.now(UTC),
            tokens=tokens,
            config=AssemblerConfig(max_tokens=None),
        ).block
        timed(more_parts, "assemble", t)
    finally:
        use_memo(False)
    return {**parts, **more_parts}, {**facts, **more_facts}, hits, block


def run_costs(
    sizes: Sequence[int],
    requests: int,
    variants: Sequence[str],
    max_df: float,
    texts: Sequence[str],
) -> list[dict[str, Any]]:
    """Time every part per text kind and variant, interleaved request by request."""
    embedder = StaticEmbedder()
    rows: list[dict[str, Any]] = []
    for size in sizes:
        rows += asyncio.run(costs_at(size, embedder, requests, variants, max_df, texts))
    return rows


async def costs_at(
    size: int,
    embedder: StaticEmbedder,
    requests: int,
    variants: Sequence[str],
    max_df: float,
    texts: Sequence[str],
) -> list[dict[str, Any]]:
    """Seed one store per text kind of ``size`` memories and measure them (see ``measure``)."""
    scopes: dict[str, Scope] = {}
    with tempfile.TemporaryDirectory(prefix="memproxy-costs-") as tmp:
        try:
            for text in texts:
                scopes[text], took = await seeded_scope(text, size, embedder, Path(tmp))
                print(f"seeded {size} {text} memories in {took:.1f} s", file=sys.stderr)
            return measure(scopes, embedder, size, requests, variants, max_df)
        finally:
            for scope in scopes.values():
                await scope.store.close()


def measure(
    scopes: dict[str, Scope],
    embedder: StaticEmbedder,
    size: int,
    requests: int,
    variants: Sequence[str],
    max_df: float,
) -> list[dict[str, Any]]:
    """The interleaved loop: per request, every (text, variant) cell in a rotating order."""
    tokens = BlockTokens(
        ENCODING, tiktoken_tokenizer().counter(ENCODING), lines_kept=LINE_CACHE_ENTRIES
    )
    cells = [(text, v) for text in scopes for v in (None, *variants)]
    asked = {text: questions_of(text) for text in scopes}
    ms: dict[tuple[str, str | None], dict[str, list[float]]] = {c: {} for c in cells}
    facts: dict[tuple[str, str | None], dict[str, list[float]]] = {c: {} for c in cells}
    quality: dict[tuple[str, str | None], list[float]] = {c: [] for c in cells}
    same_block: dict[tuple[str, str | None], list[float]] = {c: [] for c in cells}
    warmup = 20
    for n in range(requests + warmup):
        question = {text: next(asked[text]) for text in scopes}
        outcome: dict[tuple[str, str | None], tuple[set[str], str]] = {}
        for text, variant in loadgen.rotated(cells, n):
            parts, found, hits, block = one_request(
                scopes[text], embedder, question[text], variant, max_df, tokens
            )
            outcome[(text, variant)] = ({c.record.id for c in hits}, block)
            if n < warmup:
                continue
            for name, value in parts.items():
                ms[(text, variant)].setdefault(name, []).append(value)
            for name, value in found.items():
                facts[(text, variant)].setdefault(name, []).append(value)
        if n < warmup:
            continue
        for text, variant in cells:  # quality against the default on the same question
            ids, block = outcome[(text, None)]
            got, other = outcome[(text, variant)]
            quality[(text, variant)].append(len(got & ids) / max(1, len(ids)))
            same_block[(text, variant)].append(float(other == block))
    rows = []
    for text, variant in cells:
        row: dict[str, Any] = {"text": text, "memories": size, "variant": variant or "default"}
        for name in PARTS:
            values = ms[(text, variant)].get(name)
            if values:
                row[name] = stats.percentile(values, 50)
        row["search_sum"] = sum(row.get(p, 0.0) for p in SEARCH_PARTS)
        for name, values in facts[(text, variant)].items():
            row[name] = stats.percentile(values, 50)
        if variant is not None:
            row["top_overlap"] = sum(quality[(text, variant)]) / len(quality[(text, variant)])
            row["same_block"] = sum(same_block[(text, variant)]) / len(same_block[(text, variant)])
        rows.append(row)
    return rows


async def reopened_scope(text: str, size: int, embedder: StaticEmbedder, where: Path) -> Scope:
    """``seeded_scope``, then the store closed and opened again with its warm-up awaited, as a
    served process opens it: the warm-up decodes every record into the record cache and
    profiles every text (``context.profiles.prepare``). On the store as seeded (never reopened)
    a request profiled ~11 texts and decoded ~11 payloads that a server never does
    (docs/benchmarks.md, "Assemble, eighth pass")."""
    scope, _ = await seeded_scope(text, size, embedder, where)
    await scope.store.close()
    scope.store = await EdgeStore.open(where / text, dimensions=embedder.dimensions)
    await scope.store.warmed()
    return scope


def served_pipeline(
    store: EdgeStore, embedder: StaticEmbedder, text: str
) -> tuple[Any, Any, Callable[[int], bytes]]:
    """The bench's pipeline over ``store``, the bench key's tenant, and the question bodies of
    ``text`` (request ``n``'s JSON body, unstreamed)."""
    pipe = bench_pipeline.bench_pipeline(store, embedder)
    tenant = bench_pipeline.TenantResolver(bench_pipeline.load_settings(env={})).for_key(
        bench_pipeline.API_KEY
    )
    return pipe, tenant, bench_pipeline.question_bodies(text)(False)


def profile(text: str, size: int, requests: int, out: Path | None) -> None:
    """cProfile ``Pipeline.prepare`` on ``requests`` new questions of ``text`` (tottime top 30),
    on a reopened, warmed store (``reopened_scope``)."""
    embedder = StaticEmbedder()

    async def run() -> pstats.Stats:
        with tempfile.TemporaryDirectory(prefix="memproxy-profile-") as tmp:
            scope = await reopened_scope(text, size, embedder, Path(tmp))
            try:
                pipe, tenant, build = served_pipeline(scope.store, embedder, text)
                for n in range(50):  # warm-up
                    await pipe.prepare(tenant, {}, json.loads(build(n)), OPENAI_CHAT)
                bodies = [json.loads(build(n)) for n in range(requests)]
                profiler = cProfile.Profile()
                profiler.enable()
                for body in bodies:
                    await pipe.prepare(tenant, {}, body, OPENAI_CHAT)
                profiler.disable()
                return pstats.Stats(profiler)
            finally:
                await scope.store.close()

    result = asyncio.run(run())
    if out is not None:
        result.dump_stats(str(out))
    result.sort_stats("tottime").print_stats(30)


def assemble_again(text: str, size: int, requests: int) -> list[dict[str, Any]]:
    """Per block of requests (``Pipeline.prepare`` on a reopened, warmed store, new questions):
    each ``assemble`` call's thread CPU as served (right after its search), the same call
    repeated at once (its data and code in the CPU's caches, its lines memoised), and the
    line memo's misses a request (lines not rendered by an earlier request)."""
    from proxy.pipeline import pipeline as pipeline_module

    embedder = StaticEmbedder()
    served: list[float] = []
    again: list[float] = []
    misses: list[int] = []
    engine = pipeline_module.assemble

    def twice(candidates: Sequence[Candidate], *args: Any, **kwargs: Any) -> Any:
        line = kwargs["tokens"].line
        before = line.cache_info().misses
        started = time.thread_time()
        result = engine(candidates, *args, **kwargs)
        served.append(time.thread_time() - started)
        misses.append(line.cache_info().misses - before)
        started = time.thread_time()
        engine(candidates, *args, **kwargs)
        again.append(time.thread_time() - started)
        return result

    async def run() -> None:
        with tempfile.TemporaryDirectory(prefix="memproxy-again-") as tmp:
            scope = await reopened_scope(text, size, embedder, Path(tmp))
            try:
                pipe, tenant, build = served_pipeline(scope.store, embedder, text)
                for n in range(requests):
                    await pipe.prepare(tenant, {}, json.loads(build(n)), OPENAI_CHAT)
            finally:
                await scope.store.close()

    pipeline_module.assemble = twice  # type: ignore[assignment]
    try:
        asyncio.run(run())
    finally:
        pipeline_module.assemble = engine
    rows = []
    step = max(1, len(served) // 4)
    for start in range(0, len(served), step):
        end = min(len(served), start + step)
        rows.append(
            {
                "requests": f"{start}-{end}",
                "served_ms": stats.percentile([s * 1000 for s in served[start:end]], 50),
                "again_ms": stats.percentile([s * 1000 for s in again[start:end]], 50),
                "line_misses": sum(misses[start:end]) / (end - start),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="seconds, for CI")
    parser.add_argument("--sizes", default="10000")
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--variants", default="", help=f"comma list of {VARIANTS}, or 'all'")
    parser.add_argument("--max-df", type=float, default=0.05, help="prune: largest df share kept")
    parser.add_argument("--text", choices=("real", "synthetic", "both"), default="both")
    parser.add_argument("--profile", choices=("real", "synthetic"), help="cProfile instead")
    parser.add_argument("--profile-out", type=Path, default=None)
    parser.add_argument(
        "--assemble-again",
        choices=("real", "synthetic"),
        help="each assemble call as served and repeated at once (thread CPU), line misses",
    )
    args = parser.parse_args()
    texts = ("real", "synthetic") if args.text == "both" else (args.text,)
    if "real" in texts and not realtext.available():
        if not args.smoke:
            raise SystemExit(f"real text needs the LoCoMo data at {realtext.LOCOMO_PATH}")
        print("LoCoMo data absent: smoke run on synthetic text", file=sys.stderr)
        texts = ("synthetic",)
    if args.profile:
        profile(args.profile, int(args.sizes.split(",")[0]), args.requests, args.profile_out)
        return
    if args.assemble_again:
        size = 300 if args.smoke else int(args.sizes.split(",")[0])
        rows = assemble_again(args.assemble_again, size, 12 if args.smoke else args.requests)
        print("assemble p50 (thread CPU, ms): as served, and the same call repeated at once")
        print(stats.format_table(rows, ["requests", "served_ms", "again_ms", "line_misses"]))
        return
    variants = (
        list(VARIANTS) if args.variants == "all" else [v for v in args.variants.split(",") if v]
    )
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"unknown variants {sorted(unknown)}; choose from {VARIANTS}")
    sizes = [300] if args.smoke else [int(s) for s in args.sizes.split(",")]
    requests = 10 if args.smoke else args.requests
    if args.smoke:
        variants = list(VARIANTS)
    rows = run_costs(sizes, requests, variants, args.max_df, texts)
    print("p50 ms per part (search_sum = embed..records; assemble = the whole call):")
    print(stats.format_table(rows, ["text", "memories", "variant", *PARTS, "search_sum"]))
    print("\nwhat drives them (p50 per request):")
    fact_columns = [
        "bm25_terms",
        "bm25_terms_used",
        "posting_docs",
        "lexical_only",
        "query_words",
        "matched_words",
        "candidates",
        "cand_words_mean",
        "duplicates",
    ]
    quality = ["top_overlap", "same_block"] if variants else []
    print(stats.format_table(rows, ["text", "variant", *fact_columns, *quality]))


if __name__ == "__main__":
    main()
