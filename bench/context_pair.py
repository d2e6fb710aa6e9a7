"""The context engine of this checkout against another one: same outputs, and time ratios.

Two worker processes, one per tree, each importing its own tree's engine:

1. Outputs: both run the same cases (``assemble`` on LoCoMo memory texts plus non-ASCII and
   fence-like ones, every assembler setting, both encodings; the seed classes on loose inputs)
   under one ``PYTHONHASHSEED`` and report a digest per case; cases whose digests differ are
   listed. Set iteration order, hence the last bits of float sums, depends on the hash seed.
2. Time: every measurement (``assemble`` with memoised or freshly counted lines, budgets of a
   100-message conversation, the optimal packer, dedup) runs in batches alternating between the
   trees, so drift on a shared machine hits both alike; p50 and p10 per tree and their ratio.

3. ``--retrieved N`` (real text, as served): ``bench/pipeline.py``'s stage setup (10k
   real-text memories in the embedded store, a new LoCoMo question a request, top-k 50) runs
   N requests through this tree's ``Pipeline`` and keeps every ``assemble`` call it makes
   (candidates, query, budget, time, config). Both workers replay them in request order, the
   engine's memos emptied first, so memory texts are met for the first time where the server
   met them; every call is one sample. Outputs compared per call: block, injected ids and the
   explain figures. ``--cpu`` times each worker's thread CPU instead of the wall clock (on a
   shared machine, what others' load does not stretch); ``--only retrieved`` times that alone.
   ``--prepared`` profiles every memory text of the calls before each pass, as the embedded
   store's warm-up does for a store its memos hold (``profiles.prepare``): what a request of
   a 10k-memory store costs, where the emptied memos stand for a store larger than them.

    git archive <commit> | tar -x -C /tmp/engine-before
    .venv/bin/python bench/context_pair.py --baseline-tree /tmp/engine-before
    .venv/bin/python bench/context_pair.py --baseline-tree /tmp/engine-before --retrieved 300
    .venv/bin/python bench/context_pair.py --smoke    # this tree against itself, for CI

``--calls FILE`` replays a file ``capture_retrieved`` wrote (one capture for several runs).

A tree from before ADR 0093 has no ``BlockTokens``: the worker calls its ``assemble`` with
``encoding=`` and a memoised ``line_renderer`` (or none, for fresh counts) instead.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HASH_SEED = "1"
LINES_KEPT = 16_384  # the pipeline's memo size
EXTRA_TEXTS = [
    "Café crème — naïve façade",
    "東京で会いました。日本語のテキスト",
    "Straße STRASSE straße",
    "goes going gone",
    "Ünïcödé wörds and émojis 🙂 here",
]
QUERIES = [
    "When did Caroline go to the LGBTQ support group and what did she learn there?",
    "What did Melanie paint last summer?",
    "When is the café straße meeting?",
    "日本語",
    "goes",
]


def digest(value: Any) -> str:
    """A short stable digest of a JSON-able value."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Engine:
    """One tree's engine, as the worker process imported it."""

    def __init__(self) -> None:
        import bench.context as bc
        from proxy.context import render

        self.bc = bc
        self.render = render
        self.new_api = hasattr(render, "BlockTokens")

    def assemble_kwargs(self, encoding: str, memoised: bool) -> dict[str, Any]:
        """How this tree's ``assemble`` takes its encoding and line counts."""
        if self.new_api:
            from proxy.tokenizer import tiktoken_tokenizer

            count = tiktoken_tokenizer().counter(encoding)
            kept = LINES_KEPT if memoised else 0
            return {"tokens": self.render.BlockTokens(encoding, count, lines_kept=kept)}
        if not memoised:
            return {"encoding": encoding}
        line = functools.lru_cache(maxsize=LINES_KEPT)(self.render.line_renderer(encoding))
        return {"encoding": encoding, "line": line}

    def count_all(self, text: str) -> dict[str, int]:
        """Both stored encodings' counts of ``text``."""
        if self.new_api:
            from proxy.tokenizer import count_all
        else:
            from proxy.context.tokens import count_all  # type: ignore[attr-defined,no-redef]
        return count_all(text)


def output_cases(engine: Engine, cases: int) -> dict[str, str]:
    """Digests of the engine's and the seed classes' outputs on seeded random cases."""
    from proxy.context.assembler import AssemblerConfig, assemble
    from proxy.context.budget import TokenBudgetCalculator
    from proxy.context.bundle import BundleAccumulator, BundleConfig, ContextItem
    from proxy.context.packer import GreedyKnapsackPacker, OptimalKnapsackPacker
    from proxy.context.records import Candidate, MemoryRecord
    from proxy.context.scorer import MemoryScorer
    from proxy.context.synthesizer import STOPWORDS, MemorySynthesizer

    bc, now = engine.bc, engine.bc.NOW
    texts = bc.TEXTS or [bc.sentence(random.Random(1), 12)]
    configs = [
        AssemblerConfig(),
        AssemblerConfig(packer="greedy"),
        AssemblerConfig(idf_overlap=False),
        AssemblerConfig(drop_stopwords=False, stemmed=False),
        AssemblerConfig(bundle=BundleConfig(max_items=12, min_salience_threshold=0.35)),
        AssemblerConfig(bundle=BundleConfig(max_items=30, min_salience_threshold=0.0)),
    ]
    rnd = random.Random(11)
    out: dict[str, str] = {}
    for case in range(cases):
        pool = []
        for i in range(rnd.choice([0, 1, 5, 30, 100, 150])):
            content = rnd.choice(texts + EXTRA_TEXTS)
            if rnd.random() < 0.05:
                content += " </memories> \n  tail"
            record = MemoryRecord(
                f"m{i}",
                "t",
                "u",
                rnd.choice(bc.SOURCES),
                content,
                now - timedelta(days=rnd.uniform(-3, 400)),
                confidence=rnd.choice([0.8, rnd.random(), 1.3]),
                usefulness=rnd.random(),
                retrieval_count=rnd.randint(0, 90),
                tokens=engine.count_all(content) if rnd.random() < 0.9 else {},
            )
            pool.append(Candidate(record, rnd.uniform(-0.1, 1.05)))
        query, budget = rnd.choice(QUERIES), rnd.choice([0, 30, 200, 1000, 4500])
        config = rnd.choice(configs)
        kwargs = engine.assemble_kwargs(
            rnd.choice(["o200k_base", "cl100k_base"]), rnd.random() < 0.5
        )
        result = assemble(pool, query, budget, now=now, config=config, **kwargs)
        out[f"assemble {case}"] = digest(
            [result.explain(), result.bundle_stats, result.upper_bound]
        )

        synth = MemorySynthesizer(
            max_tokens=rnd.choice([0, 20, 100, 600, 4500]),
            stemmed=rnd.random() < 0.3,
            stopwords=STOPWORDS if rnd.random() < 0.5 else frozenset(),
        )
        size = rnd.randint(0, 10)
        for source in bc.SOURCES:
            synth.add_fragments(source, rnd.sample(texts + EXTRA_TEXTS, size))
        ranked = [(f.source, f.content, f.relevance) for f in synth.ranked(query)]
        out[f"synthesizer {case} stemmed={synth.stemmed}"] = digest(
            [synth.synthesize(query), ranked]
        )

        memories = [
            {
                "content": rnd.choice(texts),
                "similarity": rnd.choice([rnd.random(), None, "0.3", float("nan"), 1.5]),
                "created_at": rnd.choice(
                    [(now - timedelta(days=rnd.uniform(-5, 100))).isoformat(), None, "bad"]
                ),
                "usefulness_score": rnd.choice([rnd.random(), None]),
                "confidence": rnd.choice([rnd.random(), None, -2]),
                "retrieval_count": rnd.choice([rnd.randint(-5, 99), None, "7", 2.5]),
            }
            for _ in range(size * 4)
        ]
        scored = MemoryScorer().score(memories, now=now)
        out[f"scorer {case}"] = digest([s.composite_score for s in scored])
        calc = TokenBudgetCalculator()
        cap = rnd.choice([0, 50, 400, 4500])
        packs = [
            GreedyKnapsackPacker(calc).pack(scored, cap),
            OptimalKnapsackPacker().pack(scored, cap),
        ]
        out[f"packers {case}"] = digest(
            [(p.total_tokens, p.total_score, p.skipped_count, p.upper_bound) for p in packs]
        )
        bundle_config = rnd.choice(
            [BundleConfig(), BundleConfig.token_efficient(), BundleConfig(max_items=3)]
        )
        accumulator = BundleAccumulator(bundle_config, now=now)
        items = [
            ContextItem(str(i), "", rnd.choice([rnd.random(), 0.5, 0.05]), now - timedelta(days=i))
            for i in range(size * 4)
        ]
        added = [accumulator.add(item).value for item in items]
        dropped = [(item.id, result.value) for item, result in accumulator.dropped()]
        bundle = [item.id for item in accumulator.to_bundle()]
        out[f"bundle {case}"] = digest([added, bundle, dropped, accumulator.stats()])
        body = bc.conversation(rnd, rnd.randint(1, 30))
        body["model"] = rnd.choice(["gpt-4o", "gpt-4", "unknown", "gpt-3.5-turbo"])
        out[f"budget {case}"] = digest(
            [calc.calculate_request(body, "be brief"), calc.bounds(body)]
        )
    if engine.new_api:  # Claude's counts of every text (adr/0137 changes none of these)
        from proxy.tokenizer import tiktoken_tokenizer

        claude = tiktoken_tokenizer().counter("claude")
        out["claude counts"] = digest(counts(claude, [*texts, *EXTRA_TEXTS]))
    return out


def timed_actions(engine: Engine) -> dict[str, Callable[[], object]]:
    """The measurements, by name."""
    from proxy.context.assembler import AssemblerConfig, assemble
    from proxy.context.budget import TokenBudgetCalculator
    from proxy.context.dedup import dedup_order
    from proxy.context.knapsack import select_optimal
    from proxy.context.words import dedup_words

    bc = engine.bc
    rnd = random.Random(bc.SEED)
    pools = {n: bc.candidates(rnd, n) for n in (100, 500)}
    actions: dict[str, Callable[[], object]] = {}
    for n, pool in pools.items():
        for budget in (1_000, 4_500):
            for kind in ("optimal", "greedy"):
                config = AssemblerConfig(packer=kind)  # type: ignore[arg-type]
                for memo in (True, False):
                    kwargs = engine.assemble_kwargs("o200k_base", memo)
                    name = f"assemble {n} {budget} {kind} {'memo' if memo else 'fresh'}"
                    actions[name] = functools.partial(
                        assemble, pool, bc.QUERY, budget, now=bc.NOW, config=config, **kwargs
                    )
    body = bc.conversation(random.Random(bc.SEED), 100)
    calc = TokenBudgetCalculator()
    cached = list(calc.calculate_request(body).message_counts)
    actions["budget, 100 messages, counted"] = lambda: calc.calculate_request(body)
    actions["budget, 100 messages, cached"] = lambda: calc.calculate_request(
        body, cached_counts=cached
    )
    actions["budget, 100 messages, bounds"] = lambda: calc.bounds(body)
    instances = [bc.realistic_instance(rnd, 100) for _ in range(20)]
    actions["optimal packer, 20 x 100 items"] = lambda: [
        select_optimal(v, w, 4_500) for v, w in instances
    ]
    texts = [c.record.content for c in pools[500]]
    sets = [dedup_words(t) for t in texts]
    actions["dedup_words, 500 texts"] = lambda: [dedup_words(t) for t in texts]
    actions["dedup_order, 500 sets"] = lambda: dedup_order(sets, range(len(sets)))
    if engine.new_api:
        actions.update(claude_actions(engine, calc))
    return actions


def claude_actions(engine: Engine, calc: Any) -> dict[str, Callable[[], object]]:
    """A Claude request's counting (adr/0137): its texts' counts in ``claude`` and its budget
    by bounds and counted, on LoCoMo texts (17 of 2,128 non-ASCII) and on non-ASCII ones."""
    from proxy.tokenizer import tiktoken_tokenizer

    count = tiktoken_tokenizer().counter("claude")
    real = (engine.bc.TEXTS or [engine.bc.sentence(random.Random(1), 30)] * 100)[:100]
    foreign = [f"{text} {real[i]}" for i, text in enumerate(EXTRA_TEXTS * 20)]

    def body(texts: list[str]) -> dict[str, Any]:
        roles = ("user", "assistant")
        messages = [{"role": roles[i % 2], "content": t} for i, t in enumerate(texts)]
        return {"model": "claude-sonnet-4-5", "messages": messages, "max_tokens": 800}

    actions: dict[str, Callable[[], object]] = {}
    for name, texts in (("LoCoMo", real), ("non-ASCII", foreign)):
        request = body(texts)
        actions[f"claude count, 100 {name} texts"] = functools.partial(counts, count, texts)
        actions[f"claude bounds, 100 {name} messages"] = functools.partial(calc.bounds, request)
        actions[f"claude budget, 100 {name} messages"] = functools.partial(
            calc.calculate_request, request
        )
    return actions


def counts(count: Callable[[str], int], texts: list[str]) -> list[int]:
    """Each text's count."""
    return [count(text) for text in texts]


RETRIEVED = "assemble, retrieved real text, in request order"


def capture_retrieved(requests: int, path: Path) -> int:
    """Run ``requests`` new real-text questions through this tree's pipeline (10k real-text
    memories, top-k 50, as ``bench/pipeline.py``'s stage part) and write every ``assemble``
    call it makes to ``path`` as JSON; returns the number of calls."""
    import asyncio
    import dataclasses

    sys.path.insert(0, str(ROOT))
    from bench import pipeline as bench_pipeline
    from proxy.apis.openai_chat import OPENAI_CHAT
    from proxy.memory.edge import EdgeStore
    from proxy.memory.embedders import StaticEmbedder
    from proxy.pipeline import pipeline as pipeline_module
    from proxy.settings import load_settings
    from proxy.tenancy import TenantResolver

    calls: list[dict[str, Any]] = []
    assemble = pipeline_module.assemble

    def recording(candidates: Any, query: str, budget: int, **kwargs: Any) -> Any:
        config = kwargs["config"]
        calls.append(
            {
                "query": query,
                "budget": budget,
                "now": kwargs["now"].isoformat(),
                "encoding": kwargs["tokens"].encoding,
                "config": dataclasses.asdict(config),
                "candidates": [
                    {
                        **{f.name: getattr(c.record, f.name) for f in dataclasses.fields(c.record)},
                        "similarity": c.similarity,
                    }
                    for c in candidates
                ],
            }
        )
        return assemble(candidates, query, budget, **kwargs)

    async def run() -> None:
        embedder = StaticEmbedder()
        tenant = TenantResolver(load_settings(env={})).for_key(bench_pipeline.API_KEY)
        with tempfile.TemporaryDirectory(prefix="context-pair-") as data_dir:
            store = await EdgeStore.open(Path(data_dir), dimensions=embedder.dimensions)
            try:
                await bench_pipeline.seed_store(store, embedder, tenant.id, 10_000, "real")
                pipeline = bench_pipeline.bench_pipeline(store, embedder, 50)
                build = bench_pipeline.question_bodies("real")(False)
                for n in range(requests):
                    body = json.loads(build(n))
                    await pipeline.prepare(tenant, {}, body, OPENAI_CHAT)
            finally:
                await store.close()

    pipeline_module.assemble = recording  # type: ignore[assignment]
    try:
        asyncio.run(run())
    finally:
        pipeline_module.assemble = assemble
    path.write_text(json.dumps(calls, default=str))
    return len(calls)


def retrieved_calls(path: Path) -> list[Callable[[Any], Any]]:
    """The captured calls as this worker's engine takes them: each a function of the
    ``BlockTokens`` (per encoding) that assembles one request."""
    from datetime import datetime

    from proxy.context.assembler import AssemblerConfig, assemble
    from proxy.context.bundle import BundleConfig
    from proxy.context.records import Candidate, MemoryRecord

    calls = []
    for call in json.loads(path.read_text()):
        settings = dict(call["config"])
        config = AssemblerConfig(**{**settings, "bundle": BundleConfig(**settings["bundle"])})
        pool = []
        for item in call["candidates"]:
            fields = dict(item)
            similarity = fields.pop("similarity")
            for name in ("created_at", "expires_at"):
                if fields.get(name) is not None:
                    fields[name] = datetime.fromisoformat(fields[name])
            pool.append(Candidate(MemoryRecord(**fields), similarity))
        calls.append(
            functools.partial(
                lambda tokens, pool, call, config: assemble(
                    pool,
                    call["query"],
                    call["budget"],
                    now=datetime.fromisoformat(call["now"]),
                    tokens=tokens,
                    config=config,
                ),
                pool=pool,
                call=call,
                config=config,
            )
        )
    return calls


def forget_memos() -> None:
    """Empty every memo of the engine's modules (word sets, signatures): texts are new again."""
    from proxy import context

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith(context.__name__ + "."):
            for value in list(vars(module).values()):
                if not isinstance(value, type) and callable(getattr(value, "cache_clear", None)):
                    value.cache_clear()


def retrieved_digests(engine: Engine, calls: list[Callable[[Any], Any]]) -> dict[str, str]:
    """Per call: the block, the injected ids and the explain figures, digested."""
    tokens = engine.assemble_kwargs("o200k_base", True)["tokens"]
    out = {}
    for n, call in enumerate(calls):
        result = call(tokens)
        out[f"retrieved {n} block"] = digest(result.block)
        out[f"retrieved {n} ids"] = digest([m.id for m in result.packed])
        out[f"retrieved {n} explain"] = digest(result.explain())
    return out


def prepare_texts(calls: list[Callable[[Any], Any]]) -> None:
    """Profile the memory texts of ``calls`` as the embedded store's warm-up does."""
    from proxy.context.profiles import prepare

    prepare(candidate.record for call in calls for candidate in call.keywords["pool"])  # type: ignore[attr-defined]


def replay(
    engine: Engine, calls: list[Callable[[Any], Any]], clock: Callable[[], float], prepared: bool
) -> list[float]:
    """Every call in request order on emptied memos (their texts profiled first when
    ``prepared``) and a new line memo: seconds per call."""
    forget_memos()
    if prepared:
        prepare_texts(calls)
    tokens = engine.assemble_kwargs("o200k_base", True)["tokens"]
    samples = []
    for call in calls:
        start = clock()
        call(tokens)
        samples.append(clock() - start)
    return samples


def worker(tree: Path, cases: int, retrieved: Path | None, cpu: bool, prepared: bool) -> None:
    """Serve one tree: print output digests, then time ``name count`` requests from stdin."""
    sys.path.insert(0, str(tree))
    engine = Engine()
    calls = retrieved_calls(retrieved) if retrieved is not None else []
    outputs = output_cases(engine, cases)
    outputs.update(retrieved_digests(engine, calls))
    print(json.dumps(outputs), flush=True)
    actions = timed_actions(engine)
    for action in actions.values():
        action()
    names = list(actions) + ([RETRIEVED] if calls else [])
    print(json.dumps(names), flush=True)
    clock = time.thread_time if cpu else time.perf_counter
    for line in sys.stdin:
        name, count = line.rsplit(" ", 1)
        samples = []
        if name == RETRIEVED:  # one pass over the calls is one batch; a sample per call
            samples = replay(engine, calls, clock, prepared)
        else:
            action = actions[name]
            for _ in range(int(count)):
                start = clock()
                action()
                samples.append(clock() - start)
        print(json.dumps(samples), flush=True)


def quantile(samples: list[float], q: float) -> float:
    """The ``q`` quantile in milliseconds."""
    ordered = sorted(samples)
    return ordered[int(q * (len(ordered) - 1))] * 1e3


def main() -> None:
    """Start both workers, compare outputs, then time in alternation."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--baseline-tree", type=Path, default=ROOT, help="default: this tree (a self-check)"
    )
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--batch", type=int, default=15)
    parser.add_argument("--cases", type=int, default=60)
    parser.add_argument("--smoke", action="store_true", help="few cases and rounds")
    parser.add_argument(
        "--retrieved", type=int, default=0, metavar="N", help="also replay N served requests"
    )
    parser.add_argument(
        "--cpu", action="store_true", help="time the workers' CPU, not the wall (a busy machine)"
    )
    parser.add_argument(
        "--prepared",
        action="store_true",
        help="replay with the calls' texts profiled first (a store within the memos)",
    )
    parser.add_argument("--only", default="", help="time only the measures whose name has this")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument(
        "--calls", type=Path, help="replay this file of captured calls instead of capturing"
    )
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.batch, args.cases = 2, 3, 6
    if args.worker:
        worker(args.worker, args.cases, args.calls, args.cpu, args.prepared)
        return
    env = {**os.environ, "PYTHONHASHSEED": HASH_SEED}
    trees = {"baseline": args.baseline_tree.resolve(), "this": ROOT}
    calls_file = args.calls
    if args.retrieved and calls_file is None:
        calls_file = Path(tempfile.mkdtemp(prefix="context-pair-")) / "calls.json"
        made = capture_retrieved(args.retrieved, calls_file)
        print(f"captured {made} assemble calls of {args.retrieved} requests", file=sys.stderr)
    workers = {}
    for label, tree in trees.items():
        argv = [sys.executable, __file__, "--baseline-tree", str(tree), "--worker", str(tree)]
        argv += ["--cases", str(args.cases)]
        argv += ["--calls", str(calls_file)] if calls_file is not None else []
        argv += ["--cpu"] if args.cpu else []
        argv += ["--prepared"] if args.prepared else []
        workers[label] = subprocess.Popen(
            argv, cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
    outputs = {label: json.loads(w.stdout.readline()) for label, w in workers.items()}  # type: ignore[union-attr]
    differ = [k for k in outputs["this"] if outputs["this"][k] != outputs["baseline"].get(k)]
    print(f"## outputs: {len(outputs['this'])} cases, {len(differ)} differ from the baseline")
    for key in differ:
        print(f"  differs: {key}")
    names = [json.loads(w.stdout.readline()) for w in workers.values()][1]  # type: ignore[union-attr]
    names = [name for name in names if args.only in name]
    samples: dict[str, dict[str, list[float]]] = {n: {"baseline": [], "this": []} for n in names}
    for round_ in range(args.rounds):
        order = list(workers.items()) if round_ % 2 == 0 else list(reversed(workers.items()))
        for name in names:
            for label, w in order:
                w.stdin.write(f"{name} {args.batch}\n")  # type: ignore[union-attr]
                w.stdin.flush()  # type: ignore[union-attr]
                samples[name][label] += json.loads(w.stdout.readline())  # type: ignore[union-attr]
    clock = "thread CPU" if args.cpu else "wall"
    print(f"\n## {clock} time (ms), {args.rounds} alternating batches of {args.batch} per tree")
    print(
        f"{'measure':<36} {'base p50':>9} {'this p50':>9} {'ratio':>6} {'base p10':>9} "
        f"{'this p10':>9} {'ratio':>6}"
    )
    for name in names:
        base, this = samples[name]["baseline"], samples[name]["this"]
        b50, t50, b10, t10 = (
            quantile(base, 0.5),
            quantile(this, 0.5),
            quantile(base, 0.1),
            quantile(this, 0.1),
        )
        print(
            f"{name:<36} {b50:>9.3f} {t50:>9.3f} {t50 / b50:>6.3f} {b10:>9.3f} {t10:>9.3f} "
            f"{t10 / b10:>6.3f}"
        )
    for w in workers.values():
        w.stdin.close()  # type: ignore[union-attr]
        w.wait()


if __name__ == "__main__":
    main()
