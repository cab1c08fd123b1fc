"""WAL -> Delta: commits acknowledged batches to each table's Delta table exactly once.

Each commit carries the WAL position it covers as a Delta app transaction
(``Transaction(app_id=WAL_APP_ID, version=<last seq>)``) in the same atomic commit as the data. On start
(and before every commit) the committed position is read back with ``DeltaTable.transaction_version``,
so a crash between the Delta commit and the WAL truncation replays nothing twice, and a crash before
the commit replays everything acknowledged.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pyarrow as pa
from deltalake import (
    ColumnProperties,
    CommitProperties,
    DeltaTable,
    Transaction,
    WriterProperties,
    write_deltalake,
)

from zerobus_orchestration.emulator.errors import ConformError, TableFailedError
from zerobus_orchestration.emulator.parquet_codec import SNAPPY, ZSTD, parquet_codec
from zerobus_orchestration.emulator.records import batches_from_ipc
from zerobus_orchestration.emulator.schema_check import conform
from zerobus_orchestration.emulator.table_health import (
    TableFailure,
    clear_marker,
    describe,
    is_data_error,
    write_marker,
)
from zerobus_orchestration.emulator.value_check import check_values
from zerobus_orchestration.emulator.wal import TableWal, WalEntry
from zerobus_orchestration.owner_only import open_private, private_dir, write_private
from zerobus_orchestration.retry import Backoff

log = logging.getLogger(__name__)

WAL_APP_ID = "zerobus-emulator-wal"
# Encoding Parquet is most of what materialising costs, and it shares this process (and the cores) with
# the gRPC handlers acknowledging batches (benchmarks/scaling.py, docs/performance.md). The codec is the
# service's (parquet_codec.py): Snappy, or Zstandard for tables with Iceberg reads on, at level 1: about
# Snappy's CPU per GB (1.1x) for files 3.6x smaller, where level 3 took 1.25x (benchmarks/parquet_codec.py,
# docs/adr/0003-emulator-fidelity-limits.md). No dictionary pages: building them took ~half of the
# encoding CPU (4.5 -> 2.4 s per GB) for files ~15 % larger; every reader reads either. Statistics per
# column chunk, not per page: the Delta log's file statistics (minValues, maxValues, nullCount) come
# from the chunk's and are the same; only the page index goes, and the per-page min/max it took ~15 %
# of the encoding CPU (3.2 -> 2.7 s per GB, delta-rs 1.6 writing the benchmark's rows).
COLUMN_PROPERTIES = ColumnProperties(dictionary_enabled=False, statistics_enabled="CHUNK")
WRITER_PROPERTIES = {
    SNAPPY: WriterProperties(compression="SNAPPY", default_column_properties=COLUMN_PROPERTIES),
    ZSTD: WriterProperties(
        compression="ZSTD", compression_level=1, default_column_properties=COLUMN_PROPERTIES
    ),
}
MAX_COMMIT_BYTES = 256 * 1024 * 1024
MAX_KEPT_ERRORS = 100
MAX_TRANSIENT_FAILURES = 8  # then the table is marked failed instead of retried forever
MAX_RETRY_BACKOFF_S = 60.0


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
    """One target table: its Delta location, its WAL and how far the WAL is committed.

    ``failure`` is set when a WAL record cannot be committed (the batch itself is refused) or
    committing kept failing: the table then refuses streams and is no longer retried until repaired
    (``quarantine``) or the emulator restarts (table_health.py).
    """

    full_name: str
    uri: str
    wal: TableWal
    committed: int
    # Holds the object store's secret key in plain text: keep it out of repr (logs, tracebacks).
    storage_options: dict[str, str] | None = field(default=None, repr=False)
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_delta_version: int | None = None
    failure: TableFailure | None = None
    transient_failures: int = 0  # consecutive commit failures that were not about the data
    retry_at: float = 0.0  # monotonic time before which the materialiser does not retry
    # Fault ``delay_commit`` (faults.py): WAL positions after each key wait until its monotonic time.
    commit_holds: dict[int, float] = field(default_factory=dict)
    holds_lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def open(
        cls, full_name: str, uri: str, wal_dir: Path, storage_options: dict[str, str] | None
    ) -> TableState:
        dt = load_table(uri, storage_options)
        committed = committed_position(dt)
        wal = TableWal(wal_dir, committed=committed)
        clear_marker(wal_dir)  # a failure recorded by an earlier run is found again by this run's replay
        return cls(full_name, uri, wal, committed, storage_options, last_delta_version=dt.version())

    def pending(self) -> int:
        return self.wal.durable_seq - self.committed

    def hold_commits(self, delay_s: float) -> int:
        """Commit no WAL position written from now on for ``delay_s`` (fault ``delay_commit``); returns
        the position after which the hold starts."""
        after = self.wal.written_seq  # every record written later has a greater position
        with self.holds_lock:
            until = time.monotonic() + delay_s
            self.commit_holds[after] = max(until, self.commit_holds.get(after, until))
        return after

    def _not_held(self, entries: list[WalEntry]) -> list[WalEntry]:
        """``entries`` up to the first position a live ``delay_commit`` hold keeps from Delta."""
        with self.holds_lock:
            now = time.monotonic()
            for after in [a for a, until in self.commit_holds.items() if until <= now]:
                del self.commit_holds[after]
            cut = min(self.commit_holds, default=None)
        return entries if cut is None else [e for e in entries if e.seq <= cut]

    def materialize(self, mirror: MirrorHook | None = None) -> int | None:
        """Commit every durable WAL record not yet in Delta; the new Delta version, or None if idle.

        A record Delta refuses marks the table failed (``TableFailedError``) after every record before
        it is committed; any other error (storage, a conflict) is raised as is, for a later retry.
        """
        with self.lock:
            return self._materialize_locked(mirror)

    def _materialize_locked(self, mirror: MirrorHook | None) -> int | None:
        if self.failure is not None:
            raise TableFailedError(self.failure)
        version: int | None = None
        while True:
            if self.wal.durable_seq <= self.committed:
                # Nothing durable past the watermark, so nothing to commit: leave the Delta log unread.
                # Reading it every period (5 times a second at time_to_table_s 0.2) kept an idle daemon
                # with one table at 4% of a core; 1% without. The watermark never moves back (max below).
                return version
            dt = load_table(self.uri, self.storage_options)
            self.committed = max(self.committed, committed_position(dt))
            entries = self._not_held(self.wal.read_after(self.committed, MAX_COMMIT_BYTES))
            if not entries:
                return version
            target = arrow_schema(dt)
            good, refused = self._prepare(entries, target)
            if good:
                try:
                    version = self._commit(dt, good, target, mirror)
                except Exception as exc:
                    if not is_data_error(exc):
                        raise
                    # One commit covers many records: find the one delta-rs refuses.
                    version = self._commit_singly(good, target, mirror, exc) or version
            if refused is not None:
                raise self._fail(*refused)

    def _prepare(
        self, entries: list[WalEntry], target: pa.Schema
    ) -> tuple[list[tuple[WalEntry, list[pa.RecordBatch]]], tuple[int, BaseException] | None]:
        """The records before the first one that does not fit ``target``, and that one with its error."""
        good: list[tuple[WalEntry, list[pa.RecordBatch]]] = []
        for entry in entries:
            try:
                batches = [
                    conform(self.full_name, batch, target, fill_missing=True)
                    for batch in batches_from_ipc(entry.payload)
                ]
                for batch in batches:
                    check_values(self.full_name, batch)
            except (ConformError, pa.ArrowException, ValueError) as exc:
                return good, (entry.seq, exc)
            good.append((entry, batches))
        return good, None

    def _commit(
        self,
        dt: DeltaTable,
        records: list[tuple[WalEntry, list[pa.RecordBatch]]],
        target: pa.Schema,
        mirror: MirrorHook | None,
    ) -> int:
        data = pa.Table.from_batches([b for _, batches in records for b in batches], schema=target)
        last = records[-1][0].seq
        write_deltalake(
            dt,
            data,
            mode="append",
            writer_properties=WRITER_PROPERTIES[parquet_codec(dt.metadata().configuration)],
            commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id=WAL_APP_ID, version=last)]
            ),
        )
        version = load_table(self.uri, self.storage_options).version()
        self.committed = last
        self.last_delta_version = version
        self.wal.release_through(last)
        if mirror is not None:
            mirror.notify(self.full_name, version)
        return version

    def _commit_singly(
        self,
        records: list[tuple[WalEntry, list[pa.RecordBatch]]],
        target: pa.Schema,
        mirror: MirrorHook | None,
        first_error: BaseException,
    ) -> int | None:
        if len(records) == 1:
            raise self._fail(records[0][0].seq, first_error)
        version: int | None = None
        for record in records:
            try:
                version = self._commit(load_table(self.uri, self.storage_options), [record], target, mirror)
            except Exception as exc:
                if not is_data_error(exc):
                    raise
                raise self._fail(record[0].seq, exc) from exc
        return version

    def _fail(self, seq: int, exc: BaseException) -> TableFailedError:
        self.failure = TableFailure(self.full_name, "materialize", describe(exc), seq=seq)
        write_marker(self.wal.directory, self.failure)
        log.error("%s", self.failure.message())
        return TableFailedError(self.failure)

    def give_up(self, exc: BaseException) -> None:
        """Mark the table failed after repeated non-data failures: no endless retry loop."""
        with self.lock:
            cause = f"committing failed {self.transient_failures} times in a row, last: {describe(exc)}"
            head = self.committed + 1 if self.pending() > 0 else None
            self.failure = TableFailure(self.full_name, "materialize", cause, seq=head, data_error=False)
            write_marker(self.wal.directory, self.failure)
        log.error("%s", self.failure.message())

    def quarantine(self, dest: Path, mirror: MirrorHook | None = None) -> list[dict[str, object]]:
        """Commit what Delta takes and move each record it refuses to ``dest`` (bytes kept); unblock.

        A failure that is not about the data (storage, permissions) is raised; nothing more is moved.
        Each refused record is written to ``dest`` (fsync'd) before it is cut from the WAL, so a crash
        in between leaves it in both places, never in neither.
        """
        moved: list[dict[str, object]] = []
        with self.lock:  # the materialiser thread waits: it must not re-fail a record being moved
            self.failure = None
            while True:
                try:
                    self._materialize_locked(mirror)
                    break
                except TableFailedError as exc:
                    failure = exc.failure
                    if failure.seq is None or not failure.data_error:
                        raise
                    moved.append(_quarantine_record(self.wal, failure, dest))
                    self.failure = None
        clear_marker(self.wal.directory)
        return moved


def _quarantine_record(wal: TableWal, failure: TableFailure, dest: Path) -> dict[str, object]:
    assert failure.seq is not None
    entry = wal.read_after(failure.seq - 1, 1)[0]
    if entry.seq != failure.seq:
        raise KeyError(f"WAL {wal.directory} holds no record at position {failure.seq}")
    private_dir(dest)  # acknowledged rows Delta refuses: as private as the WAL they come from
    path = dest / f"{entry.seq:020d}.arrows"  # an Arrow IPC stream: pyarrow.ipc.open_stream reads it
    rows = sum(b.num_rows for b in batches_from_ipc(entry.payload))
    info: dict[str, object] = {"seq": entry.seq, "file": path.name, "rows": rows, "cause": failure.cause}
    with os.fdopen(open_private(path, os.O_WRONLY | os.O_TRUNC), "wb") as fh:
        fh.write(entry.payload)
        fh.flush()
        os.fsync(fh.fileno())
    reasons = dest / f"{entry.seq:020d}.json"
    write_private(reasons, json.dumps({"table": failure.table, **info}, indent=2).encode())
    wal.excise(entry.seq)
    log.warning(
        "quarantined WAL position %d of %s (%d rows) to %s: %s",
        entry.seq,
        failure.table,
        rows,
        path,
        failure.cause,
    )
    return info


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

    def run_once(self, *, final: bool = False) -> None:
        """Commit every table due (``final``, at stop: ignore the retry backoff); skip failed ones."""
        now = time.monotonic()
        for state in self._tables():
            if state.failure is not None or (not final and state.retry_at > now):
                continue
            try:
                state.materialize(self._mirror)
            except TableFailedError as exc:  # the record Delta refuses: marked failed, never retried
                self.errors.append(str(exc))
            except Exception as exc:  # storage or state: keep the WAL and retry with backoff, a few times
                self._retry_later(state, exc)
            else:
                state.transient_failures = 0
                state.retry_at = 0.0

    def _retry_later(self, state: TableState, exc: BaseException) -> None:
        state.transient_failures += 1
        if state.transient_failures >= MAX_TRANSIENT_FAILURES:
            state.give_up(exc)
            assert state.failure is not None
            self.errors.append(state.failure.message())
            return
        # Doubling from one period (the emulated time-to-table), capped.
        policy = Backoff(initial_s=min(self.period_s, MAX_RETRY_BACKOFF_S), max_s=MAX_RETRY_BACKOFF_S)
        backoff = policy.delay(state.transient_failures - 1)
        state.retry_at = time.monotonic() + backoff
        message = (
            f"materialising {state.full_name} failed (WAL kept, attempt {state.transient_failures} of "
            f"{MAX_TRANSIENT_FAILURES}, next in {backoff:.1f} s): {exc}"
        )
        log.error(message)
        self.errors.append(message)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.run_once()
