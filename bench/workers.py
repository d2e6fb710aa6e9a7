"""Does memory scale with workers? ``memproxy serve`` with 1 and with 2 workers, memory on.

Both servers run at once on the embedded store (no Qdrant server), each with its own data dir
seeded with the same real-text memories (``bench/lib/realtext.py``: LoCoMo turns, observations
and summaries, scaled up by its generator) for one user, in front of one fake upstream. ``wrk``
loads them at concurrency 50, interleaved: each round runs one cell per server, the order
rotating between rounds, so drift from other work on the machine falls on both alike. Every
request asks a new LoCoMo question (a Lua table of unused questions per cell, so no cache
answers for the memory path); ``repeats`` counts requests past the end of that table.

Reported per round and pooled: requests/s of each server, the 2-worker/1-worker ratio, and the
CPU milliseconds each server's processes (supervisor and workers) spent per request.

Target (issue 14): memory-on throughput at c=50 with 2 workers >= 1.7x one worker, in one run,
on a 2-core machine. The load generator and the fake upstream share those cores.

    .venv/bin/python bench/workers.py                 # 10k memories, 5 rounds of 8 s (~3 min)
    .venv/bin/python bench/workers.py --rounds 9 --seconds 10
    .venv/bin/python bench/workers.py --smoke         # seconds, for CI
"""

from __future__ import annotations

import argparse
import json
import os
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

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib import memories, realtext, stats
from bench.lib.report import machine_info, save_results
from bench.lib.servers import ServerProcess, fake_upstream, memproxy

CLK_TCK = os.sysconf("SC_CLK_TCK")
CONCURRENCY = 50
TARGET_RATIO = 1.7
USER = "bench-user"
AUTH = {"Authorization": "Bearer sk-bench-workers"}
QUESTIONS_PER_SECOND = 800  # Lua table size per cell second: above any rate seen on 2 cores
CHAT_PATH = "/v1/chat/completions"
CHECK_TRIES = 10
WRK_TIMEOUT = "10s"

WRK_SCRIPT = """
wrk.method = "POST"
{headers}
bodies = {{{bodies}}}
n = 0
request = function()
  n = n + 1
  return wrk.format(nil, nil, nil, bodies[((n - 1) % #bodies) + 1])
end
done = function(summary, latency, requests)
  io.write(string.format('WRK_JSON {{"requests": %d, "errors": %d, "seconds": %f, ' ..
    '"p50": %f, "p99": %f}}\\n', summary.requests, summary.errors.status +
    summary.errors.connect + summary.errors.read + summary.errors.write +
    summary.errors.timeout, summary.duration / 1e6, latency:percentile(50) / 1000,
    latency:percentile(99) / 1000))
end
"""


@dataclass
class Cell:
    """One wrk run against one server."""

    requests: int
    errors: int
    seconds: float
    p50_ms: float
    p99_ms: float
    cpu_s: float
    repeats: int

    @property
    def rps(self) -> float:
        """Successful requests per second."""
        return stats.ratio(self.requests - self.errors, self.seconds)


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and every live descendant (workers included)."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    family, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, ppid in parents.items() if ppid == parent]
        family.update(children)
        frontier.extend(children)
    return sum(times.get(member, 0.0) for member in family)


def chat_body(question: str) -> str:
    """A chat request asking ``question``."""
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": question},
    ]
    return json.dumps({"model": "fake-model", "messages": messages})


def run_wrk(server: ServerProcess, questions: Iterator[str], seconds: float) -> Cell:
    """Load ``server`` with wrk for ``seconds``, every request a new question."""
    exe = shutil.which("wrk")
    if exe is None:
        raise SystemExit("wrk not found: apt-get install -y wrk")
    count = max(200, int(QUESTIONS_PER_SECOND * seconds))
    bodies = ",".join(json.dumps(chat_body(next(questions))) for _ in range(count))
    headers = {"Content-Type": "application/json", "X-Memory-User": USER, **AUTH}
    lua_headers = "\n".join(
        f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in headers.items()
    )
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as handle:
        handle.write(WRK_SCRIPT.format(headers=lua_headers, bodies=bodies))
        script = handle.name
    argv = [exe, "-t", "1", "-c", str(CONCURRENCY), "-d", f"{max(1, round(seconds))}s"]
    argv += ["--timeout", WRK_TIMEOUT]  # wrk's 2 s default counts a loaded machine's tail
    argv += ["-s", script, server.base_url + CHAT_PATH]
    assert server.pid is not None
    cpu0 = tree_cpu_s(server.pid)
    try:
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    finally:
        Path(script).unlink(missing_ok=True)
    cpu = tree_cpu_s(server.pid) - cpu0
    line = next(x for x in out.splitlines() if x.startswith("WRK_JSON "))
    data = json.loads(line[len("WRK_JSON ") :])
    return Cell(
        requests=int(data["requests"]),
        errors=int(data["errors"]),
        seconds=float(data["seconds"]),
        p50_ms=float(data["p50"]),
        p99_ms=float(data["p99"]),
        cpu_s=cpu,
        repeats=max(0, int(data["requests"]) - count),
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


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--workers", type=int, default=2, help="workers of the scaled server")
    parser.add_argument("--smoke", action="store_true", help="a few seconds, for CI")
    args = parser.parse_args(argv)
    if args.smoke:
        args.memories, args.rounds, args.seconds = 300, 1, 1.0
    items, questions, data = memory_items(args.memories)
    names = ["workers-1", f"workers-{args.workers}"]
    cells: dict[str, list[Cell]] = {name: [] for name in names}
    info: dict[str, Any] = {"memories": args.memories, "data": data, "c": CONCURRENCY}
    with ExitStack() as stack:
        upstream = stack.enter_context(fake_upstream())
        servers: dict[str, ServerProcess] = {}
        for name, workers in zip(names, (1, args.workers), strict=True):
            data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mp-w-")))
            server = memproxy(upstream.base_url + "/v1", data_dir, workers=workers)
            server.name = name
            started = time.perf_counter()
            stack.enter_context(server)
            info[f"{name}_seed_s"] = round(memories.seed_memories(server.base_url, items, AUTH), 1)
            info[f"{name}_ready_s"] = round(time.perf_counter() - started, 1)
            info[f"{name}_memory_status"] = check_memory_on(server)
            servers[name] = server
            print(f"{name} ready, {args.memories} memories ({data})", file=sys.stderr)
        for name in names:  # warm-up: connections, lazy imports, caches of the fixed prompt
            run_wrk(servers[name], questions, 1.0)
        for round_no in range(args.rounds):
            order = names if round_no % 2 == 0 else names[::-1]
            for name in order:
                cell = run_wrk(servers[name], questions, args.seconds)
                cells[name].append(cell)
                print(
                    f"  round {round_no + 1}/{args.rounds} {name:<10} {cell.rps:7.0f} req/s "
                    f"cpu {stats.ratio(cell.cpu_s * 1000, cell.requests):5.2f} ms/req",
                    file=sys.stderr,
                )
    rows = []
    for round_no in range(args.rounds):
        one, many = cells[names[0]][round_no], cells[names[1]][round_no]
        rows.append(
            {
                "round": round_no + 1,
                "rps_1": round(one.rps),
                f"rps_{args.workers}": round(many.rps),
                "ratio": round(stats.ratio(many.rps, one.rps), 2),
                "cpu_ms_1": round(stats.ratio(one.cpu_s * 1000, one.requests), 2),
                f"cpu_ms_{args.workers}": round(stats.ratio(many.cpu_s * 1000, many.requests), 2),
                # Cores the server's processes used: below what the machine has means the
                # server was not what limited the rate (other work on the cores was).
                "cores_1": round(stats.ratio(one.cpu_s, one.seconds), 2),
                f"cores_{args.workers}": round(stats.ratio(many.cpu_s, many.seconds), 2),
                "p99_ms_1": round(one.p99_ms),
                f"p99_ms_{args.workers}": round(many.p99_ms),
            }
        )
    pooled = {
        name: stats.ratio(sum(c.requests - c.errors for c in cs), sum(c.seconds for c in cs))
        for name, cs in cells.items()
    }
    ratio = stats.ratio(pooled[names[1]], pooled[names[0]])
    errors = sum(c.errors for cs in cells.values() for c in cs)
    repeats = sum(c.repeats for cs in cells.values() for c in cs)
    print(stats.format_table(rows))
    verdict = "met" if ratio >= TARGET_RATIO else "NOT met"
    print(
        f"\npooled: {pooled[names[0]]:.0f} vs {pooled[names[1]]:.0f} req/s, ratio {ratio:.2f} "
        f"(target >= {TARGET_RATIO}: {verdict}); errors {errors}; repeated questions {repeats}"
    )
    print("The machine is shared with other work: ratios move between runs.")
    if not args.smoke:
        save_results(
            "workers",
            {
                "machine": machine_info(),
                "info": info,
                "rounds": rows,
                "pooled_rps": pooled,
                "ratio": ratio,
            },
        )
    if args.smoke and errors:  # a smoke run's few requests must all pass
        raise SystemExit(f"{errors} requests failed")


if __name__ == "__main__":
    main()
