"""The Databricks REST subset the production path calls, answered from a ``UnityWorkspace``.

Transport-free (``(status, JSON body)`` out), so the emulator's HTTP server and the test fake's share it.
Authentication is the caller's: ``discovery`` needs none, ``handle_api`` expects an authenticated caller.

- ``GET /.well-known/databricks-config``, ``GET /oidc/.well-known/oauth-authorization-server``: what
  ``databricks-sdk`` reads to find the token endpoint for OAuth M2M (``/oidc/v1/token``);
- ``GET|DELETE /api/2.1/unity-catalog/tables/{full_name}``, ``GET /api/2.1/unity-catalog/tables``
  (``TableInfo`` JSON with ``columns[].type_text/type_json/type_name/comment/nullable/position``,
  ``properties``, ``table_id``, ``storage_location``, ``delta_uniform_iceberg``);
- ``GET /api/2.1/unity-catalog/catalogs[/{name}]``, ``GET /api/2.1/unity-catalog/schemas[/{full_name}]``,
  ``POST`` to either creates one;
- ``POST /api/2.0/unity-catalog/temporary-table-credentials`` (READ; READ_WRITE only for EXTERNAL
  tables: Unity Catalog refuses it for managed Delta tables);
- ``POST /api/2.0/sql/statements``, ``GET /api/2.0/sql/statements/{id}``, ``POST .../{id}/cancel``.

Errors are ``{"error_code", "message"}`` with the HTTP status Databricks uses, which the SDK maps to its
typed errors (404 ``TABLE_DOES_NOT_EXIST`` -> ``NotFound``).
"""

from __future__ import annotations

import json
from typing import Any, Final
from urllib.parse import unquote

from zerobus_orchestration.emulator.unity.state import StatementFailure
from zerobus_orchestration.emulator.unity.workspace import UnityWorkspace

Response = tuple[int, dict[str, Any]]

DATABRICKS_CONFIG_PATH: Final = "/.well-known/databricks-config"
OIDC_DISCOVERY_PATH: Final = "/oidc/.well-known/oauth-authorization-server"
TOKEN_PATH: Final = "/oidc/v1/token"
UC_PREFIX: Final = "/api/2.1/unity-catalog/"
TABLES_PATH: Final = "/api/2.1/unity-catalog/tables"
CATALOGS_PATH: Final = "/api/2.1/unity-catalog/catalogs"
SCHEMAS_PATH: Final = "/api/2.1/unity-catalog/schemas"
CREDENTIALS_PATHS: Final = (
    "/api/2.0/unity-catalog/temporary-table-credentials",
    "/api/2.1/unity-catalog/temporary-table-credentials",
)
STATEMENTS_PATH: Final = "/api/2.0/sql/statements"


def error(status: int, error_code: str, message: str) -> Response:
    return status, {"error_code": error_code, "message": message}


def discovery(workspace: UnityWorkspace, method: str, path: str, base_url: str) -> Response | None:
    """The unauthenticated discovery documents, or None when ``path`` is not one."""
    if method != "GET":
        return None
    if path == DATABRICKS_CONFIG_PATH:
        return 200, {
            "oidc_endpoint": f"{base_url}/oidc",
            "workspace_id": workspace.workspace_id,
            "cloud": "AWS",
        }
    if path == OIDC_DISCOVERY_PATH:
        return 200, {
            "issuer": f"{base_url}/oidc",
            "authorization_endpoint": f"{base_url}/oidc/v1/authorize",
            "token_endpoint": f"{base_url}{TOKEN_PATH}",
            "grant_types_supported": ["client_credentials"],
        }
    return None


def serves(path: str) -> bool:
    """Whether ``handle_api`` answers ``path`` (the Iceberg REST catalog below UC_PREFIX is not ours)."""
    return path.startswith((UC_PREFIX, STATEMENTS_PATH)) or path in CREDENTIALS_PATHS


def handle_api(
    workspace: UnityWorkspace, method: str, path: str, query: dict[str, str], body: bytes
) -> Response:
    """Answer one authenticated API request."""
    payload = _json(body) if method == "POST" else {}
    metastore = workspace.metastore
    if path.startswith(TABLES_PATH + "/") and method in ("GET", "DELETE"):
        return _table(workspace, method, unquote(path[len(TABLES_PATH) + 1 :]))
    if path == TABLES_PATH and method == "GET":
        return _list_tables(workspace, query)
    if path in CREDENTIALS_PATHS and method == "POST":
        return _credentials(workspace, payload)
    if path == CATALOGS_PATH or path.startswith(CATALOGS_PATH + "/"):
        with metastore.lock:
            return _catalogs(workspace, method, unquote(path[len(CATALOGS_PATH) + 1 :]), payload)
    if path == SCHEMAS_PATH or path.startswith(SCHEMAS_PATH + "/"):
        with metastore.lock:
            return _schemas(workspace, method, unquote(path[len(SCHEMAS_PATH) + 1 :]), query, payload)
    if path == STATEMENTS_PATH and method == "POST":
        warehouse = payload.get("warehouse_id")
        if not workspace.accepts_warehouse(warehouse):
            return error(
                404,
                "RESOURCE_DOES_NOT_EXIST",
                f"SQL warehouse {warehouse!r} does not exist (this workspace's: {workspace.warehouse_id!r}).",
            )
        return 200, workspace.submit_statement(payload)
    if path.startswith(STATEMENTS_PATH + "/") and path.endswith("/cancel") and method == "POST":
        if workspace.cancel_statement(path[len(STATEMENTS_PATH) + 1 : -len("/cancel")]):
            return 200, {}
        return error(404, "RESOURCE_DOES_NOT_EXIST", "Statement not found")
    if path.startswith(STATEMENTS_PATH + "/") and method == "GET":
        response = workspace.poll_statement(path[len(STATEMENTS_PATH) + 1 :])
        if response is None:
            return error(404, "RESOURCE_DOES_NOT_EXIST", f"Statement {path.rsplit('/', 1)[-1]} not found")
        return 200, response
    return error(404, "ENDPOINT_NOT_FOUND", f"No API found for '{method} {path}'")


def _json(raw: bytes) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _table(workspace: UnityWorkspace, method: str, full_name: str) -> Response:
    metastore = workspace.metastore
    with metastore.lock:
        table = metastore.get_full(full_name)
        if table is None:
            return error(404, "TABLE_DOES_NOT_EXIST", f"Table '{full_name}' does not exist.")
        if method == "DELETE":
            try:
                metastore.drop(table)
            except StatementFailure as failure:
                return error(400, failure.service_code, str(failure))
            return 200, {}
        return 200, table.table_info()


def _list_tables(workspace: UnityWorkspace, query: dict[str, str]) -> Response:
    catalog, schema = query.get("catalog_name"), query.get("schema_name")
    if not catalog or not schema:
        return error(400, "INVALID_PARAMETER_VALUE", "catalog_name and schema_name are required")
    with workspace.metastore.lock:
        if not workspace.metastore.has_catalog(catalog):
            return error(404, "CATALOG_DOES_NOT_EXIST", f"Catalog '{catalog}' does not exist.")
        tables = [t.table_info() for t in workspace.metastore.list(catalog, schema)]
    return 200, {"tables": tables}


def _catalogs(workspace: UnityWorkspace, method: str, name: str, payload: dict[str, Any]) -> Response:
    metastore = workspace.metastore
    if method == "GET" and not name:
        return 200, {"catalogs": [_catalog_info(c) for c in metastore.catalog_names()]}
    if method == "GET":
        if name.lower() not in metastore.catalog_names():
            return error(404, "CATALOG_DOES_NOT_EXIST", f"Catalog '{name}' does not exist.")
        return 200, _catalog_info(name.lower())
    if method == "POST" and not name:
        new = str(payload.get("name") or "")
        if not new:
            return error(400, "INVALID_PARAMETER_VALUE", "name is required")
        try:
            metastore.create_catalog(new, if_not_exists=False)
        except StatementFailure as failure:
            return error(409, "CATALOG_ALREADY_EXISTS", str(failure))
        return 200, _catalog_info(new.lower())
    return error(404, "ENDPOINT_NOT_FOUND", f"No API found for '{method} {CATALOGS_PATH}/{name}'")


def _schemas(
    workspace: UnityWorkspace, method: str, full_name: str, query: dict[str, str], payload: dict[str, Any]
) -> Response:
    metastore = workspace.metastore
    if method == "GET" and not full_name:
        catalog = query.get("catalog_name")
        if not catalog:
            return error(400, "INVALID_PARAMETER_VALUE", "catalog_name is required")
        if not metastore.has_catalog(catalog):
            return error(404, "CATALOG_DOES_NOT_EXIST", f"Catalog '{catalog}' does not exist.")
        return 200, {"schemas": [_schema_info(catalog.lower(), s) for s in metastore.schema_names(catalog)]}
    if method == "GET":
        catalog, _, schema = full_name.lower().partition(".")
        if schema not in metastore.schema_names(catalog):
            return error(404, "SCHEMA_DOES_NOT_EXIST", f"Schema '{full_name}' does not exist.")
        return 200, _schema_info(catalog, schema)
    if method == "POST" and not full_name:
        catalog, schema = str(payload.get("catalog_name") or ""), str(payload.get("name") or "")
        if not catalog or not schema:
            return error(400, "INVALID_PARAMETER_VALUE", "catalog_name and name are required")
        try:
            metastore.create_schema(catalog, schema, if_not_exists=False)
        except StatementFailure as failure:
            status = 404 if failure.service_code == "NOT_FOUND" else 409
            code = "CATALOG_DOES_NOT_EXIST" if status == 404 else "SCHEMA_ALREADY_EXISTS"
            return error(status, code, str(failure))
        return 200, _schema_info(catalog.lower(), schema.lower())
    return error(404, "ENDPOINT_NOT_FOUND", f"No API found for '{method} {SCHEMAS_PATH}/{full_name}'")


def _catalog_info(name: str) -> dict[str, Any]:
    return {"name": name, "full_name": name, "catalog_type": "MANAGED_CATALOG", "owner": "zerobus-local"}


def _schema_info(catalog: str, schema: str) -> dict[str, Any]:
    return {
        "name": schema,
        "catalog_name": catalog,
        "full_name": f"{catalog}.{schema}",
        "owner": "zerobus-local",
    }


def _credentials(workspace: UnityWorkspace, payload: dict[str, Any]) -> Response:
    operation = str(payload.get("operation") or "READ")
    table_id = str(payload.get("table_id") or "")
    with workspace.metastore.lock:
        table = workspace.metastore.by_id(table_id)
    if table is None:
        return error(404, "TABLE_DOES_NOT_EXIST", f"Table with id '{table_id}' does not exist.")
    if operation not in ("READ", "READ_WRITE"):
        return error(400, "INVALID_PARAMETER_VALUE", f"Unknown operation {operation!r}")
    if operation == "READ_WRITE" and table.table_type == "MANAGED":
        return error(
            403,
            "PERMISSION_DENIED",
            f"Credential vending with write access is not supported for managed table {table.full_name}.",
        )
    issued = workspace.credential_issuer.issue(table, operation)
    return 200, {
        "aws_temp_credentials": {
            "access_key_id": issued.access_key_id,
            "secret_access_key": issued.secret_access_key,
            "session_token": issued.session_token,
        },
        "expiration_time": issued.expiration_ms,
        "url": table.storage_location,
    }
