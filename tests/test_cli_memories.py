"""``memproxy memories import|export|search`` and ``memproxy explain``, run in-process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from proxy.cli import EXIT_BROKEN_PIPE, main
from proxy.cli_memories import EXIT_BAD_INPUT, EXIT_LOCKED, Progress
from proxy.memory.inputs import MemoryInput
from proxy.memory.io import batches
from tests.test_cli import free_port

ROOT = Path(__file__).resolve().parents[1]
RECORDS = [
    {"id": "tea", "content": "Alice drinks green tea every morning", "user": "alice"},
    {"id": "bike", "content": "Bob rides his bike to work", "user": "bob", "source": "playbook"},
    {"content": "The office closes at 6 pm", "created_at": "2024-03-01T09:00:00Z"},
]


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty embedded store for the command (settings come from the environment)."""
    folder = tmp_path / "data"
    for name in ("MEMPROXY_CONFIG", "MEMPROXY_QDRANT_URL", "MEMPROXY_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MEMPROXY_DATA_DIR", str(folder))
    # Commands without --tenant/--key work on the shared anonymous tenant, which is now an
    # operator's choice (adr/0086); these tests are about the commands, so they turn it on.
    monkeypatch.setenv("MEMPROXY_AUTH_ANONYMOUS", "true")
    return folder


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def export(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    capsys.readouterr()
    assert main(["memories", "export", *args]) == 0
    return [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_import_jsonl_then_export_and_search(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_jsonl(tmp_path / "m.jsonl", RECORDS)
    assert main(["memories", "import", str(source), "--batch-size", "2"]) == 0
    captured = capsys.readouterr()
    summary = orjson.loads(captured.out)
    assert summary["imported"] == 3
    assert summary["skipped"] == 0
    assert summary["tenant"] == "anonymous"
    assert "importing [" in captured.err
    assert "3/3 (100%)" in captured.err
    exported = export(capsys)
    assert {m["content"] for m in exported} == {r["content"] for r in RECORDS}
    assert {m["id"] for m in exported} >= {"tea", "bike"}
    office = next(m for m in exported if m["content"].startswith("The office"))
    assert office["created_at"] == "2024-03-01T09:00:00Z"
    assert [m["id"] for m in export(capsys, "--user", "bob", "--source", "playbook")] == ["bike"]
    assert main(["memories", "search", "which tea does alice drink", "--user", "alice"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[1] == "tea"
    assert all("bike" not in line for line in lines)  # bob's memory is not alice's
    assert main(["memories", "search", "tea", "--user", "alice", "--json", "--top-k", "1"]) == 0
    hits = orjson.loads(capsys.readouterr().out)["data"]
    assert [h["id"] for h in hits] == ["tea"]
    assert 0 < hits[0]["similarity"] <= 1


def test_json_array_import_is_idempotent_with_ids(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "m.json"
    with_ids = [{**r, "id": f"r{i}"} for i, r in enumerate(RECORDS)]
    source.write_bytes(b"  \n" + orjson.dumps(with_ids, option=orjson.OPT_INDENT_2))
    for _ in range(2):
        assert main(["memories", "import", str(source), "--quiet"]) == 0
    assert "importing" not in capsys.readouterr().err
    assert sorted(m["id"] for m in export(capsys)) == ["r0", "r1", "r2"]


def test_export_imports_back_unchanged_into_another_tenant(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_jsonl(tmp_path / "m.jsonl", [{**RECORDS[0], "usefulness": 0.9}])
    assert main(["memories", "import", str(source), "--key", "sk-one", "--quiet"]) == 0
    first = export(capsys, "--key", "sk-one")
    dump = write_jsonl(tmp_path / "dump.jsonl", [{**first[0], "retrieval_count": 7}])
    assert main(["memories", "import", str(dump), "--key", "sk-two", "--quiet"]) == 0
    (second,) = export(capsys, "--key", "sk-two")
    assert second == {**first[0], "retrieval_count": 7}
    assert export(capsys, "--key", "sk-three") == []


def test_invalid_records_stop_the_import_before_any_write(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = [RECORDS[0], {"content": ""}, "text", {"content": "x", "created_at": "soon"}]
    source = write_jsonl(tmp_path / "bad.jsonl", bad)
    with source.open("ab") as handle:
        handle.write(b"{not json\n")
    assert main(["memories", "import", str(source)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    for where in ("line 2", "line 3", "line 4", "line 5"):
        assert f"{where}:" in err
    assert "nothing imported" in err
    assert export(capsys) == []
    assert main(["memories", "import", str(source), "--skip-invalid", "--quiet"]) == 0
    assert orjson.loads(capsys.readouterr().out)["skipped"] == 4
    assert [m["id"] for m in export(capsys)] == ["tea"]


def test_a_store_held_by_another_process_is_a_clear_error(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import asyncio, sys\n"
            "from proxy.memory.edge import EdgeStore\n"
            "from proxy.memory.embedders import StaticEmbedder\n"
            "async def hold():\n"
            "    s = await EdgeStore.open(sys.argv[1], dimensions=StaticEmbedder().dimensions)\n"
            "    print('open', flush=True)\n"
            "    sys.stdin.readline()\n"
            "    await s.close()\n"
            "asyncio.run(hold())\n",
            str(data_dir),
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == b"open"
        source = write_jsonl(tmp_path / "m.jsonl", RECORDS)
        assert main(["memories", "import", str(source), "--quiet"]) == EXIT_LOCKED
    finally:
        holder.communicate(b"\n", timeout=30)
    err = capsys.readouterr().err
    assert "in use by another process" in err
    assert "POST /v1/memories" in err


def test_keys_mode_needs_a_known_tenant(
    data_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = tmp_path / "memproxy.yaml"
    config.write_text("auth:\n  mode: keys\n  tenants:\n    acme:\n      keys: [env:ACME_KEY]\n")
    monkeypatch.setenv("ACME_KEY", "sk-acme")
    monkeypatch.delenv("MEMPROXY_AUTH_ANONYMOUS")  # passthrough only: an error in keys mode
    source = write_jsonl(tmp_path / "m.jsonl", RECORDS[:1])
    base = ["memories", "import", str(source), "--quiet", "--config", str(config)]
    assert main(base) == 2
    assert main([*base, "--tenant", "nobody"]) == 2
    assert "unknown tenant" in capsys.readouterr().err
    assert main([*base, "--key", "sk-acme"]) == 0
    assert orjson.loads(capsys.readouterr().out)["tenant"] == "acme"
    assert [m["id"] for m in export(capsys, "--config", str(config), "--tenant", "acme")] == ["tea"]


def test_explain_prints_what_would_be_injected(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_jsonl(tmp_path / "m.jsonl", RECORDS)
    assert main(["memories", "import", str(source), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["explain", "What does Alice drink?", "--user", "alice", "--json"]) == 0
    document = orjson.loads(capsys.readouterr().out)
    assert document["object"] == "memory.explain"
    ids = [m["id"] for m in document["memories"]]
    assert "tea" in ids
    assert "bike" not in ids
    assert "Alice drinks green tea" in document["block"]
    assert main(["explain", "What does Alice drink?", "--user", "alice"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("model gpt-4o:")
    assert "Alice drinks green tea" in text


def test_batches_split_on_size_and_on_a_repeated_id() -> None:
    items = [MemoryInput(content=str(i), id=i_d) for i, i_d in enumerate("abcadx")]
    sizes = [[m.id for m in b] for b in batches(items, 3)]
    assert sizes == [["a", "b", "c"], ["a", "d", "x"]]
    assert [len(b) for b in batches([MemoryInput(content="x")] * 5, 2)] == [2, 2, 1]


def test_progress_bar_reports_counts_and_rate(tmp_path: Path) -> None:
    path = tmp_path / "err.txt"
    with path.open("w") as stream:
        bar = Progress(4, stream, enabled=True)
        bar.advance(4)
        bar.finish()
    text = path.read_text()
    assert "4/4 (100%)" in text
    assert "memories/s" in text
    assert text.endswith("\n")


def test_passthrough_refuses_a_tenant_no_request_can_reach(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_jsonl(tmp_path / "m.jsonl", RECORDS[:1])
    assert main(["memories", "import", str(source), "--tenant", "acme", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "no request can reach tenant 'acme'" in err
    assert "--key" in err
    assert export(capsys, "--tenant", "acme", "--force") == []  # nothing was written
    # --force writes it anyway; a key's own id (as --key prints it) is reachable, so accepted.
    assert main(["memories", "import", str(source), "--tenant", "acme", "--force"]) == 0
    assert main(["memories", "import", str(source), "--key", "sk-acme", "--quiet"]) == 0
    tenant = orjson.loads(capsys.readouterr().out.splitlines()[-1])["tenant"]
    assert tenant.startswith("t-")
    assert [m["id"] for m in export(capsys, "--tenant", tenant)] == ["tea"]


def test_a_missing_file_is_one_line(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere.jsonl"
    assert main(["memories", "import", str(missing)]) == EXIT_BAD_INPUT
    assert (
        capsys.readouterr().err == f"memproxy: cannot read {missing}: No such file or directory\n"
    )
    target = str(tmp_path / "no-dir" / "dump.jsonl")
    assert main(["memories", "export", "-o", target]) == EXIT_BAD_INPUT
    assert (
        capsys.readouterr().err == f"memproxy: cannot write {target}: No such file or directory\n"
    )


def run_cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    argv = [sys.executable, "-m", "proxy", *args]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, timeout=120, check=False)


def test_an_embedder_mismatch_is_one_line_without_a_traceback(
    data_dir: Path, tmp_path: Path
) -> None:
    source = write_jsonl(tmp_path / "m.jsonl", RECORDS[:1])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    assert (
        run_cli("memories", "import", str(source), "--quiet", cwd=tmp_path, env=env).returncode == 0
    )
    smaller = tmp_path / "small.yaml"
    smaller.write_text("embedder:\n  dimensions: 64\n")
    for args in (
        ("memories", "import", str(source), "--quiet"),
        ("explain", "What does Alice drink?"),
    ):
        done = run_cli(*args, "--config", str(smaller), cwd=tmp_path, env=env)
        assert done.returncode == 2, args
        err = done.stderr.decode()
        assert err.count("\n") == 1, err
        assert "Traceback" not in err
        assert "64 dimensions" in err
        assert "use the embedder it was built with" in err
    # The server refuses to start the same way: one line of its own, no traceback.
    port = str(free_port())
    served = run_cli("serve", "--port", port, "--config", str(smaller), cwd=tmp_path, env=env)
    assert served.returncode != 0
    err = served.stderr.decode()
    assert "Traceback" not in err
    assert err.count("configuration error: the memory store") == 1


def test_explain_into_a_closed_pipe_stops_quietly(data_dir: Path, tmp_path: Path) -> None:
    """`memproxy explain ... | head`: the reader left before the answer was written."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "proxy", "explain", "What does Alice drink?"]
    proc = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    proc.stdout.close()  # the reader is gone before memproxy has loaded anything
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == EXIT_BROKEN_PIPE
    assert err == ""


def test_expiry_and_supersession_survive_export_and_import(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An export carries the lifecycle (adr/0113): the superseded memory and its links, and the
    # expiry, so an import restores the history instead of reviving the old memory.
    future = "2999-01-01T00:00:00Z"
    dump = [
        {"id": "old", "content": "Lives in Porto", "user": "u", "superseded_by": "new"},
        {"id": "new", "content": "Lives in Berlin", "user": "u", "supersedes": "old"},
        {"id": "trip", "content": "In Lisbon this week", "user": "u", "expires_at": future},
    ]
    source = write_jsonl(tmp_path / "m.jsonl", dump)
    assert main(["memories", "import", str(source), "--tenant", "one", "--force", "--quiet"]) == 0
    first = {m["id"]: m for m in export(capsys, "--tenant", "one", "--force")}
    assert (first["old"]["superseded_by"], first["new"]["supersedes"]) == ("new", "old")
    assert first["trip"]["expires_at"] == future
    again = write_jsonl(tmp_path / "dump.jsonl", list(first.values()))
    assert main(["memories", "import", str(again), "--tenant", "two", "--force", "--quiet"]) == 0
    assert {m["id"]: m for m in export(capsys, "--tenant", "two", "--force")} == first
