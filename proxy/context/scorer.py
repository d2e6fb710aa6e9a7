"""Seed compatibility: the composite memory scorer of seed milestone 3.5.4, over the engine.

``MemoryScorer().score(memories, now=...)`` scores plain dicts as in the seed (keys
``similarity``, ``created_at``, ``usefulness_score`` or ``usefulness``, ``confidence``,
``retrieval_count``); ``score_candidates(candidates, now=...)`` scores typed search hits. Both
return ``ScoredMemory`` sorted by composite score, highest first (stable). The formula, its
weights and clamping are the engine's (``ranking``); this layer converts the seed's loose dict
fields once, with the seed's defects fixed:

- relevance, usefulness, confidence: ``None``, NaN or unparsable -> the default (0.0, 0.5, 0.8);
  otherwise clamped into [0, 1].
- recency: missing or unparsable ``created_at`` -> 0.5; a naive timestamp is UTC; an offset is
  converted, not overwritten; a ``created_at`` in the future has age 0, so recency 1.0.
- frequency: ``None``/NaN/unparsable/negative -> 0; capped at 1.0 from 50 retrievals.
- ``now`` is always passed in: the engine never reads the clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from proxy.context import ranking
from proxy.context.ranking import (
    ACCESS_FREQUENCY_CAP,
    DEFAULT_RELEVANCE,
    RECENCY_DECAY_LAMBDA,
    SCORE_DECIMALS,
    SECONDS_PER_DAY,
    UNKNOWN_AGE_RECENCY,
    WEIGHT_CONFIDENCE,
    WEIGHT_FREQUENCY,
    WEIGHT_RECENCY,
    WEIGHT_RELEVANCE,
    WEIGHT_USEFULNESS,
    ScoredMemory,
    composite,
    scored,
    sort_scored,
)
from proxy.context.records import DEFAULT_CONFIDENCE, DEFAULT_USEFULNESS, Candidate
from proxy.tokenizer import tiktoken_tokenizer

__all__ = [
    "ACCESS_FREQUENCY_CAP",
    "DEFAULT_CONFIDENCE",
    "DEFAULT_RELEVANCE",
    "DEFAULT_USEFULNESS",
    "RECENCY_DECAY_LAMBDA",
    "SCORE_DECIMALS",
    "SECONDS_PER_DAY",
    "UNKNOWN_AGE_RECENCY",
    "WEIGHT_CONFIDENCE",
    "WEIGHT_FREQUENCY",
    "WEIGHT_RECENCY",
    "WEIGHT_RELEVANCE",
    "WEIGHT_USEFULNESS",
    "MemoryScorer",
    "ScoredMemory",
    "composite",
    "frequency",
    "number",
    "parse_time",
    "recency",
    "unit",
]


def number(value: Any) -> float | None:
    """A loose field as a float; ``None``, NaN and non-numbers are ``None``."""
    if value is None:
        return None
    try:
        result = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(result) else result


def unit(value: Any, default: float) -> float:
    """A loose field clamped into [0, 1]; ``None``, NaN and non-numbers become ``default``."""
    result = number(value)
    return default if result is None else ranking.unit(result, default)


def frequency(count: Any) -> float:
    """``min(count / 50, 1)`` of a loose count; unusable and negative counts score 0."""
    result = number(count)
    return 0.0 if result is None else ranking.frequency(result)


def parse_time(value: Any) -> datetime | None:
    """An aware UTC datetime from a datetime or ISO string; naive means UTC; else ``None``."""
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
    """``exp(-λ·age_days)`` of a loose timestamp; unknown age 0.5, future timestamps 1.0."""
    moment = parse_time(created_at)
    if moment is None:
        return UNKNOWN_AGE_RECENCY
    reference = parse_time(now)
    if reference is None:
        raise ValueError("now must be a datetime")
    return ranking.recency(moment, reference)


class MemoryScorer:
    """Applies the composite formula; weights are constants (changing them needs an ADR)."""

    def score(
        self,
        memories: Iterable[Mapping[str, Any]],
        query_embedding: Sequence[float] | None = None,
        *,
        now: datetime,
    ) -> list[ScoredMemory[Mapping[str, Any]]]:
        """Score dict memories (seed path) and return them highest score first.

        ``query_embedding`` is accepted for the seed's signature; similarity is pre-computed by
        the vector search and read from ``memory["similarity"]``.
        """
        del query_embedding
        return sort_scored(self.score_one(memory, now=now) for memory in memories)

    @staticmethod
    def score_one(memory: Mapping[str, Any], *, now: datetime) -> ScoredMemory[Mapping[str, Any]]:
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
        return scored(memory, parts, tokens if isinstance(tokens, int) else None)

    def score_candidates(
        self,
        candidates: Iterable[Candidate],
        *,
        now: datetime,
        encoding: str | None = None,
    ) -> list[ScoredMemory[Candidate]]:
        """Score typed candidates, highest score first.

        With ``encoding``, each result carries the record's stored token count for it.
        """
        return sort_scored(self.score_candidate(c, now=now, encoding=encoding) for c in candidates)

    @staticmethod
    def score_candidate(
        candidate: Candidate, *, now: datetime, encoding: str | None = None
    ) -> ScoredMemory[Candidate]:
        """Score one typed candidate (the engine's ``ranking.score_candidate``)."""
        tokens = None
        if encoding is not None:
            tokens = candidate.record.token_count(encoding, tiktoken_tokenizer().counter(encoding))
        return ranking.score_candidate(candidate, now, tokens)
