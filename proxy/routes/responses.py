"""``POST /v1/responses``: forwarding with memory (``with_memory.py``) for the Responses API.

Only the create call: retrieving, deleting, cancelling a response and its ``input_items`` go
through the passthrough untouched.
"""

from __future__ import annotations

from starlette.routing import Route

from proxy.apis.openai_responses import RESPONSES
from proxy.routes.with_memory import MemoryEndpoint

PATH = "/v1/responses"
endpoint = MemoryEndpoint(RESPONSES)
routes = [Route(PATH, endpoint, methods=["POST"])]
