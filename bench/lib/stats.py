"""Latency statistics and plain-text tables for benchmark output."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """Return the ``q``-th percentile (0..100) by linear interpolation; NaN when empty."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize_ms(seconds: Sequence[float]) -> dict[str, float]:
    """Return count, mean, p50, p90, p99 and max of latencies given in seconds, in milliseconds."""
    ms = [s * 1000.0 for s in seconds]
    return {
        "count": float(len(ms)),
        "mean": sum(ms) / len(ms) if ms else math.nan,
        "p50": percentile(ms, 50),
        "p90": percentile(ms, 90),
        "p99": percentile(ms, 99),
        "max": max(ms) if ms else math.nan,
    }


def ratio(numerator: float, denominator: float) -> float:
    """Return numerator / denominator, NaN when the denominator is not positive."""
    return numerator / denominator if denominator > 0 else math.nan


def format_cell(value: Any) -> str:
    """Render one table cell: floats with up to 2 decimals (3 significant below 1), NaN as '-'."""
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if value == 0:
            return "0"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 1:
            return f"{value:.2f}"
        return f"{value:.3f}"
    return str(value)


def format_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """Return rows as an aligned plain-text table (numbers right-aligned, text left-aligned)."""
    if not rows:
        return "(no rows)"
    columns = list(columns or rows[0].keys())
    cells = [[format_cell(row.get(col, "")) for col in columns] for row in rows]
    widths = [max(len(col), *(len(r[i]) for r in cells)) for i, col in enumerate(columns)]
    numeric = [all(isinstance(row.get(col), int | float) for row in rows) for col in columns]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(columns), rule, *(line(r) for r in cells)])
