"""How durable each coverage commit is (issue 15 item 2: the sink's own cost).

Recording delivered ranges commits with ``synchronous = NORMAL`` (in WAL mode: survives a crash of the
process, may lose the newest commits on power loss, which only makes coverage lag and costs a re-send).
``forget`` keeps an fsync per commit (FULL): a lost forget would let coverage claim deleted rows.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
from pathlib import Path

from zerobus_orchestration.coverage.digest import RangeDigest
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


def _record_then_die(path: str) -> None:
    store = CoverageStore(path, TABLE)
    digest = RangeDigest(KEY, OffsetRange(0, 5), None, 5, b"\x01" * 16)
    store.record_delivered([(KEY, OffsetRange(0, 5))], [digest])
    os.kill(os.getpid(), signal.SIGKILL)  # no close, no checkpoint: the process just dies


def test_a_recorded_range_survives_a_crash_of_the_recording_process(tmp_path: Path) -> None:
    path = str(tmp_path / "coverage.sqlite")
    child = multiprocessing.get_context("spawn").Process(target=_record_then_die, args=(path,))
    child.start()
    child.join()
    assert child.exitcode == -signal.SIGKILL  # the fault acted: killed, not a clean exit
    with CoverageStore(path, TABLE) as store:
        assert store.ranges(KEY) == (OffsetRange(0, 5),)
        (digest,) = store.digests(KEY)
        assert digest.digest == b"\x01" * 16


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
