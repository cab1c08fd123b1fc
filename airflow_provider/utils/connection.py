"""A ``zerobus`` Airflow connection, as plain values, mapped onto the core ``ZerobusConfig``.

Kept free of Airflow imports so the mapping is testable on its own and usable from a trigger after the
connection was fetched asynchronously. Field mapping (see ``get_provider_info`` for the UI side):

- Host -> ``endpoint`` (Zerobus endpoint).
- The embedded emulator is chosen only explicitly: by ``"embedded": true`` (Host empty), or by a
  connection that carries nothing at all (no Host, no Login/Password, no ``workspace_url`` or
  ``warehouse_id``). A connection with production credentials but no Host, ``"embedded": false``
  without a Host, or ``"embedded": true`` with a Host is refused (``ConfigError``): guessing would write
  production data to a folder on the worker. Embedded, the emulator serves the ``warehouse`` path: by
  default one shared emulator process per warehouse that every task process uses (``emulator.mode =
  "daemon"``); ``{"emulator": {"mode": "in_process"}}`` in the ``config`` extra keeps it inside the task
  process (one task per warehouse at a time).
- Only ``zerobus`` connections are read: a ``databricks`` connection's Host is the workspace, not the
  Zerobus endpoint, so it is refused rather than reinterpreted.
- Login / Password -> OAuth M2M client id / secret (secret kept as ``SecretStr``).
- extras ``workspace_url``, ``warehouse_id`` (SQL warehouse for DDL), ``embedded``, ``warehouse``, and
  ``config``: a nested mapping of any other ``ZerobusConfig`` knob (e.g. ``{"emulator": {"iceberg_lag_s":
  0.5}}``), applied under the named fields.

Each extra is read under its plain name first (Airflow >= 3.2 UI), then as ``extra__zerobus__<name>``
(older UIs).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from zerobus_orchestration.config import (
    SHARED_EMULATOR_MODE,
    EmulatorMode,
    ZerobusConfig,
    deep_merge,
    load_config,
)
from zerobus_orchestration.errors import ConfigError

CONN_TYPE = "zerobus"
_PREFIX = f"extra__{CONN_TYPE}__"
_TRUE = frozenset({"1", "true", "yes", "on", "y", "t"})
_FALSE = frozenset({"0", "false", "no", "off", "n", "f", ""})
# Task tries are processes of their own, run in parallel by LocalExecutor and Celery workers: embedded,
# they share one emulator process per warehouse unless the connection sets ``emulator.mode`` (the core's
# one default for every entry point).
EMBEDDED_MODE: EmulatorMode = SHARED_EMULATOR_MODE


@dataclass(frozen=True)
class ConnectionFields:
    """The parts of an Airflow ``Connection`` the mapping reads; ``extra`` already decoded."""

    conn_id: str
    host: str | None = None
    conn_type: str | None = None
    port: int | None = None
    login: str | None = None
    password: str | None = field(default=None, repr=False)
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, conn: Any, extra: Mapping[str, Any]) -> ConnectionFields:
        """From an Airflow ``Connection`` (sync or async fetched) and its decoded extras."""
        return cls(
            conn_id=str(conn.conn_id),
            host=conn.host or None,
            conn_type=getattr(conn, "conn_type", None) or None,
            port=conn.port or None,
            login=conn.login or None,
            password=conn.password or None,
            extra=dict(extra),
        )


def extra_value(extra: Mapping[str, Any], name: str) -> Any:
    """The plain key first, then the ``extra__zerobus__`` prefixed one; empty strings count as unset."""
    for key in (name, f"{_PREFIX}{name}"):
        value = extra.get(key)
        if value is not None and value != "":
            return value
    return None


def _as_bool(value: Any, *, conn_id: str, name: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"connection {conn_id!r}: extra {name!r} must be true or false (got {value!r})")


def _as_mapping(value: Any, *, conn_id: str, name: str) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"connection {conn_id!r}: extra {name!r} is not valid JSON: {exc}") from None
    if not isinstance(value, Mapping):
        raise ConfigError(f"connection {conn_id!r}: extra {name!r} must be a JSON object of zerobus settings")
    return dict(value)


def _endpoint(fields: ConnectionFields) -> str:
    host = (fields.host or "").strip().rstrip("/")
    if "://" not in host:
        host = f"https://{host}"
    scheme, _, rest = host.partition("://")
    if fields.port and ":" not in rest.split("/", 1)[0]:
        head, slash, tail = rest.partition("/")
        rest = f"{head}:{fields.port}{slash}{tail}"
    return f"{scheme}://{rest}"


_HOST_FIX = "set Host to the Zerobus endpoint (https://<workspace-id>.zerobus.<region>.cloud.databricks.com)"
# Keys of the ``config`` extra that only make sense against Databricks.
_PRODUCTION_CONFIG_KEYS = ("workspace_url", "client_id", "client_secret")


def _production_settings(fields: ConnectionFields, advanced: Mapping[str, Any]) -> list[str]:
    """What in the connection points at Databricks (names only: values may be secret)."""
    found = []
    if fields.login:
        found.append("Login (OAuth client ID)")
    if fields.password:
        found.append("Password (OAuth client secret)")
    for name in ("workspace_url", "warehouse_id"):
        if extra_value(fields.extra, name) is not None:
            found.append(f"extra {name!r}")
    found += [f"config extra {key!r}" for key in _PRODUCTION_CONFIG_KEYS if advanced.get(key) is not None]
    catalog = advanced.get("catalog")
    if isinstance(catalog, Mapping) and (
        catalog.get("sql_warehouse_id") is not None or str(catalog.get("backend", "")).lower() == "unity"
    ):
        found.append("config extra 'catalog' (Unity Catalog)")
    return found


def _check_conn_type(fields: ConnectionFields) -> None:
    conn_type = (fields.conn_type or "").strip().lower().replace("-", "_")
    if conn_type in ("", CONN_TYPE):
        return
    why = (
        "its Host is the workspace, not the Zerobus endpoint"
        if conn_type == "databricks"
        else "the Zerobus hook reads only zerobus connections"
    )
    raise ConfigError(
        f"connection {fields.conn_id!r} has type {fields.conn_type!r}, not {CONN_TYPE!r} ({why}); create a "
        f"{CONN_TYPE!r} connection: Host = Zerobus endpoint, Login/Password = OAuth client ID/secret, extra "
        'workspace_url = the workspace URL (or extra "embedded": true for the local emulator)'
    )


def resolve_embedded(fields: ConnectionFields, advanced: Mapping[str, Any] | None = None) -> bool:
    """Whether the connection selects the embedded emulator; raises ``ConfigError`` when it is ambiguous.

    Embedded only when asked for (``"embedded": true``) or when the connection is empty; a connection
    that names Databricks in any way but has no Host is an error, never a local write.
    """
    advanced = advanced or {}
    conn_id = fields.conn_id
    host = (fields.host or "").strip()
    flag_value = extra_value(fields.extra, "embedded")
    flag = None if flag_value is None else _as_bool(flag_value, conn_id=conn_id, name="embedded")
    if advanced.get("endpoint") is not None:
        raise ConfigError(
            f"connection {conn_id!r}: the Zerobus endpoint belongs in the Host field, not in the 'config' "
            "extra; move it there"
        )
    if flag is True:
        if host:
            shown = re.sub(r"//[^/@]*@", "//", host)  # never echo credentials embedded in a URL
            raise ConfigError(
                f'connection {conn_id!r} sets "embedded": true and also Host {shown!r}: the local '
                "emulator and a Zerobus endpoint exclude each other; clear Host for the emulator, or "
                'remove "embedded" to write to the endpoint'
            )
        return True
    if host:
        return False
    if flag is False:
        raise ConfigError(
            f'connection {conn_id!r} sets "embedded": false but has no Host (Zerobus endpoint), so '
            f'there is nowhere to write; {_HOST_FIX}, or set "embedded": true for the local emulator'
        )
    production = _production_settings(fields, advanced)
    if production:
        raise ConfigError(
            f"connection {conn_id!r} has Databricks settings ({', '.join(production)}) but no Host "
            f"(Zerobus endpoint); nothing was written. {_HOST_FIX.capitalize()}; to use the local "
            'emulator on purpose, set extra "embedded": true'
        )
    return True


def config_from_connection(
    fields: ConnectionFields, overrides: Mapping[str, Any] | None = None
) -> ZerobusConfig:
    """The ``ZerobusConfig`` a connection describes; ``overrides`` (e.g. from a hook argument) win.

    ``ZEROBUS_*`` environment variables are deliberately not read: the connection is the one source of
    truth for a task, so two tasks with different connections never share settings by accident.
    """
    _check_conn_type(fields)
    extra = fields.extra
    data: dict[str, Any] = {}
    advanced = extra_value(extra, "config")
    if advanced is not None:
        data = _as_mapping(advanced, conn_id=fields.conn_id, name="config")

    embedded = resolve_embedded(fields, data)
    named: dict[str, Any] = {
        "endpoint": None if embedded else _endpoint(fields),
        "workspace_url": extra_value(extra, "workspace_url"),
        "client_id": fields.login,
        "client_secret": fields.password,
        "warehouse": extra_value(extra, "warehouse"),
    }
    warehouse_id = extra_value(extra, "warehouse_id")
    catalog = dict(data.get("catalog") or {})
    if warehouse_id is not None:
        catalog["sql_warehouse_id"] = str(warehouse_id)
    if not embedded:
        # A real Zerobus endpoint writes Unity Catalog tables; the local catalog only fits the emulator.
        catalog.setdefault("backend", "unity")
    if catalog:
        data["catalog"] = catalog
    for key, value in named.items():
        if value is not None:
            data[key] = value
    if embedded:
        data.pop("endpoint", None)
    try:
        config = load_config(None, environ={}, **deep_merge(data, dict(overrides or {})))
    except ConfigError as exc:
        raise ConfigError(f"connection {fields.conn_id!r}: {exc}") from None
    return config.with_default_emulator_mode(EMBEDDED_MODE)
