"""The ``memproxy`` command (also ``python -m proxy``).

Subcommands are argparse sub-parsers. To add one (``memories``, ``explain``), write
``register(subparsers)`` in its module, setting ``func`` with ``set_defaults``, and list it in
``COMMANDS``; ``func(args) -> int`` is the exit code.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack

from proxy import __version__
from proxy.bundled_data import use_bundled_data
from proxy.cli_memories import register as register_memories
from proxy.cli_memories import register_explain
from proxy.errors import ConfigError
from proxy.logs import configure_logging
from proxy.settings import Settings, load_settings
from proxy.standin import StandIn
from proxy.standin import run as run_standin

APP_FACTORY = "proxy.app:create_app_from_env"
EXIT_CONFIG = 2
LOGGER = logging.getLogger("memproxy")
# What a shell reports for a process killed by SIGPIPE (128 + 13): `memproxy ... | head`.
EXIT_BROKEN_PIPE = 141
STANDIN_PORT = 9000


def serve(args: argparse.Namespace) -> int:
    """Run the proxy (``proxy/server.py``) with ``--workers`` processes."""
    overrides = {"server.host": args.host, "server.port": args.port, "server.workers": args.workers}
    settings = load_settings(args.config, overrides=overrides)
    configure_logging(settings.server)
    stand_in = None
    if args.stand_in:
        # Started before the server so that every worker finds it; the workers read their
        # settings from the environment, where the stand-in's URLs beat the file's upstreams
        # (OpenAI's and Anthropic's).
        stand_in = StandIn().start()
        os.environ.update(stand_in.environment())
        LOGGER.warning(
            "upstream: the stand-in at %s, for OpenAI's and Anthropic's APIs (no model behind "
            "it: answers repeat what memproxy sent, memory block included)",
            stand_in.root,
        )
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
        if stand_in is not None:
            stand_in.stop()


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
    parser.add_argument(
        "--stand-in",
        action="store_true",
        help="forward to a built-in stand-in upstream (no provider key needed; its answers "
        "show what memproxy sent)",
    )
    parser.set_defaults(func=serve)


def register_standin(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``memproxy standin``: the stand-in upstream alone, for a memproxy started elsewhere."""
    parser = subparsers.add_parser(
        "standin",
        help="run the stand-in upstream for OpenAI's and Anthropic's APIs (no model behind it)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=STANDIN_PORT, help=f"listen port (default {STANDIN_PORT})"
    )
    parser.set_defaults(func=lambda args: run_standin(args.host, args.port))


Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]
COMMANDS: list[Registrar] = [register_serve, register_standin, register_memories, register_explain]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="memproxy", description="OpenAI-compatible proxy with long-term memory"
    )
    parser.add_argument("--version", action="version", version=f"memproxy {__version__}")
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
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
    except ConfigError as exc:
        print(f"memproxy: configuration error: {exc.message}", file=sys.stderr)
        return EXIT_CONFIG
    except BrokenPipeError:
        # The reader went away (`memproxy explain ... | head`): stop quietly, as cat does.
        # Python would flush stdout again at exit and print a second error: point it at
        # /dev/null first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return code
