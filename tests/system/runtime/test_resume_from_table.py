"""What a resume learns from the table: re-sent rows reported, and a table it cannot read tolerated."""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.runtime.facade import DEFAULT_SINK_ID, ZerobusRuntime, source_tag
from zerobus_orchestration.runtime.registry import acquire_runtime, close_all_runtimes
from zerobus_orchestration.tables import table_uri
from zerobus_orchestration.testing.settings import embedded_test_config

TABLE = "main.raw.holes"


def rows(start: int, end: int) -> pa.Table:
    return pa.table({"order_id": pa.array(range(start, end), pa.int64())})


def test_rows_sent_into_a_hole_are_reported_by_the_result_and_health(runtime: ZerobusRuntime) -> None:
    # An earlier try delivered [0, 100) and [200, 300) but not [100, 200) (a hole a crash can leave
    # when several streams ack out of order).
    first = runtime.sink(TABLE, source="s")
    first.push(rows(0, 100))
    first.flush()
    later = runtime.sink(TABLE, source="s", start_offset=200)
    later.push(rows(200, 300))
    later.flush()
    assert runtime.covered(TABLE, source="s") == (OffsetRange(0, 100), OffsetRange(200, 300))

    result = runtime.write(TABLE, rows(0, 400), source="s")
    assert (result.rows_skipped, result.rows_written) == (200, 200)
    assert result.rows_resent_after_crash == 100  # [100, 200), below the highest delivered position
    assert runtime.health().rows_resent_after_crash == 100
    assert runtime.health().as_dict()["rows_resent_after_crash"] == 100

    again = runtime.write(TABLE, rows(0, 400), source="s")  # nothing left to send, nothing re-sent
    assert (again.rows_skipped, again.rows_resent_after_crash) == (400, 0)
    assert runtime.health().rows_resent_after_crash == 100


def test_a_table_that_cannot_be_read_resumes_from_the_cache_alone(
    runtime: ZerobusRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    first = runtime.sink(TABLE, source="s")
    first.push(rows(0, 100))
    first.flush()
    runtime.delta_version(TABLE)
    for data_file in DeltaTable(table_uri(runtime.config.warehouse, TABLE)).file_uris():
        Path(data_file).unlink()  # the log stands, its files are gone: the offsets cannot be read

    with caplog.at_level(logging.WARNING, logger="zerobus_orchestration.runtime.facade"):
        result = runtime.write(TABLE, rows(0, 200), source="s")
    assert (result.rows_skipped, result.rows_written) == (100, 100)  # what the cache held, no more
    assert any(
        "could not read the delivered positions from the table" in r.getMessage() and TABLE in r.getMessage()
        for r in caplog.records
    ), caplog.text


def test_a_resume_reads_only_the_files_of_rows_stamped_since_its_bound(tmp_path: Path) -> None:
    """``not_before`` (an orchestrator's run start) bounds what the catch-up reads: files whose rows
    were all stamped earlier are pruned by their ``_twg_emit_ts`` statistics. A right bound finds the
    earlier attempt's rows; a bound after them (wrong on purpose) prunes their files, and they are sent
    again, which shows the pruning acted."""
    config = embedded_test_config(tmp_path / "wh", coverage={"emit_margin_s": 0})
    runtime = acquire_runtime(config)
    key = CoverageKey(DEFAULT_SINK_ID, source_tag("s", "p"), "p")
    try:
        started = dt.datetime.now(dt.UTC)
        runtime.write(TABLE, rows(0, 300), source="s", partition="p")
        runtime.coverage(TABLE).forget([key])  # as on a host without this cache

        right = runtime.write(TABLE, rows(0, 500), source="s", partition="p", not_before=started)
        assert (right.rows_skipped, right.rows_written) == (300, 200)

        runtime.coverage(TABLE).forget([key])
        later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
        wrong = runtime.write(TABLE, rows(0, 500), source="s", partition="p", not_before=later)
        assert (wrong.rows_skipped, wrong.rows_written) == (0, 500)
        runtime.delta_version(TABLE)
        assert DeltaTable(table_uri(config.warehouse, TABLE)).count() == 1_000
    finally:
        close_all_runtimes()
