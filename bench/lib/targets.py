"""The overhead benchmark's four targets, started together against one fake upstream.

- ``direct``: the fake upstream itself;
- ``memproxy-off``: ``memproxy serve`` with the memory pipeline disabled (pure forwarding);
- ``memproxy-on``: ``memproxy serve`` with ``N`` synthetic memories for the benchmark user, each
  request searching, scoring, packing and injecting them;
- ``litellm``: LiteLLM's proxy from its own venv (``bench/peers/litellm_proxy.py``).

All of them receive the same ``Authorization`` header, so each pays for reading it; memproxy in
passthrough mode derives the tenant from it, so seeding and requests land in the same tenant.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.lib import memories, servers
from bench.lib.loadgen import Target
from bench.peers import litellm_proxy

KINDS = ("direct", "memproxy-off", "memproxy-on", "litellm")
BENCH_USER = "bench-user"
AUTH = litellm_proxy.AUTH_HEADERS
DEFAULT_MEMORIES = 10_000


@dataclass
class Fleet:
    """The started targets, in the order given, and what starting them measured."""

    targets: list[Target] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


def _say(message: str) -> None:
    print(message, file=sys.stderr)


@contextlib.contextmanager
def start_targets(
    kinds: Sequence[str] = KINDS,
    *,
    workers: int = 1,
    memory_count: int = DEFAULT_MEMORIES,
    upstream: servers.ServerProcess | None = None,
) -> Iterator[Fleet]:
    """Start the upstream and every target of ``kinds``; stop them all on exit."""
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown targets {sorted(unknown)}; choose from {KINDS}")
    fleet = Fleet(info={"workers": workers})
    with contextlib.ExitStack() as stack:
        fake = stack.enter_context(upstream or servers.fake_upstream())
        upstream_v1 = fake.base_url + "/v1"
        for kind in kinds:
            started = time.perf_counter()
            if kind == "direct":
                fleet.targets.append(Target(kind, fake.base_url, AUTH))
                continue
            if kind == "litellm":
                fleet.info["litellm_install"] = litellm_proxy.ensure_installed()
                server = litellm_proxy.litellm_server(upstream_v1, workers=workers)
                stack.enter_context(server)
                fleet.targets.append(Target(kind, server.base_url, AUTH))
            else:
                data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mp-")))
                enabled = "true" if kind == "memproxy-on" else "false"
                server = servers.memproxy(
                    upstream_v1,
                    data_dir,
                    workers=workers,
                    extra_env={"MEMPROXY_MEMORY_ENABLED": enabled},
                )
                stack.enter_context(server)
                headers = dict(AUTH)
                if kind == "memproxy-on":
                    items = memories.synthetic_memories(memory_count, BENCH_USER)
                    seconds = memories.seed_memories(server.base_url, items, AUTH)
                    fleet.info["seed_seconds"] = round(seconds, 2)
                    fleet.info["memories"] = memory_count
                    headers["X-Memory-User"] = BENCH_USER
                fleet.targets.append(Target(kind, server.base_url, headers))
            fleet.info[f"{kind}_ready_seconds"] = round(time.perf_counter() - started, 2)
            _say(f"{kind} ready in {fleet.info[f'{kind}_ready_seconds']} s")
        yield fleet
