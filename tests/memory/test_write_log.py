"""The shared write log: whole entries in order, torn tails, the lock between handles."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from proxy.memory.write_log import HEADER, WriteLog


def test_entries_come_back_in_order_with_their_end_offsets(tmp_path: Path) -> None:
    writer, reader = WriteLog(tmp_path / "log"), WriteLog(tmp_path / "log")
    end = writer.append(("add", (1, "one")), 0)
    end = writer.append(("delete", ("t", "m")), end)
    entries, last = reader.read(0)
    assert [entry for entry, _ in entries] == [("add", (1, "one")), ("delete", ("t", "m"))]
    assert last == end == reader.size()
    assert reader.read(entries[0][1]) == ([entries[1]], end)  # from the middle on
    assert reader.read(end) == ([], end)


def test_a_torn_tail_is_not_read_and_the_next_writer_cuts_it(tmp_path: Path) -> None:
    log = WriteLog(tmp_path / "log")
    end = log.append(("add", ("whole",)), 0)
    # A writer that died mid-write: a header promising more bytes than arrived.
    with open(tmp_path / "log", "ab") as raw:
        raw.write(HEADER.pack(100, 0) + b"only part")
    assert log.read(0)[1] == end  # the reader stops before it
    after = log.append(("add", ("next",)), end)
    assert [entry for entry, _ in log.read(0)[0]] == [("add", ("whole",)), ("add", ("next",))]
    assert after == log.size()


def test_a_corrupt_entry_stops_the_reader(tmp_path: Path) -> None:
    log = WriteLog(tmp_path / "log")
    end = log.append(("add", ("x",)), 0)
    data = bytearray((tmp_path / "log").read_bytes())
    data[-1] ^= 0xFF  # the checksum no longer matches
    (tmp_path / "log").write_bytes(bytes(data))
    assert log.read(0) == ([], 0)
    assert end > 0


def test_the_lock_excludes_another_handle_until_released(tmp_path: Path) -> None:
    first, second = WriteLog(tmp_path / "log"), WriteLog(tmp_path / "log")
    first.lock()
    taken = threading.Event()

    def take() -> None:
        second.lock()
        taken.set()
        second.unlock()

    thread = threading.Thread(target=take)
    thread.start()
    time.sleep(0.2)
    assert not taken.is_set()  # waits while the first handle writes
    first.unlock()
    thread.join(timeout=5)
    assert taken.is_set()


def test_truncate_empties_the_log(tmp_path: Path) -> None:
    log = WriteLog(tmp_path / "log")
    log.append(("add", ()), 0)
    log.truncate()
    assert log.size() == 0 == os.path.getsize(tmp_path / "log")
