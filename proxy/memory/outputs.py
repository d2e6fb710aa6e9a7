"""What the memories API answers, as pydantic models: the schemas of the OpenAPI document.

The handlers build these objects as plain dicts (``proxy.memory.service.memory_object``: no
model on the hot path); schemathesis checks every answer against these schemas
(``tests/routes/test_openapi.py``), and ``tests/memory/test_outputs.py`` the dicts themselves.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from proxy.memory.inputs import Source
from proxy.memory.service import API_TOKEN_ENCODING

Fraction = Annotated[float, Field(ge=0, le=1)]
Count = Annotated[int, Field(ge=0)]


class Memory(BaseModel):
    """A stored memory."""

    object: Literal["memory"]
    id: str
    user: str
    source: Source
    content: str
    tokens: Annotated[
        Count, Field(description=f"Tokens of `content` in {API_TOKEN_ENCODING}, counted at write.")
    ]
    confidence: Fraction
    usefulness: Fraction
    retrieval_count: Count
    created_at: Annotated[str, Field(description="ISO 8601 UTC, ending in Z.")]
    metadata: dict[str, Any]
    expires_at: Annotated[
        str | None,
        Field(description="ISO 8601 UTC, ending in Z: never retrieved after, then purged."),
    ]
    superseded_by: Annotated[
        str | None,
        Field(
            description="The memory that replaced this one; a superseded memory is kept but "
            "never retrieved."
        ),
    ]
    supersedes: Annotated[str | None, Field(description="The memory this one replaced.")]


class MemoryWithHistory(Memory):
    """One memory and the memories it replaced (``supersedes``, followed), newest first."""

    history: list[Memory]


class SearchHit(Memory):
    """A memory found by a search, with its similarity to the query."""

    similarity: Fraction


class MemoryList(BaseModel):
    """The memories a write stored, in the order sent."""

    object: Literal["list"]
    data: list[Memory]


class MemoryPage(BaseModel):
    """One page of memories; pass ``last_id`` as ``after`` while ``has_more``."""

    object: Literal["list"]
    data: list[Memory]
    has_more: bool
    last_id: Annotated[str | None, Field(description="Pass as `after`.")]


class SearchResult(BaseModel):
    """Search hits, best first."""

    object: Literal["list"]
    data: list[SearchHit]


class MemoryDeleted(BaseModel):
    """One memory deleted."""

    object: Literal["memory.deleted"]
    id: str
    deleted: Literal[True]


class UserDeleted(BaseModel):
    """Every memory of one user deleted (``deleted`` may be 0)."""

    object: Literal["memory.user.deleted"]
    user: str
    deleted: Count


class ErrorDetail(BaseModel):
    """OpenAI's error fields."""

    message: str
    type: str
    param: str | None
    code: str | None


class Error(BaseModel):
    """An error in OpenAI's shape."""

    error: ErrorDetail


RESPONSES: tuple[type[BaseModel], ...] = (
    Memory,
    MemoryWithHistory,
    SearchHit,
    MemoryList,
    MemoryPage,
    SearchResult,
    MemoryDeleted,
    UserDeleted,
    Error,
)
