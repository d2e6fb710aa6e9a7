"""One pure pass from candidates to the memory block: score, bundle, dedup, pack, render.

Integration contract (stable):

    assemble(candidates, query, budget, *, now, tokens, config=AssemblerConfig()) -> Assembly

- ``candidates``: ``Sequence[Candidate]`` from the store; ``budget``: the memory token budget
  (``TokenBudget.memory_tokens``); ``tokens``: the ``render.BlockTokens`` of the budget's
  encoding (a caller serving many requests keeps one per encoding: it memoises rendered lines);
  ``now``: the request time (the engine never reads the clock). Memory token counts are the
  records' stored ones (``MemoryRecord.tokens``, written with the memory).
- The rendered ``Assembly.block`` never exceeds ``min(budget, config.max_tokens)`` tokens counted
  exactly with tiktoken (``rendered_tokens``): packing accounts for the fences, the notice line,
  a ``[source]`` label line for each source it could pack and each line's newline, then the
  block is counted and trimmed if over.
- ``Assembly`` keeps every intermediate figure for explain mode: each candidate's score
  components, keyword overlap, final score and fate (``packed``, ``bundle``, ``duplicate``,
  ``floor``, ``packer``, ``trimmed``). The per-candidate objects (``candidates``, ``packed``,
  ``dropped``) are built when first read (adr/0117); the request path reads ``block``,
  ``rendered_tokens`` and ``packed_ids``.

Adaptive budget (ADR-0110): with ``token_price`` p > 0 the packer maximises what the question
adds, net of its tokens: ``sum(value - prior_value - p / 100 * line_tokens)``, where
``value = final ** 4`` and ``prior_value`` is the same with no relevance to the query (the
similarity's and the overlap's share of ``final`` taken out). A memory whose relevance does not
pay for its line is never injected (fate ``floor``): the block is as long as the question's
evidence is strong, an unrelated question gets next to nothing, and the budget only caps it.
For values to mean the same in every request the overlap is absolute (``absolute_overlap``):
query words no candidate has count in the IDF mass at the weight of an unseen word, so a
question the memories know nothing about scores low everywhere instead of crowning its best
weak match. ``token_price=0`` with ``absolute_overlap=False`` is the old rule: fill the budget.
Under a price, a dialog turn's gain is at least that of the turn of the same user beside it in
time (``neighbours.py``, ADR-0114): the reply to a turn the question names shares no word with
the question and would never pay for itself.

Ranking (ADR-0040): ``final = 0.2 * composite + 0.8 * synth`` (``composite_weight``,
``keyword_weight``) where ``composite`` is the seed scorer's exact formula and
``synth = base(source) * 0.5 + overlap * 0.5`` is the synthesizer's; ``overlap`` is the share of
the query's IDF mass (rarity among this request's candidates) found in the memory, with stopwords
dropped and light stemming. The bundle keeps the best ``max_items`` (100) by ``final``;
duplicates (Jaccard > 0.8) keep the higher ``final``; the packer maximises the sum of
``final ** 4`` within the budget. Measured on LoCoMo dev with 100 hybrid candidates: +9.6 /
+10.9 / +7.4 evidence-recall points over top-k at 500 / 1,000 / 2,000 tokens; the gain needs
enough candidates to choose from (the pipeline should fetch about 100).
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime
from math import fsum
from operator import itemgetter
from typing import Any, TypeVar

from proxy.context.dedup import DUPLICATE_JACCARD, NO_SIGNATURE, dedup_walk
from proxy.context.knapsack import PACKER_KINDS, PackerKind, select_greedy, select_optimal
from proxy.context.neighbours import neighbour_gains
from proxy.context.profiles import Profile, text_profile
from proxy.context.ranking import (
    ScoredMemory,
    final_scores,
    score_candidate,
)
from proxy.context.records import Candidate
from proxy.context.render import (
    BLOCK_CLOSE,
    BLOCK_NOTICE,
    BLOCK_OPEN,
    BlockTokens,
    render_block,
    render_rows,
    sanitise,
)
from proxy.context.shortlist import BundleConfig, BundleStats, priorities_of, shortlist
from proxy.context.words import (
    STOPWORDS,
    idf_weights,
    normalise_words,
    query_forms,
    unambiguous,
    unseen_weight,
)
from proxy.defaults import MEMORY_MAX_TOKENS as DEFAULT_MAX_TOKENS
from proxy.defaults import NEIGHBOUR_WINDOW_S, PRICE_UNIT_TOKENS, TOKEN_PRICE
from proxy.errors import ConfigError

T = TypeVar("T")

__all__ = [
    "ASSEMBLER_BUNDLE",
    "BLOCK_CLOSE",
    "BLOCK_NOTICE",
    "BLOCK_OPEN",
    "BUNDLE",
    "DUPLICATE",
    "FLOOR",
    "PACKED",
    "PACKER",
    "TRIMMED",
    "AssemblerConfig",
    "Assembly",
    "MemoryExplanation",
    "Ranked",
    "assemble",
    "priced_values",
    "render_block",
    "sanitise",
]

ASSEMBLER_BUNDLE = BundleConfig(
    max_items=100,
    recency_weight=0.0,  # recency is already 25% of the composite inside the salience
    salience_weight=1.0,
    min_salience_threshold=0.0,
    recency_half_life_days=14.0,
)
PACKED, BUNDLE, DUPLICATE, PACKER, TRIMMED = "packed", "bundle", "duplicate", "packer", "trimmed"
FLOOR = "floor"  # what the query adds to its value does not pay for its tokens
DROPPED = (BUNDLE, DUPLICATE, FLOOR, PACKER, TRIMMED)


@dataclass(frozen=True, slots=True)
class AssemblerConfig:
    """Every knob of one assembly; frozen so a config can be shared across requests."""

    bundle: BundleConfig = ASSEMBLER_BUNDLE
    packer: PackerKind = "optimal"
    dedup_threshold: float = DUPLICATE_JACCARD
    max_tokens: int | None = DEFAULT_MAX_TOKENS
    # Tuned on LoCoMo dev (ADR-0040): lexical overlap and a sharp value curve win there.
    composite_weight: float = 0.2
    keyword_weight: float = 0.8
    value_exponent: float = 4.0
    idf_overlap: bool = True  # weight query words by their rarity among the candidates
    drop_stopwords: bool = True
    stemmed: bool = True
    # What 100 block tokens cost in value units (``final ** value_exponent``, at most 1) of what
    # the query adds to a memory; 0 fills the budget (adr/0110).
    token_price: float = TOKEN_PRICE
    # Query words no candidate has still count in the overlap's IDF mass (adaptive budget).
    absolute_overlap: bool = True
    # Dialog turns at most this many seconds apart share their gain (adr/0114); < 0 turns it off.
    neighbour_window: float = NEIGHBOUR_WINDOW_S

    def __post_init__(self) -> None:
        if self.packer not in PACKER_KINDS:
            raise ConfigError("packer must be 'optimal' or 'greedy'", param="packer")
        if self.composite_weight < 0 or self.keyword_weight < 0:
            raise ConfigError("ranking weights must not be negative")
        if self.value_exponent <= 0:
            raise ConfigError("value_exponent must be positive", param="value_exponent")
        if not 0.0 <= self.dedup_threshold < 1.0:
            raise ConfigError("dedup_threshold must be in [0, 1)", param="dedup_threshold")
        if not 0.0 <= self.token_price < float("inf"):  # also refuses NaN
            raise ConfigError("token_price must be a finite number >= 0", param="token_price")


@dataclass(frozen=True, slots=True)
class MemoryExplanation:
    """One candidate's figures: scorer components, overlap, final score, tokens and fate."""

    candidate: Candidate
    scored: ScoredMemory[Candidate]
    overlap: float
    synth_score: float
    final_score: float
    value: float  # what the packer maximises
    tokens: int  # stored content tokens
    line_tokens: int  # estimated cost of its rendered line
    status: str

    @property
    def id(self) -> str:
        """The memory id."""
        return self.candidate.record.id

    def to_dict(self) -> dict[str, Any]:
        """The explain-mode view (the documented memory entry plus ranking figures)."""
        record = self.candidate.record
        s = self.scored
        return {
            "id": record.id,
            "source": record.source,
            "content": record.content,
            "tokens": self.tokens,
            "metadata": dict(record.metadata),
            "score": {
                "composite": s.composite_score,
                "relevance": s.relevance_score,
                "recency": s.recency_score,
                "usefulness": s.usefulness_score,
                "confidence": s.confidence_score,
                "frequency": s.frequency_score,
                "keyword_overlap": round(self.overlap, 6),
                "final": round(self.final_score, 6),
            },
            "status": self.status,
        }


@dataclass(frozen=True, slots=True)
class Ranked:
    """Every candidate's figures in final-score order, as ``assemble`` left them.

    Explain mode reads them as ``MemoryExplanation``s, built on the first read and then kept
    (``built``): a request that only injects the block never builds 50 of them (adr/0117).
    ``now`` is the assembly's, so each ``scored`` is what the ranking computed.
    """

    candidates: Sequence[Candidate]
    overlaps: Sequence[float]
    synth_scores: Sequence[float]
    final_scores: Sequence[float]
    values: Sequence[float]
    tokens: Sequence[int]
    line_tokens: Sequence[int]
    status: Sequence[str]
    now: datetime
    built: list[tuple[MemoryExplanation, ...]] = field(
        default_factory=list, compare=False, repr=False
    )

    def explained(self) -> tuple[MemoryExplanation, ...]:
        """One ``MemoryExplanation`` per candidate, final score highest first."""
        if not self.built:
            now = self.now
            self.built.append(
                tuple(
                    MemoryExplanation(candidate, score_candidate(candidate, now), *figures)
                    for candidate, *figures in zip(
                        self.candidates,
                        self.overlaps,
                        self.synth_scores,
                        self.final_scores,
                        self.values,
                        self.tokens,
                        self.line_tokens,
                        self.status,
                        strict=True,
                    )
                )
            )
        return self.built[0]


@dataclass(frozen=True, slots=True)
class Assembly:
    """The result of ``assemble``: the block and everything that led to it."""

    query: str
    budget: int  # the memory budget given
    effective_budget: int  # min(budget, config.max_tokens), floor 0
    encoding: str
    packer: str
    block: str
    rendered_tokens: int  # exact tiktoken count of ``block``
    packed_tokens: int  # estimated cost of the packed lines
    fence_tokens: int  # fences, notice and the labels packing made room for
    total_value: float
    upper_bound: float
    proven_optimal: bool
    packed_ids: tuple[str, ...]  # the injected memories' ids, in block order
    ranked: Ranked  # every candidate's figures, final score highest first
    packed_rows: tuple[int, ...]  # the injected memories' rows of ``ranked``, in block order
    bundle_stats: BundleStats | None = None

    @property
    def candidates(self) -> tuple[MemoryExplanation, ...]:
        """Every candidate's figures and fate, final score highest first."""
        return self.ranked.explained()

    @property
    def packed(self) -> tuple[MemoryExplanation, ...]:
        """The injected candidates' figures, in block order (by source, best first within one)."""
        explained = self.candidates
        return tuple(explained[i] for i in self.packed_rows)

    @property
    def dropped(self) -> dict[str, tuple[str, ...]]:
        """The ids of the candidates each fate other than ``packed`` took, by fate."""
        ids = [candidate.record.id for candidate in self.ranked.candidates]
        status = self.ranked.status
        return {
            name: tuple([ids[i] for i, fate in enumerate(status) if fate == name])
            for name in DROPPED
        }

    @property
    def memories(self) -> list[Candidate]:
        """The injected candidates in block order."""
        return [m.candidate for m in self.packed]

    def explain(self) -> dict[str, Any]:
        """The explain-mode figures (the documented ``candidates``, ``memories``, ``block``, plus
        every candidate's fate and the packing figures)."""
        return {
            "candidates": len(self.candidates),
            "memories": [m.to_dict() for m in self.packed],
            "block": self.block,
            "rendered_tokens": self.rendered_tokens,
            "budget_tokens": self.effective_budget,
            "packer": self.packer,
            "proven_optimal": self.proven_optimal,
            "dropped": {status: list(ids) for status, ids in self.dropped.items()},
            "ranked": [m.to_dict() for m in self.candidates],
        }


def priced_values(
    values: Sequence[float],
    priors: Sequence[float],
    costs: Sequence[int],
    kept: Sequence[int],
    price: float,
) -> tuple[dict[int, float], list[int]]:
    """The packer's values under the token price, and the ``kept`` indices that still pay.

    With ``price`` p > 0 an item is worth what the query adds to it (``values[i] - priors[i]``,
    priors never above values) minus ``p / PRICE_UNIT_TOKENS`` per token of its line; it is kept
    only when that is positive. Invariants: ``price == 0`` keeps every item at its own value; a
    kept item's net value is positive and below ``values[i] - priors[i]``; a higher price never
    keeps an item that a lower one dropped; an item the query adds nothing to is never kept.
    """
    if price <= 0:
        return {i: values[i] for i in kept}, list(kept)
    per_token = price / PRICE_UNIT_TOKENS
    net = {i: values[i] - priors[i] - per_token * costs[i] for i in kept}
    paying = {i: value for i, value in net.items() if value > 0}
    return paying, [i for i in kept if i in paying]


class Reorder:
    """Items of a sequence in a given order of its indices, as a tuple: ``itemgetter`` does it
    in C, about three times a comprehension's speed (one or no index: the comprehension)."""

    def __init__(self, order: Sequence[int]) -> None:
        self.order = order
        self.get = itemgetter(*order) if len(order) > 1 else None

    def __call__(self, items: Sequence[T]) -> tuple[T, ...]:
        if self.get is None:
            return tuple([items[p] for p in self.order])
        picked: tuple[T, ...] = self.get(items)
        return picked


def searched(profile: Profile, stemmed: bool) -> frozenset[str]:
    """The set of a text's ``profile`` a query's words are looked up in (``words.unambiguous``)."""
    return profile[2] if stemmed else profile[0]


def assemble(
    candidates: Sequence[Candidate],
    query: str,
    budget: int,
    *,
    now: datetime,
    tokens: BlockTokens,
    config: AssemblerConfig | None = None,
) -> Assembly:
    """Score, bundle, dedup, pack and render ``candidates`` within ``budget`` tokens."""
    cfg = config if config is not None else AssemblerConfig()
    encoding, count, newline = tokens.encoding, tokens.content, tokens.newline
    limit = max(0, budget if cfg.max_tokens is None else min(budget, cfg.max_tokens))
    stopwords = STOPWORDS if cfg.drop_stopwords else frozenset()
    query_words = normalise_words(query, stopwords=stopwords, stemmed=cfg.stemmed)
    # Per candidate, in the store's order: plain figures only (explanations are built on read).
    records_in = [candidate.record for candidate in candidates]
    # A text's match set, dedup signature and match bases, one memo lookup a candidate
    # (computed by the store's warm-up, or when the text is first met: ``profiles.py``); the
    # found words are ``query_matcher``'s.
    profiles = text_profile.each([record.content for record in records_in])
    keys, lookup = query_forms(query_words, stemmed=cfg.stemmed)
    # A dialog turn's overlap also finds the words of the turn before it, the text it was
    # embedded with (adr/0142); its dedup signature and tokens stay its own text's.
    matches: list[AbstractSet[str]]
    stemmed = cfg.stemmed
    if unambiguous(query_words, keys, stemmed=stemmed):
        # The query words among each text's bases (stemmed) or words: the same sets as below,
        # one C set operation a candidate probing the query's few words, not their forms.
        matches = [
            query_words & (bases if stemmed else words)
            | query_words & searched(text_profile(record.context), stemmed)
            if record.context
            else query_words & (bases if stemmed else words)
            for (words, _, bases), record in zip(profiles, records_in, strict=True)
        ]
    else:  # two query words share a form: the longer one finds it (``query_forms``)
        matches = [
            set(map(lookup, keys & words | keys & text_profile(record.context)[0]))
            if record.context
            else set(map(lookup, keys & words))
            for (words, _, _), record in zip(profiles, records_in, strict=True)
        ]
    idf = cfg.idf_overlap
    weights = idf_weights(matches) if idf else {}
    weight_of = weights.__getitem__
    # Sums of weights are exact (``fsum``): a set's order follows its strings' hashes, which
    # change with each process, and a plain sum in that order could differ in its last bit.
    mass = fsum(weights.values())  # ``weighted_overlap``'s denominator, summed once
    if idf and cfg.absolute_overlap:
        mass += len(query_words.difference(weights)) * unseen_weight(len(candidates))
    size = max(1, len(query_words))
    if not idf:
        overlaps = [len(found) / size for found in matches]
    elif mass > 0:
        overlaps = [fsum(map(weight_of, found)) / mass for found in matches]
    else:
        overlaps = [0.0] * len(matches)
    scores = final_scores(candidates, overlaps, now, cfg.composite_weight, cfg.keyword_weight)
    synths, finals, priors = scores.synths, scores.finals, scores.priors
    content_tokens = [
        # ``token_count``, without the call
        stored if (stored := record.tokens.get(encoding)) is not None else count(record.content)
        for record in records_in
    ]
    # Highest final score first; ties keep the store's order (the sort is stable, also reversed).
    # Every list below is in this order: a row is a position in it.
    order = sorted(range(len(finals)), key=finals.__getitem__, reverse=True)
    pick = Reorder(order)
    ranked = pick(candidates)
    records = pick(records_in)
    saliences = pick(finals)
    status = [PACKER] * len(order)

    exponent = cfg.value_exponent
    values_all = [final**exponent for final in saliences]
    prior_values = [prior**exponent for prior in pick(priors)]
    tokens_of = pick(content_tokens)
    costs = [n + newline for n in tokens_of]  # a line's label is its group's (render.py)

    created = [record.created_at for record in records]
    picked = shortlist(saliences, priorities_of(saliences, created, cfg.bundle, now), cfg.bundle)
    survivors = picked.kept  # in final score order
    if len(survivors) < len(order):
        kept_rows = set(survivors)
        for i in range(len(order)):
            if i not in kept_rows:
                status[i] = BUNDLE

    if len(survivors) == len(order):  # the bundle kept all (up to 100 candidates)
        signatures = [profiles[p][1] for p in order]
    else:
        signatures = [NO_SIGNATURE] * len(order)
        for i in survivors:
            signatures[i] = profiles[order[i]][1]
    kept, duplicates = dedup_walk(signatures, survivors, cfg.dedup_threshold)
    for i in duplicates:
        status[i] = DUPLICATE

    if cfg.token_price > 0 and cfg.neighbour_window >= 0:
        # What the question adds to a dialog turn counts for the turns beside it (adr/0114).
        # Only turns: other memories written in one batch share a time without being a dialog.
        gains = neighbour_gains(
            [v - p for v, p in zip(values_all, prior_values, strict=True)],
            created,
            [r.user if r.source == "conversation" else None for r in records],
            window=cfg.neighbour_window,
        )
        prior_values = [v - g for v, g in zip(values_all, gains, strict=True)]
    net, priced = priced_values(values_all, prior_values, costs, kept, cfg.token_price)
    for i in kept:
        if i not in net:
            status[i] = FLOOR

    # Room for a label of every source that could be packed: the few tokens of a label not
    # needed are less than the cost of trimming a line.
    fence_tokens = tokens.framing([records[i].source for i in priced]) if priced else 0
    room = max(0, limit - fence_tokens)
    solve = select_optimal if cfg.packer == "optimal" else select_greedy
    solution = solve([net[i] for i in priced], [costs[i] for i in priced], room)
    chosen = [priced[j] for j in solution.indices]

    block, rendered, trimmed, block_rows = render_rows(
        records, tokens_of, values_all, costs, chosen, limit, tokens
    )
    for i in chosen:
        status[i] = PACKED
    for i in trimmed:
        status[i] = TRIMMED
    rows = tuple(block_rows)
    return Assembly(
        query=query,
        budget=budget,
        effective_budget=limit,
        encoding=encoding,
        packer=cfg.packer,
        block=block,
        rendered_tokens=rendered,
        packed_tokens=sum(map(costs.__getitem__, rows)),
        fence_tokens=fence_tokens,
        total_value=sum(map(values_all.__getitem__, rows)),
        upper_bound=solution.upper_bound,
        proven_optimal=solution.proven_optimal and not trimmed,
        packed_ids=tuple([records[i].id for i in rows]),
        ranked=Ranked(
            ranked,
            pick(overlaps),
            pick(synths),
            saliences,
            values_all,
            tokens_of,
            costs,
            status,
            now,
        ),
        packed_rows=rows,
        bundle_stats=picked.stats,
    )
