"""A write that fails on bad data leaves nothing surprising (issue 24), through the runtime: the official
SDK against the embedded emulator, read back from the Delta table itself.

- Re-readable input (``read_files``, a ``pyarrow.dataset.Dataset``) with one bad DATE in row 150,000 of
  200,000: refused with 0 rows sent and no table created (the old write path had sent the first
  131,072 rows, left them in the table, and said nothing of them).
- A stream (a ``RecordBatchReader``) fails where the bad batch comes; the error says how many rows were
  delivered, those rows are in the table once, and a retry of the same stream, corrected, resumes after
  them: every row once, none twice.
- A stream whose first batch is refused leaves no table.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from tests.support.bad_input import BAD_ROW, ROWS, events, events_parquet
from zerobus_orchestration.errors import ConfigError, WriteBoundaryError
from zerobus_orchestration.files import read_files
from zerobus_orchestration.reserved import OFFSET
from zerobus_orchestration.runtime.facade import ZerobusRuntime
from zerobus_orchestration.sink import input_check
from zerobus_orchestration.spool import Spool
from zerobus_orchestration.spool import spool as input_check_spool
from zerobus_orchestration.tables import table_uri

pytestmark = pytest.mark.integration  # the official SDK against the emulator

TABLE = "main.raw.events"


def _delta(rt: ZerobusRuntime) -> pa.Table:
    rt.delta_version(TABLE)  # the emulator commits what it acknowledged
    return DeltaTable(table_uri(rt.config.warehouse, TABLE)).to_pyarrow_table()


def _assert_refused_whole(
    rt: ZerobusRuntime, failure: pytest.ExceptionInfo[WriteBoundaryError], where: str
) -> None:
    assert (failure.value.kind, failure.value.column) == ("out_of_range", "day")
    assert f"Where: {where}, row {BAD_ROW:,} (rows counted from 1)" in str(failure.value)
    assert "Nothing of this write was sent" in str(failure.value)
    rt.flush()
    assert rt.catalog.describe(TABLE) is None  # no table, not even an empty one
    assert not Path(table_uri(rt.config.warehouse, TABLE)).exists()
    assert rt.covered(TABLE, source="events") == ()


def test_a_bad_date_in_row_150000_of_a_parquet_file_leaves_no_row_and_no_table(
    runtime: ZerobusRuntime, tmp_path: Path
) -> None:
    path = events_parquet(tmp_path / "events.parquet")
    with pytest.raises(WriteBoundaryError) as failure:
        runtime.write(TABLE, read_files(str(path)), source="events")
    _assert_refused_whole(runtime, failure, str(path))
    # Corrected, the same command writes every row once.
    events_parquet(path, bad_row=None)
    result = runtime.write(TABLE, read_files(str(path)), source="events")
    assert (result.rows_written, result.rows_skipped) == (ROWS, 0)
    assert _delta(runtime).num_rows == ROWS


def test_a_bad_date_nested_in_a_struct_list_leaves_no_row_and_no_table(
    runtime: ZerobusRuntime, tmp_path: Path
) -> None:
    """The service refuses a DATE out of range at any depth: the whole-input check must see it there too
    (it looked at top-level columns only, so the emulator refused the batch holding it after the first
    131,072 rows had been sent and committed)."""
    flat = events()
    nested = pa.table(
        {
            "id": flat["id"],
            "visit": pa.StructArray.from_arrays(
                [
                    pa.ListArray.from_arrays(
                        pa.array(range(ROWS + 1), pa.int32()), flat["day"].combine_chunks()
                    )
                ],
                ["days"],
            ),
        }
    )
    path = tmp_path / "visits.parquet"
    pq.write_table(nested, path)
    with pytest.raises(WriteBoundaryError) as failure:
        runtime.write(TABLE, read_files(str(path)), source="events")
    assert (failure.value.kind, failure.value.column) == ("out_of_range", "visit")
    assert "in visit.days.element outside 0001-01-01 .. 9999-12-31" in str(failure.value)
    assert f"row {BAD_ROW:,} (rows counted from 1)" in str(failure.value)
    assert "Nothing of this write was sent" in str(failure.value)
    runtime.flush()
    assert runtime.catalog.describe(TABLE) is None
    assert not Path(table_uri(runtime.config.warehouse, TABLE)).exists()


def test_a_dataset_input_is_checked_whole_too(runtime: ZerobusRuntime, tmp_path: Path) -> None:
    path = events_parquet(tmp_path / "events.parquet")
    with pytest.raises(WriteBoundaryError) as failure:
        runtime.write(TABLE, ds.dataset(str(path), format="parquet"), source="events")
    _assert_refused_whole(runtime, failure, str(path))


def test_a_failed_stream_says_what_it_delivered_and_a_retry_resumes_after_it(
    runtime: ZerobusRuntime,
) -> None:
    bad = events()
    batches = bad.to_batches(max_chunksize=65_536)  # the bad row is in the third batch
    with pytest.raises(WriteBoundaryError) as failure:
        runtime.write(TABLE, pa.RecordBatchReader.from_batches(bad.schema, batches), source="events")
    message = str(failure.value)
    assert failure.value.kind == "out_of_range"
    assert "Delivered before the failure: 131,072 row(s) of this write" in message
    assert "now holds 131,072 row(s), at positions 0 .. 131,072" in message
    assert "A retry of the same input resumes after them" in message
    assert failure.value.rows_delivered == 131_072  # type: ignore[attr-defined]
    assert _delta(runtime).num_rows == 131_072  # what the error says is what the table holds

    fixed = events(bad_row=None)
    retry = runtime.write(
        TABLE, pa.RecordBatchReader.from_batches(fixed.schema, fixed.to_batches(65_536)), source="events"
    )
    assert (retry.rows_skipped, retry.rows_written) == (131_072, ROWS - 131_072)
    rows = _delta(runtime)
    assert rows.num_rows == ROWS
    assert pc.count_distinct(rows[OFFSET]).as_py() == ROWS  # 0 duplicates
    assert sorted(rows["id"].to_pylist()) == list(range(ROWS))


def test_a_stream_whose_first_batch_is_refused_leaves_no_table(runtime: ZerobusRuntime) -> None:
    bad = events(rows=1_000, bad_row=10)
    with pytest.raises(WriteBoundaryError) as failure:
        runtime.write(TABLE, iter(bad.to_batches(max_chunksize=100)), source="events")
    assert "Where: the streamed input, row 10 (rows counted from 1)" in str(failure.value)
    assert "Delivered before the failure" not in str(failure.value)
    runtime.flush()
    assert runtime.catalog.describe(TABLE) is None


def test_a_csv_file_is_parsed_once_through_a_spool_that_is_deleted_after(
    runtime: ZerobusRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spools = tmp_path / "tmp"
    spools.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spools))  # where the spool goes (TMPDIR)
    made: list[Spool] = []

    def recorded(*args: Any, **kwargs: Any) -> Spool:
        made.append(input_check_spool(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(input_check, "spool", recorded)
    path = tmp_path / "events.csv"
    pacsv.write_csv(events(rows=20_000, bad_row=None), path)
    result = runtime.write(TABLE, read_files(str(path)), source="events")
    assert (result.rows_written, _delta(runtime).num_rows) == (20_000, 20_000)
    assert [(s.folder.parent, s.rows) for s in made] == [(spools, 20_000)]  # sent from the spool
    assert list(spools.iterdir()) == []  # and the spool deleted
    bad = tmp_path / "bad.csv"
    pacsv.write_csv(events(), bad)
    text = bad.read_text().splitlines()
    text[BAD_ROW] = "x" + text[BAD_ROW]  # data row 150,000, far past the first block: the id is no number
    bad.write_text("\n".join(text) + "\n")
    with pytest.raises(ConfigError, match=rf"table {TABLE}: {bad}, column 'id', row {BAD_ROW:,} "):
        runtime.write(TABLE, read_files(str(bad)), source="bad")
    assert runtime.covered(TABLE, source="bad") == ()
    assert list(spools.iterdir()) == []
