"""Explain mode: what would be injected, in its documented shape (README), without an upstream call.

When something needs saying (a budget counted only as an upper bound, memories that could not be
injected, messages that cannot be shown), the document gets a ``notes`` list of sentences; it is
absent otherwise, so the usual document keeps exactly the contract's keys. Explain answers 200
whatever the body: it never fails where inject mode would forward.

``dropped`` lists every candidate that is not injected, best first, with the reason
(``DROP_REASONS``): a near-``duplicate`` of a better memory, below the token price (``floor``,
adr/0110), no room left in the memory budget (``cap`` when the ``max_tokens`` cap or
``X-Memory-Max-Tokens`` set that budget, ``budget`` when the context window did), or past the
assembler's candidate ``shortlist``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict

import orjson
from starlette.responses import Response

from proxy.context.allocation import TokenBudget
from proxy.context.assembler import (
    BUNDLE,
    DUPLICATE,
    FLOOR,
    PACKER,
    TRIMMED,
    Assembly,
    MemoryExplanation,
)

EXPLAIN_OBJECT = "memory.explain"
NOTE_BOUNDS = (
    "budget: the request is too large to count on the spot, and bounds from its UTF-8 length "
    "already fix memory_tokens exactly; the other token figures are those bounds (see counting)."
)
NOTE_UNFINISHED = (
    "budget: exact counting could not finish within the memory deadline; the token figures are "
    "upper bounds (counting: upper_bound), memory_tokens a safe lower figure, and no memories "
    "would be injected."
)
NOTE_NOT_INJECTED = (
    "These memories would not be injected: the request body cannot be re-encoded as sent "
    "(nesting deeper than 254 levels, or an integer beyond 64 bits), so it would be forwarded "
    "unchanged; messages shows that body."
)
NOTE_MESSAGES_HIDDEN = (
    "messages is null: they are nested deeper than the 254 levels this document can encode; "
    "they would be forwarded exactly as sent."
)
DROP_REASONS = ("duplicate", "floor", "cap", "budget", "shortlist")
SCORE_KEYS = ("composite", "relevance", "recency", "usefulness", "confidence", "frequency")


def memory_entry(item: MemoryExplanation) -> dict[str, object]:
    """One injected memory: id, source, content, tokens, metadata and the score components."""
    full = item.to_dict()
    entry: dict[str, object] = {
        "id": full["id"],
        "source": full["source"],
        "content": full["content"],
        "tokens": full["tokens"],
        "metadata": full["metadata"],
        "score": {key: full["score"][key] for key in SCORE_KEYS},
    }
    # Only for a memory that replaced another (fact capture, adr/0112): its earlier versions are
    # GET /v1/memories/{id}'s history. Other entries keep exactly the contract's keys.
    replaced = item.candidate.record.supersedes
    if replaced is not None:
        entry["supersedes"] = replaced
    return entry


def budget_fields(budget: TokenBudget | None, model: str) -> dict[str, object]:
    """Every ``TokenBudget`` field (tuples as lists); zeros when no budget was computed."""
    if budget is None:
        return {"model": model, "memory_tokens": 0}
    fields = asdict(budget)
    fields["message_counts"] = list(budget.message_counts)
    return fields


def out_of_room(budget: TokenBudget | None) -> str:
    """Why a memory that did not fit was left out: the cap's room, or the context window's."""
    if budget is None or budget.memory_cap is None:
        return "budget"
    return "cap" if budget.memory_tokens >= budget.memory_cap else "budget"


def drop_reason(status: str, budget: TokenBudget | None) -> str | None:
    """The explain reason of an assembler fate; ``None`` for a packed memory."""
    if status in (PACKER, TRIMMED):
        return out_of_room(budget)
    return {DUPLICATE: "duplicate", FLOOR: "floor", BUNDLE: "shortlist"}.get(status)


def dropped_entries(assembly: Assembly, budget: TokenBudget | None) -> list[dict[str, object]]:
    """Every candidate left out, best first: id, reason, final score and content tokens."""
    entries: list[dict[str, object]] = []
    for item in assembly.candidates:
        reason = drop_reason(item.status, budget)
        if reason is not None:
            entries.append(
                {
                    "id": item.id,
                    "reason": reason,
                    "score": round(item.final_score, 6),
                    "tokens": item.tokens,
                }
            )
    return entries


def explain_body(
    model: str,
    budget: TokenBudget | None,
    assembly: Assembly | None,
    messages: Sequence[Mapping[str, object]],
) -> dict[str, object]:
    """The explain document: ``object, model, budget, candidates, memories, block, dropped,
    messages``."""
    return {
        "object": EXPLAIN_OBJECT,
        "model": model,
        "budget": budget_fields(budget, model),
        "candidates": len(assembly.candidates) if assembly is not None else 0,
        "memories": [memory_entry(m) for m in assembly.packed] if assembly is not None else [],
        "block": assembly.block if assembly is not None else "",
        "dropped": dropped_entries(assembly, budget) if assembly is not None else [],
        "messages": list(messages),
    }


def explain_response(
    body: Mapping[str, object], notes: Sequence[str] = (), hidden: Sequence[str] = ("messages",)
) -> Response:
    """The 200 JSON response of explain mode, with ``notes`` when there are any.

    ``hidden`` names the fields holding the client's own body (chat: ``messages``): the only
    ones that can be nested too deep to encode, then shown as ``null``.
    """
    document = {**body, "notes": list(notes)} if notes else body
    try:
        encoded = orjson.dumps(document)
    except orjson.JSONEncodeError:  # only the client's own fields can be nested that deep
        nulls = dict.fromkeys(hidden)
        encoded = orjson.dumps({**body, **nulls, "notes": [*notes, NOTE_MESSAGES_HIDDEN]})
    return Response(encoded, status_code=200, media_type="application/json")
