"""Tests for finding litellm's bundled data and pointing tiktoken and litellm at it."""

from __future__ import annotations

from proxy import bundled_data
from proxy.bundled_data import LOCAL_MODEL_MAP_VAR, TIKTOKEN_CACHE_VAR, use_bundled_data

# tiktoken's cache names (sha1 of the download URL) of o200k_base and cl100k_base.
BPE_FILES = ("fb374d419588a4632f3f557e76b4b70aebbca790", "9b5ad71b2ce5302211f9c61530b329a4922fc6a4")


def test_the_installed_litellm_ships_the_bpe_files_and_the_model_map() -> None:
    folder = bundled_data.bpe_folder()
    assert folder is not None
    assert all((folder / name).is_file() for name in BPE_FILES)
    model_map = bundled_data.model_map_file()
    assert model_map is not None
    assert model_map.name == bundled_data.MODEL_MAP_FILE


def test_use_bundled_data_points_both_libraries_at_local_files() -> None:
    environ: dict[str, str] = {}
    use_bundled_data(environ)
    assert environ == {
        LOCAL_MODEL_MAP_VAR: "True",
        TIKTOKEN_CACHE_VAR: str(bundled_data.bpe_folder()),
    }


def test_an_operators_settings_win() -> None:
    environ = {TIKTOKEN_CACHE_VAR: "/srv/bpe", LOCAL_MODEL_MAP_VAR: "False"}
    use_bundled_data(environ)
    assert environ == {TIKTOKEN_CACHE_VAR: "/srv/bpe", LOCAL_MODEL_MAP_VAR: "False"}
    empty = {TIKTOKEN_CACHE_VAR: ""}  # empty means unset, as before
    use_bundled_data(empty)
    assert empty[TIKTOKEN_CACHE_VAR] == str(bundled_data.bpe_folder())
