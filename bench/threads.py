"""Which threads run while memproxy serves a memory-on request at concurrency 1, and does the
request wait on them? (issue 14, item 2: served stages ran slower than replayed in process.)

One ``python -m proxy serve`` process (the embedded store holding ``--memories`` real-text
memories, the bench's fake upstream, default settings) traced by ``bench/lib/thread_trace.py``,
driven by one client asking a new LoCoMo question per request. Reported:

- each thread's CPU per request (``/proc/<pid>/task/*/schedstat`` read around every request);
- the calls run on the store's threads, by kind, and how much of each overlapped an assemble;
- the hand-off: call submitted to started on a store thread, ended to the loop going on;
- assemble's wall time against the main thread's CPU time in it (equal: it never waited for the
  GIL or a core), and the CPU of two immediate replays on the same inputs (a warm run);
- one numpy comparison of 400 and of 4,900 elements on the loop just before assemble (numpy
  releases the GIL above 500: a busy thread could then keep it);
- the work after sending (the request's cache writes, on the loop) and whether it outlasted the
  relay it runs beside.

    .venv/bin/python bench/threads.py                 # ~1 minute
    .venv/bin/python bench/threads.py --smoke         # seconds, for CI
"""

from __future__ import annotations

import argparse
import bisect
import http.client
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib import realtext
from bench.lib.servers import ROOT, fake_upstream, memproxy
from bench.pipeline import API_KEY, MODEL, seed_from_tree

WARM_UP = 50
Event = list[Any]  # (kind, thread, label, start_ns, end_ns, cpu_ns)


def thread_cpu(pid: int) -> dict[str, tuple[str, int]]:
    """Thread id -> (name, CPU ns so far) of every thread of ``pid``."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            out[tid] = (name, int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0]))
        except OSError:  # the thread ended
            pass
    return out


def drive(port: int, pid: int, requests: int) -> tuple[list[float], dict[tuple[str, str], int]]:
    """``requests`` memory-on requests one at a time; latencies (ms) and CPU ns per thread."""
    bodies = realtext.QuestionBodies(realtext.RealText().questions(), MODEL)
    conn = http.client.HTTPConnection("127.0.0.1", port)
    headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
    latencies: list[float] = []
    cpu: dict[tuple[str, str], int] = defaultdict(int)
    for n in range(WARM_UP + requests):
        before, started = thread_cpu(pid), time.perf_counter()
        conn.request("POST", "/v1/chat/completions", bodies(), headers)
        conn.getresponse().read()
        took, after = time.perf_counter() - started, thread_cpu(pid)
        if n < WARM_UP:
            continue
        latencies.append(took * 1e3)
        for tid, (name, ns) in after.items():
            cpu[(tid, name)] += ns - before.get(tid, (name, ns))[1]
    conn.close()
    return latencies, cpu


def p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def p90(values: list[float]) -> float:
    return sorted(values)[int(len(values) * 0.9)] if values else float("nan")


def overlap(a: Event, b: Event) -> int:
    return max(0, min(a[4], b[4]) - max(a[3], b[3]))


def report(events: list[Event], requests: int, latencies: list[float], cpu: dict[Any, int]) -> None:
    """Print what the trace says."""
    print(
        f"c=1, {requests} requests: latency p50 {p50(latencies):.2f} ms, p90 {p90(latencies):.2f}"
    )
    print("\nCPU per request by thread (us):")
    for (tid, name), ns in sorted(cpu.items(), key=lambda item: -item[1]):
        if ns:
            print(f"  {tid:>8} {name:16} {ns / requests / 1e3:8.1f}")
    by = defaultdict(list)
    for event in events:
        by[event[0]].append(event)
    jobs = by["job"]
    assembles = by["assemble"][WARM_UP:]
    prepares = by["prepare"]
    print("\nCalls on the store's threads:")
    for label, n in Counter(job[2] for job in jobs).most_common():
        mine = [j for j in jobs if j[2] == label]
        took = [(j[4] - j[3]) / 1e3 for j in mine]
        during = sum(overlap(a, j) for a in assembles for j in mine) / 1e3
        hit = sum(1 for p in prepares if any(overlap(p, j) for j in mine))
        print(
            f"  {label:42} n={n:5}  p50 {p50(took):7.0f} us  max {max(took):7.0f} us  "
            f"within assembles {during / max(len(assembles), 1):6.1f} us/request  "
            f"overlapping {hit} of {len(prepares)} prepares"
        )
    starts = sorted(j[3] for j in jobs)
    ends = sorted(j[4] for j in jobs)
    queued = [
        (starts[i] - s[3]) / 1e3
        for s in by["submit"]
        if (i := bisect.bisect_left(starts, s[3])) < len(starts)
    ]
    resumed = [
        (r[3] - ends[i]) / 1e3
        for r in by["resumed"]
        if (i := bisect.bisect_right(ends, r[3]) - 1) >= 0
    ]
    print(f"\nHand-off: submitted -> started p50 {p50(queued):.0f} us, p90 {p90(queued):.0f}")
    print(f"          ended -> loop goes on  p50 {p50(resumed):.0f} us, p90 {p90(resumed):.0f}")
    wall = [(a[4] - a[3]) / 1e3 for a in assembles]
    own = [a[5] / 1e3 for a in assembles]
    waited = [w - c for w, c in zip(wall, own, strict=True)]
    print(
        f"\nAssemble: wall p50 {p50(wall):.0f} us, main-thread CPU p50 {p50(own):.0f} us, "
        f"wall - CPU p50 {p50(waited):.0f} us, p90 {p90(waited):.0f}"
    )
    for size in (400, 4_900):
        took = [(e[4] - e[3]) / 1e3 for e in by[f"numpy{size}"][WARM_UP:]]
        print(
            f"numpy comparison of {size} elements before assemble: p50 {p50(took):.1f} us, "
            f"p99 {sorted(took)[int(len(took) * 0.99)]:.1f}, max {max(took):.1f}"
        )
    for replay in ("replay1", "replay2"):
        print(f"  {replay}: CPU p50 {p50([r[5] / 1e3 for r in by[replay][WARM_UP:]]):.0f} us")
    after = [(a[4] - a[3]) / 1e3 for a in by["after_send"]]
    print(f"\nWork after sending (on the loop): p50 {p50(after):.0f} us")
    print("Spawned:", dict(Counter(s[2] for s in by["spawn"])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="seconds, for CI")
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=1_500)
    args = parser.parse_args()
    count, requests = (300, 30) if args.smoke else (args.memories, args.requests)
    with tempfile.TemporaryDirectory(prefix="mp-threads-") as data_dir:
        # Seeded by a child process, as bench/pipeline.py seeds every slot: the bench process
        # stays a lean load generator (docs/benchmarks.md, "The pipeline benchmark's slots").
        seed_from_tree(ROOT, Path(data_dir), "real", count)
        trace = Path(data_dir) / "trace.json"
        env = {"MEMPROXY_ACCESS_LOG": "false", "BENCH_THREAD_TRACE": str(trace)}
        with fake_upstream() as fake:
            server = memproxy(fake.base_url + "/v1", Path(data_dir), extra_env=env)
            server.argv = [sys.executable, "-m", "bench.lib.thread_trace", "serve"]
            with server as proxy:
                assert proxy.pid is not None
                latencies, cpu = drive(proxy.port, proxy.pid, requests)
                os.kill(proxy.pid, signal.SIGUSR1)
                deadline = time.monotonic() + 10
                while not trace.exists() and time.monotonic() < deadline:
                    time.sleep(0.05)  # the dump renames it into place once written
                events = json.loads(trace.read_text())
    report(events, requests, latencies, cpu)


if __name__ == "__main__":
    main()
