"""``bench/stage_parts.py``: its run order, its check that every run injected the same bytes, and
its smoke run (a store seeded, parts timed, the engine's calls named)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import stage_parts
from bench.lib import realtext

ROOT = Path(__file__).resolve().parents[2]


def test_runs_alternate_a_b_b_a() -> None:
    assert stage_parts.abba(["base", "this"], 2) == ["base", "this", "this", "base"] * 2
    assert stage_parts.abba(["this"], 2) == ["this"] * 4


def test_a_question_injected_differently_in_any_run_is_named() -> None:
    a, b, c, x = "injected a", "injected b", "empty c", "injected x"
    same = {"base": [[a, b, c], [a, b, c]], "this": [[a, b, c]]}
    assert stage_parts.differing(same) == []
    one_run = {"base": [[a, b, c], [a, b, c]], "this": [[a, x, c]]}
    assert stage_parts.differing(one_run) == [1]
    within = {"this": [[a, b, c], [a, b, "empty d"]]}
    assert stage_parts.differing(within) == [2]


def test_a_request_degraded_in_one_run_is_left_out() -> None:
    """Past its deadline on a loaded machine a request forwards the client's body: timing."""
    late = {"base": [["injected a", "injected b"]], "this": [["injected a", "degraded c"]]}
    assert stage_parts.differing(late) == []
    assert stage_parts.degraded(late) == 1


@pytest.mark.skipif(not realtext.available(), reason="needs the LoCoMo data")
def test_smoke_names_the_engine_calls_and_the_parts() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "stage_parts.py"), "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    out = done.stdout
    for part in (
        "engine: dense branch",
        "engine: BM25 branch",
        "engine: cosines of lexical-only hits",
        "search: Python (all but the engine)",
        "assemble: dedup_walk",
        "assemble: the rest",
    ):
        assert part in out
