"""Component schemas of the OpenAPI document (``proxy.openapi``), from the validation constants."""

from __future__ import annotations

from typing import Any

from proxy.context.records import DEFAULT_CONFIDENCE, DEFAULT_SOURCE, DEFAULT_USEFULNESS, SOURCES
from proxy.memory.inputs import (
    DATE_TIME_PATTERN,
    ID_PATTERN,
    MAX_BATCH_MEMORIES,
    MAX_ID_CHARS,
    MAX_USER_CHARS,
    NON_BLANK,
    SEARCH_ID,
)
from proxy.memory.service import API_TOKEN_ENCODING, DEFAULT_TOP_K, MAX_TOP_K


def ref(name: str) -> dict[str, str]:
    """A reference to a component schema."""
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` or null: an explicit null in an optional field means "the default"."""
    if "enum" in schema:
        return {**schema, "enum": [*schema["enum"], None]}
    return {**schema, "type": [schema["type"], "null"]}


def optional_nullable(schema: dict[str, Any], required: tuple[str, ...]) -> dict[str, Any]:
    """Make every property of an object schema but the ``required`` ones nullable."""
    props = schema["properties"]
    return {
        **schema,
        "properties": {k: v if k in required else nullable(v) for k, v in props.items()},
    }


def memory_input_schema(max_content_chars: int) -> dict[str, Any]:
    """One memory to write (unknown fields are refused)."""
    return optional_nullable(_memory_input(max_content_chars), ("content",))


def _memory_input(max_content_chars: int) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["content"],
        "properties": {
            "content": {
                "type": "string",
                "minLength": 1,
                "maxLength": max_content_chars,
                "pattern": NON_BLANK,
                "description": "The memory text: not blank, at most memory.max_content_chars.",
            },
            "id": {
                "type": "string",
                "pattern": ID_PATTERN,
                "maxLength": MAX_ID_CHARS,
                "not": {"const": SEARCH_ID},
                "description": "Your id; writing it again replaces the memory (idempotent "
                "imports). Generated (`mem_...`) when absent. Unique within one batch; `search` is "
                "reserved.",
            },
            "user": {
                "type": "string",
                "maxLength": MAX_USER_CHARS,
                "description": 'End user; "" (default) is shared by the whole tenant.',
            },
            "source": {"enum": list(SOURCES), "default": DEFAULT_SOURCE},
            "confidence": {
                "type": "number",
                "minimum": 0,
                "maximum": 1,
                "default": DEFAULT_CONFIDENCE,
            },
            "usefulness": {
                "type": "number",
                "minimum": 0,
                "maximum": 1,
                "default": DEFAULT_USEFULNESS,
            },
            "created_at": {
                "type": "string",
                "pattern": DATE_TIME_PATTERN,
                "description": (
                    "ISO 8601; a time without offset is UTC, and in UTC it must fall within "
                    "years 1000-9999. Default: now."
                ),
            },
            "metadata": {"type": "object", "description": "Any JSON object (<= 16 KiB)."},
        },
    }


def schemas(max_content_chars: int) -> dict[str, Any]:
    """The component schemas."""
    memory_fields = {
        "object": {"const": "memory"},
        "id": {"type": "string"},
        "user": {"type": "string"},
        "source": {"enum": list(SOURCES)},
        "content": {"type": "string"},
        "tokens": {
            "type": "integer",
            "minimum": 0,
            "description": f"Tokens of `content` in {API_TOKEN_ENCODING}, counted at write.",
        },
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "usefulness": {"type": "number", "minimum": 0, "maximum": 1},
        "retrieval_count": {"type": "integer", "minimum": 0},
        "created_at": {"type": "string", "description": "ISO 8601 UTC, ending in Z."},
        "metadata": {"type": "object"},
    }
    memory = {"type": "object", "required": list(memory_fields), "properties": memory_fields}
    return {
        "Memory": memory,
        "SearchHit": {
            "allOf": [
                ref("Memory"),
                {
                    "type": "object",
                    "required": ["similarity"],
                    "properties": {"similarity": {"type": "number", "minimum": 0, "maximum": 1}},
                },
            ]
        },
        "MemoryInput": memory_input_schema(max_content_chars),
        "MemoryBatch": {
            "type": "object",
            "additionalProperties": False,
            "required": ["memories"],
            "properties": {
                "memories": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_BATCH_MEMORIES,
                    "items": ref("MemoryInput"),
                }
            },
        },
        "MemoryList": {
            "type": "object",
            "required": ["object", "data"],
            "properties": {
                "object": {"const": "list"},
                "data": {"type": "array", "items": ref("Memory")},
            },
        },
        "MemoryPage": {
            "type": "object",
            "required": ["object", "data", "has_more", "last_id"],
            "properties": {
                "object": {"const": "list"},
                "data": {"type": "array", "items": ref("Memory")},
                "has_more": {"type": "boolean"},
                "last_id": {"type": ["string", "null"], "description": "Pass as `after`."},
            },
        },
        "SearchRequest": optional_nullable(_search_request(max_content_chars), ("query",)),
        "SearchResult": {
            "type": "object",
            "required": ["object", "data"],
            "properties": {
                "object": {"const": "list"},
                "data": {"type": "array", "items": ref("SearchHit")},
            },
        },
        "Feedback": {
            "oneOf": [
                {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["useful"],
                    "properties": {"useful": {"type": "boolean"}},
                },
                {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["usefulness"],
                    "properties": {"usefulness": {"type": "number", "minimum": 0, "maximum": 1}},
                },
            ],
            "description": "A vote moves usefulness 20% of the way to 1 (useful) or 0; "
            "`usefulness` sets it.",
        },
        "MemoryDeleted": {
            "type": "object",
            "required": ["object", "id", "deleted"],
            "properties": {
                "object": {"const": "memory.deleted"},
                "id": {"type": "string"},
                "deleted": {"const": True},
            },
        },
        "UserDeleted": {
            "type": "object",
            "required": ["object", "user", "deleted"],
            "properties": {
                "object": {"const": "memory.user.deleted"},
                "user": {"type": "string"},
                "deleted": {"type": "integer", "minimum": 0},
            },
        },
        "Error": {
            "type": "object",
            "required": ["error"],
            "properties": {
                "error": {
                    "type": "object",
                    "required": ["message", "type", "param", "code"],
                    "properties": {
                        "message": {"type": "string"},
                        "type": {"type": "string"},
                        "param": {"type": ["string", "null"]},
                        "code": {"type": ["string", "null"]},
                    },
                }
            },
        },
    }


def _search_request(max_content_chars: int) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["query"],
        "properties": {
            "query": {
                "type": "string",
                "minLength": 1,
                "maxLength": max_content_chars,
                "pattern": NON_BLANK,
            },
            "user": {"type": "string", "maxLength": MAX_USER_CHARS},
            "top_k": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_TOP_K,
                "default": DEFAULT_TOP_K,
            },
            "sources": {"type": "array", "minItems": 1, "items": {"enum": list(SOURCES)}},
        },
    }
