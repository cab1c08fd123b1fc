"""The emulator's errors, all deriving from the package base ``ZerobusOrchestrationError``.

The emulator is a leaf: it imports only value modules of the core (``zerobus_orchestration.errors``
here). Each error keeps the standard-library base its callers caught before (``RuntimeError`` for the
write-ahead log, ``ValueError`` for a batch that does not conform) so ``except RuntimeError`` /
``except ValueError`` keep working. None is retriable as such: the server answers the client with a
gRPC status, and the *client's* classifier decides what the sink does about that status.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zerobus_orchestration.errors import ZerobusOrchestrationError

if TYPE_CHECKING:
    from zerobus_orchestration.emulator.schema_check import SchemaProblem
    from zerobus_orchestration.emulator.table_health import TableFailure


class EmulatorError(ZerobusOrchestrationError):
    """The emulator could not start or a request to it was invalid."""


class EmulatorDaemonError(ZerobusOrchestrationError):
    """The shared emulator could not be started or reached; the message names its log file.

    ``exited``: the daemon started for it exited while starting (its log says why: another emulator
    holds the warehouse, a fixed port is taken, ...), as opposed to not serving within the start timeout.
    """

    def __init__(self, message: str, *, exited: bool = False) -> None:
        super().__init__(message)
        self.exited = exited


class RemoteEmulatorError(ZerobusOrchestrationError):
    """The shared emulator refused or failed a request."""


class DaemonExitedError(RemoteEmulatorError):
    """The shared emulator daemon exited under its clients and no successor could be started.

    ``pid`` and ``log`` name the daemon that exited and the log its successors write to;
    ``successor_exited``: the successor exited while starting (the cause persists until someone acts).
    """

    def __init__(self, message: str, *, pid: int, log: str | None, successor_exited: bool) -> None:
        super().__init__(message)
        self.pid = pid
        self.log = log
        self.successor_exited = successor_exited


class MirrorError(ZerobusOrchestrationError):
    """A Delta table the mirror cannot convert; the message names the table and the reason."""


class WalCorruptError(ZerobusOrchestrationError, RuntimeError):
    """A sealed WAL segment failed its checksum: acknowledged data would be lost, so refuse to start."""


class WalUnusableError(ZerobusOrchestrationError, RuntimeError):
    """The log can no longer make records durable (failed fsync, or a partial write it could not cut).

    Permanent for this process: only a restart, which re-reads and replays the log, clears it.
    """


class ConformError(ZerobusOrchestrationError, ValueError):
    """A batch whose values do not fit the table (overflow, truncation, null in a required column).

    ``table``: the target; ``problem``: the column, the cause and the detail.
    """

    def __init__(self, table: str, problem: SchemaProblem) -> None:
        super().__init__(problem.render(table))
        self.table = table
        self.problem = problem

    @property
    def column(self) -> str:
        """The column whose values do not fit."""
        return self.problem.column


class RecordTooLarge(ZerobusOrchestrationError, ValueError):
    """A row-path request above the service's 10 MiB message limit; the message names table and fix."""


class TableFailedError(ZerobusOrchestrationError):
    """The table is marked failed; the message names the cause and the repair command.

    ``failure``: the table, the phase, the cause and the WAL position; ``table`` is ``failure.table``.
    """

    def __init__(self, failure: TableFailure) -> None:
        super().__init__(failure.message())
        self.failure = failure
        self.table = failure.table


class TokenRequestError(ZerobusOrchestrationError):
    """The token endpoint refuses a request; ``status`` and ``body`` are the OAuth error answer."""

    def __init__(self, status: int, error: str, description: str) -> None:
        super().__init__(description)
        self.status = status
        self.body = {"error": error, "error_description": description}


class AuthFailure(ZerobusOrchestrationError):
    """Why a bearer token may not write a table; ``code`` is the gRPC status name to answer with."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
