"""The shared write log: whole entries in order, torn tails, the lock between handles, cutting
the front off while positions stay valid, and the replicas' slots."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from proxy.memory import write_log
from proxy.memory.write_log import CUT_AT, HEADER, SLOT, SLOTS_AT, WriteLog
from proxy.processes import start_time


def test_entries_come_back_in_order_with_their_end_positions(tmp_path: Path) -> None:
    writer, reader = WriteLog(tmp_path / "log"), WriteLog(tmp_path / "log")
    writer.append(("add", (1, "one")))
    end = writer.append(("delete", ("t", "m")))
    assert reader.end == end  # another handle sees the new end through the shared state
    entries, last = reader.read(0)
    assert [entry for entry, _ in entries] == [("add", (1, "one")), ("delete", ("t", "m"))]
    assert last == end == reader.size()
    assert reader.read(entries[0][1]) == ([entries[1]], end)  # from the middle on
    assert reader.read(end) == ([], end)


def test_the_barrier_moves_with_every_entry_but_those_appended_past_it(tmp_path: Path) -> None:
    """Reads wait for the log up to the barrier only: retrieval counts are appended without
    moving it (adr/0154); the next entry that moves it covers them too."""
    writer, reader = WriteLog(tmp_path / "log"), WriteLog(tmp_path / "log")
    first = writer.append(("add", (1,)))
    assert reader.barrier == first
    counted = writer.append(("inc", ("t", ("m",))), barrier=False)
    assert (reader.barrier, reader.end) == (first, counted)
    later = writer.append(("delete", ("t", "m")))
    assert reader.barrier == later == reader.end


def test_a_torn_tail_is_not_read_and_the_next_writer_overwrites_it(tmp_path: Path) -> None:
    log = WriteLog(tmp_path / "log")
    end = log.append(("add", ("whole",)))
    # A writer that died mid-write: bytes past the end, which it never moved.
    with open(tmp_path / "log", "ab") as raw:
        raw.write(HEADER.pack(100, 0) + b"only part")
    assert log.read(0) == ([(("add", ("whole",)), end)], end)
    after = log.append(("add", ("next",)))
    assert [entry for entry, _ in log.read(0)[0]] == [("add", ("whole",)), ("add", ("next",))]
    assert after == log.size()


def test_a_log_left_without_its_state_is_read_up_to_its_last_whole_entry(tmp_path: Path) -> None:
    """A data dir from before the state file, or whose state file was lost."""
    old = WriteLog(tmp_path / "log")
    old.append(("add", ("a",)))
    end = old.append(("add", ("b",)))
    old.close()
    with open(tmp_path / "log", "ab") as raw:
        raw.write(HEADER.pack(100, 0) + b"torn")
    os.unlink(f"{tmp_path / 'log'}.state")
    log = WriteLog(tmp_path / "log")
    assert (log.base, log.end, log.primary, log.barrier) == (0, end, 0, end)
    assert [entry for entry, _ in log.read(0)[0]] == [("add", ("a",)), ("add", ("b",))]


def test_the_lock_excludes_another_handle_until_released(tmp_path: Path) -> None:
    first, second = WriteLog(tmp_path / "log"), WriteLog(tmp_path / "log")
    first.lock()
    taken = threading.Event()

    def take() -> None:
        second.lock_shared()  # a reader waits for a writer (or a cut) too
        taken.set()
        second.unlock()

    thread = threading.Thread(target=take)
    thread.start()
    time.sleep(0.2)
    assert not taken.is_set()  # waits while the first handle writes
    first.unlock()
    thread.join(timeout=5)
    assert taken.is_set()


def test_cutting_the_front_keeps_every_later_position(tmp_path: Path) -> None:
    log, other = WriteLog(tmp_path / "log"), WriteLog(tmp_path / "log")
    first = log.append(("add", ("a",)))
    second = log.append(("add", ("b",)))
    end = log.append(("add", ("c",)))
    assert log.cut_before(second) == second
    assert (other.base, other.end) == (second, end)
    assert log.size() == end - second  # the file holds only what is left
    assert [entry for entry, _ in other.read(second)[0]] == [("add", ("c",))]
    with pytest.raises(ValueError, match="folded away"):
        other.read(first)
    after = other.append(("add", ("d",)))  # appends go on at the same positions
    assert [(entry, at) for entry, at in log.read(end)[0]] == [(("add", ("d",)), after)]
    assert log.cut_before(after) == after - second
    assert log.size() == 0
    assert log.read(after) == ([], after)


Setter = Callable[[int, int], None]


class Killed(BaseException):
    """The process dying where a step of the cut would have run."""


class Dying:
    """``os`` for the log, but the ``at``-th write step of a cut (a chunk's copy, the truncate,
    a state update) dies: before it, or (``torn``) with a copy half written."""

    def __init__(self, at: int, torn: bool) -> None:
        self.at, self.torn, self.steps = at, torn, 0

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    def step(self) -> None:
        self.steps += 1
        if self.steps == self.at:
            raise Killed

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        if self.steps + 1 == self.at and self.torn:
            os.pwrite(fd, data[: len(data) // 2], offset)
        self.step()
        return os.pwrite(fd, data, offset)

    def ftruncate(self, fd: int, length: int) -> None:
        self.step()
        os.ftruncate(fd, length)


def test_a_cut_killed_at_any_step_is_finished_by_the_next_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every step of a cut dying in turn (chunks overlapping what they move): the next handle
    sees exactly the entries after the cut, once, at their positions, and appends on."""
    monkeypatch.setattr(write_log, "CUT_CHUNK_BYTES", 40)
    monkeypatch.setattr(write_log, "CUT_MIN_GAP_BYTES", 0)
    entries = [("add", (f"entry {i}",)) for i in range(12)]
    bases = set()
    for at in range(1, 40):
        for torn in (False, True):
            path = tmp_path / f"log-{at}-{torn}"
            log, other = WriteLog(path), WriteLog(path)
            ends = [log.append(entry) for entry in entries]
            cut = ends[2]  # less than what is kept: several chunks, each overlapping the next
            dying = Dying(at, torn)
            monkeypatch.setattr(write_log, "os", dying)
            real_set = log._set

            def dying_set(
                where: int, value: int, dying: Dying = dying, real: Setter = real_set
            ) -> None:
                dying.step()
                real(where, value)

            monkeypatch.setattr(log, "_set", dying_set)
            with contextlib.suppress(Killed):
                log.cut_before(cut)
            monkeypatch.setattr(write_log, "os", os)
            log.close()  # its lock goes with it, as with a killed process
            # Before anyone finishes the cut, a reader finds every entry after it in place.
            start = other._get(CUT_AT) or other.base
            left = [(e, end) for e, end in zip(entries, ends, strict=True) if end > start]
            assert other.read(start) == (left, ends[-1]), (at, torn)
            other.close()
            reopened = WriteLog(path)
            # Killed before the cut was recorded, nothing was cut; after, all of it.
            assert reopened.base in (0, cut), (at, torn)
            bases.add(reopened.base)
            assert reopened._get(CUT_AT) == 0
            kept = [(e, end) for e, end in zip(entries, ends, strict=True) if end > reopened.base]
            assert reopened.read(reopened.base) == (kept, ends[-1]), (at, torn)
            after = reopened.append(("add", ("next",)))
            assert reopened.read(ends[-1]) == ([(("add", ("next",)), after)], after)
            assert reopened.size() == after - reopened.base
            reopened.close()
        if dying.steps < at:
            break  # the cut finished before this step: every step has died once
    else:
        pytest.fail("the cut took more steps than tried")
    assert bases == {0, cut}


def test_a_small_gap_before_a_long_tail_waits_for_a_later_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kept bytes move in chunks no longer than the gap: a tiny gap would take many."""
    monkeypatch.setattr(write_log, "CUT_MIN_GAP_BYTES", 100)
    log = WriteLog(tmp_path / "log")
    ends = [log.append(("add", (f"entry {i}",))) for i in range(6)]
    assert ends[0] < 100 < ends[-1] - ends[0]
    assert log.cut_before(ends[0]) == 0
    assert (log.base, log.size()) == (0, ends[-1])
    assert log.cut_before(ends[2]) == ends[2]  # a gap past the floor
    assert log.cut_before(ends[3]) == 0  # 40 bytes freed, 80 kept
    assert log.cut_before(ends[-1]) == ends[-1] - ends[2]  # keeping nothing: any gap goes
    assert (log.base, log.size()) == (ends[-1], 0)


def test_slots_say_how_far_live_replicas_are(tmp_path: Path) -> None:
    log = WriteLog(tmp_path / "log")
    mine = log.claim(10)
    theirs = log.claim(5)
    assert mine != theirs  # two live replicas never share a slot
    log.publish(theirs, 7)
    assert sorted(log.replica_positions()) == [7, 10]
    log.release(theirs)
    assert log.replica_positions() == [10]
    log.release_all()
    assert log.replica_positions() == []
    assert log.claim(3) == 0  # freed slots are taken again


def spawn_and_reap() -> int:
    """The pid of a process that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_dead_replicas_slot_is_ignored_and_reused(tmp_path: Path) -> None:
    log = WriteLog(tmp_path / "log")
    slot = log.claim(1)
    # The slot as a worker that was killed left it.
    SLOT.pack_into(log._state, SLOTS_AT + slot * SLOT.size, spawn_and_reap(), 1, 1)
    assert log.replica_positions() == []  # its position holds nothing back
    assert log.claim(2) == slot  # and its slot is the first free one


def test_a_slot_whose_pid_was_reused_is_free(tmp_path: Path) -> None:
    """A killed worker's pid now names another process: a different start time."""
    log = WriteLog(tmp_path / "log")
    slot = log.claim(1)
    pid, started, _ = SLOT.unpack_from(log._state, SLOTS_AT + slot * SLOT.size)
    assert (pid, log.replica_positions()) == (os.getpid(), [1])
    SLOT.pack_into(log._state, SLOTS_AT + slot * SLOT.size, pid, started + 1, 1)
    assert log.replica_positions() == []
    assert log.claim(2) == slot


def test_the_slot_of_a_worker_that_exited_unreaped_is_free(tmp_path: Path) -> None:
    log = WriteLog(tmp_path / "log")
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        slot = log.claim(1)
        started = start_time(child.pid)
        assert started
        SLOT.pack_into(log._state, SLOTS_AT + slot * SLOT.size, child.pid, started, 1)
        assert log.replica_positions() == [1]  # running: its position holds the cut
        assert child.stdin is not None
        child.stdin.close()  # it exits; waiting without reaping leaves it a zombie
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        assert log.replica_positions() == []
        assert log.claim(2) == slot
    finally:
        child.wait()
