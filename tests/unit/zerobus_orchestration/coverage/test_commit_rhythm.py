"""The service's commit rhythm within a write, read from a real Delta log: gaps between data commits
that rows kept flowing across count, the idle time between two runs does not.

Each append stands for one commit of the service: its rows stamped (``_twg_emit_ts``) over the time
since the previous commit of the same run, as the sink stamps a stream of batches.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from zerobus_orchestration.coverage.commit_rhythm import newest_commit, write_rhythm_s
from zerobus_orchestration.coverage.table_truth import TableReader, TableTruthError
from zerobus_orchestration.reserved import EMIT_TS, OFFSET, SOURCE

SCHEMA = pa.schema(
    [(SOURCE, pa.string()), (OFFSET, pa.int64()), pa.field(EMIT_TS, pa.timestamp("us", tz="UTC"))]
)


class Run:
    """One writer: each ``commit`` appends rows stamped from its previous commit (or its start) to now."""

    def __init__(self, path: Path, tag: str) -> None:
        self.path, self.tag = path, tag
        self.since = dt.datetime.now(dt.UTC)
        self.next = 0

    def commit(self, rows: int = 10) -> None:
        now = dt.datetime.now(dt.UTC)
        step = (now - self.since) / rows
        stamps = [self.since + step * (i + 1) for i in range(rows)]
        write_deltalake(
            str(self.path),
            pa.table(
                {
                    SOURCE: [self.tag] * rows,
                    OFFSET: pa.array(range(self.next, self.next + rows), pa.int64()),
                    EMIT_TS: pa.array(stamps, pa.timestamp("us", tz="UTC")),
                },
                schema=SCHEMA,
            ),
            mode="append",
        )
        self.since, self.next = now, self.next + rows


def reader(path: Path) -> TableReader:
    return TableReader("main.raw.t", str(path), {})


def test_gaps_within_a_write_count_and_the_idle_time_between_runs_does_not(tmp_path: Path) -> None:
    path = tmp_path / "t"
    DeltaTable.create(str(path), SCHEMA)
    first = Run(path, "a")
    for _ in range(3):
        time.sleep(0.3)
        first.commit()
    time.sleep(1.5)  # idle: nothing stamped, nothing committed
    second = Run(path, "b")
    for _ in range(2):
        time.sleep(0.3)
        second.commit()

    rhythm = write_rhythm_s(reader(path), commits=10)

    # Three gaps within the runs (two in the first, one in the second); the ~1.8 s between the runs is
    # not among them. Under load a gap may stretch, never to the idle gap's length.
    assert len(rhythm) == 3, rhythm
    assert all(0.25 <= gap < 1.2 for gap in rhythm), rhythm


def test_rows_committed_late_still_show_the_rhythm(tmp_path: Path) -> None:
    """A loaded service commits rows stamped before its previous commit: their gap is its rhythm."""
    path = tmp_path / "t"
    early = Run(path, "a")
    time.sleep(0.1)
    early.commit()
    held = dt.datetime.now(dt.UTC)  # rows stamped now, committed only after the next tick
    time.sleep(0.6)
    late = Run(path, "a")
    late.since = held - dt.timedelta(milliseconds=50)
    late.commit()
    (gap,) = write_rhythm_s(reader(path), commits=10)
    assert 0.55 <= gap < 1.5


def test_schema_changes_and_deletes_are_not_the_service_s_commits(tmp_path: Path) -> None:
    """A delete (of another run's rows) between two commits of a write must not split their gap."""
    path = tmp_path / "t"
    DeltaTable.create(str(path), SCHEMA)  # CREATE TABLE: no rows
    other = Run(path, "z")
    other.commit(1)
    run = Run(path, "a")
    time.sleep(0.3)
    run.commit()
    time.sleep(0.2)
    DeltaTable(str(path)).delete(f"{SOURCE} = 'z'")  # removes the other run's file: not the service's
    time.sleep(0.2)
    run.commit()
    (gap,) = write_rhythm_s(reader(path), commits=10)
    assert 0.35 <= gap < 1.5  # the two commits' gap, not the delete's halves
    assert write_rhythm_s(reader(path), commits=1) == ()  # one commit: no gap yet


def test_files_without_stamp_statistics_show_no_rhythm(tmp_path: Path) -> None:
    path = tmp_path / "t"
    for offset in range(3):
        write_deltalake(str(path), pa.table({OFFSET: pa.array([offset], pa.int64())}), mode="append")
        time.sleep(0.1)
    assert write_rhythm_s(reader(path), commits=10) == ()


def test_a_missing_table_raises(tmp_path: Path) -> None:
    with pytest.raises(TableTruthError, match="history"):
        write_rhythm_s(reader(tmp_path / "none"), commits=10)


def test_newest_commit_is_the_latest_version_and_its_timestamp(tmp_path: Path) -> None:
    path = tmp_path / "t"
    DeltaTable.create(str(path), SCHEMA)
    before_ms = time.time() * 1000
    Run(path, "w[a]").commit()
    version, stamp = newest_commit(reader(path))
    assert version == 1
    assert stamp is not None and before_ms - 1000 <= stamp <= time.time() * 1000 + 1000
