"""The APIs memproxy serves with memory, one module each, and the seam they plug into.

``adapter.ApiAdapter`` is what the one memory pipeline and the one forwarding route
(``proxy/routes/with_memory.py``) know of an API: how to read its body into a ``Conversation``,
write the memory block back, and read its answers. The relay (``proxy/relay.py``) knows bytes,
not APIs: it hands what it relayed to the route's answer hook as an ``Answer`` (``answer.py``),
which the adapter turns into a ``Completion``. Adapters: OpenAI chat completions
(``openai_chat``), the Responses API (``openai_responses``), Anthropic Messages
(``anthropic_messages``).
"""
