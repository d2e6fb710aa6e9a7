"""``POST /v1/chat/completions``: forwarding with memory (``with_memory.py``) for chat."""

from __future__ import annotations

from starlette.routing import Route

from proxy.apis.openai_chat import OPENAI_CHAT
from proxy.routes.with_memory import MemoryEndpoint

PATH = "/v1/chat/completions"
endpoint = MemoryEndpoint(OPENAI_CHAT)
routes = [Route(PATH, endpoint, methods=["POST"])]
