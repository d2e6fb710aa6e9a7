"""From pydantic's errors to our 400s (``proxy.memory.parsing``): params, messages, codes."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.errors import RequestError
from proxy.memory.inputs import MAX_BATCH_MEMORIES, InputLimits
from proxy.memory.parsing import (
    parse_feedback,
    parse_imported,
    parse_list_query,
    parse_search,
    parse_user_scope,
    parse_write,
)

LIMITS = InputLimits(max_content_chars=50)
GOOD = {"content": "good"}


def error_of(parse: Any, data: Any) -> RequestError:
    with pytest.raises(RequestError) as info:
        parse(data, LIMITS)
    assert info.value.status == 400
    assert info.value.message.endswith(".")
    # pydantic's own wording ("Input should be ...") means a type of error we do not translate.
    assert "Input should" not in info.value.message
    return info.value


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"content": 1}, "content"),  # the union's tag ("memory") is not part of the path
        (
            {"memories": [GOOD, GOOD, GOOD, {"content": "x", "created_at": "soon"}]},
            "memories[3].created_at",
        ),
        ({"memories": [GOOD, "just text"]}, "memories[1]"),  # an item that is no object
        (
            {"memories": [{"content": "a", "id": "d"}, GOOD, {"content": "b", "id": "d"}]},
            "memories[2].id",
        ),
        ({"memories": [GOOD], "user": "u"}, "user"),
        ({"memories": "x"}, "memories"),
        ({"memories": []}, "memories"),
    ],
)
def test_param_is_the_field_path_as_sent(body: Any, param: str) -> None:
    assert error_of(parse_write, body).param == param


def test_a_position_in_a_list_of_plain_values_names_the_list() -> None:
    error = error_of(parse_search, {"query": "x", "sources": ["playbook", "gossip"]})
    assert error.param == "sources"
    assert error.message == (
        "'sources' must be one of 'learnings', 'playbook', 'conversation' or 'summaries'; "
        "got 'gossip'."
    )


def test_the_earliest_memory_and_an_unknown_field_first() -> None:
    body = {"memories": [GOOD, {"content": 1, "conent": "typo"}, {"content": ""}]}
    error = error_of(parse_write, body)
    assert error.param == "memories[1].conent"
    assert error.message == (
        "Unknown field 'conent'; expected confidence, content, created_at, expires_at, id, "
        "metadata, source, usefulness, user."
    )


@pytest.mark.parametrize(
    ("parse", "data", "message"),
    [
        (parse_write, {}, "'content' is required."),
        (parse_write, {"content": " "}, "'content' must not be empty or blank."),
        (parse_write, {"content": "x" * 51}, "'content' is longer than 50 characters."),
        (parse_write, {"content": "x", "user": 7}, "'user' must be a string."),
        (parse_write, {"content": "x", "confidence": 2}, "'confidence' must be at most 1, got 2."),
        (
            parse_write,
            {"content": "x", "usefulness": -1},
            "'usefulness' must be at least 0, got -1.",
        ),
        (parse_write, {"content": "x", "usefulness": True}, "'usefulness' must be a number."),
        (parse_write, {"content": "x", "metadata": []}, "'metadata' must be a JSON object."),
        (parse_write, {"content": "x", "id": "search"}, "'id' may not be 'search' (reserved)."),
        (
            parse_write,
            {"memories": [{"content": "a", "id": "d"}, {"content": "b", "id": "d"}]},
            "'memories[1].id' repeats the id of memories[0]; ids in one batch must be unique.",
        ),
        (parse_write, {"memories": []}, "'memories' must hold at least one memory."),
        (parse_write, {"memories": "x"}, "'memories' must be an array."),
        (
            parse_write,
            {"memories": [GOOD], "user": "u"},
            "Unknown field 'user'; expected memories.",
        ),
        (parse_search, {"query": "x", "top_k": "5"}, "'top_k' must be an integer."),
        (parse_search, {"query": "x", "sources": []}, "'sources' must hold at least 1 item(s)."),
        (
            parse_search,
            {"query": "x", "limit": 3},
            "Unknown field 'limit'; expected query, sources, top_k, user.",
        ),
        (parse_feedback, {"useful": "yes"}, "'useful' must be a boolean."),
        (
            parse_feedback,
            {"usefulness": 0.5, "why": 1},
            "Unknown field 'why'; expected usefulness.",
        ),
        (
            parse_feedback,
            {},
            "The request body must hold exactly one of 'useful' (a boolean) or 'usefulness' "
            "(a number in [0, 1]).",
        ),
        (parse_imported, "text", "The record must be a JSON object."),
        (
            parse_list_query,
            {"order": "asc"},
            "Unknown query parameter 'order'; expected after, limit, source, user.",
        ),
        (parse_list_query, {"limit": "ten"}, "'limit' must be an integer."),
        (
            parse_user_scope,
            {},
            "DELETE /v1/memories needs ?user=U (every memory of that user is deleted).",
        ),
    ],
)
def test_messages_say_what_the_field_must_be(parse: Any, data: Any, message: str) -> None:
    assert error_of(parse, data).message == message


def test_a_model_gives_an_error_its_own_message_and_code() -> None:
    error = error_of(parse_write, {"memories": [GOOD] * (MAX_BATCH_MEMORIES + 1)})
    assert (error.param, error.code) == ("memories", "batch_too_large")
    assert error.message.startswith(f"'memories' holds {MAX_BATCH_MEMORIES + 1} memories")
    assert "memproxy memories import" in error.message
    assert error_of(parse_user_scope, {}).param == "user"
