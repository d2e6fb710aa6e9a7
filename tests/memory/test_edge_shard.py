"""The embedded shard's layout and opening."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import qdrant_edge as qe

from proxy.errors import ConfigError
from proxy.memory.edge_shard import (
    CONFIG_FILE,
    current_generation,
    drop_stale_generations,
    open_shard,
    settle_generations,
    shard_config,
    switch_generation,
)
from proxy.memory.points import (
    CREATED_TS_KEY,
    DENSE_VECTOR,
    EXPIRES_TS_KEY,
    INDEXED_KEYS,
    SPARSE_VECTOR,
    SUPERSEDED_KEY,
    TENANT_KEY,
)
from tests.memory.support import stored_pool_size

# Every search filters on liveness (adr/0113): unindexed, it read each candidate's payload; the
# neighbour lookup filters on creation time (adr/0122).
FILTERED_KEYS = {*INDEXED_KEYS, SUPERSEDED_KEY, EXPIRES_TS_KEY, CREATED_TS_KEY}


def point(pid: int, content: str) -> qe.Point:
    vectors = {DENSE_VECTOR: [0.5] * 8, SPARSE_VECTOR: qe.SparseVector([1], [1.0])}
    return qe.Point(pid, vectors, {TENANT_KEY: "t1", "content": content})


def test_a_new_shard_indexes_every_filtered_key_and_keeps_them_on_reopen(tmp_path: Path) -> None:
    shard = open_shard(tmp_path, 8)
    assert (tmp_path / CONFIG_FILE).exists()
    assert set(shard.info().payload_schema) == FILTERED_KEYS
    shard.close()
    again = open_shard(tmp_path, 8)
    try:
        assert set(again.info().payload_schema) == FILTERED_KEYS
    finally:
        again.close()


def test_a_shard_made_before_the_lifecycle_keys_gets_their_indexes(tmp_path: Path) -> None:
    qe.EdgeShard.create(str(tmp_path), shard_config(8)).close()
    shard = open_shard(tmp_path, 8)
    try:
        assert {SUPERSEDED_KEY, EXPIRES_TS_KEY, CREATED_TS_KEY} <= set(shard.info().payload_schema)
    finally:
        shard.close()


def test_reopening_with_another_vector_size_names_the_setting(tmp_path: Path) -> None:
    open_shard(tmp_path, 8).close()
    with pytest.raises(ConfigError) as caught:
        open_shard(tmp_path, 16)
    assert caught.value.param == "store.data_dir"


# The engine starts its pool's threads as it opens, but on a loaded machine the last may not be
# running yet when open returns: count until the size given is reached (or 10 s pass), then
# once more after a pause, so a larger pool still shows as larger.
SEARCH_THREADS_IN_A_FRESH_PROCESS = """
import os, sys, time
from pathlib import Path
from proxy.memory.edge_shard import open_shard
def count():
    names = [open(f"/proc/self/task/{t}/comm").read() for t in os.listdir("/proc/self/task")]
    return sum(name.startswith("edge-search") for name in names)
wanted = int(sys.argv[2])
shard = open_shard(Path(sys.argv[1]), 8, wanted)
deadline = time.monotonic() + 10
while count() < wanted and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(0.3)
print(count())
shard.close()
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
@pytest.mark.parametrize("threads", [1, 3])
def test_the_shard_runs_the_search_pool_it_is_opened_with(tmp_path: Path, threads: int) -> None:
    """The engine's own default made 8 threads on a 2-core machine (adr/0131); in a fresh
    process, where no other shard's threads linger, the pool has exactly the size given."""
    open_shard(tmp_path, 8).close()  # an existing shard: the size given on load wins
    argv = [sys.executable, "-c", SEARCH_THREADS_IN_A_FRESH_PROCESS, str(tmp_path), str(threads)]
    done = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60)
    assert int(done.stdout) == threads


def test_a_store_written_without_a_pool_size_opens_with_one_and_keeps_its_data(
    tmp_path: Path,
) -> None:
    """Shards written before adr/0131 hold no pool size in their config file."""
    old = qe.EdgeShard.create(str(tmp_path), shard_config(8))
    old.update(qe.UpdateOperation.upsert_points([qe.Point(7, {DENSE_VECTOR: [1.0] * 8}, {})]))
    old.close()
    assert stored_pool_size(tmp_path) is None
    shard = open_shard(tmp_path, 8, 2)
    try:
        assert stored_pool_size(tmp_path) == 2
        assert [p.id for p in shard.retrieve([7], False, False)] == [7]
    finally:
        shard.close()
    # A later open without a size (an older memproxy) keeps the stored one.
    open_shard(tmp_path, 8).close()
    assert stored_pool_size(tmp_path) == 2


def test_a_shard_from_before_the_link_becomes_generation_zero(tmp_path: Path) -> None:
    path = tmp_path / "memories"
    open_shard(path, 8).close()  # a real directory, as every store had before adr/0153
    settle_generations(path)
    assert os.readlink(path) == "memories.g0"
    assert (tmp_path / "memories.g0" / CONFIG_FILE).exists()
    open_shard(path, 8).close()  # opens through the link


def test_a_new_shard_starts_as_generation_zero(tmp_path: Path) -> None:
    path = tmp_path / "data" / "memories"
    settle_generations(path)
    assert os.readlink(path) == "memories.g0"
    assert current_generation(path) == 0


def test_a_crash_between_the_renames_of_the_first_open_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "memories"
    open_shard(tmp_path / "memories.g0", 8).close()  # renamed, not linked yet
    settle_generations(path)
    assert os.readlink(path) == "memories.g0"


def test_a_copy_a_crashed_build_left_is_dropped_and_the_link_kept(tmp_path: Path) -> None:
    path = tmp_path / "memories"
    settle_generations(path)
    switch_generation(path, 3)  # a build swapped generation 3 in
    (tmp_path / "memories.g3").mkdir()
    (tmp_path / "memories.g4").mkdir()  # the next build's copy, when the process died
    (tmp_path / "memories.g4" / "segment").write_text("half")
    settle_generations(path)
    assert (tmp_path / "memories.g4").exists()  # until the shard is open: it may be in use
    drop_stale_generations(path)
    assert current_generation(path) == 3
    assert not (tmp_path / "memories.g4").exists()
    assert not (tmp_path / "memories.g0").exists()  # replaced, not removed before the crash
    assert (tmp_path / "memories.g3").is_dir()


def test_something_else_at_the_path_is_left_for_opening_to_refuse(tmp_path: Path) -> None:
    path = tmp_path / "memories"
    path.write_text("not a directory")
    settle_generations(path)
    assert path.read_text() == "not a directory"


def test_a_lost_link_names_the_only_generation_again(tmp_path: Path) -> None:
    """A copy that drops links (``rsync -r``, some archivers) keeps the generation only."""
    path = tmp_path / "memories"
    shard = open_shard(tmp_path / "memories.g3", 8)
    shard.update(qe.UpdateOperation.upsert_points([point(1, "kept")]))
    shard.close()
    settle_generations(path)
    assert os.readlink(path) == "memories.g3"
    settle_generations(path)  # the next open keeps it too
    reopened = open_shard(path, 8)
    try:
        assert reopened.info().points_count == 1
    finally:
        reopened.close()


def test_a_lost_link_beside_several_generations_is_refused_and_nothing_dropped(
    tmp_path: Path,
) -> None:
    path = tmp_path / "memories"
    (tmp_path / "memories.g3").mkdir()
    (tmp_path / "memories.g4").mkdir()  # the live one, or a build's half copy: cannot tell
    with pytest.raises(ConfigError, match=r"memories\.g3"):
        settle_generations(path)
    assert (tmp_path / "memories.g3").is_dir()
    assert (tmp_path / "memories.g4").is_dir()
    assert not path.exists()


def test_a_copy_that_followed_the_link_opens_its_directory(tmp_path: Path) -> None:
    """``cp -rL``, ``scp -r``: the link became a directory, the generations are copied too."""
    path = tmp_path / "memories"
    shard = open_shard(path, 8)
    shard.update(qe.UpdateOperation.upsert_points([point(1, "kept")]))
    shard.close()
    open_shard(tmp_path / "memories.g0", 8).close()  # the same generation, copied again
    settle_generations(path)
    assert path.is_symlink()
    assert len(list(tmp_path.glob("memories.g*"))) == 1
    reopened = open_shard(path, 8)
    try:
        assert reopened.info().points_count == 1
    finally:
        reopened.close()


def test_a_link_to_anything_but_a_generation_is_a_config_error(tmp_path: Path) -> None:
    elsewhere = tmp_path / "other-disk" / "shard"
    open_shard(elsewhere, 8).close()
    path = tmp_path / "data" / "memories"
    path.parent.mkdir()
    path.symlink_to(elsewhere)
    with pytest.raises(ConfigError, match="links to"):
        settle_generations(path)
    assert (elsewhere / CONFIG_FILE).exists()


def test_a_link_made_by_hand_to_a_generation_by_its_full_path_is_one(tmp_path: Path) -> None:
    path = tmp_path / "memories"
    (tmp_path / "memories.g2").mkdir()
    path.symlink_to(tmp_path / "memories.g2")  # ln -s "$PWD/memories.g2" memories
    settle_generations(path)
    assert current_generation(path) == 2
    other = tmp_path / "elsewhere"
    (other / "memories.g2").mkdir(parents=True)
    path.unlink()
    path.symlink_to(other / "memories.g2")  # the same name in another directory: not ours
    with pytest.raises(ConfigError, match="links to"):
        settle_generations(path)


def test_a_link_to_a_missing_generation_is_a_config_error(tmp_path: Path) -> None:
    """The link copied without its directory (``cp -a data/memories``), or the directory
    deleted: a clear error, not a file error retried for ever nor an empty store."""
    path = tmp_path / "memories"
    switch_generation(path, 2)
    with pytest.raises(ConfigError, match="missing"):
        settle_generations(path)
