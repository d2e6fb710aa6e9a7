"""Which memories a call may see, as backend-neutral conditions each store translates.

A condition is a payload key and the values any of which matches. Both stores build their
filters from these functions, so the scoping rules (a user sees their own memories and the
tenant's shared ones) exist once.
"""

from __future__ import annotations

from proxy.memory.points import SOURCE_KEY, TENANT_KEY, USER_KEY
from proxy.memory.store import SHARED_USER, SearchQuery

Condition = tuple[str, tuple[str, ...]]


def scope_conditions(tenant: str, query: SearchQuery) -> list[Condition]:
    """What a search may see: the tenant, the user plus shared memories, the sources."""
    users = (SHARED_USER,) if query.user == SHARED_USER else (query.user, SHARED_USER)
    conditions: list[Condition] = [(TENANT_KEY, (tenant,)), (USER_KEY, users)]
    if query.sources is not None:
        conditions.append((SOURCE_KEY, tuple(query.sources)))
    return conditions


def list_conditions(tenant: str, user: str | None, source: str | None) -> list[Condition]:
    """What ``list`` (and ``delete_user``) may see: the tenant, optionally one user and source."""
    conditions: list[Condition] = [(TENANT_KEY, (tenant,))]
    if user is not None:
        conditions.append((USER_KEY, (user,)))
    if source is not None:
        conditions.append((SOURCE_KEY, (source,)))
    return conditions
