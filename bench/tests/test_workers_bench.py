"""``bench/workers.py``'s A/B plumbing: which servers a run starts, in which order they run, and
which ratios it reports. A wrong pairing would print a ratio of the wrong servers."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bench import workers
from bench.workers import Cell, Variant


def cell(injected: int) -> Cell:
    """A cell of ``injected`` memory-on answers in one second."""
    cpu = dict.fromkeys(workers.CPU_PARTS, 0.0)
    return Cell(injected, 0, injected, 1.0, 1.0, 2.0, cpu, 0)


def test_merged_lays_mappings_over_key_by_key() -> None:
    base = {"memory": {"deadline_ms": 10, "stage_timeouts": {"embed_ms": 5}}, "x": 1}
    over = {"memory": {"stage_timeouts": {"search_ms": 7}}, "store": {"search_threads": 1}}
    assert workers.merged(base, over) == {
        "memory": {"deadline_ms": 10, "stage_timeouts": {"embed_ms": 5, "search_ms": 7}},
        "x": 1,
        "store": {"search_threads": 1},
    }
    assert base["memory"] == {"deadline_ms": 10, "stage_timeouts": {"embed_ms": 5}}


def test_variants_from_files_and_thread_values(tmp_path: Path) -> None:
    config = tmp_path / "counts-off.yaml"
    config.write_text("memory:\n  count_flush_s: 0\n")
    found = workers.variants([config], ["1", "auto"], tmp_path)
    assert found == [
        Variant("", {}),
        Variant("+counts-off", {"memory": {"count_flush_s": 0}}),
        Variant("+threads-1", {"store": {"search_threads": 1}}),
        Variant("+threads-auto", {"store": {"search_threads": "auto"}}),
        Variant("@base", {}, tmp_path),
    ]
    with pytest.raises(SystemExit, match="repeat"):
        workers.variants([], ["2", "2"])
    config.write_text("- a list\n")
    with pytest.raises(SystemExit, match="mapping"):
        workers.variants([config], [])


def test_every_variant_gets_a_one_and_an_n_worker_server() -> None:
    specs = workers.servers_of([Variant("", {}), Variant("+b", {"x": 1})], 3)
    assert [(s.name, s.variant.name, s.workers) for s in specs] == [
        ("workers-1", "", 1),
        ("workers-3", "", 3),
        ("workers-1+b", "+b", 1),
        ("workers-3+b", "+b", 3),
    ]


def test_round_order_puts_every_server_in_every_position() -> None:
    names = ["a", "b", "c", "d"]
    orders = [workers.round_order(names, r) for r in range(len(names))]
    assert all(sorted(order) == names for order in orders)
    for position in range(len(names)):
        assert sorted(order[position] for order in orders) == names
    assert workers.round_order(["a", "b"], 1) == ["b", "a"]


def test_ratio_rows_pair_the_servers_per_round_and_take_medians() -> None:
    variant_list = [Variant("", {}), Variant("+t1", {})]
    columns = workers.ratio_columns(variant_list, 2)
    assert columns == {
        "2/1": ("workers-2", "workers-1"),
        "2/1+t1": ("workers-2+t1", "workers-1+t1"),
        "1+t1/1": ("workers-1+t1", "workers-1"),
        "2+t1/2": ("workers-2+t1", "workers-2"),
        "2+t1/1": ("workers-2+t1", "workers-1"),
    }
    cells = {
        "workers-1": [cell(100), cell(100), cell(200)],
        "workers-2": [cell(150), cell(190), cell(300)],
        "workers-1+t1": [cell(50), cell(100), cell(100)],
        "workers-2+t1": [cell(100), cell(200), cell(400)],
    }
    rows = workers.ratio_rows(cells, columns)
    assert [row["2/1"] for row in rows] == [1.5, 1.9, 1.5, 1.5]
    assert [row["2+t1/1"] for row in rows] == [1.0, 2.0, 2.0, 2.0]
    assert [row["2/1+t1"] for row in rows] == [2.0, 2.0, 4.0, 2.0]
    assert rows[-1]["round"] == "median"


def test_listening_and_connections_find_the_server_side_of_a_port() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert workers.listening(os.getpid(), port)
        assert not workers.listening(os.getpid(), port + 1 if port < 65535 else port - 1)
        if shutil.which("ss") is None:
            pytest.skip("no ss")
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            with accepted:
                client.sendall(b"x")
                assert accepted.recv(1) == b"x"
                # Only the accepted end counts (the client's local port is another one).
                assert workers.connections([os.getpid(), 1], port) == (1, 0)


def files(root: Path) -> list[tuple[Path, int]]:
    """Every file and directory under ``root`` with its modification time."""
    return sorted((p.relative_to(root), p.stat().st_mtime_ns) for p in root.rglob("*"))


def test_store_layout_counts_the_points_outside_the_graph(tmp_path: Path) -> None:
    """The seeded store's layout is reported per tree (each seeds by its own build rule); read
    from a copy, so the served stores start from untouched files."""
    from proxy.memory.edge import EdgeStore
    from tests.memory.support import record, vectors_for

    async def seed() -> None:
        store = await EdgeStore.open(tmp_path, dimensions=8, optimize_after=None)
        batch = [record(f"m{i}") for i in range(30)]
        await store.add(batch, vectors_for(batch, 8))
        await store.close()

    asyncio.run(seed())
    before = files(tmp_path)
    assert workers.store_layout(tmp_path) == (30, 30)  # a small store: all scanned exactly
    assert files(tmp_path) == before


# A seeder whose index build ends late: its child (named as the build module) runs a while,
# the copy appears meanwhile, and after the child ends the link moves to the copy and the old
# generation goes, as ``edge_maintenance`` swaps a build in. Then it serves until stopped.
LATE_BUILDER = """
import os, shutil, subprocess, sys, time
from pathlib import Path
data, build_s = Path(sys.argv[1]), float(sys.argv[2])
child = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({build_s})",
                          "proxy.memory.edge_build"])
print("building", flush=True)
time.sleep(0.2)
(data / "memories.g1").mkdir()
child.wait()
time.sleep(0.3)  # the parent opens the built copy and replays the writes
os.symlink("memories.g1", data / "memories.new")
os.replace(data / "memories.new", data / "memories")
shutil.rmtree(data / "memories.g0")
time.sleep(600)
"""


def late_builder(data: Path, build_s: float) -> subprocess.Popen[str]:
    """A fake seeder (``LATE_BUILDER``) on ``data``, its build started."""
    (data / "memories.g0").mkdir()
    (data / "memories").symlink_to("memories.g0")
    argv = [sys.executable, "-c", LATE_BUILDER, str(data), str(build_s)]
    seeder = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert seeder.stdout is not None
    assert seeder.stdout.readline().strip() == "building"
    return seeder


def stop(seeder: subprocess.Popen[str]) -> None:
    os.killpg(seeder.pid, signal.SIGKILL)
    seeder.wait()
    if seeder.stdout is not None:
        seeder.stdout.close()


def test_the_seeder_is_stopped_only_after_its_index_build_is_swapped_in(tmp_path: Path) -> None:
    """Stopped mid-build, the seeded store keeps every point outside the graph: the bench
    waits for the build's child, its copy and the swap (the old generation gone)."""
    seeder = late_builder(tmp_path, build_s=0.5)
    try:
        workers.wait_for_builds(seeder.pid, tmp_path, timeout_s=60, quiet_s=0.5)
        assert (tmp_path / "memories").resolve().name == "memories.g1"
        assert not (tmp_path / "memories.g0").exists()
        assert not workers.build_in_flight(seeder.pid, tmp_path)
    finally:
        stop(seeder)


def test_a_build_that_never_ends_fails_the_run(tmp_path: Path) -> None:
    seeder = late_builder(tmp_path, build_s=600)
    try:
        with pytest.raises(RuntimeError, match="still runs"):
            workers.wait_for_builds(seeder.pid, tmp_path, timeout_s=0.5, quiet_s=0.2)
    finally:
        stop(seeder)
