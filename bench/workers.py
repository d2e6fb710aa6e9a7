"""Does memory scale with workers? ``memproxy serve`` with 1 and with 2 workers, memory on.

The servers run at once on the embedded store (no Qdrant server), each on its own copy of one
data dir seeded with real-text memories (``bench/lib/realtext.py``: LoCoMo turns, observations
and summaries, scaled up by its generator) for one user and closed once its index build ended
(``wait_for_builds``; each tree's store is printed: points, and those outside the graph),
in front of one fake
upstream. ``wrk`` loads them at concurrency 50, interleaved: each round runs one cell per
server, the order rotating between rounds, so drift from other work on the machine falls on all
alike. Every request asks a new LoCoMo question; every server in a round gets the same questions
(one Lua table of unused questions per round, so no cache answers for the memory path);
``repeats`` counts requests past the end of that table.

A/B in one run: each ``--variant-config`` YAML (merged over the bench's config), each
``--search-threads`` value and a ``--baseline-tree`` (another commit's source, served as
``@base``) adds a 1-worker and a 2-worker server beside the default pair, every cell
interleaved. Reported per round and as medians of the per-round
figures: each pair's 2-worker/1-worker ratio, each variant's rate over the default's at the
same worker count, and each variant's 2 workers over the default's 1 worker (what the ratio
would be if the variant were the default for several workers only).

Memory on means memory served: at c=50 the default 50 ms memory deadline is passed by nearly
every request while 50 wait for a core, and a request past it goes without memories
(``degraded``), so the servers run with a deadline and stage timeouts of ``DEADLINE_MS`` and the
rate counts only responses with ``X-Memory-Status: injected`` or ``empty`` (the memory stage ran
to the end; the rest are reported).

Reported per round and pooled: memory-on requests/s of each server, the ratios, and where the
CPU went per request: each server's event-loop threads, its other Python threads, the search
engine's own threads (``edge-search-*``), the fake upstream and wrk. The upstream (aiohttp) and
wrk (C) run on the same 2 cores; their CPU per request is printed so their share of the
2-worker rate can be read off (docs/benchmarks.md). ``idle`` is the cores the whole machine left
idle in the middle of a cell (its first and last ``IDLE_SETTLE_S`` left out: wrk loading its
script, opening and closing its connections leaves the cores idle around every cell, which is no
wait of the server's): a server short of the cores with none idle lost them to other work on the
machine, not to waiting.

Target (issue 14): memory-on throughput at c=50 with 2 workers >= 1.7x one worker, in one run,
on a 2-core machine.

    .venv/bin/python bench/workers.py                 # 10k memories, 5 rounds of 8 s (~3 min)
    .venv/bin/python bench/workers.py --rounds 9 --seconds 10
    .venv/bin/python bench/workers.py --search-threads 1,2,8   # A/B each process's search pool
    .venv/bin/python bench/workers.py --variant-config counts.yaml  # A/B any setting
    .venv/bin/python bench/workers.py --baseline-tree /tmp/main-tree  # A/B another commit
    .venv/bin/python bench/workers.py --capture       # every chat writes its turn
    .venv/bin/python bench/workers.py --smoke         # seconds, for CI
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import qdrant_edge as qe
import yaml

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib import memories, realtext, stats
from bench.lib.loadgen import ENGINE_THREAD
from bench.lib.report import machine_info, save_results
from bench.lib.servers import ServerProcess, fake_upstream, memproxy, served_from
from proxy.memory.edge import SHARD_DIR
from proxy.memory.edge_maintenance import unindexed_points

CLK_TCK = os.sysconf("SC_CLK_TCK")
CONCURRENCY = 50
TARGET_RATIO = 1.7
USER = "bench-user"
AUTH = {"Authorization": "Bearer sk-bench-workers"}
QUESTIONS_PER_SECOND = 800  # Lua table size per cell second: above any rate seen on 2 cores
CHAT_PATH = "/v1/chat/completions"
CHECK_TRIES = 10
WRK_TIMEOUT = "10s"
# The cell's first and last this many seconds are left out of ``idle`` (see the docstring):
# measured, wrk took 0.1-0.2 s beyond its duration with a cell's script, both cores idle.
IDLE_SETTLE_S = 1.0
# Long enough that no request waiting for a core at c=50 goes without memory (see the docstring).
DEADLINE_MS = 10_000
SERVER_CONFIG = f"""memory:
  deadline_ms: {DEADLINE_MS}
  stage_timeouts:
    embed_ms: {DEADLINE_MS}
    search_ms: {DEADLINE_MS}
"""
CPU_PARTS = ("loop", "threads", "engine", "upstream", "wrk")
# A seeder's index build (a child running this module, adr/0153) is waited for before the
# seeder stops: stopped mid-build, its store keeps every point outside the graph.
BUILD_MODULE = "proxy.memory.edge_build"
# No build seen for this long: none is left to start (a write starts one at once).
BUILD_QUIET_S = 1.0
# A build longer than this fails the run: 10k memories built in seconds on a loaded machine.
BUILD_WAIT_S = 300.0

WRK_SCRIPT = """
wrk.method = "POST"
{headers}
bodies = {{{bodies}}}
n = 0
injected = 0
threads = {{}}
setup = function(thread) table.insert(threads, thread) end
request = function()
  n = n + 1
  return wrk.format(nil, nil, nil, bodies[((n - 1) % #bodies) + 1])
end
response = function(status, headers, body)
  local memory = headers["x-memory-status"]
  if status == 200 and (memory == "injected" or memory == "empty") then
    injected = injected + 1
  end
end
done = function(summary, latency, requests)
  local with_memory = 0
  for _, thread in ipairs(threads) do with_memory = with_memory + thread:get("injected") end
  io.write(string.format('WRK_JSON {{"requests": %d, "errors": %d, "seconds": %f, ' ..
    '"p50": %f, "p99": %f, "injected": %d}}\\n', summary.requests, summary.errors.status +
    summary.errors.connect + summary.errors.read + summary.errors.write +
    summary.errors.timeout, summary.duration / 1e6, latency:percentile(50) / 1000,
    latency:percentile(99) / 1000, with_memory))
end
"""


@dataclass
class Cell:
    """One wrk run against one server."""

    requests: int
    errors: int
    injected: int
    seconds: float
    p50_ms: float
    p99_ms: float
    cpu_s: dict[str, float]  # CPU_PARTS -> CPU seconds during the cell
    repeats: int
    # Per worker process (the supervisor left out), most first: the client connections it held
    # halfway through the cell and the CPU seconds it used. With several workers the kernel
    # hands each new connection to whichever worker accepts first, and wrk keeps its 50 for the
    # whole cell: an uneven split leaves one worker short of work.
    conns: tuple[int, ...] = ()
    worker_cpu_s: tuple[float, ...] = ()
    # CPU seconds the whole machine left idle in the middle of the cell (``/proc/stat``), over
    # ``idle_window_s`` seconds: the cores the server did not use were idle, or taken by other
    # work on the machine.
    idle_s: float = 0.0
    idle_window_s: float = 0.0

    @property
    def idle_cores(self) -> float:
        """Cores the machine left idle in the middle of the cell."""
        return stats.ratio(self.idle_s, self.idle_window_s)

    @property
    def rps(self) -> float:
        """Memory-on requests per second: responses whose memory stage ran to the end
        (``injected``, or ``empty``: nothing worth its tokens)."""
        return stats.ratio(self.injected, self.seconds)

    def cpu_ms(self, *parts: str) -> float:
        """CPU milliseconds per memory-on request of ``parts`` (all of them if none named)."""
        spent = sum(self.cpu_s[part] for part in parts or CPU_PARTS)
        return stats.ratio(spent * 1000, self.injected)

    @property
    def server_cpu_ms(self) -> float:
        """The server's CPU milliseconds per memory-on request (supervisor and workers)."""
        return self.cpu_ms("loop", "threads", "engine")


def _stat_fields(stat: Path) -> tuple[str, list[str]]:
    """A ``/proc`` stat file's command name and the fields after it."""
    text = stat.read_text()
    return text[text.index("(") + 1 : text.rindex(")")], text.rsplit(")", 1)[1].split()


def family(pid: int) -> set[int]:
    """``pid`` and every live descendant (a server's supervisor and its workers)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(_stat_fields(entry / "stat")[1][1])
            except (OSError, ValueError):
                continue
    members, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, ppid in parents.items() if ppid == parent]
        members.update(children)
        frontier.extend(children)
    return members


def thread_cpu_s(pids: set[int]) -> dict[str, float]:
    """CPU seconds (user + system) of the threads of ``pids`` by kind: each process's main
    thread (the event loop), the search engine's threads, and its other (Python) threads."""
    spent = {"loop": 0.0, "threads": 0.0, "engine": 0.0}
    for pid in pids:
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                name, fields = _stat_fields(task / "stat")
            except OSError:
                continue
            if int(task.name) == pid:
                kind = "loop"
            else:
                kind = "engine" if name.startswith(ENGINE_THREAD) else "threads"
            spent[kind] += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return spent


def machine_idle_s() -> float:
    """CPU seconds all cores have been idle since boot (``/proc/stat``; 0 without it)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return 0.0
    return (int(fields[4]) + int(fields[5])) / CLK_TCK  # idle and iowait


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` so far, all its threads (0 once gone)."""
    try:
        fields = _stat_fields(Path(f"/proc/{pid}/stat"))[1]
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def worker_pids(server: ServerProcess) -> list[int]:
    """The processes serving requests: the server itself, or with several workers its
    children that hold the listening socket (not the supervisor's other helpers)."""
    assert server.pid is not None
    workers = sorted(family(server.pid) - {server.pid})
    serving = [pid for pid in workers if listening(pid, server.port)]
    return serving or [server.pid]


def listening(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a socket listening on TCP ``port`` (from ``/proc``)."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return True
    return False


def connections(pids: Sequence[int], port: int) -> tuple[int, ...]:
    """Established client connections to ``port`` held by each of ``pids`` (``ss``; empty
    without it)."""
    exe = shutil.which("ss")
    if exe is None:
        return ()
    argv = [exe, "-tnpH", "state", "established", f"( sport = :{port} )"]
    out = subprocess.run(argv, capture_output=True, text=True, check=False).stdout
    return tuple(out.count(f"pid={pid},") for pid in pids)


def children_cpu_s() -> float:
    """CPU seconds of this process's waited-for children (each wrk run)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def all_cpu_s(server: ServerProcess, upstream: ServerProcess) -> dict[str, float]:
    """CPU seconds so far of the server's threads by kind, the upstream and wrk."""
    assert server.pid is not None
    assert upstream.pid is not None
    spent = thread_cpu_s(family(server.pid))
    spent["upstream"] = sum(thread_cpu_s({upstream.pid}).values())
    spent["wrk"] = children_cpu_s()
    return spent


def chat_body(question: str) -> str:
    """A chat request asking ``question``."""
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": question},
    ]
    return json.dumps({"model": "fake-model", "messages": messages})


def wrk_script(questions: Iterator[str], seconds: float, directory: Path) -> tuple[Path, int]:
    """A wrk script asking the next questions of ``questions``, enough for ``seconds`` (every
    server of a round gets this one: the same questions), and how many it holds."""
    count = max(200, int(QUESTIONS_PER_SECOND * seconds))
    bodies = ",".join(json.dumps(chat_body(next(questions))) for _ in range(count))
    headers = {"Content-Type": "application/json", "X-Memory-User": USER, **AUTH}
    lua_headers = "\n".join(
        f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in headers.items()
    )
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False, dir=directory) as handle:
        handle.write(WRK_SCRIPT.format(headers=lua_headers, bodies=bodies))
    return Path(handle.name), count


def run_wrk(
    server: ServerProcess, upstream: ServerProcess, script: tuple[Path, int], seconds: float
) -> Cell:
    """Load ``server`` with wrk for ``seconds`` running ``script`` (``wrk_script``)."""
    exe = shutil.which("wrk")
    if exe is None:
        raise SystemExit("wrk not found: apt-get install -y wrk")
    path, count = script
    argv = [exe, "-t", "1", "-c", str(CONCURRENCY), "-d", f"{max(1, round(seconds))}s"]
    argv += ["--timeout", WRK_TIMEOUT]  # wrk's 2 s default counts a loaded machine's tail
    argv += ["-s", str(path), server.base_url + CHAT_PATH]
    pids = worker_pids(server)
    before = all_cpu_s(server, upstream)
    before_workers = [process_cpu_s(pid) for pid in pids]
    settle = min(IDLE_SETTLE_S, seconds / 4)
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as wrk:
        started = time.monotonic()
        time.sleep(settle)
        idle_before, window_from = machine_idle_s(), time.monotonic()
        time.sleep(max(0.0, started + seconds / 2 - time.monotonic()))
        conns = connections(pids, server.port)
        time.sleep(max(0.0, started + seconds - settle - time.monotonic()))
        idle, window = machine_idle_s() - idle_before, time.monotonic() - window_from
        out, _ = wrk.communicate()
    if wrk.returncode:
        raise subprocess.CalledProcessError(wrk.returncode, argv, out)
    after = all_cpu_s(server, upstream)
    worker_cpu = [
        process_cpu_s(pid) - spent for pid, spent in zip(pids, before_workers, strict=True)
    ]
    line = next(x for x in out.splitlines() if x.startswith("WRK_JSON "))
    data = json.loads(line[len("WRK_JSON ") :])
    return Cell(
        requests=int(data["requests"]),
        errors=int(data["errors"]),
        injected=int(data["injected"]),
        seconds=float(data["seconds"]),
        p50_ms=float(data["p50"]),
        p99_ms=float(data["p99"]),
        cpu_s={part: after[part] - before[part] for part in CPU_PARTS},
        repeats=max(0, int(data["requests"]) - count),
        conns=tuple(sorted(conns, reverse=True)),
        worker_cpu_s=tuple(sorted(worker_cpu, reverse=True)),
        idle_s=idle,
        idle_window_s=window,
    )


def memory_items(count: int) -> tuple[list[dict[str, Any]], Iterator[str], str]:
    """The memories to seed, the question stream and what the data is."""
    if realtext.available():
        text = realtext.RealText()
        return text.memories(count, USER), text.questions(), "LoCoMo real text"
    # Without the LoCoMo data (a fresh clone): template memories, numbered questions.
    numbered = (f"What did I say about {t} ({n})?" for n in range(10**9) for t in ("trips",))
    return memories.synthetic_memories(count, USER), numbered, "templates (no LoCoMo data)"


def check_memory_on(server: ServerProcess) -> str:
    """Fail unless a chat through ``server`` got memory (not degraded, not empty)."""
    import httpx

    headers = {**AUTH, "X-Memory-User": USER}
    body = json.loads(chat_body("What do you remember about me?"))
    seen = []
    # The first searches after seeding may miss their deadline (cold pages): a few tries.
    for _ in range(CHECK_TRIES):
        response = httpx.post(server.base_url + CHAT_PATH, json=body, headers=headers, timeout=30)
        status = response.headers.get("x-memory-status", "")
        if response.status_code == 200 and status == "injected":
            return status
        timing = response.headers.get("server-timing", "")
        seen.append(f"{response.status_code} {status} ({timing})")
        time.sleep(1.0)
    raise SystemExit(f"memory is not on for {server.name}: {seen}")


def pooled(cells: Sequence[Cell]) -> Cell:
    """The cells of one server as one: counts, seconds and CPU summed."""
    return Cell(
        requests=sum(c.requests for c in cells),
        errors=sum(c.errors for c in cells),
        injected=sum(c.injected for c in cells),
        seconds=sum(c.seconds for c in cells),
        p50_ms=stats.percentile([c.p50_ms for c in cells], 50),
        p99_ms=max(c.p99_ms for c in cells),
        cpu_s={part: sum(c.cpu_s[part] for c in cells) for part in CPU_PARTS},
        repeats=sum(c.repeats for c in cells),
        worker_cpu_s=(sum(sum(c.worker_cpu_s) for c in cells),),
        idle_s=sum(c.idle_s for c in cells),
        idle_window_s=sum(c.idle_window_s for c in cells),
    )


def cpu_rows(cells: dict[str, Cell]) -> list[dict[str, Any]]:
    """Per server: CPU ms per memory-on request by part, and the cores each part used."""
    rows = []
    for name, cell in cells.items():
        row: dict[str, Any] = {"server": name}
        row.update({f"{part}_ms": round(cell.cpu_ms(part), 3) for part in CPU_PARTS})
        row["server_ms"] = round(cell.server_cpu_ms, 2)
        # What the server's processes other than its workers used: with several workers the
        # supervisor folding the write log into the primary (adr/0120); ~0 with one.
        workers_ms = stats.ratio(sum(cell.worker_cpu_s) * 1000, cell.injected)
        row["supervisor_ms"] = round(max(0.0, cell.server_cpu_ms - workers_ms), 3)
        row["all_ms"] = round(cell.cpu_ms(), 2)
        row["server_cores"] = round(stats.ratio(cell.server_cpu_ms * cell.rps, 1000), 2)
        row["all_cores"] = round(stats.ratio(cell.cpu_ms() * cell.rps, 1000), 2)
        row["idle_cores"] = round(cell.idle_cores, 2)
        rows.append(row)
    return rows


@dataclass(frozen=True)
class Variant:
    """A configuration served by one 1-worker and one N-worker server: its name (``""`` for
    the bench's default) and the settings merged over the bench's config."""

    name: str
    overrides: dict[str, Any]
    tree: Path | None = None  # another source tree to serve from (``--baseline-tree``)


@dataclass(frozen=True)
class Server:
    """One server of the run: its name, its variant and its workers."""

    name: str
    variant: Variant
    workers: int


def merged(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` laid over it, mappings merged key by key."""
    out = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def variants(
    configs: Sequence[Path], search_threads: Sequence[str], baseline: Path | None = None
) -> list[Variant]:
    """The default, then one variant per config file, per ``store.search_threads`` value and
    for the ``baseline`` source tree (named ``@base``)."""
    out = [Variant("", {})]
    for path in configs:
        overrides = yaml.safe_load(path.read_text()) or {}
        if not isinstance(overrides, dict):
            raise SystemExit(f"{path}: a YAML mapping of settings expected")
        out.append(Variant(f"+{path.stem}", overrides))
    for value in search_threads:
        threads: int | str = int(value) if value.isdigit() else value
        out.append(Variant(f"+threads-{value}", {"store": {"search_threads": threads}}))
    if baseline is not None:
        out.append(Variant("@base", {}, baseline))
    names = [v.name for v in out]
    if len(set(names)) != len(names):
        raise SystemExit(f"variant names repeat: {names}")
    return out


def servers_of(variant_list: Sequence[Variant], workers: int) -> list[Server]:
    """A 1-worker and a ``workers``-worker server per variant."""
    return [
        Server(f"workers-{count}{variant.name}", variant, count)
        for variant in variant_list
        for count in (1, workers)
    ]


def round_order(names: Sequence[str], round_no: int) -> list[str]:
    """The cells' order in round ``round_no`` (from 0): rotated by one each round, so every
    server runs in every position as often as the rounds allow."""
    shift = round_no % len(names)
    return [*names[shift:], *names[:shift]]


def ratio_columns(variant_list: Sequence[Variant], workers: int) -> dict[str, tuple[str, str]]:
    """The ratios to report, each as (numerator server, denominator server): every variant's
    N workers over its 1 worker; and for each non-default variant, its rate over the default's
    at 1 and at N workers, and its N workers over the default's 1 worker."""
    one, many = "workers-1", f"workers-{workers}"
    columns = {f"{workers}/1{v.name}": (many + v.name, one + v.name) for v in variant_list}
    for v in variant_list[1:]:
        columns[f"1{v.name}/1"] = (one + v.name, one)
        columns[f"{workers}{v.name}/{workers}"] = (many + v.name, many)
        columns[f"{workers}{v.name}/1"] = (many + v.name, one)
    return columns


def ratio_rows(
    cells: dict[str, list[Cell]], columns: dict[str, tuple[str, str]]
) -> list[dict[str, Any]]:
    """Per round the ``columns``' memory-on rate ratios, then their medians over the rounds."""
    rounds = len(next(iter(cells.values())))
    rows: list[dict[str, Any]] = []
    for round_no in range(rounds):
        row: dict[str, Any] = {"round": round_no + 1}
        for column, (top, bottom) in columns.items():
            row[column] = round(
                stats.ratio(cells[top][round_no].rps, cells[bottom][round_no].rps), 2
            )
        rows.append(row)
    median: dict[str, Any] = {"round": "median"}
    for column in columns:
        median[column] = round(stats.percentile([row[column] for row in rows], 50), 2)
    return [*rows, median]


def cell_rows(cells: dict[str, list[Cell]]) -> list[dict[str, Any]]:
    """One row per round and server: memory-on rate, server CPU per request, cores, p99."""
    rows = []
    for name, series in cells.items():
        for round_no, cell in enumerate(series):
            rows.append(
                {
                    "round": round_no + 1,
                    "server": name,
                    "rps": round(cell.rps),
                    "cpu_ms": round(cell.server_cpu_ms, 2),
                    "engine_ms": round(cell.cpu_ms("engine"), 2),
                    # Cores the server's processes used: below what the machine has means the
                    # server was not what limited the rate (other work on the cores was).
                    "cores": round(stats.ratio(cell.server_cpu_ms * cell.rps, 1000), 2),
                    # Cores the machine left idle: with ``cores`` short of the machine's and
                    # none idle, other work took them; idle ones mean the server waited.
                    "idle": round(cell.idle_cores, 2),
                    "p99_ms": round(cell.p99_ms),
                    "conns": "/".join(map(str, cell.conns)),
                    "worker_cores": "/".join(
                        f"{stats.ratio(spent, cell.seconds):.2f}" for spent in cell.worker_cpu_s
                    ),
                }
            )
    return sorted(rows, key=lambda row: row["round"])


def build_in_flight(pid: int, data_dir: Path) -> bool:
    """Whether the server ``pid`` serving the store under ``data_dir`` is building its index:
    a child of its family runs ``BUILD_MODULE`` (from its start to its exit), or a generation
    of the shard other than the one its link names is on disk (from the build's copy until the
    swap drops the old one, or the failed build drops its copy; ``edge_shard``)."""
    for member in family(pid) - {pid}:
        try:
            argv = Path(f"/proc/{member}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if BUILD_MODULE.encode() in argv:
            return True
    shard = data_dir / SHARD_DIR
    current = shard.resolve()
    return any(other.resolve() != current for other in data_dir.glob(f"{SHARD_DIR}.g*"))


def wait_for_builds(
    pid: int,
    data_dir: Path,
    timeout_s: float = BUILD_WAIT_S,
    quiet_s: float = BUILD_QUIET_S,
    poll_s: float = 0.1,
) -> float:
    """Wait until the server ``pid`` has no index build in flight on the store under
    ``data_dir`` and has started none for ``quiet_s``; the seconds waited. Past ``timeout_s``
    ``RuntimeError``: a store cut short would be measured as another layout."""
    started = time.monotonic()
    quiet_from = started
    while True:
        now = time.monotonic()
        if build_in_flight(pid, data_dir):
            quiet_from = now
        elif now - quiet_from >= quiet_s:
            return now - started
        if now - started > timeout_s:
            raise RuntimeError(
                f"the seeder's index build under {data_dir} still runs after {timeout_s:.0f} s"
            )
        time.sleep(poll_s)


def store_layout(data_dir: Path) -> tuple[int, int]:
    """The points of the store seeded under ``data_dir`` and how many of them are outside the
    HNSW graph (searched by exact scan): each tree's seeding builds the index by its own rule
    (adr/0124), so two trees' stores can differ here, and with them the engine's CPU per
    search. Read from a copy: loading a shard may rewrite its files."""
    with tempfile.TemporaryDirectory(prefix="mp-wi-") as scratch:
        copy = Path(scratch) / SHARD_DIR
        shutil.copytree(data_dir / SHARD_DIR, copy)
        shard = qe.EdgeShard.load(str(copy), None)
        try:
            return shard.info().points_count, unindexed_points(shard)
        finally:
            shard.close()


def start_servers(
    stack: ExitStack,
    upstream: ServerProcess,
    servers: Sequence[Server],
    items: list[dict[str, Any]],
    info: dict[str, Any],
    capture: bool = False,
) -> dict[str, ServerProcess]:
    """One memproxy per server with the bench's config and its variant's, each on its own copy
    of one data dir seeded with ``items`` through the memories API and then closed, once the
    seeder's index build is done (``wait_for_builds``): all start
    from the same files, as a server restarted on its store does. (Measured: right after a bulk
    import, before a restart, the engine's threads spent 3.2-3.5 ms per search against 1.4 ms
    once the same store was reopened; the bench measures the steady state, not the import's
    aftermath.)"""
    configs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mp-wc-")))
    base = yaml.safe_load(SERVER_CONFIG)
    if capture:  # every chat writes its turn: each worker's replica takes the writes
        base["memory"]["capture"] = "turn"

    def config_env(variant: Variant) -> dict[str, str]:
        path = configs / f"m{variant.name}.yaml"
        path.write_text(yaml.safe_dump(merged(base, variant.overrides)))
        return {"MEMPROXY_CONFIG": str(path)}

    # One seeded store per source tree, written by that tree's own code: a store's format can
    # be newer than an older tree reads (adr/0139's 64-bit point ids), so a baseline tree
    # serves a copy of the store it seeded itself.
    seeded: dict[Path | None, Path] = {}
    for tree in dict.fromkeys(spec.variant.tree for spec in servers):
        target = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mp-ws-"))) / "data"
        seeder = memproxy(upstream.base_url + "/v1", target, extra_env=config_env(Variant("", {})))
        if tree is not None:
            seeder = served_from(seeder, tree, "seeder@base")
        with seeder:
            seconds = round(memories.seed_memories(seeder.base_url, items, AUTH), 1)
            # Stopped mid-build, the store would keep every point outside the graph: each
            # tree serves the layout its code reaches at rest, not one the timing picked.
            assert seeder.pid is not None
            waited = round(wait_for_builds(seeder.pid, target), 1)
        suffix = "" if tree is None else "_base"
        info[f"seed{suffix}_s"] = seconds
        info[f"seed_build_wait{suffix}_s"] = waited
        info[f"points{suffix}"], info[f"unindexed{suffix}"] = store_layout(target)
        seeded[tree] = target
    running: dict[str, ServerProcess] = {}
    for spec in servers:
        data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mp-w-"))) / "d"
        shutil.copytree(seeded[spec.variant.tree], data_dir)
        env = config_env(spec.variant)
        server = memproxy(upstream.base_url + "/v1", data_dir, workers=spec.workers, extra_env=env)
        if spec.variant.tree is not None:
            server = served_from(server, spec.variant.tree, spec.name)
        server.name = spec.name
        started = time.perf_counter()
        stack.enter_context(server)
        info[f"{spec.name}_ready_s"] = round(time.perf_counter() - started, 1)
        info[f"{spec.name}_memory_status"] = check_memory_on(server)
        running[spec.name] = server
        print(f"{spec.name} ready, {len(items)} memories", file=sys.stderr)
    return running


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--workers", type=int, default=2, help="workers of the scaled server")
    parser.add_argument(
        "--search-threads",
        default="",
        help="comma-separated store.search_threads values, each a variant (e.g. 1,2,auto,8)",
    )
    parser.add_argument(
        "--variant-config",
        type=Path,
        action="append",
        default=[],
        metavar="YAML",
        help="settings merged over the bench's config: a 1- and an N-worker server more",
    )
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        help="also a 1- and an N-worker server run from this source tree (git archive): @base",
    )
    parser.add_argument(
        "--capture",
        action="store_true",
        help="every server captures each chat's turn (memory.capture: turn): steady writes",
    )
    parser.add_argument("--smoke", action="store_true", help="a few seconds, for CI")
    args = parser.parse_args(argv)
    if args.smoke:
        args.memories, args.rounds, args.seconds = 300, 1, 1.0
    threads = [value.strip() for value in args.search_threads.split(",") if value.strip()]
    variant_list = variants(args.variant_config, threads, args.baseline_tree)
    specs = servers_of(variant_list, args.workers)
    names = [spec.name for spec in specs]
    items, questions, data = memory_items(args.memories)
    cells: dict[str, list[Cell]] = {name: [] for name in names}
    info: dict[str, Any] = {"memories": args.memories, "data": data, "c": CONCURRENCY}
    info["capture"] = args.capture
    info["variants"] = {v.name or "default": v.overrides for v in variant_list}
    with ExitStack() as stack:
        upstream = stack.enter_context(fake_upstream())
        servers = start_servers(stack, upstream, specs, items, info, args.capture)
        scripts = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mp-wl-")))
        # Warm-up: connections, lazy imports, caches of the fixed prompt.
        warm = wrk_script(questions, 1.0, scripts)
        for name in names:
            run_wrk(servers[name], upstream, warm, 1.0)
        for round_no in range(args.rounds):
            script = wrk_script(questions, args.seconds, scripts)  # the same for every server
            for name in round_order(names, round_no):
                cell = run_wrk(servers[name], upstream, script, args.seconds)
                cells[name].append(cell)
                print(
                    f"  round {round_no + 1}/{args.rounds} {name:<24} {cell.rps:7.0f} req/s "
                    f"server cpu {cell.server_cpu_ms:5.2f} ms/req",
                    file=sys.stderr,
                )
    columns = ratio_columns(variant_list, args.workers)
    ratios = ratio_rows(cells, columns)
    total = {name: pooled(cs) for name, cs in cells.items()}
    one, many = total[names[0]], total[names[1]]
    ratio = stats.ratio(many.rps, one.rps)
    cpu_ratio = stats.ratio(many.server_cpu_ms, one.server_cpu_ms)
    errors = sum(c.errors for c in total.values())
    without = sum(c.requests - c.errors - c.injected for c in total.values())
    repeats = sum(c.repeats for c in total.values())
    print(stats.format_table(cell_rows(cells)))
    print(
        "\nMemory-on rate ratios per round (N/1: N workers over 1 worker of one config; "
        "+v/default: a variant over the default):"
    )
    print(stats.format_table(ratios))
    print("\nCPU per memory-on request, pooled (ms; loop = event-loop threads, threads = other")
    print(
        "Python threads, engine = the search engine's threads; upstream and wrk share the cores):"
    )
    print(stats.format_table(cpu_rows(total)))
    verdict = "met" if ratio >= TARGET_RATIO else "NOT met"
    median = ratios[-1][f"{args.workers}/1"]
    print(
        f"\ndefault, pooled: {one.rps:.0f} vs {many.rps:.0f} memory-on req/s, ratio {ratio:.2f}, "
        f"median of rounds {median:.2f} (target >= {TARGET_RATIO}: {verdict})\n"
        f"server CPU per request: {one.server_cpu_ms:.2f} ms (1 worker) vs "
        f"{many.server_cpu_ms:.2f} ms ({args.workers} workers), ratio {cpu_ratio:.2f}\n"
        f"errors {errors}; answered without memory {without}; repeated questions {repeats}"
    )
    for suffix, label in (("", "this tree"), ("_base", "@base")):
        if f"points{suffix}" in info:
            print(
                f"seeded store ({label}): {info[f'points{suffix}']} points, "
                f"{info[f'unindexed{suffix}']} outside the graph, seeded in "
                f"{info[f'seed{suffix}_s']} s, its index build waited for "
                f"{info[f'seed_build_wait{suffix}_s']} s"
            )
    print("Measure on a quiet machine: other work on the cores moves the ratio between runs.")
    if not args.smoke:
        save_results(
            "workers",
            {
                "machine": machine_info(),
                "info": info,
                "cells": cell_rows(cells),
                "ratios": ratios,
                "cpu": cpu_rows(total),
                "pooled_rps": {name: cell.rps for name, cell in total.items()},
                "ratio": ratio,
                "median_ratio": median,
                "cpu_ratio": cpu_ratio,
                "without_memory": without,
            },
        )
    if args.smoke and (errors or without):  # a smoke run's few requests must all get memory
        raise SystemExit(f"{errors} requests failed, {without} answered without memory")


if __name__ == "__main__":
    main()
