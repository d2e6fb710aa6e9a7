"""Reading the pages of a request's documents without holding the event loop (adr/0152).

The adapters bill a document by the estimate from its size and leave its pages to read
(``Conversation.documents``); this reads them when the request is budgeted, never otherwise
(memory off, nothing to budget). ``read_pages`` pauses after every ``PDF_READ_STEP`` of work:
the loop reads for ``PDF_READ_SLICE_S``, then serves other requests, then reads on. Past
``until`` the documents not read yet keep their estimate. On the loop, not a thread: decoding
base64 and matching holds the GIL, so a worker frees the loop no more than these slices do
(measured the same, handing the GIL over between steps), and would take a worker that exact
counting may need.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from proxy.context.documents import Document, Steps, read_pages
from proxy.defaults import PDF_READ_SLICE_S

Reader = Callable[[str], Steps[int]]


async def read_documents(
    documents: Sequence[Document],
    until: float,
    *,
    slice_s: float = PDF_READ_SLICE_S,
    reader: Reader = read_pages,
) -> bool:
    """Write each document's pages into its billed part, reading ``slice_s`` at a time until
    ``until`` (the loop's clock); whether every one was read."""
    loop = asyncio.get_running_loop()
    # One slice clock for all the documents: a request of many small ones, each read within a
    # slice, held the loop for all of them, past ``until``. The smallest are read first: a
    # document whose pages are denser than its estimate's is small, and would otherwise wait
    # behind a large one until time is up.
    began = loop.time()
    for document in sorted(documents, key=lambda document: len(document.data)):
        steps = reader(document.data)
        finished = False
        while not finished:
            try:
                next(steps)
            except StopIteration as done:
                document.part["pages"] = done.value
                finished = True
            now = loop.time()
            if now - began >= slice_s:
                if now >= until and not finished:
                    steps.close()
                    return False
                await asyncio.sleep(0)
                began = loop.time()
    return True
