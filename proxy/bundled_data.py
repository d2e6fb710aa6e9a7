"""Data files litellm's wheel ships, found without importing litellm (its import takes seconds).

tiktoken downloads its BPE files on first use, which this machine (and many production hosts)
cannot; litellm's wheel carries cl100k_base, o200k_base and p50k_base under tiktoken's cache
names, and Anthropic's published Claude tokenizer (``claude_tokenizer_file``). It also carries
the model map that ``litellm.model_cost`` is under ``LITELLM_LOCAL_MODEL_COST_MAP=True``.
``use_bundled_data`` points both libraries at these files through their environment
variables: the one place memproxy writes the process environment for them. It runs where a
process starts (the app factory, the CLI) and where the adapters first need the files
(``proxy/tokenizer.py``, ``proxy/model_limits.py``) for scripts and library callers that start
elsewhere; it is idempotent and never overrides an operator's setting.
"""

from __future__ import annotations

import importlib.util
from collections.abc import MutableMapping
from pathlib import Path

TIKTOKEN_CACHE_VAR = "TIKTOKEN_CACHE_DIR"
LOCAL_MODEL_MAP_VAR = "LITELLM_LOCAL_MODEL_COST_MAP"
BPE_FOLDER = ("litellm_core_utils", "tokenizers")
MODEL_MAP_FILE = "model_prices_and_context_window_backup.json"
CLAUDE_TOKENIZER_FILE = "anthropic_tokenizer.json"


def litellm_folders() -> list[Path]:
    """The installed litellm package's folders (none when it is not installed)."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(folder) for folder in spec.submodule_search_locations]


def bpe_folder() -> Path | None:
    """The folder of tiktoken BPE files inside litellm, if any."""
    for folder in litellm_folders():
        path = folder.joinpath(*BPE_FOLDER)
        if path.is_dir():
            return path
    return None


def claude_tokenizer_file() -> Path | None:
    """Anthropic's Claude tokenizer (Hugging Face JSON) inside litellm, if any."""
    folder = bpe_folder()
    path = folder / CLAUDE_TOKENIZER_FILE if folder is not None else None
    return path if path is not None and path.is_file() else None


def model_map_file() -> Path | None:
    """litellm's shipped model map (the JSON ``litellm.model_cost`` is read from), if any."""
    for folder in litellm_folders():
        path = folder / MODEL_MAP_FILE
        if path.is_file():
            return path
    return None


def use_bundled_data(environ: MutableMapping[str, str]) -> None:
    """Point tiktoken at litellm's BPE files and litellm at its local model map.

    An operator's ``TIKTOKEN_CACHE_DIR`` (when not empty) and ``LITELLM_LOCAL_MODEL_COST_MAP``
    win.
    """
    environ.setdefault(LOCAL_MODEL_MAP_VAR, "True")
    if not environ.get(TIKTOKEN_CACHE_VAR):
        folder = bpe_folder()
        if folder is not None:
            environ[TIKTOKEN_CACHE_VAR] = str(folder)
