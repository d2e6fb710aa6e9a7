"""Defaults that the settings share with the components built from them, and the fixed
vocabularies both check against.

Plain constants, no I/O: the pure context engine may import them (never ``proxy.settings``).
A default that only the settings use lives on its field in ``proxy/settings.py``; one that a
component or a seed API also states lives here, and both refer to it, so the two cannot drift.
"""

from __future__ import annotations

from typing import Literal, get_args

MIB = 1024 * 1024
DAY_S = 24 * 3600

Source = Literal["learnings", "playbook", "conversation", "summaries"]
SOURCES: tuple[Source, ...] = get_args(Source)
# Capture modes, least to most work: a request's X-Memory-Capture is clamped to its tenant's
# ``max_capture`` in this order. ``facts`` costs an upstream call per turn (adr/0112).
Capture = Literal["off", "user", "turn", "facts"]
CAPTURES: tuple[Capture, ...] = get_args(Capture)
# Where the memory block goes (proxy/context/position.py, adr/0111): in the latest user turn,
# leaving the prompt before it byte-identical for provider prompt caches, or in the system prompt.
Position = Literal["turn", "system"]
POSITIONS: tuple[Position, ...] = get_args(Position)
MEMORY_POSITION: Position = "turn"

UPSTREAM_URL = "https://api.openai.com/v1"
# Anthropic's base URL as its SDK takes it (ANTHROPIC_BASE_URL): without /v1.
ANTHROPIC_URL = "https://api.anthropic.com"

MEMORY_MAX_TOKENS = 4_500  # cap on injected memory tokens (the synthesizer seed's figure)
# Candidates a request's search fetches (each hybrid branch fetches as many, fusion's
# HYBRID_OVERSAMPLE); the lexical and neighbour-turn candidates come on top. 40 (adr/0171, was
# 50): on the LoCoMo dev conversations about the same evidence (85.1 against 85.2-85.5 %) in a
# median 881 block tokens instead of 969, for 9-13 % less of the served memory stage at 10k
# memories; 30 lost 0.9 points. The bench scripts measure at this default.
MEMORY_TOP_K = 40
# The memories API's search and list when the caller names no size (their bounds: memory/inputs).
API_TOP_K = 10
API_PAGE = 20
# A memory's fields when its writer gives none (the record, the API, the seed's scorer).
DEFAULT_SOURCE = "learnings"
DEFAULT_CONFIDENCE = 0.8
DEFAULT_USEFULNESS = 0.5
# Two memories whose word sets are more than this similar (Jaccard) are one: the assembler and
# the synthesizer keep the better scored (context/dedup.py).
DUPLICATE_JACCARD = 0.8
# The adaptive budget (adr/0110): ``adaptive`` charges every injected token a price, ``fill``
# packs as much value as the budget holds (the behaviour before issue 16).
BudgetRule = Literal["adaptive", "fill"]
BUDGET_RULES: tuple[BudgetRule, ...] = get_args(BudgetRule)
# The price of 100 block tokens in the packer's value units (a memory's final score to the 4th,
# at most 1): a memory is injected only while what the query adds to its value pays for its
# line (adr/0110; set on the LoCoMo dev conversations as the price whose median block stays
# under 1,000 tokens: 0.02, then 0.022 with the neighbour gains of adr/0114, then 0.03 with the
# neighbour-turn candidates of adr/0122, then 0.034 with the lexical candidates of adr/0136, then
# 0.033 with dialog turns embedded and scored with the turn before them, adr/0142).
TOKEN_PRICE = 0.033
PRICE_UNIT_TOKENS = 100
# Dialog turns of one user at most this far apart in time share what the question adds to either
# (adr/0114): a turn and the reply beside it.
NEIGHBOUR_WINDOW_S = 120.0
# The turns beside this many of the best dialog hits join the candidates (adr/0122): on the
# LoCoMo dev conversations 10 lift what 50 candidates hold from 83 % to 87 %, as much as 100
# candidates, with ~15 more.
NEIGHBOUR_CANDIDATES = 10
# The hits of a hybrid search's BM25 branch that the fused top_k leaves out join the chat
# pipeline's candidates (adr/0136): the branch is fetched anyway, and its words find evidence
# the static embedder ranks low (on LoCoMo dev, what the candidates hold: 87 % -> 88.6 %).
LEXICAL_CANDIDATES = True
# A dialog turn is embedded with the turn before it, which the assembler's overlap also reads
# (adr/0142); only the last this many characters of that turn: a long answer before a short
# question would otherwise outweigh it in the vector (LoCoMo turns are at most 434).
TURN_CONTEXT_MAX_CHARS = 1_000
# Page size of the scan of a user's dialog turns for the copies of a forgotten memory's text
# (adr/0144): one store call per this many turns, on deletes and replacements only.
FORGET_SCAN_PAGE = 512
MAX_CONTENT_CHARS = 8_000  # longest memory content the memories API accepts
# The embedded shard's background flush (adr/0160): qdrant-edge holds the GIL through a flush,
# 0.03-0.26 s at 10k memories by the disk's load (its fsyncs) whether 1 or 1,000 points were
# written since the last, so flushes are rationed by points written (added, updated or deleted,
# adr/0188), not by time. A crash replays the unflushed points at open (30k unflushed: 2.4 s,
# flushed: 0.07 s): bounded.
FLUSH_AFTER_POINTS = 2_000
# ...or once writes that added points have paused this long (no request is writing: likely none
# in flight; votes and deletes alone wait for their age, adr/0188)...
FLUSH_QUIET_S = 2.0
# ...or once the oldest unflushed write is this old: the WAL is not fsynced until a flush, so
# this bounds what a machine crash (not a process crash) can lose (was ~5 s, adr/0011).
FLUSH_MAX_AGE_S = 30.0
# ...but not sooner than this after a failed flush (a full disk): its points count as unflushed
# again, so without a wait every write would start another flush that fails.
FLUSH_RETRY_S = 10.0
# A worker's replica flushes nothing (adr/0179), and only a flush or a build's swap drops the
# WAL's closed 32 MB segments: past this many writes since its last copy, a replica starts a
# background build to cut its WAL (adr/0184). A payload update takes 87 bytes (a vote: 350k
# fill about one segment); adds start a build at ``OPTIMIZE_AFTER_POINTS`` long before.
REPLICA_WAL_CUT_WRITES = 350_000
# Unindexed points that start the embedded shard's background build: above its indexing
# threshold (2,000 memories of 256 dimensions, ``memory/edge_shard.py``), so a build always finds
# a segment to index, and small enough that the exact scan of the rest stays cheap next to the
# graph (10k unindexed: search 1.41 ms, indexed 0.84 ms).
OPTIMIZE_AFTER_POINTS = 5_000
COUNT_FLUSH_S = 5.0  # retrieval counts are summed and written this often (adr/0082)
CACHE_TIMEOUT_MS = 10.0  # one cache call's deadline on the request path

CACHE_LOCAL_MAX_ENTRIES = 10_000
CACHE_LOCAL_MAX_BYTES = 64 * MIB
# The shared cache's connections. Backstops only: the per-call deadline (CACHE_TIMEOUT_MS) is
# what bounds a request (it covers connecting too).
CACHE_CONNECT_TIMEOUT_MS = 1000.0
CACHE_MAX_CONNECTIONS = 64
# Its circuit breaker (proxy/cache/breaker.py) opens after this many consecutive failures
# spread over at least CACHE_BREAKER_MIN_FAILURE_SPAN_S, and probes again after the cool-down.
CACHE_BREAKER_FAILURES = 5
CACHE_BREAKER_COOLDOWN_S = 5.0
CACHE_BREAKER_MIN_FAILURE_SPAN_S = 0.5
CACHE_NEAR_ENTRIES = 256  # decoded search results a process keeps in front of the cache
# Embeddings and token counts of a text never change for a given model, so they live long.
EMBEDDING_TTL_S = 7 * DAY_S
TOKENS_TTL_S = 7 * DAY_S
# Search results are keyed by the tenant's write generation, so a write makes them unreachable;
# the TTL bounds a result whose write lost its generation bump (cache down) and the retrieval
# counts it ignores (adr/0031).
RETRIEVAL_TTL_S = 30
# Blocks of earlier turns are put back where they were (proxy/cache/blocks.py) for this long
# after their turn: providers keep a prompt cache 5-60 minutes, so an hour covers them.
BLOCKS_TTL_S = 3600

COLLECTION = "memproxy"
HYBRID = True  # dense + sparse (keyword) search
# Decoded records the embedded store keeps, ~1.8 KB each with the dialog turns' index (~230 MB
# full): a one-tenant store of 100k real-text memories (82.5k points) fits and warms up, so its
# searches read no payloads and its neighbour lookups use the index (adr/0182).
RECORD_CACHE_ENTRIES = 131_072
# Memory texts whose assembler profile (words, dedup signature, match bases) is memoised: ~5.4
# KB a real-text memory, so it stays at the 20k it was before adr/0182 raised the record cache.
TEXT_PROFILES_MEMOISED = 20_000
# The words' memo (``words.TextMemo``) keeps word sets per memory text, TEXT_PROFILES_MEMOISED
# texts: candidates recur across requests, and on real text computing them was ~0.3 ms of a
# 10k-memory request's assemble (docs/benchmarks.md). As many as the store kept decoded records by
# default until adr/0182 raised that bound for the records alone (their profiles take three times
# their memory); 8,192 left a 10k-memory user's texts cycling through the memo (adr/0127). A real
# memory's sets and signature take ~3 KB (~60 MB when full); a text of distinct words takes ~12
# bytes a character (ASCII; ~27 non-ASCII), so the kept texts hold at most ``TEXT_MEMO_CHARS``
# characters: ~0.5 GB (ASCII) to ~1.1 GB when full, where 20k texts of 8,000 characters reached 4.5
# GB. That was 20k texts of at most 2,000 characters each until adr/0149; a bound on the sum also
# keeps real stores' long summaries (up to ~2,600 characters, ~0.1 ms each to split again).
TEXT_MEMO_CHARS = TEXT_PROFILES_MEMOISED * 2_000
TEXT_MEMO_TEXT_CHARS = 8_000  # a longer text would push out hundreds of short ones: not kept
# The static embedder's memo of word pieces (~100 bytes each) beyond the vocabulary's whole words,
# which are known from the start; emptied back to those when full.
WORD_PIECES_KEPT = 65_536
# Word pieces come from the memo for texts up to this size (a question); a longer text (a memory
# being written) goes to the tokenizer whole: its unseen words cost a tokenizer call each from
# the memo, ~3x the whole text's call, and its long words would fill the memo.
WORD_PIECES_MEMO_TEXT_CHARS = 1_000
# Several workers on the embedded store (adr/0120): the supervisor folds the shared write log
# into the primary shard once it holds this many bytes the primary has not applied, checking
# every LOG_FOLD_CHECK_S; the log stays about this size however long the server runs.
LOG_FOLD_BYTES = 8 << 20
LOG_FOLD_CHECK_S = 1.0
# A replica's catch-up and the supervisor's fold apply a run of retrieval-count entries (64 ids
# each, adr/0154) as one increment of up to this many ids: one apply instead of one per entry.
LOG_COUNT_IDS_PER_APPLY = 4096
# Several workers on one listening socket (adr/0140): a worker holding more than its fair
# share of the open connections (their mean over the live workers) plus ACCEPT_SLACK leaves a
# waiting connection to the others, checking every ACCEPT_CHECK_S whether it may take it, and
# takes it anyway once it has waited ACCEPT_STALL_S (the others stopped or stuck).
ACCEPT_SLACK = 1
ACCEPT_CHECK_S = 0.001
ACCEPT_STALL_S = 0.25
ACCEPT_BATCH = 16  # connections accepted per wake-up at most, each after a fresh check
ACCEPT_RETRY_S = 1.0  # after an accept failed for want of descriptors or memory (asyncio's own)
# The embedded store's search thread pool (adr/0131, adr/0186). ``auto``: the CPUs this process
# may use divided among the server's workers, at least SEARCH_THREADS_MIN; one in a process that
# may use one CPU. Qdrant Edge's own default (derived from the machine's CPUs) made 8 threads on
# a 2-core machine, whose idle spinning after each search took the cores the event loop and the
# upstream needed. On one CPU a pool of one searches on the calling thread, while a second thread
# could never search beside the first, only hand off and spin on the CPU the loop needs (10k
# memories: 1.2-2.5 ms less memory stage p50, 5-12x the answers with memory at c=50). Workers
# are not pinned, so two on 2 CPUs keep 2 each (1 each served fewer requests in three runs).
SEARCH_THREADS: Literal["auto"] = "auto"
SEARCH_THREADS_MIN = 2
SEARCH_THREADS_MAX = 256  # far above any measured gain; the value is written to the shard
# The embedded store runs a chat request's search on the event loop's own thread, not a store
# thread, when its shard holds at most this many points and nothing else holds what the search
# needs (adr/0172): qdrant-edge holds the GIL through a query, so the loop waits out the search
# either way and the hop only adds its wake-ups. 10k real-text memories: a search ~1.5-2.5 ms
# served; an HNSW search grows with the log of the points, an exact scan of a tenant with its size.
# Every store the default record cache holds whole (adr/0185): at 100k a search is ~2.4 ms served,
# and the hop cost it ~0.26 ms more.
INLINE_SEARCH_MAX_POINTS = 131_072
# PDF documents in a request (adr/0143). Anthropic and OpenAI both put each page into the
# model's context as its extracted text and an image of the page. Anthropic's PDF guide puts a
# page at 1,500-3,000 tokens depending on how dense it is; OpenAI's file-inputs guide gives no
# figure, and its image rule alone makes a portrait page 765 tokens at high detail: the top of
# Anthropic's range, for every API.
PDF_PAGE_TOKENS = 3_000
# A PDF whose page objects the scan cannot all see (malformed, encrypted, an object stream it
# does not read) is estimated from its size: a page of text compresses to a few KiB, so one page
# every 2 KiB over-counts all but the emptiest pages.
PDF_BYTES_PER_PAGE = 2_048
# Bounds on reading one document on the request path (linear work; adr/0143): the base64
# decoded (the default body limit, so under it every document is read whole), what its object
# streams may inflate to, how many object streams, and how many "/Page" names are matched
# before each simply counts as a page.
PDF_SCAN_CHARS = 16 * MIB
PDF_INFLATE_BYTES = 8 * MIB
# ... and at most this many times the document's own size, so that a request's many documents
# together inflate in proportion to its body. Real object streams inflate to 0.1-1.3x their
# document's size (producers measured: pdfTeX, ReportLab, qpdf, Ghostscript, pikepdf, 2,000
# blank pages); past the bound the pages are estimated from the size.
PDF_INFLATE_RATIO = 8
PDF_OBJECT_STREAMS = 1_000
PDF_PAGE_MARKS = 20_000
# Reading a document off the request's critical moments (adr/0152): the work between two pauses
# (base64 characters decoded, bytes scanned or inflated: 64 KiB of base64 decodes in ~0.3 ms on
# a loaded 2-core machine), how long the event loop reads before it serves others, and the share
# of the memory deadline documents may be read in; past it, an unread document counts by the
# estimate from its size and the request goes on to its memories.
PDF_READ_STEP = 64 * 1024
PDF_READ_SLICE_S = 0.001
PDF_READ_SHARE = 0.5
