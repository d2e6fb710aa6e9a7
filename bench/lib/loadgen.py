"""Closed-loop HTTP load for chat completions: an aiohttp engine plus ``hey`` and ``wrk`` wrappers.

On a 2-core machine the load generator competes with the server under test for CPU, so the
engine matters (see ``python bench/lib/loadgen.py --compare`` and docs/benchmarks.md, "The
load generator"). The aiohttp engine is the only one that measures time to first chunk of a
streamed answer; hey gives every request's latency (CSV), wrk only its own percentiles.

Targets are interleaved: each round runs every (target, concurrency, stream) cell for a few
seconds, and the target order rotates between rounds, so drift from other work on the machine
falls on all targets alike; ``balanced`` runs every target in every position each round
(``cell_plan``). Raw samples of all rounds are pooled before percentiles are taken.
"""

from __future__ import annotations

import asyncio
import csv
import io
import itertools
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.lib import stats

CHAT_PATH = "/v1/chat/completions"
DEFAULT_MODEL = "fake-model"
WARMUP_S = 0.5
ENGINES = ("aiohttp", "hey", "wrk")
QUESTIONS = (
    "What did I tell you about my trip to {place}?",
    "Remind me what {person} said about {topic}.",
    "Which {topic} options did we discuss for the {place} project?",
    "Summarize what you know about {person} and {topic}.",
)
PLACES = ("Lisbon", "Osaka", "Nairobi", "Oslo", "Lima", "Toronto")
PEOPLE = ("Ana", "Ben", "Chloe", "Dev", "Elif", "Femi")
TOPICS = ("the budget", "hotels", "the deadline", "vegetarian food", "Python", "the report")
# ``settled_cpu``: a server is idle once it used under a tenth of a core for a poll.
SETTLE_POLL_S = 0.1
SETTLED_SHARE = 0.1
SETTLE_MAX_S = 30.0
ENGINE_THREAD = "edge-search"  # qdrant-edge names its search pool's threads edge-search-<n>
UNIQUE_STRIDE = 10_000_000  # request numbers reserved per cell (no cell sends that many)
# A request body, or a function of the request number returning one (unique queries).
Body = bytes | Callable[[int], bytes]


@dataclass(frozen=True)
class Target:
    """A server to load: its base URL (no /v1) and the headers every request carries."""

    name: str
    base_url: str
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Sample:
    """Raw outcome of one or more runs against one cell; ``merge`` pools rounds."""

    latencies: list[float] = field(default_factory=list)  # seconds, successful requests
    ttfc: list[float] = field(default_factory=list)  # seconds to first body chunk (stream)
    errors: int = 0
    elapsed: float = 0.0  # wall seconds under load
    cpu: float = 0.0  # load generator CPU seconds
    # The served process's CPU seconds for the cell, its after-response work included
    # (``run_interleaved``'s ``server_cpu``: it waits for the process to settle).
    server_cpu: float = 0.0
    # Of that, the embedded store's search pool threads' (``run_interleaved``'s ``engine_cpu``):
    # 0 where the engine searches on the calling thread (a pool of one, adr/0186).
    engine_cpu: float = 0.0
    percentiles_ms: dict[str, float] | None = None  # engines without raw samples (wrk)
    counted: int = 0  # successful requests of engines without raw samples
    # X-Memory-Status of memproxy's answers (aiohttp engine): shows degraded or empty memory.
    memory_status: dict[str, int] = field(default_factory=dict)
    # memproxy's Server-Timing stages, ms per answer (aiohttp engine): where the time went.
    stages_ms: dict[str, list[float]] = field(default_factory=dict)
    # Per answer with a ``memory`` stage: its latency minus that stage, ms (aiohttp engine).
    # Its p50 against memory off's is the time outside the stage request by request; the
    # difference of the two latency p50s minus the stage's p50 also holds how the stage's
    # spread shifts the sum's median.
    outside_ms: list[float] = field(default_factory=list)

    @property
    def requests(self) -> int:
        """Return the number of successful requests."""
        return len(self.latencies) if self.percentiles_ms is None else self.counted

    def merge(self, other: Sample) -> None:
        """Pool ``other`` into this sample."""
        self.latencies += other.latencies
        self.ttfc += other.ttfc
        self.errors += other.errors
        self.elapsed += other.elapsed
        self.cpu += other.cpu
        self.server_cpu += other.server_cpu
        self.engine_cpu += other.engine_cpu
        for status, count in other.memory_status.items():
            self.memory_status[status] = self.memory_status.get(status, 0) + count
        for stage, values in other.stages_ms.items():
            self.stages_ms.setdefault(stage, []).extend(values)
        self.outside_ms += other.outside_ms
        if other.percentiles_ms is not None:
            # wrk gives no raw samples: keep the worst round's percentiles (conservative).
            mine = self.percentiles_ms or {}
            self.percentiles_ms = {
                k: max(v, mine.get(k, 0.0)) for k, v in other.percentiles_ms.items()
            }
            self.counted += other.counted

    def summary(self) -> dict[str, float]:
        """Return rps, latency percentiles (ms), ttfc percentiles (ms), errors, cpu per 1k req."""
        lat = self.percentiles_ms or stats.summarize_ms(self.latencies)
        ttfc = stats.summarize_ms(self.ttfc)
        n = self.requests
        return {
            "requests": float(n),
            "errors": float(self.errors),
            "rps": stats.ratio(n, self.elapsed),
            "p50_ms": lat["p50"],
            "p99_ms": lat["p99"],
            "ttfc_p50_ms": ttfc["p50"],
            "ttfc_p99_ms": ttfc["p99"],
            "client_cpu_ms_per_req": stats.ratio(self.cpu * 1000.0, n),
            "server_cpu_ms_per_req": stats.ratio(self.server_cpu * 1000.0, n),
            "engine_cpu_ms_per_req": stats.ratio(self.engine_cpu * 1000.0, n),
        }


def chat_body(stream: bool, model: str = DEFAULT_MODEL, user: str | None = None) -> bytes:
    """Return a small chat-completion request body."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What did I tell you about my trip to Lisbon?"},
        ],
        "stream": stream,
    }
    if user:
        body["user"] = user
    return json.dumps(body).encode()


def parse_server_timing(value: str) -> dict[str, float]:
    """``Server-Timing`` (``name;dur=ms, ...``) as {stage: ms}, skipping entries without one."""
    out = {}
    for part in value.split(","):
        name, _, duration = part.strip().partition(";dur=")
        if name and duration:
            out[name] = float(duration)
    return out


def unique_chat_bodies(
    stream: bool, model: str = DEFAULT_MODEL, base: int = 0
) -> Callable[[int], bytes]:
    """Return a body factory whose every request asks a different question.

    Memory-on targets cache embeddings and search results by query text; one repeated question
    would measure only cache hits. Numbered questions make every request a miss, like real traffic.
    """
    prefix = json.dumps(
        {
            "model": model,
            "stream": stream,
            "messages": [{"role": "system", "content": "You are a helpful assistant."}],
        }
    )[:-2]  # strip the closing "]}" to append the user message

    def build(n: int) -> bytes:
        n += base
        question = QUESTIONS[n % len(QUESTIONS)].format(
            place=PLACES[n % len(PLACES)],
            person=PEOPLE[(n // 7) % len(PEOPLE)],
            topic=TOPICS[(n // 3) % len(TOPICS)],
        )
        user = json.dumps({"role": "user", "content": f"{question} (request {n})"})
        return f"{prefix}, {user}]}}".encode()

    return build


async def _aiohttp_worker(
    session: aiohttp.ClientSession,
    url: str,
    body: Body,
    headers: Mapping[str, str],
    stream: bool,
    deadline: float,
    sample: Sample,
    counter: Iterable[int],
) -> None:
    perf = time.perf_counter
    numbers = iter(counter)
    while perf() < deadline:
        payload = body(next(numbers)) if callable(body) else body
        started = perf()
        stages: dict[str, float] = {}
        try:
            async with session.post(url, data=payload, headers=headers) as resp:
                if stream:
                    await resp.content.readany()
                    first = perf()
                    while await resp.content.readany():
                        pass
                else:
                    await resp.read()
                # The answer is in: what follows is this client's bookkeeping (a memory-on
                # answer's nine Server-Timing entries parse in ~12 us, memory off's one in ~1.5),
                # not the proxy's latency.
                took = perf() - started
                ok = resp.status == 200
                status = resp.headers.get("X-Memory-Status")
                if status is not None:
                    sample.memory_status[status] = sample.memory_status.get(status, 0) + 1
                timing = resp.headers.get("Server-Timing")
                stages = parse_server_timing(timing) if timing else {}
                for stage, ms in stages.items():
                    sample.stages_ms.setdefault(stage, []).append(ms)
        except (TimeoutError, aiohttp.ClientError):
            ok = False
        if ok:
            sample.latencies.append(took)
            if "memory" in stages:
                sample.outside_ms.append(took * 1000.0 - stages["memory"])
            if stream:
                sample.ttfc.append(first - started)
        else:
            sample.errors += 1


async def run_aiohttp(
    url: str,
    body: Body,
    headers: Mapping[str, str],
    *,
    concurrency: int,
    seconds: float,
    stream: bool,
) -> Sample:
    """Run ``concurrency`` keep-alive connections in a closed loop for ``seconds``."""
    sample = Sample()
    connector = aiohttp.TCPConnector(limit=concurrency, ttl_dns_cache=None)
    timeout = aiohttp.ClientTimeout(total=60)
    all_headers = {"Content-Type": "application/json", **headers}
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        cpu0, t0 = time.process_time(), time.perf_counter()
        deadline = t0 + seconds
        counter = itertools.count()  # shared: request numbers are unique across workers
        await asyncio.gather(
            *(
                _aiohttp_worker(session, url, body, all_headers, stream, deadline, sample, counter)
                for _ in range(concurrency)
            )
        )
        sample.elapsed = time.perf_counter() - t0
        sample.cpu = time.process_time() - cpu0
    return sample


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_hey(
    url: str, body: bytes, headers: Mapping[str, str], *, concurrency: int, seconds: float
) -> Sample:
    """Run ``hey`` (Debian package) and read every request's latency from its CSV output."""
    exe = shutil.which("hey")
    if exe is None:
        raise RuntimeError("hey not found: apt-get install -y hey")
    argv = [exe, "-z", f"{seconds}s", "-c", str(concurrency), "-m", "POST"]
    argv += ["-T", "application/json", "-d", body.decode(), "-o", "csv"]
    for key, value in headers.items():
        argv += ["-H", f"{key}: {value}"]
    cpu0, t0 = _children_cpu(), time.perf_counter()
    out = subprocess.run([*argv, url], check=True, capture_output=True, text=True).stdout
    sample = Sample(elapsed=time.perf_counter() - t0, cpu=_children_cpu() - cpu0)
    # hey's wall time includes its own start-up; its CSV offsets give the real load window.
    offsets: list[float] = []
    for row in csv.DictReader(io.StringIO(out)):
        if row.get("status-code") == "200":
            sample.latencies.append(float(row["response-time"]))
            offsets.append(float(row["offset"]) + float(row["response-time"]))
        else:
            sample.errors += 1
    if offsets:
        sample.elapsed = max(offsets)
    return sample


WRK_SCRIPT = """
wrk.method = "POST"
wrk.body = {body}
{headers}
done = function(summary, latency, requests)
  io.write(string.format('WRK_JSON {{"requests": %d, "errors": %d, "seconds": %f, ' ..
    '"p50": %f, "p90": %f, "p99": %f, "max": %f}}\\n',
    summary.requests, summary.errors.status + summary.errors.connect + summary.errors.read +
    summary.errors.write + summary.errors.timeout, summary.duration / 1e6,
    latency:percentile(50) / 1000, latency:percentile(90) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000))
end
"""


def run_wrk(
    url: str, body: bytes, headers: Mapping[str, str], *, concurrency: int, seconds: float
) -> Sample:
    """Run ``wrk`` (Debian package) with a Lua script; it reports percentiles, not samples."""
    exe = shutil.which("wrk")
    if exe is None:
        raise RuntimeError("wrk not found: apt-get install -y wrk")
    all_headers = {"Content-Type": "application/json", **headers}
    lua_headers = "\n".join(
        f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in all_headers.items()
    )
    script = WRK_SCRIPT.format(body=json.dumps(body.decode()), headers=lua_headers)
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as handle:
        handle.write(script)
        script_path = handle.name
    argv = [exe, "-t", "1", "-c", str(concurrency), "-d", f"{max(1, round(seconds))}s"]
    argv += ["-s", script_path, url]
    cpu0 = _children_cpu()
    try:
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    finally:
        Path(script_path).unlink(missing_ok=True)
    line = next(x for x in out.splitlines() if x.startswith("WRK_JSON "))
    data = json.loads(line[len("WRK_JSON ") :])
    sample = Sample(elapsed=data["seconds"], cpu=_children_cpu() - cpu0, errors=data["errors"])
    sample.percentiles_ms = {k: data[k] for k in ("p50", "p90", "p99", "max")}
    sample.counted = int(data["requests"] - data["errors"])
    return sample


def run_cell(
    target: Target,
    *,
    concurrency: int,
    seconds: float,
    stream: bool,
    engine: str = "aiohttp",
    body: Body | None = None,
) -> Sample:
    """Load one target at one concurrency with one engine; streaming needs aiohttp."""
    url = target.base_url.rstrip("/") + CHAT_PATH
    body = body if body is not None else chat_body(stream)
    if engine == "aiohttp" or stream or callable(body):
        return asyncio.run(
            run_aiohttp(
                url, body, target.headers, concurrency=concurrency, seconds=seconds, stream=stream
            )
        )
    if engine == "hey":
        return run_hey(url, body, target.headers, concurrency=concurrency, seconds=seconds)
    if engine == "wrk":
        return run_wrk(url, body, target.headers, concurrency=concurrency, seconds=seconds)
    raise ValueError(f"unknown engine {engine!r}; choose from {ENGINES}")


Cell = tuple[str, int, bool]  # (target name, concurrency, stream)


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) process ``pid`` has used (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def engine_cpu_s(pid: int, proc: Path = Path("/proc")) -> float:
    """CPU seconds (user + system) the search pool threads (``ENGINE_THREAD``) of process
    ``pid`` have used; 0 for a process without them (or gone)."""
    spent = 0
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:
        return 0.0
    for task in tasks:
        try:
            text = (task / "stat").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        if text[text.index("(") + 1 : text.rindex(")")].startswith(ENGINE_THREAD):
            fields = text.rsplit(")", 1)[1].split()
            spent += int(fields[11]) + int(fields[12])
    return spent / os.sysconf("SC_CLK_TCK")


def settled_cpu(read_cpu: Callable[[], float]) -> float:
    """``read_cpu()`` once the process has gone idle (under ``SETTLED_SHARE`` of a core for a
    ``SETTLE_POLL_S`` poll), or after ``SETTLE_MAX_S``."""
    last = read_cpu()
    deadline = time.monotonic() + SETTLE_MAX_S
    while time.monotonic() < deadline:
        time.sleep(SETTLE_POLL_S)
        now = read_cpu()
        if now - last < SETTLED_SHARE * SETTLE_POLL_S:
            return now
        last = now
    return last


def settled_all(readers: Sequence[Callable[[], float]]) -> None:
    """Return once every reader's process used under ``SETTLED_SHARE`` of a core over one
    ``SETTLE_POLL_S`` poll, all in the same poll (or after ``SETTLE_MAX_S``)."""
    if not readers:
        return
    last = [read() for read in readers]
    deadline = time.monotonic() + SETTLE_MAX_S
    while time.monotonic() < deadline:
        time.sleep(SETTLE_POLL_S)
        now = [read() for read in readers]
        if all(b - a < SETTLED_SHARE * SETTLE_POLL_S for a, b in zip(last, now, strict=True)):
            return
        last = now


def balanced_orders(count: int) -> list[list[int]]:
    """``count`` orders of ``range(count)`` in which every item holds every position once and,
    for an even ``count``, follows every other item once (a Williams design)."""
    # 0, 1, n-1, 2, n-2, ...: the differences of neighbours are all distinct (mod n)
    first = [0] + [(k + 1) // 2 if k % 2 else count - k // 2 for k in range(1, count)]
    return [[(item + shift) % count for item in first] for shift in range(count)]


def rotated(items: Sequence[Any], shift: int) -> list[Any]:
    """Return ``items`` rotated left by ``shift`` (the interleaving order of round ``shift``)."""
    if not items:
        return []
    shift %= len(items)
    return [*items[shift:], *items[:shift]]


def run_interleaved(
    targets: Mapping[str, str] | Sequence[Target],
    *,
    concurrencies: Iterable[int],
    seconds: float,
    rounds: int,
    streams: Iterable[bool] = (False,),
    engine: str = "aiohttp",
    unique_queries: bool = False,
    bodies: Mapping[str, Callable[[bool], Body]] | None = None,
    log: bool = True,
    server_cpu: Mapping[str, Callable[[], float]] | None = None,
    engine_cpu: Mapping[str, Callable[[], float]] | None = None,
    cells: list[dict[str, Any]] | None = None,
    balanced: bool = False,
) -> dict[Cell, Sample]:
    """Load every target in every cell for ``rounds`` rounds, in ``cell_plan``'s order.

    ``unique_queries`` gives every request its own question (all targets alike), so caches keyed
    by query text cannot turn the memory path into cache hits; it implies the aiohttp engine.
    ``bodies`` maps a target's name to a factory of its cell's body (given ``stream``), e.g.
    real-text questions (``realtext.QuestionBodies``); it overrides ``unique_queries`` there.
    ``server_cpu`` maps a target's name to a reading of its server's CPU seconds
    (``process_cpu_s``): after each of its cells the run waits until that server is idle (work
    it does after its answers, e.g. capture, would otherwise run into the next cell) and
    charges the cell everything the server spent meanwhile. Targets served by one process share
    its reader (the same callable). ``engine_cpu`` likewise reads the part of it the server's
    search pool threads spent (``engine_cpu_s``).
    ``cells``, when given, gets one record per cell run, in run order (``cell_record``).
    ``balanced``: the cells in ``cell_plan``'s balanced order, and before each cell a wait until
    every server (``server_cpu``) is idle.
    """
    if isinstance(targets, Mapping):
        targets = [Target(name, url) for name, url in targets.items()]
    targets = list(targets)
    results: dict[Cell, Sample] = {}
    numbers = itertools.count(1)  # each cell's questions start at a new base: none repeats
    for target in targets:  # warm connections, caches and lazy imports once
        run_cell(target, concurrency=4, seconds=WARMUP_S, stream=False, engine="aiohttp")
    readers = list(dict.fromkeys((server_cpu or {}).values()))  # one per server process
    after = "warm-up"
    position = 0
    plan = cell_plan(targets, list(concurrencies), list(streams), rounds, seconds, balanced)
    for n, (round_no, concurrency, stream, target, cell_seconds) in enumerate(plan):
        position = position + 1 if n and plan[n - 1][:3] == (round_no, concurrency, stream) else 1
        body: Body | None = None
        if bodies is not None and target.name in bodies:
            body = bodies[target.name](stream)
        elif unique_queries:
            body = unique_chat_bodies(stream, base=next(numbers) * UNIQUE_STRIDE)
        if balanced:  # no server's after-response work (e.g. another cell's) runs into the cell
            settled_all(readers)
        read_cpu = (server_cpu or {}).get(target.name)
        cpu0 = read_cpu() if read_cpu is not None else 0.0
        read_engine = (engine_cpu or {}).get(target.name)
        engine0 = read_engine() if read_engine is not None else 0.0
        before = [read() for read in readers]
        sample = run_cell(
            target,
            concurrency=concurrency,
            seconds=cell_seconds,
            stream=stream,
            engine=engine,
            body=body,
        )
        # What the other servers spent meanwhile: their after-response work landing in this
        # cell (they share the servers' CPUs).
        others = sum(
            read() - cpu for read, cpu in zip(readers, before, strict=True) if read is not read_cpu
        )
        if read_cpu is not None:
            sample.server_cpu = settled_cpu(read_cpu) - cpu0
        if read_engine is not None:
            sample.engine_cpu = read_engine() - engine0
        results.setdefault((target.name, concurrency, stream), Sample()).merge(sample)
        record = cell_record(sample, target.name, concurrency, stream)
        record.update(round=round_no + 1, position=position, after=after)
        record["others_cpu_ms"] = others * 1000.0
        after = f"{target.name} c={concurrency}{' stream' if stream else ''}"
        if cells is not None:
            cells.append(record)
        if log:
            memory = record.get("memory_p50")
            print(
                f"  round {round_no + 1}/{rounds} {target.name:<14} c={concurrency:<3} "
                f"stream={stream!s:<5} {record['rps']:8.0f} req/s p50 {record['p50_ms']:6.2f} ms"
                + (f" memory {memory:5.2f}" if memory is not None else "")
                + f" others' cpu {others * 1000.0:5.0f} ms",
                file=sys.stderr,
            )
    return results


def cell_plan(
    targets: Sequence[Target],
    concurrencies: Sequence[int],
    streams: Sequence[bool],
    rounds: int,
    seconds: float,
    balanced: bool = False,
) -> list[tuple[int, int, bool, Target, float]]:
    """The cells in run order, each as (round from 0, concurrency, stream, target, seconds).

    By default each round runs every concurrency in turn, its targets rotated by one each
    round. ``balanced``: every round of the first concurrency before the next (a low
    concurrency's cells never run in the wake of a high one's), and each round of a
    concurrency runs every ``balanced_orders`` order of the targets, each cell for ``seconds``
    over the number of targets: every target holds every position once a round, and (an even
    number of targets) follows every other once, so neither a slow spell of the machine nor
    what the cell before left running favours a slot.
    """
    plan: list[tuple[int, int, bool, Target, float]] = []
    if not balanced:
        for round_no in range(rounds):
            for concurrency in concurrencies:
                for stream in streams:
                    for target in rotated(targets, round_no):
                        plan.append((round_no, concurrency, stream, target, seconds))
        return plan
    orders = balanced_orders(len(targets))
    for concurrency in concurrencies:
        for round_no in range(rounds):
            for stream in streams:
                for order in rotated(orders, round_no):
                    for index in order:
                        cell = (round_no, concurrency, stream, targets[index])
                        plan.append((*cell, seconds / len(targets)))
    return plan


def cell_record(sample: Sample, name: str, concurrency: int, stream: bool) -> dict[str, Any]:
    """One cell's figures (one round's sample): rate, latency p50, the memory stage's p50 and
    both over the cell's first quarter of answers (in arrival order: a slow start shows)."""
    summary = sample.summary()
    record: dict[str, Any] = {
        "target": name,
        "c": concurrency,
        "stream": stream,
        "requests": sample.requests,
        "rps": summary["rps"],
        "p50_ms": summary["p50_ms"],
        "server_cpu_ms_per_req": summary["server_cpu_ms_per_req"],
    }
    quarter = max(1, len(sample.latencies) // 4)
    if sample.latencies:
        record["first_quarter_p50_ms"] = stats.percentile(sample.latencies[:quarter], 50) * 1e3
    memory = sample.stages_ms.get("memory")
    if memory:
        record["memory_p50"] = stats.percentile(memory, 50)
        record["first_quarter_memory_p50"] = stats.percentile(
            memory[: max(1, len(memory) // 4)], 50
        )
    return record


def result_rows(
    results: Mapping[Cell, Sample], baseline: str | None = None
) -> list[dict[str, Any]]:
    """Return one table row per cell, with latency added over ``baseline``'s same cell."""
    rows: list[dict[str, Any]] = []
    for (name, concurrency, stream), sample in results.items():
        summary = sample.summary()
        row: dict[str, Any] = {"target": name, "c": concurrency, "stream": str(stream).lower()}
        row.update(summary)
        if sample.memory_status:
            row["memory_status"] = ",".join(
                f"{k}={v}" for k, v in sorted(sample.memory_status.items())
            )
        if baseline is not None and (baseline, concurrency, stream) in results:
            base = results[(baseline, concurrency, stream)].summary()
            row["added_p50_ms"] = summary["p50_ms"] - base["p50_ms"]
            row["added_p99_ms"] = summary["p99_ms"] - base["p99_ms"]
            row["added_ttfc_p50_ms"] = summary["ttfc_p50_ms"] - base["ttfc_p50_ms"]
        rows.append(row)
    rows.sort(key=lambda r: (r["stream"], r["c"], r["target"]))
    return rows


def compare_engines(seconds: float, concurrencies: Sequence[int]) -> list[dict[str, Any]]:
    """Load the bare fake upstream with each engine; the less a tool distorts, the higher the rps
    and the lower the latency it sees from the same server, at the lower client CPU per request.
    """
    from bench.lib.servers import fake_upstream

    rows: list[dict[str, Any]] = []
    with fake_upstream() as upstream:
        target = Target("fake", upstream.base_url)
        run_cell(target, concurrency=4, seconds=WARMUP_S, stream=False)
        for round_no in range(2):
            for concurrency in concurrencies:
                for engine in rotated(list(ENGINES), round_no):
                    if shutil.which(engine) is None and engine != "aiohttp":
                        continue
                    sample = run_cell(
                        target,
                        concurrency=concurrency,
                        seconds=seconds,
                        stream=False,
                        engine=engine,
                    )
                    rows.append(
                        {
                            "engine": engine,
                            "c": concurrency,
                            "round": round_no + 1,
                            **sample.summary(),
                        }
                    )
    return rows


def main() -> None:
    """``--compare``: measure how much each load engine distorts, against the bare fake."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--compare", action="store_true", required=True)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 50])
    args = parser.parse_args()
    rows = compare_engines(args.seconds, args.concurrency)
    columns = [
        "engine",
        "c",
        "round",
        "requests",
        "rps",
        "p50_ms",
        "p99_ms",
        "client_cpu_ms_per_req",
    ]
    print(stats.format_table(rows, columns))


if __name__ == "__main__":
    main()
