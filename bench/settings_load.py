"""Settings load time: import and ``load_settings``, this tree against another settings module.

Settings are loaded once per process start (each worker too), never on the request path; this
measures what that start costs. Three figures, medians, the two variants interleaved in one run
so that machine drift hits both alike:

- import: ``import`` of the settings module in a fresh interpreter (its dependencies included:
  pydantic for the models of adr/0090), milliseconds;
- defaults: ``load_settings(env={})``, microseconds;
- file: ``load_settings(FILE, env=...)`` of a file with every section, two tenants and three
  variables, microseconds.

Run: ``.venv/bin/python bench/settings_load.py --against OLD.py`` where OLD.py is another
``proxy/settings.py`` (``git show 4bb4043:proxy/settings.py > /tmp/settings_before.py`` is the
last one before adr/0090); without ``--against`` only this tree is measured. ``--smoke`` for CI.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.stats import format_table

ROOT = Path(__file__).resolve().parents[1]
# Every section, keys mode with two tenants: accepted by the settings before and after adr/0090.
CONFIG = """\
server: {host: 0.0.0.0, port: 9000, log_format: json, http: {max_headers: 50}}
upstream:
  url: https://api.openai.com/v1
  api_key: env:UP_KEY
  timeouts: {connect: 2, idle: 60.0}
  pool: {max_connections: 128}
limits: {max_body_bytes: 1048576}
auth:
  mode: keys
  tenants:
    acme:
      keys: [env:ACME_KEY]
      memory: {max_tokens: 2000, top_k: 20, sources: [learnings, playbook], capture: user}
    globex:
      keys: [env:GLOBEX_KEY]
      upstream_api_key: env:GLOBEX_UP
memory: {max_tokens: 3000, sources: [learnings, playbook, conversation], capture: "off"}
store: {kind: edge, data_dir: /tmp/memproxy-data, record_cache_entries: 5000}
embedder: {kind: static}
cache: {local_max_entries: 5000, retrieval_ttl_s: 10}
"""
ENV = {
    "UP_KEY": "sk-up",
    "ACME_KEY": "mp-acme",
    "GLOBEX_KEY": "mp-globex",
    "GLOBEX_UP": "sk-globex",
    "MEMPROXY_PORT": "9100",
    "MEMPROXY_LOG_LEVEL": "warning",
    "MEMPROXY_REDIS_URL": "redis://localhost:6379/0",
}


def load_module(path: Path | None) -> ModuleType:
    """This tree's ``proxy.settings``, or the settings module at ``path``."""
    if path is None:
        import proxy.settings

        return proxy.settings
    spec = importlib.util.spec_from_file_location("settings_against", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module


def import_ms(path: Path | None) -> float:
    """Milliseconds to import the module in a fresh interpreter."""
    target = (
        "import proxy.settings"
        if path is None
        else (
            "import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('s', {str(path)!r})\n"
            "m = importlib.util.module_from_spec(spec); sys.modules['s'] = m\n"
            "spec.loader.exec_module(m)"
        )
    )
    code = (
        "import time\nstarted = time.perf_counter()\n"
        f"{target}\nprint((time.perf_counter() - started) * 1000)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip())


def per_call_us(call: Callable[[], object], repeat: int) -> float:
    """Median microseconds of one call, after a warm-up."""
    for _ in range(min(20, repeat)):
        call()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--against", type=Path, help="another settings module to compare with")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    parser.add_argument("--repeat", type=int, default=300, help="calls per round and figure")
    parser.add_argument("--smoke", action="store_true", help="a few calls, for CI")
    args = parser.parse_args()
    rounds, repeat = (1, 5) if args.smoke else (args.rounds, args.repeat)
    variants: dict[str, Path | None] = {"this tree": None}
    if args.against is not None:
        variants[f"--against {args.against.name}"] = args.against.resolve()
    modules = {name: load_module(path) for name, path in variants.items()}
    figures: dict[str, dict[str, list[float]]] = {
        name: {"import": [], "defaults": [], "file": []} for name in variants
    }
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp, "memproxy.yaml")
        config.write_text(CONFIG)
        for _ in range(rounds):
            for name, path in variants.items():
                load = modules[name].load_settings
                figures[name]["import"].append(import_ms(path))
                defaults = partial(load, env={})
                from_file = partial(load, config, env=ENV)
                figures[name]["defaults"].append(per_call_us(defaults, repeat))
                figures[name]["file"].append(per_call_us(from_file, repeat))
    rows = [
        {
            "settings": name,
            "import ms": statistics.median(f["import"]),
            "defaults us": statistics.median(f["defaults"]),
            "file us": statistics.median(f["file"]),
        }
        for name, f in figures.items()
    ]
    print(format_table(rows))
    print(f"medians of {rounds} interleaved rounds; {repeat} calls per round for the us figures")


if __name__ == "__main__":
    main()
