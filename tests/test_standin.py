"""The stand-in upstream (``proxy/standin.py``): OpenAI's shapes, and answers that show what
memproxy sent, including the quickstart as a newcomer runs it (``memproxy serve --stand-in``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from proxy.app import create_app
from proxy.settings import load_settings, replace
from proxy.standin import HEADER, StandIn
from tests.fakes.servers import ProxyServer
from tests.test_cli import free_port, wait_healthy

ROOT = Path(__file__).resolve().parents[1]
QUESTION = [{"role": "user", "content": "What should I drink?"}]


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
    assert text.splitlines() == [
        HEADER,
        "--- system ---",
        "Be brief.",
        "--- user ---",
        "What should I drink?",
    ]
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


def test_the_answer_shows_the_injected_memory(stand_in: StandIn, tmp_path: Path) -> None:
    base = load_settings(env={})
    settings = replace(
        base,
        upstream=replace(base.upstream, url=stand_in.url),
        store=replace(base.store, data_dir=str(tmp_path / "data")),
    )
    with ProxyServer(create_app(settings)) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key="sk-demo", max_retries=0)
        stored = httpx.post(
            f"{proxy.url}/memories",
            headers={"Authorization": "Bearer sk-demo"},
            json={"content": "Alice prefers green tea", "user": "alice"},
        )
        assert stored.status_code == 201
        answer = client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini",
            messages=QUESTION,  # type: ignore[arg-type]
            extra_headers={"X-Memory-User": "alice"},
        )
    assert answer.headers["x-memory-status"] == "injected"
    text = answer.parse().choices[0].message.content or ""
    assert "Alice prefers green tea" in text
    assert "<memories>" in text


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
