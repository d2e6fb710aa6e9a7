"""``X-Memory-Capture: facts`` end to end: the official SDK over a real socket, the scripted
extractor upstream behind memproxy (adr/0112).

The chat answers at once whatever the extractor does; moments later the facts are stored, a
fact told again is stored once, a contradicting fact supersedes the old memory without deleting
it, and a broken extractor answer stores nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from proxy.app import create_app
from proxy.settings import replace
from tests.e2e.conftest import API_KEY, Backends, memory_settings, tenant_of
from tests.fakes.extractor import (
    NOT_JSON_BODY,
    REFUSAL,
    ExtractorUpstream,
    Step,
    extractor_server,
    facts,
    raw,
    status,
)
from tests.fakes.servers import ProxyServer
from tests.fakes.upstream import FakeServer

MODEL = "gpt-4o-mini"
USER = "alice"
FACTS_HEADERS = {"X-Memory-Capture": "facts", "X-Memory-User": USER}


def wait_for(check: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "background work did not finish"
        time.sleep(0.05)


class Running:
    """memproxy in front of the scripted extractor upstream."""

    def __init__(self, fake: FakeServer, backends: Backends, server: ProxyServer, tenant: str):
        self.fake, self.backends, self.server, self.tenant = fake, backends, server, tenant

    @property
    def upstream(self) -> ExtractorUpstream:
        fake = self.fake.fake
        assert isinstance(fake, ExtractorUpstream)
        return fake

    def script(self, *steps: Step) -> None:
        self.upstream.script.extend(steps)

    def chat(self, text: str, stream: bool = False) -> tuple[float, Any]:
        """One chat through the SDK (it must succeed); (seconds it took, the raw response)."""
        sdk = openai.OpenAI(base_url=self.server.url, api_key=API_KEY, max_retries=0)
        started = time.monotonic()
        response = sdk.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=[{"role": "user", "content": text}],
            extra_headers=FACTS_HEADERS,
            stream=stream,
        )
        parsed = response.parse()
        if stream:
            assert list(parsed)  # type: ignore[call-overload]
        else:
            assert parsed.choices[0].message.content  # type: ignore[union-attr]
        return time.monotonic() - started, response

    def memories(self) -> list[Any]:
        return [r for r in self.backends.list(self.tenant) if r.user == USER]

    def metric(self, needle: str) -> float:
        for line in httpx.get(self.server.url.removesuffix("/v1") + "/metrics").text.splitlines():
            if line.startswith(needle):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def counted(self, needle: str, value: float = 1.0) -> None:
        """Wait until the metric ``needle`` reaches ``value`` (the background work is done)."""
        wait_for(lambda: self.metric(needle) >= value)


@pytest.fixture
def running(backends: Backends, tmp_path: Path) -> Iterator[Running]:
    with extractor_server() as fake:
        settings = memory_settings(fake.url, tmp_path)
        conf = replace(settings.memory.extraction, backoff_s=0.05, timeout_s=20.0)
        settings = replace(settings, memory=replace(settings.memory, extraction=conf))
        app = create_app(
            settings, store=backends.store, embedder=backends.embedder, cache=backends.cache
        )
        with ProxyServer(app) as server:
            yield Running(fake, backends, server, tenant_of(settings))


def test_facts_are_stored_after_the_answer_and_once(running: Running) -> None:
    running.script(facts("The user lives in Porto.", delay_s=3.0))
    _, response = running.chat("Hi! I live in Porto.")
    # The chat is answered while the extraction call is still waiting for its (slow) answer.
    assert running.upstream.answered_at == []
    assert response.headers["x-memory-status"] in ("empty", "injected")
    assert running.memories() == []
    wait_for(lambda: len(running.memories()) == 1)
    (stored,) = running.memories()
    assert (stored.content, stored.source) == ("The user lives in Porto.", "learnings")
    assert stored.metadata["capture"] == "facts"
    call = running.upstream.calls[0]
    assert call["model"] == MODEL
    assert call["response_format"]["json_schema"]["strict"] is True
    assert "I live in Porto." in call["messages"][1]["content"]
    # The tenant's credentials (passthrough: the client's key) authenticate the call.
    assert running.upstream.headers[0]["authorization"] == f"Bearer {API_KEY}"

    # Told again, with the memory now injected: the prompt shows it, the answer repeats it, and
    # nothing new is stored.
    running.script(facts("the user lives in porto"))
    running.chat("As I said, I live in Porto.", stream=True)
    running.counted('memproxy_facts_total{outcome="skipped"}')
    assert len(running.memories()) == 1
    assert "m1: The user lives in Porto." in running.upstream.calls[1]["messages"][1]["content"]
    assert running.metric('memproxy_facts_total{outcome="skipped"}') == 1
    assert running.metric('memproxy_extraction_tokens_total{kind="prompt"}') == 240


def test_a_contradicting_fact_supersedes_without_deleting(running: Running) -> None:
    running.script(facts("The user lives in Porto."))
    running.chat("I live in Porto.")
    wait_for(lambda: len(running.memories()) == 1)
    (porto,) = running.memories()
    running.script(
        facts({"content": "The user lives in Berlin.", "expires_at": None, "replaces": "m1"})
    )
    running.chat("I moved to Berlin last month.")
    running.counted('memproxy_facts_total{outcome="superseded"}')
    by_content = {m.content: m for m in running.memories()}
    old, new = by_content["The user lives in Porto."], by_content["The user lives in Berlin."]
    assert old.id == porto.id
    assert (old.superseded_by, new.supersedes) == (new.id, old.id)
    # Out of retrieval, still in the API with its history.
    root = running.server.url
    auth = {"Authorization": f"Bearer {API_KEY}"}
    found = httpx.post(
        f"{root}/memories/search", headers=auth, json={"query": "where do I live", "user": USER}
    ).json()["data"]
    assert [m["id"] for m in found] == [new.id]
    shown = httpx.get(f"{root}/memories/{new.id}", headers=auth).json()
    assert [m["id"] for m in shown["history"]] == [old.id]
    assert httpx.get(f"{root}/memories/{old.id}", headers=auth).json()["superseded_by"] == new.id
    assert running.metric('memproxy_facts_total{outcome="superseded"}') == 1
    # Explain shows the new memory with the one it replaced, and never the old one.
    explained = httpx.post(
        f"{root}/chat/completions",
        headers={**auth, "X-Memory-Mode": "explain", "X-Memory-User": USER},
        json={"model": MODEL, "messages": [{"role": "user", "content": "Where do I live?"}]},
    ).json()["memories"]
    assert [(m["id"], m.get("supersedes")) for m in explained] == [(new.id, old.id)]


@pytest.mark.parametrize(
    ("step", "reason"),
    [
        (raw("The user lives in Porto."), "not_json"),
        (raw('{"facts": [{"content": "The user lives in Porto."}]}'), "wrong_schema"),
        (REFUSAL, "refusal"),
        (NOT_JSON_BODY, "not_json"),
        (status(400), "upstream_status"),
    ],
)
def test_garbage_stores_nothing_and_the_chat_never_fails(
    running: Running, step: Step, reason: str
) -> None:
    running.script(step)
    running.chat("I live in Porto.")
    running.counted(f'memproxy_extraction_failures_total{{reason="{reason}"}}')
    assert running.memories() == []
    assert running.metric('memproxy_facts_total{outcome="added"}') == 0


def test_429_then_ok_retries_with_backoff(running: Running) -> None:
    running.script(status(429, retry_after="0.2"), facts("The user has a cat."))
    running.chat("I have a cat.")
    wait_for(lambda: len(running.memories()) == 1)
    first, second = running.upstream.answered_at[:2]
    assert second - first >= 0.2  # Retry-After honoured (within max_backoff_s)
    assert running.metric('memproxy_extraction_calls_total{result="error"}') == 1
    assert running.metric('memproxy_extraction_calls_total{result="ok"}') == 1
