"""One Unity Catalog workspace's state: the metastore, its SQL warehouse's statements, vended credentials.

Transport-free: ``routes.handle`` answers HTTP requests from it, in the emulator (``emulator/http_api``)
and in the standalone test fake (``zerobus_orchestration.testing.FakeUnityCatalog``, a subclass adding
its own HTTP server, tokens and test hooks).

Statements are applied at submission; with ``statement_pending_polls`` they then report PENDING/RUNNING
for that many polls, as a busy warehouse does. Failures come back as ``status.state == "FAILED"`` with
``error{error_code, message}``, the Databricks error class in brackets at the start of the message.
"""

from __future__ import annotations

import json
import secrets
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from zerobus_orchestration.emulator.unity.metastore import Metastore
from zerobus_orchestration.emulator.unity.sql import ResultSet, SqlEngine
from zerobus_orchestration.emulator.unity.state import FakeTable, StatementFailure, now_ms


@dataclass(frozen=True)
class IssuedCredentials:
    """AWS-style temporary credentials vended for a table."""

    access_key_id: str
    secret_access_key: str
    session_token: str
    expiration_ms: int


class CredentialIssuer(Protocol):
    """Where vended table credentials come from (default: synthetic keys; tests may plug moto STS)."""

    def issue(self, table: FakeTable, operation: str) -> IssuedCredentials: ...


@dataclass(frozen=True)
class SyntheticIssuer:
    """Keys that open nothing: for a folder warehouse (no keys needed) and the standalone fake."""

    ttl_s: int = 3600

    def issue(self, table: FakeTable, operation: str) -> IssuedCredentials:
        return IssuedCredentials(
            access_key_id="ASIAFAKE" + secrets.token_hex(6).upper(),
            secret_access_key=secrets.token_urlsafe(30),
            session_token=secrets.token_urlsafe(48),
            expiration_ms=now_ms() + self.ttl_s * 1000,
        )


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    auth: str  # "pat", "oauth", "basic", "none" or "invalid"


@dataclass
class _Statement:
    response: dict[str, Any]
    polls_left: int


@dataclass
class UnityWorkspace:
    """The workspace's state. ``metastore`` defaults to an in-memory one under ``storage_root``."""

    warehouse_id: str = "fake-warehouse"
    workspace_id: str = "1234567890"
    storage_root: str = "s3://fake-metastore"
    statement_pending_polls: int = 0
    credential_issuer: CredentialIssuer = field(default_factory=SyntheticIssuer)
    requests: list[RecordedRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.metastore = self._make_metastore()
        self.engine = SqlEngine(self.metastore)
        self._statements: dict[str, _Statement] = {}
        self._faults: list[tuple[str | None, StatementFailure]] = []
        self._lock = threading.Lock()

    def _make_metastore(self) -> Metastore:
        return Metastore(storage_root=self.storage_root)

    # -- direct access ----------------------------------------------------------------------------

    def execute_sql(self, statement: str) -> ResultSet | None:
        """Run a statement directly (no HTTP): set up state as a human or another tool would."""
        return self.engine.execute(statement)

    def table(self, full_name: str) -> FakeTable | None:
        with self.metastore.lock:
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

    # -- statements -------------------------------------------------------------------------------

    def accepts_warehouse(self, warehouse_id: object) -> bool:
        return warehouse_id == self.warehouse_id

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
