"""``InputCheck``: the sink's per-batch rules over a whole input, before anything is sent or created.

Against a real local catalog (delta-rs + SQLite): a refused input leaves no table; the refusal names the
file and the first refused row (bisected with the guard itself); the target is the live table's when it
exists and the planned one when it does not; the check's own conforms count no casts, and a refusal is
counted once in the write's metrics.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.catalog.guard import conform_batch
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.config import Role
from zerobus_orchestration.errors import ConfigError, PlanRefusedError, WriteBoundaryError
from zerobus_orchestration.files import Located
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.sink.input_check import NOTHING_SENT, InputCheck, checked

TABLE = "main.derived.checked"
BAD_DAY = 3_000_000  # days from 1970: about year 10183, beyond Delta's 9999-12-31


@pytest.fixture
def catalog(tmp_path: Path) -> LocalCatalog:
    return LocalCatalog(tmp_path / "warehouse")


def _check(catalog: LocalCatalog, metrics: SinkMetrics | None = None) -> InputCheck:
    gate = CatalogGate(catalog, Role.DERIVED, metrics=metrics)
    return InputCheck(
        TABLE,
        gate,
        source_tag="test",
        offset_column=None,
        max_batch_bytes=8 << 20,
        max_batch_rows=None,
        metrics=metrics,
    )


def _days(start: int, n: int, bad_at: int | None = None) -> pa.RecordBatch:
    days = list(range(start, start + n))
    if bad_at is not None:
        days[bad_at - start] = BAD_DAY
    return pa.record_batch(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "day": pa.array(days, pa.int32()).cast(pa.date32()),
        }
    )


def _file(path: str, total: int, per_batch: int, bad_at: int | None = None) -> Iterator[Located]:
    for start in range(0, total, per_batch):
        n = min(per_batch, total - start)
        inside = bad_at if bad_at is not None and start <= bad_at < start + n else None
        yield Located(_days(start, n, inside), path, start)


def test_a_bad_date_in_row_150000_of_200000_is_refused_naming_file_and_row(catalog: LocalCatalog) -> None:
    check = _check(catalog)
    with pytest.raises(WriteBoundaryError) as failure:
        check.check_all(_file("events.parquet", 200_000, 65_536, bad_at=149_999))
    message = str(failure.value)
    assert (failure.value.kind, failure.value.column, failure.value.table) == ("out_of_range", "day", TABLE)
    assert "Where: events.parquet, row 150,000 (rows counted from 1)" in message
    assert NOTHING_SENT in message
    assert catalog.describe(TABLE) is None  # planned, not created


def test_a_good_input_passes_and_creates_nothing(catalog: LocalCatalog) -> None:
    check = _check(catalog)
    check.check_all(_file("events.parquet", 10_000, 4_096))
    assert check.rows == 10_000
    assert catalog.describe(TABLE) is None


def test_an_existing_tables_declared_types_are_the_target(catalog: LocalCatalog) -> None:
    at = pa.timestamp("us", tz="UTC")
    declared = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("at", at)])
    CatalogGate(catalog, Role.DERIVED).ensure(TABLE, declared)
    version = catalog.describe(TABLE).version  # type: ignore[union-attr]
    nanos = [i * 1_000 for i in range(1000)]
    nanos[737] += 1  # a nanosecond TIMESTAMP (microseconds) would drop
    batch = pa.record_batch(
        {
            "id": pa.array(range(1000), pa.int64()),
            "at": pa.array(nanos, pa.int64()).cast(pa.timestamp("ns", "UTC")),
        }
    )
    with pytest.raises(WriteBoundaryError) as failure:
        _check(catalog).check_all([Located(batch, "events.arrow", 2_000)])
    assert failure.value.kind == "submicrosecond_loss"
    assert "Where: events.arrow, row 2,738" in str(failure.value)
    nulls = pa.record_batch({"id": pa.array([1, None, 3], pa.int64()), "at": pa.array([1, 2, 3], at)})
    with pytest.raises(WriteBoundaryError, match=r"Where: the input, row 2 \(") as failure:
        _check(catalog).check_all([Located(nulls, "the input", 0)])
    assert failure.value.kind == "null_into_not_null"
    assert catalog.describe(TABLE).version == version  # type: ignore[union-attr]


def test_a_type_mismatch_names_the_batchs_rows_not_a_row(catalog: LocalCatalog) -> None:
    CatalogGate(catalog, Role.DERIVED).ensure(TABLE, pa.schema([pa.field("id", pa.int64())]))
    batch = pa.record_batch({"id": pa.array(["a", "b"])})
    with pytest.raises(WriteBoundaryError, match=r"Where: x\.csv, rows 11 \.\. 12") as failure:
        _check(catalog).check_all([Located(batch, "x.csv", 10)])
    assert failure.value.kind == "type_mismatch"


def test_a_second_schema_the_table_would_refuse_is_refused_before_anything(catalog: LocalCatalog) -> None:
    first = pa.record_batch({"id": pa.array([1], pa.int64()), "n": pa.array([1], pa.int32())})
    second = pa.record_batch({"id": pa.array([2], pa.int64()), "n": pa.array([2], pa.int64())})
    with pytest.raises(PlanRefusedError, match="widening"):
        _check(catalog).check_all([Located(first, "a.parquet", 0), Located(second, "b.parquet", 0)])
    assert catalog.describe(TABLE) is None


def test_an_unreadable_input_is_refused_naming_the_table(catalog: LocalCatalog) -> None:
    def broken() -> Iterator[Located]:
        yield Located(_days(0, 10), "a.csv", 0)
        raise ConfigError("b.csv, column 'qty', row 3: the value 'x' is not a BIGINT")

    with pytest.raises(ConfigError, match=rf"^table {TABLE}: b\.csv, column 'qty'") as failure:
        _check(catalog).check_all(broken())
    assert NOTHING_SENT in str(failure.value)


def test_the_checks_conforms_count_no_casts_and_a_refusal_counts_once(catalog: LocalCatalog) -> None:
    metrics = SinkMetrics()
    CatalogGate(catalog, Role.DERIVED).ensure(TABLE, pa.schema([pa.field("id", pa.int64())]))
    narrow = pa.record_batch({"id": pa.array([1, 2], pa.int32())})  # cast int32 -> BIGINT, lossless
    check = _check(catalog, metrics)
    check.check_all([Located(narrow, "a", 0), Located(narrow, "a", 2)])

    def count(kind: str) -> float | None:
        return metrics.registry.get_sample_value(
            "zerobus_type_reconcile_total", {"table": TABLE, "kind": kind}
        )

    assert count("cast_integer") is None  # the send counts its casts, once per batch
    conform_batch(TABLE, narrow, pa.schema([pa.field("id", pa.int64())]), metrics=metrics)
    assert count("cast_integer") == 1
    text = pa.record_batch({"id": pa.array(["x"])})
    with pytest.raises(WriteBoundaryError):
        check.check_all([Located(text, "b", 0)])
    assert count("type_mismatch") == 1
    unreconcilable = metrics.registry.get_sample_value(
        "zerobus_type_unreconcilable_total", {"table": TABLE, "column": "id", "kind": "type_mismatch"}
    )
    assert unreconcilable == 1


def test_a_stream_has_the_first_batch_of_each_schema_checked_before_it_passes(catalog: LocalCatalog) -> None:
    check = _check(catalog)
    stream = check.first_of_each_schema(iter([_days(0, 5, bad_at=2)]))
    with pytest.raises(WriteBoundaryError, match=r"Where: the streamed input, row 3 ") as failure:
        next(stream)
    assert NOTHING_SENT in str(failure.value)
    assert catalog.describe(TABLE) is None
    # A later batch of a schema already checked passes through: the sink checks it as it sends it.
    later = _check(catalog).first_of_each_schema(iter([_days(0, 5), _days(5, 5, bad_at=7)]))
    assert [b.num_rows for b in later] == [5, 5]
    # A new schema after rows went out is checked too, but cannot claim nothing was sent.
    other = pa.record_batch({"id": pa.array(["x"])})
    mixed = _check(catalog).first_of_each_schema(iter([_days(0, 5), other]))
    next(mixed)
    with pytest.raises(WriteBoundaryError) as failure:
        next(mixed)
    assert NOTHING_SENT not in str(failure.value)


def test_in_memory_input_is_checked_whole_and_returned_as_is(catalog: LocalCatalog) -> None:
    table = pa.Table.from_batches([_days(0, 100), _days(100, 100, bad_at=150)])
    with pytest.raises(WriteBoundaryError, match="Where: the input, row 151 "):
        checked(table, _check(catalog))
    good = pa.Table.from_batches([_days(0, 100)])
    sendable, schema = checked(good, _check(catalog))
    assert sendable is good and schema == good.schema
