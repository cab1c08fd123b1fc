"""The one-time switch of a local SQLite file to WAL, safe when several processes open a new file at once.

Both of this package's SQLite files need it: the coverage cache (``coverage/store.py``) and the resume marks
(``resume/pieces.py``), each opened by every write, possibly by several processes of one host at once.
"""

from __future__ import annotations

import sqlite3

from zerobus_orchestration.retry import Backoff, poll_until

# Short first waits: a concurrent first opener holds the lock for milliseconds.
_WAL_SWITCH_BACKOFF = Backoff(initial_s=0.005, max_s=0.25)


def enable_wal(conn: sqlite3.Connection, busy_timeout_s: float) -> None:
    """Switch the file to WAL (a persistent, one-time change), waiting out concurrent first openers.

    The switch from a rollback journal needs an exclusive lock, and SQLite answers ``database is
    locked`` at once, without calling the busy handler, when another connection (a sibling ack lane,
    another process, another step's resumed write) is opening the same new file. So retry here, with
    backoff, up to the busy timeout.
    """
    contended: list[sqlite3.OperationalError] = []

    def switched() -> bool | None:
        try:
            (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
            if str(mode).lower() != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return True
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            contended[:] = [exc]
            return None

    if poll_until(switched, timeout_s=busy_timeout_s, backoff=_WAL_SWITCH_BACKOFF) is None:
        raise contended[-1]  # still locked at the busy timeout: SQLite's own error, as before
