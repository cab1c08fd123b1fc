"""The fake Unity Catalog's HTTP side: the REST subset the ``databricks-sdk`` calls, routed to the fake.

Each request is authenticated (PAT, OAuth token or HTTP Basic for the token endpoint), recorded in
``FakeUnityCatalog.requests`` and answered from the fake's state (``uc_fake``); this module holds no state.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

if TYPE_CHECKING:
    from zerobus_orchestration.testing.uc_fake import FakeUnityCatalog

TABLES_PATH = "/api/2.1/unity-catalog/tables"
CREDENTIALS_PATHS = (
    "/api/2.0/unity-catalog/temporary-table-credentials",
    "/api/2.1/unity-catalog/temporary-table-credentials",
)
STATEMENTS_PATH = "/api/2.0/sql/statements"


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    auth: str  # "pat", "oauth", "basic", "none" or "invalid"


class FakeUcHandler(BaseHTTPRequestHandler):
    """One request to the fake: authenticate, record, route to the fake's state."""

    protocol_version = "HTTP/1.1"
    server_version = "FakeUnityCatalog/1"

    @property
    def fake(self) -> FakeUnityCatalog:
        fake: FakeUnityCatalog = self.server.fake  # type: ignore[attr-defined]
        return fake

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read ``fake.requests``
        return

    # -- plumbing ---------------------------------------------------------------------------------

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _json_body(self) -> dict[str, Any]:
        raw = self._body()
        if not raw:
            return {}
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            return {}
        return parsed if isinstance(parsed, dict) else {}

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, error_code: str, message: str) -> None:
        self._send(status, {"error_code": error_code, "message": message})

    def _route(self, method: str) -> None:
        split = urlsplit(self.path)
        path = split.path
        query = {k: v[0] for k, v in parse_qs(split.query).items()}
        auth = self.fake.auth_kind(self.headers.get("Authorization"))
        self.fake.requests.append(RecordedRequest(method, path, auth))
        if method == "GET" and path == "/.well-known/databricks-config":
            url = self.fake.url
            self._send(
                200, {"oidc_endpoint": f"{url}/oidc", "workspace_id": self.fake.workspace_id, "cloud": "AWS"}
            )
            return
        if method == "GET" and path == "/oidc/.well-known/oauth-authorization-server":
            url = self.fake.url
            self._send(
                200,
                {
                    "issuer": f"{url}/oidc",
                    "authorization_endpoint": f"{url}/oidc/v1/authorize",
                    "token_endpoint": f"{url}/oidc/v1/token",
                },
            )
            return
        if method == "POST" and path == "/oidc/v1/token":
            self._token()
            return
        if not path.startswith("/api/"):
            self._error(404, "ENDPOINT_NOT_FOUND", f"No API found for '{method} {path}'")
            return
        if auth not in ("pat", "oauth"):
            self._body()
            self._error(401, "UNAUTHENTICATED", "Invalid or expired access token.")
            return
        self._api(method, path, query)

    def _token(self) -> None:
        form = {k: v[0] for k, v in parse_qs(self._body().decode()).items()}
        if form.get("grant_type") != "client_credentials":
            self._send(
                400, {"error": "unsupported_grant_type", "error_description": "client_credentials only"}
            )
            return
        if not self.fake.check_client(self.headers.get("Authorization")):
            self._send(401, {"error": "invalid_client", "error_description": "Client authentication failed"})
            return
        token, ttl = self.fake.issue_token()
        self._send(
            200,
            {
                "access_token": token,
                "token_type": "Bearer",
                "expires_in": ttl,
                "scope": form.get("scope", "all-apis"),
            },
        )

    def _api(self, method: str, path: str, query: dict[str, str]) -> None:
        body = self._json_body() if method == "POST" else {}
        if path.startswith(TABLES_PATH + "/") and method in ("GET", "DELETE"):
            self._table(method, unquote(path[len(TABLES_PATH) + 1 :]))
        elif path == TABLES_PATH and method == "GET":
            self._list_tables(query)
        elif path in CREDENTIALS_PATHS and method == "POST":
            self._credentials(body)
        elif path == STATEMENTS_PATH and method == "POST":
            self._execute(body)
        elif path.startswith(STATEMENTS_PATH + "/") and path.endswith("/cancel") and method == "POST":
            found = self.fake.cancel_statement(path[len(STATEMENTS_PATH) + 1 : -len("/cancel")])
            if found:
                self._send(200, {})
            else:
                self._error(404, "RESOURCE_DOES_NOT_EXIST", "Statement not found")
        elif path.startswith(STATEMENTS_PATH + "/") and method == "GET":
            response = self.fake.poll_statement(path[len(STATEMENTS_PATH) + 1 :])
            if response is None:
                self._error(404, "RESOURCE_DOES_NOT_EXIST", f"Statement {path.rsplit('/', 1)[-1]} not found")
            else:
                self._send(200, response)
        else:
            self._error(404, "ENDPOINT_NOT_FOUND", f"No API found for '{method} {path}'")

    # -- endpoints --------------------------------------------------------------------------------

    def _table(self, method: str, full_name: str) -> None:
        metastore = self.fake.metastore
        with metastore.lock:
            table = metastore.get_full(full_name)
            if table is None:
                self._error(404, "TABLE_DOES_NOT_EXIST", f"Table '{full_name}' does not exist.")
                return
            if method == "DELETE":
                metastore.drop(table)
                self._send(200, {})
                return
            info = table.table_info()
        self._send(200, info)

    def _list_tables(self, query: dict[str, str]) -> None:
        catalog, schema = query.get("catalog_name"), query.get("schema_name")
        if not catalog or not schema:
            self._error(400, "INVALID_PARAMETER_VALUE", "catalog_name and schema_name are required")
            return
        with self.fake.metastore.lock:
            tables = [t.table_info() for t in self.fake.metastore.list(catalog, schema)]
        self._send(200, {"tables": tables})

    def _credentials(self, body: dict[str, Any]) -> None:
        operation = str(body.get("operation") or "READ")
        table_id = str(body.get("table_id") or "")
        with self.fake.metastore.lock:
            table = self.fake.metastore.by_id(table_id)
        if table is None:
            self._error(404, "TABLE_DOES_NOT_EXIST", f"Table with id '{table_id}' does not exist.")
            return
        if operation not in ("READ", "READ_WRITE"):
            self._error(400, "INVALID_PARAMETER_VALUE", f"Unknown operation {operation!r}")
            return
        if operation == "READ_WRITE" and table.table_type == "MANAGED":
            self._error(
                403,
                "PERMISSION_DENIED",
                f"Credential vending with write access is not supported for managed table {table.full_name}.",
            )
            return
        issued = self.fake.credential_issuer.issue(table, operation)
        self._send(
            200,
            {
                "aws_temp_credentials": {
                    "access_key_id": issued.access_key_id,
                    "secret_access_key": issued.secret_access_key,
                    "session_token": issued.session_token,
                },
                "expiration_time": issued.expiration_ms,
                "url": table.storage_location,
            },
        )

    def _execute(self, body: dict[str, Any]) -> None:
        warehouse = body.get("warehouse_id")
        if warehouse != self.fake.warehouse_id:
            self._error(404, "RESOURCE_DOES_NOT_EXIST", f"SQL warehouse {warehouse!r} does not exist.")
            return
        self._send(200, self.fake.submit_statement(body))

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_DELETE(self) -> None:
        self._route("DELETE")
