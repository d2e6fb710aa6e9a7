"""The providers memproxy forwards to: which upstream client an API's requests use, and how
the tenant authenticates there.

OpenAI's API (and every OpenAI-compatible one) goes to ``upstream.url`` with the key as
``Authorization: Bearer``; Anthropic's Messages API to ``upstream.anthropic.url`` with the key
as ``x-api-key`` (``proxy/tenancy.py``). In passthrough mode both forward the client's own
credential headers as sent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from proxy.services import Services
from proxy.tenancy import Tenant, UpstreamAuth, bearer_auth, x_api_key_auth
from proxy.upstream import UpstreamClient


@dataclass(frozen=True, slots=True)
class Provider:
    """Where one API's requests go (``client`` of the services) and their upstream auth."""

    name: str
    client: Callable[[Services], UpstreamClient]
    auth: Callable[[Tenant], UpstreamAuth]


def openai_client(services: Services) -> UpstreamClient:
    """The OpenAI-compatible upstream."""
    return services.upstream


def anthropic_client(services: Services) -> UpstreamClient:
    """Anthropic's API."""
    return services.anthropic


OPENAI = Provider("openai", openai_client, bearer_auth)
ANTHROPIC = Provider("anthropic", anthropic_client, x_api_key_auth)
