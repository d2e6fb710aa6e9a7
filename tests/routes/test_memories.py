"""The memories API over a real socket: shapes, validation, pagination, isolation, errors."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.app import create_app
from proxy.errors import StoreError
from proxy.memory.inputs import MAX_BATCH_MEMORIES
from proxy.model_limits import load_model_limits
from proxy.settings import LimitsSettings, Settings, StoreSettings, load_settings, replace
from proxy.tokenizer import count_tokens
from tests.fakes.servers import ProxyServer
from tests.fakes.upstream import FakeServer

MAX_CONTENT = 200
BODY_LIMIT = 64 * 1024


def memory_settings(upstream_url: str, data_dir: Path, **memory: Any) -> Settings:
    """Settings with memory on, the embedded store in ``data_dir`` and small limits.

    With memory on, the app's start imports litellm (model limits): seconds on a loaded machine,
    longer than the test server waits. Importing it here first makes the start itself quick.
    """
    load_model_limits()
    base = load_settings(env={})
    return replace(
        base,
        upstream=replace(base.upstream, url=upstream_url),
        limits=LimitsSettings(max_body_bytes=BODY_LIMIT),
        memory=replace(base.memory, enabled=True, max_content_chars=MAX_CONTENT, **memory),
        store=StoreSettings(kind="edge", data_dir=str(data_dir)),
    )


@pytest.fixture(scope="module")
def server(fake_server: FakeServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """memproxy with memory on, over a real socket; yields its root URL."""
    settings = memory_settings(fake_server.url, tmp_path_factory.mktemp("memories"))
    with ProxyServer(create_app(settings)) as proxy:
        yield f"http://{proxy.host}:{proxy.port}"


class Api:
    """A client of the memories API for one tenant (passthrough mode: tenant = hash of key)."""

    def __init__(self, root: str, key: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {key or 'sk-' + uuid.uuid4().hex}"}
        self.http = httpx.Client(base_url=root, headers=headers, timeout=30)

    def add(self, body: Any) -> httpx.Response:
        return self.http.post("/v1/memories", json=body)

    def ok_add(self, **memory: Any) -> dict[str, Any]:
        response = self.add(memory)
        assert response.status_code == 201, response.text
        data: dict[str, Any] = response.json()["data"][0]
        return data

    def list(self, **params: Any) -> httpx.Response:
        return self.http.get("/v1/memories", params=params)

    def all_ids(self, **params: Any) -> list[str]:
        ids: list[str] = []
        after = None
        while True:
            query = {**params, "limit": 100, **({"after": after} if after else {})}
            page = self.list(**query).json()
            ids += [m["id"] for m in page["data"]]
            if not page["has_more"]:
                return ids
            after = page["last_id"]

    def search(self, **body: Any) -> httpx.Response:
        return self.http.post("/v1/memories/search", json=body)


@pytest.fixture
def api(server: str) -> Iterator[Api]:
    """A fresh tenant."""
    client = Api(server)
    yield client
    client.http.close()


def assert_error(response: httpx.Response, status: int, param: str | None = None) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    if param is not None:
        assert error["param"] == param


def test_create_one_returns_the_memory_object(api: Api) -> None:
    content = "Alice prefers green tea in the morning."
    response = api.add({"content": content, "user": "alice", "metadata": {"k": [1, 2]}})
    assert response.status_code == 201
    body = response.json()
    assert body["object"] == "list"
    (memory,) = body["data"]
    assert set(memory) == {
        "object",
        "id",
        "user",
        "source",
        "content",
        "tokens",
        "confidence",
        "usefulness",
        "retrieval_count",
        "created_at",
        "metadata",
        "expires_at",
        "superseded_by",
        "supersedes",
    }
    assert (memory["expires_at"], memory["superseded_by"], memory["supersedes"]) == (None,) * 3
    assert memory["object"] == "memory"
    assert memory["id"].startswith("mem_")
    assert (memory["user"], memory["source"], memory["content"]) == ("alice", "learnings", content)
    assert memory["tokens"] == count_tokens(content, "o200k_base")
    assert (memory["confidence"], memory["usefulness"], memory["retrieval_count"]) == (0.8, 0.5, 0)
    assert memory["created_at"].endswith("Z")
    assert memory["metadata"] == {"k": [1, 2]}
    assert api.http.get(f"/v1/memories/{memory['id']}").json() == {**memory, "history": []}


def test_batch_keeps_order_client_ids_and_dates(api: Api) -> None:
    batch = [
        {"id": "a-1", "content": "first", "created_at": "2024-05-01T10:00:00+02:00"},
        {"content": "second", "source": "playbook", "confidence": 1, "usefulness": 0},
        {"id": "a-3", "content": "third", "created_at": "2024-05-01"},
    ]
    data = api.add({"memories": batch}).json()["data"]
    assert [m["content"] for m in data] == ["first", "second", "third"]
    assert data[0]["id"] == "a-1"
    assert data[0]["created_at"] == "2024-05-01T08:00:00Z"
    assert data[2]["created_at"] == "2024-05-01T00:00:00Z"  # naive means UTC
    assert (data[1]["source"], data[1]["confidence"], data[1]["usefulness"]) == ("playbook", 1, 0)


def test_client_ids_make_writes_idempotent_upserts(api: Api) -> None:
    for content in ("v1", "v2"):
        assert api.add({"memories": [{"id": "same", "content": content}]}).status_code == 201
    assert api.all_ids() == ["same"]
    assert api.http.get("/v1/memories/same").json()["content"] == "v2"


def test_cursor_pagination_visits_every_memory_once(api: Api) -> None:
    created = {
        m["id"]
        for m in api.add({"memories": [{"content": f"note {i}"} for i in range(25)]}).json()["data"]
    }
    seen: list[str] = []
    after = None
    pages = 0
    while True:
        page = api.list(limit=10, **({"after": after} if after else {})).json()
        assert page["object"] == "list"
        assert len(page["data"]) <= 10
        seen += [m["id"] for m in page["data"]]
        pages += 1
        if not page["has_more"]:
            break
        assert page["last_id"] == page["data"][-1]["id"]
        after = page["last_id"]
    assert pages == 3
    assert len(seen) == len(set(seen)) == 25
    assert set(seen) == created


def test_list_filters_by_user_and_source(api: Api) -> None:
    api.add(
        {
            "memories": [
                {"content": "x", "user": "u1", "source": "playbook"},
                {"content": "y", "user": "u1"},
                {"content": "z", "user": "u2", "source": "playbook"},
                {"content": "shared"},
            ]
        }
    )
    assert len(api.all_ids(user="u1")) == 2
    assert len(api.all_ids(source="playbook")) == 2
    assert len(api.all_ids(user="u1", source="playbook")) == 1
    assert len(api.all_ids(user="")) == 1  # user= is the tenant-shared scope
    assert len(api.all_ids()) == 4


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 101}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"limit": "³"}, "limit"),
        ({"limit": "1e3"}, "limit"),
        ({"source": "gossip"}, "source"),
        ({"order": "asc"}, "order"),
    ],
)
def test_list_rejects_bad_parameters(api: Api, params: dict[str, Any], param: str) -> None:
    assert_error(api.list(**params), 400, param)


BAD_MEMORIES: list[tuple[Any, str | None]] = [
    ({}, "content"),
    ({"content": ""}, "content"),
    ({"content": "   \n"}, "content"),
    ({"content": "x" * (MAX_CONTENT + 1)}, "content"),
    ({"content": 42}, "content"),
    ({"content": "ok", "created_at": "yesterday"}, "created_at"),
    ({"content": "ok", "created_at": "2024-13-01"}, "created_at"),
    ({"content": "ok", "created_at": 1714550400}, "created_at"),
    ({"content": "ok", "source": "gossip"}, "source"),
    ({"content": "ok", "confidence": 1.5}, "confidence"),
    ({"content": "ok", "confidence": -0.1}, "confidence"),
    ({"content": "ok", "usefulness": "high"}, "usefulness"),
    ({"content": "ok", "usefulness": True}, "usefulness"),
    ({"content": "ok", "metadata": [1]}, "metadata"),
    ({"content": "ok", "user": 7}, "user"),
    ({"content": "ok", "id": ""}, "id"),
    ({"content": "ok", "id": "a/b"}, "id"),
    ({"content": "ok", "id": 5}, "id"),
    ({"content": "ok", "conent": "typo"}, "conent"),
]


@pytest.mark.parametrize(("memory", "param"), BAD_MEMORIES)
def test_bad_memory_is_a_400_and_writes_nothing(api: Api, memory: Any, param: str) -> None:
    assert_error(api.add(memory), 400, param)
    # In a batch, after a good memory: the whole batch is refused.
    assert_error(api.add({"memories": [{"content": "good"}, memory]}), 400, f"memories[1].{param}")
    assert api.all_ids() == []


@pytest.mark.parametrize(
    "body",
    [
        {"memories": []},
        {"memories": "x"},
        {"memories": [{"content": "a", "id": "d"}, {"content": "b", "id": "d"}]},
        {"memories": [{"content": "a"}], "user": "u"},
        {"memories": ["just text"]},
    ],
)
def test_bad_batches_are_refused_whole(api: Api, body: Any) -> None:
    assert_error(api.add(body), 400)
    assert api.all_ids() == []


def test_non_object_and_invalid_json_bodies(api: Api) -> None:
    assert_error(api.add([{"content": "x"}]), 400)
    assert_error(api.http.post("/v1/memories", content=b"{nope"), 400)


def test_too_many_memories_in_one_batch(api: Api) -> None:
    response = api.add({"memories": [{"content": "m"}] * (MAX_BATCH_MEMORIES + 1)})
    assert_error(response, 400, "memories")
    assert response.json()["error"]["code"] == "batch_too_large"
    assert api.all_ids() == []


def test_body_over_the_limit_is_413(api: Api) -> None:
    content = "x" * MAX_CONTENT
    response = api.add({"memories": [{"content": content}] * (BODY_LIMIT // MAX_CONTENT + 1)})
    assert_error(response, 413)
    assert api.all_ids() == []


def test_search_returns_similar_memories_of_the_user_and_shared(api: Api) -> None:
    api.add(
        {
            "memories": [
                {"id": "tea", "content": "Alice drinks green tea every morning", "user": "alice"},
                {"id": "car", "content": "The car needs new tyres before winter", "user": "alice"},
                {"id": "rule", "content": "Always answer tea questions politely"},
                {"id": "bob", "content": "Bob drinks green tea every morning", "user": "bob"},
            ]
        }
    )
    response = api.search(query="what tea does Alice drink in the morning", user="alice", top_k=5)
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "list"
    ids = [m["id"] for m in body["data"]]
    assert ids[0] == "tea"
    assert "bob" not in ids
    assert set(ids) == {"tea", "car", "rule"}
    assert all(0.0 <= m["similarity"] <= 1.0 and m["object"] == "memory" for m in body["data"])
    sims = [m["similarity"] for m in body["data"]]
    assert sims[0] == max(sims)
    only_shared = api.search(query="tea", top_k=5).json()["data"]
    assert [m["id"] for m in only_shared] == ["rule"]
    top1 = api.search(query="tea", user="alice", top_k=1).json()["data"]
    assert len(top1) == 1
    playbook = api.search(query="tea", user="alice", sources=["playbook"]).json()["data"]
    assert playbook == []


def test_search_is_ordered_by_similarity_and_top_k_cuts_one_list(api: Api) -> None:
    # README "Search": similarity descending, ties by id; top_k=10 is the first ten of 200.
    topics = ["tea", "coffee", "the garden", "the car", "Lisbon", "the dog", "chess"]
    memories = [
        {"id": f"m{i:03d}", "content": f"Alice talked about {topics[i % 7]} on day {i % 11}"}
        for i in range(120)
    ]
    assert api.add({"memories": memories}).status_code == 201
    for query in ("what did Alice say about tea on day 3", "chess", "day 5"):
        every = api.search(query=query, top_k=200).json()["data"]
        assert len(every) == 120
        keys = [(-m["similarity"], m["id"]) for m in every]
        assert keys == sorted(keys)
        for top_k in (1, 10, 50):
            head = api.search(query=query, top_k=top_k).json()["data"]
            assert [m["id"] for m in head] == [m["id"] for m in every[:top_k]]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "query"),
        ({"query": ""}, "query"),
        ({"query": 3}, "query"),
        ({"query": "x", "top_k": 0}, "top_k"),
        ({"query": "x", "top_k": 1.5}, "top_k"),
        ({"query": "x", "top_k": 10_000}, "top_k"),
        ({"query": "x", "user": ["a"]}, "user"),
        ({"query": "x", "sources": ["gossip"]}, "sources"),
        ({"query": "x", "limit": 3}, "limit"),
    ],
)
def test_search_validation(api: Api, body: dict[str, Any], param: str) -> None:
    assert_error(api.search(**body), 400, param)


def test_delete_one_then_repeat_is_404(api: Api) -> None:
    memory = api.ok_add(content="to forget")
    first = api.http.delete(f"/v1/memories/{memory['id']}")
    assert first.status_code == 200
    assert first.json() == {"object": "memory.deleted", "id": memory["id"], "deleted": True}
    assert_error(api.http.delete(f"/v1/memories/{memory['id']}"), 404)
    assert_error(api.http.get(f"/v1/memories/{memory['id']}"), 404)
    assert api.all_ids() == []


def test_delete_every_memory_of_a_user(api: Api) -> None:
    api.add({"memories": [{"content": f"n{i}", "user": "gone"} for i in range(3)]})
    kept = api.ok_add(content="stays", user="kept")
    response = api.http.delete("/v1/memories", params={"user": "gone"})
    assert response.status_code == 200
    assert response.json() == {"object": "memory.user.deleted", "user": "gone", "deleted": 3}
    assert api.http.delete("/v1/memories", params={"user": "gone"}).json()["deleted"] == 0
    assert api.all_ids() == [kept["id"]]
    assert_error(api.http.delete("/v1/memories"), 400, "user")


def test_feedback_votes_and_explicit_usefulness(api: Api) -> None:
    memory = api.ok_add(content="useful fact")
    url = f"/v1/memories/{memory['id']}/feedback"
    up = api.http.post(url, json={"useful": True})
    assert up.status_code == 200
    assert up.json()["object"] == "memory"
    assert up.json()["usefulness"] == pytest.approx(0.6)
    down = api.http.post(url, json={"useful": False}).json()
    assert down["usefulness"] == pytest.approx(0.48)
    assert api.http.post(url, json={"usefulness": 0.1}).json()["usefulness"] == 0.1
    assert api.http.get(f"/v1/memories/{memory['id']}").json()["usefulness"] == 0.1
    assert_error(api.http.post(url, json={"useful": True, "usefulness": 1}), 400)
    assert_error(api.http.post(url, json={}), 400)
    assert_error(api.http.post(url, json={"useful": "yes"}), 400, "useful")
    assert_error(api.http.post(url, json={"usefulness": 2}), 400, "usefulness")
    assert_error(api.http.post(url, json={"usefulness": 0.5, "why": 1}), 400, "why")
    assert_error(api.http.post("/v1/memories/nope/feedback", json={"useful": True}), 404)


def test_tenants_never_see_each_other(server: str) -> None:
    owner, other = Api(server), Api(server)
    secret = owner.ok_add(id="shared-id", content="owner's secret plan about tea", user="u")
    guessed = f"/v1/memories/{secret['id']}"
    # Reads, by guessing the id and by listing/searching.
    assert_error(other.http.get(guessed), 404)
    assert other.all_ids() == []
    assert other.all_ids(user="u") == []
    assert other.search(query="secret plan about tea", user="u").json()["data"] == []
    # Writes: feedback, delete, delete-user, and the same id all stay in the other tenant.
    assert_error(other.http.post(f"{guessed}/feedback", json={"usefulness": 0.0}), 404)
    assert_error(other.http.delete(guessed), 404)
    assert other.http.delete("/v1/memories", params={"user": "u"}).json()["deleted"] == 0
    mine = other.ok_add(id="shared-id", content="other's note", user="u")
    assert mine["content"] == "other's note"
    assert owner.http.get(guessed).json() == {**secret, "history": []}
    assert owner.all_ids() == ["shared-id"]


def test_unsupported_methods_are_405_and_never_forwarded(api: Api, fake: FakeServer) -> None:
    response = api.http.put("/v1/memories", json={})
    assert_error(response, 405)
    assert "POST" in response.headers["allow"]
    assert_error(api.http.patch("/v1/memories/x"), 405)
    assert_error(api.http.get("/v1/memories/x/feedback"), 405)
    for method in ("TRACE", "QUERY"):
        other = api.http.request(method, "/v1/memories/x")
        assert_error(other, 405)
        assert other.headers["allow"] == "DELETE, GET, HEAD"
    assert list(fake.fake.requests) == []


def test_search_is_a_reserved_id(api: Api) -> None:
    assert_error(api.add({"id": "search", "content": "x"}), 400, "id")
    response = api.http.get("/v1/memories/search")
    assert_error(response, 405)
    assert response.headers["allow"] == "POST"


def test_writes_bump_the_tenant_generation(fake_server: FakeServer, tmp_path: Path) -> None:
    app = create_app(memory_settings(fake_server.url, tmp_path))
    with ProxyServer(app) as proxy:
        client = Api(f"http://{proxy.host}:{proxy.port}", key="sk-gen")
        cache = app.state.services.memories.cache
        tenant = app.state.services.tenants.for_key("sk-gen").id

        def generation() -> int | None:
            result: int | None = asyncio.run(cache.generation(tenant))
            return result

        before = generation()
        memory = client.ok_add(content="new")
        after_add = generation()
        client.http.post(f"/v1/memories/{memory['id']}/feedback", json={"useful": True})
        after_feedback = generation()
        client.http.delete(f"/v1/memories/{memory['id']}")
        after_delete = generation()
    assert before is not None
    assert before < after_add < after_feedback < after_delete  # type: ignore[operator]


class BrokenStore:
    """A store whose every call fails like an unreachable server (stores translate their
    client's failures into ``StoreError`` at their edge)."""

    def __getattr__(self, name: str) -> Any:
        async def fail(*args: Any, **kwargs: Any) -> Any:
            raise StoreError("qdrant is down")

        return fail


class BuggyStore:
    """A store with a bug: every call raises something that is not a backend failure."""

    def __getattr__(self, name: str) -> Any:
        async def fail(*args: Any, **kwargs: Any) -> Any:
            raise KeyError("a bug, not an outage")

        return fail


def test_backend_failures_are_503_in_openai_shape(fake_server: FakeServer, tmp_path: Path) -> None:
    app = create_app(memory_settings(fake_server.url, tmp_path), store=BrokenStore())
    with ProxyServer(app) as proxy:
        client = Api(f"http://{proxy.host}:{proxy.port}")
        assert_error(client.add({"content": "x"}), 503)
        assert_error(client.list(), 503)
        assert_error(client.search(query="x"), 503)
        assert_error(client.add({"content": ""}), 400)  # validation still answers first


def test_bugs_are_500_logged_once_not_503(
    fake_server: FakeServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(memory_settings(fake_server.url, tmp_path), store=BuggyStore())
    with ProxyServer(app) as proxy:
        client = Api(f"http://{proxy.host}:{proxy.port}")
        with caplog.at_level(logging.ERROR):
            response = client.list()
    assert_error(response, 500)
    assert response.json()["error"]["type"] == "server_error"
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert errors[0].exc_info is not None
    assert errors[0].exc_info[0] is KeyError


def test_memory_disabled_answers_503(fake_server: FakeServer, tmp_path: Path) -> None:
    settings = memory_settings(fake_server.url, tmp_path)
    settings = replace(settings, memory=replace(settings.memory, enabled=False))
    with ProxyServer(create_app(settings)) as proxy:
        client = Api(f"http://{proxy.host}:{proxy.port}")
        response = client.list()
    assert_error(response, 503)
    assert response.json()["error"]["type"] == "memory_backend_error"


def test_unreachable_store_at_start_answers_503(fake_server: FakeServer, tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the store's folder should be")
    with ProxyServer(create_app(memory_settings(fake_server.url, blocked))) as proxy:
        assert proxy.server.started
        client = Api(f"http://{proxy.host}:{proxy.port}")
        response = client.add({"content": "x"})
        listed = client.list()
    assert_error(response, 503)
    assert "unavailable" in response.json()["error"]["message"]
    assert_error(listed, 503)
