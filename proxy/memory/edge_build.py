"""An HNSW build in a child process, on a copy of the shard (adr/0153).

qdrant-edge holds the GIL for the whole of ``EdgeShard.optimize`` (measured: a Python thread
beside it does not run; its queries do let it go): built on a thread of the serving process,
10k memories froze the event loop for 8-11 s. So a background build runs in
``python -m proxy.memory.edge_build SOURCE TARGET``:

1. the child imports qdrant-edge and prints ``ready``; the parent takes its write lock and
   answers ``go``;
2. the child copies SOURCE to TARGET (sparse: the shard's files are mostly preallocated holes)
   and prints ``copied``; the parent lets writes go on and records them from there;
3. the child opens the copy (its write-ahead log replays what no flush persisted yet), builds
   the index, flushes, closes, pages the copy's payload indexes in (``prefetch``) and prints
   ``built``.

The parent then opens TARGET and swaps it in (``edge_maintenance``). The child asks the kernel
to kill it when its parent dies, so a killed server leaves no build behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

READY, GO, COPIED, BUILT = "ready", "go", "copied", "built"
PR_SET_PDEATHSIG = 1  # linux/prctl.h
COPY_CHUNK = 1 << 20  # a data run is read in pieces this size: bounded memory, few calls
# Opening a shard reads the files under its segments' payload index directories whole, holes
# included (a mutable index's 4 MB pages are mostly holes; the other files are mapped and read
# on demand). Paging them in was half the parent's open, GIL held: at 10k memories its CPU
# went 95 -> 50 ms once they were in the page cache (medians of 5). The child pages them in
# after its close, so the parent's open finds them there; it skips the rest (200 MB of mostly
# holes at 10k memories, which opening does not read).
PREFETCH_DIR = "payload_index"
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the directory holding ``proxy``


class BuildFailed(Exception):
    """The child ended without doing its step (it died, was killed or failed)."""


def copy_sparse(source: str, target: str) -> None:
    """Copy one file, skipping its holes: a shard's 32 MB pages hold a few KB each, and
    ``shutil.copy`` would write every zero."""
    with open(source, "rb") as src, open(target, "wb") as dst:
        fin, fout = src.fileno(), dst.fileno()
        size = os.fstat(fin).st_size
        pos = 0
        while pos < size:
            try:
                start = os.lseek(fin, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # only a hole is left
                    break
                raise
            end = os.lseek(fin, start, os.SEEK_HOLE)
            while start < end:
                chunk = os.pread(fin, min(COPY_CHUNK, end - start), start)
                if not chunk:
                    break
                os.pwrite(fout, chunk, start)
                start += len(chunk)
            pos = end
        os.ftruncate(fout, size)
    shutil.copystat(source, target)


def copy_shard(source: Path, target: Path) -> None:
    """Copy the shard directory ``source`` to ``target`` (which must not exist)."""
    shutil.copytree(source, target, copy_function=copy_sparse)


def prefetch(shard: Path) -> None:
    """Have the kernel page in the shard's payload index files (``PREFETCH_DIR``)."""
    if not hasattr(os, "posix_fadvise"):  # not on macOS: opening pages them in itself
        return
    for root, _, files in os.walk(shard):
        if PREFETCH_DIR not in Path(root).parts:
            continue
        for name in files:
            with contextlib.suppress(OSError):  # a cache hint: never a reason to fail the build
                fd = os.open(os.path.join(root, name), os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
                finally:
                    os.close(fd)


def build_copy(target: Path) -> None:
    """Index the copy at ``target``, persist and close it, and leave it as it opens fastest."""
    import qdrant_edge as qe

    shard = qe.EdgeShard.load(str(target))  # its stored config: the same layout
    shard.optimize()
    shard.flush()
    shard.close()
    prefetch(target)


def _die_with_parent(parent: int) -> None:
    """Have the kernel SIGKILL this process when its parent ends (Linux; elsewhere a no-op)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent ended before the request took effect
        os._exit(1)


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    """The child: copy ``argv[0]`` to ``argv[1]`` when told, then build the copy's index."""
    source, target, parent = Path(argv[0]), Path(argv[1]), int(argv[2])
    _die_with_parent(parent)
    import qdrant_edge  # noqa: F401  # before ``ready``: the parent's writes wait only for the copy

    _say(READY)
    if sys.stdin.readline().strip() != GO:
        return 1
    copy_shard(source, target)
    _say(COPIED)
    build_copy(target)
    _say(BUILT)
    return 0


class ChildBuild:
    """The parent's end of one build: start it, let it copy, wait for the index, or kill it."""

    _late = False  # killed for taking too long over a step

    def __init__(self, source: Path, target: Path) -> None:
        self.source, self.target = source, target
        argv = [str(source.absolute()), str(target.absolute()), str(os.getpid())]
        self._process = subprocess.Popen(
            [sys.executable, "-m", __name__, *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            # ``-m`` puts the working directory first on the child's path: run it where this
            # package lies, or a ``proxy`` package where the server was started (an older
            # checkout) would be the one that builds.
            cwd=PACKAGE_ROOT,
            # Its own process group: a terminal's Ctrl-C (sent to the whole foreground group)
            # is the server's to handle, which kills the child as it closes; killed by it
            # first, the build failed and logged an error at every interrupted shutdown.
            process_group=0,
        )

    def _expect(self, line: str, timeout_s: float | None = None) -> None:
        stdout: IO[str] | None = self._process.stdout
        # A child stuck in a step would hold its caller for ever (the copy step: every
        # write): past ``timeout_s`` it is killed, which ends the read below.
        timer = None if timeout_s is None else threading.Timer(timeout_s, self._too_late)
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            said = stdout.readline().strip() if stdout is not None else ""
        finally:
            if timer is not None:
                timer.cancel()
        if self._late:
            raise BuildFailed(f"the index build process took over {timeout_s} s before {line!r}")
        if said != line:
            # Ended, or it strays from its lines: either way no use. Killed, not waited for:
            # the copy step holds every write back until this returns.
            self.kill()
            raise BuildFailed(
                f"the index build process ended (exit {self._process.returncode}) before "
                f"{line!r}" + (f" (it said {said!r})" if said else "")
            )

    def ready(self) -> None:
        """Wait until the child can copy at once."""
        self._expect(READY)

    def _too_late(self) -> None:
        self._late = True
        self.kill()

    def copy(self, timeout_s: float | None = None) -> None:
        """Have the child copy the shard now; return once the copy is complete (the caller
        holds every write back meanwhile), or kill it after ``timeout_s``."""
        stdin = self._process.stdin
        if stdin is None:
            raise BuildFailed("the index build process has no input")
        try:
            stdin.write(GO + "\n")
            stdin.flush()
        except (BrokenPipeError, ValueError) as exc:
            raise BuildFailed(f"the index build process ended before the copy: {exc}") from exc
        self._expect(COPIED, timeout_s)

    def built(self, timeout_s: float | None = None) -> None:
        """Wait until the copy is indexed, flushed and closed by the child, or kill it after
        ``timeout_s``."""
        self._expect(BUILT, timeout_s)
        if self._process.wait() != 0:
            raise BuildFailed(f"the index build process failed (exit {self._process.returncode})")

    def kill(self) -> None:
        """End the child now (it may be half-way: the caller drops its copy) and reap it; a
        thread waiting on one of its steps gets ``BuildFailed``."""
        if self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # reaped meanwhile by another thread
                self._process.kill()
        self._process.wait()

    def close(self) -> None:
        """Kill the child if it still runs and close its pipes (by the thread that waits on
        it: closing a pipe another thread reads is not safe)."""
        self.kill()
        for pipe in (self._process.stdin, self._process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
