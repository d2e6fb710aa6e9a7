"""``MemoryPipeline``: budget -> query -> retrieve -> assemble -> inject, per request of any API.

One call of ``prepare`` per request (``contract.py``), with the request's ``ApiAdapter``
(``proxy/apis/adapter.py``): it reads the body into a chat-shaped ``Conversation`` (what is
budgeted, queried and captured) and writes the block back into the API's own shape; everything
between is this one pipeline, whatever the API. Everything it needs is built once in the
lifespan (``proxy/composition.py``): no imports, settings parsing or litellm on the request
path. Memories come through the one read path (``proxy/memory/retriever.py``: cache, embed,
search), captured turns go through the one write path (``MemoryService.write``). Failure
policy (README): the whole memory stage runs under ``memory.deadline_ms`` and the retriever's
embed and search stages under their own timeouts; any failure forwards the client's request
unchanged (its original bytes) with ``X-Memory-Status: degraded`` and counts the reason in
``memproxy_memory_degraded_total``. A cache call of this request that was not served
(``proxy/cache/outcome.py``) alone also marks it degraded, but memories found without it are
still injected. Bad ``X-Memory-*`` headers are the client's mistake: 400 in OpenAI's shape,
before any backend work.

No CPU work on the loop grows with the body beyond linear, C-speed passes (adr/0084): the budget
comes from byte-length bounds when they settle it (most requests), and exact counting of large
texts runs on a bounded worker (``offload.Offloader``) within the deadline. A body that cannot be
re-encoded as sent (``reencode``) is forwarded as the client's bytes, without memories.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar, TypeVarTuple

import orjson

from proxy.apis.adapter import TURN, ApiAdapter, Conversation, Injected, place
from proxy.background import Job, Spawner
from proxy.cache.blocks import Recalled, TurnBlocks, prefix_keys
from proxy.cache.outcome import CacheOutcome, cache_outcome
from proxy.cache.protocol import MemoryCache
from proxy.cache.read_ahead import read_ahead
from proxy.context.allocation import BudgetCalculator, TokenBudget
from proxy.context.assembler import AssemblerConfig, Assembly, assemble
from proxy.context.billing import EXACT, message_key, walk_size
from proxy.context.position import candidate_indices, slot
from proxy.context.records import Candidate
from proxy.context.render import BlockTokens
from proxy.context.tokens import STORED_ENCODINGS
from proxy.defaults import BUDGET_RULES, NEIGHBOUR_WINDOW_S, PDF_READ_SHARE
from proxy.eager import Done, start
from proxy.memory.retriever import EMBED, SEARCH, Retrieval, Retriever
from proxy.memory.service import MemoryWriter
from proxy.metrics import Metrics
from proxy.pipeline.capture import (
    FactCapture,
    FactRequest,
    capture_turn,
    captured,
    fact_request,
)
from proxy.pipeline.contract import Completion, Prepared
from proxy.pipeline.counters import RetrievalCounter
from proxy.pipeline.explain import (
    NOTE_BOUNDS,
    NOTE_NOT_INJECTED,
    NOTE_UNFINISHED,
    explain_body,
    explain_response,
)
from proxy.pipeline.offload import Offloader
from proxy.pipeline.options import RequestOptions, parse_options
from proxy.pipeline.pages import read_documents
from proxy.pipeline.placement import (
    Placement,
    blocks,
    describe,
    recalled,
    remembered,
    shown,
    unseen,
)
from proxy.pipeline.query import query_text
from proxy.pipeline.reencode import reencode
from proxy.pipeline.timing import StageClock, observe_stages
from proxy.pipeline.unseen import hold_back
from proxy.pipeline.unseen import note as unseen_note
from proxy.settings import MemorySettings
from proxy.tenancy import Tenant

LOGGER = logging.getLogger("memproxy.pipeline")
T = TypeVar("T")
Ts = TypeVarTuple("Ts")
INJECTED, EMPTY, OFF, DEGRADED, EXPLAIN = "injected", "empty", "off", "degraded", "explain"
ENCODE = "encode"  # degraded reason: the body cannot be re-encoded as the client sent it
# degraded reason: a document's pages could not be read in time (its size does not bound them)
PAGES_UNREAD = "pages_unread"
BUDGET_TIMEOUT = "budget_timeout"  # degraded reason: exact counting could not finish in time
# Exact counting of more text than this (UTF-8 bytes, an upper bound of its tokens) runs off the
# loop: BPE on one long run of a character costs ~3 ms for 16 KiB, and grows superlinearly.
COUNT_ON_LOOP_BYTES = 16 * 1024
# Hashing messages for the count cache costs ~7 ms a MiB (sorted JSON + blake2b): above this,
# off the loop too.
KEYS_ON_LOOP_BYTES = 256 * 1024
# Counting visits messages, content parts, tool calls and tools one by one in Python, ~1 us each:
# past this many, bounds are worked out in slices this long (the loop serves others in between),
# and hashes and exact counts off the loop.
WALK_ON_LOOP_ITEMS = 2_000
# Capture reads a turn (the messages' UTF-8 bytes and the answer) on the loop up to this size,
# above it on a thread: stripping blocks out of 64 KB of fenced text costs ~0.5 ms.
CAPTURE_ON_LOOP_BYTES = 64 * 1024
# Faster than either ever runs (tiktoken does ~25-40 MB/s of prose, hashing ~150-500 MB/s): work
# that could not finish in the time left even at these rates is not started at all, so a body
# too big to count never holds the worker (nor a core) for nothing. Work is measured in UTF-8
# bytes at most (a long non-ASCII text at 4 a character): an estimate on the safe side.
COUNT_BYTES_PER_S = 60e6
KEYS_BYTES_PER_S = 1e9
# Assembling more candidates than this runs off the loop (adr/0104): pure Python, so a thread
# only lets the loop in at the GIL's switch interval, but that bounds what the assembly holds up
# (500 candidates: loop lag p99 605 -> 89 ms, bench/loop_lag.py). At the default 50 candidates
# (~1 ms) the thread hop would cost more of the request than it frees.
ASSEMBLE_ON_LOOP_CANDIDATES = 100
# Rendered, counted memory lines kept per encoding (~0.5 KB each): a memory injected again
# skips sanitising and encoding its line, which cost 0.3 ms of a 50-memory block.
LINE_CACHE_ENTRIES = 16_384

Write = Callable[[], Job]  # a cache write, started when its time comes


@dataclass(slots=True)
class Run:
    """The state of one request through the pipeline; the retriever's ``Stages`` for it."""

    tenant: Tenant
    options: RequestOptions
    api: ApiAdapter
    conversation: Conversation
    timeouts: Mapping[str, float]  # seconds per backend stage (embed, search)
    clock: StageClock = field(default_factory=StageClock)
    deadline_at: float = float("inf")  # the memory deadline, in the event loop's clock
    budget: TokenBudget | None = None
    # The messages' UTF-8 bytes (an upper bound of their tokens and of what hashing them reads),
    # kept once the exact budget, counted in tokens, has replaced the bounds.
    message_bytes: int = 0
    assembly: Assembly | None = None
    placement: Placement | None = None  # where the blocks go (set once the budget is known)
    reasons: list[str] = field(default_factory=list)
    cache: CacheOutcome = field(default_factory=CacheOutcome)  # this request's cache calls
    # Cache writes (search results, token counts, the turn's block) wait until the request has
    # gone upstream: they cost CPU (encoding) the client would otherwise wait for, and run
    # while the upstream answers (``Prepared.on_sent``, adr/0128).
    # Thunks, not coroutines: writes that never start leave nothing unawaited.
    deferred: list[Write] = field(default_factory=list)
    facts: FactRequest | None = None  # X-Memory-Capture: facts

    @property
    def messages(self) -> Sequence[Mapping[str, object]]:
        """The conversation's chat-shaped messages."""
        return self.conversation.messages

    @property
    def billed(self) -> Mapping[str, object]:
        """The chat body the budget counts."""
        return self.conversation.billed

    def degrade(self, reason: str) -> None:
        """Note why this request is degraded (several reasons may apply)."""
        if reason not in self.reasons:
            self.reasons.append(reason)

    async def run(self, stage: str, work: Awaitable[T]) -> T:
        """Await one backend stage under its timeout; any failure degrades the run.

        A timeout or an error is recorded as ``{stage}_timeout`` / ``{stage}_error`` and raised
        as ``StageFailed``, so the request goes on without memories; the stage clock always
        stops.
        """
        ends = asyncio.get_running_loop().time() + self.timeouts[stage]
        try:
            started: Done[T] | Awaitable[T] = start(work) if isinstance(work, Coroutine) else work
            if isinstance(started, Done):
                return started.value
            # Only work that waits can be interrupted: no timer for the rest (the embedding with
            # the in-process cache), and the stage's time counts from its start.
            async with asyncio.timeout_at(ends):
                return await started
        except TimeoutError:
            self.degrade(f"{stage}_timeout")
            raise StageFailed from None
        except Exception as exc:
            LOGGER.warning("memory %s failed: %s", stage, type(exc).__name__)
            self.degrade(f"{stage}_error")
            raise StageFailed from exc
        finally:
            self.clock.mark(stage)

    def mark(self, stage: str) -> None:
        """Close ``stage`` on the request's clock."""
        self.clock.mark(stage)

    async def keep(self, write: Write) -> None:
        """Write to the cache once the request has gone upstream."""
        self.deferred.append(write)


class Pipeline:
    """The memory pipeline over the read and write paths (either of which may be failing).

    ``retriever`` ``None``: the store could not be opened, every request degrades
    (``store_unavailable``). ``counts`` caches token counts of messages; ``writer`` stores
    captured turns; ``counter`` batches the retrieval counts of injected memories.
    """

    def __init__(
        self,
        settings: MemorySettings,
        *,
        calculator: BudgetCalculator,
        retriever: Retriever | None,
        metrics: Metrics,
        spawn: Spawner,
        counts: MemoryCache | None = None,
        writer: MemoryWriter | None = None,
        counter: RetrievalCounter | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        offloader: Offloader | None = None,
        blocks: TurnBlocks | None = None,
        facts: FactCapture | None = None,
    ) -> None:
        self.settings = settings
        self.facts = facts
        self.calculator = calculator
        self.retriever = retriever
        self.counts = counts
        self.writer = writer
        self.counter = counter
        self.blocks = blocks  # earlier turns' blocks, put back in place (position turn)
        self.metrics = metrics
        self.spawn = spawn
        self.clock = clock
        self.offloader = offloader if offloader is not None else Offloader()
        self.deadline_s = settings.deadline_ms / 1000.0
        self.embed_s = settings.stage_timeouts.embed_ms / 1000.0
        self.search_s = settings.stage_timeouts.search_ms / 1000.0
        # The budget already holds the tenant's cap, so the assembler adds none of its own.
        # ``fill`` packs the budget full (no token price); ``adaptive`` charges the price.
        self.configs = {
            (kind, rule): AssemblerConfig(
                packer=kind,
                max_tokens=None,
                token_price=settings.token_price if rule == "adaptive" else 0.0,
                absolute_overlap=rule == "adaptive",
                neighbour_window=NEIGHBOUR_WINDOW_S if settings.neighbour_turns else -1.0,
            )
            for kind in ("optimal", "greedy")
            for rule in BUDGET_RULES
        }
        self._blocks: dict[str, BlockTokens] = {}
        # Requests in their memory stage (``_retrieve``) in this process: a search alone there
        # may run on the event loop's thread (``SearchQuery.alone``, adr/0172); beside another,
        # it hops, so under load searches queue on the store's threads as before.
        self._retrieving = 0
        for encoding in STORED_ENCODINGS:  # first-use costs paid at start, not by a request
            calculator.tokenizer.longest_token_bytes(encoding)
            self._block_tokens(encoding)

    def _block_tokens(self, encoding: str) -> BlockTokens:
        """This pipeline's block arithmetic for ``encoding``, memoising rendered lines."""
        tokens = self._blocks.get(encoding)
        if tokens is None:
            count = self.calculator.tokenizer.counter(encoding)
            tokens = BlockTokens(encoding, count, lines_kept=LINE_CACHE_ENTRIES)
            self._blocks[encoding] = tokens
        return tokens

    async def prepare(
        self,
        tenant: Tenant,
        headers: Mapping[str, str],
        body: dict[str, object],
        api: ApiAdapter,
    ) -> Prepared:
        """Inject the tenant's memories into ``body`` (a new object; ``body`` is never mutated)."""
        options = parse_options(tenant.memory, headers, body)
        # Malformed messages read as none: forwarded untouched, the upstream answers the 400.
        unreadable = None
        try:
            conversation = api.conversation(body)
        except Exception as exc:
            # Parts nested past the 254 levels orjson writes (it reads 1024) that the adapter
            # must serialise, or an adapter bug: memory steps aside and the body goes as sent,
            # exactly as with memory off.
            if not isinstance(exc, orjson.JSONEncodeError):
                LOGGER.exception("%s adapter could not read the body", api.route)
            conversation = Conversation(model="", messages=(), billed={}, preamble=None)
            unreadable = ENCODE if isinstance(exc, orjson.JSONEncodeError) else "internal"
        timeouts = {EMBED: self.embed_s, SEARCH: self.search_s}
        run = Run(tenant, options, api, conversation, timeouts)
        if unreadable is not None:
            run.degrade(unreadable)
        if options.capture == "facts" and self.facts is not None:
            if api.openai_credentials:
                run.facts = fact_request(tenant, headers, body)
            else:  # never send this request's credentials to another provider
                self.metrics.count_extraction_failure("unsupported_api")
        if options.mode == "off":
            return self._finish(run, body, OFF)
        if conversation.messages:
            run.deadline_at = asyncio.get_running_loop().time() + self.deadline_s
            self._retrieving += 1
            try:
                with cache_outcome() as run.cache, read_ahead():
                    async with asyncio.timeout_at(run.deadline_at):
                        await self._retrieve(run)
            except TimeoutError:
                run.degrade("deadline" if "budget" in run.clock.stages else BUDGET_TIMEOUT)
            except StageFailed:
                pass  # the stage recorded its reason
            except orjson.JSONEncodeError as exc:
                # Nesting orjson reads but cannot write (message keys, JSON-valued fields): the
                # body could not be re-encoded either, so it goes as sent.
                LOGGER.debug("body not re-encodable, forwarded without memories: %s", exc)
                run.degrade(ENCODE)
            except Exception:
                LOGGER.exception("memory pipeline failed; forwarding without memories")
                run.degrade("internal")
            finally:
                self._retrieving -= 1
        if options.mode == "explain":
            return self._explain(run, body)
        assembly = run.assembly
        placement = self._placement(run)
        injected = self._inject(run, body, assembly.block if assembly is not None else "")
        if not injected.held and not placement.earlier:
            return self._finish(run, body, DEGRADED if run.reasons else EMPTY)
        forwarded = injected.body
        encoded = reencode(forwarded)
        run.clock.mark("inject")
        if encoded is None:
            LOGGER.debug("injected body not re-encodable; forwarding the original")
            run.assembly = run.placement = None  # nothing was injected after all
            run.degrade(ENCODE)
            return self._finish(run, body, DEGRADED)
        if injected.held and placement.key and assembly is not None and self.blocks:
            shown_block = remembered(placement, assembly)
            # First of the request's writes: the next turn recalls it, and a fast upstream can
            # answer before writes queued behind others land (the prefix stays cacheable).
            run.deferred.insert(
                0, functools.partial(self.blocks.remember, placement.key, shown_block)
            )
        status = INJECTED if injected.held else EMPTY
        return self._finish(run, forwarded, DEGRADED if run.reasons else status, encoded)

    def _placement(self, run: Run) -> Placement:
        """Where this request's blocks go (the position asked for, if its API has it)."""
        return run.placement or Placement(place(run.api, run.options.position))

    def _inject(self, run: Run, body: Mapping[str, object], block: str) -> Injected:
        """``body`` with ``block`` (and earlier turns' blocks) where its API puts them."""
        return run.api.inject(body, run.conversation, blocks(self._placement(run), block))

    async def _retrieve(self, run: Run) -> None:
        """Budget, query, retrieval (cache, embed, search), assemble; fills ``run``.

        The search starts before the recall of earlier turns' blocks and runs alongside it: the
        recall is a cache round trip (Redis across workers) the search does not depend on, so
        a request waits for the longer of the two, not both. Only what is done with the hits
        (the room, a reused block) waits for the recall. The tenant's forget stamp is read
        before the search starts (``proxy/cache/blocks.py``), in the round trip that reads the
        generation for the search's cache key (``proxy/cache/read_ahead.py``).
        """
        options = run.options
        if run.conversation.documents:  # their pages, in slices, in a share of the deadline
            until = run.deadline_at - self.deadline_s * (1 - PDF_READ_SHARE)
            if not await read_documents(run.conversation.documents, until):
                # A size does not bound the pages: a text-light PDF runs 10x under the
                # estimate's bytes a page, so a block budgeted by it could overflow the window.
                # Nothing is counted either, so no count by an estimate reaches the count cache.
                run.degrade(PAGES_UNREAD)
                return
        budget = run.budget = await self._budget(run)
        run.clock.mark("budget")
        if budget.memory_tokens <= 0:
            return
        query = query_text(run.messages, self.settings.query_window)
        run.clock.mark("query")
        settings = self.settings
        want = Retrieval(
            query,
            options.user,
            options.top_k,
            options.sources,
            neighbours=settings.neighbour_candidates,
            # A top_k lowered by X-Memory-Top-K or the tenant's limit is a hard bound the caller
            # or operator chose: the lexical extras come beyond the deployment's top_k only.
            lexical=settings.lexical_candidates and options.top_k >= settings.top_k,
            alone=self._retrieving == 1,
        )
        searching: asyncio.Future[list[Candidate]] | None = None
        before = None
        retriever = self.retriever
        beside = bool(query and options.sources) and retriever is not None and self._recalls(run)
        if beside:
            # The stamp this turn's block keeps is read before the search reads the store: a
            # delete between the search and the recall then leaves the block stale, not kept.
            before = await self._stamp(run)
        try:
            # A recall that waits (Redis) has the search run beside it; one that does not (the
            # in-process cache) is over before a task started now would have run at all, so the
            # search then runs after it, in this task.
            recalling = start(self._recall(run, budget))
            if isinstance(recalling, Done):
                placement = recalling.value
            else:
                if beside and retriever is not None:
                    searching = asyncio.ensure_future(retriever.retrieve(run.tenant.id, want, run))
                placement = await recalling
            if beside and placement.stamp != before:
                placement = placement.unkept()  # a delete may have come after the search
            room = placement.room(budget.memory_tokens, budget.available_tokens)
            placement = run.placement = placement.reusable(room)
        except BaseException:
            dropped(searching)
            raise
        if placement.reused is not None or room <= 0:
            dropped(searching)  # the turn's block is known, or there is no room for one
            return
        if not query or not options.sources:
            return
        if self.retriever is None:
            run.degrade("store_unavailable")
            return
        if searching is None:
            hits = await self.retriever.retrieve(run.tenant.id, want, run)
        else:
            hits = await searching
        if not run.cache.served:
            run.degrade("cache")
        work = functools.partial(
            assemble,
            query=query,
            budget=room,
            now=self.clock(),
            tokens=self._block_tokens(budget.encoding),
            config=self.configs[run.tenant.memory.packer, options.budget_rule],
        )
        run.assembly = await self._assemble(work, hits)
        fresh = unseen(run.assembly, hits, placement.visible)
        if fresh is not None:  # some of what this turn gets is in the prompt already
            run.placement, hits = placement.showing(fresh[1]), fresh[0]
            run.assembly = await self._assemble(work, hits)
        run.clock.mark("assemble")

    async def _assemble(
        self, work: Callable[[Sequence[Candidate]], Assembly], hits: Sequence[Candidate]
    ) -> Assembly:
        """``work(hits)``: many candidates off the loop (waits within the deadline only)."""
        if len(hits) > ASSEMBLE_ON_LOOP_CANDIDATES:
            return await self.offloader.run(work, hits)
        return work(hits)

    def _recalls(self, run: Run) -> bool:
        """Whether this request may look up earlier turns' blocks (a cache round trip)."""
        return (
            self.blocks is not None
            and run.conversation.preamble is not None
            and place(run.api, run.options.position) == TURN
        )

    async def _stamp(self, run: Run) -> int | None:
        """The tenant's forget stamp now (``None``: unknown, this turn's block is not kept)."""
        assert self.blocks is not None  # only asked for when ``_recalls``
        try:
            return await self.blocks.stamp(run.tenant.id)
        except Exception as exc:  # a backend's failure only loses this turn's block
            LOGGER.warning("reading the forget stamp failed: %s", type(exc).__name__)
            return None

    async def _recall(self, run: Run, budget: TokenBudget) -> Placement:
        """Where this request's blocks go; with position ``turn``, the earlier turns' blocks
        (one cache round trip; hashing a long conversation off the loop)."""
        options, api, conversation = run.options, run.api, run.conversation
        position = place(api, options.position)
        turns, rule = conversation.turns, api.rule
        where = (
            slot(
                turns,
                anchor_roles=rule.anchor_roles,
                behind_roles=rule.behind_roles,
                pinned=rule.pinned,
            )
            if position == TURN
            else None
        )
        placement = Placement(position, where)
        if where is None or self.blocks is None or conversation.preamble is None:
            return placement
        indices = candidate_indices(turns, where.index, rule.behind_roles)
        scope = (options.user, *options.sources, budget.encoding, conversation.preamble)
        args = (run.tenant.id, scope, turns, indices)
        # UTF-8 bytes, at most (the whole conversation's: its turns are a part of it). Not the
        # exact budget's token counts: a token may stand for up to 128 bytes.
        size = run.message_bytes
        if size <= KEYS_ON_LOOP_BYTES:
            keys = prefix_keys(*args)
        else:
            keys = await self._off_loop(run, size / KEYS_BYTES_PER_S, prefix_keys, *args)
        known = [key for key in keys if key is not None]
        try:
            recall = await self.blocks.recall(run.tenant.id, known)
        except Exception as exc:  # a backend's failure is only a miss: the turn goes on
            LOGGER.warning("recalling earlier blocks failed: %s", type(exc).__name__)
            run.degrade("cache")
            recall = Recalled([None] * len(known), None)
        found = iter(recall.found)
        kept = [next(found) if key is not None else None for key in keys]
        run.clock.mark("recall")
        return recalled(placement, indices, keys, kept, budget.available_tokens, recall.stamp)

    async def _budget(self, run: Run) -> TokenBudget:
        """The memory budget: from byte-length bounds when they settle it, else counted.

        ``run.budget`` holds the upper-bound budget meanwhile: if exact counting does not finish
        in time, that is the (never over-estimated) figure the request reports. Explain shows
        exact figures whenever counting them costs no worker.
        """
        calculator, cap, body = self.calculator, run.options.max_tokens, run.billed
        items = walk_size(body)
        per_message = None
        if items > WALK_ON_LOOP_ITEMS:  # in slices, letting the loop serve others in between
            encoding = calculator.encoding_for(str(body.get("model") or ""))
            uppers: list[int] = []
            lowers: list[int] = []
            for start in range(0, len(run.messages), WALK_ON_LOOP_ITEMS):
                await asyncio.sleep(0)
                chunk = run.messages[start : start + WALK_ON_LOOP_ITEMS]
                more, fewer = calculator.message_bounds(chunk, encoding)
                uppers += more
                lowers += fewer
            per_message = (uppers, lowers)
        upper, lower = calculator.bounds(body, memory_cap=cap, message_bounds=per_message)
        if run.conversation.unseen_history:
            upper, lower = hold_back(upper), hold_back(lower)
        run.budget = upper
        run.message_bytes = sum(upper.message_counts)
        settled = upper if upper.settled else lower if lower.settled else None
        cheap = sum(upper.message_counts) + upper.tools_tokens <= COUNT_ON_LOOP_BYTES
        if settled is not None and not (run.options.mode == "explain" and cheap):
            return settled
        exact = await self._exact_budget(run, upper, items > WALK_ON_LOOP_ITEMS)
        return hold_back(exact) if run.conversation.unseen_history else exact

    async def _exact_budget(self, run: Run, upper: TokenBudget, long_walk: bool) -> TokenBudget:
        """The exact budget, per-message counts from the cache; large work off the loop."""
        cache, messages, encoding = self.counts, run.messages, upper.encoding
        bounds = upper.message_counts  # UTF-8 bytes per message: the cost of what follows
        names: list[str | None] = []
        cached: list[int | None] | None = None
        # The newest message is never in the count cache (a conversation grows at its end): if
        # even it cannot be counted in time, nothing is worth hashing or looking up.
        self._in_time(run, (upper.tools_tokens + (bounds[-1] if bounds else 0)) / COUNT_BYTES_PER_S)
        if cache is not None:
            size = sum(bounds)
            if size <= KEYS_ON_LOOP_BYTES and not long_walk:
                names = message_keys(messages, encoding)
            else:
                names = await self._off_loop(
                    run, size / KEYS_BYTES_PER_S, message_keys, messages, encoding
                )
            known = [name for name in names if name is not None]
            found = iter(await cache.get_token_counts(run.tenant.id, encoding, known))
            cached = [next(found) if name is not None else None for name in names]
        work = upper.tools_tokens + sum(
            bound for index, bound in enumerate(bounds) if cached is None or cached[index] is None
        )
        count = functools.partial(
            self.calculator.calculate_request,
            run.billed,
            memory_cap=run.options.max_tokens,
            cached_counts=cached,
        )
        inline = work <= COUNT_ON_LOOP_BYTES and not long_walk
        if cache is None:
            if inline:
                return count()
            budget: TokenBudget = await self._off_loop(run, work / COUNT_BYTES_PER_S, count)
            return budget

        def keep(budget: TokenBudget) -> Write:
            fresh = {
                name: tokens
                for name, hit, tokens in zip(
                    names, cached or (), budget.message_counts, strict=False
                )
                if hit is None and name is not None
            }
            return functools.partial(cache.set_token_counts, run.tenant.id, encoding, fresh)

        if inline:
            budget = count()
            run.deferred.append(keep(budget))
            return budget
        # Counts that finish after the deadline are still cached: the conversation's next turn
        # then counts only its new message.
        return await self._off_loop(
            run, work / COUNT_BYTES_PER_S, count, on_done=lambda done: self.spawn(keep(done)())
        )

    async def _off_loop(
        self,
        run: Run,
        least_s: float,
        func: Callable[[*Ts], T],
        *args: *Ts,
        on_done: Callable[[T], None] | None = None,
    ) -> T:
        """``func(*args)`` on the offloader, if it can finish in time (``_in_time``)."""
        self._in_time(run, least_s)
        return await self.offloader.run(func, *args, on_done=on_done)

    def _in_time(self, run: Run, least_s: float) -> None:
        """Degrade the request now when work needing ``least_s`` (at the fastest) cannot end
        before its deadline: it is not started, so it holds no worker and no core."""
        if least_s > run.deadline_at - asyncio.get_running_loop().time():
            run.degrade(BUDGET_TIMEOUT)
            raise StageFailed

    def _explain(self, run: Run, body: Mapping[str, object]) -> Prepared:
        assembly = run.assembly
        block = assembly.block if assembly is not None else ""
        placement = self._placement(run)
        injected = self._inject(run, body, block)
        notes: list[str] = []
        if injected.body != body and reencode(injected.body) is None:
            run.degrade(ENCODE)
            notes.append(NOTE_NOT_INJECTED)
            injected = Injected(dict(body))  # what inject mode would send: the client's own
        budget = run.budget
        if budget is not None and budget.counting != EXACT:
            notes.append(NOTE_BOUNDS if budget.settled else NOTE_UNFINISHED)
        if run.conversation.unseen_history:
            notes.append(unseen_note(budget))
        shown = run.api.shown(injected.body)
        document = explain_body(run.conversation.model, budget, assembly, ())
        del document["messages"]  # the API's own fields instead (chat: the same messages)
        document.update(shown)
        document["placement"] = describe(placement, run.options.position, injected)
        status = DEGRADED if run.reasons else (INJECTED if injected.held else EMPTY)
        total_ms = run.clock.total_ms()
        headers = self._headers(run, status, total_ms)
        run.clock.observe(self.metrics, total_ms)
        self._record(run, EXPLAIN)
        for write in run.deferred:
            self.spawn(write())
        reply = explain_response(document, notes, hidden=tuple(shown))
        return Prepared(body=dict(body), response_headers=headers, reply=reply)

    def _finish(
        self, run: Run, body: dict[str, object], status: str, encoded: bytes | None = None
    ) -> Prepared:
        total_ms = run.clock.total_ms()
        headers = self._headers(run, status, total_ms)
        self._record(run, status)
        return Prepared(
            body=body,
            response_headers=headers,
            on_complete=self._hook(run),
            on_sent=self._sent(run),
            on_status=self._after(run, status, total_ms),
            encoded=encoded,
        )

    def _headers(self, run: Run, status: str, total_ms: float) -> dict[str, str]:
        count, tokens = (
            shown(run.placement, run.assembly) if status in (INJECTED, DEGRADED) else (0, 0)
        )
        headers = {
            "X-Memory-Status": status,
            "X-Memory-Injected": str(count),
            "X-Memory-Tokens": str(tokens),
            "X-Memory-Budget": str(run.budget.memory_tokens if run.budget is not None else 0),
            "X-Memory-Overhead-Ms": f"{total_ms:.3f}",
            "Server-Timing": run.clock.server_timing(total_ms),
        }
        return headers

    def _record(self, run: Run, status: str) -> None:
        self.metrics.count_memory_request(status, run.reasons)

    def _sent(self, run: Run) -> Callable[[], Job] | None:
        """The request's cache writes, for once it has gone upstream; ``None`` when none."""
        writes = run.deferred
        if not writes:
            return None

        async def on_sent() -> None:
            for write in writes:
                await write()

        return on_sent

    def _after(self, run: Run, status: str, total_ms: float) -> Callable[[int], None]:
        """What needs only the answer's status: the stage histograms, then retrieval counts.

        The histograms wait for the response: ten observations cost a memory-on request ~40 us
        of its critical path served at c=1 (~9 us warm), on code its stages left cold.
        """
        counts = self._counts(run, status)
        # The stages the headers show: a search dropped beside the recall (cancelled) stops its
        # clock only when its task next runs, after this request's Server-Timing was written.
        stages = dict(run.clock.stages)

        def on_status(answered: int) -> None:
            observe_stages(self.metrics, stages, total_ms)
            if counts is not None:
                counts(answered)

        return on_status

    def _counts(self, run: Run, status: str) -> Callable[[int], None] | None:
        """Count a retrieval of each injected memory once the upstream accepted the request
        (``None`` when nothing was injected); needs only the answer's status. Status 0 (the
        client left before any answer) counts nothing: the upstream may never have answered."""
        assembly, counter = run.assembly, self.counter
        if counter is None or assembly is None or not assembly.block:
            return None
        if status not in (INJECTED, DEGRADED):
            return None
        tenant, ids = run.tenant.id, assembly.packed_ids

        def on_status(answered: int) -> None:
            if 0 < answered < 400:
                counter.add(tenant, ids)

        return on_status

    def _hook(self, run: Run) -> Callable[[Completion], Job] | None:
        """The after-response work that reads the answer: capture; ``None`` when there is none
        (then the route never reads the answer)."""
        writer = self.writer if run.options.capture not in ("off", "facts") else None
        facts = run.facts
        if writer is None and facts is None:
            return None

        async def on_complete(completion: Completion) -> None:
            if writer is not None:
                args = (run.options, run.messages, completion, self.settings.max_content_chars)
                # Reading the turn strips fenced blocks out of whole messages: ~1 ms per 100 KB
                # of fenced text, ~0.3 s for 16 MB. The loop keeps what costs less than a hop;
                # a run whose budget never measured its messages (0 bytes) does not know.
                size = run.message_bytes + len(completion.text)
                inputs, preceding = (
                    captured(*args)
                    if run.message_bytes and size <= CAPTURE_ON_LOOP_BYTES
                    else await asyncio.to_thread(captured, *args)
                )
                await capture_turn(writer, run.tenant.id, inputs, self.metrics, preceding)
            if facts is not None and self.facts is not None:
                self.facts.submit(run.tenant.id, run.options, run.messages, completion, facts)

        return on_complete


def dropped(task: asyncio.Future[T] | None) -> None:
    """Stop ``task`` (a search no longer wanted); whatever it ends with is not reported."""
    if task is not None:
        task.cancel()
        task.add_done_callback(lambda done: done.cancelled() or done.exception())


def message_keys(messages: Sequence[object], encoding: str) -> list[str | None]:
    """Count-cache keys of the messages (``None`` for a malformed, non-dict message)."""
    return [message_key(m, encoding) if isinstance(m, dict) else None for m in messages]


class StageFailed(Exception):
    """A stage failed and recorded why; the request goes on without memories."""
