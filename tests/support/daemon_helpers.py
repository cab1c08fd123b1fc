"""Shared by the daemon tests and their spawned worker processes (which must not import conftest)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.emulator.advert import ADVERT_FILE, LOG_FILE, pid_alive, read_advertisement
from zerobus_orchestration.emulator.launcher import START_MARKER
from zerobus_orchestration.tables import table_uri
from zerobus_orchestration.testing.settings import embedded_test_config

TABLE = "main.raw.events"


def daemon_config(
    warehouse: Path | str, *, idle_shutdown_s: float = 30.0, time_to_table_s: float = 0.2
) -> ZerobusConfig:
    return embedded_test_config(
        warehouse,
        mode="daemon",
        time_to_table_s=time_to_table_s,
        emulator_settings={"idle_shutdown_s": idle_shutdown_s, "daemon_start_timeout_s": 60},
    )


def state_of(warehouse: Path) -> Path:
    return warehouse / "_zerobus"


def rows(n: int, start: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "kwh": pa.array([0.5] * n)})


def delta_rows(warehouse: Path, table: str = TABLE) -> pa.Table:
    return DeltaTable(table_uri(str(warehouse), table)).to_pyarrow_table()


def starts_logged(warehouse: Path) -> int:
    """Lock-guarded daemon starts: the launcher writes one marker line per spawn into the log."""
    log = state_of(warehouse) / LOG_FILE
    return log.read_text().count(START_MARKER) if log.exists() else 0


def daemon_pids_logged(warehouse: Path) -> set[int]:
    log = state_of(warehouse) / LOG_FILE
    if not log.exists():
        return set()
    return {int(p) for p in re.findall(r"zerobus emulator daemon (\d+) starting", log.read_text())}


def wait_until_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return not pid_alive(pid)


def kill_daemons(warehouse: Path) -> None:
    """Teardown: stop every daemon this warehouse ever had (advertised or only logged)."""
    pids = daemon_pids_logged(warehouse)
    advert = read_advertisement(state_of(warehouse) / ADVERT_FILE)
    if advert is not None:
        pids.add(advert.pid)
    for pid in pids:
        if not pid_alive(pid):
            continue
        # The daemon may exit on its own between the liveness check and the signal.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            if not wait_until_gone(pid, 15):
                os.kill(pid, signal.SIGKILL)


@dataclass(frozen=True)
class WorkerResult:
    worker_pid: int
    emulator_pid: int
    rows_written: int
    delta_version: int | None


def write_worker(warehouse: str, source: str, start: int, n: int, barrier: Any, out: Any) -> None:
    """One spawned process: acquire the daemon-mode runtime together with the other, then both write."""
    from zerobus_orchestration.runtime.registry import acquire_runtime, close_all_runtimes

    try:
        barrier.wait(60)  # both race to find or start the daemon: the start lock must admit one start
        rt = acquire_runtime(daemon_config(warehouse))
        emulator_pid = getattr(rt.emulator, "pid", -1)
        barrier.wait(60)  # both runtimes up before either writes: the writes overlap
        result = rt.write(TABLE, rows(n, start), source=source)
        out.put(WorkerResult(os.getpid(), emulator_pid, result.rows_written, result.delta_version))
    except BaseException as exc:
        out.put(f"{source}: {type(exc).__name__}: {exc}")
        raise
    finally:
        close_all_runtimes()
