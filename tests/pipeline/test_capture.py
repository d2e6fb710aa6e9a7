"""What capture keeps of a turn."""

from __future__ import annotations

import pytest

from proxy.context.render import render_block
from proxy.pipeline.capture import capture_inputs, fact_request, preceding_text
from proxy.pipeline.contract import Completion
from proxy.pipeline.options import RequestOptions
from proxy.settings import MemorySettings
from proxy.tenancy import Tenant

MESSAGES = [
    {"role": "system", "content": "sys " + render_block(["[learnings] old fact"])},
    {"role": "user", "content": "earlier"},
    {"role": "assistant", "content": "reply"},
    {"role": "user", "content": "my question"},
]


def options(capture: str, session: str = "s") -> RequestOptions:
    return RequestOptions("inject", "u", session, 100, 5, ("learnings",), capture)  # type: ignore[arg-type]


def done(text: str = "the answer", status: int = 200, ok: bool = True) -> Completion:
    return Completion(status=status, streamed=True, ok=ok, text=text)


@pytest.mark.parametrize(
    ("capture", "completion", "expected"),
    [
        ("off", done(), []),
        ("facts", done(), []),  # no raw text: the turn goes to extraction instead
        ("user", done(), [("user", "my question")]),
        ("turn", done(), [("user", "my question"), ("assistant", "the answer")]),
        ("turn", done(status=500), []),
        ("turn", done(ok=False), []),
        ("turn", done(text="  "), [("user", "my question")]),
        ("turn", done(text="\ufeff "), [("user", "my question")]),
        (
            "turn",
            done(text=render_block(["[x] y"]) + " ok"),
            [("user", "my question"), ("assistant", "ok")],
        ),
    ],
)
def test_capture_inputs(
    capture: str, completion: Completion, expected: list[tuple[str, str]]
) -> None:
    inputs = capture_inputs(options(capture), MESSAGES, completion, 8000)
    assert [(i.metadata["role"], i.content) for i in inputs] == expected
    for item in inputs:
        assert item.source == "conversation"
        assert item.user == "u"
        assert item.metadata["session"] == "s"


def test_a_blank_user_message_is_not_captured() -> None:
    blank = [{"role": "user", "content": "\ufeff"}]
    inputs = capture_inputs(options("turn"), blank, done(), 8000)
    assert [i.metadata["role"] for i in inputs] == ["assistant"]


def test_content_is_bounded_and_session_optional() -> None:
    inputs = capture_inputs(options("turn", session=""), MESSAGES, done("x" * 50), 10)
    assert [len(i.content) for i in inputs] == [10, 10]
    assert all("session" not in i.metadata for i in inputs)


def test_fact_requests_carry_the_tenants_upstream_credentials() -> None:
    headers = {
        "authorization": "Bearer sk-client",
        "openai-project": "p1",
        "x-memory-user": "u",
        "cookie": "c",
    }
    passthrough = Tenant("t", MemorySettings())
    request = fact_request(passthrough, headers, {"model": "gpt-4o"})
    assert request.model == "gpt-4o"
    assert dict(request.auth) == {b"authorization": b"Bearer sk-client", b"openai-project": b"p1"}
    keyed = Tenant("t", MemorySettings(), forwards_credentials=False, upstream_key="sk-tenant")
    assert fact_request(keyed, headers, {}).auth == ((b"authorization", b"Bearer sk-tenant"),)


def user(text: object) -> dict[str, object]:
    return {"role": "user", "content": text}


def assistant(text: object) -> dict[str, object]:
    return {"role": "assistant", "content": text}


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        (MESSAGES, "reply"),  # the answer before the captured question (adr/0142)
        ([user("only")], ""),
        ([{"role": "system", "content": "sys"}, user("q")], ""),  # not a dialog turn
        ([user("first"), user("second")], "first"),
        # The captured message is the last user message with text; a blank one is skipped.
        ([assistant("a"), user("q"), user("  ")], "a"),
        ([assistant("a"), user("q"), assistant("later")], "a"),
        ([assistant([{"type": "text", "text": "parts"}]), user("q")], "parts"),
        ([assistant("x " + render_block(["[learnings] m"])), user("q")], "x"),
        ([{"role": "tool", "content": "42"}, user("q")], ""),
        ([assistant(None), user("q")], ""),
        ([], ""),
    ],
)
def test_preceding_text(messages: list[dict[str, object]], expected: str) -> None:
    assert preceding_text(messages, "turn", 10_000) == expected


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        # ``user`` capture never stores the assistant: its words are no context either.
        (MESSAGES, ""),
        ([assistant("a"), user("q")], ""),
        ([user("first"), user("second")], "first"),
        ([assistant("a"), user("q"), user("  ")], ""),
    ],
)
def test_preceding_text_in_user_capture_is_a_user_message(
    messages: list[dict[str, object]], expected: str
) -> None:
    assert preceding_text(messages, "user", 10_000) == expected


def test_preceding_text_is_cut_where_capture_cut_the_stored_message() -> None:
    assert preceding_text([user("abcdef"), user("q")], "user", 3) == "abc"


@pytest.mark.parametrize("capture", ["off", "facts"])
def test_preceding_text_is_empty_when_nothing_is_captured(capture: str) -> None:
    assert preceding_text([user("first"), user("second")], capture, 10_000) == ""
