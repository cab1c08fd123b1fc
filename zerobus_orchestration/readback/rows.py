"""Reading the rows back through Iceberg: the raw rows of one source (and partition) in offset order
(``read_rows``), or any rows of a table (``scan_rows``), with the filter and the columns pushed down to
the scan so only the files and columns asked for are read (as ``dagster-deltalake`` does)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThanOrEqual,
    In,
    LessThan,
    Or,
)
from pyiceberg.table import Table as IcebergTable

from zerobus_orchestration import intervals
from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.readback.endpoint import IcebergEndpoint, require_columns
from zerobus_orchestration.readback.iceberg_views import plain_types
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
    where: Mapping[str, Sequence[Any]] | None = None,
) -> pa.Table:
    """The raw rows of one source (and partition), ordered by ``_twg_offset``, to replay a derived table.

    ``ranges`` limits the read to covered ranges; ``dedupe`` keeps one row per offset (at-least-once
    re-sends leave duplicates). Filtering by ``partition`` needs ``partition_column``. ``where``: more
    filters, ``{column: values}`` (a row is kept when each named column holds one of its values).
    """
    if partition is not None and partition_column is None:
        raise ConfigError(
            f"read_rows({table!r}, partition={partition!r}) needs partition_column: raw rows carry no "
            "partition of their own; name the payload column that holds the partition key"
        )
    loaded = endpoint.load_table(table)
    require_columns(loaded, table, [SOURCE, OFFSET, *([partition_column] if partition_column else [])])
    row_filter: BooleanExpression = And(EqualTo(term=SOURCE, value=source), _where(loaded, table, where))
    if partition is not None and partition_column is not None:
        row_filter = And(row_filter, EqualTo(term=partition_column, value=partition))
    if ranges is not None:
        merged = intervals.merge(ranges)
        if not merged:
            return plain_types(loaded.scan(row_filter=AlwaysFalse()).to_arrow())
        span_filter: BooleanExpression = _span(merged[0])
        for span in merged[1:]:
            span_filter = Or(span_filter, _span(span))
        row_filter = And(row_filter, span_filter)
    selected: tuple[str, ...] = ("*",)
    if columns is not None:
        selected = tuple(dict.fromkeys([*columns, OFFSET]))
    rows = plain_types(loaded.scan(row_filter=row_filter, selected_fields=selected).to_arrow())
    rows = rows.sort_by([(OFFSET, "ascending")])
    if dedupe and rows.num_rows > 1:
        offsets = rows.column(OFFSET).combine_chunks()
        first = pc.not_equal(offsets.slice(1), offsets.slice(0, len(offsets) - 1))
        rows = rows.filter(pa.concat_arrays([pa.array([True]), first.fill_null(True)]))
    return rows


def _span(span: OffsetRange) -> BooleanExpression:
    return And(GreaterThanOrEqual(term=OFFSET, value=span.start), LessThan(term=OFFSET, value=span.end))


def scan_rows(
    table: str,
    *,
    endpoint: IcebergEndpoint,
    where: Mapping[str, Sequence[Any]] | None = None,
    columns: Sequence[str] | None = None,
) -> pa.Table:
    """Rows of ``table`` through Iceberg: ``where`` (``{column: values}``) and ``columns`` are pushed
    down to the scan, so files whose statistics exclude the values and columns not asked for are not
    read. Values are given as the column's type or as text (``"2024-01-01"`` for a date column)."""
    loaded = endpoint.load_table(table)
    if columns is not None:
        require_columns(loaded, table, list(columns))
    selected: tuple[str, ...] = ("*",) if columns is None else tuple(dict.fromkeys(columns))
    return plain_types(
        loaded.scan(row_filter=_where(loaded, table, where), selected_fields=selected).to_arrow()
    )


def _where(loaded: IcebergTable, table: str, where: Mapping[str, Sequence[Any]] | None) -> BooleanExpression:
    """``column IN (values) AND ...``; an empty list of values keeps no row."""
    if not where:
        return AlwaysTrue()
    require_columns(loaded, table, list(where))
    expression: BooleanExpression = AlwaysTrue()
    for column, values in where.items():
        wanted = list(values)
        expression = And(expression, In(term=column, literals=wanted) if wanted else AlwaysFalse())
    return expression
