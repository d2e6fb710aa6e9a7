"""Durability: ``memproxy memories import`` SIGKILLed mid-import loses no acknowledged write.

The CLI writes its file in batches and redraws its progress bar (stderr) after a batch's write
has returned: the count it shows is what it has acknowledged. The test reads that count as it
goes, SIGKILLs the importer half way, then reopens the embedded store: it must open cleanly,
hold every acknowledged memory intact (ids are in file order), accept new writes, and a re-run
of the same import must complete (ids are idempotent) with nothing duplicated.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import orjson

from proxy.memory.edge import EdgeStore
from proxy.memory.embedders import create_embedder

ROOT = Path(__file__).resolve().parents[2]
TENANT = "durable"
TOTAL = 5_000
BATCH = 200
KILL_AFTER = 1_000  # acknowledged memories before the kill
PROGRESS = re.compile(rb"([\d,]+)/([\d,]+)")


def content(i: int) -> str:
    return f"memory number {i} about topic {i % 97} and place {i % 13}"


def write_file(path: Path) -> None:
    with path.open("wb") as out:
        for i in range(TOTAL):
            out.write(
                orjson.dumps({"id": f"m-{i:06d}", "user": f"u{i % 5}", "content": content(i)})
            )
            out.write(b"\n")


def run_import(data: Path, source: Path, *, kill_after: int | None) -> tuple[int, int]:
    """Run the CLI import; SIGKILL it once ``kill_after`` are acknowledged. -> (acked, exit)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MEMPROXY_DATA_DIR": str(data)}
    argv = [sys.executable, "-m", "proxy", "memories", "import", str(source)]
    argv += ["--tenant", TENANT, "--force", "--batch-size", str(BATCH)]
    child = subprocess.Popen(
        argv, cwd=ROOT, env=env, stderr=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert child.stderr is not None
    acked = 0
    pending = b""
    try:
        while True:
            data_read = child.stderr.read1(4096)  # type: ignore[attr-defined]
            if not data_read:
                break
            pending += data_read
            *done, pending = re.split(rb"[\r\n]", pending)
            for line in done:
                match = PROGRESS.search(line)
                if match:
                    acked = int(match.group(1).replace(b",", b""))
            if kill_after is not None and acked >= kill_after:
                child.send_signal(signal.SIGKILL)
                break
    finally:
        if child.poll() is None and kill_after is None:
            child.wait(timeout=300)
        child.wait(timeout=60)
    return acked, child.returncode


async def all_ids(store: EdgeStore) -> list[str]:
    ids: list[str] = []
    after = None
    while True:
        page = await store.list(TENANT, user=None, source=None, limit=1000, after=after)
        ids.extend(r.id for r in page.records)
        if not page.has_more:
            return ids
        after = page.last_id


async def test_sigkill_during_cli_import_loses_no_acknowledged_write(tmp_path: Path) -> None:
    source = tmp_path / "memories.jsonl"
    write_file(source)
    data = tmp_path / "data"
    acked, code = run_import(data, source, kill_after=KILL_AFTER)
    assert code == -signal.SIGKILL  # it really died mid-import
    assert KILL_AFTER <= acked < TOTAL

    embedder = create_embedder("static")
    store = await EdgeStore.open(data, dimensions=embedder.dimensions)
    try:
        ids = await all_ids(store)
        assert len(ids) == len(set(ids))
        present = set(ids)
        missing = [f"m-{i:06d}" for i in range(acked) if f"m-{i:06d}" not in present]
        assert missing == []
        for i in (0, acked // 2, acked - 1):
            record = await store.get(TENANT, f"m-{i:06d}")
            assert record is not None
            assert record.content == content(i)
            assert record.user == f"u{i % 5}"
        assert await store.count(TENANT) == len(ids)
    finally:
        await store.close()

    # The store reopens for writing after the crash: the same import now completes, once.
    _, code = run_import(data, source, kill_after=None)
    assert code == 0
    store = await EdgeStore.open(data, dimensions=embedder.dimensions)
    try:
        assert await store.count(TENANT) == TOTAL
        assert len(set(await all_ids(store))) == TOTAL
    finally:
        await store.close()
