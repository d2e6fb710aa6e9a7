"""Metric labels of the request middleware: bounded, one per route."""

from __future__ import annotations

import pytest

from proxy.middleware import route_label


@pytest.mark.parametrize(
    ("path", "label"),
    [
        ("/v1/chat/completions", "chat"),
        ("/v1/responses", "responses"),
        ("/v1/responses/resp_1", "passthrough"),  # retrieving a response is forwarded as is
        ("/v1/messages", "messages"),
        ("/v1/messages/count_tokens", "passthrough"),  # forwarded as is, to Anthropic
        ("/v1/memories/abc", "memories"),
        ("/v1/models", "passthrough"),
        ("/healthz", "healthz"),
        ("/anything", "other"),
    ],
)
def test_route_label(path: str, label: str) -> None:
    assert route_label(path) == label
