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
- ``GET|DELETE /api/2.1/unity-catalog/tables/{full_name}``, ``GET /api/2.1/unity-catalog/tables``
  (TableInfo JSON with ``columns[].type_text/type_json/type_name/comment/nullable/position``,
  ``properties``, ``table_id``, ``storage_location``, ``delta_uniform_iceberg``);
- ``POST /api/2.0/unity-catalog/temporary-table-credentials`` (READ; READ_WRITE only for EXTERNAL
  tables, made with ``CREATE TABLE ... LOCATION``: Unity Catalog refuses it for managed Delta tables);
- ``POST /api/2.0/sql/statements``, ``GET /api/2.0/sql/statements/{id}``, ``POST .../{id}/cancel``: DDL
  parsed with sqlglot and applied at submission (see ``uc_sql``); failures come back as
  ``status.state == "FAILED"`` with ``error{error_code, message}``, the Databricks error class in
  brackets at the start of the message.

Test hooks: ``fail_next_statement``, ``statement_pending_polls`` (statements report PENDING/RUNNING for
that many polls), ``hold_uniform_conversion`` / ``convert_uniform``, ``simulate_commit``, ``expire_tokens``,
``requests`` (a log of what was called and with which credential kind).

The HTTP routing lives in ``uc_http``; this module holds the workspace's state and its test hooks.
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from typing import Any, Protocol

from zerobus_orchestration.testing.uc_http import FakeUcHandler, RecordedRequest
from zerobus_orchestration.testing.uc_metastore import Metastore
from zerobus_orchestration.testing.uc_sql import ResultSet, SqlEngine
from zerobus_orchestration.testing.uc_state import FakeTable, StatementFailure, now_ms


@dataclass(frozen=True)
class IssuedCredentials:
    """AWS-style temporary credentials the fake hands out for a table."""

    access_key_id: str
    secret_access_key: str
    session_token: str
    expiration_ms: int


class CredentialIssuer(Protocol):
    """Where vended table credentials come from (default: synthetic keys; tests may plug moto STS)."""

    def issue(self, table: FakeTable, operation: str) -> IssuedCredentials: ...


@dataclass(frozen=True)
class SyntheticIssuer:
    ttl_s: int = 3600

    def issue(self, table: FakeTable, operation: str) -> IssuedCredentials:
        return IssuedCredentials(
            access_key_id="ASIAFAKE" + secrets.token_hex(6).upper(),
            secret_access_key=secrets.token_urlsafe(30),
            session_token=secrets.token_urlsafe(48),
            expiration_ms=now_ms() + self.ttl_s * 1000,
        )


@dataclass
class _Statement:
    response: dict[str, Any]
    polls_left: int


@dataclass
class FakeUnityCatalog:
    """The fake workspace. Use as a context manager, or ``start()`` / ``stop()``."""

    pat: str = "dapi-fake-token"
    client_id: str = "fake-service-principal"
    client_secret: str = "fake-service-principal-secret"
    token_ttl_s: int = 3600
    warehouse_id: str = "fake-warehouse"
    workspace_id: str = "1234567890"
    storage_root: str = "s3://fake-metastore"
    statement_pending_polls: int = 0
    credential_issuer: CredentialIssuer = field(default_factory=SyntheticIssuer)
    requests: list[RecordedRequest] = field(default_factory=list)
    tokens_issued: int = 0

    def __post_init__(self) -> None:
        self.metastore = Metastore(storage_root=self.storage_root)
        self.engine = SqlEngine(self.metastore)
        self._statements: dict[str, _Statement] = {}
        self._faults: list[tuple[str | None, StatementFailure]] = []
        self._tokens: dict[str, float] = {}  # OAuth access token -> expiry (monotonic)
        self._lock = threading.Lock()
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

    def execute_sql(self, statement: str) -> ResultSet | None:
        """Run a statement directly (no HTTP): set up state as a human or another tool would."""
        return self.engine.execute(statement)

    def table(self, full_name: str) -> FakeTable | None:
        return self.metastore.get_full(full_name)

    def fail_next_statement(
        self,
        error_class: str = "INTERNAL_ERROR",
        message: str = "injected failure",
        *,
        code: str = "INTERNAL_ERROR",
        matching: str | None = None,
    ) -> None:
        """The next statement (containing ``matching``, case-insensitive, if given) FAILS unexecuted."""
        with self._lock:
            self._faults.append(
                (matching, StatementFailure(error_class, message, sqlstate="XX000", code=code))
            )

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
        with self._lock:
            self._tokens.clear()

    def _require(self, full_name: str) -> FakeTable:
        table = self.metastore.get_full(full_name)
        if table is None:
            raise KeyError(f"fake Unity Catalog has no table {full_name}")
        return table

    # -- auth -------------------------------------------------------------------------------------

    def issue_token(self) -> tuple[str, int]:
        token = "fake-oauth-" + secrets.token_urlsafe(24)
        with self._lock:
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
        with self._lock:
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

    # -- statements -------------------------------------------------------------------------------

    def submit_statement(self, body: dict[str, Any]) -> dict[str, Any]:
        statement_id = str(uuid.uuid4())
        text = str(body.get("statement", ""))
        with self._lock:
            fault = self._take_fault(text)
        try:
            if fault is not None:
                raise fault
            result = self.engine.execute(text, catalog=body.get("catalog"), schema=body.get("schema"))
            final = _succeeded(statement_id, result)
        except StatementFailure as failure:
            final = _failed(statement_id, failure)
        pending = self.statement_pending_polls
        with self._lock:
            self._statements[statement_id] = _Statement(final, pending)
        if pending > 0:
            return {"statement_id": statement_id, "status": {"state": "PENDING"}}
        return final

    def _take_fault(self, statement: str) -> StatementFailure | None:
        for i, (matching, failure) in enumerate(self._faults):
            if matching is None or matching.lower() in statement.lower():
                del self._faults[i]
                return failure
        return None

    def cancel_statement(self, statement_id: str) -> bool:
        with self._lock:
            record = self._statements.get(statement_id)
            if record is None:
                return False
            if record.polls_left > 0:  # still "running": it ends CANCELED (its DDL already applied, see docs)
                record.polls_left = 0
                record.response = {"statement_id": statement_id, "status": {"state": "CANCELED"}}
            return True

    def poll_statement(self, statement_id: str) -> dict[str, Any] | None:
        with self._lock:
            record = self._statements.get(statement_id)
            if record is None:
                return None
            if record.polls_left > 0:
                record.polls_left -= 1
                return {"statement_id": statement_id, "status": {"state": "RUNNING"}}
            return record.response


def _succeeded(statement_id: str, result: ResultSet | None) -> dict[str, Any]:
    columns = result.columns if result is not None else ()
    rows = result.rows if result is not None else ()
    return {
        "statement_id": statement_id,
        "status": {"state": "SUCCEEDED"},
        "manifest": {
            "format": "JSON_ARRAY",
            "schema": {
                "column_count": len(columns),
                "columns": [
                    {"name": name, "type_text": type_name, "type_name": type_name, "position": i}
                    for i, (name, type_name) in enumerate(columns)
                ],
            },
            "total_chunk_count": 1 if rows else 0,
            "total_row_count": len(rows),
            "truncated": False,
        },
        "result": {
            "chunk_index": 0,
            "row_offset": 0,
            "row_count": len(rows),
            "data_array": [
                [_cell(value, type_name) for value, (_, type_name) in zip(row, columns, strict=True)]
                for row in rows
            ],
        }
        if rows
        else {},
    }


def _failed(statement_id: str, failure: StatementFailure) -> dict[str, Any]:
    return {
        "statement_id": statement_id,
        "status": {"state": "FAILED", "error": {"error_code": failure.service_code, "message": str(failure)}},
    }


def _cell(value: Any, type_name: str) -> str | None:
    """JSON_ARRAY cells are strings; complex values are JSON text, timestamps ISO-8601."""
    if value is None:
        return None
    if type_name == "TIMESTAMP" and isinstance(value, int):
        return datetime.fromtimestamp(value / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)
