"""The guard's per-schema plan (issue 15 item 2): what the schemas decide is worked out once per schema.

The sink's batches of one write share a schema, so the guard caches which columns need a per-value
check. These tests pin that the cache never makes it less strict for the caller's columns (second
and later batches of a cached schema are refused exactly as the first), that only engine-stamped
reserved columns skip the per-value range scan, and that a batch needing nothing comes back as is.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.catalog.guard import (
    NULL_INTO_NOT_NULL,
    OUT_OF_RANGE,
    UNKNOWN_COLUMN,
    conform_batch,
)
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.errors import WriteBoundaryError
from zerobus_orchestration.reserved import EMIT_TS, OFFSET, RESERVED_FIELDS, RESERVED_NAMES, SOURCE
from zerobus_orchestration.sink.stamping import STAMPED_FIELDS

T = "main.raw.plan_events"
TS = pa.timestamp("us", tz="UTC")
TOO_LATE = 400_000_000_000_000_000  # microseconds since 1970: about year 14,700, beyond 9999-12-31
NOW_US = int(datetime(2026, 12, 1, tzinfo=UTC).timestamp() * 1_000_000)


def stamped(ts: list[int | None], ids: list[int | None], *, emit: int = NOW_US) -> pa.RecordBatch:
    """A batch as the sink stamps it: caller columns ``id``, ``ts`` plus the reserved columns."""
    n = len(ids)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(ids, pa.int64()),
            pa.array(ts, TS),
            pa.array([emit] * n, TS),
            pa.array(["src"] * n, pa.large_string()),
            pa.array(range(n), pa.int64()),
        ],
        schema=pa.schema([pa.field("id", pa.int64()), pa.field("ts", TS), *STAMPED_FIELDS]),
    )


TARGET = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("ts", TS), *RESERVED_FIELDS])
STAMPED = frozenset(RESERVED_NAMES)


def test_a_batch_needing_no_cast_comes_back_as_is() -> None:
    # As the sink stamps it: the caller's columns in their declared types, which are their wire types
    # here, and the reserved ones in theirs (the source tag as large_utf8).
    batch = stamped([NOW_US, NOW_US], [1, 2])
    assert conform_batch(T, batch, TARGET.set(0, pa.field("id", pa.int64()))) is batch


def test_a_string_in_its_declared_type_goes_out_as_large_utf8_over_the_same_data_buffer() -> None:
    batch = stamped([NOW_US], [1])
    declared_source = batch.set_column(3, RESERVED_FIELDS[1], pa.array(["src"], pa.string()))
    out = conform_batch(T, declared_source, TARGET.set(0, pa.field("id", pa.int64())))
    assert out.schema.field(SOURCE).type == pa.large_string() and out.column(SOURCE).to_pylist() == ["src"]
    assert out.column(SOURCE).buffers()[2].address == declared_source.column(SOURCE).buffers()[2].address


@pytest.mark.parametrize("trusted", [frozenset(), STAMPED])
def test_a_caller_column_out_of_range_is_refused_on_every_batch_of_a_cached_schema(
    trusted: frozenset[str],
) -> None:
    conform_batch(T, stamped([NOW_US], [1]), TARGET, trusted=trusted)  # plans the schema
    for _ in range(2):
        with pytest.raises(WriteBoundaryError) as info:
            conform_batch(T, stamped([NOW_US, TOO_LATE], [1, 2]), TARGET, trusted=trusted)
        err = info.value
        assert (err.table, err.column, err.kind) == (T, "ts", OUT_OF_RANGE)
        assert "row 1 of the batch (row position 1)" in str(err) and "Fix:" in str(err)


def test_nulls_into_a_not_null_caller_column_are_refused_on_a_cached_schema() -> None:
    conform_batch(T, stamped([NOW_US], [1]), TARGET, trusted=STAMPED)
    with pytest.raises(WriteBoundaryError) as info:
        conform_batch(T, stamped([NOW_US, NOW_US], [1, None]), TARGET, trusted=STAMPED)
    assert (info.value.table, info.value.column, info.value.kind) == (T, "id", NULL_INTO_NOT_NULL)
    assert "fill or filter the nulls" in str(info.value)


def test_trust_covers_reserved_names_only_never_a_caller_column() -> None:
    with pytest.raises(WriteBoundaryError) as info:
        conform_batch(T, stamped([TOO_LATE], [1]), TARGET, trusted=frozenset({"ts", *STAMPED}))
    assert (info.value.column, info.value.kind) == ("ts", OUT_OF_RANGE)


def test_untrusted_reserved_columns_are_still_scanned() -> None:
    # conform_batch's default is strict: a batch that did not come from the sink's stamper is checked whole.
    with pytest.raises(WriteBoundaryError) as info:
        conform_batch(T, stamped([NOW_US], [1], emit=TOO_LATE), TARGET)
    assert (info.value.column, info.value.kind) == (EMIT_TS, OUT_OF_RANGE)


def test_the_gate_scans_caller_timestamps_but_not_its_own_stamp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = CatalogGate(LocalCatalog(tmp_path / "warehouse"), check_preconditions=False)
    batch = stamped([NOW_US, NOW_US], [1, 2])
    target = gate.ensure(T, batch.schema)
    scanned: list[int] = []
    real_min_max = pc.min_max

    def counting_min_max(values: pa.Array) -> pa.StructScalar:
        scanned.append(len(values))
        return real_min_max(values)

    monkeypatch.setattr(pc, "min_max", counting_min_max)  # what catalog/temporal_range.py calls
    out = gate.conform(T, batch, target)
    assert out.num_rows == 2 and out.column(EMIT_TS).equals(batch.column(EMIT_TS))
    assert len(scanned) == 1  # ``ts`` only: the caller's column, not ``_twg_emit_ts``


def test_casts_and_unknown_columns_behave_alike_on_a_cached_schema() -> None:
    narrow = pa.RecordBatch.from_arrays(
        [pa.array([1, 2], pa.int32()), pa.array([0, 1], pa.int64())],
        schema=pa.schema([pa.field("id", pa.int32()), pa.field(OFFSET, pa.int64())]),
    )
    target = pa.schema(
        [pa.field("id", pa.int64()), pa.field(OFFSET, pa.int64()), pa.field(SOURCE, pa.string())]
    )
    for _ in range(2):
        out = conform_batch(T, narrow, target)
        assert out.schema == pa.schema(list(target)[:2]) and out.column("id").type == pa.int64()
    extra = narrow.append_column("surprise", pa.array([1, 2]))
    for _ in range(2):
        with pytest.raises(WriteBoundaryError) as info:
            conform_batch(T, extra, target)
        assert (info.value.column, info.value.kind) == ("surprise", UNKNOWN_COLUMN)


def test_schema_metadata_is_kept_per_batch_schema() -> None:
    batch = stamped([NOW_US], [1])
    a = batch.replace_schema_metadata({"origin": "a"})
    b = batch.replace_schema_metadata({"origin": "b"})
    assert conform_batch(T, a, TARGET).schema.metadata == {b"origin": b"a"}
    assert conform_batch(T, b, TARGET).schema.metadata == {b"origin": b"b"}
