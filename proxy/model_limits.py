"""litellm's model table, read into the engine's ``ModelLimits`` once at start.

With ``LITELLM_LOCAL_MODEL_COST_MAP`` set, ``litellm.model_cost`` is exactly the JSON file its
wheel ships, so that file is read directly (tens of milliseconds) instead of importing litellm
(seconds); the import remains only for an install whose file is missing. The table itself, the
seed's overrides and the family fallbacks are pure: ``proxy/context/limits.py``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from proxy.bundled_data import model_map_file, use_bundled_data
from proxy.context.limits import ModelLimits, limits_from_model_map


def read_litellm_model_map() -> dict[str, Any] | None:
    """Read the model map litellm's wheel ships, without importing litellm; None if absent."""
    path = model_map_file()
    if path is None:
        return None
    with path.open("rb") as handle:
        data = json.load(handle)
    return data if isinstance(data, dict) else None


def load_model_limits() -> ModelLimits:
    """litellm's limits (its shipped map; the import only as a fallback); call at startup."""
    model_map = read_litellm_model_map()
    if model_map is None:
        use_bundled_data(os.environ)  # the local map, not a download, under the import
        import litellm  # deliberately lazy: the import takes seconds

        model_map = litellm.model_cost
    return limits_from_model_map(model_map)
