"""The OpenAPI 3.1 document of memproxy's own endpoints, served at ``/openapi.json``.

The memories API's schemas are generated from the pydantic models that validate its input
(``proxy.memory.inputs``) and describe its answers (``proxy.memory.outputs``), so the document
and the server cannot drift apart; ``tests/routes/test_openapi.py`` fuzzes the API against it
with schemathesis. The running settings fill in what they decide (content size, auth mode).
``/v1/chat/completions``, ``/v1/responses`` and ``/v1/messages`` are described by their memory
headers (the body is the provider's); every other ``/v1/*`` path is forwarded upstream and not
described here.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import JsonSchemaMode

from proxy import __version__
from proxy.context.records import SOURCES
from proxy.defaults import POSITIONS
from proxy.memory import outputs
from proxy.memory.inputs import (
    CONTENT_LIMIT_KEY,
    Feedback,
    ListQuery,
    SearchRequest,
    UserScope,
    WriteBody,
)
from proxy.settings import Settings

OPENAPI_VERSION = "3.1.0"
REF_TEMPLATE = "#/components/schemas/{model}"
MEMORY_HEADERS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("X-Memory-User", "End user whose memories are used (default: the body's `user`).", {}),
    ("X-Memory-Session", "Conversation id, for capture and the `conversation` source.", {}),
    (
        "X-Memory-Mode",
        "`inject` (default), `off`, or `explain` (no upstream call; returns what would be "
        "injected, object `memory.explain`).",
        {"enum": ["inject", "off", "explain"]},
    ),
    ("X-Memory-Max-Tokens", "Cap on memory tokens (never above the tenant's cap).", {}),
    ("X-Memory-Top-K", "Candidates to fetch from the store.", {}),
    ("X-Memory-Sources", f"Comma list of sources among {', '.join(SOURCES)}.", {}),
    (
        "X-Memory-Capture",
        "`off`, `user`, `turn` or `facts`: store this turn (or the facts it tells) as memory.",
        {},
    ),
    (
        "X-Memory-Position",
        "`turn` (default: in the latest user message of `messages` or `input`, the prompt "
        "before it unchanged) or `system` (appended to the system prompt or `instructions`): "
        "where the memory block goes.",
        {"enum": list(POSITIONS)},
    ),
)
RESPONSE_HEADERS: tuple[tuple[str, str], ...] = (
    ("X-Memory-Status", "`injected`, `empty`, `off` or `degraded`."),
    ("X-Memory-Injected", "Number of memories injected."),
    ("X-Memory-Tokens", "Tokens of memory injected."),
    ("X-Memory-Budget", "The memory token budget of this request."),
    ("X-Memory-Overhead-Ms", "Time spent in the proxy before the upstream call."),
)
ERRORS: dict[str, str] = {
    "400": "Invalid request (`message` and `param` name the problem).",
    "401": "Missing or unknown memproxy key (keys mode).",
    "404": "No such memory in the caller's tenant.",
    "405": "Method not allowed on this path.",
    "413": "Request body over limits.max_body_bytes.",
    "503": "The memory backend is unavailable, or memory is disabled.",
}
COMMON_ERRORS = ("400", "401", "405", "503")
# Request bodies: schemas of the types the routes validate with (``proxy.memory.parsing``).
BODIES: dict[str, Any] = {"write": WriteBody, "search": SearchRequest, "feedback": Feedback}


class Schemas:
    """The component schemas, and each request body's schema (a ``$ref`` or a ``oneOf``)."""

    def __init__(self, max_content_chars: int) -> None:
        inputs: list[tuple[str, JsonSchemaMode, TypeAdapter[Any]]] = [
            (name, "validation", TypeAdapter(kind)) for name, kind in BODIES.items()
        ]
        inputs += [
            (model.__name__, "validation", TypeAdapter(model)) for model in outputs.RESPONSES
        ]
        refs, definitions = TypeAdapter.json_schemas(inputs, ref_template=REF_TEMPLATE)
        self.components: dict[str, Any] = bound_content(definitions["$defs"], max_content_chars)
        self.bodies = {name: refs[(name, "validation")] for name in BODIES}


def ref(model: type[BaseModel]) -> dict[str, str]:
    """A reference to a component schema."""
    return {"$ref": REF_TEMPLATE.format(model=model.__name__)}


def bound_content(schema: Any, max_content_chars: int) -> Any:
    """Replace each ``CONTENT_LIMIT_KEY`` mark by the ``maxLength`` these settings allow."""
    if isinstance(schema, list):
        return [bound_content(item, max_content_chars) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: bound_content(value, max_content_chars) for key, value in schema.items()}
    if out.pop(CONTENT_LIMIT_KEY, False):
        out["maxLength"] = max_content_chars
    return out


def query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    """The query parameters a model of a query string describes (a parameter is absent or a
    string: null is no value of a query string)."""
    schema = model.model_json_schema(ref_template=REF_TEMPLATE)
    required = set(schema.get("required", ()))
    parameters = []
    for name, prop in schema["properties"].items():
        description = prop.pop("description", "")
        prop.pop("title", None)
        if prop.get("default", 0) is None:
            del prop["default"]
        branches = [s for s in prop.pop("anyOf", [prop]) if s != {"type": "null"}]
        parameters.append(
            {
                "name": name,
                "in": "query",
                "required": name in required,
                "schema": {**prop, **branches[0]},
                "description": description,
            }
        )
    return parameters


def json_body(schema: dict[str, Any], description: str) -> dict[str, Any]:
    """A JSON request or response body."""
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def responses(ok: str, schema: dict[str, Any], description: str, *errors: str) -> dict[str, Any]:
    """A success response plus error responses (always the common ones), in OpenAI's shape."""
    out: dict[str, Any] = {ok: json_body(schema, description)}
    for status in sorted({*COMMON_ERRORS, *errors}):
        out[status] = {"$ref": f"#/components/responses/E{status}"}
    return out


MEMORY_ID = {
    "name": "memory_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "minLength": 1},
    "description": "The memory's id (another tenant's id is simply not found).",
}


def memories_paths(bodies: dict[str, Any]) -> dict[str, Any]:
    """The memories API (README, "Memories API and CLI")."""
    return {
        "/v1/memories": {
            "post": {
                "operationId": "createMemories",
                "summary": "Store one memory, or a batch (all or nothing).",
                "requestBody": {"required": True, **json_body(bodies["write"], "Memories.")},
                "responses": responses(
                    "201", ref(outputs.MemoryList), "The stored memories.", "413"
                ),
            },
            "get": {
                "operationId": "listMemories",
                "summary": "One page of the tenant's memories; follow `last_id` with `after`.",
                "parameters": query_parameters(ListQuery),
                "responses": responses("200", ref(outputs.MemoryPage), "A page of memories."),
            },
            "delete": {
                "operationId": "deleteUserMemories",
                "summary": "Forget every memory of one user (0 deleted is not an error).",
                "parameters": query_parameters(UserScope),
                "responses": responses("200", ref(outputs.UserDeleted), "How many were deleted."),
            },
        },
        "/v1/memories/search": {
            "post": {
                "operationId": "searchMemories",
                "summary": "The memories of `user` plus the tenant-shared ones closest to `query`.",
                "requestBody": {"required": True, **json_body(bodies["search"], "Query.")},
                "responses": responses(
                    "200", ref(outputs.SearchResult), "Hits, best first.", "413"
                ),
            }
        },
        "/v1/memories/{memory_id}": {
            "parameters": [MEMORY_ID],
            "get": {
                "operationId": "getMemory",
                "summary": "One memory.",
                "responses": responses(
                    "200", ref(outputs.MemoryWithHistory), "The memory and its history.", "404"
                ),
            },
            "delete": {
                "operationId": "deleteMemory",
                "summary": "Delete one memory; a repeat answers 404 (nothing left to delete).",
                "responses": responses("200", ref(outputs.MemoryDeleted), "Deleted.", "404"),
            },
        },
        "/v1/memories/{memory_id}/feedback": {
            "parameters": [MEMORY_ID],
            "post": {
                "operationId": "memoryFeedback",
                "summary": "Vote on a memory or set its usefulness.",
                "description": "A vote moves usefulness 20% of the way to 1 (useful) or 0; "
                "`usefulness` sets it.",
                "requestBody": {"required": True, **json_body(bodies["feedback"], "Feedback.")},
                "responses": responses(
                    "200", ref(outputs.Memory), "The updated memory.", "404", "413"
                ),
            },
        },
    }


# Anthropic's error body, which memproxy's own errors take on the Messages API's route.
ANTHROPIC_ERROR: dict[str, Any] = {
    "type": "object",
    "required": ["type", "error"],
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
        },
    },
}


def anthropic_errors() -> dict[str, Any]:
    """memproxy's own 400, 401 and 413 on the Messages API's route, in Anthropic's shape."""
    return {
        status: json_body(ANTHROPIC_ERROR, f"{text}, in Anthropic's error shape.")
        for status, text in (
            ("400", "A bad body or X-Memory-* header"),
            ("401", "keys mode: a missing or unknown memproxy key"),
            ("413", "Request body over limits.max_body_bytes"),
        )
    }


def with_memory(
    operation: str,
    summary: str,
    required: list[str],
    api: str,
    errors: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A route with memory (its memory headers only; the body is the provider's own); its own
    errors are OpenAI's unless ``errors`` says otherwise."""
    headers = [
        {"name": name, "in": "header", "schema": {"type": "string", **extra}, "description": text}
        for name, text, extra in MEMORY_HEADERS
    ]
    ok = json_body({"type": "object"}, f"{api}'s answer (or SSE when streaming).")
    ok["headers"] = {
        name: {"schema": {"type": "string"}, "description": text} for name, text in RESPONSE_HEADERS
    }
    return {
        "post": {
            "operationId": operation,
            "summary": summary,
            "parameters": headers,
            "requestBody": {
                "required": True,
                **json_body(
                    {"type": "object", "required": required}, f"{api}'s request, unchanged."
                ),
            },
            "responses": {
                "200": ok,
                **(
                    errors
                    or {
                        "400": {"$ref": "#/components/responses/E400"},
                        "401": {"$ref": "#/components/responses/E401"},
                        "413": {"$ref": "#/components/responses/E413"},
                    }
                ),
                "default": {"description": "Upstream errors pass through unchanged."},
            },
        }
    }


WITH_MEMORY = ("/v1/chat/completions", "/v1/responses", "/v1/messages")


def other_paths() -> dict[str, Any]:
    """Chat and responses (memory headers only), health, metrics and this document."""
    text = {"text/plain": {"schema": {"type": "string"}}}
    return {
        "/v1/chat/completions": with_memory(
            "chatCompletions",
            "OpenAI's chat completions, memories injected into the system prompt.",
            ["model", "messages"],
            "OpenAI's chat completion",
        ),
        "/v1/responses": with_memory(
            "responses",
            "OpenAI's Responses API, memories after the app's instructions.",
            ["model"],
            "OpenAI's Responses API",
        ),
        "/v1/messages": with_memory(
            "messages",
            "Anthropic's Messages API, memories in system after the app's cache breakpoints.",
            ["model", "max_tokens", "messages"],
            "Anthropic's Messages API",
            anthropic_errors(),
        ),
        "/healthz": {
            "get": {
                "operationId": "healthz",
                "security": [],
                "responses": {"200": json_body({"type": "object"}, "Alive.")},
            }
        },
        "/readyz": {
            "get": {
                "operationId": "readyz",
                "security": [],
                "responses": {
                    "200": json_body(
                        {"type": "object"}, "Ready: upstream configured, backends up."
                    ),
                    "503": json_body({"type": "object"}, "Not ready; `checks` says why."),
                },
            }
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "security": [],
                "responses": {"200": {"description": "Prometheus text format.", "content": text}},
            }
        },
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "security": [],
                "responses": {"200": json_body({"type": "object"}, "This document.")},
            }
        },
    }


KEY_DESCRIPTION = (
    "keys mode: a memproxy key naming the tenant; passthrough mode: the upstream key, whose "
    "hash is the tenant. The three ways of sending a key name the same tenant."
)
KEY_SCHEMES: dict[str, Any] = {
    "bearerAuth": {"type": "http", "scheme": "bearer", "description": KEY_DESCRIPTION},
    "xApiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
    "apiKey": {"type": "apiKey", "in": "header", "name": "api-key"},
}


def build_openapi(settings: Settings) -> dict[str, Any]:
    """The document for these settings (content size, and whether a key is required)."""
    # A key in any of the three headers (adr/0086); calls without one only when keyless callers
    # share the "anonymous" tenant (passthrough mode, auth.anonymous).
    keyed: list[dict[str, list[str]]] = [{name: []} for name in KEY_SCHEMES]
    security = [{}, *keyed] if settings.auth.anonymous else keyed
    schemas = Schemas(settings.memory.max_content_chars)
    paths = {**memories_paths(schemas.bodies), **other_paths()}
    if settings.auth.mode == "passthrough":
        # A keyless request still goes upstream, with memory off.
        for path in WITH_MEMORY:
            paths[path]["post"]["security"] = [{}, *keyed]
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "memproxy",
            "version": __version__,
            "description": "OpenAI-compatible proxy with long-term memory: the memories API, "
            "the memory headers of chat completions, and health endpoints. Errors use OpenAI's "
            "shape. Every memory call is scoped to the tenant of the caller's key.",
        },
        "servers": [{"url": "/"}],
        "security": security,
        "paths": paths,
        "components": {
            "securitySchemes": KEY_SCHEMES,
            "schemas": schemas.components,
            "responses": {
                f"E{status}": json_body(ref(outputs.Error), text) for status, text in ERRORS.items()
            },
        },
    }
