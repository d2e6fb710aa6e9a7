"""``memproxy memories import|export|search`` and ``memproxy explain``.

The commands work directly on the configured store (the same settings as ``memproxy serve``),
not through a running server: a bulk import then costs no HTTP round trips and needs no server
(adr/0073). The embedded store (Qdrant Edge) is owned by one process, so while a server has it
open these commands stop with a clear message (exit 3) pointing at the HTTP API instead. With a
Qdrant server (``store.kind: qdrant``) both can run at once; writes then bump the tenant's cache
generation in Redis when ``cache.redis_url`` is set, so the server never serves stale results.

The tenant is ``--tenant ID``, or the tenant a key maps to (``--key K``: the same tenant as a
request carrying K in ``Authorization: Bearer``, ``x-api-key`` or ``api-key``); without either,
the ``anonymous`` tenant when ``auth.anonymous`` is on (passthrough mode), else an error. In
passthrough mode a request's tenant is always derived from its key, so ``--tenant acme`` names
a tenant no request can reach: refused unless ``--force`` (README, Tenants).

Errors are one line on stderr and a non-zero exit, never a traceback: ``EXIT_BAD_INPUT`` for
records or files, the CLI's configuration exit for settings and tenants, ``EXIT_LOCKED``.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager as ContextManager
from contextlib import AsyncExitStack, asynccontextmanager, nullcontext
from pathlib import Path
from typing import IO, Any

import orjson
from starlette.datastructures import Headers

from proxy.composition import open_embedder, open_request_cache, open_store, warm_encodings
from proxy.errors import ConfigError, MemproxyError, StoreError
from proxy.memory.inputs import InputLimits, MemoryInput
from proxy.memory.io import BadRecord, batches, export_line, read_inputs
from proxy.memory.parsing import parse_list_query, parse_search
from proxy.memory.service import MemoryService, search_hit_object
from proxy.settings import Settings, load_settings, replace
from proxy.tenancy import ANONYMOUS_TENANT, TENANT_HASH_CHARS, TenantResolver

EXIT_BAD_INPUT = 1
EXIT_LOCKED = 3
DEFAULT_BATCH = 512
EXPORT_PAGE = 1000
MAX_REPORTED_ERRORS = 20
PROGRESS_EVERY_S = 0.2
LOCK_MARKERS = ("WouldBlock", "lock")
PASSTHROUGH_TENANT = re.compile(rf"t-[0-9a-f]{{{TENANT_HASH_CHARS}}}")
# explain from the command line is not on a request's clock: give the pipeline time.
CLI_DEADLINE_MS = 10_000.0


class StoreLocked(MemproxyError):
    """The embedded store is open in another process (a running server)."""


class FileProblem(MemproxyError):
    """A file named on the command line cannot be read or written."""


def reachable_in_passthrough(settings: Settings, tenant: str) -> bool:
    """Whether a request can ever land in ``tenant`` in passthrough mode: only key-derived ids
    (``t-`` + 16 hex digits, as ``--key`` or an export's summary shows them) and, when keyless
    callers share one, ``anonymous``."""
    if tenant == ANONYMOUS_TENANT:
        return settings.auth.anonymous
    return PASSTHROUGH_TENANT.fullmatch(tenant) is not None


def resolve_tenant(
    settings: Settings, tenant: str | None, key: str | None, *, force: bool = False
) -> str:
    """The tenant id the command works on (see the module docstring)."""
    resolver = TenantResolver(settings)
    if key:
        return resolver.for_key(key).id
    if tenant:
        if settings.auth.mode == "keys" and tenant not in resolver.tenants:
            known = ", ".join(sorted(resolver.tenants)) or "none"
            raise ConfigError(f"unknown tenant {tenant!r} (configured tenants: {known})")
        passthrough = settings.auth.mode == "passthrough"
        if passthrough and not force and not reachable_in_passthrough(settings, tenant):
            raise ConfigError(
                f"no request can reach tenant {tenant!r}: in passthrough mode a request's "
                "tenant is derived from its API key (t- and 16 hex digits); use --key KEY "
                "with the key your application sends, or --force to use this tenant anyway"
            )
        return tenant
    if settings.auth.mode == "keys":
        raise ConfigError("auth.mode is keys: name the tenant with --tenant or --key")
    if settings.auth.anonymous:
        return ANONYMOUS_TENANT
    raise ConfigError(
        "name the tenant with --tenant or --key (keyless callers have no tenant unless "
        "auth.anonymous is true)"
    )


def locked_message(settings: Settings) -> str:
    """What to do when the embedded store is in use."""
    return (
        f"the embedded store under {settings.store.data_dir!r} is in use by another process "
        "(a running `memproxy serve`?). Stop it and retry, or send the memories to the running "
        'server: POST /v1/memories with {"memories": [...]} (up to 1000 per request).'
    )


@asynccontextmanager
async def open_service(settings: Settings) -> AsyncIterator[MemoryService]:
    """The configured embedder, store and (Redis only) cache, behind one ``MemoryService``."""
    async with AsyncExitStack() as stack:
        embedder = await open_embedder(settings, stack)  # its first call paid here
        await asyncio.to_thread(warm_encodings)  # tokenizer tables too, before timing
        try:
            store = await open_store(settings.store, dimensions=embedder.dimensions)
        except StoreError as exc:
            if settings.store.kind == "edge" and any(m in str(exc) for m in LOCK_MARKERS):
                raise StoreLocked(locked_message(settings)) from exc
            raise
        stack.push_async_callback(store.close)
        # A local cache would be this process's own; only Redis is shared with a server.
        cache = open_request_cache(settings, stack) if settings.cache.redis_url else None
        yield MemoryService(
            store, embedder, cache, max_content_chars=settings.memory.max_content_chars
        )


class Progress:
    """A one-line progress bar on stderr: done/total, percent, rate."""

    def __init__(self, total: int, stream: IO[str], enabled: bool) -> None:
        self.total, self.stream, self.enabled = total, stream, enabled
        self.done = 0
        self.started = self._last = self._ended = time.perf_counter()

    def advance(self, count: int) -> None:
        """Add ``count`` finished items and redraw at most every ``PROGRESS_EVERY_S``."""
        self.done += count
        now = self._ended = time.perf_counter()
        if now - self._last >= PROGRESS_EVERY_S or self.done >= self.total:
            self._last = now
            self.draw(end="")

    def draw(self, end: str) -> None:
        """Write the bar."""
        if not self.enabled:
            return
        width = 30
        share = self.done / self.total if self.total else 1.0
        bar = "#" * int(width * share)
        rate = self.done / max(time.perf_counter() - self.started, 1e-9)
        self.stream.write(
            f"\rimporting [{bar:<{width}}] {self.done:,}/{self.total:,} "
            f"({share:.0%}) {rate:,.0f} memories/s{end}"
        )
        self.stream.flush()

    def finish(self) -> None:
        """End the bar's line."""
        if self.enabled and self.total:
            self.stream.write("\n")
            self.stream.flush()

    @property
    def rate(self) -> float:
        """Memories per second, up to the last write (closing the store is not import)."""
        return self.done / max(self._ended - self.started, 1e-9)


def load_file(path: str, max_content_chars: int) -> tuple[list[MemoryInput], list[BadRecord]]:
    """Read and validate the whole file first, so a bad record can stop the import early."""
    good: list[MemoryInput] = []
    bad: list[BadRecord] = []
    with open_input(path) as source:
        for _, item in read_inputs(source, max_content_chars=max_content_chars):
            (bad if isinstance(item, BadRecord) else good).append(item)  # type: ignore[arg-type]
    return good, bad


def open_input(path: str) -> ContextManager[IO[bytes]]:
    """The import's source: a file, or stdin (left open) for ``-``."""
    if path == "-":
        return nullcontext(sys.stdin.buffer)
    return open_file(path, "rb")


def open_output(path: str) -> ContextManager[IO[bytes]]:
    """The export's destination: a file, or stdout (left open) for ``-``."""
    if path == "-":
        return nullcontext(sys.stdout.buffer)
    return open_file(path, "wb")


def open_file(path: str, mode: str) -> IO[bytes]:
    """Open ``path``; a missing or unreadable file is one line, not a traceback."""
    try:
        return Path(path).open(mode)
    except OSError as exc:
        verb = "read" if "r" in mode else "write"
        raise FileProblem(f"cannot {verb} {path}: {exc.strerror or exc}") from exc


async def import_memories(args: argparse.Namespace, settings: Settings) -> int:
    """``memories import FILE``: validate every record, then write in batches."""
    tenant = resolve_tenant(settings, args.tenant, args.key, force=args.force)
    good, bad = load_file(args.file, settings.memory.max_content_chars)
    for record in bad[:MAX_REPORTED_ERRORS]:
        print(f"memproxy: {args.file}: {record.where}: {record.message}", file=sys.stderr)
    if len(bad) > MAX_REPORTED_ERRORS:
        print(f"memproxy: ... and {len(bad) - MAX_REPORTED_ERRORS} more", file=sys.stderr)
    if bad and not args.skip_invalid:
        print(
            f"memproxy: {len(bad)} invalid records; nothing imported "
            "(fix them, or pass --skip-invalid to import the valid ones)",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    async with open_service(settings) as service:
        # Timed from the first write: loading the model and opening the store are not import.
        progress = Progress(len(good), sys.stderr, enabled=not args.quiet)
        # The next batch is counted and embedded while this one is stored (same results).
        async for written in service.import_batches(tenant, batches(good, args.batch_size)):
            progress.advance(len(written))
    progress.finish()
    summary = {"imported": len(good), "skipped": len(bad), "tenant": tenant}
    summary["memories_per_s"] = round(progress.rate, 1)
    print(orjson.dumps(summary).decode())
    return 0


async def export_memories(args: argparse.Namespace, settings: Settings) -> int:
    """``memories export``: every memory of the tenant as JSONL (importable as is)."""
    tenant = resolve_tenant(settings, args.tenant, args.key, force=args.force)
    given = {"user": args.user, "source": args.source}
    scope = parse_list_query({name: value for name, value in given.items() if value is not None})
    count = 0
    with open_output(args.output) as out:
        async with open_service(settings) as service:
            after = None
            while True:
                page = await service.store.list(
                    tenant, user=scope.user, source=scope.source, limit=EXPORT_PAGE, after=after
                )
                out.writelines(export_line(r) for r in page.records)
                count += len(page.records)
                if not page.has_more:
                    break
                after = page.last_id
    print(f"memproxy: exported {count} memories of tenant {tenant}", file=sys.stderr)
    return 0


async def search_memories(args: argparse.Namespace, settings: Settings) -> int:
    """``memories search QUERY``: the closest memories, as a table or JSON."""
    tenant = resolve_tenant(settings, args.tenant, args.key, force=args.force)
    limits = InputLimits(settings.memory.max_content_chars)
    search = parse_search({"query": args.query, "user": args.user, "top_k": args.top_k}, limits)
    async with open_service(settings) as service:
        hits = await service.search(tenant, search.query, user=search.user, top_k=search.top_k)
    if args.json:
        print(
            orjson.dumps({"object": "list", "data": [search_hit_object(h) for h in hits]}).decode()
        )
        return 0
    for hit in hits:
        record = hit.record
        content = record.content.replace("\n", " ")
        print(f"{hit.similarity:.3f}  {record.id}  [{record.source}]  {content[:100]}")
    if not hits:
        print("no memories found", file=sys.stderr)
    return 0


async def explain_message(args: argparse.Namespace, settings: Settings) -> int:
    """``explain MESSAGE``: run the chat pipeline in explain mode, print what it would inject."""
    from proxy.apis.openai_chat import OPENAI_CHAT
    from proxy.app import create_app
    from proxy.tenancy import Tenant

    memory = replace(settings.memory, enabled=True, deadline_ms=CLI_DEADLINE_MS)
    memory = replace(
        memory,
        stage_timeouts=replace(
            memory.stage_timeouts, embed_ms=CLI_DEADLINE_MS, search_ms=CLI_DEADLINE_MS
        ),
    )
    settings = replace(settings, memory=memory)
    tenant_id = resolve_tenant(settings, args.tenant, args.key, force=args.force)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        services = app.state.services
        if services.memories is None:
            raise StoreLocked(locked_message(settings))
        tenant = Tenant(tenant_id, settings.memory)
        headers = Headers({"x-memory-mode": "explain", "x-memory-user": args.user})
        body = {"model": args.model, "messages": [{"role": "user", "content": args.message}]}
        prepared = await services.pipeline.prepare(tenant, headers, body, OPENAI_CHAT)
    if prepared.reply is None:
        raise StoreError("the memory pipeline did not answer in explain mode")
    document: dict[str, Any] = orjson.loads(bytes(prepared.reply.body))
    if args.json:
        print(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode())
        return 0
    budget = document.get("budget", {})
    print(
        f"model {document['model']}: {len(document['memories'])} of {document['candidates']} "
        f"candidate memories, budget {budget.get('memory_tokens', 0)} tokens"
    )
    for memory_item in document["memories"]:
        score = memory_item["score"]["composite"]
        print(f"  {score:.3f}  {memory_item['id']}  ({memory_item['tokens']} tokens)")
    print(document["block"] or "(nothing would be injected)")
    return 0


def run(command: Any) -> Any:
    """Wrap an async command as argparse's ``func``: settings, asyncio, clear errors."""

    def func(args: argparse.Namespace) -> int:
        settings = load_settings(args.config)
        try:
            code: int = asyncio.run(command(args, settings))
        except StoreLocked as exc:
            print(f"memproxy: {exc.message}", file=sys.stderr)
            return EXIT_LOCKED
        except ConfigError:
            raise
        except MemproxyError as exc:
            print(f"memproxy: {exc.message}", file=sys.stderr)
            return EXIT_BAD_INPUT
        return code

    return func


def add_common(parser: argparse.ArgumentParser) -> None:
    """``--config``, ``--tenant``, ``--key``."""
    parser.add_argument("--config", help="YAML config file (default: $MEMPROXY_CONFIG)")
    who = parser.add_mutually_exclusive_group()
    who.add_argument("--tenant", help="tenant id (keys mode: a configured tenant name)")
    who.add_argument("--key", help="act as the tenant of this API key")
    parser.add_argument(
        "--force",
        action="store_true",
        help="passthrough mode: use a --tenant no request can reach (not derived from a key)",
    )


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``memproxy memories import|export|search``."""
    parser = subparsers.add_parser("memories", help="import, export or search memories")
    commands = parser.add_subparsers(dest="memories_command", required=True, metavar="ACTION")
    importer = commands.add_parser("import", help="import a JSONL file or a JSON array")
    importer.add_argument("file", help="path, or - for stdin")
    importer.add_argument("--batch-size", type=int, default=DEFAULT_BATCH)
    importer.add_argument("--skip-invalid", action="store_true", help="import the valid records")
    importer.add_argument("--quiet", action="store_true", help="no progress bar")
    add_common(importer)
    importer.set_defaults(func=run(import_memories))
    exporter = commands.add_parser("export", help="write every memory as JSONL")
    exporter.add_argument("--output", "-o", default="-", help="file (default: stdout)")
    exporter.add_argument("--user", help="only this user's memories")
    exporter.add_argument("--source", help="only this source")
    add_common(exporter)
    exporter.set_defaults(func=run(export_memories))
    searcher = commands.add_parser("search", help="the memories closest to a query")
    searcher.add_argument("query")
    searcher.add_argument("--user", default="", help='end user ("" = tenant-shared only)')
    searcher.add_argument("--top-k", type=int, default=10)
    searcher.add_argument("--json", action="store_true")
    add_common(searcher)
    searcher.set_defaults(func=run(search_memories))


def register_explain(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``memproxy explain MESSAGE``."""
    parser = subparsers.add_parser("explain", help="print what would be injected for a message")
    parser.add_argument("message")
    parser.add_argument("--user", default="", help="end user whose memories are used")
    parser.add_argument("--model", default="gpt-4o", help="model (sets the token budget)")
    parser.add_argument("--json", action="store_true", help="the full explain document")
    add_common(parser)
    parser.set_defaults(func=run(explain_message))
