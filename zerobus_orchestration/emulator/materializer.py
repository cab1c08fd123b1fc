"""WAL -> Delta: commits acknowledged batches to each table's Delta table exactly once.

Each commit carries the WAL position it covers as a Delta app transaction
(``Transaction(app_id=WAL_APP_ID, version=<last seq>)``) in the same atomic commit as the data. On start
(and before every commit) the committed position is read back with ``DeltaTable.transaction_version``,
so a crash between the Delta commit and the WAL truncation replays nothing twice, and a crash before
the commit replays everything acknowledged.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, WriterProperties, write_deltalake

from zerobus_orchestration.emulator.records import batches_from_ipc
from zerobus_orchestration.emulator.schema_check import conform
from zerobus_orchestration.emulator.wal import TableWal

log = logging.getLogger(__name__)

WAL_APP_ID = "zerobus-emulator-wal"
MAX_COMMIT_BYTES = 256 * 1024 * 1024
MAX_KEPT_ERRORS = 100


class MirrorHook(Protocol):
    """What the materialiser needs of the Iceberg mirror (emulator/iceberg_mirror.py)."""

    def watch(self, full_name: str, delta_uri: str) -> None: ...

    def notify(self, full_name: str, delta_version: int) -> None: ...


def table_exists(uri: str, storage_options: dict[str, str] | None) -> bool:
    return bool(DeltaTable.is_deltatable(uri, storage_options=storage_options))


def load_table(uri: str, storage_options: dict[str, str] | None) -> DeltaTable:
    return DeltaTable(uri, storage_options=storage_options)


def arrow_schema(dt: DeltaTable) -> pa.Schema:
    return pa.schema(dt.schema().to_arrow())


def committed_position(dt: DeltaTable) -> int:
    version = dt.transaction_version(WAL_APP_ID)
    return int(version) if version is not None else 0


@dataclass
class TableState:
    """One target table: its Delta location, its WAL and how far the WAL is committed."""

    full_name: str
    uri: str
    wal: TableWal
    committed: int
    # Holds the object store's secret key in plain text: keep it out of repr (logs, tracebacks).
    storage_options: dict[str, str] | None = field(default=None, repr=False)
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_delta_version: int | None = None

    @classmethod
    def open(
        cls, full_name: str, uri: str, wal_dir: Path, storage_options: dict[str, str] | None
    ) -> TableState:
        dt = load_table(uri, storage_options)
        committed = committed_position(dt)
        wal = TableWal(wal_dir, committed=committed)
        return cls(full_name, uri, wal, committed, storage_options, last_delta_version=dt.version())

    def pending(self) -> int:
        return self.wal.durable_seq - self.committed

    def materialize(self, mirror: MirrorHook | None = None) -> int | None:
        """Commit every durable WAL record not yet in Delta; the new Delta version, or None if idle."""
        with self.lock:
            version: int | None = None
            while True:
                dt = load_table(self.uri, self.storage_options)
                self.committed = max(self.committed, committed_position(dt))
                entries = self.wal.read_after(self.committed, MAX_COMMIT_BYTES)
                if not entries:
                    break
                target = arrow_schema(dt)
                batches = [
                    conform(self.full_name, batch, target, fill_missing=True)
                    for entry in entries
                    for batch in batches_from_ipc(entry.payload)
                ]
                data = pa.Table.from_batches(batches, schema=target)
                last = entries[-1].seq
                write_deltalake(
                    dt,
                    data,
                    mode="append",
                    writer_properties=WriterProperties(compression="ZSTD"),
                    commit_properties=CommitProperties(
                        app_transactions=[Transaction(app_id=WAL_APP_ID, version=last)]
                    ),
                )
                dt = load_table(self.uri, self.storage_options)
                version = dt.version()
                self.committed = last
                self.last_delta_version = version
                self.wal.release_through(last)
                if mirror is not None:
                    mirror.notify(self.full_name, version)
            return version


class Materializer:
    """Background thread committing every table's WAL each ``period_s`` (the emulated time-to-table)."""

    def __init__(
        self, period_s: float, tables: Callable[[], list[TableState]], mirror: MirrorHook | None
    ) -> None:
        self.period_s = period_s
        self._tables = tables
        self._mirror = mirror
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="zerobus-emulator-materializer", daemon=True)
        # The most recent failures only: a table failing every period must not grow memory forever.
        self.errors: deque[str] = deque(maxlen=MAX_KEPT_ERRORS)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def run_once(self) -> None:
        for state in self._tables():
            try:
                state.materialize(self._mirror)
            except Exception as exc:  # keep the WAL and retry next period: acknowledged data is never dropped
                message = f"materialising {state.full_name} failed (WAL kept, retrying): {exc}"
                log.error(message)
                self.errors.append(message)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.run_once()
