"""The embedded shard's layout and opening."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.errors import ConfigError
from proxy.memory.edge_shard import CONFIG_FILE, open_shard
from proxy.memory.points import INDEXED_KEYS


def test_a_new_shard_indexes_every_filtered_key_and_keeps_them_on_reopen(tmp_path: Path) -> None:
    shard = open_shard(tmp_path, 8)
    assert (tmp_path / CONFIG_FILE).exists()
    assert set(shard.info().payload_schema) == set(INDEXED_KEYS)
    shard.close()
    again = open_shard(tmp_path, 8)
    try:
        assert set(again.info().payload_schema) == set(INDEXED_KEYS)
    finally:
        again.close()


def test_reopening_with_another_vector_size_names_the_setting(tmp_path: Path) -> None:
    open_shard(tmp_path, 8).close()
    with pytest.raises(ConfigError) as caught:
        open_shard(tmp_path, 16)
    assert caught.value.param == "store.data_dir"
