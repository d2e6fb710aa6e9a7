"""What every store shares (``proxy.memory.store``): token counts at write, tenant checks."""

from __future__ import annotations

import pytest

from proxy.errors import RequestError
from proxy.memory.store import require_tenant, with_tokens
from tests.memory.support import record


def test_with_tokens_counts_only_missing_encodings() -> None:
    full = with_tokens(record("m1", content="hello world"))
    assert set(full.tokens) == {"o200k_base", "cl100k_base", "claude"}
    given_counts = record("m1", tokens={"o200k_base": 7, "cl100k_base": 8, "claude": 9})
    assert with_tokens(given_counts) is given_counts
    partial = with_tokens(record("m1", content="hello world", tokens={"o200k_base": 7}))
    assert partial.tokens["o200k_base"] == 7
    assert partial.tokens["cl100k_base"] == 2


@pytest.mark.parametrize("tenant", ["", None, 3])
def test_require_tenant_refuses_blank(tenant: object) -> None:
    with pytest.raises(RequestError):
        require_tenant(tenant)  # type: ignore[arg-type]
