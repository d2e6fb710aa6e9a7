"""LiteLLM's proxy as a benchmark peer: its own virtual environment, a generated config, a server.

The peer lives in ``bench/.venvs/litellm`` (git-ignored), created on first use with
``litellm[proxy]`` from the package registry, so it never shares dependencies with memproxy. The
install time is measured once and kept in ``install.json`` beside the environment.

The server is configured to be fair and lean: one ``openai/...`` model whose ``api_base`` is the
same fake upstream memproxy uses, no database, no master key, no spend logs, no callbacks, error
logging only, the local model cost map (no download) and the same worker count as memproxy.

Run ``python bench/peers/litellm_proxy.py`` to install it, check that it forwards streaming and
non-streaming chat completions, and print a short throughput table against the bench's fake.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.lib.servers import ROOT, ServerProcess, free_port

VENV_DIR = ROOT / "bench" / ".venvs" / "litellm"
INSTALL_RECORD = "install.json"
# opentelemetry-sdk: without it LiteLLM 1.106 retries a failing import on every request (~10 ms
# each, 30 -> 55 req/s at concurrency 1; docs/benchmarks.md, "The LiteLLM peer"). Installing
# it is the fair, lean setup.
DEFAULT_SPECS = ("litellm[proxy]", "opentelemetry-sdk")
PEER_MODEL = "fake-model"
READY_PATH = "/health/liveliness"
# LiteLLM refuses to start without a master key; a real deployment sets one, so the peer pays for
# the check like memproxy pays for reading the bearer key. Local-only, never a secret.
MASTER_KEY = "sk-memproxy-bench-0123456789abcdef0123456789abcdef"
AUTH_HEADERS = {"Authorization": f"Bearer {MASTER_KEY}"}
# Variables that would make LiteLLM reach for a database or a remote service.
STRIPPED_ENV = (
    "DATABASE_URL",
    "LITELLM_MASTER_KEY",
    "REDIS_HOST",
    "REDIS_URL",
    "STORE_MODEL_IN_DB",
)


def venv_python(venv: Path = VENV_DIR) -> Path:
    """Return the interpreter of the peer's virtual environment."""
    return venv / "bin" / "python"


def install_record(venv: Path = VENV_DIR) -> dict[str, object] | None:
    """Return what the first install measured, or None if the peer is not installed."""
    path = venv / INSTALL_RECORD
    if not path.is_file() or not (venv / "bin" / "litellm").exists():
        return None
    data: dict[str, object] = json.loads(path.read_text())
    return data


def ensure_installed(
    specs: Sequence[str] = DEFAULT_SPECS, venv: Path = VENV_DIR, *, fresh: bool = False
) -> dict[str, object]:
    """Create the peer's environment with ``specs`` unless it has them; return the install record.

    Uses ``uv`` when it is on PATH (it is much faster), else ``venv`` + ``pip``; both reach only
    the package registry. ``fresh`` rebuilds without the installer's cache, to time a cold install.
    """
    record = install_record(venv)
    if record is not None and record.get("specs") == list(specs) and not fresh:
        return record
    if venv.exists():
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    uv = shutil.which("uv")
    started = time.perf_counter()
    if uv:
        subprocess.run([uv, "venv", "-q", "-p", sys.executable, str(venv)], check=True)
        install = [uv, "pip", "install", "-q", "-p", str(venv_python(venv)), *specs]
        if fresh:
            install.append("--no-cache")
    else:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        install = [str(venv_python(venv)), "-m", "pip", "install", "-q", *specs]
        if fresh:
            install.append("--no-cache-dir")
    subprocess.run(install, check=True)
    seconds = time.perf_counter() - started
    version = subprocess.run(
        [
            str(venv_python(venv)),
            "-c",
            "import importlib.metadata as m;print(m.version('litellm'))",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    record = {
        "specs": list(specs),
        "cold_cache": fresh,
        "version": version,
        "installer": "uv" if uv else "pip",
        "install_seconds": round(seconds, 1),
        "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (venv / INSTALL_RECORD).write_text(json.dumps(record, indent=2))
    return record


def peer_config(upstream_url: str, model: str = PEER_MODEL) -> dict[str, object]:
    """Return the LiteLLM proxy config forwarding ``model`` to the OpenAI-compatible upstream."""
    return {
        "model_list": [
            {
                "model_name": model,
                "litellm_params": {
                    "model": f"openai/{model}",
                    "api_base": upstream_url,
                    "api_key": "sk-fake-upstream",
                },
            }
        ],
        "litellm_settings": {
            "telemetry": False,
            "turn_off_message_logging": True,
            "set_verbose": False,
            "json_logs": False,
            "drop_params": True,
            "request_timeout": 60,
            "num_retries": 0,
        },
        "general_settings": {
            "master_key": MASTER_KEY,
            "disable_spend_logs": True,
            "disable_error_logs": True,
            "disable_adding_master_key_hash_to_db": True,
            "disable_reset_budget": True,
        },
    }


def peer_env() -> dict[str, str]:
    """Return the environment for the peer: quiet, offline cost map, no database."""
    env = {k: v for k, v in os.environ.items() if k not in STRIPPED_ENV}
    env.pop("PYTHONPATH", None)
    env.update(
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        LITELLM_LOG="ERROR",
        LITELLM_TELEMETRY="False",
        DISABLE_SCHEMA_UPDATE="True",
        TOKENIZERS_PARALLELISM="false",
    )
    return env


def litellm_server(
    upstream_url: str,
    *,
    port: int | None = None,
    workers: int = 1,
    config_dir: Path | None = None,
    venv: Path = VENV_DIR,
) -> ServerProcess:
    """Return (not started) a LiteLLM proxy forwarding ``fake-model`` to ``upstream_url``."""
    port = port or free_port()
    config_dir = config_dir or venv
    config_dir.mkdir(parents=True, exist_ok=True)
    config = config_dir / f"litellm-config-{port}.yaml"
    # JSON is YAML, so no YAML writer is needed.
    config.write_text(json.dumps(peer_config(upstream_url), indent=2))
    argv = [
        str(venv / "bin" / "litellm"),
        "--config",
        str(config),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--num_workers",
        str(workers),
    ]
    return ServerProcess("litellm", argv, port=port, ready_path=READY_PATH, env=peer_env())


def check_forwarding(base_url: str, model: str = PEER_MODEL) -> dict[str, object]:
    """Send one plain and one streaming chat completion; raise unless both come back whole."""
    import httpx

    body = {"model": model, "messages": [{"role": "user", "content": "hello"}]}
    with httpx.Client(base_url=base_url, timeout=30, headers=AUTH_HEADERS) as client:
        plain = client.post("/v1/chat/completions", json=body)
        plain.raise_for_status()
        text = plain.json()["choices"][0]["message"]["content"]
        pieces: list[str] = []
        with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as resp:
            resp.raise_for_status()
            for line in resp.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    delta = json.loads(line[6:])["choices"][0]["delta"]
                    pieces.append(delta.get("content") or "")
    streamed = "".join(pieces).strip()
    if not text or streamed != text.strip():
        raise RuntimeError(f"peer forwarding mismatch: {text!r} vs streamed {streamed!r}")
    return {"plain": text, "streamed": streamed}


def main() -> None:
    """Install the peer if needed, verify it forwards, and measure it against the fake upstream."""
    from bench.lib import loadgen, report, stats, targets

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spec", nargs="+", default=list(DEFAULT_SPECS), help="requirements")
    parser.add_argument("--fresh", action="store_true", help="reinstall without cache, timed")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=5.0, help="per target and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 50])
    parser.add_argument(
        "--targets",
        nargs="+",
        default=["direct", "litellm"],
        choices=targets.KINDS,
        help="what to load besides the peer check (memproxy-* need memproxy serve)",
    )
    parser.add_argument("--smoke", action="store_true", help="install + forwarding check only")
    args = parser.parse_args()

    record = ensure_installed(args.spec, fresh=args.fresh)
    print(
        f"litellm {record['version']} installed by {record['installer']} "
        f"in {record['install_seconds']} s ({VENV_DIR})"
    )
    kinds = list(dict.fromkeys(["direct", "litellm", *args.targets]))
    if args.smoke:
        kinds = ["direct", "litellm"]
    with targets.start_targets(kinds, workers=args.workers) as fleet:
        peer = next(t for t in fleet.targets if t.name == "litellm")
        print(f"litellm proxy ready in {fleet.info['litellm_ready_seconds']} s")
        print("forwarding:", check_forwarding(peer.base_url))
        if args.smoke:
            return
        chosen = [t for t in fleet.targets if t.name in args.targets]
        results = loadgen.run_interleaved(
            chosen,
            concurrencies=args.concurrency,
            seconds=args.seconds,
            rounds=args.rounds,
            streams=(False, True),
            unique_queries=True,
        )
    rows = loadgen.result_rows(results, baseline="direct")
    columns = ["target", "c", "stream", "requests", "errors", "rps", "p50_ms", "p99_ms"]
    columns += ["ttfc_p50_ms", "added_p50_ms", "added_p99_ms", "added_ttfc_p50_ms"]
    print(stats.format_table(rows, columns))
    path = report.save_results(
        "litellm-peer",
        {
            "install": record,
            "fleet": fleet.info,
            "seconds": args.seconds,
            "rounds": args.rounds,
            "rows": rows,
        },
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
