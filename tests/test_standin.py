"""The stand-in upstream (``proxy/standin.py``): the shapes of OpenAI's chat completions and
Responses API and of Anthropic's Messages API, through their official SDKs, and answers that
show what memproxy sent, including the quickstart as a newcomer runs it (``memproxy serve
--stand-in``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import orjson
import pytest

from proxy.app import create_app
from proxy.settings import load_settings, replace
from proxy.standin import HEADER, StandIn
from tests.fakes.servers import ProxyServer
from tests.test_cli import free_port, wait_healthy

ROOT = Path(__file__).resolve().parents[1]
QUESTION = [{"role": "user", "content": "What should I drink?"}]
KEY = "sk-demo"
MEMORY = "Alice prefers green tea"
AS_ALICE = {"X-Memory-User": "alice"}
CLAUDE = "claude-sonnet-4-6"
LOOSE_DEADLINE_MS = 2_000.0


def repeated(first: str) -> list[str]:
    """The lines of the stand-in's answer to "Be brief." in ``first``, then ``QUESTION``."""
    return [HEADER, f"--- {first} ---", "Be brief.", "--- user ---", "What should I drink?"]


@pytest.fixture(scope="module")
def stand_in() -> Iterator[StandIn]:
    server = StandIn().start()
    try:
        yield server
    finally:
        server.stop()


def test_models_and_chat_in_openais_shapes(stand_in: StandIn) -> None:
    client = openai.OpenAI(base_url=stand_in.url, api_key="anything", max_retries=0)
    assert [m.id for m in client.models.list()] == ["memproxy-stand-in"]
    messages = [{"role": "system", "content": "Be brief."}, *QUESTION]
    answer = client.chat.completions.create(model="gpt-4o", messages=messages)  # type: ignore[arg-type]
    text = answer.choices[0].message.content or ""
    assert text.splitlines() == repeated("system")
    assert answer.model == "gpt-4o"
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == 8  # o200k: "Be brief." 3 + the question 5
    stream = client.chat.completions.create(
        model="gpt-4o",
        messages=messages,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].usage is not None


def test_errors_in_openais_shape(stand_in: StandIn) -> None:
    bad = httpx.post(f"{stand_in.url}/chat/completions", content=b"{nope")
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "invalid_json"
    missing = httpx.post(f"{stand_in.url}/chat/completions", json={"model": "m"})
    assert missing.status_code == 400
    assert missing.json()["error"]["param"] == "messages"
    unknown = httpx.get(f"{stand_in.url}/files")
    assert unknown.status_code == 404
    assert unknown.json()["error"]["type"] == "invalid_request_error"
    not_a_list = httpx.post(f"{stand_in.url}/responses", json={"model": "m", "input": 3})
    assert not_a_list.status_code == 400
    assert not_a_list.json()["error"]["param"] == "input"


def test_messages_errors_in_anthropics_shape(stand_in: StandIn) -> None:
    no_limit = {"model": CLAUDE, "messages": QUESTION}  # max_tokens is required, as at Anthropic
    refused = httpx.post(f"{stand_in.root}/v1/messages", json=no_limit)
    assert refused.status_code == 400
    assert refused.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"},
    }
    client = anthropic.Anthropic(base_url=stand_in.root, api_key="anything", max_retries=0)
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model=CLAUDE, max_tokens=64, messages="hi")  # type: ignore[arg-type]
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.batches.retrieve("msgbatch_01")
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]


def test_responses_in_openais_shapes(stand_in: StandIn) -> None:
    client = openai.OpenAI(base_url=stand_in.url, api_key="anything", max_retries=0)
    asked = {"model": "gpt-4o", "instructions": "Be brief.", "input": "What should I drink?"}
    answer = client.responses.create(**asked)  # type: ignore[call-overload]
    assert answer.output_text.splitlines() == repeated("instructions")
    assert (answer.status, answer.model, answer.instructions) == (
        "completed",
        "gpt-4o",
        "Be brief.",
    )
    assert answer.usage is not None
    assert answer.usage.input_tokens == 8  # o200k: "Be brief." 3 + the question 5
    events = list(client.responses.create(**asked, stream=True))  # type: ignore[call-overload]
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == answer.output_text == events[-1].response.output_text
    items = [{"role": "user", "content": [{"type": "input_text", "text": "Tea?"}]}]
    listed = client.responses.create(model="gpt-4o", input=items)  # type: ignore[arg-type]
    assert listed.output_text.endswith("--- user ---\nTea?")


def test_the_responses_stream_names_each_event(stand_in: StandIn) -> None:
    """Typed events come on ``event:`` lines that match their data's ``type``, as OpenAI's do."""
    asked = {"model": "gpt-4o", "input": "Tea?", "stream": True}
    with httpx.stream("POST", f"{stand_in.url}/responses", json=asked) as answer:
        raw = answer.read().decode()
    assert answer.headers["content-type"].startswith("text/event-stream")
    events = [event.split("\n") for event in raw.strip().split("\n\n")]
    assert all(len(lines) == 2 for lines in events)
    for name, data in events:
        assert name.removeprefix("event: ") == orjson.loads(data.removeprefix("data: "))["type"]
    assert "[DONE]" not in raw


def test_messages_in_anthropics_shapes(stand_in: StandIn) -> None:
    client = anthropic.Anthropic(base_url=stand_in.root, api_key="anything", max_retries=0)
    system = [{"type": "text", "text": "Be brief."}]
    asked = {"model": CLAUDE, "max_tokens": 64, "system": system, "messages": QUESTION}
    answer = client.messages.create(**asked)  # type: ignore[call-overload]
    text = answer.content[0].text
    assert text.splitlines() == repeated("system")
    assert (answer.model, answer.stop_reason, answer.usage.input_tokens) == (CLAUDE, "end_turn", 8)
    with client.messages.stream(**asked) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == text
    assert (final.stop_reason, final.usage.output_tokens) == (
        "end_turn",
        answer.usage.output_tokens,
    )
    kinds = [e.type for e in client.messages.create(**asked, stream=True)]  # type: ignore[call-overload]
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    counted = client.messages.count_tokens(model=CLAUDE, system=system, messages=QUESTION)  # type: ignore[arg-type]
    assert counted.input_tokens == 8


@pytest.fixture(scope="module")
def proxied(stand_in: StandIn, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """memproxy wired to the stand-in as ``--stand-in`` wires it (``StandIn.environment``),
    Alice's memory stored; its root URL."""
    data = tmp_path_factory.mktemp("standin") / "data"
    settings = load_settings(env={**stand_in.environment(), "MEMPROXY_DATA_DIR": str(data)})
    # A loose deadline: on a loaded machine a first retrieval can pass the default 50 ms, and
    # the answer would then (rightly) come without memories.
    settings = replace(settings, memory=replace(settings.memory, deadline_ms=LOOSE_DEADLINE_MS))
    with ProxyServer(create_app(settings)) as proxy:
        stored = httpx.post(
            f"{proxy.url}/memories",
            headers={"Authorization": f"Bearer {KEY}"},
            json={"content": MEMORY, "user": "alice"},
        )
        assert stored.status_code == 201
        yield proxy.root


def shows_the_memory(text: str, field: str) -> bool:
    """Whether the stand-in's answer shows the memory block at the start of ``field`` (the
    latest user turn: memproxy's default position)."""
    return text.startswith(HEADER) and f"--- {field} ---\n<memories>" in text and MEMORY in text


def test_chat_answers_show_the_injected_memory(proxied: str) -> None:
    client = openai.OpenAI(base_url=f"{proxied}/v1", api_key=KEY, max_retries=0)
    answer = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini",
        messages=QUESTION,  # type: ignore[arg-type]
        extra_headers=AS_ALICE,
    )
    assert answer.headers["x-memory-status"] == "injected"
    assert shows_the_memory(answer.parse().choices[0].message.content or "", "user")


def test_responses_answers_show_the_injected_memory(proxied: str) -> None:
    client = openai.OpenAI(base_url=f"{proxied}/v1", api_key=KEY, max_retries=0)
    asked = {"model": "gpt-4o-mini", "input": "What should I drink?", "extra_headers": AS_ALICE}
    raw = client.responses.with_raw_response.create(**asked)  # type: ignore[call-overload]
    assert raw.headers["x-memory-status"] == "injected"
    answer = raw.parse()
    assert shows_the_memory(answer.output_text, "user")
    # The block went into the input (position turn): the echoed instructions stay the app's.
    assert answer.instructions is None
    events = list(client.responses.create(**asked, stream=True))  # type: ignore[call-overload]
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert shows_the_memory(deltas, "user")
    with client.responses.stream(**asked) as stream:
        final = stream.get_final_response()
    assert shows_the_memory(final.output_text, "user")


def test_messages_answers_show_the_injected_memory(proxied: str) -> None:
    client = anthropic.Anthropic(base_url=proxied, api_key=KEY, max_retries=0)
    asked = {"model": CLAUDE, "max_tokens": 1024, "messages": QUESTION, "extra_headers": AS_ALICE}
    raw = client.messages.with_raw_response.create(**asked)  # type: ignore[call-overload]
    assert raw.headers["x-memory-status"] == "injected"
    assert shows_the_memory(raw.parse().content[0].text, "user")
    with client.messages.stream(**asked) as stream:
        streamed = "".join(stream.text_stream)
    assert shows_the_memory(streamed, "user")
    # count_tokens is forwarded as is: the app's own request, without memories.
    counted = client.messages.count_tokens(model=CLAUDE, messages=QUESTION)  # type: ignore[arg-type]
    assert counted.input_tokens == 5


@pytest.mark.slow
def test_quickstart_serve_with_the_stand_in(tmp_path: Path) -> None:
    """The README's quickstart, as a process: no key, no upstream, memory injected."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMPROXY_")}
    env["MEMPROXY_DATA_DIR"] = str(tmp_path / "data")
    argv = [sys.executable, "-m", "proxy", "serve", "--stand-in", "--port", str(port)]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        auth = {"Authorization": "Bearer sk-local-demo"}
        memory = {"content": "Alice prefers green tea", "user": "alice"}
        assert httpx.post(f"{url}/v1/memories", headers=auth, json=memory).status_code == 201
        chat = {"model": "gpt-4o-mini", "messages": QUESTION}
        answer = httpx.post(
            f"{url}/v1/chat/completions", headers={**auth, "X-Memory-User": "alice"}, json=chat
        )
        assert answer.status_code == 200
        assert answer.headers["x-memory-status"] == "injected"
        assert "Alice prefers green tea" in answer.json()["choices"][0]["message"]["content"]
        claude = anthropic.Anthropic(base_url=url, api_key="sk-local-demo", max_retries=0)
        message = claude.messages.create(
            model=CLAUDE,
            max_tokens=1024,
            messages=QUESTION,  # type: ignore[arg-type]
            extra_headers={"X-Memory-User": "alice"},
        )
        assert shows_the_memory(message.content[0].text, "user")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert b"stand-in" in err


def test_the_standin_command_serves_alone() -> None:
    port = free_port()
    argv = [sys.executable, "-m", "proxy", "standin", "--port", str(port)]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline().decode()
        assert f"http://127.0.0.1:{port}/v1" in banner
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        assert [m.id for m in client.models.list()] == ["memproxy-stand-in"]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    assert proc.returncode == 0
