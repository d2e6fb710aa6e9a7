"""Input into its model (``proxy.memory.inputs``), or the 400 that names what is wrong.

The one translation from pydantic's ``ValidationError`` to our ``RequestError`` in OpenAI's
shape: ``param`` is the field path as the client wrote it (``memories[3].created_at``;
a position in a list of plain values, such as ``sources``, names the list), the message says
what the field must be, and a model may give a field's error its own message and ``code``
(``ApiObject.messages``: ``batch_too_large``). Of several errors the first is reported, an
unknown field before the other errors of its object (a typo explains them).
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Generic, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, Tag, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from proxy.errors import RequestError
from proxy.memory.inputs import (
    ID_PATTERN,
    NON_BLANK,
    ApiObject,
    Feedback,
    ImportedMemory,
    InputLimits,
    ListQuery,
    MemoryBatch,
    MemoryInput,
    SearchRequest,
    SetUsefulness,
    UserScope,
    Vote,
    WriteBody,
)

T = TypeVar("T")

# What each error type says about the field (after "'param' "); custom errors of
# ``proxy.memory.inputs`` carry their own.
PREDICATES: dict[str, str] = {
    "missing": "is required",
    "string_type": "must be a string",
    "string_too_short": "must not be empty",
    "string_too_long": "is longer than {max_length} characters",
    "bool_type": "must be a boolean",
    "float_type": "must be a number",
    "int_type": "must be an integer",
    "int_from_float": "must be an integer",
    "int_parsing": "must be an integer",
    "greater_than_equal": "must be at least {ge}, got {input}",
    "less_than_equal": "must be at most {le}, got {input}",
    "literal_error": "must be one of {expected}; got {input}",
    "dict_type": "must be a JSON object",
    "model_type": "must be a JSON object",
    "model_attributes_type": "must be a JSON object",
    "list_type": "must be an array",
    "too_short": "must hold at least {min_length} item(s)",
    "too_long": "holds {actual_length} items; at most {max_length}",
}
PATTERNS: dict[str, str] = {
    NON_BLANK: "must not be empty or blank",
    ID_PATTERN: "must be 1 to 256 characters among A-Z a-z 0-9 . _ : @ + = ~ - "
    "(ids are used unescaped in /v1/memories/{{id}})",
}


class Parser(Generic[T]):
    """Validate one kind of input into its model, or raise the 400 naming what is wrong."""

    def __init__(self, kind: Any, subject: str = "The request body") -> None:
        self.kind = kind
        self.subject = subject
        self.adapter: TypeAdapter[T] = TypeAdapter(kind)

    def __call__(self, data: object, limits: InputLimits | None = None) -> T:
        try:
            return self.adapter.validate_python(data, context=limits)
        except ValidationError as exc:
            raise request_error(exc, self.kind, self.subject) from None


def request_error(exc: ValidationError, kind: Any, subject: str) -> RequestError:
    """The 400 for the first error of ``exc`` (``kind`` is the type that was validated)."""
    error = first_error(exc.errors(include_url=False))
    context = dict(error.get("ctx") or {})
    loc = (*error["loc"], *context.pop("at", ()))
    place = locate(kind, loc)
    override = (
        place.owner.messages.get((place.field, error["type"]))
        if place.owner is not None and place.field is not None
        else None
    )
    if override is not None:
        template, code = override
        return RequestError(template.format(**context), param=place.param, code=code)
    who = f"'{place.param}'" if place.param else subject
    if error["type"] == "extra_forbidden" and place.owner is not None:
        expected = ", ".join(
            sorted(f.alias or name for name, f in place.owner.model_fields.items())
        )
        message = f"Unknown {place.owner.unknown_key} '{place.field}'; expected {expected}."
        return RequestError(message, param=place.param)
    return RequestError(f"{who} {predicate(error, context)}.", param=place.param)


def first_error(errors: list[ErrorDetails]) -> ErrorDetails:
    """The error to report: the earliest in a batch, an unknown field first in its object."""

    def order(error: ErrorDetails) -> tuple[tuple[int, ...], bool]:
        positions = tuple(step for step in error["loc"] if isinstance(step, int))
        return positions, error["type"] != "extra_forbidden"

    return min(errors, key=order)


def predicate(error: ErrorDetails, context: dict[str, Any]) -> str:
    """What the field must be, from the error's type and context."""
    kind = error["type"]
    if kind == "string_pattern_mismatch":
        template = PATTERNS.get(context.get("pattern", ""), "must match the pattern {pattern}")
    elif kind in PREDICATES:
        template = PREDICATES[kind]
    else:  # a custom error of ours: its message is already the predicate
        return error["msg"]
    bounds = {key: plain(value) for key, value in context.items()}
    given = error.get("input")
    return template.format(**bounds, input=repr(given[:64]) if isinstance(given, str) else given)


def plain(value: Any) -> Any:
    """A number as a message shows it: ``1`` for the bound ``1.0``."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


class Place:
    """Where an error is: the client's path, and the model and field it belongs to."""

    def __init__(self) -> None:
        self.parts: list[str | int] = []
        self.owner: type[ApiObject] | None = None
        self.field: str | None = None

    @property
    def param(self) -> str | None:
        text = ""
        for part in self.parts:
            text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
        return text or None


def locate(kind: Any, loc: tuple[int | str, ...]) -> Place:
    """Follow ``loc`` through the validated type: field names and positions in lists of objects
    make the path; union tags and positions in lists of plain values do not."""
    place = Place()
    node: Any = kind
    for step in loc:
        node = unwrap(node)
        members = tagged_members(node)
        if isinstance(step, str) and step in members:
            node = members[step]
        elif isinstance(step, str):
            place.parts.append(step)
            if isinstance(node, type) and issubclass(node, ApiObject):
                place.owner, place.field = node, step
                field = next(
                    (f for name, f in node.model_fields.items() if step in (name, f.alias)), None
                )
                node = field.annotation if field is not None else None
            else:
                node = None
        else:
            item = unwrap(get_args(node)[0]) if get_origin(node) is list else None
            if isinstance(item, type) and issubclass(item, BaseModel):
                place.parts.append(step)
            node = item
    return place


def unwrap(node: Any) -> Any:
    """``Annotated[X, ...]`` and ``X | None`` as ``X``."""
    while True:
        if get_origin(node) is Annotated:
            node = get_args(node)[0]
        elif get_origin(node) in (Union, types.UnionType) and type(None) in get_args(node):
            rest = [arg for arg in get_args(node) if arg is not type(None)]
            if len(rest) != 1:
                return node
            node = rest[0]
        else:
            return node


def tagged_members(node: Any) -> dict[str, Any]:
    """A tagged union's members by tag (pydantic puts the tag in an error's ``loc``)."""
    if get_origin(node) not in (Union, types.UnionType):
        return {}
    members: dict[str, Any] = {}
    for arg in get_args(node):
        if get_origin(arg) is Annotated:
            for mark in arg.__metadata__:
                if isinstance(mark, Tag):
                    members[mark.tag] = get_args(arg)[0]
    return members


parse_write: Parser[MemoryInput | MemoryBatch] = Parser(WriteBody)
parse_list_query: Parser[ListQuery] = Parser(ListQuery, "The query string")
parse_user_scope: Parser[UserScope] = Parser(UserScope, "The query string")
parse_search: Parser[SearchRequest] = Parser(SearchRequest)
parse_feedback: Parser[Vote | SetUsefulness] = Parser(Feedback)
parse_imported: Parser[ImportedMemory] = Parser(ImportedMemory, "The record")


def parse_write_body(data: object, *, max_content_chars: int) -> list[MemoryInput]:
    """The memories of a ``POST /v1/memories`` body (one memory, or ``{"memories": [...]}``)."""
    written = parse_write(data, InputLimits(max_content_chars))
    return written.memories if isinstance(written, MemoryBatch) else [written]


def parse_memories(items: object, *, max_content_chars: int) -> list[MemoryInput]:
    """A list of memory objects, all valid or none (400 naming ``memories[i]...``)."""
    return parse_write_body({"memories": items}, max_content_chars=max_content_chars)
