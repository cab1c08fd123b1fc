"""Provider registration: the dict validates against Airflow's own schemas and Airflow discovers it."""

from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path
from typing import Any

import airflow
import jsonschema  # type: ignore[import-untyped]

from airflow_provider.get_provider_info import get_provider_info

AIRFLOW_DIR = Path(airflow.__file__).parent


def _schema(name: str) -> dict[str, object]:
    return json.loads((AIRFLOW_DIR / name).read_text())  # type: ignore[no-any-return]


def test_provider_info_validates_against_the_runtime_schema() -> None:
    jsonschema.validate(get_provider_info(), _schema("provider_info.schema.json"))


def test_connection_type_validates_against_the_provider_yaml_schema() -> None:
    """``conn-fields`` / ``ui-field-behaviour`` are only described by the development-time schema."""
    conn_schema = _schema("provider.yaml.schema.json")["properties"]["connection-types"]  # type: ignore[index]
    info: dict[str, Any] = get_provider_info()
    jsonschema.validate(info["connection-types"], conn_schema)
    (zerobus,) = info["connection-types"]
    assert zerobus["connection-type"] == "zerobus"
    fields = zerobus["conn-fields"]
    assert {"workspace_url", "warehouse_id", "embedded", "warehouse"} <= set(fields)
    behaviour = zerobus["ui-field-behaviour"]
    assert behaviour["relabeling"] == {
        "host": "Zerobus endpoint",
        "login": "OAuth client ID",
        "password": "OAuth client secret",
    }
    assert {"schema", "port"} <= set(behaviour["hidden-fields"])


def test_every_listed_module_and_the_hook_class_import() -> None:
    info: dict[str, Any] = get_provider_info()
    for section in ("hooks", "operators", "sensors", "triggers"):
        for entry in info[section]:  # type: ignore[attr-defined]
            assert entry["integration-name"] in {i["integration-name"] for i in info["integrations"]}  # type: ignore[attr-defined]
            for module in entry["python-modules"]:
                importlib.import_module(module)
    (conn,) = info["connection-types"]
    module, _, cls = conn["hook-class-name"].rpartition(".")
    hook = getattr(importlib.import_module(module), cls)
    assert hook.conn_type == conn["connection-type"]
    assert hook.conn_name_attr == "zerobus_conn_id"
    assert hook.default_conn_name == "zerobus_default"


def test_providers_manager_discovers_the_provider_and_its_connection_form() -> None:
    from airflow.providers_manager import ProvidersManager
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    manager = ProvidersManager()  # type: ignore[no-untyped-call]
    assert "zerobus-orchestration" in manager.providers
    hooks = ProvidersManagerTaskRuntime().hooks  # type: ignore[no-untyped-call]
    hook = hooks["zerobus"]
    assert hook is not None
    assert hook.hook_class_name == "airflow_provider.hooks.zerobus.ZerobusHook"
    widgets = manager.connection_form_widgets
    assert "extra__zerobus__workspace_url" in widgets
    assert "extra__zerobus__warehouse" in widgets
    assert manager.field_behaviours["zerobus"]["relabeling"]["login"] == "OAuth client ID"
    triggers = {t.trigger_class_name for t in manager.trigger}
    assert "airflow_provider.triggers.readback" in triggers


def test_no_provider_module_imports_dagster() -> None:
    """The provider adapts the core only; it never reaches into the Dagster side (or Dagster)."""
    package = Path(importlib.import_module("airflow_provider").__file__ or "").parent
    offenders = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{path.name}: {n}" for n in names if n.split(".")[0] in {"dagster", "dagster_defs"}
            ]
    assert offenders == []
