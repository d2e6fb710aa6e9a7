"""The upstream APIs memproxy speaks, one module each: how to read that API's answers.

The relay (``proxy/relay.py``) knows bytes, not APIs: it hands what it relayed to a route's
answer hook as an ``Answer``; the route's API module turns that into a ``Completion`` for the
memory pipeline (``completion_hook``). Today: OpenAI chat completions (``openai_chat``).
"""
