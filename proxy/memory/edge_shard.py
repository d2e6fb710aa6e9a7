"""The embedded store's shard: its layout (vectors, quantization, graph) and how it is opened.

Dense search settings were measured on synthetic memories, top 50 against an exact scan
(adr/0082); the payload indexes make tenant, user and source filters cheap (adr/0011).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import qdrant_edge as qe

from proxy.errors import ConfigError, StoreError
from proxy.memory.points import (
    CREATED_TS_KEY,
    DENSE_VECTOR,
    EXPIRES_TS_KEY,
    INDEXED_KEYS,
    SPARSE_VECTOR,
    SUPERSEDED_KEY,
    TENANT_KEY,
)

CONFIG_FILE = "edge_config.json"
# The shard's directory ``memories`` is a symlink to ``memories.g<N>``: a background index
# build (adr/0153) makes generation N+1 beside it and switches the link, one atomic rename.
HNSW_M = 32
HNSW_EF_CONSTRUCT = 200
FULL_SCAN_KB = 2_000
# A segment with more vector bytes than this gets the HNSW graph and int8 copies when the shard
# is optimized; Qdrant's default (10 MB: 10,000 memories of 256 dimensions) left a 10k-memory
# real-text store, 9,476 distinct memories after write hygiene, an unindexed exact scan with
# unquantized vectors (search p50 1.41 -> 0.84 ms once indexed, docs/benchmarks.md). Below
# ``FULL_SCAN_KB`` a filtered search scans anyway, so indexing starts where scans stop.
INDEXING_THRESHOLD_KB = FULL_SCAN_KB


def shard_config(dimensions: int, search_threads: int | None = None) -> qe.EdgeConfig:
    """Return the shard layout: a cosine dense vector and an IDF-weighted sparse text vector.

    Dense search (adr/0082, measured on synthetic memories, top-50 against an exact scan):

    - An int8 copy of every dense vector stays in RAM; the best candidates are rescored with
      the originals (``edge_query.DENSE_PARAMS``), so returned cosines are exact.
    - HNSW with ``m`` 32 and ``ef_construct`` 200: Qdrant's defaults (16 / 100) found only 77 %
      of the true top 50 at 100k memories, these 96-97 %.
    - Exact scans stop at ``FULL_SCAN_KB`` of vectors per filter (about 2,000 memories of 256
      dimensions) instead of Qdrant's 10 MB: at 10k memories the graph answers in 0.23 ms with
      99.6 % recall where the scan took 0.45 ms.

    ``search_threads`` sizes the engine's search pool (adr/0131); ``None`` keeps what the shard
    was last opened with, else the engine's CPU-derived default. Loading writes a given size
    into the shard's config file, and a given size wins over the stored one.
    """
    return qe.EdgeConfig(
        vectors={DENSE_VECTOR: qe.EdgeVectorParams(size=dimensions, distance=qe.Distance.Cosine)},
        sparse_vectors={SPARSE_VECTOR: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        quantization_config=qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, always_ram=True),
        hnsw_config=qe.HnswIndexConfig(
            m=HNSW_M, ef_construct=HNSW_EF_CONSTRUCT, full_scan_threshold=FULL_SCAN_KB
        ),
        optimizers=qe.EdgeOptimizersConfig(indexing_threshold=INDEXING_THRESHOLD_KB),
        max_search_threads=search_threads,
    )


def generation_dir(path: Path, generation: int) -> Path:
    """The directory of the shard at ``path``'s ``generation``."""
    return path.with_name(f"{path.name}.g{generation}")


def current_generation(path: Path) -> int:
    """The generation the link ``path`` points at; a ``ConfigError`` if it links elsewhere."""
    target = os.readlink(path)
    found = _generation_of(path, os.path.basename(target))
    beside = os.path.dirname(target)  # "" as linked here; a hand-made link may name the dir
    if beside and os.path.realpath(path.parent / beside) != os.path.realpath(path.parent):
        found = None
    if found is None:
        raise ConfigError(
            f"{path} links to {target}, not to a generation of the memory store beside it "
            f"({path.name}.g<N>): memproxy switches this link itself (adr/0153); to keep the "
            "store on another disk, point store.data_dir there",
            param="store.data_dir",
        )
    return found


def _generation_of(path: Path, name: str) -> int | None:
    """The generation ``name`` (a name beside ``path``) is of ``path``'s shard, if any."""
    prefix = f"{path.name}.g"
    digits = name[len(prefix) :]
    return (
        int(digits) if name.startswith(prefix) and digits.isascii() and digits.isdigit() else None
    )


def _generations(path: Path) -> dict[int, Path]:
    """The shard's generation directories beside ``path``, by number."""
    found = {}
    for other in path.parent.glob(f"{path.name}.g*"):
        generation = _generation_of(path, other.name)
        if generation is not None and other.is_dir() and not other.is_symlink():
            found[generation] = other
    return found


def switch_generation(path: Path, generation: int) -> None:
    """Point the link ``path`` at ``generation`` in one rename: a crash leaves either."""
    temp = path.with_name(f"{path.name}.link")
    temp.unlink(missing_ok=True)
    os.symlink(generation_dir(path, generation).name, temp)  # relative: the data dir may move
    os.replace(temp, path)


def settle_generations(path: Path) -> None:
    """Make ``path`` the link to the shard's generation before it opens.

    A shard from before the link, a directory at ``path``, becomes generation 0; so does a new
    one. So does a copy of the data dir that followed the link (``cp -rL``): its directory is
    the live shard, the generations beside it copies. A copy that dropped the link
    (``rsync -r``) gets it back to its only generation; with several, which one was live
    cannot be told: a ``ConfigError``, nothing deleted. Anything else at ``path`` is left for
    opening to fail on.
    """
    if path.is_symlink():
        current = generation_dir(path, current_generation(path))  # refuses a foreign link
        if not current.is_dir():  # never a new empty store in place of the missing one
            raise ConfigError(
                f"{path} links to {current.name}, which is missing: restore it, or remove "
                "the link to start an empty store",
                param="store.data_dir",
            )
        return
    if path.is_dir():
        # Before the rename, so a crash between the renames leaves generation 0 alone.
        _drop_generations(path, None)
        os.replace(path, generation_dir(path, 0))
        switch_generation(path, 0)
        return
    if path.exists():
        return
    found = _generations(path)
    if len(found) > 1:
        names = ", ".join(sorted(p.name for p in found.values()))
        raise ConfigError(
            f"{path} is missing and {names} are beside it: link {path.name} to the one that "
            "holds the memories (the highest, unless a build was interrupted), e.g. "
            f"ln -s {path.name}.g<N> {path}",
            param="store.data_dir",
        )
    generation = next(iter(found), 0)
    generation_dir(path, generation).mkdir(parents=True, exist_ok=True)  # a new shard
    switch_generation(path, generation)


def drop_stale_generations(path: Path) -> None:
    """Drop the generations beside the link ``path`` but the one it names: what a build
    interrupted by a crash, or the replaced shard of a swap, left. Only once the shard is open
    here: its lock tells no other process serves it (whose build copy this would delete)."""
    _drop_generations(path, current_generation(path))


def _drop_generations(path: Path, keep: int | None) -> None:
    """Delete the shard's generation directories beside ``path`` but ``keep``."""
    for generation, directory in _generations(path).items():
        if generation != keep:
            shutil.rmtree(directory, ignore_errors=True)


def open_shard(path: Path, dimensions: int, search_threads: int | None = None) -> qe.EdgeShard:
    """Open the shard at ``path`` (creating it if new); a different vector size is a ConfigError."""
    config = shard_config(dimensions, search_threads)
    if not (path / CONFIG_FILE).exists():
        shard = qe.EdgeShard.create(str(path), config)
        shard.update(
            qe.UpdateOperation.create_field_index(TENANT_KEY, qe.KeywordIndexParams(is_tenant=True))
        )
        for key in INDEXED_KEYS[1:]:
            shard.update(qe.UpdateOperation.create_field_index(key, qe.PayloadSchemaType.Keyword))
        index_liveness(shard)
        index_times(shard)
        return shard
    try:
        shard = qe.EdgeShard.load(str(path), config)
    except Exception as exc:
        if "incompatible" in str(exc).lower():
            raise ConfigError(
                f"the memory store at {path} holds vectors of another size than the embedder's "
                f"{dimensions} dimensions ({exc}); use the embedder it was built with or a new "
                "data_dir",
                param="store.data_dir",
            ) from exc
        raise StoreError(f"cannot open the memory store at {path}: {exc}") from exc
    index_liveness(shard)  # shards created before the lifecycle keys existed get them too
    index_times(shard)
    return shard


def index_liveness(shard: qe.EdgeShard) -> None:
    """Index the lifecycle keys every search filters on (adr/0113). Without them the liveness
    condition reads each candidate's payload: search went from 5 to 53 ms p50 at 10k real-text
    memories (``bench/pipeline.py --skip-e2e``). Creating an existing index again is a no-op."""
    shard.update(
        qe.UpdateOperation.create_field_index(SUPERSEDED_KEY, qe.PayloadSchemaType.Keyword)
    )
    shard.update(qe.UpdateOperation.create_field_index(EXPIRES_TS_KEY, qe.PayloadSchemaType.Float))


def index_times(shard: qe.EdgeShard) -> None:
    """Index creation times for the neighbour lookup's range filter (``turns_near``, adr/0122);
    without it each of the user's turns' payloads is read. Creating it again is a no-op."""
    shard.update(qe.UpdateOperation.create_field_index(CREATED_TS_KEY, qe.PayloadSchemaType.Float))
