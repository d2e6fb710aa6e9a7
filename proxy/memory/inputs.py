"""What a client may send to the memories API, as pydantic models: each input is checked here.

A body, a query string, an imported line or a captured turn becomes one of these models
(``MemoryInput``, ``SearchRequest``, ...), or a 400 (``proxy.memory.parsing``) naming the field
with its batch position (``memories[3].created_at``). Nothing after this module checks
input again: the service and the store take these values as they are. A batch with one bad
memory is refused whole, so a write is all or nothing. The same models generate the OpenAPI
document (``proxy.openapi``), so the document and the server cannot disagree.

Rules (adr/0070):

- ``content``: a string with some character that is not whitespace (``NON_BLANK``), at most
  ``memory.max_content_chars`` (the tenant's, given as ``InputLimits`` when validating).
- ``id``: optional, ``ID_PATTERN`` (URL-safe ASCII, 1..``MAX_ID_CHARS``), not ``search``;
  generated when absent. Records carrying their own id are upserts: imports are idempotent.
- ``user``: a string of at most ``MAX_USER_CHARS``; ``""`` (the default) is tenant-shared.
- ``source``: one of ``SOURCES`` (default ``learnings``).
- ``confidence``, ``usefulness``: numbers (not booleans) in [0, 1].
- ``created_at``: an ISO 8601 string (``DATE_TIME_PATTERN``: ``2024-05-01``, ``2024-05-01T12:00``,
  ``2024-05-01T12:00:00.5+02:00``, ...); no offset means UTC; default: now. In UTC it must still
  fall in years 1000-9999 (``9999-12-31T23:30-05:00`` does not), the range the pattern accepts,
  so every stored time exports and imports again.
- ``metadata``: a JSON object of at most ``MAX_METADATA_BYTES`` encoded, nested at most
  ``MAX_METADATA_DEPTH`` levels.
- Integers refuse booleans, fractions and strings (JSON's ``104.0`` is 104); in a query string
  they are ASCII digits.
- Any other field is refused, so a typo (``conent``) never silently stores nothing useful. In a
  memory or a search, an explicit ``null`` means the default (``WithDefaults``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    GetPydanticSchema,
    PlainValidator,
    StringConstraints,
    Tag,
    ValidationInfo,
    WithJsonSchema,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from proxy.context.records import DEFAULT_CONFIDENCE, DEFAULT_SOURCE, DEFAULT_USEFULNESS, SOURCES
from proxy.defaults import API_PAGE as DEFAULT_PAGE
from proxy.defaults import API_TOP_K as DEFAULT_TOP_K

MAX_ID_CHARS = 256
# Ids travel unescaped as one path segment of /v1/memories/{id}: URL-safe ASCII only.
ID_PATTERN = r"^[A-Za-z0-9._:@+=~-]{1,256}$"
# /v1/memories/search is the search endpoint, so no memory may be called "search".
SEARCH_ID = "search"
# The ISO 8601 forms accepted (a date, or a date and time with optional seconds, fraction and
# offset), years 1000-9999. Only February 29 of a non-leap year passes the pattern (and the
# OpenAPI document) and is then refused by the calendar.
DATE_TIME_PATTERN = (
    r"^[1-9][0-9]{3}-"
    r"((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)"
    r"|02-(0[1-9]|1[0-9]|2[0-9]))"
    r"([T ]([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9](\.[0-9]{1,9})?)?"
    r"(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])?)?$"
)
MIN_YEAR, MAX_YEAR = 1000, 9999  # the years DATE_TIME_PATTERN accepts, also once in UTC
# "Not blank": some character that is not whitespace, by Python's ``str.isspace`` and JSON
# Schema's (ECMA-262) ``\s`` together. One pattern for the server and the OpenAPI document:
# ``\S`` alone let "\x1e" pass the document and fail the server (Python strips it).
NON_BLANK = "[^\t\n\v\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]"
MAX_USER_CHARS = 256
MAX_METADATA_BYTES = 16 * 1024
# Qdrant decodes payloads with serde_json's recursion limit (128): deeper metadata was stored,
# then made every read of the tenant fail. Real metadata is shallow.
MAX_METADATA_DEPTH = 32
# Most memories one write may carry: keeps a request's embedding and WAL append bounded
# (about 0.2 s for 1,000 memories with the static embedder; adr/0071).
MAX_BATCH_MEMORIES = 1000
MAX_TOP_K = 200
MAX_PAGE = 100
# A query-string integer: ASCII digits only (str.isdigit() also accepts "³", which int() refuses).
QUERY_INTEGER_RE = re.compile(r"-?[0-9]{1,9}")
_NON_BLANK_RE = re.compile(NON_BLANK)
_DATE_TIME_RE = re.compile(DATE_TIME_PATTERN)
# In the JSON schema of a text bounded by the tenant's limit; the OpenAPI document replaces it
# with ``maxLength`` for its settings (``proxy.openapi``).
CONTENT_LIMIT_KEY = "x-max-content-chars"


@dataclass(frozen=True, slots=True)
class InputLimits:
    """The caller's limits, given to validation as its context (the tenant's settings)."""

    max_content_chars: int


def is_blank(text: str) -> bool:
    """Whether ``text`` holds nothing but whitespace (``NON_BLANK`` finds nothing)."""
    return _NON_BLANK_RE.search(text) is None


# -- field types ---------------------------------------------------------------------------


class WithinContentLimit:
    """A text of at most ``InputLimits.max_content_chars`` (no bound without limits: code that
    builds a ``MemoryInput`` itself, such as capture, cuts its text to the limit)."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.with_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema[CONTENT_LIMIT_KEY] = True
        return json_schema

    @staticmethod
    def check(value: str, info: ValidationInfo) -> str:
        limits = info.context
        if isinstance(limits, InputLimits) and len(value) > limits.max_content_chars:
            raise PydanticCustomError(
                "string_too_long",
                "is longer than {max_length} characters",
                {"max_length": limits.max_content_chars},
            )
        return value


def not_reserved(value: str) -> str:
    """Refuse the id ``search`` (the search endpoint's path)."""
    if value == SEARCH_ID:
        raise PydanticCustomError(
            "reserved_id", "may not be '{reserved}' (reserved)", {"reserved": SEARCH_ID}
        )
    return value


def utc_time(value: object) -> datetime:
    """An ISO 8601 string (or a datetime, from code) as an aware UTC datetime; naive is UTC."""
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str) and _DATE_TIME_RE.fullmatch(value):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:  # February 29 of a non-leap year: the pattern lets it through
            raise _not_a_time(value) from None
    else:
        raise _not_a_time(value)
    try:
        utc = parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:30-05:00 is in year 10000 in UTC
        utc = None
    if utc is None or not MIN_YEAR <= utc.year <= MAX_YEAR:
        raise PydanticCustomError(
            "time_out_of_range",
            "is {value}, which is outside years {min_year}-{max_year} in UTC (memories are "
            "stored and exported in UTC)",
            {"value": repr(str(value)[:64]), "min_year": MIN_YEAR, "max_year": MAX_YEAR},
        )
    return utc


def _not_a_time(value: object) -> PydanticCustomError:
    shown = repr(value[:64]) if isinstance(value, str) else f"a JSON {_json_kind(value)}"
    return PydanticCustomError(
        "iso_datetime",
        "must be an ISO 8601 date-time string, got {value} (expected e.g. "
        "'2024-05-01T12:00:00Z', '2024-05-01T12:00:00+02:00' or '2024-05-01')",
        {"value": shown},
    )


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "array" if isinstance(value, list) else type(value).__name__


def bounded_metadata(value: dict[str, Any]) -> dict[str, Any]:
    """Refuse metadata over ``MAX_METADATA_BYTES`` encoded or nested deeper than
    ``MAX_METADATA_DEPTH``."""
    try:
        size = len(orjson.dumps(value))
    except TypeError as exc:  # only code can pass what JSON cannot hold
        raise PydanticCustomError(
            "not_json", "must be JSON-serialisable: {reason}", {"reason": str(exc)}
        ) from None
    if size > MAX_METADATA_BYTES:
        raise PydanticCustomError(
            "metadata_too_large",
            "is {size} bytes encoded; the limit is {limit}",
            {"size": size, "limit": MAX_METADATA_BYTES},
        )
    if nesting_depth(value) > MAX_METADATA_DEPTH:
        raise PydanticCustomError(
            "metadata_too_deep",
            "is nested deeper than {limit} levels",
            {"limit": MAX_METADATA_DEPTH},
        )
    return value


def nesting_depth(value: Any) -> int:
    """How many objects/arrays deep a JSON value goes (iterative: no recursion limit)."""
    if not isinstance(value, dict | list):
        return 0
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        children = item.values() if isinstance(item, dict) else item
        # Only containers go on the stack: most metadata values are scalars.
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest


def integral(value: object) -> object:
    """JSON Schema's ``integer`` includes ``104.0``: take it as 104 (other floats stay floats,
    and the strict integer refuses them)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def query_integer(value: object) -> object:
    """A query-string integer: optional minus and ASCII digits (spaces around are ignored)."""
    if isinstance(value, str) and QUERY_INTEGER_RE.fullmatch(value.strip()):
        return int(value)
    return value


def empty_is_none(value: str | None) -> str | None:
    """``after=`` (empty) is no cursor."""
    return value or None


Text = Annotated[str, StringConstraints(min_length=1, pattern=NON_BLANK), WithinContentLimit()]
MemoryId = Annotated[
    str,
    StringConstraints(max_length=MAX_ID_CHARS, pattern=ID_PATTERN),
    AfterValidator(not_reserved),
    Field(json_schema_extra={"not": {"const": SEARCH_ID}}),
]
User = Annotated[str, StringConstraints(max_length=MAX_USER_CHARS)]
# A closed set checked by pydantic-core, typed as str for code that passes a constant.
Source = Annotated[str, GetPydanticSchema(lambda _t, _h: core_schema.literal_schema(list(SOURCES)))]
Fraction = Annotated[float, Field(ge=0, le=1)]
CreatedAt = Annotated[
    datetime,
    PlainValidator(utc_time),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": DATE_TIME_PATTERN,
            "description": "ISO 8601; a time without offset is UTC, and in UTC it must fall "
            "within years 1000-9999.",
        }
    ),
]
Metadata = Annotated[dict[str, Any], AfterValidator(bounded_metadata)]
# The validator runs before the type and its bounds, wherever it is listed; listed after them,
# the bounds stay JSON Schema's minimum and maximum.
TopK = Annotated[int, Field(ge=1, le=MAX_TOP_K), BeforeValidator(integral)]
PageSize = Annotated[int, Field(ge=1, le=MAX_PAGE), BeforeValidator(query_integer)]


# -- models ---------------------------------------------------------------------------------


class ApiObject(BaseModel):
    """A JSON object of the memories API: strict types, unknown fields refused, immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    # How the translation of errors names an unknown key of this object.
    unknown_key: ClassVar[str] = "field"
    # Messages for one field's error type, where the generic one says less: (field, error
    # type) -> (message, code).
    messages: ClassVar[dict[tuple[str, str], tuple[str, str | None]]] = {}


def _nullable_optionals(schema: dict[str, Any]) -> None:
    """Document ``WithDefaults``: every optional property also accepts null."""
    required = set(schema.get("required", ()))
    properties: dict[str, Any] = schema.get("properties", {})
    for name, prop in properties.items():
        if name in required or {"type": "null"} in prop.get("anyOf", ()):
            continue
        outer = {key: prop.pop(key) for key in ("title", "description", "default") if key in prop}
        properties[name] = {"anyOf": [prop, {"type": "null"}], **outer}


class WithDefaults(ApiObject):
    """An object whose optional fields take an explicit ``null`` as "the default"."""

    model_config = ConfigDict(json_schema_extra=_nullable_optionals)

    @model_validator(mode="before")
    @classmethod
    def _null_is_default(cls, data: Any) -> Any:
        # Only a known field's null means "the default": an unknown key stays, null or not, so
        # ``extra="forbid"`` still refuses it.
        if isinstance(data, dict) and None in data.values():
            known = {f.alias or name for name, f in cls.model_fields.items()}
            return {k: v for k, v in data.items() if v is not None or k not in known}
        return data


class MemoryInput(WithDefaults):
    """One memory to write. Without `id` one is generated (`mem_...`); without `created_at`,
    the time of the write."""

    # The validated value the write path takes (MemoryService.write), from the API, an import
    # or capture; the docstring above is also its description in the OpenAPI document.

    content: Annotated[
        Text, Field(description="The memory text: not blank, at most memory.max_content_chars.")
    ]
    id: Annotated[
        MemoryId | None,
        Field(
            description="Your id; writing it again replaces the memory (idempotent imports). "
            "Generated (`mem_...`) when absent. Unique within one batch; `search` is reserved."
        ),
    ] = None
    user: Annotated[
        User, Field(description='End user; "" (default) is shared by the whole tenant.')
    ] = ""
    source: Source = DEFAULT_SOURCE
    confidence: Fraction = DEFAULT_CONFIDENCE
    usefulness: Fraction = DEFAULT_USEFULNESS
    created_at: Annotated[CreatedAt | None, Field(description="Default: now.")] = None
    metadata: Annotated[
        Metadata, Field(description="Any JSON object (<= 16 KiB encoded, nested <= 32).")
    ] = Field(default_factory=dict)
    expires_at: Annotated[
        CreatedAt | None,
        Field(
            description="When it expires (ISO 8601): from then on it is never retrieved, and "
            "it is purged. Default: never."
        ),
    ] = None

    @property
    def retrieval_count(self) -> int:
        """How often it was retrieved before: 0, except in an imported export
        (``ImportedMemory``); the API does not take it."""
        return 0

    @property
    def superseded_by(self) -> str | None:
        """The memory that replaced it: only an imported export carries one."""
        return None

    @property
    def supersedes(self) -> str | None:
        """The memory it replaced: only an imported export carries one."""
        return None


class ImportedMemory(MemoryInput):
    """A line of an import file: a memory, or an exported memory object with its
    ``retrieval_count`` and its supersession links (its derived fields are dropped before,
    ``proxy.memory.io``)."""

    imported_retrievals: Annotated[int, Field(ge=0)] = Field(default=0, alias="retrieval_count")
    imported_superseded_by: MemoryId | None = Field(default=None, alias="superseded_by")
    imported_supersedes: MemoryId | None = Field(default=None, alias="supersedes")

    @property
    def retrieval_count(self) -> int:
        """The exported count, kept across export and import."""
        return self.imported_retrievals

    @property
    def superseded_by(self) -> str | None:
        """The exported link, kept across export and import."""
        return self.imported_superseded_by

    @property
    def supersedes(self) -> str | None:
        """The exported link, kept across export and import."""
        return self.imported_supersedes


class FactInput(MemoryInput):
    """A fact captured from a turn (``proxy.memory.reconcile``), naming the memory it replaces."""

    replaced: MemoryId | None = None

    @property
    def supersedes(self) -> str | None:
        """The memory this fact replaces."""
        return self.replaced


class MemoryBatch(ApiObject):
    """``{"memories": [...]}``: 1..``MAX_BATCH_MEMORIES`` memories with unique ids."""

    memories: Annotated[list[MemoryInput], Field(min_length=1, max_length=MAX_BATCH_MEMORIES)]
    messages: ClassVar[dict[tuple[str, str], tuple[str, str | None]]] = {
        ("memories", "too_long"): (
            "'memories' holds {actual_length} memories; at most {max_length} per request "
            "(split the batch, or use `memproxy memories import`).",
            "batch_too_large",
        ),
        ("memories", "too_short"): ("'memories' must hold at least one memory.", None),
    }

    @model_validator(mode="after")
    def _unique_ids(self) -> MemoryBatch:
        seen: dict[str, int] = {}
        for index, memory in enumerate(self.memories):
            if memory.id is None:
                continue
            if memory.id in seen:
                raise PydanticCustomError(
                    "duplicate_id",
                    "repeats the id of memories[{first}]; ids in one batch must be unique",
                    {"first": seen[memory.id], "at": ("memories", index, "id")},
                )
            seen[memory.id] = index
        return self


def _write_kind(data: Any) -> str:
    if isinstance(data, MemoryBatch) or (isinstance(data, dict) and "memories" in data):
        return "batch"
    return "memory"


# ``POST /v1/memories``: one memory, or a batch when the body has ``memories``.
WriteBody = Annotated[
    Annotated[MemoryInput, Tag("memory")] | Annotated[MemoryBatch, Tag("batch")],
    Discriminator(_write_kind),
]


class ListQuery(ApiObject):
    """``GET /v1/memories``: the query string of one page."""

    unknown_key: ClassVar[str] = "query parameter"
    user: Annotated[
        User | None, Field(description='Only this user\'s memories ("" = tenant-shared).')
    ] = None
    source: Annotated[Source | None, Field(description="Only this source.")] = None
    limit: Annotated[PageSize, Field(description=f"Page size (default {DEFAULT_PAGE}).")] = (
        DEFAULT_PAGE
    )
    after: Annotated[
        str | None,
        AfterValidator(empty_is_none),
        Field(description="The previous page's `last_id`."),
    ] = None


class UserScope(ApiObject):
    """``DELETE /v1/memories?user=U``: the user to forget (``user=`` is the shared scope)."""

    unknown_key: ClassVar[str] = "query parameter"
    user: Annotated[User, Field(description="The user to forget.")]
    messages: ClassVar[dict[tuple[str, str], tuple[str, str | None]]] = {
        ("user", "missing"): (
            "DELETE /v1/memories needs ?user=U (every memory of that user is deleted).",
            None,
        ),
    }


class SearchRequest(WithDefaults):
    """``POST /v1/memories/search``: the memories of ``user`` plus the shared ones closest to
    ``query``."""

    query: Text
    user: User = ""
    top_k: TopK = DEFAULT_TOP_K
    sources: Annotated[list[Source], Field(min_length=1)] | None = None


class Vote(ApiObject):
    """Feedback: the memory helped (``true``) or not; usefulness moves towards 1 or 0."""

    useful: bool


class SetUsefulness(ApiObject):
    """Feedback: set usefulness."""

    usefulness: Fraction


def _feedback_kind(data: Any) -> str | None:
    if isinstance(data, Vote | SetUsefulness):
        return "vote" if isinstance(data, Vote) else "set"
    if isinstance(data, dict) and ("useful" in data) != ("usefulness" in data):
        return "vote" if "useful" in data else "set"
    return None


# ``POST /v1/memories/{id}/feedback``: exactly one of the two.
Feedback = Annotated[
    Annotated[Vote, Tag("vote")] | Annotated[SetUsefulness, Tag("set")],
    Discriminator(
        _feedback_kind,
        custom_error_type="feedback_kind",
        custom_error_message="must hold exactly one of 'useful' (a boolean) or 'usefulness' "
        "(a number in [0, 1])",
    ),
]
