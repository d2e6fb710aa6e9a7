"""Context engine speed and packing quality (issue 3, ADR-0039/0040/0041).

Measures:

1. ``assemble`` p50/p95 for 100 and 500 candidates (targets: < 2 ms and < 10 ms p50), with the
   block arithmetic kept across calls as the pipeline keeps it (rendered lines memoised).
2. ``TokenBudgetCalculator.calculate_request`` for a 100-message conversation (target < 2 ms),
   counting everything and with the caller's cached per-message counts.
3. Packing quality (packed score / optimal score) and time, seed greedy vs branch and bound, on
   random and realistic instances, n = 10..500, budgets 500..80,000. The optimum comes from an
   independent exact DP over token counts (numpy).
4. Dedup of 500 fragments: exact prefix filtering vs all pairs.
5. (full run only) Our request counts vs ``litellm.token_counter`` on a corpus of varied requests.

Run: ``.venv/bin/python bench/context.py`` (a few minutes), ``--smoke`` for CI (seconds).
The machine is shared with other work: timings are noisy, read p50 rather than p95.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proxy.bundled_data import use_bundled_data
from proxy.context.assembler import AssemblerConfig, assemble
from proxy.context.budget import TokenBudgetCalculator
from proxy.context.packer import select_greedy, select_optimal
from proxy.context.records import Candidate, MemoryRecord
from proxy.context.render import BlockTokens
from proxy.context.synthesizer import dedup_order, jaccard, normalise_words
from proxy.model_limits import load_model_limits
from proxy.pipeline.pipeline import LINE_CACHE_ENTRIES
from proxy.tokenizer import count_all, tiktoken_tokenizer

SEED = 3
NOW = datetime(2026, 1, 15, tzinfo=UTC)
LOCOMO = Path("/work/shared/bench/locomo/locomo_dev.json")  # CC BY-NC 4.0: read, never copied
SOURCES = ("learnings", "playbook", "conversation", "summaries")
QUERY = "When did Caroline go to the LGBTQ support group and what did she learn there?"
VOCAB = [
    "caroline",
    "melanie",
    "support",
    "group",
    "adoption",
    "agency",
    "painting",
    "camping",
    "beach",
    "friends",
    "family",
    "school",
    "kids",
    "music",
    "concert",
    "guitar",
    "violin",
    "pottery",
    "running",
    "marathon",
    "yesterday",
    "weekend",
    "summer",
    "festival",
    "book",
    "novel",
    "career",
    "counseling",
    "transgender",
    "community",
    "parade",
    "dog",
    "cat",
    "horse",
    "garden",
    "flowers",
    "sunset",
    "photo",
    "trip",
    "museum",
    "park",
    "lake",
    "mountain",
    "hiking",
    "bike",
    "coffee",
    "the",
    "a",
    "to",
    "and",
    "of",
    "in",
    "she",
    "he",
    "it",
    "was",
    "is",
    "for",
    "with",
    "on",
    "at",
    "her",
    "his",
    "they",
    "we",
    "this",
    "that",
    "went",
    "said",
    "really",
    "love",
    "great",
    "amazing",
    "tried",
    "learned",
    "felt",
    "happy",
    "proud",
    "excited",
]


def p50_ms(samples: Sequence[float]) -> float:
    """Median in milliseconds."""
    return statistics.median(samples) * 1e3


def p95_ms(samples: Sequence[float]) -> float:
    """95th percentile in milliseconds."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] * 1e3


def timed(action: Callable[[], Any], repeats: int) -> list[float]:
    """Wall times of ``repeats`` calls after two warm-ups."""
    for _ in range(2):
        action()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return samples


def locomo_texts() -> list[str]:
    """Real memory texts (LoCoMo turns and observations), read in place; [] if absent."""
    if not LOCOMO.is_file():
        return []
    texts = []
    for sample in json.loads(LOCOMO.read_text()):
        conversation = sample["conversation"]
        for key, turns in conversation.items():
            if key.startswith("session_") and isinstance(turns, list):
                texts.extend(f"{t['speaker']}: {t['text']}" for t in turns)
        for facts in sample.get("observation", {}).values():
            for per_speaker in facts.values():
                texts.extend(fact[0] for fact in per_speaker)
    return texts


TEXTS = locomo_texts()


def sentence(rnd: random.Random, words: int) -> str:
    """A conversation-like memory of ``words`` words."""
    return " ".join(rnd.choice(VOCAB) for _ in range(words)).capitalize() + "."


def candidates(rnd: random.Random, n: int) -> list[Candidate]:
    """LoCoMo memory texts (synthetic if absent), similarities 0.2-0.8, ages 0-300 days."""
    out = []
    for i in range(n):
        content = (
            rnd.choice(TEXTS)
            if TEXTS
            else sentence(rnd, int(rnd.lognormvariate(math.log(18), 0.5)) + 4)
        )
        record = MemoryRecord(
            id=f"m{i}",
            tenant="t",
            user="u",
            source=rnd.choice(SOURCES),
            content=content,
            created_at=NOW - timedelta(days=rnd.uniform(0, 300)),
            usefulness=rnd.uniform(0.3, 0.7),
            retrieval_count=rnd.randint(0, 20),
            tokens=count_all(content),
        )
        out.append(Candidate(record, rnd.uniform(0.2, 0.8)))
    out.sort(key=lambda c: c.similarity, reverse=True)
    return out


def bench_assembler(smoke: bool) -> None:
    """Section 1."""
    print("\n## assemble (score -> bundle -> dedup -> pack -> exact render)")
    print(
        f"{'candidates':>10} {'budget':>7} {'packer':>8} {'p50 ms':>8} {'p95 ms':>8} {'packed':>7}"
    )
    rnd = random.Random(SEED)
    repeats = 15 if smoke else 200
    encoding = "o200k_base"
    tokens = BlockTokens(
        encoding, tiktoken_tokenizer().counter(encoding), lines_kept=LINE_CACHE_ENTRIES
    )
    for n in (100, 500):
        pool = candidates(rnd, n)
        for budget in (1_000, 4_500):
            for kind in ("optimal", "greedy"):
                config = AssemblerConfig(packer=kind)  # type: ignore[arg-type]

                def run(
                    pool: list[Candidate] = pool, b: int = budget, c: AssemblerConfig = config
                ) -> Any:
                    return assemble(pool, QUERY, b, now=NOW, tokens=tokens, config=c)

                samples = timed(run, repeats)
                packed = len(run().packed)
                print(
                    f"{n:>10} {budget:>7} {kind:>8} {p50_ms(samples):>8.2f} "
                    f"{p95_ms(samples):>8.2f} {packed:>7}"
                )


def conversation(rnd: random.Random, turns: int) -> dict[str, Any]:
    """A chat request with a system prompt and ``turns`` user/assistant messages."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": sentence(rnd, 60)}]
    for i in range(turns - 1):
        role = "user" if i % 2 == 0 else "assistant"
        messages.append({"role": role, "content": sentence(rnd, rnd.randint(10, 120))})
    return {"model": "gpt-4o", "messages": messages, "max_tokens": 800}


def bench_budget(smoke: bool) -> None:
    """Section 2."""
    print("\n## TokenBudgetCalculator.calculate_request, 100-message conversation")
    rnd = random.Random(SEED)
    body = conversation(rnd, 100)
    calc = TokenBudgetCalculator()
    repeats = 20 if smoke else 300
    cold = timed(lambda: calc.calculate_request(body), repeats)
    counts = calc.calculate_request(body).message_counts
    cached = list(counts)
    warm = timed(lambda: calc.calculate_request(body, cached_counts=cached), repeats)
    tokens = calc.calculate_request(body).messages_tokens
    print(f"messages tokens: {tokens}")
    print(f"count everything: p50 {p50_ms(cold):.3f} ms, p95 {p95_ms(cold):.3f} ms")
    print(f"cached counts:    p50 {p50_ms(warm):.3f} ms, p95 {p95_ms(warm):.3f} ms")


def exact_optimum(values: Sequence[float], weights: Sequence[int], capacity: int) -> float:
    """Independent reference: exact 0/1 knapsack DP over token counts (numpy, value only)."""
    if capacity <= 0:
        return 0.0
    table = np.zeros(capacity + 1)
    for value, weight in zip(values, weights, strict=True):
        if weight > capacity or value <= 0:
            continue
        if weight == 0:
            table += value
            continue
        candidate = table[: capacity + 1 - weight] + value
        np.maximum(table[weight:], candidate, out=table[weight:])
    return float(table[-1])


def random_instance(rnd: random.Random, n: int) -> tuple[list[float], list[int]]:
    """Uncorrelated values U(0,1) and token counts U(5, 400), in score order."""
    items = sorted(((rnd.random(), rnd.randint(5, 400)) for _ in range(n)), reverse=True)
    return [v for v, _ in items], [w for _, w in items]


def realistic_instance(rnd: random.Random, n: int) -> tuple[list[float], list[int]]:
    """Assembler-like: value final**2 with final ~ 0.3-0.8, line tokens lognormal around 30."""
    items = []
    for _ in range(n):
        final = min(0.95, max(0.05, rnd.gauss(0.5, 0.1)))
        tokens = int(rnd.lognormvariate(math.log(28), 0.6)) + 5
        if rnd.random() < 0.05:
            tokens += rnd.randint(200, 1_500)  # a long summary now and then
        items.append((final**2, tokens))
    items.sort(reverse=True)
    return [v for v, _ in items], [w for _, w in items]


def bench_packers(smoke: bool) -> None:
    """Section 3."""
    print("\n## packers: quality = packed / optimal (min and mean over instances), time p50")
    header = (
        f"{'kind':>9} {'n':>4} {'budget':>6} {'greedy q min':>12} {'mean':>6} "
        f"{'optimal q min':>13} {'mean':>6} {'proven':>6} {'greedy ms':>9} {'optimal ms':>10}"
    )
    print(header)
    sizes = (10, 100) if smoke else (10, 50, 100, 200, 500)
    budgets = (500, 4_500) if smoke else (500, 2_000, 4_500, 20_000, 80_000)
    trials = 3 if smoke else 20
    for kind, make in (("random", random_instance), ("realistic", realistic_instance)):
        rnd = random.Random(SEED)
        for n, budget in itertools.product(sizes, budgets):
            g_quality, o_quality, g_time, o_time, proven = [], [], [], [], 0
            for _ in range(trials):
                values, weights = make(rnd, n)
                best = exact_optimum(values, weights, budget)
                start = time.perf_counter()
                greedy = select_greedy(values, weights, budget)
                g_time.append(time.perf_counter() - start)
                start = time.perf_counter()
                optimal = select_optimal(values, weights, budget)
                o_time.append(time.perf_counter() - start)
                assert optimal.weight <= budget
                assert optimal.value >= greedy.value
                assert optimal.value <= best + 1e-9
                g_quality.append(greedy.value / best if best else 1.0)
                o_quality.append(optimal.value / best if best else 1.0)
                proven += optimal.proven_optimal
            print(
                f"{kind:>9} {n:>4} {budget:>6} {min(g_quality):>12.3f} "
                f"{statistics.mean(g_quality):>6.3f} {min(o_quality):>13.4f} "
                f"{statistics.mean(o_quality):>6.4f} {proven:>3}/{trials:<2} "
                f"{p50_ms(g_time):>9.3f} {p50_ms(o_time):>10.3f}"
            )


def bench_dedup(smoke: bool) -> None:
    """Section 4."""
    print("\n## dedup of 500 fragments (Jaccard > 0.8)")
    rnd = random.Random(SEED)
    texts = (
        rnd.sample(TEXTS, 500) if TEXTS else [sentence(rnd, rnd.randint(6, 40)) for _ in range(500)]
    )
    texts += [t + " again" for t in texts[:50]]  # near duplicates
    sets = [normalise_words(t) for t in texts]
    order = range(len(sets))

    def all_pairs() -> list[int]:
        kept: list[int] = []
        for i in order:
            if all(jaccard(sets[i], sets[j]) <= 0.8 for j in kept):
                kept.append(i)
        return kept

    repeats = 3 if smoke else 20
    fast = timed(lambda: dedup_order(sets, order), repeats)
    slow = timed(all_pairs, repeats)
    assert dedup_order(sets, order)[0] == all_pairs()
    print(f"prefix filtering p50 {p50_ms(fast):.2f} ms; all pairs p50 {p50_ms(slow):.2f} ms")
    print(f"kept {len(dedup_order(sets, order)[0])} of {len(sets)} (same result both ways)")


def litellm_corpus(rnd: random.Random) -> list[dict[str, Any]]:
    """Varied chat requests: plain, named, multi-part with images, tools and tool calls, schemas."""
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    }
    code = "def f(xs):\n    return {k: v for k, v in xs.items() if v is not None}\n" * 3
    cjk = "记忆代理为每个请求计算精确的令牌预算。" * 5
    corpus: list[dict[str, Any]] = []
    for turns in (1, 5, 20, 100):
        corpus.append(conversation(rnd, turns))
    corpus.append({"model": "gpt-4o", "messages": [{"role": "user", "content": code}]})
    corpus.append({"model": "gpt-4o", "messages": [{"role": "user", "content": cjk}]})
    corpus.append(
        {"model": "gpt-4o", "messages": [{"role": "user", "name": "ann", "content": "Hi there"}]}
    )
    corpus.append({"model": "gpt-3.5-turbo", "messages": [{"role": "user", "content": code}]})
    corpus.append(
        {
            "model": "gpt-4o",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is in this image?"},
                        {
                            "type": "image_url",
                            "image_url": {"url": "https://x/y.png", "detail": "low"},
                        },
                    ],
                }
            ],
        }
    )
    calls = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21, "sky": "clear"}'},
    ]
    corpus.append({"model": "gpt-4o", "messages": calls[:1], "tools": [tool]})
    corpus.append({"model": "gpt-4o", "messages": calls, "tools": [tool]})
    return corpus


def bench_litellm() -> None:
    """Section 5: our counts vs litellm.token_counter (input side, no response)."""
    print("\n## request token counts: ours vs litellm.token_counter")
    use_bundled_data(os.environ)
    start = time.perf_counter()
    import litellm

    limits = load_model_limits()
    elapsed = time.perf_counter() - start
    print(f"litellm import + model map: {elapsed:.1f} s, {len(limits.table)} models")
    calc = TokenBudgetCalculator(limits)
    print(f"{'request':<42} {'ours':>7} {'litellm':>8} {'diff':>6}")
    for i, body in enumerate(litellm_corpus(random.Random(SEED))):
        ours = calc.calculate_request(body)
        mine = ours.messages_tokens + ours.tools_tokens
        try:
            theirs = litellm.token_counter(
                model=body["model"], messages=body["messages"], tools=body.get("tools")
            )
        except Exception as error:  # litellm raises on shapes it does not know
            print(f"{i:>2} litellm failed: {error!r}")
            continue
        label = f"{i:>2} {body['model']} {len(body['messages'])} msgs"
        label += " +tools" if body.get("tools") else ""
        kinds = {type(m.get("content")).__name__ for m in body["messages"]}
        label += f" ({','.join(sorted(kinds))})"
        print(f"{label:<42} {mine:>7} {theirs:>8} {mine - theirs:>+6}")


def main() -> None:
    """Run every section; ``--smoke`` makes it take seconds."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny run for CI")
    args = parser.parse_args()
    print(f"context engine bench ({'smoke' if args.smoke else 'full'}), shared 2-core machine")
    bench_assembler(args.smoke)
    bench_budget(args.smoke)
    bench_packers(args.smoke)
    bench_dedup(args.smoke)
    if not args.smoke:
        bench_litellm()


if __name__ == "__main__":
    main()
