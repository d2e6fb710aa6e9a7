"""Token counts of a chat request as providers bill it (OpenAI's chat format, tiktoken).

3 tokens a message + role + content, +1 and the name for ``name``, +3 reply priming (OpenAI
cookbook). Array content: text parts counted, images by a documented estimate per detail level,
audio and file parts by documented guesses. Tool calls: name + JSON arguments + 3. Tool and schema
definitions: compact JSON plus framing, an upper estimate of the provider's private rendering.
``message_key`` is the content hash a caller can cache per-message counts under.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

# OpenAI's chat format: <|start|>{role}<|message|>{content}<|end|> costs 3 tokens a message,
# a name 1 more, and every reply is primed with 3 (OpenAI cookbook, "How to count tokens").
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3
TOKENS_PER_TOOL_CALL = 3
# Tool and schema definitions are rendered by the provider in a private format; we count the
# compact JSON (an upper estimate: quotes and braces cost more than the rendering) plus framing.
TOOLS_BASE = 12
TOKENS_PER_TOOL = 8
RESPONSE_FORMAT_BASE = 8
# Images cost 85 tokens at low detail; high/auto depend on the size we do not know: we assume a
# 1024x1024 image (4 tiles x 170 + 85).
IMAGE_TOKENS: dict[str, int] = {"low": 85, "high": 765, "auto": 765}
AUDIO_PART_TOKENS = 200  # a documented guess; audio input is billed separately by duration
FILE_PART_TOKENS = 1_000  # a documented guess for file parts we cannot read


def message_key(message: Mapping[str, Any], encoding: str) -> str:
    """A stable content hash of one message for ``encoding`` (for the caller's count cache)."""
    raw = orjson.dumps(message, option=orjson.OPT_SORT_KEYS) + encoding.encode()
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def as_message(message: Any) -> Mapping[str, Any]:
    """Accept dict messages and objects with ``role``/``content`` attributes (the seed's)."""
    if isinstance(message, Mapping):
        return message
    return {"role": getattr(message, "role", ""), "content": getattr(message, "content", "")}


def json_text(value: Any) -> str:
    """Compact JSON of ``value`` (what tool and schema definitions are counted as)."""
    return orjson.dumps(value).decode()


def count_message(message: Mapping[str, Any], enc: Any) -> int:
    """Tokens of one chat message as billed: overhead, role, content, name, tool calls."""
    total = TOKENS_PER_MESSAGE + len(enc.encode_ordinary(str(message.get("role") or "")))
    total += count_content(message.get("content"), enc)
    name = message.get("name")
    if name:
        total += TOKENS_PER_NAME + len(enc.encode_ordinary(str(name)))
    tool_call_id = message.get("tool_call_id")
    if tool_call_id:
        total += len(enc.encode_ordinary(str(tool_call_id)))
    for call in message.get("tool_calls") or ():
        total += TOKENS_PER_TOOL_CALL + count_function_call(call.get("function") or {}, enc)
    function_call = message.get("function_call")
    if isinstance(function_call, Mapping):
        total += TOKENS_PER_TOOL_CALL + count_function_call(function_call, enc)
    return total


def count_function_call(call: Mapping[str, Any], enc: Any) -> int:
    """Tokens of a function name and its JSON arguments."""
    name = str(call.get("name") or "")
    arguments = call.get("arguments") or ""
    if not isinstance(arguments, str):
        arguments = json_text(arguments)
    return len(enc.encode_ordinary(name)) + len(enc.encode_ordinary(arguments))


def count_content(content: Any, enc: Any) -> int:
    """Tokens of string or array content; images and other parts by documented estimates."""
    if content is None:
        return 0
    if isinstance(content, str):
        return len(enc.encode_ordinary(content))
    if not isinstance(content, Sequence):
        return len(enc.encode_ordinary(json_text(content)))
    total = 0
    for part in content:
        if isinstance(part, str):
            total += len(enc.encode_ordinary(part))
            continue
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if kind in ("text", "input_text", "refusal"):
            total += len(enc.encode_ordinary(str(part.get(kind if kind == "refusal" else "text"))))
        elif kind == "image_url":
            image = part.get("image_url")
            detail = image.get("detail", "auto") if isinstance(image, Mapping) else "auto"
            total += IMAGE_TOKENS.get(str(detail), IMAGE_TOKENS["auto"])
        elif kind == "input_audio":
            total += AUDIO_PART_TOKENS
        elif kind == "file":
            total += FILE_PART_TOKENS
        else:
            total += len(enc.encode_ordinary(json_text(part)))
    return total
