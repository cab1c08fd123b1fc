"""A local fake of the Unity Catalog and SQL Statement Execution REST subset, for tests.

Drive it with the real ``databricks-sdk`` client (PAT or OAuth M2M) so tests exercise the SDK's own
request shapes, retries and error mapping::

    with FakeUnityCatalog() as uc:
        w = WorkspaceClient(host=uc.url, token=uc.pat, auth_type="pat")
        w.statement_execution.execute_statement("CREATE TABLE main.s.t (id BIGINT)", uc.warehouse_id)
        w.tables.get("main.s.t")

Served (stdlib ``ThreadingHTTPServer`` on 127.0.0.1, a free port):

- ``GET /.well-known/databricks-config`` and ``GET /oidc/.well-known/oauth-authorization-server``;
- ``POST /oidc/v1/token``: client credentials (HTTP Basic), tokens expire after ``token_ttl_s``;
- ``GET /api/2.1/unity-catalog/catalogs``, ``.../schemas`` (any catalog name is accepted here);
- ``GET|DELETE /api/2.1/unity-catalog/tables/{full_name}``, ``GET /api/2.1/unity-catalog/tables``
  (TableInfo JSON with ``columns[].type_text/type_json/type_name/comment/nullable/position``,
  ``properties``, ``table_id``, ``storage_location``, ``delta_uniform_iceberg``);
- ``POST /api/2.0/unity-catalog/temporary-table-credentials`` (READ; READ_WRITE only for EXTERNAL
  tables, made with ``CREATE TABLE ... LOCATION``: Unity Catalog refuses it for managed Delta tables);
- ``POST /api/2.0/sql/statements``, ``GET /api/2.0/sql/statements/{id}``, ``POST .../{id}/cancel``: DDL
  parsed with sqlglot and applied at submission (``emulator/unity/sql.py``); failures come back as
  ``status.state == "FAILED"`` with ``error{error_code, message}``, the Databricks error class in
  brackets at the start of the message.

Test hooks: ``fail_next_statement``, ``statement_pending_polls`` (statements report PENDING/RUNNING for
that many polls), ``hold_uniform_conversion`` / ``convert_uniform``, ``simulate_commit``, ``expire_tokens``,
``requests`` (a log of what was called and with which credential kind).

The workspace itself (metastore, SQL engine, statements, routes) is the emulator's Unity Catalog
(``zerobus_orchestration.emulator.unity``), here in memory and unbacked by storage: this module adds an
HTTP server of its own, a personal access token and OAuth tokens, and test hooks.
"""

from __future__ import annotations

import base64
import secrets
import threading
import time
from dataclasses import dataclass
from http.server import ThreadingHTTPServer

from zerobus_orchestration.emulator.unity.state import FakeTable
from zerobus_orchestration.emulator.unity.workspace import (
    CredentialIssuer,
    IssuedCredentials,
    SyntheticIssuer,
    UnityWorkspace,
)
from zerobus_orchestration.testing.uc_http import FakeUcHandler

__all__ = ["CredentialIssuer", "FakeUnityCatalog", "IssuedCredentials", "SyntheticIssuer"]


@dataclass
class FakeUnityCatalog(UnityWorkspace):
    """The fake workspace. Use as a context manager, or ``start()`` / ``stop()``."""

    pat: str = "dapi-fake-token"
    client_id: str = "fake-service-principal"
    client_secret: str = "fake-service-principal-secret"
    token_ttl_s: int = 3600
    tokens_issued: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        self._tokens: dict[str, float] = {}  # OAuth access token -> expiry (monotonic)
        self._token_lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> FakeUnityCatalog:
        server = ThreadingHTTPServer(("127.0.0.1", 0), FakeUcHandler)
        server.daemon_threads = True
        server.fake = self  # type: ignore[attr-defined]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-unity-catalog",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeUnityCatalog:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("FakeUnityCatalog is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    # -- test hooks -------------------------------------------------------------------------------

    @property
    def hold_uniform_conversion(self) -> bool:
        return self.metastore.hold_uniform_conversion

    @hold_uniform_conversion.setter
    def hold_uniform_conversion(self, value: bool) -> None:
        self.metastore.hold_uniform_conversion = value

    def simulate_commit(self, full_name: str) -> int:
        """A data write (e.g. a Zerobus append): one new Delta version. Returns it."""
        with self.metastore.lock:
            table = self._require(full_name)
            self.metastore.commit(table, "WRITE")
            return table.version

    def convert_uniform(self, full_name: str) -> int | None:
        """Let the asynchronous UniForm conversion catch up now; returns ``converted_delta_version``."""
        with self.metastore.lock:
            table = self._require(full_name)
            table.convert_uniform()
            return table.converted_delta_version

    def expire_tokens(self) -> None:
        """Every issued OAuth token stops working (the client must fetch a new one)."""
        with self._token_lock:
            self._tokens.clear()

    def _require(self, full_name: str) -> FakeTable:
        table = self.metastore.get_full(full_name)
        if table is None:
            raise KeyError(f"fake Unity Catalog has no table {full_name}")
        return table

    # -- auth -------------------------------------------------------------------------------------

    def issue_token(self) -> tuple[str, int]:
        token = "fake-oauth-" + secrets.token_urlsafe(24)
        with self._token_lock:
            self._tokens[token] = time.monotonic() + self.token_ttl_s
            self.tokens_issued += 1
        return token, self.token_ttl_s

    def auth_kind(self, header: str | None) -> str:
        if not header:
            return "none"
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "basic":
            return "basic"
        if scheme.lower() != "bearer":
            return "invalid"
        if value == self.pat:
            return "pat"
        with self._token_lock:
            expiry = self._tokens.get(value)
        return "oauth" if expiry is not None and expiry > time.monotonic() else "invalid"

    def check_client(self, header: str | None) -> bool:
        scheme, _, value = (header or "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            client_id, _, secret = base64.b64decode(value).decode().partition(":")
        except ValueError:
            return False
        return secrets.compare_digest(client_id, self.client_id) and secrets.compare_digest(
            secret, self.client_secret
        )
