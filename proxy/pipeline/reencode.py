"""Re-encoding a chat body after injection, only when the result says what the client sent.

orjson reads some JSON it cannot write back the same. It parses nesting up to 1024 levels but
encodes at most 254, and it reads an integer beyond 64 bits as the nearest double, which it then
writes as ``1.8446744073709552e+19``. A body like that is forwarded as the client's own bytes,
without memories (the request is ``degraded``, reason ``encode``): memory on never fails or
alters a request that memory off would pass.

Finding such a number is two steps. A scan of the output for ``<digit>e+NN`` is C speed and
finds nothing in most bodies; but base64 (images, PDFs) is full of text shaped like that, and a
scan alone sent most requests carrying a large base64 part without memories. So a hit is only a
reason to look at the parsed body itself, where the numbers are floats and strings are strings.
"""

from __future__ import annotations

import orjson

# An integer read as a double is at least 2**63 in magnitude: orjson writes it with an
# exponent of 18 or more. A float the client wrote that large is caught too (harmless: that
# request just goes without memories).
EXPONENT = b"e+"
LOSSY_EXPONENT_DIGITS = 2
LOSSY_EXPONENT_MIN = 18
# Hostile text can repeat "e+" millions of times; past this many look-ups, the body decides.
MAX_EXPONENT_CHECKS = 256
# Only a double at least this large can be an integer orjson could not read as one (beyond
# 64 bits either way).
LOSSY_MAGNITUDE = float(2**63)
# The body check visits each JSON value once; a hostile body of millions of tiny values would
# hold the loop for seconds, so past this many it assumes the worst (ordinary chat bodies hold
# a few thousand).
MAX_VALUES_CHECKED = 200_000


def reencode(body: object) -> bytes | None:
    """``body`` as compact JSON, or ``None`` when that would not be the body the client sent."""
    try:
        encoded = orjson.dumps(body)
    except orjson.JSONEncodeError:
        return None
    if has_lossy_number(encoded) and holds_lossy_number(body):
        return None
    return encoded


def holds_lossy_number(body: object) -> bool:
    """Whether the parsed ``body`` holds a double of magnitude 2**63 or more (or more values
    than ``MAX_VALUES_CHECKED``, when it assumes so)."""
    pending = [body]
    checked = 0
    while pending:
        value = pending.pop()
        checked += 1
        if checked > MAX_VALUES_CHECKED:
            return True
        if isinstance(value, float):
            if abs(value) >= LOSSY_MAGNITUDE:
                return True
        elif isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return False


def has_lossy_number(encoded: bytes) -> bool:
    """Whether orjson's output may hold a number written with an exponent of 18 or more.

    A JSON string cannot hide one from this check, only cause a false alarm: the scan looks at
    every ``<digit>e+NN``, quoted or not (bounded by ``MAX_EXPONENT_CHECKS``); ``reencode``
    settles an alarm on the parsed body.
    """
    start = 0
    for _ in range(MAX_EXPONENT_CHECKS):
        at = encoded.find(EXPONENT, start)
        if at < 0:
            return False
        start = at + len(EXPONENT)
        if at == 0 or not encoded[at - 1 : at].isdigit():
            continue
        end = start
        while end < len(encoded) and encoded[end : end + 1].isdigit():
            end += 1
        digits = encoded[start:end]
        if len(digits) > LOSSY_EXPONENT_DIGITS or (digits and int(digits) >= LOSSY_EXPONENT_MIN):
            return True
    return True
