"""The embedded shard's layout and opening."""

from __future__ import annotations

from pathlib import Path

import pytest
import qdrant_edge as qe

from proxy.errors import ConfigError
from proxy.memory.edge_shard import CONFIG_FILE, open_shard, shard_config
from proxy.memory.points import CREATED_TS_KEY, EXPIRES_TS_KEY, INDEXED_KEYS, SUPERSEDED_KEY

# Every search filters on liveness (adr/0113): unindexed, it read each candidate's payload; the
# neighbour lookup filters on creation time (adr/0122).
FILTERED_KEYS = {*INDEXED_KEYS, SUPERSEDED_KEY, EXPIRES_TS_KEY, CREATED_TS_KEY}


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
