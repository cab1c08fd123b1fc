"""The package's exception hierarchy and ``ErrorClass``: every error raised on purpose derives from
``ZerobusOrchestrationError`` and says whether a retry can help (``exc.retriable``).

One module per layer: this one holds the base, the value-layer errors (config, types, write boundary,
catalog, read-back) and the transport errors' classes; the sink's errors are in ``sink/errors.py``, the
emulator's in ``emulator/errors.py``. Mapping a *foreign* failure (gRPC codes, the official SDK's
exceptions and message texts) to an ``ErrorClass`` is the transport's job: ``transport/classify.py``.

The classes drive behaviour, not messages: TRANSIENT is retried in place without re-advancing
anything; POISON rebuilds the stream and re-submits what was not acknowledged; CONCURRENCY_REJECT
backs off and keeps sending on existing streams; SCHEMA_REJECTED and FATAL stop and surface.
``retriable`` is true for the first three (the same call can succeed later, on this or a fresh
stream) and false for the last two (the input, the table or the credentials must change first).
Facts a caller branches on (table, column, positions) are fields, not only message text.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from zerobus_orchestration.ranges import OffsetRange

E = TypeVar("E", bound=BaseException)


class ErrorClass(StrEnum):
    TRANSIENT = "transient"
    POISON = "poison"
    CONCURRENCY_REJECT = "concurrency_reject"
    SCHEMA_REJECTED = "schema_rejected"
    FATAL = "fatal"

    @property
    def retriable(self) -> bool:
        """Whether the same call can succeed later without anything being changed first."""
        return self in _RETRIABLE


_RETRIABLE = frozenset({ErrorClass.TRANSIENT, ErrorClass.POISON, ErrorClass.CONCURRENCY_REJECT})


class ZerobusOrchestrationError(Exception):
    """Base of every error this package raises on purpose.

    ``error_class`` (a class default, set per instance where it depends on the cause) says what the
    sink does about it; ``retriable`` is derived from it. A POISON error is retriable because a retry
    runs on a rebuilt stream; a batch the service rejects every time is ``PoisonedBatchError``, which is
    FATAL.
    """

    error_class: ErrorClass = ErrorClass.FATAL

    @property
    def retriable(self) -> bool:
        """Whether retrying the failed call (after a backoff) can succeed with nothing changed."""
        return self.error_class.retriable


def restated(exc: E, message: str) -> E:
    """``exc`` with ``message`` instead of its own: the same type and fields (``table``, ``column``,
    ...), built without calling its constructor, so any error can carry where it happened and what was
    delivered before it. The original is the new one's ``__cause__`` once raised ``from exc``."""
    again = type(exc).__new__(type(exc))
    again.__dict__.update(exc.__dict__)
    again.args = (message,)
    if isinstance(exc, OSError) and isinstance(again, OSError) and exc.errno is not None:
        # Its errno is no ``__dict__`` entry, and ``str()`` of an OSError with one is "[Errno n] <strerror>"
        # (plus the file name, which ``message`` already holds when it starts with ``str(exc)``).
        prefix = f"[Errno {exc.errno}] "
        again.errno = exc.errno
        again.strerror = message.removeprefix(prefix)
    return again


class ConfigError(ZerobusOrchestrationError, ValueError):
    """Invalid configuration; the message names the offending key."""


class TableNameError(ConfigError):
    """A table name Zerobus or Unity Catalog cannot hold; the message names the part and the rule.

    ``name``: the name as given (None where it was not a string); ``part``: which part breaks a rule
    (``catalog``, ``schema`` or ``table``), None when the name as a whole does.
    """

    def __init__(self, message: str, *, name: str | None = None, part: str | None = None) -> None:
        super().__init__(message)
        self.name = name
        self.part = part


class ResumeInputError(ZerobusOrchestrationError, ValueError):
    """The input cannot be positioned (declared offset column missing, not integer, null, negative).

    ``table`` and ``column`` (the declared offset column) where the raise site knows them.
    """

    def __init__(self, message: str, *, table: str | None = None, column: str | None = None) -> None:
        super().__init__(message)
        self.table = table
        self.column = column


class ResumeMismatchError(ZerobusOrchestrationError, ValueError):
    """A resume found rows at delivered positions that are not the rows delivered there.

    ``table``, ``source``, ``partition``: the write; ``span``: the first differing delivered range.
    """

    def __init__(
        self, message: str, *, table: str | None, source: str | None, partition: str, span: OffsetRange
    ) -> None:
        super().__init__(message)
        self.table = table
        self.source = source
        self.partition = partition
        self.span = span


class RerunRefusedError(ZerobusOrchestrationError, ValueError):
    """A re-run of a logical partition with other content than the run the table holds, refused before
    anything was sent (primary raw keeps its record unless told to replace it); the message names the
    choices. ``table``, ``source``, ``partition`` (the logical partition), ``existing`` (the run's tag).
    """

    def __init__(
        self, message: str, *, table: str, source: str, partition: str, existing: str | None
    ) -> None:
        super().__init__(message)
        self.table = table
        self.source = source
        self.partition = partition
        self.existing = existing


class RunSupersededError(ZerobusOrchestrationError):
    """A ``replace`` run found a newer run of its logical partition in the table: the newer one's rows
    are the partition's. Retrying cannot change the order (the table assigned it), so not retriable.

    ``table``, ``partition`` (the logical partition), ``run`` (this run's ``_twg_source`` tag),
    ``winner`` (the newer run's tag), ``deleted_own`` (this run's rows were removed: by the newer run,
    or by this run cleaning up what landed after that), ``superseded`` (older runs this run deleted),
    ``birth_version`` (the Delta version this run's rows became visible at, where it got that far).
    """

    def __init__(
        self,
        message: str,
        *,
        table: str,
        partition: str,
        run: str,
        winner: str,
        deleted_own: bool,
        superseded: Sequence[str] = (),
        birth_version: int | None = None,
    ) -> None:
        super().__init__(message)
        self.table = table
        self.partition = partition
        self.run = run
        self.winner = winner
        self.deleted_own = deleted_own
        self.superseded = tuple(superseded)
        self.birth_version = birth_version


class UnsupportedType(ZerobusOrchestrationError, TypeError):
    """An Arrow type Delta cannot hold; the message names the type and what to cast it to."""


class WriteBoundaryError(ZerobusOrchestrationError, TypeError):
    """An incoming column does not fit the declared target column; nothing was sent.

    The message names table, column, incoming and declared type, and the fix. ``column`` and ``kind``:
    the first problem; ``columns``: every column with a problem, in order (``(column,)`` if not given).
    """

    error_class = ErrorClass.SCHEMA_REJECTED

    def __init__(
        self, message: str, *, table: str, column: str, kind: str, columns: Sequence[str] | None = None
    ) -> None:
        super().__init__(message)
        self.table = table
        self.column = column
        self.kind = kind
        self.columns = tuple(columns) if columns is not None else (column,)


class SinkClosedError(ZerobusOrchestrationError, RuntimeError):
    """A push after ``close()``."""


class TransportError(ZerobusOrchestrationError):
    """A failure talking to Zerobus (or the emulator, or the in-memory fake)."""

    def __init__(self, message: str, *, error_class: ErrorClass, code: str | None = None) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.code = code


class TransientError(TransportError):
    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message, error_class=ErrorClass.TRANSIENT, code=code)


class StreamPoisonedError(TransportError):
    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message, error_class=ErrorClass.POISON, code=code)


class ConcurrencyRejectedError(TransportError):
    def __init__(self, message: str, *, code: str | None = "RESOURCE_EXHAUSTED") -> None:
        super().__init__(message, error_class=ErrorClass.CONCURRENCY_REJECT, code=code)


class SchemaRejectedError(TransportError):
    """The service (or our own pre-check) refused a batch's schema or values.

    ``causes``: the service's cause tokens (``FIELD_NOT_IN_TABLE``...); ``table`` and ``column`` where
    known (a rejection parsed from a foreign error carries neither).
    """

    def __init__(
        self,
        message: str,
        *,
        causes: Sequence[str] = (),
        code: str | None = None,
        table: str | None = None,
        column: str | None = None,
    ) -> None:
        super().__init__(message, error_class=ErrorClass.SCHEMA_REJECTED, code=code)
        self.causes = tuple(causes)
        self.table = table
        self.column = column


class FatalTransportError(TransportError):
    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message, error_class=ErrorClass.FATAL, code=code)


class NeedsOperatorError(FatalTransportError):
    """No retry can help until someone acts: the service refused the client credentials, or refuses
    the table, or the local emulator daemon exited and cannot be replaced. Orchestrators fail the task
    for good on it (Airflow ``AirflowFailException``, Dagster ``Failure(allow_retries=False)``);
    ``needing_operator`` finds one behind a wrapping error.
    """


class CredentialsRefusedError(NeedsOperatorError):
    """The token endpoint refused the client credentials (HTTP 4xx, e.g. OAuth ``invalid_client``).

    Not retriable: the same id and secret are refused again until the config changes. ``client_id``
    and ``token_url`` name what was refused; the secret is never part of the error.
    """

    def __init__(self, message: str, *, client_id: str | None = None, token_url: str | None = None) -> None:
        super().__init__(message, code="UNAUTHENTICATED")
        self.client_id = client_id
        self.token_url = token_url


class TableUnavailableError(NeedsOperatorError):
    """The service refuses every stream to the table until someone repairs it (gRPC FAILED_PRECONDITION,
    "the client should not retry until the system state has been explicitly fixed"): the emulator's
    failed table (a batch Delta refuses; docs/runbook.md#emulator-a-table-is-failed). Not retriable; the
    message is the service's reason and fix. ``table`` where the raise site knows it.
    """

    def __init__(self, message: str, *, table: str | None = None) -> None:
        super().__init__(message, code="FAILED_PRECONDITION")
        self.table = table


class EmulatorExitedError(NeedsOperatorError):
    """The local emulator daemon this process wrote to exited, and its successor exited while starting:
    the cause (another emulator holding the warehouse, a fixed port taken, a damaged write-ahead log) is
    in the daemons' log and stays until someone acts. ``pid`` (the daemon that exited) and ``log``
    name them. A successor that was merely slow to start is a ``TransientError`` instead.
    """

    def __init__(self, message: str, *, pid: int | None = None, log: str | None = None) -> None:
        super().__init__(message, code="UNAVAILABLE")
        self.pid = pid
        self.log = log


def needing_operator(exc: BaseException) -> NeedsOperatorError | None:
    """The ``NeedsOperatorError`` that ``exc`` is or was caused by (its ``__cause__`` chain), else None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, NeedsOperatorError):
            return current
        seen.add(id(current))
        current = current.__cause__
    return None


class CatalogError(ZerobusOrchestrationError):
    """The catalog could not describe or reconcile a table."""


class PlanRefusedError(CatalogError):
    """A reconcile plan holds ``Refuse`` steps; the message lists each with table and column.

    ``reasons``: one text per refusal; ``table``: the table reconciled; ``columns``: the refused columns
    (a refusal of the whole table has none).
    """

    error_class = ErrorClass.SCHEMA_REJECTED

    def __init__(
        self,
        message: str,
        reasons: Sequence[str] = (),
        *,
        table: str | None = None,
        columns: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.reasons = tuple(reasons)
        self.table = table
        self.columns = tuple(columns)


class PreconditionsUnmetError(CatalogError):
    """A primary-raw table misses preconditions; ``unmet`` names every one, ``table`` the table."""

    def __init__(self, message: str, unmet: Sequence[str] = (), *, table: str | None = None) -> None:
        super().__init__(message)
        self.unmet = tuple(unmet)
        self.table = table


class NotSupportedError(CatalogError):
    """The backend cannot do this at all (e.g. write credentials for a managed UC table)."""


class StatementFailedError(CatalogError):
    """A Unity Catalog DDL statement ended FAILED/CANCELED/CLOSED, or did not finish in time."""

    def __init__(
        self,
        message: str,
        *,
        statement: str,
        state: str,
        error_code: str | None,
        sql_error_class: str | None,
        error_message: str | None,
        executed: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.statement = statement
        self.state = state
        self.error_code = error_code
        self.sql_error_class = sql_error_class  # e.g. DELTA_ICEBERG_COMPAT_VIOLATION.DELETION_VECTORS_...
        self.error_message = error_message
        self.executed = tuple(executed)


class ReadbackError(ZerobusOrchestrationError):
    """Read-back could not verify what coverage says was delivered; ``table`` names the table."""

    def __init__(self, message: str, *, table: str | None = None) -> None:
        super().__init__(message)
        self.table = table


class ReadbackTimeoutError(ReadbackError):
    """Iceberg metadata did not catch up before the deadline (retriable: it may catch up later).

    ``delta_version``: the Delta version read-back waited for, where one was known.
    """

    error_class = ErrorClass.TRANSIENT

    def __init__(self, message: str, *, table: str | None = None, delta_version: int | None = None) -> None:
        super().__init__(message, table=table)
        self.delta_version = delta_version


class NothingToVerifyError(ReadbackError):
    """Read-back found no delivered coverage to verify (nothing written yet for that source)."""
