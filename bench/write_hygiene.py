"""What write hygiene costs: writing memories without ids (duplicate check: one lookup per
batch, adr/0119) against the same memories with ids (no check), interleaved in one run, on
real text.

Each round writes one batch of LoCoMo memories (``bench/lib/realtext.py``) both ways into two
fresh embedded stores that grow alike, alternating which goes first, so machine load hits both
the same. It reports memories/s and CPU us per memory of each, their ratio, and how many of
the id-less writes the check found to be repeats (LoCoMo repeats a few short turns: "Yeah!",
"Thanks!").

    .venv/bin/python bench/write_hygiene.py            # 2,000 memories in batches of 200
    .venv/bin/python bench/write_hygiene.py --smoke    # 400 memories, seconds
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.realtext import RealText
from proxy.memory.edge import EdgeStore
from proxy.memory.embedders import StaticEmbedder
from proxy.memory.inputs import MemoryInput
from proxy.memory.service import MemoryService

TENANT, USER = "bench", "u"


async def run(total: int, batch: int) -> dict[str, float]:
    texts = [content for _, content in RealText().texts(total)]
    embedder = StaticEmbedder()
    with tempfile.TemporaryDirectory() as root:
        stores = {
            name: await EdgeStore.open(Path(root) / name, dimensions=embedder.dimensions)
            for name in ("checked", "with_ids")
        }
        services = {name: MemoryService(store, embedder) for name, store in stores.items()}
        for service in services.values():  # tokenizer tables and the model's first call
            await service.write_unique("warm", [MemoryInput(content="warm up", user=USER)])
        seconds = {name: 0.0 for name in stores}
        cpu = {name: 0.0 for name in stores}
        repeats = 0
        for round_, start in enumerate(range(0, total, batch)):
            chunk = texts[start : start + batch]
            order = ["checked", "with_ids"] if round_ % 2 == 0 else ["with_ids", "checked"]
            for name in order:
                inputs = [
                    MemoryInput(
                        content=text,
                        user=USER,
                        id=f"m{start + i}" if name == "with_ids" else None,
                    )
                    for i, text in enumerate(chunk)
                ]
                began, began_cpu = time.perf_counter(), time.process_time()
                written = await services[name].write_unique(TENANT, inputs)
                seconds[name] += time.perf_counter() - began
                cpu[name] += time.process_time() - began_cpu
                if name == "checked":
                    repeats += sum(1 for _, stored in written if not stored)
        for store in stores.values():
            await store.close()
    rate = {name: total / spent for name, spent in seconds.items()}
    return {
        "memories": total,
        "checked_per_s": round(rate["checked"], 1),
        "with_ids_per_s": round(rate["with_ids"], 1),
        "checked_over_with_ids": round(rate["checked"] / rate["with_ids"], 3),
        # CPU of all threads a memory: steadier than the rates on a shared machine.
        "checked_cpu_us": round(cpu["checked"] / total * 1e6, 1),
        "with_ids_cpu_us": round(cpu["with_ids"] / total * 1e6, 1),
        "repeats_skipped": repeats,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    total = 400 if args.smoke else args.memories
    print(json.dumps(asyncio.run(run(total, args.batch)), indent=2))


if __name__ == "__main__":
    main()
