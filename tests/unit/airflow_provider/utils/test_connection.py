"""A ``zerobus`` connection -> ``ZerobusConfig``: field mapping, extras lookup order, secrets, errors."""

from __future__ import annotations

import json
import logging

import pytest
from pydantic import SecretStr

from airflow_provider.hooks.zerobus import ZerobusHook
from airflow_provider.utils.connection import ConnectionFields, config_from_connection, extra_value
from zerobus_orchestration.config import CatalogBackend
from zerobus_orchestration.errors import ConfigError

REMOTE = ConnectionFields(
    conn_id="zb",
    host="https://1234.zerobus.us-west-2.cloud.databricks.com",
    login="client-id",
    password="s3cr3t-value",
    extra={"workspace_url": "https://dbc-1.cloud.databricks.com", "warehouse_id": "abc123"},
)


def test_remote_connection_maps_every_field() -> None:
    cfg = config_from_connection(REMOTE)
    assert cfg.endpoint == "https://1234.zerobus.us-west-2.cloud.databricks.com"
    assert not cfg.embedded
    assert cfg.workspace_url == "https://dbc-1.cloud.databricks.com"
    assert cfg.client_id == "client-id"
    assert isinstance(cfg.client_secret, SecretStr)
    assert cfg.client_secret.get_secret_value() == "s3cr3t-value"
    assert cfg.catalog.sql_warehouse_id == "abc123"
    assert cfg.catalog.backend is CatalogBackend.UNITY
    assert "s3cr3t-value" not in json.dumps(cfg.effective_config())
    assert "s3cr3t-value" not in repr(REMOTE)


def test_host_without_scheme_gets_https_and_port() -> None:
    fields = ConnectionFields(**{**REMOTE.__dict__, "host": "zb.example.com", "port": 8443})
    assert config_from_connection(fields).endpoint == "https://zb.example.com:8443"


def test_plain_extra_keys_win_over_prefixed_ones() -> None:
    extra = {
        "extra__zerobus__warehouse": "/old",
        "warehouse": "/new",
        "extra__zerobus__workspace_url": "http://x",
    }
    assert extra_value(extra, "warehouse") == "/new"
    assert extra_value(extra, "workspace_url") == "http://x"
    assert extra_value({"warehouse": "", "extra__zerobus__warehouse": "/legacy"}, "warehouse") == "/legacy"


def test_empty_connection_or_embedded_flag_selects_the_emulator_on_the_warehouse_path(tmp_path) -> None:  # type: ignore[no-untyped-def]
    no_host = ConnectionFields(conn_id="zb", extra={"extra__zerobus__warehouse": str(tmp_path)})
    cfg = config_from_connection(no_host)
    assert cfg.embedded and cfg.endpoint is None
    assert cfg.warehouse == str(tmp_path)
    assert cfg.catalog.backend is CatalogBackend.LOCAL

    # The flag no longer overrides a Host (that is refused, see test_connection_mode.py): it selects the
    # emulator for a connection that also carries credentials, which without it would be refused.
    flagged = ConnectionFields(
        conn_id="zb", login="client-id", password="pw", extra={"embedded": "true", "warehouse": "/w"}
    )
    assert config_from_connection(flagged).embedded


def test_advanced_config_extra_is_applied_under_named_fields_and_overrides_win() -> None:
    fields = ConnectionFields(
        conn_id="zb",
        extra={
            "embedded": True,
            "warehouse": "/named",
            "config": json.dumps({"warehouse": "/ignored", "emulator": {"iceberg_lag_s": 0.25}}),
        },
    )
    cfg = config_from_connection(fields, {"pool": {"min_streams": 3}})
    assert cfg.warehouse == "/named"
    assert cfg.emulator.iceberg_lag_s == 0.25
    assert cfg.pool.min_streams == 3


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            ConnectionFields(conn_id="bad", extra={"embedded": "maybe"}),
            "extra 'embedded' must be true or false",
        ),
        (ConnectionFields(conn_id="bad", extra={"config": "{not json"}), "extra 'config' is not valid JSON"),
        (
            ConnectionFields(conn_id="bad", extra={"config": {"pool": {"min_streams": 0}}}),
            "zerobus.pool.min_streams",
        ),
        (
            ConnectionFields(conn_id="bad", host="https://zb", login="id"),
            "needs workspace_url, client_secret",
        ),
    ],
)
def test_bad_connections_name_the_connection_and_the_key(fields: ConnectionFields, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_connection(fields)
    assert "connection 'bad'" in str(info.value)
    assert message in str(info.value)


def test_hook_reads_an_env_var_connection_without_touching_the_runtime(monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(
        "AIRFLOW_CONN_ZB_REMOTE",
        json.dumps(
            {
                "conn_type": "zerobus",
                "host": "https://ws.zerobus.example.com",
                "login": "client-id",
                "password": "pw-never-logged",
                "extra": {"workspace_url": "https://ws.example.com", "extra__zerobus__warehouse_id": "wh-9"},
            }
        ),
    )
    caplog.set_level(logging.DEBUG)
    hook = ZerobusHook(zerobus_conn_id="zb_remote", config_overrides={"readback": {"wait_timeout_s": 7}})
    cfg = hook.get_config()
    assert cfg.endpoint == "https://ws.zerobus.example.com"
    assert cfg.catalog.sql_warehouse_id == "wh-9"
    assert cfg.readback.wait_timeout_s == 7
    assert not hook.runtime_acquired
    assert "pw-never-logged" not in caplog.text


def test_hook_async_config_matches_sync(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    sync_cfg = ZerobusHook().get_config()
    async_cfg = asyncio.run(ZerobusHook().aget_config())
    assert sync_cfg == async_cfg
    assert async_cfg.embedded


def test_embedded_connection_defaults_to_the_shared_emulator_unless_a_mode_is_set() -> None:
    embedded = ConnectionFields(conn_id="zb", extra={"embedded": True, "warehouse": "/tmp/wh"})
    assert config_from_connection(embedded).emulator.mode == "daemon"
    pinned = ConnectionFields(
        conn_id="zb",
        extra={"embedded": True, "warehouse": "/tmp/wh", "config": {"emulator": {"mode": "in_process"}}},
    )
    assert config_from_connection(pinned).emulator.mode == "in_process"
    assert (
        config_from_connection(embedded, {"emulator": {"mode": "in_process"}}).emulator.mode == "in_process"
    )
    assert config_from_connection(REMOTE).emulator.mode == "in_process"  # no emulator at all
