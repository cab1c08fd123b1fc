"""What the failure-edge tests provoke, shared by the Python API, Dagster and Airflow ones.

Real parts only: a loopback listener that completes TCP handshakes and never answers (its kernel backlog
accepts, nothing reads), a real emulator as the token endpoint or the whole service, a table the
emulator fails for real (a NOT NULL column added out-of-band, which the next commit of the write-ahead
log cannot satisfy).
"""

from __future__ import annotations

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
