"""Settings: defaults, YAML, environment and flags, and the errors that name key and file."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.errors import ConfigError
from proxy.settings import ALL_SOURCES, MIB, Secret, load_settings


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
    assert (s.memory.max_tokens, s.memory.top_k, s.memory.packer) == (4500, 50, "optimal")
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


def test_config_path_from_env(tmp_path: Path) -> None:
    path = write(tmp_path, "server:\n  port: 7000\n")
    assert load_settings(env={"MEMPROXY_CONFIG": str(path)}).server.port == 7000


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
    s = load_settings(env={var: value})
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
        ("memory:\n  count_flush_s: -1\n", "memory.count_flush_s"),
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
