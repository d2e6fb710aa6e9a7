"""Which memories a call may see, as backend-neutral conditions each store translates.

A condition is a payload key and the values any of which matches. Both stores build their
filters from these functions, so the scoping rules (a user sees their own memories and the
tenant's shared ones) exist once.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from proxy.memory.points import (
    EXPIRES_TS_KEY,
    SOURCE_KEY,
    SUPERSEDED_KEY,
    TENANT_KEY,
    USER_KEY,
    WORDS_KEY,
)
from proxy.memory.store import SHARED_USER, RepeatKey, SearchQuery, TurnsQuery

Condition = tuple[str, tuple[str, ...]]
DIALOG_SOURCE = "conversation"  # the source of dialog turns


@dataclass(frozen=True, slots=True)
class Liveness:
    """Only live memories: ``SUPERSEDED_KEY`` absent (empty), and no ``EXPIRES_TS_KEY`` at or
    before ``at`` (epoch seconds). Both are written only when set, so old points are live."""

    at: float
    expires_key: str = EXPIRES_TS_KEY
    superseded_key: str = SUPERSEDED_KEY


def liveness(query: SearchQuery) -> Liveness | None:
    """The liveness condition of a search (``None``: it asked for none)."""
    return Liveness(query.live_at.timestamp()) if query.live_at is not None else None


def scope_users(user: str) -> tuple[str, ...]:
    """Whose memories a search of ``user`` sees: theirs and the tenant's shared ones."""
    return (SHARED_USER,) if user == SHARED_USER else (user, SHARED_USER)


def scope_conditions(tenant: str, query: SearchQuery) -> list[Condition]:
    """What a search may see: the tenant, the user plus shared memories, the sources."""
    conditions: list[Condition] = [(TENANT_KEY, (tenant,)), (USER_KEY, scope_users(query.user))]
    if query.sources is not None:
        conditions.append((SOURCE_KEY, tuple(query.sources)))
    return conditions


def repeat_conditions(tenant: str, keys: Collection[RepeatKey]) -> list[Condition]:
    """What a repeat lookup may see: memories of the keys' users with one of their words keys.

    A superset when ``keys`` pair several users with several words keys (any user with any key
    matches); the caller keeps the exact pairs (``points.repeats_among``)."""
    users = tuple(sorted({user for user, _ in keys}))
    words = tuple(sorted({key for _, key in keys}))
    return [(TENANT_KEY, (tenant,)), (USER_KEY, users), (WORDS_KEY, words)]


def turn_conditions(tenant: str, user: str) -> list[Condition]:
    """What a neighbour lookup (``turns_near``) may see: the user's own dialog turns."""
    return [(TENANT_KEY, (tenant,)), (USER_KEY, (user,)), (SOURCE_KEY, (DIALOG_SOURCE,))]


def windows(query: TurnsQuery) -> list[tuple[float, float]]:
    """The epoch-second ranges ``[t - window_s, t + window_s]`` around the query's times."""
    span = query.window_s
    # One ``timestamp()`` a time: ~0.7 us each on an aware datetime, 10 times a search.
    return [(at - span, at + span) for at in (t.timestamp() for t in query.times)]


def list_conditions(tenant: str, user: str | None, source: str | None) -> list[Condition]:
    """What ``list`` (and ``delete_user``) may see: the tenant, optionally one user and source."""
    conditions: list[Condition] = [(TENANT_KEY, (tenant,))]
    if user is not None:
        conditions.append((USER_KEY, (user,)))
    if source is not None:
        conditions.append((SOURCE_KEY, (source,)))
    return conditions
