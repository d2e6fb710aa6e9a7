"""Tests for reading litellm's model table into the engine's limits (loaded once per session)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from proxy import model_limits
from proxy.context import limits
from proxy.context.limits import ModelLimits


@pytest.fixture(scope="session")
def litellm_limits() -> ModelLimits:
    """litellm's model map, loaded once per test session."""
    return model_limits.load_model_limits()


def test_seed_models_hold_over_litellm(litellm_limits: ModelLimits) -> None:
    for name, window in limits.MODEL_CONTEXT_WINDOWS.items():
        assert litellm_limits.lookup(name).context_window == window
    assert litellm_limits.lookup("gpt-4.1").context_window > 128_000
    assert litellm_limits.lookup("openai/gpt-4o-mini").context_window == 128_000
    assert len(litellm_limits.table) > 1_000


@pytest.mark.parametrize(
    ("model", "window"),
    [
        ("claude-sonnet-4-20250514", 200_000),
        ("anthropic/claude-3-5-sonnet-20241022", 200_000),
        ("claude-3-haiku-20240307", 200_000),
        ("claude-opus-4-1-20250805", 200_000),
        ("meta-llama/Llama-3.1-8B-Instruct", 131_072),
        ("llama3.3:70b", 131_072),
        ("gpt-oss-120b", 131_072),
        ("totally-unknown-model", limits.DEFAULT_CONTEXT_WINDOW),
    ],
)
def test_families_cover_models_litellm_lacks(
    litellm_limits: ModelLimits, model: str, window: int
) -> None:
    assert litellm_limits.lookup(model).context_window == window


def test_model_map_is_read_without_importing_litellm() -> None:
    model_map = model_limits.read_litellm_model_map()
    assert model_map is not None
    assert model_map["gpt-4o"]["max_input_tokens"] == 128_000
    # A fresh interpreter: other tests of this session may have imported litellm already.
    code = (
        "import sys; from proxy.model_limits import load_model_limits; "
        "table = load_model_limits().table; "
        "assert len(table) > 1000 and 'litellm' not in sys.modules, sorted(sys.modules)[:5]"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize(
    ("model", "window", "output"),
    [
        ("claude-sonnet-4-5-20250929", 200_000, 64_000),  # litellm's own entry
        ("claude-opus-4-1-20250805", 200_000, 32_000),
        ("claude-3-5-haiku-20241022", 200_000, 8_192),
        ("claude-3-opus-20240229", 200_000, 4_096),
    ],
)
def test_claude_models_have_their_real_limits(
    litellm_limits: ModelLimits, model: str, window: int, output: int
) -> None:
    limit = litellm_limits.lookup(model)
    assert (limit.context_window, limit.max_output_tokens) == (window, output)
