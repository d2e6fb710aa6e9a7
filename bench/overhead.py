"""What does memproxy cost? The fake upstream called directly vs through ``memproxy serve``.

In one run, interleaved (so noise from other work on the machine falls on both alike): added
latency p50/p99 at concurrency 1 and 50, requests/s, and the proxy's share of direct
throughput, for non-streaming and streaming chat completions. The proxy runs as a real
``python -m proxy serve`` process configured only through ``MEMPROXY_*`` variables, with the
memory pipeline off (``MEMPROXY_MEMORY_ENABLED=false``) unless ``--memory`` is given.

Targets (issue 2, 2-core machine): added p50 <= 1 ms at concurrency 1; proxy throughput >= 40 %
of direct at concurrency 50.

The machine is shared, so besides requests/s each row gives the CPU time the server process
spent per request (``cpu_us``, from ``/proc/PID/stat`` around each cell): it moves much less
than throughput when other work competes for the cores.

    .venv/bin/python bench/overhead.py             # ~1 minute

The four-way run of issue 6 (direct, memproxy with memory off and on with 10k memories, and
LiteLLM's proxy, interleaved in one run) reuses the same load generator and servers:
``.venv/bin/python bench/peers/litellm_proxy.py --targets direct memproxy-off memproxy-on litellm``.
    .venv/bin/python bench/overhead.py --smoke     # seconds, for CI
    # also memproxy with another upstream client, and an older checkout (with its own choice of
    # clients), interleaved in the same run:
    git archive 394cce5 | tar -x -C /tmp/memproxy-before
    .venv/bin/python bench/overhead.py --client reqwest --baseline-tree /tmp/memproxy-before \
        --baseline-client fast --baseline-client aiohttp --engine wrk
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib import loadgen, stats
from bench.lib.servers import ServerProcess, fake_upstream, memproxy, served_from

CLK_TCK = os.sysconf("SC_CLK_TCK")

TARGET_ADDED_P50_MS = 1.0
TARGET_THROUGHPUT_SHARE = 0.40
CONCURRENCIES = (1, 50)


def client_config(tmp: Path, client: str) -> str:
    """A config file choosing ``upstream.client``; its path."""
    path = tmp / f"client-{client}.yaml"
    path.write_text(f"upstream:\n  client: {client}\n")
    return str(path)


def process_cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of ``pid`` and its reaped children (0 when unknown)."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # utime, stime, cutime, cstime are fields 14-17 of stat(5); [0] here is field 3.
    return sum(int(v) for v in fields[11:15]) / CLK_TCK


def run_cells(
    targets: list[tuple[loadgen.Target, int | None]],
    *,
    seconds: float,
    rounds: int,
    engine: str,
) -> tuple[dict[loadgen.Cell, loadgen.Sample], dict[loadgen.Cell, float]]:
    """``loadgen.run_interleaved`` plus the server's CPU seconds per cell."""
    results: dict[loadgen.Cell, loadgen.Sample] = {}
    cpu: dict[loadgen.Cell, float] = {}
    for target, _ in targets:
        loadgen.run_cell(target, concurrency=4, seconds=loadgen.WARMUP_S, stream=False)
    for round_no in range(rounds):
        for concurrency in CONCURRENCIES:
            for stream in (False, True):
                for target, pid in loadgen.rotated(targets, round_no):
                    before = process_cpu_s(pid)
                    sample = loadgen.run_cell(
                        target,
                        concurrency=concurrency,
                        seconds=seconds,
                        stream=stream,
                        engine=engine,
                    )
                    cell = (target.name, concurrency, stream)
                    cpu[cell] = cpu.get(cell, 0.0) + process_cpu_s(pid) - before
                    results.setdefault(cell, loadgen.Sample()).merge(sample)
                    print(
                        f"  round {round_no + 1}/{rounds} {target.name:<16} c={concurrency:<3} "
                        f"stream={stream!s:<5} {sample.summary()['rps']:8.0f} req/s",
                        file=sys.stderr,
                    )
    return results, cpu


def summarize(
    results: dict[loadgen.Cell, loadgen.Sample], cpu: dict[loadgen.Cell, float]
) -> list[dict[str, Any]]:
    """One row per (proxy, concurrency, stream): direct vs proxy figures and the verdicts."""
    rows = []
    for (name, concurrency, stream), sample in sorted(results.items()):
        if name == "direct":
            continue
        proxy = sample.summary()
        direct_cell = ("direct", concurrency, stream)
        direct = results[direct_cell].summary()
        share = stats.ratio(proxy["rps"], direct["rps"])
        served = max(sample.requests, 1)
        rows.append(
            {
                "proxy": name,
                "c": concurrency,
                "stream": str(stream).lower(),
                "direct_rps": direct["rps"],
                "proxy_rps": proxy["rps"],
                "share": share,
                "direct_p50_ms": direct["p50_ms"],
                "proxy_p50_ms": proxy["p50_ms"],
                "added_p50_ms": proxy["p50_ms"] - direct["p50_ms"],
                "added_p99_ms": proxy["p99_ms"] - direct["p99_ms"],
                "direct_cpu_us": cpu[direct_cell] / max(results[direct_cell].requests, 1) * 1e6,
                "proxy_cpu_us": cpu[(name, concurrency, stream)] / served * 1e6,
                "errors": proxy["errors"] + direct["errors"],
            }
        )
    return rows


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """The target checks, as printable lines."""
    lines = []
    for row in rows:
        if row["stream"] != "false" or row["proxy"] != "memproxy":
            continue
        if row["c"] == 1:
            ok = row["added_p50_ms"] <= TARGET_ADDED_P50_MS
            lines.append(
                f"{'PASS' if ok else 'MISS'} added p50 at c=1: {row['added_p50_ms']:.3f} ms "
                f"(target <= {TARGET_ADDED_P50_MS} ms)"
            )
        if row["c"] == max(CONCURRENCIES):
            ok = row["share"] >= TARGET_THROUGHPUT_SHARE
            lines.append(
                f"{'PASS' if ok else 'MISS'} throughput at c={row['c']}: {row['share']:.0%} of "
                f"direct (target >= {TARGET_THROUGHPUT_SHARE:.0%})"
            )
    return lines


def main() -> None:
    """Run the comparison and print the table and verdicts."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="a few seconds, for CI")
    parser.add_argument("--seconds", type=float, default=4.0, help="per cell and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunks", type=int, default=8, help="content chunks per stream")
    parser.add_argument("--workers", type=int, default=1, help="memproxy worker processes")
    parser.add_argument("--memory", action="store_true", help="leave the memory pipeline on")
    parser.add_argument(
        "--no-access-log", action="store_true", help="MEMPROXY_ACCESS_LOG=false (default: on)"
    )
    parser.add_argument(
        "--engine", choices=loadgen.ENGINES, default="aiohttp", help="non-streaming load tool"
    )
    parser.add_argument(
        "--client",
        action="append",
        default=[],
        help="also memproxy with this upstream.client (repeatable)",
    )
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        help="also memproxy served from this source tree (e.g. an older commit, git archive)",
    )
    parser.add_argument(
        "--baseline-client",
        action="append",
        default=[],
        help="serve the baseline tree once per upstream.client given (default: its default)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    seconds, rounds = (0.4, 1) if args.smoke else (args.seconds, args.rounds)
    extra = {} if args.memory else {"MEMPROXY_MEMORY_ENABLED": "false"}
    if args.no_access_log:
        extra["MEMPROXY_ACCESS_LOG"] = "false"
    print(
        f"memproxy: workers={args.workers} memory={'on' if args.memory else 'off'} "
        f"access_log={'off' if args.no_access_log else 'on'} engine={args.engine}",
        file=sys.stderr,
    )
    with tempfile.TemporaryDirectory(prefix="memproxy-bench-") as tmp, ExitStack() as stack:
        fake = stack.enter_context(fake_upstream(chunks=args.chunks, compress=True, name="fake"))
        upstream = fake.base_url + "/v1"
        servers: dict[str, ServerProcess] = {"direct": fake}
        servers["memproxy"] = memproxy(
            upstream, Path(tmp, "fast"), workers=args.workers, extra_env=extra
        )
        for client in args.client:
            env = {**extra, "MEMPROXY_CONFIG": client_config(Path(tmp), client)}
            servers[f"memproxy-{client}"] = memproxy(
                upstream, Path(tmp, client), workers=args.workers, extra_env=env
            )
        if args.baseline_tree:
            for client in args.baseline_client or [None]:
                env = dict(extra)
                if client:
                    env["MEMPROXY_CONFIG"] = client_config(Path(tmp), client)
                name = f"base-{client}" if client else "memproxy-base"
                base = memproxy(upstream, Path(tmp, name), workers=args.workers, extra_env=env)
                servers[name] = served_from(base, args.baseline_tree, name)
        for name, server in servers.items():
            if name != "direct":
                stack.enter_context(server)
        # The CPU of one worker process is the server's; with workers > 1 it is the parent's.
        targets = [
            (loadgen.Target(name, server.base_url), server.pid) for name, server in servers.items()
        ]
        results, cpu = run_cells(targets, seconds=seconds, rounds=rounds, engine=args.engine)
    rows = summarize(results, cpu)
    print(stats.format_table(rows))
    for line in verdicts(rows):
        print(line)
    if args.json:
        print(json.dumps(rows, indent=2))
    if any(row["errors"] for row in rows):
        raise SystemExit("requests failed during the benchmark")


if __name__ == "__main__":
    main()
