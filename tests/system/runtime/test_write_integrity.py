"""Write integrity through the runtime: official SDK -> embedded emulator -> Delta (issue 12 items 3-6, 9).

In-memory input is checked whole before anything is sent; names are folded as Unity Catalog folds them;
names, columns and values the warehouse cannot hold fail at once, with nothing written or covered.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from zerobus_orchestration.config import MAX_CALL_BYTES
from zerobus_orchestration.errors import (
    ConfigError,
    TableNameError,
    WriteBoundaryError,
    ZerobusOrchestrationError,
)
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.reserved import OFFSET
from zerobus_orchestration.runtime.facade import ZerobusRuntime
from zerobus_orchestration.sink.errors import PartialSendError
from zerobus_orchestration.sink.slicing import ROW_TOO_LARGE
from zerobus_orchestration.tables import table_uri

TABLE = "main.raw.orders"


def batch(start: int, n: int, *, id_type: pa.DataType | None = None) -> pa.RecordBatch:
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.RecordBatch.from_arrays(
        [ids.cast(id_type or pa.int64()), pa.array([f"c{i}" for i in range(start, start + n)])],
        names=["id", "customer"],
    )


def delta_rows(rt: ZerobusRuntime, table: str = TABLE) -> pa.Table:
    rt.delta_version(table)  # commit the emulator's WAL first
    return DeltaTable(table_uri(rt.config.warehouse, table)).to_pyarrow_table()


def streams_opened(rt: ZerobusRuntime, table: str = TABLE) -> int:
    emulator = rt.emulator
    assert emulator is not None
    return int(emulator.streams_opened(table))  # type: ignore[attr-defined]


# -- item 6: in-memory input is checked whole -----------------------------------------------------------


@pytest.mark.parametrize("container", [list, tuple])
def test_a_bad_second_batch_leaves_nothing_written_or_covered(
    runtime: ZerobusRuntime, container: type[list[pa.RecordBatch]] | type[tuple[pa.RecordBatch, ...]]
) -> None:
    data = container([batch(0, 100), batch(100, 100, id_type=pa.string())])
    with pytest.raises(ZerobusOrchestrationError) as failure:
        runtime.write(TABLE, data, source="orders")
    assert "'id'" in str(failure.value) and TABLE in str(failure.value)
    assert "Where: the input, rows 101 .. 200" in str(failure.value)
    runtime.flush()
    assert runtime.covered(TABLE, source="orders") == ()
    assert runtime.catalog.describe(TABLE) is None  # checked before the table was created: no empty table
    assert streams_opened(runtime) == 0  # not even a stream: nothing was submitted


def test_an_out_of_range_date_in_a_later_chunk_of_a_table_fails_the_whole_table(
    runtime: ZerobusRuntime,
) -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("day", pa.date32())])
    good = pa.RecordBatch.from_pylist([{"id": i, "day": date(2024, 1, 1)} for i in range(50)], schema=schema)
    bad = pa.RecordBatch.from_arrays(
        [pa.array([50, 51], pa.int64()), pa.array([0, -(2**31)], pa.int32()).view(pa.date32())], schema=schema
    )
    with pytest.raises(WriteBoundaryError) as failure:
        runtime.write(TABLE, pa.Table.from_batches([good, bad]), source="days")
    assert failure.value.kind == "out_of_range" and failure.value.column == "day"
    assert "Where: the input, row 52 (rows counted from 1)" in str(failure.value)
    runtime.flush()
    assert runtime.covered(TABLE, source="days") == ()
    assert runtime.catalog.describe(TABLE) is None
    # The warehouse is not bricked: a good write to the same table goes through and commits.
    assert runtime.write(TABLE, pa.Table.from_batches([good]), source="days").rows_written == 50
    assert delta_rows(runtime).num_rows == 50


def test_a_resumed_in_memory_write_is_checked_whole_too(runtime: ZerobusRuntime) -> None:
    runtime.write(TABLE, [batch(0, 50)], source="orders")
    retry = [batch(0, 100), batch(100, 100, id_type=pa.string())]  # resumes at 50, then a bad batch
    with pytest.raises(ZerobusOrchestrationError, match="'id'"):
        runtime.write(TABLE, retry, source="orders")
    runtime.flush()
    assert [(r.start, r.end) for r in runtime.covered(TABLE, source="orders")] == [(0, 50)]
    assert delta_rows(runtime).num_rows == 50


def test_send_of_in_memory_input_refused_by_the_gate_hands_back_no_receipts(runtime: ZerobusRuntime) -> None:
    sink = runtime.sink(TABLE, source="orders")
    with pytest.raises(ZerobusOrchestrationError, match="'id'") as failure:
        sink.send([batch(0, 100), batch(100, 100, id_type=pa.string())])
    assert not isinstance(failure.value, PartialSendError)  # nothing was submitted, so no receipts
    assert sink.finish()[0].rows == 0
    assert sink.send([batch(0, 100)])[0].span == OffsetRange(0, 100)  # the positions were handed back
    sink.flush()
    assert [(r.start, r.end) for r in runtime.covered(TABLE, source="orders")] == [(0, 100)]


def test_streamed_input_keeps_sending_batch_by_batch(runtime: ZerobusRuntime) -> None:
    """Documented: a generator is not held in memory, so the batches before the bad one are sent."""

    def stream() -> Iterator[pa.RecordBatch]:
        yield batch(0, 100)
        yield batch(100, 100, id_type=pa.string())

    with pytest.raises(ZerobusOrchestrationError, match="'id'"):
        runtime.write(TABLE, stream(), source="orders")
    runtime.flush()
    assert [(r.start, r.end) for r in runtime.covered(TABLE, source="orders")] == [(0, 100)]
    assert sorted(delta_rows(runtime).column(OFFSET).to_pylist()) == list(range(100))


def _dated(ids: range, day: pa.Array | None = None) -> pa.RecordBatch:
    """Rows of (id, day); ``day`` given: those days (e.g. one out of range), else 2024-01-01 each."""
    days = pa.array([date(2024, 1, 1)] * len(ids), pa.date32()) if day is None else day
    return pa.RecordBatch.from_arrays([pa.array(ids, pa.int64()), days], names=["id", "day"])


OUT_OF_RANGE_DAY = pa.array([0, -(2**31)], pa.int32()).view(pa.date32())  # the second before year 1


@pytest.mark.parametrize("table", [TABLE, "main.derived.orders"])  # raw re-reads the table first; derived not
def test_a_direct_push_whose_first_batch_does_not_fit_leaves_no_table(
    runtime: ZerobusRuntime, table: str
) -> None:
    """The sink creates its table at the first batch: a first batch the new table could not hold is
    refused before the CREATE, not after it (which left an empty table behind)."""
    sink = runtime.sink(table, source="days")
    with pytest.raises(WriteBoundaryError) as failure:
        sink.push(_dated(range(2), OUT_OF_RANGE_DAY))
    assert failure.value.kind == "out_of_range" and failure.value.column == "day"
    assert table in str(failure.value)
    assert runtime.catalog.describe(table) is None and runtime.catalog.locate(table) is None
    assert streams_opened(runtime, table) == 0
    sink.push(_dated(range(2, 12)))  # the same sink, a good batch: created and sent now
    sink.flush()
    assert sorted(delta_rows(runtime, table).column("id").to_pylist()) == list(range(2, 12))


def test_streamed_input_whose_first_batch_is_bad_leaves_no_table(runtime: ZerobusRuntime) -> None:
    def stream() -> Iterator[pa.RecordBatch]:
        yield _dated(range(2), OUT_OF_RANGE_DAY)
        yield _dated(range(2, 12))

    with pytest.raises(WriteBoundaryError, match="'day'"):
        runtime.write(TABLE, stream(), source="days")
    runtime.flush()
    assert runtime.catalog.describe(TABLE) is None
    assert runtime.covered(TABLE, source="days") == ()


def test_a_first_batch_that_does_not_fit_an_existing_table_changes_nothing(runtime: ZerobusRuntime) -> None:
    runtime.write(TABLE, [_dated(range(10))], source="days")
    before = runtime.delta_version(TABLE)
    sink = runtime.sink(TABLE, source="other")
    with pytest.raises(WriteBoundaryError, match="'day'"):
        sink.push(_dated(range(2), OUT_OF_RANGE_DAY))
    sink.flush()
    assert runtime.delta_version(TABLE) == before
    assert sorted(delta_rows(runtime).column("id").to_pylist()) == list(range(10))


# -- item 5: names that differ only in case are one table -----------------------------------------------


def test_names_differing_only_in_case_are_one_table_and_the_second_write_resumes(
    runtime: ZerobusRuntime,
) -> None:
    data = pa.Table.from_batches([batch(0, 200)])
    first = runtime.write("main.raw.Orders", data, source="orders")
    assert (first.table, first.rows_written) == (TABLE, 200)
    second = runtime.write("MAIN.raw.orders", data, source="orders")
    assert (second.rows_written, second.rows_skipped) == (0, 200)  # coverage is keyed by the folded name
    assert runtime.covered("main.RAW.ORDERS", source="orders") == runtime.covered(TABLE, source="orders")
    assert delta_rows(runtime, "main.raw.ORDERS").num_rows == 200
    tables = sorted(p.name for p in (Path(runtime.config.warehouse) / "main" / "raw").iterdir())
    assert tables == ["orders"]  # one Delta table, not Orders and orders


# -- item 4: a hostile name never lands in another table --------------------------------------------------


@pytest.mark.parametrize("hostile", ["main.raw.```orders```", "main.raw.`or``ders`", "main.raw.`a.b`"])
def test_hostile_backticked_names_are_refused_and_never_reach_another_table(
    runtime: ZerobusRuntime, hostile: str
) -> None:
    runtime.write(TABLE, [batch(0, 10)], source="victim")
    with pytest.raises(TableNameError, match="ASCII letters, digits and underscores"):
        runtime.write(hostile, [batch(10, 10)], source="attacker")
    assert delta_rows(runtime).num_rows == 10
    assert runtime.covered(TABLE, source="attacker") == ()


# -- item 9: names, columns and catalogs the warehouse cannot hold fail at once -------------------------


def test_a_255_character_table_part_fails_at_once_naming_the_rule(runtime: ZerobusRuntime) -> None:
    long_name = "main.raw." + "t" * 255
    with pytest.raises(TableNameError) as failure:
        runtime.write(long_name, [batch(0, 10)], source="orders")
    message = str(failure.value)
    assert "at most 255 bytes" in message and "write-ahead-log folder" in message and "Fix:" in message
    assert streams_opened(runtime, long_name) == 0  # refused before any stream (it used to hang 30 s)
    assert not (Path(runtime.config.warehouse) / "main" / "raw").exists()  # nor any table created


def test_the_state_folder_s_catalog_name_is_reserved(runtime: ZerobusRuntime) -> None:
    with pytest.raises(TableNameError, match="'_zerobus' is reserved"):
        runtime.write("_zerobus.wal.orders", [batch(0, 10)], source="orders")


def test_an_empty_column_name_is_refused_naming_the_table(runtime: ZerobusRuntime) -> None:
    unnamed = pa.table({"id": pa.array([1, 2], pa.int64()), "": pa.array(["x", "y"])})
    with pytest.raises(ConfigError, match="empty name") as failure:
        runtime.write(TABLE, unnamed, source="orders")
    assert TABLE in str(failure.value)
    nested = pa.table({"id": [1], "s": pa.array([{"": 1}], pa.struct([pa.field("", pa.int64())]))})
    with pytest.raises(ConfigError, match=r"struct field 's\.<empty>'"):
        runtime.write(TABLE, nested, source="orders")
    assert not DeltaTable.is_deltatable(table_uri(runtime.config.warehouse, TABLE))


def test_a_table_without_columns_is_refused(runtime: ZerobusRuntime) -> None:
    no_columns = pa.table({"id": [1, 2, 3]}).drop_columns(["id"])
    assert (no_columns.num_rows, no_columns.num_columns) == (3, 0)
    with pytest.raises(ConfigError, match="no columns of its own") as failure:
        runtime.write(TABLE, no_columns, source="orders")
    assert TABLE in str(failure.value)
    assert not DeltaTable.is_deltatable(table_uri(runtime.config.warehouse, TABLE))


# -- a row no Zerobus call can carry --------------------------------------------------------------------


def test_a_row_too_large_for_one_call_fails_at_once_instead_of_retrying_forever(
    runtime: ZerobusRuntime,
) -> None:
    """Sent, such a row exceeds the service's message limit, and the SDK retries RESOURCE_EXHAUSTED
    forever (the write hung silently). It is refused before anything of the input is sent."""
    docs = pa.array(["small"] * 10 + ["x" * MAX_CALL_BYTES])
    data = pa.table({"id": pa.array(range(11), pa.int64()), "doc": docs})
    with pytest.raises(WriteBoundaryError) as failure:
        runtime.write(TABLE, data, source="docs")
    assert (failure.value.column, failure.value.kind) == ("doc", ROW_TOO_LARGE)
    assert TABLE in str(failure.value) and "row position 10" in str(failure.value)
    runtime.flush()
    assert runtime.covered(TABLE, source="docs") == ()
    assert streams_opened(runtime) == 0  # nothing was submitted
