"""Validation of memory input: API bodies, imported lines and captured turns become ``MemoryInput``.

Everything a client can send is checked here, before anything is written: a batch with one bad
memory is refused whole (400), so a write is all or nothing. Errors name the offending field
with its batch position (``memories[3].created_at``) in OpenAI's ``param``.

Rules (also in the OpenAPI document and adr/0070):

- ``content``: a string with at least one non-blank character, at most ``max_content_chars``.
- ``id``: optional string of 1..``MAX_ID_CHARS`` URL-safe ASCII characters (``ID_PATTERN``),
  not ``search`` (reserved); generated when absent.
  Records carrying their own id are upserts, which makes imports idempotent.
- ``user``: string of at most ``MAX_USER_CHARS``; ``""`` (the default) is tenant-shared.
- ``source``: one of ``SOURCES`` (default ``learnings``).
- ``confidence``, ``usefulness``: numbers (not booleans) in [0, 1].
- ``created_at``: ISO 8601 string (``DATE_TIME_PATTERN``: ``2024-05-01``,
  ``2024-05-01T12:00``, ``2024-05-01T12:00:00.5+02:00``, ...); a naive time means UTC; default: now.
  In UTC it must still fall in years 1000-9999 (``9999-12-31T23:30-05:00`` does not), the range
  the pattern accepts, so every stored time exports and imports again.
- ``metadata``: a JSON object of at most ``MAX_METADATA_BYTES`` encoded, nested at most
  ``MAX_METADATA_DEPTH`` levels.
- Any other field is refused, so a typo (``conent``) never silently stores nothing useful.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from proxy.context.records import DEFAULT_CONFIDENCE, DEFAULT_SOURCE, DEFAULT_USEFULNESS, SOURCES
from proxy.errors import RequestError

MAX_ID_CHARS = 256
# Ids travel unescaped as one path segment of /v1/memories/{id}: URL-safe ASCII only.
ID_PATTERN = r"^[A-Za-z0-9._:@+=~-]{1,256}$"
# The ISO 8601 forms accepted (a date, or a date and time with optional seconds, fraction and
# offset), years 1000-9999. The same pattern is in the OpenAPI document, so both agree; only
# February 29 of a non-leap year passes the pattern and is then refused by the calendar.
DATE_TIME_PATTERN = (
    r"^[1-9][0-9]{3}-"
    r"((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)"
    r"|02-(0[1-9]|1[0-9]|2[0-9]))"
    r"([T ]([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9](\.[0-9]{1,9})?)?"
    r"(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])?)?$"
)
MIN_YEAR, MAX_YEAR = 1000, 9999  # the years DATE_TIME_PATTERN accepts, also once in UTC
# /v1/memories/search is the search endpoint, so no memory may be called "search".
SEARCH_ID = "search"
_ID_RE = re.compile(ID_PATTERN)
# "Not blank": some character that is not whitespace, by Python's ``str.isspace`` and JSON
# Schema's (ECMA-262) ``\s`` together. One pattern for the server and the OpenAPI document:
# ``\S`` alone let "\x1e" pass the document and fail the server (Python strips it).
NON_BLANK = "[^\t\n\v\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]"
_NON_BLANK_RE = re.compile(NON_BLANK)
_DATE_TIME_RE = re.compile(DATE_TIME_PATTERN)
MAX_USER_CHARS = 256
MAX_METADATA_BYTES = 16 * 1024
# Qdrant decodes payloads with serde_json's recursion limit (128): deeper metadata was stored,
# then made every read of the tenant fail. Real metadata is shallow.
MAX_METADATA_DEPTH = 32
# Most memories one write may carry: keeps a request's embedding and WAL append bounded
# (about 0.2 s for 1,000 memories with the static embedder; adr/0071).
MAX_BATCH_MEMORIES = 1000
FIELDS: frozenset[str] = frozenset(
    {"id", "content", "user", "source", "confidence", "usefulness", "created_at", "metadata"}
)


@dataclass(frozen=True, slots=True)
class MemoryInput:
    """One validated memory to write; ``id`` ``None`` and ``created_at`` ``None`` are filled
    at write time (a generated id, the current time)."""

    content: str
    user: str = ""
    source: str = DEFAULT_SOURCE
    confidence: float = DEFAULT_CONFIDENCE
    usefulness: float = DEFAULT_USEFULNESS
    created_at: datetime | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None
    # Only imports of exported memories set it; the API does not accept it.
    retrieval_count: int = 0


def _param(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def parse_created_at(value: Any, param: str = "created_at") -> datetime:
    """Parse an ISO 8601 time into an aware UTC datetime; a naive time is taken as UTC."""
    if not isinstance(value, str):
        raise RequestError(
            f"'{param}' must be an ISO 8601 string such as '2024-05-01T12:00:00Z'.", param=param
        )
    try:
        if not _DATE_TIME_RE.fullmatch(value):
            raise ValueError(value)
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise RequestError(
            f"'{param}' is not a valid ISO 8601 date-time: {value[:64]!r} (expected e.g. "
            "'2024-05-01T12:00:00Z', '2024-05-01T12:00:00+02:00' or '2024-05-01').",
            param=param,
        ) from None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    try:
        utc = parsed.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:30-05:00 is in year 10000 in UTC
        utc = None
    if utc is None or not MIN_YEAR <= utc.year <= MAX_YEAR:
        raise RequestError(
            f"'{param}' is {value[:64]!r}, which is outside years {MIN_YEAR}-{MAX_YEAR} in UTC "
            "(memories are stored and exported in UTC).",
            param=param,
        )
    return utc


def is_blank(text: str) -> bool:
    """Whether ``text`` holds nothing but whitespace (``NON_BLANK`` finds nothing)."""
    return _NON_BLANK_RE.search(text) is None


def parse_fraction(value: Any, param: str) -> float:
    """Return a number in [0, 1] as float; booleans, strings and NaN are refused."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RequestError(f"'{param}' must be a number between 0 and 1.", param=param)
    number = float(value)
    if math.isnan(number) or not 0.0 <= number <= 1.0:
        raise RequestError(f"'{param}' must be between 0 and 1, got {value}.", param=param)
    return number


def _string(value: Any, param: str, max_chars: int) -> str:
    if not isinstance(value, str):
        raise RequestError(f"'{param}' must be a string.", param=param)
    if len(value) > max_chars:
        raise RequestError(f"'{param}' is longer than {max_chars} characters.", param=param)
    return value


def parse_id(value: Any, param: str = "id") -> str:
    """Return a client-given memory id, or raise: 1..MAX_ID_CHARS printable characters."""
    text = _string(value, param, MAX_ID_CHARS)
    if text == SEARCH_ID:
        raise RequestError(f"'{param}' may not be '{SEARCH_ID}' (reserved).", param=param)
    if not _ID_RE.fullmatch(text):
        raise RequestError(
            f"'{param}' must be 1 to {MAX_ID_CHARS} characters among A-Z a-z 0-9 . _ : @ + = ~ -"
            " (ids are used unescaped in /v1/memories/{id}).",
            param=param,
        )
    return text


def parse_source(value: Any, param: str = "source") -> str:
    """Return a known source or raise."""
    if not isinstance(value, str) or value not in SOURCES:
        raise RequestError(
            f"'{param}' must be one of {', '.join(SOURCES)}; got {value!r:.64}.", param=param
        )
    return value


def parse_user(value: Any, param: str = "user") -> str:
    """Return an end-user id (``""`` is the tenant-shared scope)."""
    return _string(value, param, MAX_USER_CHARS)


def parse_content(value: Any, max_chars: int, param: str = "content") -> str:
    """Return non-blank content of at most ``max_chars`` characters."""
    if value is None:
        raise RequestError(f"'{param}' is required.", param=param)
    text = _string(value, param, max_chars)
    if is_blank(text):
        raise RequestError(f"'{param}' must not be empty.", param=param)
    return text


def parse_metadata(value: Any, param: str = "metadata") -> dict[str, Any]:
    """Return a JSON object of bounded encoded size."""
    if not isinstance(value, dict):
        raise RequestError(f"'{param}' must be a JSON object.", param=param)
    try:
        size = len(orjson.dumps(value))
    except TypeError as exc:
        raise RequestError(f"'{param}' must be JSON-serialisable: {exc}", param=param) from None
    if size > MAX_METADATA_BYTES:
        raise RequestError(
            f"'{param}' is {size} bytes encoded; the limit is {MAX_METADATA_BYTES}.", param=param
        )
    if nesting_depth(value) > MAX_METADATA_DEPTH:
        raise RequestError(
            f"'{param}' is nested deeper than {MAX_METADATA_DEPTH} levels.", param=param
        )
    return value


def nesting_depth(value: Any) -> int:
    """How many objects/arrays deep a JSON value goes (iterative: no recursion limit)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def parse_memory(data: Any, *, max_content_chars: int, prefix: str = "") -> MemoryInput:
    """Validate one memory object (API body, import line) into a ``MemoryInput``."""
    if not isinstance(data, dict):
        where = prefix or "body"
        raise RequestError(f"'{where}' must be a JSON object with 'content'.", param=prefix or None)
    unknown = sorted(set(data) - FIELDS)
    if unknown:
        raise RequestError(
            f"Unknown field '{unknown[0]}'; a memory has {', '.join(sorted(FIELDS))}.",
            param=_param(prefix, unknown[0]),
        )

    def present(name: str) -> bool:
        # An explicit null means "use the default", like an absent field.
        return data.get(name) is not None

    p = prefix
    return MemoryInput(
        content=parse_content(data.get("content"), max_content_chars, _param(p, "content")),
        user=parse_user(data["user"], _param(p, "user")) if present("user") else "",
        source=parse_source(data["source"], _param(p, "source"))
        if present("source")
        else DEFAULT_SOURCE,
        confidence=parse_fraction(data["confidence"], _param(p, "confidence"))
        if present("confidence")
        else DEFAULT_CONFIDENCE,
        usefulness=parse_fraction(data["usefulness"], _param(p, "usefulness"))
        if present("usefulness")
        else DEFAULT_USEFULNESS,
        created_at=parse_created_at(data["created_at"], _param(p, "created_at"))
        if present("created_at")
        else None,
        metadata=parse_metadata(data["metadata"], _param(p, "metadata"))
        if present("metadata")
        else {},
        id=parse_id(data["id"], _param(p, "id")) if present("id") else None,
    )


def parse_memories(
    items: Any, *, max_content_chars: int, max_batch: int = MAX_BATCH_MEMORIES, prefix: str = ""
) -> list[MemoryInput]:
    """Validate a list of memory objects; any error refuses the whole list."""
    where = prefix or "memories"
    if not isinstance(items, list):
        raise RequestError(f"'{where}' must be an array of memory objects.", param=where)
    if not items:
        raise RequestError(f"'{where}' must hold at least one memory.", param=where)
    if len(items) > max_batch:
        raise RequestError(
            f"'{where}' holds {len(items)} memories; at most {max_batch} per request "
            "(split the batch, or use `memproxy memories import`).",
            param=where,
            code="batch_too_large",
        )
    parsed = [
        parse_memory(item, max_content_chars=max_content_chars, prefix=f"{where}[{i}]")
        for i, item in enumerate(items)
    ]
    seen: dict[str, int] = {}
    for i, memory in enumerate(parsed):
        if memory.id is None:
            continue
        if memory.id in seen:
            raise RequestError(
                f"'{where}[{i}].id' repeats the id of {where}[{seen[memory.id]}]; ids in one "
                "batch must be unique.",
                param=f"{where}[{i}].id",
            )
        seen[memory.id] = i
    return parsed


def parse_write_body(
    body: dict[str, Any], *, max_content_chars: int, max_batch: int = MAX_BATCH_MEMORIES
) -> list[MemoryInput]:
    """Validate a ``POST /v1/memories`` body: one memory, or ``{"memories": [...]}``."""
    if "memories" in body:
        extra = sorted(set(body) - {"memories"})
        if extra:
            raise RequestError(f"Unknown field '{extra[0]}' next to 'memories'.", param=extra[0])
        return parse_memories(
            body["memories"], max_content_chars=max_content_chars, max_batch=max_batch
        )
    return [parse_memory(body, max_content_chars=max_content_chars)]
