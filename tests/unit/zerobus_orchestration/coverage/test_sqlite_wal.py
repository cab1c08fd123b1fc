"""The one-time WAL switch of a SQLite file waits out a concurrent first opener, then gives up loudly."""

from __future__ import annotations

import sqlite3
from typing import Any, cast

import pytest

from zerobus_orchestration.coverage.sqlite_wal import enable_wal


class _Cursor:
    def __init__(self, row: tuple[str]) -> None:
        self._row = row

    def fetchone(self) -> tuple[str]:
        return self._row


class LockedThenFree:
    """A connection whose first ``locked_for`` statements fail as SQLite does during a concurrent switch."""

    def __init__(self, locked_for: int, message: str = "database is locked") -> None:
        self.locked_for = locked_for
        self.message = message
        self.statements: list[str] = []

    def execute(self, sql: str) -> _Cursor:
        self.statements.append(sql)
        if len(self.statements) <= self.locked_for:
            raise sqlite3.OperationalError(self.message)
        return _Cursor(("delete",) if sql == "PRAGMA journal_mode" else ("wal",))


def _conn(fake: Any) -> sqlite3.Connection:
    return cast(sqlite3.Connection, fake)


def test_switch_retries_while_locked_then_sets_wal() -> None:
    fake = LockedThenFree(locked_for=3)
    enable_wal(_conn(fake), busy_timeout_s=5.0)
    assert fake.statements[-2:] == ["PRAGMA journal_mode", "PRAGMA journal_mode = WAL"]
    assert len(fake.statements) == 5  # three locked attempts, then the read and the switch


def test_switch_still_locked_at_the_timeout_raises_sqlites_error() -> None:
    fake = LockedThenFree(locked_for=10**9)
    with pytest.raises(sqlite3.OperationalError, match="database is locked"):
        enable_wal(_conn(fake), busy_timeout_s=0.05)
    assert len(fake.statements) > 1  # it did retry before giving up


def test_other_sqlite_errors_are_not_retried() -> None:
    fake = LockedThenFree(locked_for=10**9, message="disk I/O error")
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        enable_wal(_conn(fake), busy_timeout_s=5.0)
    assert len(fake.statements) == 1
