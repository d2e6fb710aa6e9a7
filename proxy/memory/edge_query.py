"""The embedded store's queries: filters, and a search that returns point ids with cosines.

A search asks the shard for ids and scores only. Payloads cost more to return from a query than
the search itself (50 payloads: +0.7 ms at 10k memories) and the store serves most of them
from its ``RecordCache``. A hybrid search runs the dense and the BM25 branch as two plain
queries and fuses them in Python (``fusion.fused_keys``); the dense branch already carries the
cosine of its hits, so only lexical-only hits need a second, id-filtered dense query for theirs.
Measured at 10k memories: 0.8 ms against 2.3 ms for one fused query with payloads plus the
rescoring query (adr/0082).

Inside the store a point is keyed by an integer (``edge_ids``): its 64-bit id, or on a store
with UUID ids the UUID's integer. qdrant-edge hands UUID ids back as ``uuid.UUID`` objects, whose
``__hash__`` is Python code; a search hashed ~900 of them (fusion, cosines, record cache),
0.1-0.2 ms. The integer is read once per returned point.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any
from uuid import UUID

import numpy as np
import qdrant_edge as qe

from proxy.memory import lexical
from proxy.memory.edge_ids import PointIds
from proxy.memory.filters import (
    Condition,
    Liveness,
    list_conditions,
    liveness,
    repeat_conditions,
    scope_conditions,
    scope_users,
    turn_conditions,
    windows,
)
from proxy.memory.fusion import HYBRID_OVERSAMPLE, RRF_K, fused_keys
from proxy.memory.points import (
    CREATED_TS_KEY,
    DENSE_VECTOR,
    EXPIRES_TS_KEY,
    SPARSE_VECTOR,
    SUPERSEDED_KEY,
    TENANT_KEY,
    USER_KEY,
)
from proxy.memory.store import RepeatKey, SearchQuery, TurnsQuery

# A search's point keys (``key_of``) best first, and their dense cosines: a key without one
# (deleted between the branch query and its rescoring) scores 0.0.
Hits = tuple[list[int], dict[int, float]]
# The shard keeps int8 copies of the dense vectors (edge_shard.shard_config). Rescoring 3x top_k of
# them with the originals keeps cosines exact and, on an exact scan, results too (top-50 recall
# 1.000 at 10k memories; 0.926 without oversampling, and Qdrant does not rescore by default).
# On the HNSW graph, ``ef`` 256: top-50 recall 0.996 at 10k memories and 0.975 at 100k; on real
# text 0.987 at 10k, where 128 gives 0.971 for ~0.1 ms (adr/0156).
RESCORE_OVERSAMPLING = 3.0
HNSW_EF = 256
DENSE_PARAMS = qe.SearchParams(
    hnsw_ef=HNSW_EF,
    quantization=qe.QuantizationSearchParams(rescore=True, oversampling=RESCORE_OVERSAMPLING),
)
# The dense queries whose filter picks a handful of points (the rescoring of lexical-only hits
# by id, the neighbour lookup's time windows): the engine scores them all, and with the int8
# copies it scored them twice (int8, then the originals for up to 3x the limit, i.e. all of
# them). The originals alone give the same cosines and hits, ~5 us less each in a search at
# 10k memories (docs/benchmarks.md).
FEW_PARAMS = qe.SearchParams(hnsw_ef=HNSW_EF, quantization=qe.QuantizationSearchParams(ignore=True))


def key_of(pid: int | UUID | str) -> int:
    """The key of a point id in either scheme (``edge_ids``): a 64-bit id is its own key, a
    UUID id (object or string) keys by its integer. Per point in a search it cost more than
    the hashing it saves (12.5 against 2.6 us for 50 points): searches use ``PointIds``."""
    if isinstance(pid, UUID):
        return pid.int
    return pid if isinstance(pid, int) else UUID(pid).int


def nearest(vector: np.ndarray) -> qe.Query:
    """The dense query of ``vector``: built once a ``search_near`` (the list conversion and the
    engine's copy, ~15 us) for its search and its neighbour lookup."""
    return qe.Query.Nearest(vector.tolist(), using=DENSE_VECTOR)


def to_filter(conditions: list[Condition], live: Liveness | None = None) -> qe.Filter:
    """Return the shard filter requiring every condition (one value: equality, else any of),
    and, with ``live``, liveness."""
    must, must_not = clauses(conditions, live)
    return qe.Filter(must=must, must_not=must_not) if must_not else qe.Filter(must=must)


def clauses(conditions: list[Condition], live: Liveness | None) -> tuple[list[Any], list[Any]]:
    """The must and must-not clauses of ``to_filter``."""
    must: list[Any] = [
        qe.FieldCondition(key, match=qe.MatchValue(values[0]))
        if len(values) == 1
        else qe.FieldCondition(key, match=qe.MatchAny(list(values)))
        for key, values in conditions
    ]
    if live is None:
        return must, []
    must.append(qe.IsEmptyCondition(live.superseded_key))
    expired = qe.FieldCondition(live.expires_key, range=qe.RangeFloat(lte=live.at))
    return must, [expired]


def expired_filter(before: float) -> qe.Filter:
    """Return the filter of memories expired at or before ``before`` (epoch seconds)."""
    return qe.Filter(must=[qe.FieldCondition(EXPIRES_TS_KEY, range=qe.RangeFloat(lte=before))])


def tenant_filter(tenant: str) -> qe.Filter:
    """Return the filter of one tenant's memories."""
    return to_filter([(TENANT_KEY, (tenant,))])


def lifecycle_filters(tenant: str) -> list[qe.Filter]:
    """Return the filters of the tenant's memories that carry an expiry, and that were
    superseded: those a liveness condition can exclude (``edge_lifecycle``)."""
    tenant_only = qe.FieldCondition(TENANT_KEY, match=qe.MatchValue(tenant))
    return [
        qe.Filter(must=[tenant_only], must_not=[qe.IsEmptyCondition(key)])
        for key in (EXPIRES_TS_KEY, SUPERSEDED_KEY)
    ]


def scope_filter(
    tenant: str, query: SearchQuery, *, users: bool = True, tenants: bool = True
) -> qe.Filter | None:
    """Return the filter of a search (``store.scope_conditions``); ``users`` False leaves the
    user condition out (the tenant holds no other user's memory: ``edge_users``), ``tenants``
    False the tenant condition (the shard holds no other tenant's: ``edge_tenants``). ``None``:
    nothing is left to filter on (an empty filter is not free to the engine)."""
    dropped = ([] if users else [USER_KEY]) + ([] if tenants else [TENANT_KEY])
    conditions = [c for c in scope_conditions(tenant, query) if c[0] not in dropped]
    live = liveness(query)
    return to_filter(conditions, live) if conditions or live is not None else None


def others_filter(tenant: str, user: str) -> qe.Filter:
    """Return the filter of the tenant's memories a search of ``user`` does not see."""
    return qe.Filter(
        must=[qe.FieldCondition(TENANT_KEY, match=qe.MatchValue(tenant))],
        must_not=[qe.FieldCondition(USER_KEY, match=qe.MatchAny(list(scope_users(user))))],
    )


def repeat_filter(tenant: str, keys: Collection[RepeatKey], live_at: float) -> qe.Filter:
    """Return the filter of a repeat lookup (``filters.repeat_conditions``), live only."""
    return to_filter(repeat_conditions(tenant, keys), Liveness(live_at))


def turns_filter(tenant: str, query: TurnsQuery, *, tenants: bool = True) -> qe.Filter:
    """Return the filter of a neighbour lookup (``filters.turn_conditions``, live only);
    ``tenants`` False leaves the tenant condition out (``edge_tenants``)."""
    conditions = turn_conditions(tenant, query.user)
    if not tenants:
        conditions = [condition for condition in conditions if condition[0] != TENANT_KEY]
    must, must_not = clauses(conditions, Liveness(query.live_at.timestamp()))
    near: list[Any] = [
        qe.FieldCondition(CREATED_TS_KEY, range=qe.RangeFloat(gte=low, lte=high))
        for low, high in windows(query)
    ]
    # One flat filter (its clauses are ANDed, ``should`` needs any one window): with the scope
    # as a nested filter it took 58.6 against 42.9 us to build (docs/benchmarks.md).
    return qe.Filter(must=must, must_not=must_not, should=near)


def list_filter(tenant: str, user: str | None, source: str | None) -> qe.Filter:
    """Return the filter of ``list`` (``store.list_conditions``)."""
    return to_filter(list_conditions(tenant, user, source))


def search_hits(
    shard: qe.EdgeShard,
    tenant: str,
    query: SearchQuery,
    vector: np.ndarray,
    *,
    hybrid: bool,
    ids: PointIds,
    users: bool = True,
    tenants: bool = True,
    dense: qe.Query | None = None,
) -> Hits:
    """Return the keys of the best ``query.top_k`` points of the query's scope, best first,
    and their cosines.

    Dense only, or (``hybrid`` and the text has terms) dense and BM25 fused by RRF; with
    ``query.lexical`` the BM25 branch's hits the fused cut leaves out follow, in BM25 order
    (the branch is fetched anyway: they cost their dense rescoring only; adr/0136). ``users``
    and ``tenants`` False search without the user or the tenant condition (``scope_filter``).
    ``dense``: ``nearest(vector)`` if the caller has it already.
    """
    scope = scope_filter(tenant, query, users=users, tenants=tenants)
    dense = nearest(vector) if dense is None else dense
    indices, values = lexical.encode_query(query.text) if hybrid else ([], [])
    if not indices:
        found = shard.query(
            qe.QueryRequest(
                limit=query.top_k,
                query=dense,
                filter=scope,
                with_payload=False,
                params=DENSE_PARAMS,
            )
        )
        cosine = ids.scored(found)
        return list(cosine), cosine
    branch = query.top_k * HYBRID_OVERSAMPLE
    lexical_query = qe.Query.Nearest(qe.SparseVector(indices, values), using=SPARSE_VECTOR)
    # Both requests built first: the two engine calls run back to back. Not on two threads:
    # the engine holds the GIL through a query, so they would not overlap (adr/0167).
    dense_request = qe.QueryRequest(
        limit=branch, query=dense, filter=scope, with_payload=False, params=DENSE_PARAMS
    )
    lexical_request = qe.QueryRequest(
        limit=branch, query=lexical_query, filter=scope, with_payload=False
    )
    dense_found = shard.query(dense_request)
    lexical_found: list[Any] = shard.query(lexical_request)
    cosine = ids.scored(dense_found)
    lexical_ids = ids.keyed(lexical_found)
    keys = fused_keys(cosine, lexical_ids, k=RRF_K, limit=query.top_k)
    if query.lexical:
        kept = set(keys)
        keys.extend(key for key in lexical_ids if key not in kept)
    missing = [lexical_ids[key] for key in keys if key not in cosine]
    if missing:
        # The scope is not repeated: these ids came out of a scoped branch query.
        rescored = shard.query(
            qe.QueryRequest(
                limit=len(missing),
                query=dense,
                filter=qe.Filter(must=[qe.HasIdCondition(set(missing))]),
                with_payload=False,
                params=FEW_PARAMS,
            )
        )
        cosine.update(ids.scored(rescored))
    return keys, cosine
