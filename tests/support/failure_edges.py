"""What the failure-edge tests provoke, shared by the Python API, Dagster and Airflow ones.

Real parts only: a loopback listener that completes TCP handshakes and never answers (its kernel backlog
accepts, nothing reads), a real emulator as the token endpoint or the whole service, a table the
emulator fails for real (a NOT NULL column added out-of-band, which the next commit of the write-ahead
log cannot satisfy), a warehouse whose write-ahead log another holder locks (the emulator's own lock).
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from deltalake import DeltaTable
from deltalake.schema import Field, PrimitiveType

from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.tables import table_uri

WRONG_SECRET = "not-the-secret-7d1e"  # long enough that scrubbing it cannot mangle a server's words


@contextmanager
def silent_endpoint() -> Iterator[str]:
    """``http://127.0.0.1:<port>`` of a listener that accepts TCP and never answers a byte."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def remote_settings(emulator: Emulator, state_dir: Path, warehouse: Path, **overrides: Any) -> dict[str, Any]:
    """``ZerobusConfig`` fields of a remote config against ``emulator`` (its endpoint, token URL and
    credentials), any of them replaced by ``overrides``."""
    settings: dict[str, Any] = {
        "endpoint": emulator.endpoint,
        "workspace_url": emulator.workspace_url,
        "client_id": emulator.client_id,
        "client_secret": emulator.client_secret,
        "warehouse": str(warehouse),
        "state_dir": str(state_dir),
    }
    settings.update(overrides)
    return settings


def add_required_column(warehouse: Path | str, table: str) -> None:
    """A NOT NULL column added to the Delta table behind the service's back: the rows it acknowledged
    and has not committed yet no longer fit, so the emulator fails the table at its next commit."""
    DeltaTable(table_uri(str(warehouse), table)).alter.add_columns(
        [Field("added_out_of_band", PrimitiveType("string"), nullable=False)]
    )


class TableFailer:
    """Adds the NOT NULL column once the emulator has committed rows to the table after Delta version
    ``after`` (the write is under way, its stream open): the table then fails mid-write, at the next
    commit. ``after=None``: after any commit of rows."""

    def __init__(
        self, warehouse: Path | str, table: str, *, after: int | None = None, timeout_s: float = 60.0
    ) -> None:
        self.warehouse, self.table, self.after = str(warehouse), table, after
        self.altered_at: float | None = None  # time.monotonic() of the alteration
        self.altered_wall: float | None = None  # and time.time(), to compare with an event log's stamps
        self._deadline = time.monotonic() + timeout_s
        self._thread = threading.Thread(target=self._run, name="table-failer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        uri = table_uri(self.warehouse, self.table)
        while time.monotonic() < self._deadline:
            try:
                delta = DeltaTable(uri)
                moved = self.after is None or delta.version() > self.after
                if moved and delta.history(1)[0]["operation"] == "WRITE":
                    add_required_column(self.warehouse, self.table)
                    self.altered_at, self.altered_wall = time.monotonic(), time.time()
                    return
            except Exception:  # not created yet, or a commit in progress: look again
                pass
            time.sleep(0.02)

    def join(self) -> None:
        self._thread.join(timeout=max(0.0, self._deadline - time.monotonic()) + 1)


class WarehouseTaken:
    """Holds a warehouse's write-ahead-log lock, as a second emulator on it would: an emulator daemon
    started for the warehouse meanwhile exits while starting ("another emulator is already running")."""

    def __init__(self, state_dir: Path) -> None:
        self.lock_path = state_dir / "wal" / ".lock"
        self.taken_at: float | None = None  # time.monotonic() once held
        self._fd: int | None = None

    def take_after(self, pid: int, timeout_s: float = 10.0) -> None:
        """Once process ``pid`` (the daemon holding the lock) is gone, take the lock before its successor
        does: a successor is started only after the pid is seen gone, and takes seconds to get there."""
        deadline = time.monotonic() + timeout_s
        fd = os.open(self.lock_path, os.O_RDWR)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise AssertionError(f"process {pid} kept the WAL lock for {timeout_s} s") from None
                time.sleep(0.005)
        self._fd, self.taken_at = fd, time.monotonic()

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class DaemonKiller:
    """SIGKILLs the warehouse's shared emulator daemon once it has committed rows of ``table`` (a write
    is under way), then holds the warehouse (``WarehouseTaken``) so no successor can start."""

    def __init__(self, warehouse: Path | str, table: str, *, timeout_s: float = 60.0) -> None:
        self.warehouse, self.table = Path(warehouse), table
        self.taken = WarehouseTaken(self.warehouse / "_zerobus")
        self.killed: int | None = None  # the daemon's pid, once killed
        self.taken_wall: float | None = None  # time.time() once the warehouse was held
        self._deadline = time.monotonic() + timeout_s
        self._thread = threading.Thread(target=self._run, name="daemon-killer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from zerobus_orchestration.emulator.advert import ADVERT_FILE, read_advertisement

        uri = table_uri(str(self.warehouse), self.table)
        while time.monotonic() < self._deadline:
            try:
                committed = DeltaTable(uri).history(1)[0]["operation"] == "WRITE"
            except Exception:  # not created yet, or a commit in progress: look again
                committed = False
            advert = read_advertisement(self.warehouse / "_zerobus" / ADVERT_FILE)
            if committed and advert is not None:
                os.kill(advert.pid, signal.SIGKILL)
                self.killed = advert.pid
                self.taken.take_after(advert.pid)
                self.taken_wall = time.time()
                return
            time.sleep(0.02)

    def join(self) -> None:
        self._thread.join(timeout=max(0.0, self._deadline - time.monotonic()) + 1)

    def release(self) -> None:
        self.join()
        self.taken.release()
