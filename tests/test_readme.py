"""The README's ``curl`` examples (Quickstart, Memories API) run as written against memproxy in
front of the stand-in upstream, in order, and every one succeeds."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from proxy.app import create_app
from proxy.settings import load_settings, replace
from proxy.standin import StandIn
from tests.fakes.servers import ProxyServer

README = Path(__file__).resolve().parents[1] / "README.md"
SECTIONS = ("## Quickstart", "## Memories API and CLI")
KEY = "sk-local-demo"


def section(title: str) -> str:
    text = README.read_text()
    start = text.index(title)
    end = text.find("\n## ", start + 1)
    return text[start:end]


def commands(block: str) -> Iterator[str]:
    """Shell commands of a block: continued lines and quotes spanning lines joined."""
    current = ""
    for line in block.splitlines():
        current += line + "\n"
        if current.count("'") % 2 == 0 and not line.endswith("\\"):
            yield current.replace("\\\n", " ").strip()
            current = ""


def curls() -> list[str]:
    found = []
    for title in SECTIONS:
        for block in re.findall(r"```bash\n(.*?)```", section(title), re.S):
            found += [c for c in commands(block) if c.startswith("curl ")]
    return found


def request(command: str, root: str) -> httpx.Request:
    """The request a ``curl`` command line sends (the options the README uses)."""
    words = shlex.split(command.replace("$KEY", KEY), comments=True)
    if "|" in words:
        words = words[: words.index("|")]
    method, headers, data, url = None, {}, None, None
    options = iter(words[1:])
    for word in options:
        if word == "-X":
            method = next(options)
        elif word == "-H":
            name, _, value = next(options).partition(":")
            headers[name] = value.strip()
        elif word == "-d":
            data = next(options)
            headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
        elif word == "-w":
            next(options)
        elif not word.startswith("-"):
            url = word
    assert url is not None, command
    url = root + url.removeprefix("localhost:8080")
    return httpx.Request(method or ("POST" if data else "GET"), url, headers=headers, content=data)


def test_the_readme_has_the_examples_it_promises() -> None:
    found = curls()
    assert len(found) >= 9
    assert not [c for c in found if '"..."' in c]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ProxyServer]:
    stand_in = StandIn().start()
    base = load_settings(env={})
    settings = replace(
        base,
        upstream=replace(base.upstream, url=stand_in.url),
        store=replace(base.store, data_dir=str(tmp_path / "data")),
    )
    try:
        with ProxyServer(create_app(settings)) as proxy:
            yield proxy
    finally:
        stand_in.stop()


def test_every_readme_curl_example_succeeds_in_order(served: ProxyServer) -> None:
    root = f"http://{served.host}:{served.port}"
    with httpx.Client() as client:
        for command in curls():
            answer = client.send(request(command, root))
            assert answer.status_code < 300, (command, answer.text)
            if "/chat/completions" in command:
                text = answer.json()["choices"][0]["message"]["content"]
                assert "Alice prefers green tea" in text
                assert answer.headers["x-memory-status"] == "injected"
