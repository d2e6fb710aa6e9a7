"""Composite memory scorer (seed milestone 3.5.4), with the seed's defects fixed.

Score = 0.40 relevance + 0.25 recency + 0.20 usefulness + 0.10 confidence + 0.05 frequency,
exactly as the seed. ``recency = exp(-0.05 * age_days)`` (about a 14-day half-life) and
``frequency = min(retrieval_count / 50, 1)``.

Integration contract (stable):

- ``MemoryScorer().score(memories, now=...)`` accepts plain dicts as in the seed (keys
  ``similarity``, ``created_at``, ``usefulness_score`` or ``usefulness``, ``confidence``,
  ``retrieval_count``); ``score_candidates(candidates, now=...)`` is the typed fast path used by
  the assembler. Both return ``ScoredMemory`` sorted by composite score, highest first (stable).
- ``now`` is always passed in: the engine never reads the clock.

Clamping rules (fixes over the seed): every component ends in [0, 1].

- relevance, usefulness, confidence: ``None``, NaN or unparsable -> the default (0.0, 0.5, 0.8);
  otherwise clamped into [0, 1].
- recency: missing or unparsable ``created_at`` -> 0.5; a naive timestamp is UTC; an offset is
  converted, not overwritten; a ``created_at`` in the future has age 0, so recency 1.0.
- frequency: ``None``/NaN/negative -> 0; capped at 1.0 from 50 retrievals.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from proxy.context.records import Candidate
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
DEFAULT_USEFULNESS = 0.5
DEFAULT_CONFIDENCE = 0.8
SCORE_DECIMALS = 6

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


@dataclass(frozen=True, slots=True)
class ScoredMemory:
    """A memory with its composite score and every component (each in [0, 1]).

    ``memory`` is whatever was scored: a dict (seed path) or a ``Candidate`` (typed path).
    ``tokens`` is the memory's stored token count when the caller knows it, else ``None``.
    """

    memory: Any
    composite_score: float
    relevance_score: float
    recency_score: float
    usefulness_score: float
    confidence_score: float
    frequency_score: float
    tokens: int | None = None


def unit(value: Any, default: float) -> float:
    """Clamp ``value`` into [0, 1]; ``None``, NaN and non-numbers become ``default``."""
    if value is None:
        return default
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    if math.isnan(number):
        return default
    return min(1.0, max(0.0, number))


def fast_unit(value: Any, default: float) -> float:
    """``unit`` with a shortcut for the common case, a float already in [0, 1]."""
    if type(value) is float and 0.0 <= value <= 1.0:
        return value
    return unit(value, default)


def parse_time(value: Any) -> datetime | None:
    """Return an aware UTC datetime from a datetime or ISO string; naive means UTC."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str) and value:
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return None
    else:
        return None
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def recency(created_at: Any, now: datetime) -> float:
    """``exp(-λ·age_days)``; unknown age 0.5, future timestamps 1.0."""
    moment = parse_time(created_at)
    if moment is None:
        return UNKNOWN_AGE_RECENCY
    reference = parse_time(now)
    if reference is None:
        raise ValueError("now must be a datetime")
    age_days = max(0.0, (reference - moment).total_seconds() / SECONDS_PER_DAY)
    return math.exp(-RECENCY_DECAY_LAMBDA * age_days)


def frequency(count: Any) -> float:
    """``min(count / 50, 1)``, with None/NaN/negative counts scoring 0."""
    return unit(unit_count(count), 0.0)


def fast_frequency(count: Any) -> float:
    """``frequency`` with a shortcut for the common case, a non-negative int count."""
    if type(count) is int and count >= 0:
        return min(1.0, count / ACCESS_FREQUENCY_CAP)
    return frequency(count)


def unit_count(count: Any) -> float:
    """Return ``count / 50`` or 0.0 when ``count`` is not a usable number."""
    try:
        number = float(count)
    except (TypeError, ValueError):
        return 0.0
    if math.isnan(number):
        return 0.0
    return number / ACCESS_FREQUENCY_CAP


def composite(
    relevance_score: float,
    recency_score: float,
    usefulness_score: float,
    confidence_score: float,
    frequency_score: float,
) -> float:
    """The seed's weighted sum, rounded to 6 decimals like the seed."""
    return round(
        WEIGHT_RELEVANCE * relevance_score
        + WEIGHT_RECENCY * recency_score
        + WEIGHT_USEFULNESS * usefulness_score
        + WEIGHT_CONFIDENCE * confidence_score
        + WEIGHT_FREQUENCY * frequency_score,
        SCORE_DECIMALS,
    )


def build(
    memory: Any, parts: tuple[float, float, float, float, float], tokens: int | None
) -> ScoredMemory:
    """Assemble a ``ScoredMemory`` from clamped components."""
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


def sort_scored(scored: Iterable[ScoredMemory]) -> list[ScoredMemory]:
    """Sort highest composite first; ties keep input order (stable)."""
    return sorted(scored, key=lambda item: item.composite_score, reverse=True)


class MemoryScorer:
    """Applies the composite formula; weights are constants (changing them needs an ADR)."""

    def score(
        self,
        memories: Iterable[Mapping[str, Any]],
        query_embedding: Sequence[float] | None = None,
        *,
        now: datetime,
    ) -> list[ScoredMemory]:
        """Score dict memories (seed path) and return them highest score first.

        ``query_embedding`` is accepted for the seed's signature; similarity is pre-computed by
        the vector search and read from ``memory["similarity"]``.
        """
        del query_embedding
        return sort_scored(self.score_one(memory, now=now) for memory in memories)

    @staticmethod
    def score_one(memory: Mapping[str, Any], *, now: datetime) -> ScoredMemory:
        """Score one dict memory."""
        usefulness_raw = memory.get("usefulness_score", memory.get("usefulness"))
        parts = (
            unit(memory.get("similarity"), DEFAULT_RELEVANCE),
            recency(memory.get("created_at"), now),
            unit(usefulness_raw, DEFAULT_USEFULNESS),
            unit(memory.get("confidence"), DEFAULT_CONFIDENCE),
            frequency(memory.get("retrieval_count")),
        )
        tokens = memory.get("tokens")
        return build(memory, parts, tokens if isinstance(tokens, int) else None)

    def score_candidates(
        self,
        candidates: Iterable[Candidate],
        *,
        now: datetime,
        encoding: str | None = None,
    ) -> list[ScoredMemory]:
        """Score typed candidates (the pipeline's path), highest score first.

        With ``encoding``, each result carries the record's stored token count for it.
        """
        return sort_scored(self.score_candidate(c, now=now, encoding=encoding) for c in candidates)

    @staticmethod
    def score_candidate(
        candidate: Candidate, *, now: datetime, encoding: str | None = None
    ) -> ScoredMemory:
        """Score one typed candidate."""
        record = candidate.record
        created = record.created_at
        if isinstance(created, datetime) and created.tzinfo is not None and now.tzinfo is not None:
            # Fast path for the typed records (aware datetimes): same rule as ``recency``.
            age_days = (now - created).total_seconds() / SECONDS_PER_DAY
            recency_score = 1.0 if age_days <= 0 else math.exp(-RECENCY_DECAY_LAMBDA * age_days)
        else:
            recency_score = recency(created, now)
        parts = (
            fast_unit(candidate.similarity, DEFAULT_RELEVANCE),
            recency_score,
            fast_unit(record.usefulness, DEFAULT_USEFULNESS),
            fast_unit(record.confidence, DEFAULT_CONFIDENCE),
            fast_frequency(record.retrieval_count),
        )
        tokens = record.token_count(encoding) if encoding is not None else None
        return build(candidate, parts, tokens)
