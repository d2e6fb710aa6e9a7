"""Start and stop the servers a benchmark talks to: free ports, readiness, clean shutdown.

Every server runs as a subprocess in its own process group so a benchmark that fails half way
still ends everything it started (and nothing else).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.1


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def http_ok(url: str, timeout: float = 1.0) -> bool:
    """Return True when ``url`` answers with a 2xx status."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return 200 <= response.status < 300
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


class ServerProcess:
    """A subprocess serving HTTP on ``port``; a context manager that always stops it."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        port: int,
        ready_path: str,
        env: Mapping[str, str] | None = None,
        cwd: Path = ROOT,
        log_dir: Path | None = None,
        cpus: Collection[int] | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.port = port
        self.ready_path = ready_path
        self.env = dict(os.environ if env is None else env)
        self.cwd = cwd
        self.log_path = (log_dir or Path("/tmp")) / f"bench-{name}-{port}.log"
        # The CPUs the process (its threads and children) may run on; None: wherever the OS puts it.
        self.cpus = None if cpus is None else frozenset(cpus)
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        """Return ``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """Return the process id while running."""
        return self._proc.pid if self._proc else None

    def start(self, timeout: float = READY_TIMEOUT_S) -> ServerProcess:
        """Start the process and wait until ``ready_path`` answers 2xx."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("wb")
        self._proc = subprocess.Popen(
            self.argv,
            cwd=self.cwd,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        if self.cpus is not None:
            # Set before the interpreter has started any thread (it is still importing), so
            # every thread and child it makes inherits it; ``pin`` again once ready for any
            # thread that came first.
            pin(self._proc.pid, self.cpus)
        self.wait_ready(timeout)
        if self.cpus is not None:
            pin(self._proc.pid, self.cpus)
        return self

    def wait_ready(self, timeout: float) -> None:
        """Poll the readiness URL; raise with the log tail if the process dies or times out."""
        deadline = time.monotonic() + timeout
        url = self.base_url + self.ready_path
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited early:\n{self.log_tail()}")
            if http_ok(url):
                return
            time.sleep(POLL_INTERVAL_S)
        self.stop()
        raise RuntimeError(f"{self.name} not ready after {timeout:.0f}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        """Return the last lines of the server's log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the process group: SIGTERM, then SIGKILL after a grace period."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass

    def __enter__(self) -> ServerProcess:
        return self.start() if self._proc is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def cpu_sides(cpus: Collection[int]) -> tuple[frozenset[int], frozenset[int]] | None:
    """Split ``cpus`` into the load side (the load generator, the fake upstream) and the servers'
    side, the latter the upper half; ``None`` below 2 CPUs (nothing to split).

    Left to the scheduler, each server of an interleaved run settles on a core of its own
    relative to the load generator and the upstream, for stretches of the run, and every stage it
    times moves with that placement (docs/benchmarks.md, "The pipeline benchmark's slots"): pinned,
    every server meets the same conditions, whichever slot it has.
    """
    ordered = sorted(cpus)
    if len(ordered) < 2:
        return None
    half = len(ordered) // 2
    return frozenset(ordered[:half]), frozenset(ordered[half:])


def pin(pid: int, cpus: Collection[int]) -> None:
    """Let every thread of process ``pid`` run only on ``cpus`` (new threads inherit it)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError):  # the thread ended meanwhile
            os.sched_setaffinity(int(task.name), cpus)


def python_env(**extra: str) -> dict[str, str]:
    """Return the current environment with the repository importable and ``extra`` set."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def fake_upstream(
    port: int | None = None,
    *,
    delay_ms: float = 0.0,
    chunks: int = 8,
    compress: bool = False,
    echo: bool = False,
    name: str = "fake-upstream",
    cpus: Collection[int] | None = None,
) -> ServerProcess:
    """Return (not started) the bench's lean fake OpenAI upstream on ``port``.

    ``compress``: gzip answers when the client accepts it, as OpenAI does; ``echo``: every
    answer differs (it starts with the question).
    """
    port = port or free_port()
    argv = [
        sys.executable,
        str(ROOT / "bench" / "lib" / "fake_upstream.py"),
        "--port",
        str(port),
        "--delay-ms",
        str(delay_ms),
        "--chunks",
        str(chunks),
    ]
    if compress:
        argv.append("--compress")
    if echo:
        argv.append("--echo")
    env = python_env()
    return ServerProcess(name, argv, port=port, ready_path="/healthz", env=env, cpus=cpus)


def memproxy(
    upstream_url: str,
    data_dir: Path,
    *,
    port: int | None = None,
    workers: int = 1,
    extra_env: Mapping[str, str] | None = None,
    cpus: Collection[int] | None = None,
) -> ServerProcess:
    """Return (not started) ``python -m proxy serve`` configured only through the contract env;
    ``cpus``: the CPUs it may run on."""
    port = port or free_port()
    env = python_env(
        MEMPROXY_HOST="127.0.0.1",
        MEMPROXY_PORT=str(port),
        MEMPROXY_WORKERS=str(workers),
        MEMPROXY_UPSTREAM_URL=upstream_url,
        MEMPROXY_DATA_DIR=str(data_dir),
        **dict(extra_env or {}),
    )
    argv = [sys.executable, "-m", "proxy", "serve"]
    server = ServerProcess("memproxy", argv, port=port, ready_path="/healthz", env=env, cpus=cpus)
    # Run as ``served_from`` runs another tree, so this tree's server and a baseline's start
    # alike (the same working directory and import path, only the tree differs).
    return served_from(server, ROOT, "memproxy")


def served_from(server: ServerProcess, tree: Path, name: str) -> ServerProcess:
    """``server`` run from a source tree (e.g. an older commit's ``git archive``): its working
    directory, and its import path alone; relative paths in its env made absolute."""
    server.name, server.cwd = name, tree.resolve()
    server.env["PYTHONPATH"] = str(server.cwd)
    # Not run in the caller's directory: a relative config file or data dir is the caller's.
    for variable in ("MEMPROXY_CONFIG", "MEMPROXY_DATA_DIR"):
        if server.env.get(variable):
            server.env[variable] = str(Path(server.env[variable]).absolute())
    return server


def start_redis(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``redis-server`` on a free port and return the process and its URL."""
    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server is not installed: apt-get install -y redis-server")
    port = free_port()
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory)]
    args += ["--save", "", "--appendonly", "no"]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    while subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).stdout != (
        b"PONG\n"
    ):
        if time.monotonic() > deadline:
            raise SystemExit("redis-server did not start")
        time.sleep(0.02)
    return process, url
