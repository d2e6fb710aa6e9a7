"""Capture: after the response, store the turn as ``conversation`` memories (off the path).

``user`` stores the last user message, ``turn`` also the assistant's answer (for a stream, the
text assembled from its deltas: ``Completion.text``). Both carry the session id and the role in
their metadata. Only the client's own words are stored: anything fenced like memproxy's block is
cut out, so injected memories never come back as new ones. Writes go through
``MemoryService.write``, the one write path (validation, token counts, embedding, store, cache
generation bump), seen here as a ``MemoryWriter``. A failed or refused upstream answer captures
nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from proxy.memory.inputs import MemoryInput, is_blank
from proxy.memory.service import MemoryWriter
from proxy.metrics import Metrics
from proxy.pipeline.contract import Completion
from proxy.pipeline.options import RequestOptions
from proxy.pipeline.query import last_user_texts, strip_block

CONVERSATION = "conversation"
LOGGER = logging.getLogger("memproxy.pipeline")


def capture_inputs(
    options: RequestOptions,
    messages: Sequence[Mapping[str, object]],
    completion: Completion,
    max_chars: int,
) -> list[MemoryInput]:
    """The memories one turn yields under ``options.capture`` (empty when nothing to keep)."""
    if options.capture == "off" or not completion.ok or completion.status >= 400:
        return []
    meta: dict[str, object] = {"session": options.session} if options.session else {}
    inputs: list[MemoryInput] = []
    said = last_user_texts(messages, 1)
    # Blank by the memories' rule (a lone BOM is not Python whitespace): nothing to keep, and
    # MemoryInput would refuse it.
    if said and not is_blank(said[0]):
        inputs.append(
            MemoryInput(
                content=said[0][:max_chars],
                user=options.user,
                source=CONVERSATION,
                metadata={**meta, "role": "user"},
            )
        )
    if options.capture == "turn":
        answer = strip_block(completion.text).strip()
        if not is_blank(answer):
            inputs.append(
                MemoryInput(
                    content=answer[:max_chars],
                    user=options.user,
                    source=CONVERSATION,
                    metadata={**meta, "role": "assistant"},
                )
            )
    return inputs


async def capture_turn(
    writer: MemoryWriter, tenant: str, inputs: Sequence[MemoryInput], metrics: Metrics
) -> None:
    """Write the captured memories; a failure is logged and counted, never raised."""
    if not inputs:
        return
    try:
        await writer.write(tenant, inputs)
    except Exception as exc:  # capture is best effort: the client already has its answer
        LOGGER.warning("capture failed for tenant %s: %s", tenant, type(exc).__name__)
        metrics.count_memory_work("capture", ok=False)
    else:
        metrics.count_memory_work("capture", ok=True)
