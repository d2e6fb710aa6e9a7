"""Fuzz the memories API with schemathesis against memproxy's own ``/openapi.json``.

Every operation under ``/v1/memories`` gets generated requests (valid and invalid); each answer
must pass schemathesis' checks (no 5xx, documented status codes, content types and response
schemas; invalid data refused with a 4xx). Bounded: a few examples per operation so the suite
stays fast; raise ``FUZZ_EXAMPLES`` for a longer hunt.
"""

from __future__ import annotations

import calendar
import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, assume, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import ignored_auth

from proxy.app import create_app
from tests.fakes.upstream import FakeServer
from tests.reliability.support import MemoryProxy, memory_settings

FUZZ_EXAMPLES = 12
AUTH = {"Authorization": "Bearer sk-schemathesis"}


@pytest.fixture(scope="module")
def fuzzed_proxy(
    fake_server: FakeServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MemoryProxy]:
    """memproxy with memory on, for the fuzzer."""
    settings_ = memory_settings(fake_server.url, tmp_path_factory.mktemp("fuzz-memories"))
    with MemoryProxy(create_app(settings_)) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def memories_schema(fuzzed_proxy: MemoryProxy) -> schemathesis.BaseSchema:
    """The served OpenAPI document, limited to the memories API."""
    root = f"http://{fuzzed_proxy.host}:{fuzzed_proxy.port}"
    schema = schemathesis.openapi.from_url(f"{root}/openapi.json")
    return schema.include(path_regex="^/v1/memories")


FEB_29 = re.compile(r'"([0-9]{4})-02-29')


def impossible_date(body: Any) -> bool:
    """True when the body holds February 29 of a year that has none."""
    try:
        text = json.dumps(body)
    except (TypeError, ValueError):
        return False
    return any(not calendar.isleap(int(year)) for year in FEB_29.findall(text))


OPERATIONS = 7  # the memories API's operations; fewer means the filter or document broke


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_memories_api_survives_fuzzing(
    memories_schema: schemathesis.BaseSchema, fuzzed_proxy: MemoryProxy, mode: GenerationMode
) -> None:
    root = f"http://{fuzzed_proxy.host}:{fuzzed_proxy.port}"
    operations = [result.ok() for result in memories_schema.get_all_operations()]
    assert len(operations) >= OPERATIONS, [op.label for op in operations]
    calls = 0
    skipped: list[str] = []
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck)
        )
        def fuzz(case: schemathesis.Case) -> None:
            nonlocal calls
            # Documented gap (proxy/memory/inputs.py): the created_at pattern lets February 29
            # of a non-leap year through, the calendar refuses it; "valid" data, then a 400.
            assume(mode is GenerationMode.NEGATIVE or not impossible_date(case.body))
            calls += 1
            # Passthrough mode: any key names a tenant (only the upstream knows real keys), so
            # "invalid credentials get 401" cannot apply; keyless calls are refused, which
            # tests/reliability/test_tenants.py checks.
            case.call_and_validate(base_url=root, headers=AUTH, excluded_checks=[ignored_auth])

        try:
            fuzz()
        except Unsatisfiable:
            # Nothing invalid can be built for some operations (a free-form path id only).
            assert mode is GenerationMode.NEGATIVE
            skipped.append(operation.label)
    assert len(skipped) < len(operations) // 2, skipped
    assert calls >= len(operations) - len(skipped)
    assert httpx.get(f"{root}/healthz").status_code == 200
