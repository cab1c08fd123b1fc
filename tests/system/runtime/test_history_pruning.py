"""Read-back as history grows: the scan reads only the files of rows stamped since the partition's first
attempt could have begun (this host's first look, less ``coverage.emit_margin_s``). Official SDK, the
embedded emulator, Delta and its Iceberg mirror."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from zerobus_orchestration.reserved import EMIT_TS, OFFSET, SOURCE
from zerobus_orchestration.runtime.facade import source_tag
from zerobus_orchestration.runtime.registry import acquire_runtime, close_all_runtimes
from zerobus_orchestration.tables import table_uri
from zerobus_orchestration.testing.settings import embedded_test_config

TABLE = "main.raw.history"


def rows(start: int, end: int) -> pa.Table:
    return pa.table({"order_id": pa.array(range(start, end), pa.int64())})


def outside_coverage(tmp_path: Path, margin_s: float) -> int:
    """Write partition ``p``, let a year-old file hold five more rows of its tag (as if an attempt had
    written them long ago), read back, and return how many rows outside coverage the scan saw."""
    config = embedded_test_config(tmp_path / "wh", coverage={"emit_margin_s": margin_s})
    runtime = acquire_runtime(config)
    try:
        runtime.write(TABLE, rows(0, 200), source="s", partition="p")
        long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=365)
        stale = pa.table(
            {
                "order_id": pa.array(range(5), pa.int64()),
                EMIT_TS: pa.array([long_ago] * 5, pa.timestamp("us", tz="UTC")),
                SOURCE: pa.array([source_tag("s", "p")] * 5),
                OFFSET: pa.array(range(1_000, 1_005), pa.int64()),
            }
        )
        write_deltalake(table_uri(config.warehouse, TABLE), stale, mode="append")
        outcome = runtime.verify(TABLE, source="s", partition="p", force=True, raise_errors=True)
        assert outcome.verified and outcome.report is not None, outcome
        return int(outcome.report["rows_outside_coverage"])
    finally:
        close_all_runtimes()


def test_a_read_back_does_not_scan_files_of_rows_stamped_before_the_partition_began(tmp_path: Path) -> None:
    # An hour's margin: the year-old file is never read. Ten years' margin: it is, and its rows show up
    # as rows outside coverage, which shows the bound is what kept them out.
    assert outside_coverage(tmp_path / "hour", margin_s=3_600) == 0
    assert outside_coverage(tmp_path / "decade", margin_s=10 * 365 * 86_400) == 5
