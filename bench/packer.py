"""Packer quality and time: the seed's greedy packer vs the optimal one (issue 6, item 3).

Packed score / optimal score (checked against an independent exact solver) and time p50, on
random and realistic instances, n = 10..500, budgets 500..80,000. The instances and the solver
live in ``bench/context.py`` (section 3), which this runs alone.

    .venv/bin/python bench/packer.py            # full grid
    .venv/bin/python bench/packer.py --smoke    # seconds, for CI
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.context import bench_packers


def main() -> None:
    """Print the packer table; ``--smoke`` runs a small grid."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny run for CI")
    args = parser.parse_args()
    bench_packers(args.smoke)


if __name__ == "__main__":
    main()
