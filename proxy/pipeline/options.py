"""Per-request memory options from ``X-Memory-*`` headers, bounded by the tenant's limits.

Headers choose *within* the tenant's configuration, never beyond it: ``X-Memory-Max-Tokens`` and
``X-Memory-Top-K`` are clamped to the tenant's caps, ``X-Memory-Sources`` is intersected with the
tenant's sources, ``X-Memory-Capture`` is clamped to its ``max_capture``;
``X-Memory-Budget-Rule`` picks ``adaptive`` or ``fill`` (adr/0110), as a tenant's config may;
``X-Memory-Position`` picks where the block goes (either is safe, so no limit applies). A
caller whose memory is off (``enabled`` false: no key, adr/0086) gets mode and capture ``off``
whatever it asks. A malformed value (not a number, a negative number, an unknown mode, source,
capture kind, budget rule or position) is the client's mistake and gets a 400 in OpenAI's shape
naming the header.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from proxy.context.records import SOURCES
from proxy.defaults import BUDGET_RULES, CAPTURES, POSITIONS, BudgetRule, Capture, Position
from proxy.errors import RequestError
from proxy.settings import MemorySettings

Mode = Literal["inject", "off", "explain"]
MODES: tuple[str, ...] = ("inject", "off", "explain")
MAX_ID_CHARS = 256  # user and session ids end up in cache keys and payloads
DIGITS = re.compile(r"[0-9]{1,9}")  # more digits than any cap could be: refused
HEADER_MODE = "x-memory-mode"
HEADER_USER = "x-memory-user"
HEADER_SESSION = "x-memory-session"
HEADER_MAX_TOKENS = "x-memory-max-tokens"
HEADER_TOP_K = "x-memory-top-k"
HEADER_SOURCES = "x-memory-sources"
HEADER_CAPTURE = "x-memory-capture"
HEADER_POSITION = "x-memory-position"
HEADER_BUDGET_RULE = "x-memory-budget-rule"


@dataclass(frozen=True, slots=True)
class RequestOptions:
    """What memory does for one request, already bounded by the tenant's limits."""

    mode: Mode
    user: str
    session: str
    max_tokens: int
    top_k: int
    sources: tuple[str, ...]
    capture: Capture
    position: Position = "turn"
    budget_rule: BudgetRule = "adaptive"


def bad_header(header: str, message: str) -> RequestError:
    """A 400 naming the offending header."""
    return RequestError(message, param=header, code="invalid_memory_header")


def parse_int(header: str, raw: str, minimum: int) -> int:
    """Parse a non-negative decimal integer header value at least ``minimum``."""
    text = raw.strip()
    # ASCII digits only: str.isdigit() also accepts "³" and "٣", which int() refuses or reads.
    if not DIGITS.fullmatch(text):
        raise bad_header(header, f"{header} must be an integer >= {minimum}, got {raw!r}.")
    value = int(text)
    if value < minimum:
        raise bad_header(header, f"{header} must be an integer >= {minimum}, got {raw!r}.")
    return value


def parse_choice(header: str, raw: str, allowed: tuple[str, ...]) -> str:
    """Parse one of ``allowed`` (case-insensitive)."""
    value = raw.strip().lower()
    if value not in allowed:
        raise bad_header(header, f"{header} must be one of {', '.join(allowed)}, got {raw!r}.")
    return value


def parse_sources(raw: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """Parse a comma list of known sources and keep those the tenant allows, in its order."""
    names = [part.strip().lower() for part in raw.split(",") if part.strip()]
    unknown = [name for name in names if name not in SOURCES]
    if unknown or not names:
        raise bad_header(
            HEADER_SOURCES,
            f"{HEADER_SOURCES} must be a comma list of {', '.join(SOURCES)}, got {raw!r}.",
        )
    wanted = set(names)
    return tuple(source for source in allowed if source in wanted)


def parse_id(header: str, raw: str) -> str:
    """A user or session id: trimmed, bounded, printable."""
    value = raw.strip()
    if len(value) > MAX_ID_CHARS or not value.isprintable():
        raise bad_header(header, f"{header} must be at most {MAX_ID_CHARS} printable characters.")
    return value


def body_user(body: Mapping[str, object]) -> str:
    """The body's ``user`` field when it is a usable id, else ``""``."""
    user = body.get("user")
    if isinstance(user, str) and len(user) <= MAX_ID_CHARS and user.isprintable():
        return user.strip()
    return ""


def parse_options(
    limits: MemorySettings, headers: Mapping[str, str], body: Mapping[str, object]
) -> RequestOptions:
    """Read the ``X-Memory-*`` headers (``headers`` must look names up case-insensitively)."""
    get = headers.get
    raw = get(HEADER_MODE)
    mode = parse_choice(HEADER_MODE, raw, MODES) if raw is not None else "inject"
    raw = get(HEADER_USER)
    user = parse_id(HEADER_USER, raw) if raw is not None else body_user(body)
    raw = get(HEADER_SESSION)
    session = parse_id(HEADER_SESSION, raw) if raw is not None else ""
    max_tokens = limits.max_tokens
    raw = get(HEADER_MAX_TOKENS)
    if raw is not None:
        max_tokens = min(max_tokens, parse_int(HEADER_MAX_TOKENS, raw, 0))
    top_k = limits.top_k
    raw = get(HEADER_TOP_K)
    if raw is not None:
        top_k = min(top_k, parse_int(HEADER_TOP_K, raw, 1))
    raw = get(HEADER_SOURCES)
    sources = parse_sources(raw, limits.sources) if raw is not None else limits.sources
    raw = get(HEADER_CAPTURE)
    capture = limits.capture
    if raw is not None:  # up to the tenant's max_capture, in the order off < user < turn < facts
        asked = CAPTURES.index(parse_choice(HEADER_CAPTURE, raw, CAPTURES))
        capture = CAPTURES[min(asked, CAPTURES.index(limits.max_capture))]
    raw = get(HEADER_POSITION)
    position = parse_choice(HEADER_POSITION, raw, POSITIONS) if raw is not None else limits.position
    raw = get(HEADER_BUDGET_RULE)
    budget_rule = (
        parse_choice(HEADER_BUDGET_RULE, raw, BUDGET_RULES)
        if raw is not None
        else limits.budget_rule
    )
    if not limits.enabled:
        # A caller without memory (keyless, adr/0086): its headers are still checked, so a bad
        # one is the same 400 with or without a key, but nothing is read, explained or stored.
        mode, capture = "off", "off"
    return RequestOptions(
        mode=mode,  # type: ignore[arg-type]  # checked against MODES
        user=user,
        session=session,
        max_tokens=max_tokens,
        top_k=top_k,
        sources=sources,
        capture=capture,
        position=position,  # type: ignore[arg-type]  # checked against POSITIONS
        budget_rule=budget_rule,  # type: ignore[arg-type]  # checked against BUDGET_RULES
    )
