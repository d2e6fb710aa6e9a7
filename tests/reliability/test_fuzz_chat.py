"""Fuzz the chat route with hypothesis-generated bodies and X-Memory-* headers, memory on.

Bodies range from arbitrary JSON to near-valid chat requests with odd types, odd content parts
and odd characters. Every answer is a 2xx (forwarded) or a 4xx in OpenAI's shape, never a 5xx,
and the proxy keeps serving. In-process (ASGI) for speed; the upstream is the real fake.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.app import create_app
from tests.fakes.upstream import FakeServer
from tests.reliability.support import assert_openai_error, memory_settings, running

EXAMPLES = 150
# A keyed caller: keyless chat has memory off (adr/0086), and the memory path is what is fuzzed.
KEY = {"Authorization": "Bearer sk-fuzz-chat"}

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=30)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
parts = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.one_of(st.text(), json_values)}),
    st.fixed_dictionaries({"type": st.text(max_size=12)}, optional={"data": json_values}),
    json_values,
)
contents = st.one_of(st.text(max_size=200), st.lists(parts, max_size=4), json_values)
messages = st.fixed_dictionaries(
    {"role": st.one_of(st.sampled_from(["system", "user", "assistant", "tool"]), json_values)},
    optional={"content": contents, "name": json_values},
)
chat_bodies = st.fixed_dictionaries(
    {},
    optional={
        "model": st.one_of(st.sampled_from(["gpt-4o", "m", ""]), json_values),
        "messages": st.one_of(st.lists(messages, max_size=6), json_values),
        "user": json_values,
        "stream": st.one_of(st.booleans(), json_values),
        "max_tokens": json_values,
    },
)
bodies = st.one_of(chat_bodies, json_values)
header_values = st.one_of(
    st.sampled_from(["", "0", "1", "-1", "50", "999999999", "abc", "explain", "inject", "off"]),
    st.from_regex(r"[ -~]{0,20}", fullmatch=True),
)
memory_headers = st.dictionaries(
    st.sampled_from(
        [
            "X-Memory-Mode",
            "X-Memory-User",
            "X-Memory-Session",
            "X-Memory-Max-Tokens",
            "X-Memory-Top-K",
            "X-Memory-Sources",
            "X-Memory-Capture",
        ]
    ),
    header_values,
    max_size=4,
)


def test_generated_chat_bodies_get_2xx_or_an_openai_4xx(fake: FakeServer, tmp_path: Path) -> None:
    app = create_app(memory_settings(fake.url, tmp_path))
    seen: dict[int, int] = {}

    async def scenario() -> None:
        async with running(app) as client:
            seeded = await client.post(
                "/v1/memories",
                json={"memories": [{"content": "the user likes tea"}, {"content": "kyoto trip"}]},
                headers=KEY,
            )
            assert seeded.status_code == 201

            @given(body=bodies, headers=memory_headers, raw=st.booleans())
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                suppress_health_check=list(HealthCheck),
            )
            def one(body: Any, headers: dict[str, str], raw: bool) -> None:
                content = json.dumps(body).encode()
                if raw:  # a broken variant of the same body
                    content = content[: max(1, len(content) // 2)]
                headers = {**headers, **KEY, "Content-Type": "application/json"}
                future = asyncio.run_coroutine_threadsafe(
                    client.post("/v1/chat/completions", content=content, headers=headers), loop
                )
                response = future.result(timeout=60)
                seen[response.status_code] = seen.get(response.status_code, 0) + 1
                assert response.status_code < 500, (body, headers, response.text)
                if response.status_code >= 400 and response.headers.get(
                    "content-type", ""
                ).startswith("application/json"):
                    assert_openai_error(response, response.status_code)

            loop = asyncio.get_running_loop()
            await asyncio.to_thread(one)
            assert (await client.get("/healthz")).status_code == 200
            ok = await client.post(
                "/v1/chat/completions",
                json={"model": "gpt-4o", "messages": [{"role": "user", "content": "tea?"}]},
                headers=KEY,
            )
            assert ok.status_code == 200
            assert ok.headers["x-memory-status"] == "injected"

    asyncio.run(scenario())
    # Both outcomes were exercised: some bodies forwarded, some refused.
    assert any(200 <= s < 300 for s in seen)
    assert any(400 <= s < 500 for s in seen)
