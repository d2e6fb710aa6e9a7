"""Settings: defaults, YAML, environment and flags, and the errors that name key and file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from proxy.errors import ConfigError
from proxy.settings import (
    ALL_SOURCES,
    MIB,
    MemorySettings,
    Secret,
    Settings,
    StoreSettings,
    TenantMemory,
    TenantSettings,
    load_settings,
    replace,
)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "memproxy.yaml"
    path.write_text(text)
    return path


def test_defaults_without_file_or_env() -> None:
    s = load_settings(env={})
    assert (s.server.host, s.server.port, s.server.workers) == ("127.0.0.1", 8080, 1)
    assert s.upstream.url == "https://api.openai.com/v1"
    assert s.upstream.api_key is None
    assert s.limits.max_body_bytes == 16 * MIB
    assert s.auth.mode == "passthrough"
    assert (s.memory.max_tokens, s.memory.top_k, s.memory.packer) == (4500, 40, "optimal")
    assert (s.memory.budget_rule, s.memory.token_price) == ("adaptive", 0.033)
    assert (s.memory.neighbour_turns, s.memory.neighbour_candidates) == (True, 10)
    assert s.memory.lexical_candidates is True
    assert s.memory.sources == ALL_SOURCES
    assert (s.memory.capture, s.memory.query_window, s.memory.deadline_ms) == ("off", 2, 50.0)
    assert (s.store.kind, s.store.data_dir, s.store.collection) == ("edge", "./data", "memproxy")
    assert s.embedder.kind == "static"
    assert s.cache.redis_url is None
    assert s.source == "defaults"


def test_yaml_values_and_precedence(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "server: {port: 9000, host: 0.0.0.0}\n"
        "upstream: {url: 'http://up:1/v1', timeouts: {connect: 2}}\n"
        "memory: {sources: [learnings, playbook], max_tokens: 100}\n",
    )
    env = {"MEMPROXY_PORT": "9100", "MEMPROXY_CONFIG": "/ignored/because/explicit"}
    s = load_settings(path, env=env, overrides={"server.host": "10.0.0.1", "server.workers": None})
    assert s.server.port == 9100  # env beats file
    assert s.server.host == "10.0.0.1"  # flag beats file
    assert s.upstream.url == "http://up:1/v1"
    assert s.upstream.timeouts.connect == 2.0
    assert isinstance(s.upstream.timeouts.connect, float)
    assert s.upstream.timeouts.idle == 120.0  # untouched siblings keep their defaults
    assert s.memory.sources == ("learnings", "playbook")
    assert s.source == str(path)


def test_an_empty_section_means_its_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, "memory:\n  # enabled: false\nserver:\n  http:\n")
    assert load_settings(path, env={}) == replace(Settings(), source=str(path))


def test_config_path_from_env(tmp_path: Path) -> None:
    path = write(tmp_path, "server:\n  port: 7000\n")
    assert load_settings(env={"MEMPROXY_CONFIG": str(path)}).server.port == 7000


ALONGSIDE: dict[str, dict[str, str]] = {}


@pytest.mark.parametrize(
    ("var", "value", "key", "expected"),
    [
        ("MEMPROXY_HOST", "0.0.0.0", ("server", "host"), "0.0.0.0"),
        ("MEMPROXY_WORKERS", "4", ("server", "workers"), 4),
        ("MEMPROXY_UPSTREAM_URL", "http://x:1/v1", ("upstream", "url"), "http://x:1/v1"),
        ("MEMPROXY_DATA_DIR", "/var/lib/m", ("store", "data_dir"), "/var/lib/m"),
        ("MEMPROXY_REDIS_URL", "redis://r:6379/0", ("cache", "redis_url"), "redis://r:6379/0"),
        ("MEMPROXY_LOG_FORMAT", "json", ("server", "log_format"), "json"),
        ("MEMPROXY_MAX_BODY_BYTES", "1024", ("limits", "max_body_bytes"), 1024),
    ],
)
def test_env_variables(var: str, value: str, key: tuple[str, str], expected: object) -> None:
    s = load_settings(env={var: value, **ALONGSIDE.get(var, {})})
    assert getattr(getattr(s, key[0]), key[1]) == expected


def test_qdrant_url_switches_to_server_store() -> None:
    s = load_settings(env={"MEMPROXY_QDRANT_URL": "http://q:6333", "MEMPROXY_QDRANT_API_KEY": "k1"})
    assert s.store.kind == "qdrant"
    assert s.store.qdrant_url == "http://q:6333"
    assert s.store.qdrant_api_key is not None
    assert s.store.qdrant_api_key.value == "k1"


@pytest.mark.parametrize(
    ("yaml_text", "key"),
    [
        ("server:\n  prot: 1\n", "server.prot"),
        ("servr: {}\n", "servr"),
        ("server:\n  port: eighty\n", "server.port"),
        ("server:\n  port: true\n", "server.port"),
        ("server:\n  log_format: xml\n", "server.log_format"),
        ("upstream:\n  timeouts:\n    idle: soon\n", "upstream.timeouts.idle"),
        ("memory:\n  sources: [learnings, gossip]\n", "memory.sources"),
        ("memory:\n  capture: always\n", "memory.capture"),
        ("auth:\n  mode: keys\n", "auth.tenants"),
        ("upstream:\n  api_key: sk-literal-secret\n", "upstream.api_key"),
        ("upstream:\n  api_key: env:MEMPROXY_TEST_UNSET_VAR\n", "upstream.api_key"),
        ("store:\n  kind: qdrant\n", "store.qdrant_url"),
        ("store:\n  record_cache_entries: -1\n", "store.record_cache_entries"),
        ("store:\n  search_threads: 0\n", "store.search_threads"),
        ("store:\n  search_threads: many\n", "store.search_threads"),
        ("store:\n  search_threads: '2'\n", "store.search_threads"),
        ("store:\n  search_threads: 100000\n", "store.search_threads"),
        ("memory:\n  count_flush_s: -1\n", "memory.count_flush_s"),
        ("memory:\n  budget_rule: greedy\n", "memory.budget_rule"),
        ("memory:\n  token_price: -0.01\n", "memory.token_price"),
        ("memory:\n  token_price: .nan\n", "memory.token_price"),
        (
            "auth:\n  tenants:\n    a:\n      memory: {budget_rule: all}\n",
            "auth.tenants.a.memory.budget_rule",
        ),
        ("auth:\n  tenants:\n    a:\n      memory: {top_k: many}\n", "auth.tenants.a.memory.top_k"),
    ],
)
def test_bad_config_names_key_and_file(tmp_path: Path, yaml_text: str, key: str) -> None:
    path = write(tmp_path, yaml_text)
    with pytest.raises(ConfigError) as caught:
        load_settings(path, env={})
    assert f"'{key}" in caught.value.message
    assert str(path) in caught.value.message
    assert caught.value.param is not None
    assert caught.value.param.startswith(key)


@pytest.mark.parametrize(("value", "expected"), [("auto", "auto"), ("1", 1), ("6", 6)])
def test_the_search_pool_is_auto_or_a_thread_count(
    tmp_path: Path, value: str, expected: int | str
) -> None:
    assert Settings().store.search_threads == "auto"
    loaded = load_settings(write(tmp_path, f"store:\n  search_threads: {value}\n"), env={})
    assert loaded.store.search_threads == expected


def test_bad_env_value_names_variable_key() -> None:
    with pytest.raises(ConfigError, match=r"server\.port"):
        load_settings(env={"MEMPROXY_PORT": "http"})


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "absent.yaml", env={})
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_settings(write(tmp_path, "server: [unclosed\n"), env={})
    with pytest.raises(ConfigError, match="mapping"):
        load_settings(write(tmp_path, "- a list\n"), env={})


def test_secrets_resolved_but_never_shown(tmp_path: Path) -> None:
    path = write(tmp_path, "upstream:\n  api_key: env:MY_OPENAI_KEY\n")
    s = load_settings(path, env={"MY_OPENAI_KEY": "sk-very-secret"})
    assert s.upstream.api_key == Secret("env:MY_OPENAI_KEY", "sk-very-secret")
    assert "sk-very-secret" not in repr(s)
    assert "sk-very-secret" not in str(s.upstream.api_key)


def test_tenants_in_keys_mode(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "auth:\n  mode: keys\n  tenants:\n    acme:\n      keys: [env:K1, env:K2]\n"
        "      memory: {max_tokens: 1000, sources: [playbook]}\n",
    )
    s = load_settings(path, env={"K1": "a", "K2": "b"})
    acme = s.auth.tenants["acme"]
    assert [k.value for k in acme.keys] == ["a", "b"]
    assert acme.memory.max_tokens == 1000
    assert acme.memory.sources == ("playbook",)
    assert acme.memory.top_k is None
    with pytest.raises(TypeError):
        s.auth.tenants["other"] = acme  # type: ignore[index]


def test_settings_are_frozen() -> None:
    s = load_settings(env={})
    with pytest.raises(AttributeError):
        s.server.port = 1  # type: ignore[misc]


def test_example_config_file_is_valid() -> None:
    example = Path(__file__).resolve().parents[1] / "config" / "memproxy.yaml"
    s = load_settings(example, env={"OPENAI_API_KEY": "sk-x"})
    assert s.server.port == 8080


# --- issue 13: configuration traps ----------------------------------------------------------


def load_yaml(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_settings(write(tmp_path, text), env=env or {})
    return caught.value


@pytest.mark.parametrize(
    ("yaml_text", "key"),
    [
        ("memory:\n  enabled: 'yes'\n", "memory.enabled"),
        ("memory:\n  enabled: 'true'\n", "memory.enabled"),
        ("server:\n  port: '8080'\n", "server.port"),
        ("server:\n  access_log: 1\n", "server.access_log"),
        ("upstream:\n  timeouts:\n    idle: '5'\n", "upstream.timeouts.idle"),
    ],
)
def test_yaml_values_must_have_their_real_type(tmp_path: Path, yaml_text: str, key: str) -> None:
    error = load_yaml(tmp_path, yaml_text)
    assert error.param == key
    assert "got the string" in error.message or "got 1" in error.message


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        *[("true", True), ("1", True), ("yes", True), ("on", True), ("TRUE", True)],
        *[("false", False), ("0", False), ("no", False), ("off", False)],
    ],
)
def test_environment_bools_keep_their_words(raw: str, expected: bool) -> None:
    assert load_settings(env={"MEMPROXY_MEMORY_ENABLED": raw}).memory.enabled is expected


def test_sources_must_be_a_list_in_yaml(tmp_path: Path) -> None:
    error = load_yaml(tmp_path, "memory:\n  sources: learnings\n")
    assert error.param == "memory.sources"
    assert "must be a list" in error.message
    assert "[learnings]" in error.message


@pytest.mark.parametrize(
    ("yaml_text", "key"),
    [
        ("memory:\n  capture: off\n", "memory.capture"),
        ("memory:\n  max_capture: off\n", "memory.max_capture"),
        (
            "auth:\n  tenants:\n    a:\n      memory: {capture: off}\n",
            "auth.tenants.a.memory.capture",
        ),
    ],
)
def test_unquoted_off_says_how_to_quote_it(tmp_path: Path, yaml_text: str, key: str) -> None:
    error = load_yaml(tmp_path, yaml_text)
    assert error.param == key
    name = key.rsplit(".", 1)[1]
    assert f'YAML read `off` as false; quote it: {name}: "off"' in error.message


@pytest.mark.parametrize(
    ("url", "hint"),
    [
        ("https://api.openai.com", "https://api.openai.com/v1"),
        ("https://api.openai.com/", "https://api.openai.com/v1"),
        ("http://h:8000/openai?api-version=2", "http://h:8000/openai/v1?api-version=***"),
        ("https://user:s3cret@h/x", "https://***@h/x/v1"),  # never printed
    ],
)
def test_upstream_url_without_v1_is_refused_with_a_hint(
    tmp_path: Path, url: str, hint: str
) -> None:
    error = load_yaml(tmp_path, f"upstream:\n  url: '{url}'\n")
    assert error.param == "upstream.url"
    assert f"did you mean {hint}?" in error.message
    assert "s3cret" not in error.message


@pytest.mark.parametrize(
    "url",
    [
        "https://api.openai.com/v1",
        "http://h:1/v1/",
        "https://h/openai/v1",
        "https://h/o/v1?api-version=2",
    ],
)
def test_upstream_url_with_v1_is_accepted(url: str) -> None:
    assert load_settings(env={"MEMPROXY_UPSTREAM_URL": url}).upstream.url == url


def test_unknown_memproxy_variable_is_refused_with_a_suggestion() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env={"MEMPROXY_PROT": "9000", "OTHER_PROT": "x"})
    assert caught.value.param == "MEMPROXY_PROT"
    assert caught.value.message.startswith("MEMPROXY_PROT: unknown memproxy variable")
    assert "did you mean MEMPROXY_PORT?" in caught.value.message


@pytest.mark.parametrize(
    ("env", "overrides", "where"),
    [
        ({"MEMPROXY_PORT": "http"}, {}, "MEMPROXY_PORT: 'server.port'"),
        ({"MEMPROXY_PORT": "0"}, {}, "MEMPROXY_PORT: 'server.port'"),
        ({"MEMPROXY_UPSTREAM_URL": "http://x:1"}, {}, "MEMPROXY_UPSTREAM_URL: 'upstream.url'"),
        ({"MEMPROXY_AUTH_MODE": "keys"}, {}, "MEMPROXY_AUTH_MODE: 'auth.tenants'"),
        ({}, {"server.port": 0}, "command line: 'server.port'"),
    ],
)
def test_errors_name_where_the_value_came_from(
    env: dict[str, str], overrides: dict[str, object], where: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env=env, overrides=overrides)
    assert caught.value.message.startswith(where)
    assert "defaults" not in caught.value.message


# --- rules between fields: one place ----------------------------------------------------------


@pytest.mark.parametrize(
    ("yaml_text", "key"),
    [
        ("memory:\n  capture: turn\n  max_capture: user\n", "memory.capture"),
        (
            "auth:\n  tenants:\n    a:\n      memory: {capture: turn, max_capture: 'off'}\n",
            "auth.tenants.a.memory.capture",
        ),
        (
            "auth:\n  mode: keys\n  tenants:\n    a: {keys: [env:K1]}\n    b: {keys: [env:K2]}\n",
            "auth.tenants.b.keys",
        ),
        (
            "auth:\n  anonymous: true\n  mode: keys\n  tenants: {a: {keys: [env:K1]}}\n",
            "auth.anonymous",
        ),
    ],
)
def test_rules_between_fields(tmp_path: Path, yaml_text: str, key: str) -> None:
    error = load_yaml(tmp_path, yaml_text, env={"K1": "same-key", "K2": "same-key"})
    assert error.param == key
    assert error.message.startswith(f"{tmp_path / 'memproxy.yaml'}: '{key}' ")


@pytest.mark.parametrize(
    "yaml_text",
    [
        "server:\n  workers: 2\nmemory:\n  enabled: false\n",
        "server:\n  workers: 2\nstore:\n  kind: qdrant\n  qdrant_url: http://q:6333\n",
        "server:\n  workers: 2\n",  # the embedded store: one replica per worker (adr/0105)
    ],
)
def test_several_workers_with_any_store(tmp_path: Path, yaml_text: str) -> None:
    assert load_settings(write(tmp_path, yaml_text), env={}).server.workers == 2


@pytest.mark.parametrize(
    ("tenant", "capture", "max_capture"),
    [
        (TenantMemory(), "user", "facts"),  # the memory section's
        (TenantMemory(capture="off"), "off", "off"),  # its capture is its ceiling too
        (TenantMemory(capture="turn"), "turn", "turn"),
        (TenantMemory(max_capture="off"), "off", "off"),  # the default, lowered to the ceiling
        (TenantMemory(max_capture="turn"), "user", "turn"),
        (TenantMemory(capture="off", max_capture="turn"), "off", "turn"),
    ],
)
def test_tenant_capture_and_its_ceiling(
    tenant: TenantMemory, capture: str, max_capture: str
) -> None:
    merged = MemorySettings(capture="user").for_tenant(tenant)
    assert (merged.capture, merged.max_capture) == (capture, max_capture)


def test_tenant_overrides_only_what_it_sets() -> None:
    merged = MemorySettings().for_tenant(TenantMemory(top_k=3, sources=("playbook",)))
    assert (merged.top_k, merged.sources, merged.max_tokens) == (3, ("playbook",), 4500)


def test_models_built_in_code_are_validated_too() -> None:
    with pytest.raises(ConfigError, match="qdrant_url"):
        StoreSettings(kind="qdrant")
    with pytest.raises(ConfigError, match="capture"):
        replace(MemorySettings(), capture="turn", max_capture="user")
    with pytest.raises(ConfigError, match="must be true or false"):
        replace(MemorySettings(), enabled="yes")


# --- the documented example ---------------------------------------------------------------------

EXAMPLE = Path(__file__).resolve().parents[1] / "config" / "memproxy.yaml"


def unstated(data: object, model: type[BaseModel], prefix: str = "") -> list[str]:
    """Fields of ``model`` (and its sections) that ``data`` does not state."""
    stated = data if isinstance(data, dict) else {}
    missing = []
    for name, info in model.model_fields.items():
        if name == "source" or name == "tenants":  # set by the loader / shown in a comment
            continue
        if name not in stated:
            missing.append(f"{prefix}{name}")
        elif isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            missing += unstated(stated[name], info.annotation, f"{prefix}{name}.")
    return missing


def commented_tenants(text: str) -> dict[str, object]:
    """The commented ``tenants:`` example of the file, parsed."""
    lines = text.splitlines()
    start = lines.index("  # tenants:")
    block = []
    for line in lines[start:]:
        if not line.startswith("  #"):
            break
        block.append(line[4:])
    parsed = yaml.safe_load("\n".join(block))
    assert isinstance(parsed, dict)
    return parsed


def test_example_config_states_every_default() -> None:
    stated = load_settings(EXAMPLE, env={})
    assert replace(stated, source="defaults") == Settings()
    text = EXAMPLE.read_text()
    assert unstated(yaml.safe_load(text), Settings) == []
    tenants = commented_tenants(text)["tenants"]
    assert isinstance(tenants, dict)
    assert unstated(tenants["acme"], TenantSettings) == []


def test_anthropic_upstream_defaults_and_variables() -> None:
    s = load_settings(env={})
    assert s.upstream.anthropic.url == "https://api.anthropic.com"
    assert s.upstream.anthropic.api_key is None
    env = {"MEMPROXY_ANTHROPIC_URL": "http://a:1/gw", "MEMPROXY_ANTHROPIC_API_KEY": "sk-ant-x"}
    s = load_settings(env=env)
    assert s.upstream.anthropic.url == "http://a:1/gw"
    assert s.upstream.anthropic.api_key == Secret("env:MEMPROXY_ANTHROPIC_API_KEY", "sk-ant-x")


@pytest.mark.parametrize(
    ("url", "hint"),
    [
        ("https://api.anthropic.com/v1", "https://api.anthropic.com"),
        ("http://gw:1/anthropic/v1/", "http://gw:1/anthropic"),
        ("https://user:s3cret@h/v1", "https://***@h"),  # never printed
    ],
)
def test_anthropic_url_with_v1_is_refused_with_a_hint(tmp_path: Path, url: str, hint: str) -> None:
    error = load_yaml(tmp_path, f"upstream:\n  anthropic:\n    url: '{url}'\n")
    assert error.param == "upstream.anthropic.url"
    assert f"did you mean {hint}?" in error.message
    assert "s3cret" not in error.message


def test_anthropic_url_must_be_http() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env={"MEMPROXY_ANTHROPIC_URL": "api.anthropic.com"})
    assert caught.value.param == "upstream.anthropic.url"
    assert "http://" in caught.value.message
