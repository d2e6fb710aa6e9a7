"""Cacheable prompt prefix over multi-turn chats: how much of each upstream prompt repeats the last.

Provider prompt caches (OpenAI's automatic prefix cache, Anthropic's ``cache_control``) bill a
prompt's leading bytes cheaply when they equal the start of an earlier prompt. This benchmark
replays real multi-turn conversations through memproxy, as an application sends them (its own
history each turn, never our blocks), in front of an upstream that records every body it gets,
and measures per turn the share of the upstream body that is a byte-identical prefix of the
previous turn's body.

Conversations: LoCoMo dev (``../shared/bench/locomo/locomo_dev.json``, CC BY-NC 4.0: read from
there, never copied). From two starting sessions per conversation, 20 turns of the dialog (one
speaker as the user, the other as the assistant, consecutive lines of a speaker merged); the
memory user holds every memory of the sessions before the start (observations, summaries and
dialog turns, as ``bench/locomo.py`` stores them), so memories are real text and retrieved every
turn. Variants (``VARIANTS``): ``off`` (memory off: the share the conversation itself allows, an
upper bound for any memory layer), ``system`` (block in the system prompt, the old position),
``turn-forget`` (block in the latest turn, earlier blocks not put back: ``blocks_ttl_s: 0``) and
``turn`` (the default: earlier blocks put back, the new one only with memories not shown yet);
each at the default cap and at ``--cap`` tokens (``X-Memory-Max-Tokens``).

Run: ``.venv/bin/python bench/prefix_cache.py`` (full: 6 conversations x 20 turns x 4 variants x
2 caps) or ``--smoke`` (one conversation, 5 turns). Method and figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib import locomo_data, report, servers, stats
from bench.lib.fake_upstream import completion_body

DEFAULT_DATA = servers.ROOT.parent / "shared" / "bench" / "locomo" / "locomo_dev.json"
MODEL = "gpt-4o"
API_KEY = "sk-prefix-bench"
TURNS = 20
STARTS = (0.5, 0.75)  # where in each conversation's sessions a replay starts
CAP = 1000
IMPORT_BATCH = 100
VARIANTS: dict[str, tuple[str, dict[str, str]]] = {  # name: (server, request headers)
    "off": ("remember", {"X-Memory-Mode": "off"}),
    "system": ("remember", {"X-Memory-Position": "system"}),
    "turn-forget": ("forget", {"X-Memory-Position": "turn"}),
    "turn": ("remember", {"X-Memory-Position": "turn"}),
}
SERVERS: dict[str, dict[str, Any]] = {"remember": {}, "forget": {"cache": {"blocks_ttl_s": 0}}}
# A quality benchmark: relaxed deadlines, so a busy 2-core machine cannot turn a slow answer into
# a degraded one (a request without memories would flatter nothing here, but would not measure).
RELAXED = {
    "memory": {
        "deadline_ms": 5000.0,
        "stage_timeouts": {"embed_ms": 2000.0, "search_ms": 2000.0, "cache_ms": 500.0},
    }
}


@dataclass(frozen=True)
class Replay:
    """One conversation to replay: its memories' user, system prompt and (user, reply) turns."""

    name: str
    user: str
    system: str
    turns: tuple[tuple[str, str], ...]
    memories: tuple[dict[str, Any], ...]


def session_of(item: Mapping[str, Any]) -> int:
    """The session a stored LoCoMo item comes from (summaries and turns say, observations cite)."""
    metadata = item.get("metadata") or {}
    if "session" in metadata:
        return int(metadata["session"])
    ids = locomo_data.dia_ids(metadata.get("dia_id"))
    return min(int(i[1:].split(":")[0]) for i in ids) if ids else 0


def dialog(conversation: Mapping[str, Any], sessions: Sequence[int]) -> list[tuple[str, str]]:
    """(speaker, text) lines of ``sessions``, consecutive lines of one speaker merged."""
    lines: list[tuple[str, str]] = []
    for number in sessions:
        for turn in conversation[f"session_{number}"]:
            text = turn["text"].strip()
            if lines and lines[-1][0] == turn["speaker"]:
                lines[-1] = (turn["speaker"], f"{lines[-1][1]} {text}")
            else:
                lines.append((turn["speaker"], text))
    return lines


def turn_pairs(lines: Sequence[tuple[str, str]], user: str, count: int) -> list[tuple[str, str]]:
    """Up to ``count`` (user text, assistant text) pairs, starting at ``user``'s first line."""
    start = next(i for i, (speaker, _) in enumerate(lines) if speaker == user)
    rest = lines[start:]
    pairs = [(rest[i][1], rest[i + 1][1]) for i in range(0, len(rest) - 1, 2)]
    return pairs[:count]


def replays(samples: Sequence[Mapping[str, Any]], turns: int, now: datetime) -> list[Replay]:
    """Two replays per LoCoMo sample (``STARTS``), memories from the sessions before each."""
    found: list[Replay] = []
    for sample in samples:
        conversation = sample["conversation"]
        sessions = locomo_data.session_numbers(conversation)
        for where in STARTS:
            first = sessions[int(len(sessions) * where)]
            later = [n for n in sessions if n >= first]
            lines = dialog(conversation, later)
            user = lines[0][0]
            speakers = (conversation["speaker_a"], conversation["speaker_b"])
            assistant = speakers[1] if user == speakers[0] else speakers[0]
            name = f"{sample['sample_id']}-s{first}"
            memory_user = f"prefix-{name}"
            items = locomo_data.build_memories(sample, memory_user, now)
            system = (
                f"You are {assistant}, chatting with your friend {user}. Answer as {assistant} "
                "would: warmly, briefly, and consistent with what you both said before."
            )
            found.append(
                Replay(
                    name,
                    memory_user,
                    system,
                    tuple(turn_pairs(lines, user, turns)),
                    tuple(item for item in items if session_of(item) < first),
                )
            )
    return found


def common_prefix(a: bytes, b: bytes) -> int:
    """Length of the longest common prefix of ``a`` and ``b`` (binary search on slices)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def prefix_share(previous: bytes, current: bytes) -> tuple[float, bool]:
    """Share of ``current`` that repeats the start of ``previous``, and whether all of
    ``previous`` up to the end of its messages (the bodies end with them) does."""
    common = common_prefix(previous, current)
    messages_end = previous.rindex(b"]")
    return common / len(current), common >= messages_end


class Recorder:
    """The upstream: records each chat body as received and answers like OpenAI, without gzip."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.bodies.append(body)
        answer = completion_body(MODEL, "ok")
        return web.Response(body=answer, content_type="application/json")

    async def start(self, port: int) -> web.AppRunner:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self.chat)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        return runner


async def store(client: httpx.AsyncClient, memories: Sequence[dict[str, Any]]) -> None:
    """Store ``memories`` through ``POST /v1/memories``."""
    for start in range(0, len(memories), IMPORT_BATCH):
        batch = list(memories[start : start + IMPORT_BATCH])
        response = await client.post("/v1/memories", json={"memories": batch})
        if response.status_code != 201:
            raise RuntimeError(f"import failed {response.status_code}: {response.text[:300]}")


async def replay(
    client: httpx.AsyncClient,
    recorder: Recorder,
    conversation: Replay,
    variant: Mapping[str, str],
    cap: int | None,
    run: str,
) -> list[dict[str, Any]]:
    """One conversation as an application sends it; per turn the share and what memproxy said.

    ``run`` names the run in the system prompt: remembered blocks are keyed by the conversation,
    so a replay of the same conversation must not find the blocks of another variant's replay.
    """
    headers = {"X-Memory-User": conversation.user, **variant}
    if cap is not None:
        headers["X-Memory-Max-Tokens"] = str(cap)
    system = f"{conversation.system} (Session {run}.)"
    history: list[dict[str, str]] = [{"role": "system", "content": system}]
    rows: list[dict[str, Any]] = []
    previous = b""
    for index, (question, reply) in enumerate(conversation.turns, start=1):
        history.append({"role": "user", "content": question})
        # ``messages`` last: the body ends with them, so a previous body is a prefix of the next
        # up to its final ``]}`` when nothing before changed.
        body = {"model": MODEL, "messages": history}
        response = await client.post("/v1/chat/completions", json=body, headers=headers)
        if response.status_code != 200:
            raise RuntimeError(f"chat failed {response.status_code}: {response.text[:300]}")
        sent = recorder.bodies[-1]
        share, full = prefix_share(previous, sent) if previous else (0.0, False)
        rows.append(
            {
                "turn": index,
                "share": share,
                "full": full,
                "bytes": len(sent),
                "status": response.headers.get("X-Memory-Status", ""),
                "injected": int(response.headers.get("X-Memory-Injected", "0")),
                "tokens": int(response.headers.get("X-Memory-Tokens", "0")),
            }
        )
        history.append({"role": "assistant", "content": reply})
        previous = sent
    return rows


def summarize(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per variant and cap: the share at turn 2, its distribution over turns 2+, and costs."""
    later = [r for r in rows if r["turn"] >= 2]
    shares = [r["share"] for r in later]
    second = [r["share"] for r in later if r["turn"] == 2]
    cached = sum(r["share"] * r["bytes"] for r in later)
    return {
        "turn2_median": stats.percentile(second, 50),
        "p10": stats.percentile(shares, 10),
        "median": stats.percentile(shares, 50),
        "min": min(shares),
        "turns_ge_90": sum(s >= 0.9 for s in shares) / len(shares),
        "byte_weighted": cached / sum(r["bytes"] for r in later),
        "full_prefix": sum(r["full"] for r in later) / len(later),
        "new_block_tokens": sum(r["tokens"] for r in rows) / len(rows),
        "turns_with_new_block": sum(r["injected"] > 0 for r in rows) / len(rows),
        "degraded": sum(r["status"] == "degraded" for r in rows),
    }


def by_turn(rows: Sequence[Mapping[str, Any]], turns: int) -> dict[str, float]:
    """Median share per turn number over the conversations."""
    return {
        str(t): stats.percentile([r["share"] for r in rows if r["turn"] == t], 50)
        for t in range(2, turns + 1)
    }


async def measure(
    urls: Mapping[str, str], recorder: Recorder, conversations: Sequence[Replay], args: Any
) -> dict[str, Any]:
    """Store the memories in every server, replay every conversation in every variant."""
    auth = {"Authorization": f"Bearer {API_KEY}"}
    clients = {
        name: httpx.AsyncClient(base_url=url, headers=auth, timeout=60.0)
        for name, url in urls.items()
    }
    try:
        for client in clients.values():
            for conversation in conversations:
                await store(client, conversation.memories)
        results: dict[str, Any] = {}
        for cap in (None, args.cap):
            label = "default cap" if cap is None else f"cap {cap}"
            for variant, (server, headers) in VARIANTS.items():
                rows: list[dict[str, Any]] = []
                for conversation in conversations:
                    run = f"{variant}-{cap or 'default'}"
                    client = clients[server]
                    rows += await replay(client, recorder, conversation, headers, cap, run)
                results[f"{variant} / {label}"] = {
                    "summary": summarize(rows),
                    "by_turn": by_turn(rows, args.turns),
                }
        return results
    finally:
        for client in clients.values():
            await client.aclose()


def write_configs(folder: Path) -> dict[str, Path]:
    """One configuration file per server (``SERVERS``)."""
    paths = {}
    for name, extra in SERVERS.items():
        paths[name] = folder / f"{name}.yaml"
        paths[name].write_text(json.dumps({**RELAXED, **extra}))  # JSON is YAML
    return paths


async def run_with_servers(args: argparse.Namespace, conversations: Sequence[Replay]) -> Any:
    recorder = Recorder()
    port = servers.free_port()
    runner = await recorder.start(port)
    try:
        with tempfile.TemporaryDirectory(prefix="memproxy-prefix-") as tmp:
            started: dict[str, servers.ServerProcess] = {}
            try:
                configs = await asyncio.to_thread(write_configs, Path(tmp))
                for name, config in configs.items():
                    server = servers.memproxy(
                        f"http://127.0.0.1:{port}/v1",
                        Path(tmp, name),
                        extra_env={"MEMPROXY_CONFIG": str(config)},
                    )
                    # The server starts in a thread: its readiness poll blocks, the recorder
                    # must keep answering on this loop meanwhile.
                    started[name] = await asyncio.to_thread(server.start)
                urls = {name: server.base_url for name, server in started.items()}
                return await measure(urls, recorder, conversations, args)
            finally:
                for server in started.values():
                    server.stop()
    finally:
        await runner.cleanup()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--turns", type=int, default=TURNS)
    parser.add_argument("--conversations", type=int, default=0, help="first N replays (0: all)")
    parser.add_argument("--cap", type=int, default=CAP, help="the second X-Memory-Max-Tokens")
    parser.add_argument("--smoke", action="store_true", help="one conversation, 5 turns")
    parser.add_argument("--out", default="prefix_cache", help="results name under bench/results/")
    args = parser.parse_args(argv)
    if args.smoke:
        args.conversations, args.turns = 1, 5
        args.out = "prefix_cache-smoke" if args.out == "prefix_cache" else args.out
    return args


def main() -> None:
    args = parse_args()
    if not args.data.exists():
        raise SystemExit(f"LoCoMo data not found at {args.data} (pass --data)")
    samples = json.loads(args.data.read_text())
    conversations = replays(samples, args.turns, datetime.now(UTC))
    if args.conversations:
        conversations = conversations[: args.conversations]
    results = asyncio.run(run_with_servers(args, conversations))
    data = {
        "conversations": [c.name for c in conversations],
        "turns": args.turns,
        "memories": [len(c.memories) for c in conversations],
        "results": results,
        "machine": report.machine_info(),
    }
    path = report.save_results(args.out, data)
    print(
        f"Byte-identical prefix share of each upstream body with the previous turn's, "
        f"{len(conversations)} LoCoMo conversations x {args.turns} turns"
    )
    print(stats.format_table([{"variant": k, **v["summary"]} for k, v in results.items()]))
    print("median share by turn:")
    print(stats.format_table([{"variant": k, **v["by_turn"]} for k, v in results.items()]))
    if args.smoke:
        turn = results["turn / default cap"]["summary"]
        if turn["full_prefix"] < 1.0:
            raise SystemExit("smoke: position turn lost the previous prompt's prefix")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
