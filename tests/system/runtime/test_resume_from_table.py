"""What a resume learns from the table: re-sent rows reported, and a table it cannot read tolerated."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.runtime.facade import ZerobusRuntime
from zerobus_orchestration.tables import table_uri

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
