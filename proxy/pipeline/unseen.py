"""Room held back for context a request continues but does not carry.

A Responses API request with ``previous_response_id`` (or a stored ``conversation``, a
``prompt`` template, an ``item_reference``), or a request of any API with a document it only
points at (a file id or URL, adr/0143), is billed for context the proxy never sees. Its
exact size is unknown, so the budget is conservative: it counts that context as
``UNSEEN_SHARE`` of the model's window, on top of everything the request itself holds. Memory
then never pushes a continued conversation over the window unless that conversation already
fills more than half of it. Explain says so (``note``).
"""

from __future__ import annotations

from dataclasses import replace

from proxy.context.allocation import CONSTRAINED_BELOW, TokenBudget

UNSEEN_SHARE = 0.5


def unseen_tokens(budget: TokenBudget) -> int:
    """The tokens held back for unseen context under ``budget``'s model."""
    return int(budget.context_window * UNSEEN_SHARE)


def hold_back(budget: TokenBudget) -> TokenBudget:
    """``budget`` with room held back for unseen context (less available, memory within it).

    Monotone, so a bound stays a bound: held back, an upper-bound budget still leaving the
    whole cap, or a lower-bound one leaving nothing, is still the exact figure.
    """
    available = max(0, budget.available_tokens - unseen_tokens(budget))
    cap = budget.memory_cap
    memory = available if cap is None else min(cap, available)
    return replace(
        budget,
        available_tokens=available,
        memory_tokens=memory,
        is_constrained=memory < CONSTRAINED_BELOW,
    )


def note(budget: TokenBudget | None) -> str:
    """Explain's note on a budget that held room back."""
    held = unseen_tokens(budget) if budget is not None else 0
    return (
        "budget: the request continues context memproxy cannot see (previous_response_id, "
        "conversation, prompt or item_reference, or a file by id or URL); "
        f"{held} tokens, half the model's context window, are held back for it: "
        "available_tokens and memory_tokens are net of them."
    )
