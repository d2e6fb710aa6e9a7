"""``bench/pipeline.py``'s part 2 measures each top-k as a deployment configured with it."""

from __future__ import annotations

from bench import pipeline as bench_pipeline
from proxy.defaults import MEMORY_TOP_K


def test_each_top_k_is_the_tenants_own() -> None:
    """A request's options start from the tenant's limits: a tenant of the default settings
    would hold every configured pipeline to the default top_k (and its lexical candidates)."""
    assert bench_pipeline.bench_tenant_settings(30).memory.top_k == 30
    assert bench_pipeline.bench_tenant_settings(70).memory.top_k == 70
    assert bench_pipeline.bench_tenant_settings().memory.top_k == MEMORY_TOP_K
