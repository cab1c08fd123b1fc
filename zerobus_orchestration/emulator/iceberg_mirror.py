"""Emulated UniForm: mirror each Delta commit into an Iceberg table, asynchronously and with a lag.

Real UniForm generates Iceberg metadata for a Delta table some time after each commit, next to the
Delta log, without copying data. This mirror does the same locally with pyiceberg's ``SqlCatalog`` at
``<warehouse>/_zerobus/iceberg.sqlite``: one pyiceberg catalog per Unity Catalog catalog (the catalog
name is the SqlCatalog name), namespace = schema, table = table, and the Iceberg ``metadata/`` folder
inside the Delta table folder. Iceberg reads the Delta Parquet files in place through a name mapping.

Each converted snapshot records ``delta-version`` and ``delta-timestamp`` in its summary: the local
equivalent of Unity Catalog's ``converted_delta_version`` that read-back waits for.

This module schedules; the conversion of one Delta version into one Iceberg snapshot (and why its
data files are built by hand) is ``uniform.py``'s.

One background thread per mirror handles every watched table. A failed conversion is logged, counted
and retried with backoff; it never ends the thread. A conversion that fails on the data itself (a
timestamp beyond year 9999 in a Parquet file's statistics, a partitioned table), or keeps failing,
marks that table failed (``failures``): it is retried only once Delta moves past the failed version,
and the other tables keep being mirrored.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote, urlparse

from deltalake import DeltaTable
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NoSuchTableError,
)
from pyiceberg.table import Table as IcebergTable

from zerobus_orchestration.emulator.uniform import (
    convert_version,
    iceberg_io_properties,
    is_data_error,
    snapshot_delta_version,
)
from zerobus_orchestration.locations import is_local
from zerobus_orchestration.owner_only import private_file
from zerobus_orchestration.retry import Backoff
from zerobus_orchestration.tables import TableName, table_uri, zerobus_dir

log = logging.getLogger(__name__)

ICEBERG_DB_NAME: Final = "iceberg.sqlite"

_COMMIT_ATTEMPTS: Final = 5
# Between commit-conflict retries (a concurrent writer just committed): short, 50 ms up to 200 ms.
_CONFLICT_BACKOFF: Final = Backoff(initial_s=0.05, max_s=0.2)
_ERROR_BACKOFF: Final = Backoff(initial_s=0.5, max_s=30.0)  # between conversions failing on storage
_IDLE_WAKEUP_S: Final = 1.0
_MAX_CONSECUTIVE_ERRORS: Final = 8  # then the table is marked failed instead of retried forever


def _absolute(uri: str) -> str:
    """Local relative paths made absolute: the Iceberg metadata records locations for other processes."""
    return os.path.abspath(uri) if urlparse(uri).scheme == "" else uri


def _local_path(uri: str) -> Path:
    parsed = urlparse(uri)
    return Path(unquote(parsed.path)) if parsed.scheme == "file" else Path(uri)


def default_catalog_db(warehouse: str) -> Path:
    """Where the SqlCatalog file lives: in the warehouse when it is a folder, else in the temp dir.

    SQLite needs a local file; for an object-store warehouse the file is kept per warehouse URI in the
    system temp directory (pass ``catalog_db`` to choose another place).
    """
    if is_local(warehouse):
        return _local_path(zerobus_dir(warehouse)) / ICEBERG_DB_NAME
    digest = hashlib.sha256(warehouse.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / "zerobus-iceberg" / digest / ICEBERG_DB_NAME


@dataclass
class _TableState:
    """Per-table mirror state. ``pending`` holds (due monotonic time, Delta version) notifications."""

    name: TableName
    delta_uri: str
    pending: list[tuple[float, int]] = field(default_factory=list)
    converted: int = -1
    highest_seen: int = -1
    next_poll: float = 0.0
    error_count: int = 0
    consecutive_errors: int = 0
    retry_at: float | None = None
    last_error: str | None = None
    failed: str | None = None  # why the mirror gave up on ``failed_version`` (cleared by a success)
    failed_version: int = -1
    lock: threading.Lock = field(default_factory=threading.Lock)


class IcebergMirror:
    """Mirrors watched Delta tables into Iceberg ``lag_s`` seconds after each commit.

    ``notify`` is the fast path (the emulator's materialiser calls it after each Delta commit); with
    ``poll_interval_s`` set, watched tables are also polled so commits made by anything else (catalog
    DDL, a test writing with deltalake) are mirrored too.
    """

    def __init__(
        self,
        warehouse: str,
        lag_s: float = 2.0,
        storage_options: dict[str, str] | None = None,
        *,
        poll_interval_s: float | None = 1.0,
        catalog_db: str | Path | None = None,
    ) -> None:
        if lag_s < 0:
            raise ValueError(f"lag_s must be >= 0, got {lag_s}")
        if poll_interval_s is not None and poll_interval_s <= 0:
            raise ValueError(f"poll_interval_s must be > 0 or None, got {poll_interval_s}")
        self.warehouse = _absolute(warehouse)
        self.lag_s = lag_s
        self.poll_interval_s = poll_interval_s
        self._storage_options = dict(storage_options or {})
        self._io_properties = iceberg_io_properties(self._storage_options)
        self._catalog_db = (
            Path(catalog_db).absolute() if catalog_db is not None else default_catalog_db(self.warehouse)
        )
        self._tables: dict[TableName, _TableState] = {}
        self._catalogs: dict[str, SqlCatalog] = {}
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="zerobus-iceberg-mirror", daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float | None = 30.0) -> None:
        """Stop the mirror thread and wait for it (an in-flight conversion finishes first)."""
        with self._wakeup:
            self._stop.set()
            self._wakeup.notify_all()
            thread = self._thread
            self._thread = None
        if thread is not None:
            thread.join(timeout_s)

    def __enter__(self) -> IcebergMirror:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- public API

    def watch(self, full_name: str, delta_uri: str | None = None) -> None:
        """Mirror ``full_name``, whose Delta table is at ``delta_uri`` (default: the warehouse layout)."""
        self._state(full_name, delta_uri)

    def notify(self, full_name: str, delta_version: int) -> None:
        """Delta committed ``delta_version``: convert it ``lag_s`` seconds from now."""
        state = self._state(full_name)
        with self._wakeup:
            state.pending.append((time.monotonic() + self.lag_s, delta_version))
            state.highest_seen = max(state.highest_seen, delta_version)
            self._wakeup.notify_all()

    def sync_now(self, full_name: str) -> int:
        """Convert the latest Delta version now, skipping the lag. Returns the Delta version reflected."""
        state = self._state(full_name)
        try:
            version = self._convert(state, None)
        except Exception as exc:
            self._record_error(state, exc, traceback=False)  # the caller gets the exception itself
            raise
        with self._lock:
            state.pending = [(due, v) for due, v in state.pending if v > version]
        return version

    def converted_version(self, full_name: str) -> int:
        """The Delta version the Iceberg table reflects; -1 when nothing was converted yet."""
        return self._state(full_name).converted

    def last_error(self, full_name: str) -> str | None:
        """The last conversion failure of ``full_name`` (cleared by the next success)."""
        return self._state(full_name).last_error

    def error_count(self, full_name: str) -> int:
        """How many conversions of ``full_name`` failed since the mirror started."""
        return self._state(full_name).error_count

    def failures(self) -> dict[str, dict[str, Any]]:
        """Tables the mirror gave up on, with the cause and the Delta version it could not convert."""
        with self._lock:
            return {
                name.full_name: {
                    "cause": state.failed,
                    "delta_version": state.failed_version,
                    "converted_version": state.converted,
                    "message": (
                        f"the Iceberg mirror of {name.full_name} is failed at Delta version "
                        f"{state.failed_version} ({state.failed}); it is retried once Delta moves past it, "
                        "every other table is still mirrored"
                    ),
                }
                for name, state in self._tables.items()
                if state.failed is not None
            }

    def watched(self) -> list[str]:
        with self._lock:
            return [name.full_name for name in self._tables]

    def iceberg_catalog(self, catalog: str) -> SqlCatalog:
        """The pyiceberg catalog holding the mirrors of Unity Catalog catalog ``catalog``."""
        with self._lock:
            existing = self._catalogs.get(catalog)
            if existing is not None:
                return existing
            private_file(self._catalog_db)  # 0600 before SQLite opens it: its side files take its mode
            created = SqlCatalog(catalog, uri=f"sqlite:///{self._catalog_db}", **self._io_properties)
            self._catalogs[catalog] = created
            return created

    def catalog_names(self) -> list[str]:
        """UC catalogs with at least one mirrored table (read from the SqlCatalog file)."""
        if not self._catalog_db.exists():
            return []
        import sqlite3

        with sqlite3.connect(self._catalog_db) as conn:
            try:
                rows = conn.execute("SELECT DISTINCT catalog_name FROM iceberg_tables").fetchall()
            except sqlite3.OperationalError:  # tables not created yet
                return []
        return sorted(str(r[0]) for r in rows)

    @property
    def io_properties(self) -> dict[str, str]:
        """FileIO properties a reader needs for the data files (the facade vends them)."""
        return dict(self._io_properties)

    def load_iceberg_table(self, full_name: str) -> IcebergTable:
        name = TableName.parse(full_name)
        return self.iceberg_catalog(name.catalog).load_table((name.schema, name.table))

    # ----------------------------------------------------------------- state

    def _state(self, full_name: str, delta_uri: str | None = None) -> _TableState:
        name = TableName.parse(full_name)
        with self._wakeup:
            state = self._tables.get(name)
            if state is None:
                uri = _absolute(delta_uri) if delta_uri else table_uri(self.warehouse, name)
                state = _TableState(name=name, delta_uri=uri)
                self._tables[name] = state
                is_new = True
            else:
                if delta_uri:
                    state.delta_uri = _absolute(delta_uri)
                is_new = False
            if is_new:
                self._wakeup.notify_all()  # the thread polls the new table without waiting for its idle tick
        if is_new:
            state.converted = self._read_converted(name)
        return state

    def _read_converted(self, name: TableName) -> int:
        try:
            return snapshot_delta_version(self.load_iceberg_table(name.full_name))
        except NoSuchTableError:
            return -1
        except Exception:  # a broken catalog file must not stop watching; the next sync reports it
            log.warning("could not read the Iceberg mirror of %s", name, exc_info=True)
            return -1

    # ----------------------------------------------------------------- background thread

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._poll_delta_versions()
                for state, version in self._take_due_work():
                    if self._stop.is_set():
                        break
                    self._convert_safely(state, version)
            except Exception:  # defensive: nothing may end the mirror thread
                log.exception("iceberg mirror loop error")
            with self._wakeup:
                if self._stop.is_set():
                    break
                self._wakeup.wait(timeout=self._seconds_until_next_event())

    def _seconds_until_next_event(self) -> float:
        now = time.monotonic()
        candidates = [_IDLE_WAKEUP_S]
        for state in self._tables.values():
            candidates.extend(due - now for due, _ in state.pending)
            if state.retry_at is not None:
                candidates.append(state.retry_at - now)
            if self.poll_interval_s is not None:
                candidates.append(state.next_poll - now)
        return max(0.0, min(candidates))

    def _poll_delta_versions(self) -> None:
        if self.poll_interval_s is None:
            return
        now = time.monotonic()
        with self._lock:
            due = [s for s in self._tables.values() if s.next_poll <= now]
            for state in due:
                state.next_poll = now + self.poll_interval_s
        for state in due:
            try:
                version = self._delta_table(state.delta_uri).version()
            except Exception:  # table not created yet, or a transient store error: poll again later
                log.debug("polling the Delta version of %s failed", state.name, exc_info=True)
                continue
            with self._lock:
                if version > max(state.highest_seen, state.converted):
                    state.highest_seen = version
                    state.pending.append((time.monotonic() + self.lag_s, version))

    def _take_due_work(self) -> list[tuple[_TableState, int]]:
        """For each table, the highest notified version whose lag has passed (older ones are subsumed)."""
        now = time.monotonic()
        work: list[tuple[_TableState, int]] = []
        with self._lock:
            for state in self._tables.values():
                if state.retry_at is not None and state.retry_at > now:
                    continue
                due_versions = [v for due, v in state.pending if due <= now]
                if not due_versions:
                    continue
                target = max(due_versions)
                state.pending = [(due, v) for due, v in state.pending if v > target]
                if target > state.converted and not (
                    state.failed is not None and target <= state.failed_version
                ):
                    work.append((state, target))
        return work

    def _convert_safely(self, state: _TableState, version: int) -> None:
        try:
            self._convert(state, version)
        except Exception as exc:
            self._record_error(state, exc, traceback=state.consecutive_errors == 0)
            if is_data_error(exc) or state.consecutive_errors >= _MAX_CONSECUTIVE_ERRORS:
                with self._lock:
                    state.failed = state.last_error
                    state.failed_version = version
                    state.retry_at = None
                log.error("%s", self.failures().get(state.name.full_name, {}).get("message"))
                return
            backoff = _ERROR_BACKOFF.delay(state.consecutive_errors - 1)
            with self._lock:
                state.retry_at = time.monotonic() + backoff
                state.pending.append((time.monotonic(), version))

    def _record_error(self, state: _TableState, exc: BaseException, *, traceback: bool = True) -> None:
        with self._lock:
            state.error_count += 1
            state.consecutive_errors += 1
            state.last_error = f"{type(exc).__name__}: {exc}"
        log.error(
            "iceberg mirror of %s failed (%d failures so far): %s",
            state.name,
            state.error_count,
            state.last_error,
            exc_info=exc if traceback else None,
        )

    # ----------------------------------------------------------------- conversion

    def _delta_table(self, uri: str) -> DeltaTable:
        return DeltaTable(uri, storage_options=self._storage_options or None)

    def _convert(self, state: _TableState, version: int | None) -> int:
        """Make the Iceberg table reflect Delta ``version`` (``None``: the latest). Returns the version."""
        with state.lock:
            for attempt in range(1, _COMMIT_ATTEMPTS + 1):
                try:
                    converted = self._convert_once(state, version)
                    break
                except CommitFailedException:
                    if attempt == _COMMIT_ATTEMPTS:
                        raise
                    log.info("iceberg commit conflict on %s, retrying (attempt %d)", state.name, attempt)
                    time.sleep(_CONFLICT_BACKOFF.delay(attempt - 1))
        with self._lock:
            state.converted = max(state.converted, converted)
            state.highest_seen = max(state.highest_seen, converted)
            state.last_error = None
            state.consecutive_errors = 0
            state.retry_at = None
            state.failed = None
            state.failed_version = -1
        return converted

    def _convert_once(self, state: _TableState, version: int | None) -> int:
        dt = self._delta_table(state.delta_uri)
        catalog = self.iceberg_catalog(state.name.catalog)
        return convert_version(catalog, state.name, dt, state.delta_uri, version)
