"""Reading the rows back: the raw rows of one source (and partition) through Iceberg, in offset order."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import (
    AlwaysFalse,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThanOrEqual,
    LessThan,
    Or,
)

from zerobus_orchestration import intervals
from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.readback.endpoint import IcebergEndpoint, require_columns
from zerobus_orchestration.reserved import OFFSET, SOURCE


def read_rows(
    table: str,
    *,
    source: str,
    partition: str | None = None,
    endpoint: IcebergEndpoint,
    partition_column: str | None = None,
    ranges: Sequence[OffsetRange] | None = None,
    columns: Sequence[str] | None = None,
    dedupe: bool = True,
) -> pa.Table:
    """The raw rows of one source (and partition), ordered by ``_twg_offset``, to replay a derived table.

    ``ranges`` limits the read to covered ranges; ``dedupe`` keeps one row per offset (at-least-once
    re-sends leave duplicates). Filtering by ``partition`` needs ``partition_column``.
    """
    if partition is not None and partition_column is None:
        raise ConfigError(
            f"read_rows({table!r}, partition={partition!r}) needs partition_column: raw rows carry no "
            "partition of their own; name the payload column that holds the partition key"
        )
    loaded = endpoint.load_table(table)
    require_columns(loaded, table, [SOURCE, OFFSET, *([partition_column] if partition_column else [])])
    row_filter: BooleanExpression = EqualTo(term=SOURCE, value=source)
    if partition is not None and partition_column is not None:
        row_filter = And(row_filter, EqualTo(term=partition_column, value=partition))
    if ranges is not None:
        merged = intervals.merge(ranges)
        if not merged:
            return loaded.scan(row_filter=AlwaysFalse()).to_arrow()
        span_filter: BooleanExpression = _span(merged[0])
        for span in merged[1:]:
            span_filter = Or(span_filter, _span(span))
        row_filter = And(row_filter, span_filter)
    selected: tuple[str, ...] = ("*",)
    if columns is not None:
        selected = tuple(dict.fromkeys([*columns, OFFSET]))
    rows = loaded.scan(row_filter=row_filter, selected_fields=selected).to_arrow()
    rows = rows.sort_by([(OFFSET, "ascending")])
    if dedupe and rows.num_rows > 1:
        offsets = rows.column(OFFSET).combine_chunks()
        first = pc.not_equal(offsets.slice(1), offsets.slice(0, len(offsets) - 1))
        rows = rows.filter(pa.concat_arrays([pa.array([True]), first.fill_null(True)]))
    return rows


def _span(span: OffsetRange) -> BooleanExpression:
    return And(GreaterThanOrEqual(term=OFFSET, value=span.start), LessThan(term=OFFSET, value=span.end))
