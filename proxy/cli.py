"""The ``memproxy`` command (also ``python -m proxy``).

Subcommands are argparse sub-parsers. To add one (``memories``, ``explain``), write
``register(subparsers)`` in its module, setting ``func`` with ``set_defaults``, and list it in
``COMMANDS``; ``func(args) -> int`` is the exit code.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack

from proxy.bundled_data import use_bundled_data
from proxy.cli_memories import register as register_memories
from proxy.cli_memories import register_explain
from proxy.errors import ConfigError
from proxy.logs import configure_logging
from proxy.settings import Settings, load_settings

APP_FACTORY = "proxy.app:create_app_from_env"
EXIT_CONFIG = 2


def serve(args: argparse.Namespace) -> int:
    """Run the proxy (``proxy/server.py``) with ``--workers`` processes."""
    overrides = {"server.host": args.host, "server.port": args.port, "server.workers": args.workers}
    settings = load_settings(args.config, overrides=overrides)
    configure_logging(settings.server)
    # Worker processes load their settings from the environment: pass the file on, and the
    # worker count, which decides what a process may share (the embedded store, the cache).
    if args.config:
        os.environ["MEMPROXY_CONFIG"] = args.config
    os.environ["MEMPROXY_WORKERS"] = str(settings.server.workers)
    metrics_dir = None
    if settings.server.workers > 1:
        # prometheus_client reads this at import time, so it must be set before workers start.
        metrics_dir = tempfile.mkdtemp(prefix="memproxy-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
        os.environ["MEMPROXY_METRICS_DIR"] = metrics_dir
    try:
        # Imported only now: prometheus_client reads PROMETHEUS_MULTIPROC_DIR at import time.
        from proxy.server import run, server_config

        config = server_config(APP_FACTORY, settings.server)
        if settings.server.workers == 1:
            return run(config)
        return run_with_primary(settings, lambda: run(config))
    finally:
        if metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def run_with_primary(settings: Settings, serve_workers: Callable[[], int]) -> int:
    """Run ``serve_workers`` while this (the supervisor) process holds the embedded store's
    primary shard: brought up to date before the workers start, given their logged writes
    after they stop (adr/0105)."""
    from proxy.composition import open_primary

    with asyncio.Runner() as runner:
        stack = AsyncExitStack()
        try:
            runner.run(open_primary(settings, stack))
        except BaseException:
            runner.run(stack.aclose())
            raise
        try:
            return serve_workers()
        finally:
            runner.run(stack.aclose())


def register_serve(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``memproxy serve``."""
    parser = subparsers.add_parser("serve", help="run the proxy")
    parser.add_argument("--config", help="YAML config file (default: $MEMPROXY_CONFIG)")
    parser.add_argument("--host", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="listen port (default 8080)")
    parser.add_argument("--workers", type=int, help="server processes (default 1)")
    parser.set_defaults(func=serve)


Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]
COMMANDS: list[Registrar] = [register_serve, register_memories, register_explain]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="memproxy", description="OpenAI-compatible proxy with long-term memory"
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in COMMANDS:
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``memproxy`` console script."""
    use_bundled_data(os.environ)  # process start: tiktoken and litellm read local files
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        print(f"memproxy: configuration error: {exc.message}", file=sys.stderr)
        return EXIT_CONFIG
    return code
