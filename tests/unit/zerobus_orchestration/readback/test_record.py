"""A write's record (XCom, materialisation metadata) -> the offset ranges read-back verifies."""

from __future__ import annotations

import pytest

from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.readback.record import WriteRecord, ranges_from_primitives

BASE = {"table": "main.raw.t", "source": "d/ingest", "partition": "r/-1"}


def test_a_fresh_write_delivered_its_offset_span() -> None:
    summary = {**BASE, "offset_start": 0, "offset_end": 70, "rows_written": 70, "rows_skipped": 0}
    record = WriteRecord.from_summary(summary)
    assert record == WriteRecord("main.raw.t", "d/ingest", "r/-1", (OffsetRange(0, 70),))
    assert record.primitives() == [[0, 70]]


def test_a_resumed_write_counts_what_it_skipped() -> None:
    # Everything was delivered by an earlier try: nothing sent now, so the span alone would be empty.
    summary = {**BASE, "offset_start": 0, "offset_end": 0, "rows_written": 0, "rows_skipped": 300}
    record = WriteRecord.from_summary(summary)
    assert record is not None and record.ranges == (OffsetRange(0, 300),)


def test_an_empty_write_has_nothing_to_verify_and_a_foreign_summary_no_record() -> None:
    empty = {**BASE, "offset_start": 0, "offset_end": 0, "rows_written": 0, "rows_skipped": 0}
    assert WriteRecord.from_summary(empty) == WriteRecord("main.raw.t", "d/ingest", "r/-1", ())
    assert WriteRecord.from_summary({**BASE}) is None  # no offsets: not a Zerobus write summary
    assert WriteRecord.from_summary({"rows_written": 3}) is None


def test_explicit_ranges_win_and_bad_ones_are_refused() -> None:
    record = WriteRecord.from_summary({**BASE, "delivered_ranges": [[0, 5], [9, 12]], "offset_end": 99})
    assert record is not None and record.ranges == (OffsetRange(0, 5), OffsetRange(9, 12))
    for bad in ("0-5", [[0]], [[0, "5"]], [[5, 0]], [[True, 3]]):
        with pytest.raises(ValueError):
            ranges_from_primitives(bad)
