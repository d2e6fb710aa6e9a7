"""Ranking figures on typed records: the seed's composite score and the synthesizer's source score.

composite = 0.40 relevance + 0.25 recency + 0.20 usefulness + 0.10 confidence + 0.05 frequency,
exactly as the scorer seed (milestone 3.5.4, ADR-0040), with ``recency = exp(-0.05 * age_days)``
(about a 14-day half-life) and ``frequency = min(retrieval_count / 50, 1)``; only the composite
is rounded (6 decimals, as the seed). Every component ends in [0, 1]: values are clamped, NaN
takes the field's default, a ``created_at`` in the future has age 0. The inputs are typed
(``Candidate``: floats, an int count, aware datetimes); the seed's loose dict fields are
converted once by the seed layer (``scorer.py``). ``now`` is always passed in.

The synthesizer seed's score is ``base(source) * 0.5 + overlap * 0.5`` (``fragment_score``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from proxy.context.records import DEFAULT_CONFIDENCE, DEFAULT_USEFULNESS, Candidate
from proxy.errors import ConfigError

WEIGHT_RELEVANCE = 0.40
WEIGHT_RECENCY = 0.25
WEIGHT_USEFULNESS = 0.20
WEIGHT_CONFIDENCE = 0.10
WEIGHT_FREQUENCY = 0.05

RECENCY_DECAY_LAMBDA = 0.05  # ln(2)/14 = 0.0495: the seed's "14-day half-life", kept exact
ACCESS_FREQUENCY_CAP = 50.0
SECONDS_PER_DAY = 86_400.0
UNKNOWN_AGE_RECENCY = 0.5
DEFAULT_RELEVANCE = 0.0
SCORE_DECIMALS = 6
SCORE_SCALE = 10.0**SCORE_DECIMALS  # exact: 1e6
# ``rounded``'s fast path: below this magnitude the scaled score is off by under 1e-7, so a
# fraction this far from one half rounds as the exact value does.
FAST_ROUND_LIMIT = 1e3
FAST_ROUND_MARGIN = 1e-6

# A plain `assert` disappears under `python -O`; this check must fail the import every time.
if (
    abs(
        WEIGHT_RELEVANCE
        + WEIGHT_RECENCY
        + WEIGHT_USEFULNESS
        + WEIGHT_CONFIDENCE
        + WEIGHT_FREQUENCY
        - 1.0
    )
    >= 1e-9
):  # pragma: no cover - only reachable by editing the constants
    raise ConfigError("Scoring weights must sum to 1.0")

# The synthesizer seed's base relevance of each memory source.
BASE_RELEVANCE: dict[str, float] = {
    "learnings": 0.7,
    "playbook": 0.6,
    "conversation": 0.5,
    "summaries": 0.4,
}
DEFAULT_BASE_RELEVANCE = 0.5
BASE_WEIGHT = 0.5
OVERLAP_WEIGHT = 0.5

M = TypeVar("M")


@dataclass(frozen=True, slots=True)
class ScoredMemory(Generic[M]):
    """A memory with its composite score and every component (each in [0, 1]).

    ``memory`` is what was scored: a ``Candidate`` in the engine, a dict in the seed's API.
    ``tokens`` is the memory's stored token count when the caller knows it, else ``None``.
    """

    memory: M
    composite_score: float
    relevance_score: float
    recency_score: float
    usefulness_score: float
    confidence_score: float
    frequency_score: float
    tokens: int | None = None


def unit(value: float, default: float) -> float:
    """``value`` clamped into [0, 1]; NaN becomes ``default``."""
    if 0.0 <= value <= 1.0:  # the common case; false for NaN
        return value
    if math.isnan(value):
        return default
    return 1.0 if value > 1.0 else 0.0


def age_days(created_at: datetime, now: datetime) -> float:
    """Days from ``created_at`` to ``now`` (negative for a future time); both aware."""
    return (now - created_at).total_seconds() / SECONDS_PER_DAY


def recency(created_at: datetime, now: datetime) -> float:
    """``exp(-λ·age_days)``; a future ``created_at`` scores 1.0."""
    age = age_days(created_at, now)
    return 1.0 if age <= 0 else math.exp(-RECENCY_DECAY_LAMBDA * age)


def frequency(count: float) -> float:
    """``min(count / 50, 1)``; negative counts (and NaN) score 0."""
    share = count / ACCESS_FREQUENCY_CAP
    if 0.0 <= share <= 1.0:
        return share
    return 1.0 if share > 1.0 else 0.0


def composite(
    relevance_score: float,
    recency_score: float,
    usefulness_score: float,
    confidence_score: float,
    frequency_score: float,
) -> float:
    """The seed's weighted sum, rounded to 6 decimals like the seed."""
    return rounded(
        WEIGHT_RELEVANCE * relevance_score
        + WEIGHT_RECENCY * recency_score
        + WEIGHT_USEFULNESS * usefulness_score
        + WEIGHT_CONFIDENCE * confidence_score
        + WEIGHT_FREQUENCY * frequency_score
    )


def rounded(value: float) -> float:
    """``round(value, SCORE_DECIMALS)``, the same float, about three times faster.

    ``round`` with digits goes through a decimal conversion. Scaled by 10**6, a value under
    ``FAST_ROUND_LIMIT`` is within 1e-7 of its exact product, so unless that product is near a
    half its nearest integer is the exact value's, and dividing it by 10**6 gives the double
    nearest the decimal, which is what ``round`` returns. Near halves, zero (its sign) and
    large, NaN or infinite values take ``round`` itself.
    """
    if -FAST_ROUND_LIMIT < value < FAST_ROUND_LIMIT:
        scaled = value * SCORE_SCALE
        whole = round(scaled)
        if whole and abs(scaled - whole) < 0.5 - FAST_ROUND_MARGIN:
            return whole / SCORE_SCALE
    return round(value, SCORE_DECIMALS)


def scored(
    memory: M, parts: tuple[float, float, float, float, float], tokens: int | None
) -> ScoredMemory[M]:
    """A ``ScoredMemory`` from clamped components (relevance, recency, usefulness, confidence,
    frequency)."""
    rel, rec, use, conf, freq = parts
    # Only the composite is rounded (as the seed does): rounding five components per candidate
    # cost a fifth of the assembler's time; explain output rounds for display.
    return ScoredMemory(
        memory=memory,
        composite_score=composite(rel, rec, use, conf, freq),
        relevance_score=rel,
        recency_score=rec,
        usefulness_score=use,
        confidence_score=conf,
        frequency_score=freq,
        tokens=tokens,
    )


def components(candidate: Candidate, now: datetime) -> tuple[float, float, float, float, float]:
    """One search hit's (relevance, recency, usefulness, confidence, frequency) at ``now``
    (aware): ``composite(*components(...))`` is its composite score."""
    record = candidate.record
    return (
        unit(candidate.similarity, DEFAULT_RELEVANCE),
        recency(record.created_at, now),
        unit(record.usefulness, DEFAULT_USEFULNESS),
        unit(record.confidence, DEFAULT_CONFIDENCE),
        frequency(record.retrieval_count),
    )


def composites(candidates: Sequence[Candidate], now: datetime) -> tuple[list[float], list[float]]:
    """Each hit's relevance and composite at ``now``: ``components(c, now)[0]`` and
    ``composite(*components(c, now))``, the same floats (property-tested)."""
    figures = final_scores(candidates, [0.0] * len(candidates), now, 1.0, 0.0)
    return figures.relevances, figures.composites


@dataclass(frozen=True, slots=True)
class FinalScores:
    """``final_scores``' figures, one list each, aligned with the candidates."""

    relevances: list[float]
    composites: list[float]
    synths: list[float]
    finals: list[float]
    priors: list[float]


def final_scores(
    candidates: Sequence[Candidate],
    overlaps: Sequence[float],
    now: datetime,
    composite_weight: float,
    keyword_weight: float,
) -> FinalScores:
    """Each hit's ranking figures at ``now``, given its keyword ``overlap``: its relevance and
    composite (``components(c, now)[0]`` and ``composite(*components(c, now))``, the same floats,
    property-tested), its synthesizer score ``fragment_score(base(source), overlap)``, its final
    score ``composite_weight * composite + keyword_weight * synth`` and its prior, the final less
    the query's share in it (``composite_weight`` of the similarity's weight, ``keyword_weight``
    of the overlap's), at least 0.

    The assembler scores 50-100 hits a request: one loop with every call inlined (seven calls
    and a tuple a hit were a fifth of its time once texts recur, docs/benchmarks.md); in-range
    values skip the clamps.
    """
    relevances: list[float] = []
    totals: list[float] = []
    synths: list[float] = []
    finals: list[float] = []
    priors: list[float] = []
    exp = math.exp
    base_of = BASE_RELEVANCE.get
    similarity_share = composite_weight * WEIGHT_RELEVANCE
    overlap_share = keyword_weight * OVERLAP_WEIGHT
    # ``frequency`` and ``rounded`` inlined, the same operations: two calls a hit fewer.
    near_half = 0.5 - FAST_ROUND_MARGIN
    for candidate, overlap in zip(candidates, overlaps, strict=True):
        record = candidate.record
        rel = candidate.similarity
        if not 0.0 <= rel <= 1.0:
            rel = unit(rel, DEFAULT_RELEVANCE)
        age = (now - record.created_at).total_seconds() / SECONDS_PER_DAY
        use = record.usefulness
        if not 0.0 <= use <= 1.0:
            use = unit(use, DEFAULT_USEFULNESS)
        conf = record.confidence
        if not 0.0 <= conf <= 1.0:
            conf = unit(conf, DEFAULT_CONFIDENCE)
        freq = record.retrieval_count / ACCESS_FREQUENCY_CAP
        if not 0.0 <= freq <= 1.0:
            freq = 1.0 if freq > 1.0 else 0.0
        relevances.append(rel)
        value = (
            WEIGHT_RELEVANCE * rel
            + WEIGHT_RECENCY * (1.0 if age <= 0 else exp(-RECENCY_DECAY_LAMBDA * age))
            + WEIGHT_USEFULNESS * use
            + WEIGHT_CONFIDENCE * conf
            + WEIGHT_FREQUENCY * freq
        )
        if (
            -FAST_ROUND_LIMIT < value < FAST_ROUND_LIMIT
            and (whole := round(scaled := value * SCORE_SCALE))
            and abs(scaled - whole) < near_half
        ):
            score = whole / SCORE_SCALE
        else:
            score = round(value, SCORE_DECIMALS)
        totals.append(score)
        base = base_of(record.source, DEFAULT_BASE_RELEVANCE)
        synth = base * BASE_WEIGHT + overlap * OVERLAP_WEIGHT
        final = composite_weight * score + keyword_weight * synth
        prior = final - (similarity_share * rel + overlap_share * overlap)
        synths.append(synth)
        finals.append(final)
        priors.append(prior if prior > 0.0 else 0.0)
    return FinalScores(relevances, totals, synths, finals, priors)


def score_candidate(
    candidate: Candidate, now: datetime, tokens: int | None = None
) -> ScoredMemory[Candidate]:
    """The composite score of one search hit at ``now`` (aware)."""
    return scored(candidate, components(candidate, now), tokens)


def sort_scored(items: Iterable[ScoredMemory[M]]) -> list[ScoredMemory[M]]:
    """Highest composite first; ties keep input order (stable)."""
    return sorted(items, key=lambda item: item.composite_score, reverse=True)


def fragment_score(base_relevance: float, overlap: float) -> float:
    """The synthesizer seed's ``base * 0.5 + overlap * 0.5``."""
    return base_relevance * BASE_WEIGHT + overlap * OVERLAP_WEIGHT
