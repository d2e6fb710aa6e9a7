"""What every store shares (``proxy.memory.store``): token counts, tenant checks, opening."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.errors import ConfigError, RequestError
from proxy.memory.edge import EdgeStore
from proxy.memory.store import open_store, require_tenant, with_tokens
from proxy.settings import StoreSettings
from tests.memory.support import record


def test_with_tokens_counts_only_missing_encodings() -> None:
    full = with_tokens(record("m1", content="hello world"))
    assert set(full.tokens) == {"o200k_base", "cl100k_base"}
    given_counts = record("m1", tokens={"o200k_base": 7, "cl100k_base": 8})
    assert with_tokens(given_counts) is given_counts
    partial = with_tokens(record("m1", content="hello world", tokens={"o200k_base": 7}))
    assert partial.tokens["o200k_base"] == 7
    assert partial.tokens["cl100k_base"] == 2


@pytest.mark.parametrize("tenant", ["", None, 3])
def test_require_tenant_refuses_blank(tenant: object) -> None:
    with pytest.raises(RequestError):
        require_tenant(tenant)  # type: ignore[arg-type]


async def test_open_store_opens_the_configured_edge_store(tmp_path: Path) -> None:
    settings = StoreSettings(
        kind="edge", data_dir=str(tmp_path), hybrid=False, record_cache_entries=123
    )
    store = await open_store(settings, dimensions=8)
    try:
        assert isinstance(store, EdgeStore)
        assert store.hybrid is False
        assert store.dimensions == 8
        assert store.record_cache_entries == 123
    finally:
        await store.close()
    assert (tmp_path / "memories").is_dir()


async def test_open_store_needs_a_url_for_qdrant() -> None:
    with pytest.raises(ConfigError, match="qdrant_url"):
        await open_store(StoreSettings(kind="qdrant", qdrant_url=None), dimensions=8)
