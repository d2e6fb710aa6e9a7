"""``/openapi.json``: the document itself, and schemathesis fuzzing the memories API against it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from jsonschema import Draft202012Validator
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import ignored_auth, positive_data_acceptance

from proxy.app import create_app
from proxy.memory import outputs
from proxy.memory.inputs import CONTENT_LIMIT_KEY, MAX_PAGE, ListQuery, MemoryInput
from proxy.openapi import build_openapi
from proxy.settings import Settings, replace
from tests.fakes.servers import ProxyServer
from tests.fakes.upstream import FakeServer
from tests.routes.test_memories import memory_settings

FUZZ_EXAMPLES = 30
MEMORY_PATHS = {
    ("/v1/memories", "post"),
    ("/v1/memories", "get"),
    ("/v1/memories", "delete"),
    ("/v1/memories/search", "post"),
    ("/v1/memories/{memory_id}", "get"),
    ("/v1/memories/{memory_id}", "delete"),
    ("/v1/memories/{memory_id}/feedback", "post"),
}


@pytest.fixture(scope="module")
def fuzz_settings(fake_server: FakeServer, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return memory_settings(fake_server.url, tmp_path_factory.mktemp("openapi"))


@pytest.fixture(scope="module")
def root(fuzz_settings: Settings) -> Iterator[str]:
    """memproxy with memory on, over a real socket."""
    with ProxyServer(create_app(fuzz_settings)) as proxy:
        yield f"http://{proxy.host}:{proxy.port}"


def test_document_is_served_and_describes_every_memories_endpoint(root: str) -> None:
    document: dict[str, Any] = httpx.get(f"{root}/openapi.json").json()
    assert document["openapi"] == "3.1.0"
    operations = {
        (path, method)
        for path, item in document["paths"].items()
        for method in item
        if method != "parameters"
    }
    assert operations >= MEMORY_PATHS
    assert {("/healthz", "get"), ("/readyz", "get"), ("/v1/chat/completions", "post")} <= operations
    for path in ("/v1/chat/completions", "/v1/responses", "/v1/messages"):
        route = document["paths"][path]["post"]
        assert {p["name"] for p in route["parameters"]} >= {"X-Memory-Mode", "X-Memory-User"}
        assert "X-Memory-Status" in route["responses"]["200"]["headers"]
    messages_400 = document["paths"]["/v1/messages"]["post"]["responses"]["400"]
    assert messages_400["content"]["application/json"]["schema"]["required"] == ["type", "error"]
    for schema in document["components"]["schemas"].values():
        Draft202012Validator.check_schema(schema)


def test_document_follows_the_settings(fuzz_settings: Settings) -> None:
    document = build_openapi(fuzz_settings)
    content = document["components"]["schemas"]["MemoryInput"]["properties"]["content"]
    assert content["maxLength"] == fuzz_settings.memory.max_content_chars
    keyed = [{"bearerAuth": []}, {"xApiKey": []}, {"apiKey": []}]
    # A key is required for memories unless keyless callers share the anonymous tenant; a
    # keyless chat request still passes through (memory off) in passthrough mode.
    assert document["security"] == keyed
    for path in ("/v1/chat/completions", "/v1/responses", "/v1/messages"):
        assert document["paths"][path]["post"]["security"] == [{}, *keyed]
    anonymous = replace(fuzz_settings, auth=replace(fuzz_settings.auth, anonymous=True))
    assert build_openapi(anonymous)["security"] == [{}, *keyed]


def test_document_is_generated_from_the_models(fuzz_settings: Settings) -> None:
    document = build_openapi(fuzz_settings)
    schemas = document["components"]["schemas"]
    assert set(schemas["MemoryInput"]["properties"]) == set(MemoryInput.model_fields)
    assert set(schemas["Memory"]["properties"]) == set(outputs.Memory.model_fields)
    # An explicit null in an optional field means its default, and the document says so.
    for name in ("user", "source", "metadata", "id"):
        assert {"type": "null"} in schemas["MemoryInput"]["properties"][name]["anyOf"], name
    assert "anyOf" not in schemas["MemoryInput"]["properties"]["content"]
    query = schemas["SearchRequest"]["properties"]["query"]
    assert query["maxLength"] == fuzz_settings.memory.max_content_chars
    assert CONTENT_LIMIT_KEY not in orjson.dumps(document).decode()  # every mark filled in
    listing = document["paths"]["/v1/memories"]["get"]["parameters"]
    assert [p["name"] for p in listing] == list(ListQuery.model_fields)
    limit = next(p["schema"] for p in listing if p["name"] == "limit")
    assert limit == {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": 20}
    # A query parameter is absent or a string: never null.
    assert all(b"null" not in orjson.dumps(p["schema"]) for p in listing)
    (user,) = document["paths"]["/v1/memories"]["delete"]["parameters"]
    assert (user["name"], user["required"]) == ("user", True)


def test_a_memory_from_the_document_example_is_accepted(root: str) -> None:
    body = {
        "content": "x",
        "id": "Doc_1.a:b@c+d=e~f-g",
        "created_at": "2024-05-01T12:00:00.123+02:00",
    }
    response = httpx.post(f"{root}/v1/memories", json=body, headers={"Authorization": "Bearer d"})
    assert response.status_code == 201, response.text


def memory_operations(settings_: Settings) -> list[Any]:
    """The memories API operations of the document, as schemathesis sees them."""
    loaded = schemathesis.openapi.from_dict(build_openapi(settings_))
    return [
        result.ok()
        for result in loaded.get_all_operations()
        if result.ok().path.startswith("/v1/memories")
    ]


def fuzz(operation: Any, mode: GenerationMode, root: str, http: requests.Session) -> None:
    """Run schemathesis' checks on generated cases of one operation."""
    # Rules of a write no JSON schema can state: ids unique within a batch, February 29 only in
    # leap years, and years 1000-9999 once in UTC; generated "valid" batches may break them and
    # rightly get a 400.
    excluded = (
        [positive_data_acceptance]
        if (operation.method, operation.path) == ("post", "/v1/memories")
        else []
    )
    # Passthrough mode: every key names a tenant (only the upstream knows which keys are real),
    # so the "invalid credentials must get 401" check cannot apply. Keyless calls are refused;
    # tests/reliability/test_tenants.py checks that.
    excluded.append(ignored_auth)

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
    def run(case: Any) -> None:
        case.call_and_validate(
            base_url=root,
            session=http,
            headers={"Authorization": "Bearer sk-fuzz"},
            excluded_checks=excluded,
        )

    try:
        run()
    except Unsatisfiable:
        # Negative mode has nothing to break in an operation whose only input is a free-form
        # path segment (GET/DELETE /v1/memories/{id}); positive mode still covers it.
        assert mode is GenerationMode.NEGATIVE
        assert operation.method in ("get", "delete")


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_memories_api_conforms_to_its_document(
    root: str, fuzz_settings: Settings, mode: GenerationMode
) -> None:
    """No 5xx, documented statuses, content types and shapes; invalid input is always a 4xx."""
    operations = memory_operations(fuzz_settings)
    assert {(op.path, op.method) for op in operations} == MEMORY_PATHS
    with requests.Session() as http:
        for operation in operations:
            fuzz(operation, mode, root, http)
