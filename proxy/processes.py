"""Whether a process that recorded its pid in a shared file still runs (pids are reused)."""

from __future__ import annotations

import os

UNKNOWN_START = 0  # no /proc to ask: only whether a process of that pid exists counts


def alive(pid: int, started: int) -> bool:
    """Whether the process that claimed a slot as ``pid`` started at ``started`` still runs."""
    if started != UNKNOWN_START:
        now = start_time(pid)
        if now != UNKNOWN_START:
            return now == started  # None: gone or a zombie; another value: the pid was reused
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def start_time(pid: int) -> int | None:
    """The start time of process ``pid`` (``UNKNOWN_START`` without ``/proc``); ``None`` if
    it does not exist or has exited (a zombie, not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
    except FileNotFoundError:
        return None if os.path.isdir("/proc/self") else UNKNOWN_START
    except OSError:
        return UNKNOWN_START
    fields = data[data.rindex(b")") + 2 :].split()  # the name may hold spaces and parentheses
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])  # field 22; fields[0] is field 3
