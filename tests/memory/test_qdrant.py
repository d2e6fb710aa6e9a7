"""``QdrantStore`` specifics beyond the contract: the client's failures become ``StoreError``."""

from __future__ import annotations

import httpx
import pytest
from qdrant_client.common.client_exceptions import ResourceExhaustedResponse
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from proxy.errors import StoreError
from proxy.memory.qdrant import store_errors


@pytest.mark.parametrize(
    "failure",
    [
        UnexpectedResponse(503, "Service Unavailable", b"{}", httpx.Headers()),
        ResponseHandlingException(httpx.ConnectError("refused")),
        ResourceExhaustedResponse("slow down", "1"),
        httpx.ReadTimeout("read"),
        ConnectionResetError("reset"),
    ],
    ids=lambda e: type(e).__name__,
)
async def test_client_failures_are_store_errors(failure: Exception) -> None:
    @store_errors
    async def call() -> None:
        raise failure

    with pytest.raises(StoreError) as caught:
        await call()
    assert caught.value.status == 503
    assert caught.value.__cause__ is failure


@pytest.mark.parametrize("bug", [KeyError("k"), AttributeError("a"), TypeError("t")])
async def test_bugs_stay_themselves(bug: Exception) -> None:
    @store_errors
    async def call() -> None:
        raise bug

    with pytest.raises(type(bug)):
        await call()
