"""The README's ``curl`` examples (Quickstart, Memories API) and the Quickstart's SDK examples
(``.venv/bin/python -c '...'``: chat completions, Responses API, Anthropic's SDK) run as written
against memproxy in front of the stand-in upstream, wired as ``--stand-in`` wires it, in order,
and every one succeeds."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
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
PYTHON = ".venv/bin/python"
ADDRESS = "http://127.0.0.1:8080"  # where the README's SDK examples find memproxy
MEMORY = "Alice prefers green tea"
LOOSE_DEADLINE_MS = 2_000.0  # a first retrieval on a loaded machine can pass the default 50 ms


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


def examples() -> list[str]:
    """The ``curl`` and SDK commands of the sections, in order."""
    found = []
    for title in SECTIONS:
        for block in re.findall(r"```bash\n(.*?)```", section(title), re.S):
            found += [c for c in commands(block) if c.startswith("curl ") or is_sdk(c)]
    return found


def is_sdk(command: str) -> bool:
    """Whether ``command`` is an SDK example: ``[VAR=value ...] .venv/bin/python -c '...'``."""
    words = shlex.split(command, comments=True)
    program = next((w for w in words if "=" not in w), "")
    return program == PYTHON and words[words.index(program) + 1] == "-c"


def curls() -> list[str]:
    return [c for c in examples() if c.startswith("curl ")]


def run_sdk_example(command: str, root: str) -> str:
    """Run an SDK example's code with this interpreter, its variables set and the README's
    address pointing at ``root``; its output."""
    words = shlex.split(command.replace(ADDRESS, root), comments=True)
    at = words.index(PYTHON)
    env = {**os.environ, **dict(w.split("=", 1) for w in words[:at])}
    done = subprocess.run(
        [sys.executable, *words[at + 1 :]], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, (command, done.stderr)
    return done.stdout


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
    sdk = [c for c in examples() if is_sdk(c)]
    assert [("responses.create" in c, "ANTHROPIC_BASE_URL=" in c) for c in sdk] == [
        (False, False),  # chat completions
        (True, False),
        (False, True),
    ]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ProxyServer]:
    stand_in = StandIn().start()
    env = {**stand_in.environment(), "MEMPROXY_DATA_DIR": str(tmp_path / "data")}
    settings = load_settings(env=env)
    settings = replace(settings, memory=replace(settings.memory, deadline_ms=LOOSE_DEADLINE_MS))
    try:
        with ProxyServer(create_app(settings)) as proxy:
            yield proxy
    finally:
        stand_in.stop()


def test_every_readme_example_succeeds_in_order(served: ProxyServer) -> None:
    root = f"http://{served.host}:{served.port}"
    with httpx.Client() as client:
        for command in examples():
            if is_sdk(command):
                output = run_sdk_example(command, root)
                assert MEMORY in output, (command, output)
                assert "<memories>" in output, (command, output)
                continue
            answer = client.send(request(command, root))
            assert answer.status_code < 300, (command, answer.text)
            if "/chat/completions" in command:
                text = answer.json()["choices"][0]["message"]["content"]
                assert MEMORY in text
                assert answer.headers["x-memory-status"] == "injected"
