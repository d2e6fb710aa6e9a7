"""PNG charts for the README from the JSON results in ``bench/results/``.

- ``docs/latency-vs-concurrency.png``: p50 and p99 latency per target (direct, memproxy off/on,
  LiteLLM) against concurrency, from ``overhead.json`` (or the peer check's ``litellm-peer.json``).
- ``docs/recall-vs-budget.png``: LoCoMo evidence recall against the memory token budget, memproxy
  vs the top-k baseline, from ``locomo.json``.
- ``docs/prefix-share-by-turn.png``: the median share of each upstream prompt that repeats the
  previous turn's, per turn and block position, from ``prefix_cache.json``.

Results files hold ``rows`` as written by ``bench.lib.loadgen.result_rows`` and ``recall`` as
written by ``bench/locomo.py``. Run: ``.venv/bin/python bench/charts.py``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib import report
from bench.lib.servers import ROOT

DOCS = ROOT / "docs"
LATENCY_SOURCES = ("overhead", "litellm-peer")
LATENCY_PNG = "latency-vs-concurrency.png"
RECALL_PNG = "recall-vs-budget.png"
PREFIX_PNG = "prefix-share-by-turn.png"
DPI = 120


def latency_series(
    rows: Sequence[Mapping[str, Any]], stream: bool
) -> dict[str, list[tuple[int, float, float]]]:
    """Return target -> [(concurrency, p50_ms, p99_ms)] sorted by concurrency."""
    series: dict[str, list[tuple[int, float, float]]] = {}
    wanted = str(stream).lower()
    for row in rows:
        if str(row.get("stream", "false")).lower() != wanted:
            continue
        point = (int(row["c"]), float(row["p50_ms"]), float(row["p99_ms"]))
        series.setdefault(str(row["target"]), []).append(point)
    return {name: sorted(points) for name, points in sorted(series.items())}


def plot_latency(results: Mapping[str, Any], out: Path) -> Path:
    """Draw p50 (solid) and p99 (dashed) latency vs concurrency, plain and streaming panels."""
    rows = results["rows"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=False)
    for ax, stream in zip(axes, (False, True), strict=True):
        for name, points in latency_series(rows, stream).items():
            xs = [p[0] for p in points]
            line = ax.plot(xs, [p[1] for p in points], marker="o", label=f"{name} p50")[0]
            ax.plot(
                xs,
                [p[2] for p in points],
                marker="x",
                linestyle="--",
                color=line.get_color(),
                label=f"{name} p99",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        levels = sorted({p[0] for pts in latency_series(rows, stream).values() for p in pts})
        ax.set_xticks(levels, [str(c) for c in levels])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel("concurrent connections")
        ax.set_ylabel("latency (ms, log)")
        ax.set_title("streaming (full response)" if stream else "non-streaming")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    machine = results.get("machine", {})
    fig.suptitle(
        f"Latency vs concurrency, fake upstream - {machine.get('cores', '?')} cores, "
        f"{machine.get('date', '')[:10]}, commit {machine.get('commit', '?')}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return out


def recall_series(
    results: Mapping[str, Any], method: str, category: str
) -> list[tuple[int, float]]:
    """Return [(budget, recall %)] for one method and category, sorted by budget (the uncapped
    ``default`` run has no budget to plot at)."""
    by_budget = results["recall"][method]
    points = [
        (int(budget), 100.0 * values[category])
        for budget, values in by_budget.items()
        if category in values and budget.isdigit()
    ]
    return sorted(points)


def plot_recall(results: Mapping[str, Any], out: Path) -> Path:
    """Draw evidence recall vs budget: overall (thick) and per category (thin), both methods."""
    fig, ax = plt.subplots(figsize=(7.5, 5.6))
    styles = {"memproxy": "-", "memproxy-fill": "-.", "topk": "--", "topk-hybrid": ":"}
    labels = {
        "memproxy": "memproxy (adaptive)",
        "memproxy-fill": "memproxy (fill)",
        "topk": "top-k cosine",
        "topk-hybrid": "top-k hybrid",
    }
    categories = sorted({c for v in results["recall"]["topk"].values() for c in v} - {"overall"})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for method, style in styles.items():
        if method not in results["recall"]:
            continue
        for index, category in enumerate(["overall", *categories]):
            points = recall_series(results, method, category)
            overall = category == "overall"
            ax.plot(
                [p[0] for p in points],
                [p[1] for p in points],
                linestyle=style,
                marker="o" if overall else None,
                linewidth=2.5 if overall else 1.0,
                alpha=1.0 if overall else 0.6,
                color="black" if overall else colors[index % len(colors)],
                label=f"{labels[method]} - {category}",
            )
            if overall:
                for x, y in points:
                    ax.annotate(
                        f"{y:.0f}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8
                    )
    ax.set_xscale("log")
    budgets = sorted({int(b) for b in results["recall"]["topk"]})
    ax.set_xticks(budgets, [str(b) for b in budgets])
    ax.minorticks_off()
    ax.set_ylim(0, 100)
    ax.set_xlabel("memory budget (tokens)")
    ax.set_ylabel("evidence recall (%)")
    title = f"LoCoMo evidence recall, {results.get('questions', '?')} questions"
    return finish(fig, ax, title, results, out)


def finish(fig: Any, ax: Any, title: str, results: Mapping[str, Any], out: Path) -> Path:
    """Title (with the run's date), grid and legend below the plot; write ``out``."""
    ax.set_title(f"{title} ({results.get('machine', {}).get('date', '')[:10]})", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return out


def plot_prefix(results: Mapping[str, Any], out: Path) -> Path:
    """Draw the median cacheable-prefix share per turn, one line per variant (solid: default
    cap, dashed: the smaller cap)."""
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    variants = list(dict.fromkeys(name.split(" / ")[0] for name in results["results"]))
    for name, series in results["results"].items():
        variant, cap = name.split(" / ")
        if variant == "off" and "default" not in cap:
            continue  # memory off: no block, the cap changes nothing
        turns = sorted(int(t) for t in series["by_turn"])
        ax.plot(
            turns,
            [100 * series["by_turn"][str(t)] for t in turns],
            linestyle="-" if "default" in cap else "--",
            color=colors[variants.index(variant) % len(colors)],
            marker=".",
            label=name if variant != "off" else "memory off",
        )
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.axhline(90, color="grey", linewidth=0.8, linestyle=":")
    ax.set_ylim(0, 100)
    ax.set_xlabel("turn")
    ax.set_ylabel("prompt repeating the previous one (%)")
    title = f"Cacheable prompt prefix, {len(results['conversations'])} LoCoMo conversations"
    return finish(fig, ax, title, results, out)


def main() -> None:
    """Draw every chart whose results exist; say which are missing."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=report.RESULTS_DIR)
    parser.add_argument("--out", type=Path, default=DOCS)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    drawn = 0
    for name in LATENCY_SOURCES:
        results = report.load_results(name, args.results)
        if results is not None:
            print(f"{plot_latency(results, args.out / LATENCY_PNG)}  (from {name}.json)")
            drawn += 1
            break
    else:
        print(f"no {' or '.join(LATENCY_SOURCES)}.json: run bench/overhead.py first")
    locomo = report.load_results("locomo", args.results)
    if locomo is not None:
        print(plot_recall(locomo, args.out / RECALL_PNG))
        drawn += 1
    else:
        print("no locomo.json: run bench/locomo.py first")
    prefix = report.load_results("prefix_cache", args.results)
    if prefix is not None:
        print(plot_prefix(prefix, args.out / PREFIX_PNG))
        drawn += 1
    else:
        print("no prefix_cache.json: run bench/prefix_cache.py first")
    if not drawn:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
