"""A table the emulator cannot commit or mirror: marked failed with its cause, isolated from the rest.

One table whose write-ahead log holds a batch Delta refuses (a batch acknowledged by an older
emulator, or one that stopped fitting after a NOT NULL column was added out-of-band) must not stop
the emulator from starting or from serving every other table. Such a table is marked failed: its
streams are refused with FAILED_PRECONDITION naming the cause and the repair command, the
materialiser stops retrying it, and a ``failed.json`` marker in its WAL folder lets
``zerobus-orch emulator status`` report it from another process. The marker is removed when the
table next opens (the replay then finds the failure again, or not).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import grpc
import pyarrow as pa

from zerobus_orchestration.emulator.errors import ConformError
from zerobus_orchestration.emulator.status import RpcFailure
from zerobus_orchestration.owner_only import private_dir, write_private

MARKER_FILE: Final = "failed.json"
QUARANTINE_DIR: Final = "quarantine"
REPAIR_COMMAND: Final = "zerobus-orch emulator quarantine --table {table}"

# delta-rs texts of a write that failed on the data itself (a panic in its statistics code included).
_DATA_ERROR_MARKERS: Final = ("panicked", "overflow", "invalid data", "cast error", "cannot cast")


@dataclass(frozen=True)
class TableFailure:
    """Why ``table`` is failed. ``seq``: the WAL position that cannot be committed, when one is known."""

    table: str
    phase: str  # "open" (its WAL or Delta table cannot be opened) or "materialize"
    cause: str
    seq: int | None = None
    data_error: bool = True  # the batch itself is refused (quarantine helps); else storage or state
    since: float = field(default_factory=time.time)

    def message(self) -> str:
        fix = (
            f"repair: stop the emulator, then `{REPAIR_COMMAND.format(table=self.table)}` (same --warehouse "
            "and --config) moves the batches Delta refuses to the quarantine folder of the state directory, "
            "keeping their bytes, and unblocks the table"
            if self.data_error
            else "fix the cause (storage, permissions, the table), then restart the emulator: the replay "
            "retries it"
        )
        where = f" at WAL position {self.seq}" if self.seq is not None else ""
        return (
            f"table {self.table} is failed in the emulator ({self.phase}{where}: {self.cause}); streams to "
            f"it are refused while every other table keeps serving; {fix}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "message": self.message()}

    def rpc_failure(self) -> RpcFailure:
        # FAILED_PRECONDITION: the table needs an operator, not a retry; the SDK gives up with this text.
        return RpcFailure(grpc.StatusCode.FAILED_PRECONDITION, self.message())


def is_data_error(exc: BaseException) -> bool:
    """Whether a commit failed on the batch itself (no retry can help) rather than on storage or state."""
    if isinstance(exc, ConformError | pa.ArrowInvalid | pa.ArrowTypeError | pa.ArrowNotImplementedError):
        return True
    if isinstance(exc, OverflowError):
        return True
    from deltalake.exceptions import CommitFailedError, DeltaError, SchemaMismatchError

    if isinstance(exc, SchemaMismatchError):
        return True
    if isinstance(exc, CommitFailedError) or not isinstance(exc, DeltaError):
        return False
    text = str(exc).lower()
    return any(marker in text for marker in _DATA_ERROR_MARKERS)


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def write_marker(wal_dir: Path, failure: TableFailure) -> None:
    """Record the failure next to the table's WAL (atomically), for ``emulator status`` elsewhere."""
    with contextlib.suppress(OSError):  # the in-memory mark is what refuses streams; this is a report
        private_dir(wal_dir)
        tmp = wal_dir / f".{MARKER_FILE}.{os.getpid()}.tmp"
        write_private(tmp, json.dumps(failure.as_dict(), indent=2).encode())
        os.replace(tmp, wal_dir / MARKER_FILE)


def clear_marker(wal_dir: Path) -> None:
    with contextlib.suppress(OSError):
        (wal_dir / MARKER_FILE).unlink(missing_ok=True)


def read_marker(wal_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((wal_dir / MARKER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def quarantine_root(wal_root: Path) -> Path:
    """``<state>/quarantine`` next to ``<state>/wal``: outside the WAL root, which holds tables only."""
    return wal_root.parent / QUARANTINE_DIR


def quarantine_dest(wal_root: Path, wal_dir_name: str) -> Path:
    """``<state>/quarantine/<table>/<UTC time>/``: one folder per quarantine run."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return quarantine_root(wal_root) / wal_dir_name / stamp
