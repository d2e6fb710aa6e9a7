"""Explain mode: what would be injected, in DESIGN.md's exact shape, without an upstream call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import orjson
from starlette.responses import Response

from proxy.context.assembler import Assembly, MemoryExplanation
from proxy.context.budget import TokenBudget

EXPLAIN_OBJECT = "memory.explain"
SCORE_KEYS = ("composite", "relevance", "recency", "usefulness", "confidence", "frequency")


def memory_entry(item: MemoryExplanation) -> dict[str, Any]:
    """One injected memory: id, source, content, tokens, metadata and the score components."""
    full = item.to_dict()
    return {
        "id": full["id"],
        "source": full["source"],
        "content": full["content"],
        "tokens": full["tokens"],
        "metadata": full["metadata"],
        "score": {key: full["score"][key] for key in SCORE_KEYS},
    }


def budget_fields(budget: TokenBudget | None, model: str) -> dict[str, Any]:
    """Every ``TokenBudget`` field (tuples as lists); zeros when no budget was computed."""
    if budget is None:
        return {"model": model, "memory_tokens": 0}
    fields = asdict(budget)
    fields["message_counts"] = list(budget.message_counts)
    return fields


def explain_body(
    model: str,
    budget: TokenBudget | None,
    assembly: Assembly | None,
    messages: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """The explain document: ``object, model, budget, candidates, memories, block, messages``."""
    return {
        "object": EXPLAIN_OBJECT,
        "model": model,
        "budget": budget_fields(budget, model),
        "candidates": len(assembly.candidates) if assembly is not None else 0,
        "memories": [memory_entry(m) for m in assembly.packed] if assembly is not None else [],
        "block": assembly.block if assembly is not None else "",
        "messages": list(messages),
    }


def explain_response(body: dict[str, Any]) -> Response:
    """The 200 JSON response of explain mode."""
    return Response(orjson.dumps(body), status_code=200, media_type="application/json")
