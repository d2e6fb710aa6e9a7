"""Garbage-collector settings for a serving process (ADR-0008).

A proxied request allocates a few hundred short-lived container objects (scope, headers,
coroutines, futures, messages). With CPython's default gen-0 threshold of 700 a collection runs
every few requests, and each one also walks whatever survived since the last. Nearly all
request garbage is freed by reference counting anyway, so collecting less often costs little
memory: a threshold of ``GEN0_THRESHOLD`` cut the proxy's CPU per request from ~70 to ~58 us
(``bench/overhead.py``, wrk, c=50). ``gc.freeze()`` moves everything loaded at start (modules,
settings, the app) out of the collector's sight, so older generations stay cheap to scan.

What the lifespan opens (the embedded store's index and records, the embedding model, the
tokenizers, caches) is far more than what the imports load, and it used to stay in sight: the
first gen-1 collection under load walked it all and held the loop for ~200 ms, every gen-2 one
~150 ms (10k real-text memories; docs/benchmarks.md). So a serving process freezes again once
the lifespan has opened its services (``freeze_started``).
"""

from __future__ import annotations

import gc

GEN0_THRESHOLD = 10_000
GEN1_THRESHOLD = 20
GEN2_THRESHOLD = 100


def tune_gc_for_serving() -> None:
    """Freeze start-up objects and collect young garbage less often (serving processes only)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GEN0_THRESHOLD, GEN1_THRESHOLD, GEN2_THRESHOLD)


def freeze_started() -> None:
    """Move what the lifespan just opened out of the collector's sight (serving processes)."""
    gc.collect()
    gc.freeze()
