"""The workspace routes without HTTP: discovery, catalogs and schemas, refusals shaped as Databricks'."""

from __future__ import annotations

import json
from pathlib import Path

from zerobus_orchestration.emulator.unity import routes
from zerobus_orchestration.emulator.unity.local_cloud import LOCAL_SQL_WAREHOUSE_ID, local_workspace
from zerobus_orchestration.emulator.unity.workspace import UnityWorkspace

BASE = "http://127.0.0.1:8080"


def workspace(tmp_path: Path) -> UnityWorkspace:
    return local_workspace(str(tmp_path / "wh"), tmp_path / "state.json")


def test_discovery_names_the_token_endpoint_below_the_workspace_url(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    config = routes.discovery(ws, "GET", routes.DATABRICKS_CONFIG_PATH, BASE)
    oidc = routes.discovery(ws, "GET", routes.OIDC_DISCOVERY_PATH, BASE)
    assert config == (200, {"oidc_endpoint": BASE + "/oidc", "workspace_id": ws.workspace_id, "cloud": "AWS"})
    assert oidc is not None and oidc[1]["token_endpoint"] == BASE + "/oidc/v1/token"
    assert routes.discovery(ws, "GET", "/api/2.1/unity-catalog/tables", BASE) is None


def test_catalogs_and_schemas(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    api = routes.handle_api
    assert api(ws, "GET", routes.CATALOGS_PATH, {}, b"")[1]["catalogs"][0]["name"] == "main"
    assert api(ws, "GET", routes.CATALOGS_PATH + "/dev", {}, b"")[0] == 404
    create = json.dumps({"catalog_name": "dev", "name": "s"}).encode()
    assert api(ws, "POST", routes.SCHEMAS_PATH, {}, create)[1]["error_code"] == "CATALOG_DOES_NOT_EXIST"
    assert api(ws, "POST", routes.CATALOGS_PATH, {}, json.dumps({"name": "dev"}).encode())[0] == 200
    assert api(ws, "POST", routes.SCHEMAS_PATH, {}, create)[1]["full_name"] == "dev.s"
    assert api(ws, "POST", routes.SCHEMAS_PATH, {}, create)[0] == 409
    listed = api(ws, "GET", routes.SCHEMAS_PATH, {"catalog_name": "dev"}, b"")[1]["schemas"]
    assert [s["full_name"] for s in listed] == ["dev.s"]
    assert api(ws, "GET", routes.SCHEMAS_PATH + "/dev.s", {}, b"")[0] == 200
    assert api(ws, "GET", routes.TABLES_PATH, {"catalog_name": "nope", "schema_name": "s"}, b"")[0] == 404


def test_statements_run_only_on_the_workspace_warehouse(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    ws.execute_sql("CREATE SCHEMA main.s")
    body = {"statement": "CREATE TABLE main.s.t (id BIGINT)", "warehouse_id": "other"}
    status, answer = routes.handle_api(ws, "POST", routes.STATEMENTS_PATH, {}, json.dumps(body).encode())
    assert (status, answer["error_code"]) == (404, "RESOURCE_DOES_NOT_EXIST")
    assert LOCAL_SQL_WAREHOUSE_ID in answer["message"]
    body["warehouse_id"] = LOCAL_SQL_WAREHOUSE_ID
    status, answer = routes.handle_api(ws, "POST", routes.STATEMENTS_PATH, {}, json.dumps(body).encode())
    assert (status, answer["status"]["state"]) == (200, "SUCCEEDED")
