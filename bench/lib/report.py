"""Where benchmark results go: JSON files under ``bench/results/`` with the machine and commit."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.lib.servers import ROOT

RESULTS_DIR = ROOT / "bench" / "results"


def git_commit() -> str:
    """Return the short commit of the work tree, with ``+dirty`` when it has changes."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return f"{commit}+dirty" if dirty else commit or "unknown"


def cpu_model() -> str:
    """Return the CPU model name from /proc/cpuinfo, or the platform's processor string."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict[str, Any]:
    """Return what a reader needs to compare runs: CPU, cores, Python, OS, date, commit."""
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "os": platform.platform(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": git_commit(),
    }


def save_results(name: str, data: dict[str, Any], results_dir: Path = RESULTS_DIR) -> Path:
    """Write ``data`` plus machine info to ``results_dir/NAME.json`` and return the path."""
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{name}.json"
    path.write_text(json.dumps({"machine": machine_info(), **data}, indent=2, default=str))
    return path


def load_results(name: str, results_dir: Path = RESULTS_DIR) -> dict[str, Any] | None:
    """Return the saved results called ``name``, or None when that benchmark has not run."""
    path = results_dir / f"{name}.json"
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data
