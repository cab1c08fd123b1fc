"""Statements on a SQL warehouse through the Statement Execution API, for the ``unity`` backend.

A failed statement does not raise in the SDK: each final state is checked, PENDING/RUNNING is polled
(one ``retry.Backoff``), a statement past its deadline is cancelled, and a failure raises
``StatementFailedError`` naming the statement, the Databricks error class, what had already run and,
where one is known, the fix. ``lost_a_race`` says whether a failure is another writer's change.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from databricks.sdk import WorkspaceClient
from databricks.sdk.errors.base import DatabricksError
from databricks.sdk.service.sql import (
    ExecuteStatementRequestOnWaitTimeout,
    StatementResponse,
    StatementState,
)

from zerobus_orchestration.catalog.base import COLUMN_MAPPING_MODE
from zerobus_orchestration.errors import CatalogError, StatementFailedError
from zerobus_orchestration.retry import Backoff, poll_until

# The characters of ``CHARS_NEEDING_COLUMN_MAPPING`` spelled for messages (space and controls named).
MAPPING_CHARS_TEXT = "space , ; { } ( ) newline tab ="
_ERROR_CLASS = re.compile(r"^\[(?P<cls>[A-Z0-9_.]+)\]")


# Error classes that mean someone else changed the table between our describe and our statement.
_RACE_ERROR_CLASSES = frozenset(
    {
        "TABLE_OR_VIEW_ALREADY_EXISTS",
        "COLUMN_ALREADY_EXISTS",
        "FIELD_ALREADY_EXISTS",
        "FIELDS_ALREADY_EXISTS",
        "DELTA_DUPLICATE_COLUMNS_FOUND",
        "DELTA_METADATA_CHANGED",
        "DELTA_PROTOCOL_CHANGED",
    }
)


def lost_a_race(failure: StatementFailedError) -> bool:
    """Whether ``failure`` says another writer got to the table first (worth one re-plan)."""
    error_class = (failure.sql_error_class or "").split(".")[0]
    return error_class in _RACE_ERROR_CLASSES or error_class.startswith("DELTA_CONCURRENT_")


@dataclass(frozen=True)
class StatementPolling:
    """How long a statement may run and how it is polled (``wait_timeout`` is the server-side wait)."""

    wait_timeout: str = "30s"
    poll_initial_s: float = 0.2
    poll_max_s: float = 5.0
    deadline_s: float = 600.0


DEFAULT_POLLING = StatementPolling()


class StatementRunner:
    """Runs statements one at a time on ``warehouse_id`` and waits for each to settle."""

    def __init__(
        self,
        client: WorkspaceClient,
        warehouse_id: str,
        *,
        polling: StatementPolling,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._warehouse_id = warehouse_id
        self._polling = polling
        self._sleep = sleep
        self._clock = clock

    def query(self, statement: str) -> list[dict[str, Any]]:
        """Rows of a small result set as dicts (JSON_ARRAY cells are strings or null)."""
        response = self.run(statement, ())
        manifest = response.manifest
        columns = (
            [c.name or "" for c in (manifest.schema.columns or [])] if manifest and manifest.schema else []
        )
        data = (response.result.data_array if response.result else None) or []
        return [dict(zip(columns, row, strict=False)) for row in data]

    def run(self, statement: str, executed: Sequence[str]) -> StatementResponse:
        api = self._client.statement_execution
        try:
            response = api.execute_statement(
                statement=statement,
                warehouse_id=self._warehouse_id,
                wait_timeout=self._polling.wait_timeout,
                on_wait_timeout=ExecuteStatementRequestOnWaitTimeout.CONTINUE,
            )
        except DatabricksError as exc:  # HTTP-level: unknown warehouse, no permission, ...
            raise CatalogError(
                f"statement could not be submitted to SQL warehouse {self._warehouse_id} ({exc})\n"
                f"  statement: {statement}"
            ) from exc
        polled = False

        def settled() -> StatementResponse | None:
            nonlocal response, polled
            if polled:  # the first look is at the submission's own answer
                if not response.statement_id:
                    raise _failure(statement, response, executed, "the response has no statement_id to poll")
                response = api.get_statement(response.statement_id)
            polled = True
            return None if _state(response) in (StatementState.PENDING, StatementState.RUNNING) else response

        polling = self._polling
        backoff = Backoff(
            initial_s=polling.poll_initial_s, max_s=max(polling.poll_max_s, polling.poll_initial_s)
        )
        done = poll_until(
            settled, timeout_s=polling.deadline_s, backoff=backoff, sleep=self._sleep, clock=self._clock
        )
        if done is None:
            if response.statement_id:
                api.cancel_execution(response.statement_id)
            raise _failure(statement, response, executed, f"did not finish in {polling.deadline_s:g}s")
        if _state(response) is not StatementState.SUCCEEDED:
            raise _failure(statement, response, executed, None)
        return response


def _state(response: StatementResponse) -> StatementState | None:
    return response.status.state if response.status else None


def _failure(
    statement: str, response: StatementResponse, executed: Sequence[str], why: str | None
) -> StatementFailedError:
    state = _state(response)
    error = response.status.error if response.status else None
    code = error.error_code.value if error and error.error_code else None
    message = error.message if error else None
    match = _ERROR_CLASS.match(message or "")
    error_class = match.group("cls") if match else None
    reason = (
        why or f"{state.value if state else 'no state'}: {error_class or code or 'error'}: {message or ''}"
    )
    text = f"statement failed ({reason.strip()})\n  statement: {statement}"
    if executed:
        text += f"\n  already applied ({len(executed)}): " + "; ".join(executed)
    if error_class and error_class.startswith("DELTA_ICEBERG_COMPAT_VIOLATION.DELETION_VECTORS"):
        text += "\n  fix: set 'delta.enableDeletionVectors' = 'false' (and purge existing deletion vectors)"
    if error_class == "DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES":
        text += (
            f"\n  fix: rename the column without {MAPPING_CHARS_TEXT}, or turn column mapping on first "
            f"(set '{COLUMN_MAPPING_MODE}' = 'name')"
        )
    return StatementFailedError(
        text,
        statement=statement,
        state=state.value if state else "UNKNOWN",
        error_code=code,
        sql_error_class=error_class,
        error_message=message,
        executed=executed,
    )
