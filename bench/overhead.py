"""What does memproxy cost? The fake upstream called directly vs through ``memproxy serve``.

In one run, interleaved (so noise from other work on the machine falls on both alike): added
latency p50/p99 at concurrency 1 and 50, requests/s, and the proxy's share of direct
throughput, for non-streaming and streaming chat completions. The proxy runs as a real
``python -m proxy serve`` process configured only through ``MEMPROXY_*`` variables, with the
memory pipeline off (``MEMPROXY_MEMORY_ENABLED=false``) unless ``--memory`` is given.

Targets (issue 2, 2-core machine): added p50 <= 1 ms at concurrency 1; proxy throughput >= 40 %
of direct at concurrency 50.

    .venv/bin/python bench/overhead.py             # ~1 minute
    .venv/bin/python bench/overhead.py --smoke     # seconds, for CI
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib import loadgen, stats
from bench.lib.servers import ServerProcess, free_port, memproxy, python_env

TARGET_ADDED_P50_MS = 1.0
TARGET_THROUGHPUT_SHARE = 0.40
CONCURRENCIES = (1, 50)


def fake_process(chunks: int) -> ServerProcess:
    """The test suite's fake upstream (request log off) as a subprocess."""
    port = free_port()
    argv = [sys.executable, "-m", "tests.fakes.upstream", "--port", str(port), "--no-record"]
    argv += ["--chunks", str(chunks)]
    return ServerProcess("fake", argv, port=port, ready_path="/healthz", env=python_env())


def summarize(results: dict[loadgen.Cell, loadgen.Sample]) -> list[dict[str, Any]]:
    """One row per (concurrency, stream): direct vs proxy figures and the verdicts."""
    rows = []
    for (name, concurrency, stream), sample in sorted(results.items()):
        if name != "memproxy":
            continue
        proxy = sample.summary()
        direct = results[("direct", concurrency, stream)].summary()
        share = stats.ratio(proxy["rps"], direct["rps"])
        rows.append(
            {
                "c": concurrency,
                "stream": str(stream).lower(),
                "direct_rps": direct["rps"],
                "proxy_rps": proxy["rps"],
                "share": share,
                "direct_p50_ms": direct["p50_ms"],
                "proxy_p50_ms": proxy["p50_ms"],
                "added_p50_ms": proxy["p50_ms"] - direct["p50_ms"],
                "added_p99_ms": proxy["p99_ms"] - direct["p99_ms"],
                "errors": proxy["errors"] + direct["errors"],
            }
        )
    return rows


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """The target checks, as printable lines."""
    lines = []
    for row in rows:
        if row["stream"] != "false":
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
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    seconds, rounds = (0.4, 1) if args.smoke else (args.seconds, args.rounds)
    extra = {} if args.memory else {"MEMPROXY_MEMORY_ENABLED": "false"}
    if args.no_access_log:
        extra["MEMPROXY_ACCESS_LOG"] = "false"
    print(
        f"memproxy: workers={args.workers} memory={'on' if args.memory else 'off'} "
        f"access_log={'off' if args.no_access_log else 'on'}",
        file=sys.stderr,
    )
    with (
        tempfile.TemporaryDirectory(prefix="memproxy-bench-") as data_dir,
        fake_process(args.chunks) as fake,
        memproxy(
            fake.base_url + "/v1", Path(data_dir), workers=args.workers, extra_env=extra
        ) as proxy,
    ):
        targets = [
            loadgen.Target("direct", fake.base_url),
            loadgen.Target("memproxy", proxy.base_url),
        ]
        results = loadgen.run_interleaved(
            targets,
            concurrencies=CONCURRENCIES,
            seconds=seconds,
            rounds=rounds,
            streams=(False, True),
        )
    rows = summarize(results)
    print(stats.format_table(rows))
    for line in verdicts(rows):
        print(line)
    if args.json:
        print(json.dumps(rows, indent=2))
    if any(row["errors"] for row in rows):
        raise SystemExit("requests failed during the benchmark")


if __name__ == "__main__":
    main()
