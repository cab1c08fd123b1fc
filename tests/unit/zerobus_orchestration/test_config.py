from __future__ import annotations

from pathlib import Path

import pytest

from zerobus_orchestration.config import ConfigError, Role, ZerobusConfig, load_config


def test_defaults_select_embedded_mode() -> None:
    cfg = load_config(environ={})
    assert cfg.embedded
    assert cfg.warehouse == "./.zerobus/warehouse"
    assert cfg.pool.per_stream_mb_ceiling == 100.0
    assert cfg.pool.ack_channel_capacity >= 1000
    assert cfg.role is Role.PRIMARY_RAW
    assert cfg.coverage_location.endswith("_zerobus/coverage.sqlite")


def test_toml_then_env_then_arguments(tmp_path: Path) -> None:
    path = tmp_path / "zerobus.toml"
    path.write_text(
        '[zerobus]\nwarehouse = "/from/toml"\nrole = "derived"\n[zerobus.pool]\nmin_streams = 2\npeak_mb_s = 50\n'
    )
    cfg = load_config(path, environ={"ZEROBUS_POOL__MIN_STREAMS": "3"})
    assert cfg.warehouse == "/from/toml"
    assert cfg.role is Role.DERIVED
    assert cfg.pool.min_streams == 3  # env wins over the file
    cfg = load_config(path, environ={"ZEROBUS_WAREHOUSE": "/from/env"}, warehouse="/from/arg")
    assert cfg.warehouse == "/from/arg"


@pytest.mark.parametrize(
    ("peak", "ceiling", "minimum", "expected"),
    [(0, 100, 1, 1), (250, 100, 1, 3), (100, 100, 1, 1), (101, 100, 2, 2), (350, 100, 2, 4), (10, 2.5, 1, 4)],
)
def test_pool_size_is_ceil_of_peak_over_ceiling_floored(
    peak: float, ceiling: float, minimum: int, expected: int
) -> None:
    cfg = load_config(
        environ={
            "ZEROBUS_POOL__PEAK_MB_S": str(peak),
            "ZEROBUS_POOL__PER_STREAM_MB_CEILING": str(ceiling),
            "ZEROBUS_POOL__MIN_STREAMS": str(minimum),
        }
    )
    assert cfg.pool.streams_for_table() == expected


def test_invalid_value_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"zerobus\.pool\.min_streams"):
        load_config(environ={"ZEROBUS_POOL__MIN_STREAMS": "zero"})
    with pytest.raises(ConfigError, match=r"zerobus\.pool\.bogus"):
        load_config(environ={"ZEROBUS_POOL__BOGUS": "1"})
    with pytest.raises(ConfigError, match=r"zerobus\.role"):
        load_config(environ={"ZEROBUS_ROLE": "gold"})


def test_remote_endpoint_requires_credentials() -> None:
    with pytest.raises(ConfigError, match="client_secret"):
        load_config(environ={"ZEROBUS_ENDPOINT": "https://1.zerobus.example", "ZEROBUS_CLIENT_ID": "sp"})


def test_effective_config_masks_every_secret() -> None:
    cfg = load_config(
        environ={
            "ZEROBUS_ENDPOINT": "https://1.zerobus.example",
            "ZEROBUS_WORKSPACE_URL": "https://ws.example",
            "ZEROBUS_CLIENT_ID": "sp",
            "ZEROBUS_CLIENT_SECRET": "hunter2-secret",
            "ZEROBUS_READBACK__TOKEN": "dapi-secret-token",
        }
    )
    text = repr(cfg.effective_config()) + repr(cfg) + str(cfg)
    assert "hunter2-secret" not in text
    assert "dapi-secret-token" not in text
    assert cfg.effective_config()["derived"]["embedded"] is False
    assert cfg.client_secret is not None and cfg.client_secret.get_secret_value() == "hunter2-secret"


def test_config_hash_tracks_secrets_without_revealing_them() -> None:
    a = ZerobusConfig(endpoint="https://e", workspace_url="https://w", client_id="c", client_secret="s1")
    b = ZerobusConfig(endpoint="https://e", workspace_url="https://w", client_id="c", client_secret="s2")
    assert a.config_hash() != b.config_hash()
    assert (
        a.config_hash()
        == ZerobusConfig(
            endpoint="https://e", workspace_url="https://w", client_id="c", client_secret="s1"
        ).config_hash()
    )
    assert "s1" not in a.config_hash()


def test_no_knob_waits_per_batch() -> None:
    """The design forbids a per-batch durable wait; no config key may offer one."""
    names: set[str] = set()

    def walk(model: type) -> None:
        for name, field in model.model_fields.items():  # type: ignore[attr-defined]
            names.add(name)
            annotation = field.annotation
            if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
                walk(annotation)

    walk(ZerobusConfig)
    assert not [n for n in names if "per_batch" in n or n in {"sync_ack", "wait_each_batch", "inline_ack"}]


@pytest.mark.parametrize(
    "environ",
    [
        {"ZEROBUS_CLIENT_SECRETT": "s3cr3t-value"},  # a mistyped secret is an unknown key
        {"ZEROBUS_READBACK__TOKENN": "s3cr3t-value"},
        {"ZEROBUS_CREDENTIAL_VENDING__SECRET_ACCESS_KEY": '["s3cr3t-value"]'},
        {"ZEROBUS_STORAGE_OPTIONS": "s3cr3t-value"},
    ],
)
def test_config_errors_never_echo_a_secret(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as failure:
        load_config(environ=environ)
    assert "s3cr3t-value" not in str(failure.value)
    assert "zerobus." in str(failure.value)  # the key is still named


def test_config_errors_still_show_harmless_values() -> None:
    with pytest.raises(ConfigError, match=r"zerobus\.pool\.min_streams: .*\(got 'many'\)"):
        load_config(environ={"ZEROBUS_POOL__MIN_STREAMS": "many"})


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ZEROBUS_WORKSPACE_URL", ""),
        ("ZEROBUS_WORKSPACE_URL", "/oidc"),
        ("ZEROBUS_ENDPOINT", "host.example:443"),
    ],
)
def test_an_empty_or_scheme_less_url_is_refused_naming_the_variable(variable: str, value: str) -> None:
    environ = {
        "ZEROBUS_ENDPOINT": "https://1.zerobus.example.com",
        "ZEROBUS_WORKSPACE_URL": "https://workspace.example.com",
        "ZEROBUS_CLIENT_ID": "sp",
        "ZEROBUS_CLIENT_SECRET": "never-shown",
        variable: value,
    }
    with pytest.raises(ConfigError) as caught:
        load_config(environ=environ)
    assert variable in str(caught.value) and "https://" in str(caught.value)
    assert "never-shown" not in str(caught.value)
