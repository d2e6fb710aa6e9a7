"""Anthropic's Messages API adapter: reading bodies into the pipeline's conversation, placing
the block in the latest user turn (position turn) or after the app's cache breakpoints
(position system), reading answers (object and stream)."""

from __future__ import annotations

import gzip
from typing import Any

import orjson
import pytest

from proxy.apis.adapter import SYSTEM, TURN, Blocks, Injected
from proxy.apis.answer import Answer
from proxy.apis.anthropic_messages import ANTHROPIC_MESSAGES as API
from proxy.apis.anthropic_messages import DOCUMENT_TEXT, HIGH_DETAIL_IMAGE, IMAGE_PARTS
from proxy.context.allocation import BudgetCalculator
from proxy.context.documents import PAGES, estimated_pages
from proxy.context.limits import ModelLimits
from proxy.context.position import Slot, slot
from proxy.pipeline.query import last_user_texts
from proxy.tokenizer import tiktoken_tokenizer
from tests.fakes.pdfs import b64, pdf, read_now
from tests.fakes.upstream import message_events, message_object

BLOCK = "<memories>\nthe user's cat is Miso\n</memories>"
CACHED = {"type": "ephemeral"}
USER = {"role": "user", "content": "What is my cat called?"}


def inject(body: dict[str, Any]) -> dict[str, object]:
    return API.inject(body, API.conversation(body), Blocks(BLOCK, SYSTEM)).body


def text(value: str, **extra: object) -> dict[str, object]:
    return {"type": "text", "text": value, **extra}


@pytest.mark.parametrize(
    ("system", "expected"),
    [
        (None, BLOCK),
        ("", BLOCK),
        ("You are kind.", "You are kind.\n\n" + BLOCK),
        ([text("You are kind.")], [text("You are kind."), text(BLOCK)]),
        # The block goes after the breakpoint as a new block: the cached block is not edited.
        (
            [text("Rules.", cache_control=CACHED)],
            [text("Rules.", cache_control=CACHED), text(BLOCK)],
        ),
        (
            [text("A.", cache_control=CACHED), text("B.")],
            [text("A.", cache_control=CACHED), text("B."), text(BLOCK)],
        ),
    ],
)
def test_the_block_goes_in_system_after_the_apps_own(system: object, expected: object) -> None:
    body: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [USER]}
    if system is not None:
        body["system"] = system
    forwarded = inject(body)
    assert forwarded["system"] == expected
    assert forwarded["messages"] == [USER]
    assert "system" not in body or body["system"] == system  # the input is untouched


def test_breakpoints_on_tools_keep_the_block_in_system() -> None:
    tools = [{"name": "t", "input_schema": {"type": "object"}, "cache_control": CACHED}]
    body = {"model": "m", "max_tokens": 9, "tools": tools, "system": "S.", "messages": [USER]}
    assert inject(body)["system"] == "S.\n\n" + BLOCK


DOC = text("Long document.", cache_control=CACHED)
RESULT_BLOCK = {"type": "tool_result", "tool_use_id": "t1", "content": "21 C"}
PREFILL = {"role": "assistant", "content": [text("Sure,", cache_control=CACHED)]}
ANSWER = {"role": "assistant", "content": "A1"}
SYSTEM_CACHED = [text("Rules.", cache_control=CACHED), text("Be brief.")]
RESULT_CACHED = {**RESULT_BLOCK, "cache_control": CACHED}
OTHER_RESULT = {**RESULT_BLOCK, "tool_use_id": "t2"}
TOOL_CALLS = {
    "role": "assistant",
    "content": [
        {"type": "tool_use", "id": "t1", "name": "w", "input": {}},
        {"type": "tool_use", "id": "t2", "name": "w", "input": {}},
    ],
}


def user(content: object) -> dict[str, object]:
    return {"role": "user", "content": content}


# Request shapes with a breakpoint in ``messages``, position ``system``: the system prompt would
# sit in front of the breakpoint, so the block takes the turn's slot by the shared rule
# (``position.slot``): the latest user turn behind its pins, behind a later breakpoint in a user
# message, nowhere behind one in an assistant message. (system, messages, message, content
# of that message afterwards; ``None``: nothing injected.)
SHAPES = [
    # The app caches an earlier turn: the block goes in the latest turn, not behind that
    # breakpoint deep in the history (everything after it would change every turn).
    (
        SYSTEM_CACHED,
        [user([DOC, text("Q1")]), ANSWER, USER],
        2,
        BLOCK + "\n\n" + str(USER["content"]),
    ),
    ("S.", [user([DOC, text("Q1")]), ANSWER, user([text("Q2")])], 2, [text(BLOCK), text("Q2")]),
    # A breakpoint in the latest turn: behind it.
    (SYSTEM_CACHED, [user([DOC, text("Q")])], 0, [DOC, text(BLOCK), text("Q")]),
    # Tool results come first in their message, also behind a cached one.
    (
        "S.",
        [USER, TOOL_CALLS, user([RESULT_CACHED, OTHER_RESULT])],
        2,
        [RESULT_CACHED, OTHER_RESULT, text(BLOCK)],
    ),
    # A breakpoint on an assistant message before the latest user turn: in that turn.
    (
        None,
        [
            USER,
            {"role": "assistant", "content": [text("Miso.", cache_control=CACHED)]},
            user("Thanks!"),
        ],
        2,
        BLOCK + "\n\nThanks!",
    ),
    # A prefill carrying the last breakpoint: no place behind it, and system would precede it.
    (SYSTEM_CACHED, [USER, PREFILL], None, None),
    (None, [USER, PREFILL], None, None),
]


@pytest.mark.parametrize(
    ("system", "messages", "message", "content"),
    SHAPES,
    ids=[
        "earlier-turn-cached-string",
        "earlier-turn-cached-blocks",
        "latest-turn-cached",
        "cached-tool-result",
        "assistant-cached-before-latest",
        "prefill-cached-system-cached",
        "prefill-cached",
    ],
)
def test_position_system_behind_a_breakpoint_in_messages_takes_the_shared_slot(
    system: object, messages: list[Any], message: int | None, content: object
) -> None:
    body: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 9, "messages": messages}
    if system is not None:
        body["system"] = system
    sent = orjson.dumps(body)
    injected = API.inject(body, API.conversation(body), Blocks(BLOCK, SYSTEM))
    assert orjson.dumps(body) == sent  # the input is untouched
    assert injected.body.get("system") == system  # the cached prefix is unchanged
    assert (injected.held, injected.message) == (message is not None, message)
    forwarded: Any = injected.body["messages"]
    if message is None:
        assert injected.body == body
        return
    assert message == API.rule.slot(messages).index  # type: ignore[union-attr]
    assert forwarded[message] == {**messages[message], "content": content}
    assert [m for i, m in enumerate(forwarded) if i != message] == [
        m for i, m in enumerate(messages) if i != message
    ]


@pytest.mark.parametrize("system", ["S.", SYSTEM_CACHED, None])
def test_position_turn_without_a_slot_and_a_breakpoint_in_messages_injects_nothing(
    system: object,
) -> None:
    body: dict[str, Any] = {"model": "m", "max_tokens": 9, "messages": [USER, PREFILL]}
    if system is not None:
        body["system"] = system
    injected = API.inject(body, API.conversation(body), Blocks(BLOCK, TURN))
    assert injected == Injected(body)


def test_the_conversation_in_chat_terms() -> None:
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1000,
        "system": [text("S.", cache_control=CACHED)],
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": [text("Weather in Paris?"), {"type": "image"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Call the tool.", "signature": "x"},
                    {"type": "tool_use", "id": "tu1", "name": "get_weather", "input": {"c": 1}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "tu1", "content": "Sunny"},
                    text("And tomorrow?"),
                ],
            },
        ],
    }
    conversation = API.conversation(body)
    high = {"type": "image_url", "image_url": {"detail": "high"}}
    assert conversation.messages == [
        {"role": "system", "content": [text("S.")]},
        {"role": "user", "content": [text("Weather in Paris?"), high, high]},
        {
            "role": "assistant",
            "content": [text("Call the tool.")],
            "tool_calls": [
                {
                    "id": "tu1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"c":1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "tu1", "content": "Sunny"},
        {"role": "user", "content": [text("And tomorrow?")]},
    ]
    assert conversation.billed["tools"] == body["tools"]
    assert conversation.billed["max_completion_tokens"] == 1000
    assert not conversation.unseen_history


def test_the_budget_uses_claudes_window_max_tokens_and_tokenizer() -> None:
    body = {"model": "claude-3-5-haiku-20241022", "max_tokens": 2000, "messages": [USER]}
    calculator = BudgetCalculator(ModelLimits(), tiktoken_tokenizer(), memory_cap=None)
    budget = calculator.calculate_request(API.conversation(body).billed)
    assert budget.context_window == 200_000
    assert budget.response_reserve == 2000
    assert budget.encoding == "claude"


REPORT = "Quarterly report. " * 2_000  # 6,000 raw Claude tokens of plain text


@pytest.mark.parametrize(
    "source",
    [
        {"type": "text", "media_type": "text/plain", "data": REPORT},
        {"type": "content", "content": [text(REPORT[:17_000]), text(REPORT[17_000:])]},
        {"type": "content", "content": REPORT},
    ],
    ids=["text", "content blocks", "content string"],
)
def test_a_document_with_its_text_in_the_body_counts_that_text(source: object) -> None:
    # Billed as the file guess (1,000 tokens), a long text document left room for a block it
    # had none for: the budget must count the text Anthropic reads.
    document = {"type": "document", "source": source, "title": "Q3"}
    body = {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": []}
    calculator = BudgetCalculator(ModelLimits(), tiktoken_tokenizer(), memory_cap=None)
    bare = calculator.calculate_request(
        API.conversation(
            {**body, "messages": [{"role": "user", "content": [text("Sum up.")]}]}
        ).billed
    )
    sent = {"role": "user", "content": [document, text("Sum up.")]}
    budget = calculator.calculate_request(API.conversation({**body, "messages": [sent]}).billed)
    counted = tiktoken_tokenizer().counter("claude")
    assert budget.messages_tokens - bare.messages_tokens >= counted(REPORT) + counted("Q3")
    # The document is no part of what the user said: the query and a captured turn stay theirs.
    messages = API.conversation({**body, "messages": [sent]}).messages
    assert last_user_texts(messages, 1) == ["Sum up."]


def test_a_content_source_maps_its_blocks_without_reading_documents_again() -> None:
    # Anthropic's content source holds text and image blocks only. Reading a nested document
    # as a document again let a hostile body nest until the stack ran out (RecursionError, a
    # ~1,000-frame trace logged per request): past the first level it is billed as its JSON.
    inner: dict[str, object] = text("core")
    for _ in range(1_000):
        inner = {"type": "document", "source": {"type": "content", "content": [inner]}}
    [message] = API.conversation({"model": "m", "messages": [user([inner])]}).messages
    source = inner["source"]
    assert isinstance(source, dict)
    assert message["content"] == source["content"]  # the nested document, as it is
    image = {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}
    shallow = {"type": "document", "source": {"type": "content", "content": [text("A"), image]}}
    [message] = API.conversation({"model": "m", "messages": [user([shallow])]}).messages
    assert message["content"] == [
        {"type": DOCUMENT_TEXT, "text": "A"},
        *[HIGH_DETAIL_IMAGE] * IMAGE_PARTS,
    ]


def pdf_document(source: dict[str, object]) -> dict[str, object]:
    return {"model": "m", "messages": [user([{"type": "document", "source": source}])]}


def test_a_base64_pdf_counts_its_pages() -> None:
    data = b64(pdf(50, object_streams=True))
    pdf_source = {"type": "base64", "media_type": "application/pdf", "data": data}
    conversation = API.conversation(pdf_document(pdf_source))
    [message] = conversation.messages
    # Billed by its size's estimate until its pages are read (when the request is budgeted).
    assert message["content"] == [{"type": PAGES, "pages": estimated_pages(data)}]
    read_now(conversation.documents)
    assert message["content"] == [{"type": PAGES, "pages": 50}]
    assert not conversation.unseen_history
    # Not a PDF past its header: estimated from its size, one page at least.
    header = {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQK"}
    conversation = API.conversation(pdf_document(header))
    read_now(conversation.documents)
    assert conversation.messages[0]["content"] == [{"type": PAGES, "pages": 1}]


def test_a_chat_file_part_is_read_when_budgeted_not_by_the_billing() -> None:
    # Not an Anthropic block (refused upstream), but billed as sent the billing would read
    # its bytes whole, on the loop, whatever the deadline.
    data = b64(pdf(5))
    block = {"type": "file", "file": {"file_data": data}}
    conversation = API.conversation({"model": "m", "messages": [user([block])]})
    [document] = conversation.documents
    assert conversation.messages[0]["content"] == [document.part]
    read_now(conversation.documents)
    assert document.part == {"type": PAGES, "pages": 5}


@pytest.mark.parametrize(
    "source",
    [{"type": "url", "url": "https://x/y.pdf"}, {"type": "file", "file_id": "file_1"}],
    ids=["url", "file"],
)
def test_a_pdf_it_only_points_at_holds_room_back(source: dict[str, object]) -> None:
    conversation = API.conversation(pdf_document(source))
    [message] = conversation.messages
    assert message["content"] == [{"type": "file"}]
    assert conversation.unseen_history


@pytest.mark.parametrize(
    "body",
    [
        {"model": "m", "messages": "hi"},
        {"model": "m", "messages": [USER, "hi"]},
        {"model": "m", "system": 7, "messages": [USER]},
        {"model": "m", "system": ["S."], "messages": [USER]},
        {"model": "m"},
    ],
)
def test_malformed_bodies_have_nothing_to_retrieve_for(body: dict[str, object]) -> None:
    assert API.conversation(body).messages == ()


def answer(chunks: list[bytes], *, streamed: bool, ok: bool = True, gz: bool = False) -> Answer:
    headers = [(b"content-encoding", b"gzip")] if gz else []
    body = [gzip.compress(b"".join(chunks))] if gz else chunks
    return Answer(200, streamed=streamed, ok=ok, chunks=body, headers=headers)


@pytest.mark.parametrize("gz", [False, True])
def test_reading_a_message_object(gz: bool) -> None:
    body = message_object({"model": "m"}, 3)
    body["content"] = [text("Hello "), {"type": "tool_use", "id": "t", "input": {}}, text("you")]
    completion = API.read_completion(answer([orjson.dumps(body)], streamed=False, gz=gz))
    assert completion.text == "Hello you"
    assert completion.body == body
    assert completion.ok


@pytest.mark.parametrize("gz", [False, True])
def test_reading_a_stream(gz: bool) -> None:
    events = message_events({"model": "m"}, 4)
    completion = API.read_completion(answer(events, streamed=True, gz=gz))
    assert completion.text == "Hello from the fake"
    assert completion.ok
    assert completion.streamed


def test_a_stream_with_an_error_event_failed() -> None:
    events = message_events({"model": "m"}, 4)[:4]
    events.append(b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error"}}\n\n')
    completion = API.read_completion(answer(events, streamed=True))
    assert not completion.ok
    assert completion.text == "Hello "


def test_tool_input_deltas_are_no_text() -> None:
    events = message_events({"model": "m", "tools": [{"name": "t"}]}, 4)
    assert API.read_completion(answer(events, streamed=True)).text == ""


RESULT = {"type": "tool_result", "tool_use_id": "t1", "content": "21 C"}
CALL = {
    "role": "assistant",
    "content": [{"type": "tool_use", "id": "t1", "name": "w", "input": {}}],
}


def in_turn(messages: list[Any], **fields: object) -> Injected:
    """The block placed as the pipeline places it with position turn."""
    body = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": messages, **fields}
    seen = API.conversation(body)
    rule = API.rule
    at = slot(
        seen.turns,
        anchor_roles=rule.anchor_roles,
        behind_roles=rule.behind_roles,
        pinned=rule.pinned,
    )
    return API.inject(body, seen, Blocks(BLOCK, TURN, at))


@pytest.mark.parametrize(
    ("messages", "expected", "message"),
    [
        # String content: the block, a blank line, the user's text.
        ([USER], [{"role": "user", "content": BLOCK + "\n\n" + USER["content"]}], 0),
        # Blocks: a text block first.
        (
            [{"role": "user", "content": [text("Q")]}],
            [{"role": "user", "content": [text(BLOCK), text("Q")]}],
            0,
        ),
        # Tool results come first in their message: the block follows them.
        (
            [USER, CALL, {"role": "user", "content": [RESULT, text("and?")]}],
            [USER, CALL, {"role": "user", "content": [RESULT, text(BLOCK), text("and?")]}],
            2,
        ),
        # Never in front of a breakpoint: behind the last one of the message.
        (
            [{"role": "user", "content": [text("Doc.", cache_control=CACHED), text("Q")]}],
            [
                {
                    "role": "user",
                    "content": [text("Doc.", cache_control=CACHED), text(BLOCK), text("Q")],
                }
            ],
            0,
        ),
    ],
)
def test_position_turn_puts_the_block_at_the_start_of_the_latest_user_message(
    messages: list[Any], expected: list[Any], message: int
) -> None:
    injected = in_turn(messages, system=[text("S.", cache_control=CACHED)])
    assert injected.body["messages"] == expected
    assert injected.body["system"] == [text("S.", cache_control=CACHED)]  # the prefix unchanged
    assert (injected.held, injected.message) == (True, message)


def test_position_turn_with_a_breakpoint_on_a_later_assistant_message_injects_nothing() -> None:
    prefill = {"role": "assistant", "content": [text("Sure,", cache_control=CACHED)]}
    injected = in_turn([USER, prefill], system="S.")
    assert injected == Injected(
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 64,
            "messages": [USER, prefill],
            "system": "S.",
        }
    )


def test_position_turn_puts_earlier_blocks_back() -> None:
    messages = [
        USER,
        {"role": "assistant", "content": "Miso."},
        {"role": "user", "content": "And?"},
    ]
    body = {"model": "m", "max_tokens": 9, "messages": messages}
    blocks = Blocks("NEW", TURN, Slot(2, 0), earlier=((Slot(0, 0), "OLD"),))
    sent = API.inject(body, API.conversation(body), blocks).body["messages"]
    assert sent == [
        {"role": "user", "content": "OLD\n\n" + USER["content"]},
        messages[1],
        {"role": "user", "content": "NEW\n\nAnd?"},
    ]


def test_the_system_prompt_is_part_of_the_blocks_keys_without_its_breakpoints() -> None:
    def preamble(system: object) -> object:
        return API.conversation({"model": "m", "system": system, "messages": [USER]}).preamble

    assert preamble([text("S.", cache_control=CACHED)]) == preamble([text("S.")])
    assert preamble("S.") != preamble("T.")
