"""Tenant isolation: a hypothesis state machine drives two tenants through the whole HTTP surface.

Two tenants (passthrough mode: each bearer key is its own tenant) share user names, memory ids
and vocabulary, so a missing tenant filter anywhere would surface. They write (with their own
and colliding ids), search, list, get, delete, give feedback, ask in explain mode and chat with
capture on, streaming or not, repeating questions so the retrieval cache answers. Every one of
their memories carries a marker word of its tenant (``alpha…`` / ``beta…``), captured turns too.

Invariant after every step: no response to one tenant (body or headers), and no request the
proxy sent upstream on its behalf (the injected memories), holds the other tenant's marker or
the other tenant's server-generated memory ids.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from proxy.app import create_app
from tests.fakes.servers import ProxyServer
from tests.fakes.upstream import FakeServer
from tests.reliability.support import MemoryProxy, memory_settings

TENANTS = ("alpha", "beta")
USERS = ("", "u1", "u2")
WORDS = ("tea", "coffee", "lisbon", "kyoto", "chess", "piano", "running", "python")
SHARED_IDS = ("dup-1", "dup-2", "dup-3")

tenants = st.sampled_from(TENANTS)
users = st.sampled_from(USERS)
words = st.lists(st.sampled_from(WORDS), min_size=1, max_size=3)


class Tenant:
    """One tenant's client and what it has written."""

    def __init__(self, name: str, root: str) -> None:
        self.name = name
        self.marker = f"{name}{uuid.uuid4().hex[:10]}"  # one token, in every memory it owns
        key = f"sk-{name}-{uuid.uuid4().hex}"
        self.http = httpx.Client(
            base_url=root, headers={"Authorization": f"Bearer {key}"}, timeout=60
        )
        self.own_ids: set[str] = set()  # server-generated ids: must never reach the other
        self.seen: list[httpx.Response] = []
        self.tag = 0

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        response = self.http.request(method, path, **kwargs)
        assert response.status_code < 500, response.text
        self.seen.append(response)
        return response


@pytest.fixture(scope="module")
def isolation_proxy(
    fake_server: FakeServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProxyServer]:
    """memproxy with memory on; capture is chosen per request by header."""
    settings = memory_settings(fake_server.url, tmp_path_factory.mktemp("isolation"))
    with MemoryProxy(create_app(settings)) as proxy:
        yield proxy


class TwoTenants(RuleBasedStateMachine):
    """Random interleavings of every memory-touching call by two tenants."""

    root = ""
    fake: FakeServer | None = None
    memory_ids = Bundle("memory_ids")

    def __init__(self) -> None:
        super().__init__()
        self.tenants = {name: Tenant(name, self.root) for name in TENANTS}
        self.questions: dict[str, dict[str, Any]] = {}

    def other(self, name: str) -> Tenant:
        return self.tenants[TENANTS[1 - TENANTS.index(name)]]

    def content(self, name: str, user: str, ws: list[str]) -> str:
        return f"{self.tenants[name].marker} {user or 'everyone'} likes {' and '.join(ws)}"

    def question(self, name: str, ws: list[str]) -> str:
        return f"{self.tenants[name].marker} asks: what about {' '.join(ws)}?"

    # --- the memories API -------------------------------------------------------------------

    @rule(target=memory_ids, name=tenants, user=users, ws=words, shared=st.booleans())
    def write(self, name: str, user: str, ws: list[str], shared: bool) -> str:
        tenant = self.tenants[name]
        body: dict[str, Any] = {"content": self.content(name, user, ws), "user": user}
        if shared:
            body["id"] = SHARED_IDS[len(ws) - 1]
        response = tenant.call("POST", "/memories", json=body)
        assert response.status_code == 201, response.text
        memory_id = str(response.json()["data"][0]["id"])
        if not shared:
            tenant.own_ids.add(memory_id)
        return memory_id

    @rule(name=tenants, memory_id=memory_ids)
    def get(self, name: str, memory_id: str) -> None:
        response = self.tenants[name].call("GET", f"/memories/{memory_id}")
        assert response.status_code in (200, 404)

    @rule(name=tenants, memory_id=memory_ids)
    def delete(self, name: str, memory_id: str) -> None:
        response = self.tenants[name].call("DELETE", f"/memories/{memory_id}")
        assert response.status_code in (200, 404)

    @rule(name=tenants, memory_id=memory_ids, useful=st.booleans())
    def feedback(self, name: str, memory_id: str, useful: bool) -> None:
        response = self.tenants[name].call(
            "POST", f"/memories/{memory_id}/feedback", json={"useful": useful}
        )
        assert response.status_code in (200, 404)

    @rule(name=tenants, user=users)
    def list_memories(self, name: str, user: str) -> None:
        params = {"user": user} if user else {}
        response = self.tenants[name].call("GET", "/memories", params=params)
        assert response.status_code == 200

    @rule(name=tenants, user=users, ws=words)
    def search(self, name: str, user: str, ws: list[str]) -> None:
        body = {"query": " ".join(ws), "user": user, "top_k": 50}
        response = self.tenants[name].call("POST", "/memories/search", json=body)
        assert response.status_code == 200

    @rule(name=tenants, user=users)
    def forget_user(self, name: str, user: str) -> None:
        if user:
            response = self.tenants[name].call("DELETE", "/memories", params={"user": user})
            assert response.status_code == 200

    # --- chat: explain, inject, capture, cache hits -------------------------------------------

    def chat(self, name: str, body: dict[str, Any], **headers: str) -> httpx.Response:
        tenant = self.tenants[name]
        tenant.tag += 1
        tag = f"{tenant.marker}-{tenant.tag}"
        return tenant.call(
            "POST", "/chat/completions", json=body, headers={"X-Tag": tag, **headers}
        )

    @rule(name=tenants, user=users, ws=words)
    def explain(self, name: str, user: str, ws: list[str]) -> None:
        body = self.chat_body(name, user, ws)
        response = self.chat(name, body, **{"X-Memory-Mode": "explain"})
        assert response.status_code == 200

    def chat_body(self, name: str, user: str, ws: list[str]) -> dict[str, Any]:
        body = {
            "model": "gpt-4o-mini",
            "user": user or "nobody",
            "messages": [{"role": "user", "content": self.question(name, ws)}],
        }
        self.questions[name] = body
        return body

    @rule(name=tenants, user=users, ws=words, stream=st.booleans(), capture=st.booleans())
    def chat_with_capture(
        self, name: str, user: str, ws: list[str], stream: bool, capture: bool
    ) -> None:
        body = {**self.chat_body(name, user, ws), "stream": stream}
        headers = {"X-Memory-Capture": "turn" if capture else "off", "X-Memory-Session": "s1"}
        response = self.chat(name, body, **headers)
        assert response.status_code == 200

    @rule(name=tenants)
    def repeat_question(self, name: str) -> None:
        """The same question again: the embedding and retrieval caches answer this time."""
        body = self.questions.get(name)
        if body is not None:
            for mode in ("explain", "inject"):
                assert self.chat(name, body, **{"X-Memory-Mode": mode}).status_code == 200

    # --- the invariant -------------------------------------------------------------------------

    @invariant()
    def nothing_crosses(self) -> None:
        for name, tenant in self.tenants.items():
            other = self.other(name)
            for response in tenant.seen:
                text = response.text + repr(dict(response.headers))
                assert other.marker not in text, (name, response.request.url, text[:500])
                # An id the tenant sent itself (a 404 may echo it) is not a leak.
                asked = str(response.request.url) + response.request.content.decode()
                for memory_id in other.own_ids - {i for i in other.own_ids if i in asked}:
                    assert memory_id not in text, (name, memory_id, text[:500])
            tenant.seen.clear()
        assert self.fake is not None
        for rec in list(self.fake.fake.requests):
            tag = rec.headers.get("x-tag", "")
            for name, tenant in self.tenants.items():
                if tag.startswith(tenant.marker):
                    body = rec.body.decode("utf-8", "replace")
                    assert self.other(name).marker not in body, (name, body[:500])

    def teardown(self) -> None:
        for tenant in self.tenants.values():
            tenant.http.close()


def test_two_tenants_never_see_each_other(isolation_proxy: ProxyServer, fake: FakeServer) -> None:
    TwoTenants.root = isolation_proxy.url
    TwoTenants.fake = fake
    run = TwoTenants.TestCase
    run.settings = settings(
        max_examples=12,
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    run().runTest()
