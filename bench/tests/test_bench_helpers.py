"""Tests of the pure benchmark helpers: statistics, tables, interleaving, memories, peer config."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import zlib
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.lib import fake_upstream, loadgen, memories, servers, stats
from bench.peers import litellm_proxy


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([1.0], 50, 1.0),
        ([1.0, 2.0, 3.0], 50, 2.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
        ([4.0, 1.0, 3.0, 2.0], 0, 1.0),
        ([4.0, 1.0, 3.0, 2.0], 100, 4.0),
        (list(map(float, range(101))), 99, 99.0),
    ],
)
def test_percentile(values: list[float], q: float, expected: float) -> None:
    assert stats.percentile(values, q) == pytest.approx(expected)


def test_percentile_empty_is_nan_and_bad_q_raises() -> None:
    assert math.isnan(stats.percentile([], 50))
    with pytest.raises(ValueError, match=r"0\.\.100"):
        stats.percentile([1.0], 101)


@given(st.lists(st.floats(0, 1e6), min_size=1, max_size=50), st.floats(0, 100))
def test_percentile_within_bounds(values: list[float], q: float) -> None:
    assert min(values) <= stats.percentile(values, q) <= max(values)


def test_summarize_ms_converts_seconds() -> None:
    summary = stats.summarize_ms([0.001, 0.002, 0.003])
    assert summary["p50"] == pytest.approx(2.0)
    assert summary["count"] == 3.0
    assert summary["max"] == pytest.approx(3.0)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1234.5, "1,234"),
        (12.345, "12.35"),
        (0.1234, "0.123"),
        (math.nan, "-"),
        ("x", "x"),
        (7, "7"),
    ],
)
def test_format_cell(value: object, expected: str) -> None:
    assert stats.format_cell(value) == expected


def test_format_table_aligns_columns() -> None:
    table = stats.format_table([{"name": "a", "rps": 1.5}, {"name": "bbb", "rps": 100.0}])
    lines = table.splitlines()
    assert lines[0].split() == ["name", "rps"]
    assert len({len(line) for line in lines[:2]}) == 1
    assert lines[3].endswith("100")
    assert stats.format_table([]) == "(no rows)"


@pytest.mark.parametrize(
    ("items", "shift", "expected"),
    [([1, 2, 3], 0, [1, 2, 3]), ([1, 2, 3], 1, [2, 3, 1]), ([1, 2, 3], 4, [2, 3, 1]), ([], 2, [])],
)
def test_rotated(items: list[int], shift: int, expected: list[int]) -> None:
    assert loadgen.rotated(items, shift) == expected


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 6])
def test_balanced_orders_put_every_item_in_every_position(count: int) -> None:
    orders = loadgen.balanced_orders(count)
    assert len(orders) == count
    assert all(sorted(order) == list(range(count)) for order in orders)
    assert all(sorted(o[p] for o in orders) == list(range(count)) for p in range(count))
    if count % 2 == 0:  # and each item after every other once
        pairs = [(o[p], o[p + 1]) for o in orders for p in range(count - 1)]
        assert sorted(pairs) == sorted((a, b) for a in range(count) for b in range(count) if a != b)


def test_balanced_plan_runs_low_concurrency_first_every_target_in_every_position() -> None:
    targets = [loadgen.Target(name, "http://x") for name in "abcd"]
    plan = loadgen.cell_plan(targets, [1, 50], [False], rounds=3, seconds=4.0, balanced=True)
    concurrencies = [concurrency for _, concurrency, *_ in plan]
    assert concurrencies == sorted(concurrencies)  # no c=1 cell after a c=50 one
    for round_no in range(3):
        for concurrency in (1, 50):
            block = [c for c in plan if c[:2] == (round_no, concurrency)]
            names = [target.name for *_, target, _ in block]
            # four passes of the four targets, each target once in each position of a pass
            passes = [names[i : i + 4] for i in range(0, 16, 4)]
            assert all(sorted(p) == list("abcd") for p in passes)
            assert all(sorted(p[i] for p in passes) == list("abcd") for i in range(4))
            # each target's time in the round as before: ``seconds`` split over its cells
            assert sum(s for *_, target, s in block if target.name == "a") == pytest.approx(4.0)


def test_rotated_plan_is_the_old_order() -> None:
    targets = [loadgen.Target(name, "http://x") for name in "ab"]
    plan = loadgen.cell_plan(targets, [1, 50], [False], rounds=2, seconds=4.0)
    assert [(r, c, t.name, s) for r, c, _, t, s in plan] == [
        (0, 1, "a", 4.0),
        (0, 1, "b", 4.0),
        (0, 50, "a", 4.0),
        (0, 50, "b", 4.0),
        (1, 1, "b", 4.0),
        (1, 1, "a", 4.0),
        (1, 50, "b", 4.0),
        (1, 50, "a", 4.0),
    ]


class FakeServer:
    """A server's CPU reading: each ``busy`` poll it has used a full second more."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.busy = 0

    def read(self) -> float:
        if self.busy:
            self.busy -= 1
            self.cpu += 1.0
        return self.cpu


def test_balanced_run_waits_until_every_server_is_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server's work after its answers (or a timer's) may start while another's cell runs:
    the next cell waits for it, whichever server it loads."""
    servers_ = {"a": FakeServer(), "b": FakeServer()}
    busy_at_start: list[int] = []

    def fake_cell(target: loadgen.Target, **kwargs: object) -> loadgen.Sample:
        if kwargs["concurrency"] != 4:  # not the warm-up
            busy_at_start.append(sum(server.busy for server in servers_.values()))
        for name, server in servers_.items():
            if name != target.name:
                server.busy = 3
        return loadgen.Sample(latencies=[0.001], elapsed=1.0)

    monkeypatch.setattr(loadgen, "run_cell", fake_cell)
    monkeypatch.setattr(loadgen.time, "sleep", lambda seconds: None)
    targets = [loadgen.Target("a", "http://a"), loadgen.Target("b", "http://b")]
    readers = {name: server.read for name, server in servers_.items()}
    records: list[dict[str, object]] = []
    loadgen.run_interleaved(
        targets,
        concurrencies=(1,),
        seconds=1.0,
        rounds=2,
        log=False,
        server_cpu=readers,
        cells=records,
        balanced=True,
    )
    assert busy_at_start == [0] * 8
    # one record per cell, in run order, each naming the cell before it
    assert [(r["round"], r["position"], r["target"]) for r in records][:3] == [
        (1, 1, "a"),
        (1, 2, "b"),
        (1, 3, "b"),
    ]
    assert records[0]["after"] == "warm-up"
    assert records[1]["after"] == "a c=1"


def test_sample_merge_pools_rounds_and_summary() -> None:
    first = loadgen.Sample(latencies=[0.001, 0.003], elapsed=1.0, cpu=0.01)
    first.merge(loadgen.Sample(latencies=[0.002], ttfc=[0.0005], errors=1, elapsed=1.0))
    summary = first.summary()
    assert summary["requests"] == 3.0
    assert summary["errors"] == 1.0
    assert summary["rps"] == pytest.approx(1.5)
    assert summary["p50_ms"] == pytest.approx(2.0)
    assert summary["ttfc_p50_ms"] == pytest.approx(0.5)


def test_result_rows_add_latency_over_baseline() -> None:
    results = {
        ("direct", 1, False): loadgen.Sample(latencies=[0.001], elapsed=1.0),
        ("proxy", 1, False): loadgen.Sample(latencies=[0.004], elapsed=1.0),
    }
    rows = {row["target"]: row for row in loadgen.result_rows(results, baseline="direct")}
    assert rows["proxy"]["added_p50_ms"] == pytest.approx(3.0)
    assert rows["direct"]["added_p50_ms"] == pytest.approx(0.0)


def test_synthetic_memories_are_deterministic_and_valid() -> None:
    now = datetime(2026, 11, 22, tzinfo=UTC)
    first = memories.synthetic_memories(50, "u", now)
    assert first == memories.synthetic_memories(50, "u", now)
    assert len({m["content"] for m in first}) == 50
    sources = {source for source, _ in memories.SOURCES_WEIGHTED}
    for item in first:
        assert item["source"] in sources
        assert item["user"] == "u"
        assert datetime.fromisoformat(item["created_at"]) <= now


def test_batches_cover_every_item_once() -> None:
    items = [{"n": i} for i in range(450)]
    chunks = list(memories.batches(items, 200))
    assert [len(c) for c in chunks] == [200, 200, 50]
    assert [x for c in chunks for x in c] == items


def test_peer_config_forwards_to_upstream_without_database() -> None:
    config = litellm_proxy.peer_config("http://127.0.0.1:9/v1")
    (model,) = config["model_list"]  # type: ignore[misc]
    assert model["litellm_params"]["api_base"] == "http://127.0.0.1:9/v1"
    assert model["litellm_params"]["model"] == "openai/fake-model"
    general = config["general_settings"]
    assert general["disable_spend_logs"] is True  # type: ignore[index]
    assert "database_url" not in general  # type: ignore[operator]


def test_peer_env_strips_database(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgres://x")
    env = litellm_proxy.peer_env()
    assert "DATABASE_URL" not in env
    assert env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"


def test_unique_chat_bodies_are_distinct_json_with_the_stream_flag() -> None:
    build = loadgen.unique_chat_bodies(True, base=0)
    other = loadgen.unique_chat_bodies(True, base=loadgen.UNIQUE_STRIDE)
    bodies = [json.loads(build(n)) for n in range(200)] + [json.loads(other(0))]
    questions = [b["messages"][-1]["content"] for b in bodies]
    assert len(set(questions)) == len(questions)
    assert all(b["stream"] is True and b["messages"][0]["role"] == "system" for b in bodies)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (
            "budget;dur=0.120, search;dur=3.700, memory;dur=6.2",
            {"budget": 0.12, "search": 3.7, "memory": 6.2},
        ),
        ("cache;desc=miss, embed;dur=0.35", {"embed": 0.35}),
        ("", {}),
    ],
)
def test_parse_server_timing(header: str, expected: dict[str, float]) -> None:
    assert loadgen.parse_server_timing(header) == pytest.approx(expected)


def test_run_interleaved_gives_each_target_its_own_bodies(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, list[object]] = {}

    def fake_cell(target: loadgen.Target, **kwargs: object) -> loadgen.Sample:
        seen.setdefault(target.name, []).append(kwargs.get("body"))
        return loadgen.Sample(latencies=[0.001], elapsed=1.0)

    monkeypatch.setattr(loadgen, "run_cell", fake_cell)
    targets = [loadgen.Target("a", "http://a"), loadgen.Target("b", "http://b")]
    marker = b"{}"
    loadgen.run_interleaved(
        targets,
        concurrencies=(1,),
        seconds=0.1,
        rounds=2,
        unique_queries=True,
        bodies={"a": lambda stream: marker},
        log=False,
    )
    assert seen["a"][1:] == [marker, marker]  # the first call is the warm-up
    assert all(callable(body) for body in seen["b"][1:])  # unique template questions


def test_engine_cpu_counts_only_the_search_pool_threads(tmp_path: Path) -> None:
    tick = os.sysconf("SC_CLK_TCK")
    threads = {"7": "python", "8": "edge-search-0", "9": "edge-search-1", "10": "libuv-worker"}
    for tid, name in threads.items():
        task = tmp_path / "7" / "task" / tid
        task.mkdir(parents=True)
        # pid (comm) state then fields 4..; utime and stime are the 14th and 15th
        task.joinpath("stat").write_text(f"{tid} ({name}) S {' '.join(['0'] * 10)} {tick} {tick}")
    assert loadgen.engine_cpu_s(7, proc=tmp_path) == pytest.approx(4.0)  # 2 threads x 2 s
    assert loadgen.engine_cpu_s(8, proc=tmp_path) == 0.0  # no such process


def test_run_interleaved_charges_each_cell_its_engine_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    spent = iter([0.0, 0.5, 0.5, 1.5])  # before and after each cell (the warm-up reads none)
    sample = loadgen.Sample
    monkeypatch.setattr(loadgen, "run_cell", lambda target, **kw: sample(latencies=[0.001]))
    results = loadgen.run_interleaved(
        [loadgen.Target("a", "http://a")],
        concurrencies=(1, 50),
        seconds=0.1,
        rounds=1,
        log=False,
        engine_cpu={"a": lambda: next(spent)},
    )
    assert results[("a", 1, False)].engine_cpu == pytest.approx(0.5)
    assert results[("a", 50, False)].engine_cpu == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("accept_encoding", "gzip"),
    [
        (None, False),
        ("", False),
        ("gzip, deflate", True),
        ("br, GZIP;q=0.5", True),
        ("gzip;q=0", False),
        ("*", True),
        ("identity", False),
    ],
)
def test_fake_upstream_gzips_only_when_accepted(accept_encoding: str | None, gzip: bool) -> None:
    assert fake_upstream.accepts_gzip(accept_encoding) is gzip


def test_fake_upstream_gzip_stream_decodes_event_by_event() -> None:
    events = fake_upstream.stream_events("m", 3)
    pieces = fake_upstream.gzipped(events)
    decoder = zlib.decompressobj(fake_upstream.GZIP_WBITS)
    # Each flushed piece decodes to its event as it arrives: the client sees no delay.
    assert [decoder.decompress(piece) for piece in pieces[:-1]] == events
    assert decoder.decompress(pieces[-1]) == b""
    assert decoder.eof


def test_memproxy_runs_from_its_tree_as_a_baseline_tree_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This tree's server and a ``--baseline-tree`` one start alike: the working directory and
    the import path are the tree's alone, whatever the caller's ``PYTHONPATH`` holds."""
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    here = servers.memproxy("http://127.0.0.1:1/v1", tmp_path / "a", port=1)
    tree = tmp_path / "tree"
    there = servers.served_from(
        servers.memproxy("http://127.0.0.1:1/v1", tmp_path / "b", port=2), tree, "memproxy@base"
    )
    assert (here.cwd, here.env["PYTHONPATH"]) == (servers.ROOT, str(servers.ROOT))
    assert (there.cwd, there.env["PYTHONPATH"]) == (tree.resolve(), str(tree.resolve()))
    assert set(here.env) == set(there.env)


def test_a_server_run_from_a_tree_finds_the_callers_relative_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It runs in its tree, not in the caller's directory: a relative config file or data
    directory (``bench/pipeline.py --variant-config counts.yaml``) is the caller's."""
    monkeypatch.chdir(tmp_path)
    config = {"MEMPROXY_CONFIG": "variant.yaml"}
    here = servers.memproxy("http://127.0.0.1:1/v1", Path("data"), port=1, extra_env=config)
    there = servers.served_from(
        servers.memproxy("http://127.0.0.1:1/v1", Path("old"), port=2, extra_env=config),
        tmp_path / "tree",
        "memproxy@base",
    )
    for server, data in ((here, "data"), (there, "old")):
        assert server.env["MEMPROXY_CONFIG"] == str(tmp_path / "variant.yaml")
        assert server.env["MEMPROXY_DATA_DIR"] == str(tmp_path / data)


@pytest.mark.parametrize(
    ("cpus", "expected"),
    [
        ({0, 1}, ({0}, {1})),
        ({3, 1}, ({1}, {3})),
        ({0, 1, 2, 3, 4}, ({0, 1}, {2, 3, 4})),
        ({0}, None),
        (set(), None),
    ],
)
def test_cpu_sides_give_the_servers_the_upper_half(
    cpus: set[int], expected: tuple[set[int], set[int]] | None
) -> None:
    assert servers.cpu_sides(cpus) == expected


def allowed_cpus(pid: int) -> set[frozenset[int]]:
    """The CPU sets of every thread of ``pid``."""
    return {
        frozenset(os.sched_getaffinity(int(t.name))) for t in Path(f"/proc/{pid}/task").iterdir()
    }


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to pin to one")
def test_a_server_given_cpus_runs_only_on_them() -> None:
    """Every thread of a server started with ``cpus`` (the fake upstream here) is pinned to
    them, not only the one that was running when it was pinned; one without runs anywhere."""
    one = frozenset({max(os.sched_getaffinity(0))})
    with servers.fake_upstream(cpus=one) as pinned, servers.fake_upstream() as free:
        assert pinned.pid is not None
        assert free.pid is not None
        assert allowed_cpus(pinned.pid) == {one}
        assert allowed_cpus(free.pid) == {frozenset(os.sched_getaffinity(0))}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to pin to one")
def test_pin_moves_every_thread_of_a_running_process() -> None:
    code = "import threading, time; threading.Thread(target=time.sleep, args=(60,)).start(); "
    code += "print(flush=True); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"\n"
        one = frozenset({min(os.sched_getaffinity(0))})
        servers.pin(proc.pid, one)
        assert len(list(Path(f"/proc/{proc.pid}/task").iterdir())) == 2
        assert allowed_cpus(proc.pid) == {one}
    finally:
        proc.kill()
        proc.wait()
