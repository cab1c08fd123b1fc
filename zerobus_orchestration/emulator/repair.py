"""Operator commands on an emulator's state while no emulator serves it: status and quarantine.

``emulator_status`` lists each table with a write-ahead log, what it holds and the failure recorded
by the last emulator that opened it (table_health.py). ``quarantine_table`` commits what Delta takes
from a failed table's log and moves each record Delta refuses to ``<state>/quarantine/<table>/<time>/``
as an Arrow IPC stream file (``pyarrow.ipc.open_stream`` reads it) with a JSON note of the cause, so
the table is unblocked and no acknowledged byte is deleted. Both hold the WAL folder's lock, which a
serving emulator holds too: quarantine refuses to run next to one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from zerobus_orchestration.emulator.errors import EmulatorError, WalCorruptError
from zerobus_orchestration.emulator.materializer import TableState, table_exists
from zerobus_orchestration.emulator.server import lock_wal_root
from zerobus_orchestration.emulator.table_health import quarantine_dest, quarantine_root, read_marker
from zerobus_orchestration.emulator.wal import table_of_wal_dir, wal_dir_name
from zerobus_orchestration.owner_only import private_dir, write_private
from zerobus_orchestration.tables import TableName, table_uri


def emulator_status(warehouse: str, wal_root: Path) -> dict[str, Any]:
    """Tables with a WAL under ``wal_root``, their pending bytes and recorded failure; quarantined files."""
    tables: list[dict[str, Any]] = []
    if wal_root.is_dir():
        for directory in sorted(p for p in wal_root.iterdir() if p.is_dir()):
            segments = list(directory.glob("*.wal"))
            tables.append(
                {
                    "table": table_of_wal_dir(directory.name),
                    "wal_bytes": sum(p.stat().st_size for p in segments),
                    "failed": read_marker(directory),
                }
            )
    quarantined: dict[str, int] = {}
    root = quarantine_root(wal_root)
    if root.is_dir():
        for directory in sorted(p for p in root.iterdir() if p.is_dir()):
            quarantined[table_of_wal_dir(directory.name)] = len(list(directory.glob("*/*.arrows")))
    return {
        "warehouse": warehouse,
        "wal_dir": str(wal_root),
        "emulator_running": _locked(wal_root, warehouse),
        "tables": tables,
        "failed": [t["table"] for t in tables if t["failed"]],
        "quarantined_batches": quarantined,
    }


def _locked(wal_root: Path, warehouse: str) -> bool:
    if not (wal_root / ".lock").exists():
        return False
    try:
        fd = lock_wal_root(wal_root, warehouse)
    except EmulatorError:
        return True
    os.close(fd)
    return False


def quarantine_table(
    warehouse: str, wal_root: Path, table: str, storage_options: dict[str, str] | None = None
) -> dict[str, Any]:
    """Unblock ``table``: commit what Delta takes, move what it refuses to the quarantine folder.

    Raises ``EmulatorError`` while an emulator serves the warehouse, and the original error (nothing
    moved) when the table fails for a reason that is not its data (storage, permissions).
    """
    full_name = TableName.parse(table).full_name
    uri = table_uri(warehouse, full_name)
    wal_dir = wal_root / wal_dir_name(full_name)
    if not wal_dir.is_dir():
        raise EmulatorError(f"{full_name} has no write-ahead log under {wal_root}: nothing to quarantine")
    fd = lock_wal_root(wal_root, warehouse)
    try:
        if not table_exists(uri, storage_options):
            raise EmulatorError(f"table {full_name} does not exist under {warehouse}: nothing to commit to")
        dest = quarantine_dest(wal_root, wal_dir_name(full_name))
        moved: list[dict[str, object]] = []
        try:
            state = TableState.open(full_name, uri, wal_dir, storage_options)
        except WalCorruptError as exc:
            moved.extend(_quarantine_segments(full_name, wal_dir, dest, exc))
            state = TableState.open(full_name, uri, wal_dir, storage_options)
        try:
            moved.extend(state.quarantine(dest))
            version = state.last_delta_version
        finally:
            state.wal.close()
    finally:
        os.close(fd)
    return {
        "table": full_name,
        "quarantined": moved,
        "quarantine_dir": str(dest) if moved else None,
        "delta_version": version,
    }


def _quarantine_segments(
    full_name: str, wal_dir: Path, dest: Path, exc: WalCorruptError
) -> list[dict[str, object]]:
    """A log whose sealed segment fails its checksum cannot be read record by record: move it whole."""
    private_dir(dest)  # acknowledged rows: as private as the WAL they come from
    moved: list[dict[str, object]] = []
    for segment in sorted(wal_dir.glob("*.wal")):
        os.replace(segment, dest / segment.name)
        moved.append({"segment": segment.name, "cause": str(exc)})
    note = {"table": full_name, "cause": f"{type(exc).__name__}: {exc}", "segments": moved}
    write_private(dest / "segments.json", json.dumps(note, indent=2).encode())
    return moved
