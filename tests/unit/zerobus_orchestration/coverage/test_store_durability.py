"""How durable each coverage commit is (issue 15 item 2: the sink's own cost).

Recording delivered ranges commits with ``synchronous = NORMAL`` (in WAL mode: survives a crash of the
process, may lose the newest commits on power loss, which only makes coverage lag and costs a re-send).
``forget`` keeps an fsync per commit (FULL): a lost forget would let coverage claim deleted rows.
That a recorded range survives a SIGKILL of the recording process: tests/system/coverage/test_coverage_crash.py.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.ranges import CoverageKey, OffsetRange

TABLE = "main.raw.events"
KEY = CoverageKey("sink-a", "asset/orders", "")
NORMAL, FULL = 1, 2  # PRAGMA synchronous values


def synchronous(store: CoverageStore) -> int:
    (level,) = store._connection().execute("PRAGMA synchronous").fetchone()
    return int(level)


def test_recording_commits_without_an_fsync_per_burst(tmp_path: Path) -> None:
    with CoverageStore(tmp_path / "coverage.sqlite", TABLE) as store:
        statements: list[str] = []
        store._connection().set_trace_callback(statements.append)
        store.record_many([(KEY, OffsetRange(0, 10))])
        assert not [s for s in statements if "synchronous" in s.lower()]  # no switch per burst
        assert synchronous(store) == NORMAL
        assert store.ranges(KEY) == (OffsetRange(0, 10),)


def test_forget_commits_with_an_fsync_and_recording_goes_back_to_normal(tmp_path: Path) -> None:
    with CoverageStore(tmp_path / "coverage.sqlite", TABLE) as store:
        store.record_many([(KEY, OffsetRange(0, 10))])
        statements: list[str] = []
        store._connection().set_trace_callback(statements.append)
        store.forget([KEY])
        lowered = [s.strip().lower() for s in statements]
        full, begin, commit = (
            lowered.index("pragma synchronous = full"),
            lowered.index("begin immediate"),
            lowered.index("commit"),
        )
        assert full < begin < commit  # the forget's COMMIT ran under FULL
        assert lowered[commit + 1 :] == ["pragma synchronous = normal"]
        assert store.ranges(KEY) == ()
        assert synchronous(store) == NORMAL


def test_opening_an_up_to_date_file_takes_no_write_lock(tmp_path: Path) -> None:
    # Each write's ack lane opens a connection: on an existing file it must not queue for the write
    # lock (nor re-run the schema DDL) behind another process's merge.
    path = tmp_path / "coverage.sqlite"
    with CoverageStore(path, TABLE) as store:
        store.record_many([(KEY, OffsetRange(0, 10))])
    writer = sqlite3.connect(path, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")  # another process mid-merge holds the write lock
        with CoverageStore(path, TABLE, busy_timeout_s=0.05) as reader:
            assert reader.ranges(KEY) == (OffsetRange(0, 10),)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
