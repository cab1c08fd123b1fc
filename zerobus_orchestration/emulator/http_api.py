"""The emulator's HTTP side (one ``ThreadingHTTPServer`` on ``token_port``).

Routes:
* ``POST /oidc/v1/token``: OAuth client credentials (what the SDK calls as ``unity_catalog_url``).
* ``/api/2.1/unity-catalog/iceberg-rest...``: delegated to ``IcebergRestFacade.handle`` (JSON).
* ``GET /.well-known/databricks-config`` and ``GET /oidc/.well-known/oauth-authorization-server`` (OIDC
  discovery for ``databricks-sdk`` OAuth M2M), the rest of ``/api/2.1/unity-catalog/...``,
  ``/api/2.0/unity-catalog/temporary-table-credentials`` and ``/api/2.0/sql/statements...``: the local
  Unity Catalog (``emulator/unity/routes.py``), bearer token required.
* ``GET /_emulator/health``; ``POST /_emulator/materialize?table=c.s.t`` (commit the WAL now, all tables
  without ``table``); ``GET /_emulator/status`` (failed tables and their causes); ``POST
  /_emulator/faults`` (body: one fault object, see faults.py). Test hooks for an emulator running in
  another process.

The ports are on loopback, reachable by every local user: everything but the token endpoint and the
health check needs a credential (a bearer token this emulator issued, or HTTP Basic client
credentials), and faults are armed over HTTP only when the emulator was started with
``emulator.faults_enabled``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from pydantic import ValidationError

from zerobus_orchestration.emulator.auth import TokenIssuer
from zerobus_orchestration.emulator.errors import TokenRequestError
from zerobus_orchestration.emulator.faults import FaultInjector, FaultSpec
from zerobus_orchestration.emulator.unity import routes as unity_routes
from zerobus_orchestration.emulator.unity.workspace import UnityWorkspace

log = logging.getLogger(__name__)

TOKEN_PATH = "/oidc/v1/token"
ICEBERG_REST_PREFIX = "/api/2.1/unity-catalog/iceberg-rest"
HEALTH_PATH = "/_emulator/health"
STATUS_PATH = "/_emulator/status"


class IcebergRest(Protocol):
    def handle(
        self, method: str, path: str, query: dict[str, list[str]], headers: Mapping[str, str], body: bytes
    ) -> tuple[int, dict[str, Any]]: ...


class HttpBackend(Protocol):
    @property
    def issuer(self) -> TokenIssuer: ...

    faults: FaultInjector

    def iceberg_rest(self) -> IcebergRest | None: ...

    def materialize_for_http(self, table: str | None) -> dict[str, Any]: ...

    def note_activity(self) -> None: ...

    def failed_tables(self) -> dict[str, dict[str, Any]]: ...

    def unity_workspace(self) -> UnityWorkspace | None: ...

    @property
    def workspace_url(self) -> str: ...


def make_http_server(host: str, port: int, backend: HttpBackend) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("http %s", format % args)

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def do_HEAD(self) -> None:
            self._dispatch("HEAD")

        def do_DELETE(self) -> None:
            self._dispatch("DELETE")

        def do_PUT(self) -> None:
            self._dispatch("PUT")

        def _dispatch(self, method: str) -> None:
            backend.note_activity()  # any request keeps a shared (daemon) emulator from idling out
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            query = parse_qs(parts.query)
            try:
                status, payload = self._route(method, parts.path, query, body)
            except Exception as exc:  # answer every request; the server must not die on one
                log.exception("HTTP %s %s failed", method, parts.path)
                status, payload = (
                    500,
                    {"error": {"message": str(exc), "type": type(exc).__name__, "code": 500}},
                )
            self._send(status, payload)
            backend.note_activity()

        def _route(
            self, method: str, path: str, query: dict[str, list[str]], body: bytes
        ) -> tuple[int, dict[str, Any]]:
            if path == TOKEN_PATH and method == "POST":
                try:
                    return 200, backend.issuer.token_response(self.headers.get("Authorization"), body)
                except TokenRequestError as exc:
                    return exc.status, exc.body
            if path == HEALTH_PATH:
                return 200, {"status": "ok"}
            workspace = backend.unity_workspace()
            if workspace is not None:
                found = unity_routes.discovery(workspace, method, path, backend.workspace_url)
                if found is not None:
                    return found
            if workspace is not None and unity_routes.serves(path) and not _is_iceberg(path):
                return self._unity(workspace, method, path, query, body)
            try:
                backend.issuer.check_http(self.headers.get("Authorization"))
            except TokenRequestError as exc:
                return exc.status, {
                    "error": {"message": str(exc), "type": "NotAuthorizedException", "code": exc.status}
                }
            if path == ICEBERG_REST_PREFIX or path.startswith(ICEBERG_REST_PREFIX + "/"):
                facade = backend.iceberg_rest()
                if facade is None:
                    message = "the Iceberg REST facade is not available (emulator/iceberg_rest.py missing)"
                    return 503, {
                        "error": {"message": message, "type": "ServiceUnavailableException", "code": 503}
                    }
                headers = {k: v for k, v in self.headers.items()}
                return facade.handle(method, path, query, headers, body)
            if path == "/_emulator/materialize" and method == "POST":
                table = query.get("table", [None])[-1]
                return 200, backend.materialize_for_http(table)
            if path == STATUS_PATH and method == "GET":  # failed tables and their causes (table_health.py)
                return 200, {"failed_tables": backend.failed_tables()}
            if path == "/_emulator/faults" and method == "POST":
                if not backend.faults.enabled:
                    message = (
                        "fault injection is disabled on this emulator: start it with "
                        "zerobus.emulator.faults_enabled = true (tests only)"
                    )
                    return 403, {"error": {"message": message, "type": "ForbiddenException", "code": 403}}
                try:
                    spec = backend.faults.add(FaultSpec.model_validate_json(body))
                except ValidationError as exc:
                    return 400, {"error": {"message": str(exc), "code": 400}}
                return 200, {"armed": spec.model_dump(mode="json")}
            return 404, {"error": {"message": f"no route for {method} {path}", "code": 404}}

        def _unity(
            self,
            workspace: UnityWorkspace,
            method: str,
            path: str,
            query: dict[str, list[str]],
            body: bytes,
        ) -> tuple[int, dict[str, Any]]:
            """Unity Catalog and SQL routes: a bearer token, and errors shaped as Databricks' REST API."""
            authorization = self.headers.get("Authorization") or ""
            if not authorization.lower().startswith("bearer "):  # Databricks APIs take no Basic credentials
                return unity_routes.error(
                    401, "UNAUTHENTICATED", "Credential was not sent or was of an unsupported type."
                )
            try:
                backend.issuer.check_http(authorization)
            except TokenRequestError as exc:
                return unity_routes.error(401, "UNAUTHENTICATED", str(exc))
            flat = {k: v[-1] for k, v in query.items()}
            return unity_routes.handle_api(workspace, method, path, flat, body)

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def _is_iceberg(path: str) -> bool:
    return path == ICEBERG_REST_PREFIX or path.startswith(ICEBERG_REST_PREFIX + "/")
