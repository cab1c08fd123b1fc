"""Delivered positions read from the raw table itself: the ground truth every host can read.

Every row the sink writes carries ``_twg_source`` (``write_modes.source_tag(source, partition)``) and
``_twg_offset`` (its position within that source and partition). So which positions of (source,
partition) are durable can be recomputed from the table alone, on any host, with the credentials a
write already has: the table's location from the catalog, storage options vended by the catalog where
it vends (Unity, s3 role vending), else the configured ones. See ``docs/adr/0002-coverage-home.md``.

The read goes through the Delta log: files whose ``_twg_source`` statistics exclude the tag are pruned
before any data is read, only ``_twg_offset`` is projected, and the rows are filtered on the tag
(Parquet row groups pruned by their statistics). A table whose protocol pyarrow datasets cannot read
(column mapping, deletion vectors) is read through deltalake's DataFusion engine instead.

The tag's statistics stop pruning once files mix sources (several writers at once: every file then
spans a wide range of tags), so a read that knows when the partition's rows can first have been emitted
(``emitted_since``) also prunes by ``_twg_emit_ts``: every file holds rows stamped within a few
commits of each other, so that statistic stays narrow however the sources mix, and the read costs
what the table received since then instead of its whole history (``docs/performance.md``). Files are
pruned, rows are not filtered by it (a file holding any row emitted since is read whole), except on
the DataFusion path, where the bound is also a row filter.

Rows visible in the table are durable, so what this returns never claims a row that is not.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import SecretStr

from zerobus_orchestration.catalog.base import TableCatalog
from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.errors import CatalogError, NotSupportedError
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.reserved import EMIT_TS, OFFSET, SOURCE
from zerobus_orchestration.storage import Access, config_storage_options, reveal, with_credentials
from zerobus_orchestration.tables import TableName
from zerobus_orchestration.write_modes import logical_partition, partition_of_tag, source_tag

if TYPE_CHECKING:
    import pyarrow.dataset as pa_dataset
    from deltalake import DeltaTable

log = logging.getLogger(__name__)


class TableTruthError(CatalogError):
    """The table's Delta log or files could not be read (permissions, a missing or damaged file)."""


@dataclass(frozen=True)
class TableReader:
    """How to read one table's Delta log. ``storage_options`` may hold secrets (never logged)."""

    table: str
    uri: str
    storage_options: Mapping[str, SecretStr]

    def __repr__(self) -> str:  # the options are secrets: name only their keys
        return f"TableReader(table={self.table!r}, uri={self.uri!r}, options={sorted(self.storage_options)})"


def reader_for(catalog: TableCatalog, config: ZerobusConfig, table: str) -> TableReader | None:
    """A reader of ``table`` as the catalog describes it now; ``None`` when the table does not exist."""
    name = TableName.parse(table).full_name
    state = catalog.locate(name)
    if state is None:
        return None
    if not state.location:
        raise CatalogError(
            f"table {name}: the catalog gives no storage location, so its delivered rows cannot be read. "
            "Fix: check the catalog entry of the table (Unity: storage_location)."
        )
    base = config_storage_options(config)
    if not state.registered:
        # A table this catalog has not registered (the local backend's registry is per state dir: a
        # table another host created) has nobody to vend for it: the writer's own storage options.
        options = base
    else:
        try:
            vended = catalog.vend_credentials(name, Access.READ)
        except NotSupportedError:
            options = base  # this backend does not vend
        else:
            options = with_credentials(base, vended)
    return TableReader(name, state.location, {k: SecretStr(v) for k, v in options.items()})


@dataclass(frozen=True)
class DeliveredRows:
    """What the table holds of one (source, partition): every ``_twg_offset`` (int64, unsorted,
    duplicates kept) and the earliest ``_twg_emit_ts`` among those rows (None when there is none)."""

    offsets: pa.Array
    first_emitted: dt.datetime | None


def delivered_offsets(
    reader: TableReader, *, source: str, partition: str = "", emitted_since: dt.datetime | None = None
) -> pa.Array:
    """Every ``_twg_offset`` of (source, partition) in the table, unsorted, duplicates kept (int64)."""
    return delivered_rows(reader, source=source, partition=partition, emitted_since=emitted_since).offsets


def delivered_rows(
    reader: TableReader,
    *,
    source: str,
    partition: str = "",
    emitted_since: dt.datetime | None = None,
    version: int | None = None,
) -> DeliveredRows:
    """The offsets of (source, partition) in the table and when the earliest of its rows was stamped.

    ``emitted_since``: no row of (source, partition) was stamped before it; files whose ``_twg_emit_ts``
    statistics hold only earlier rows are not read (see the module docstring). ``version``: the
    snapshot of that Delta version (time travel), else the latest."""
    return tag_rows(reader, source_tag(source, partition), emitted_since=emitted_since, version=version)


def tag_rows(
    reader: TableReader, tag: str, *, emitted_since: dt.datetime | None = None, version: int | None = None
) -> DeliveredRows:
    """``delivered_rows`` of one ``_twg_source`` tag (``write_modes.source_tag``), at ``version``."""
    import pyarrow.dataset as ds  # loads pandas (~0.4 s): only a table-truth read pays for it
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    at = "" if version is None else f" at version {version}"
    try:
        options = reveal(reader.storage_options) or None
        table = DeltaTable(reader.uri, version=version, storage_options=options)
        # Every table the sink writes has the column; one written otherwise is read without it.
        stamped = any(field.name == EMIT_TS for field in table.schema().fields)
        since = emitted_since if stamped else None
        prune: list[tuple[str, str, object]] = [(SOURCE, "=", tag)]
        if since is not None:
            prune.append((EMIT_TS, ">=", since.astimezone(dt.UTC)))
        dataset = _pyarrow_dataset(table, file_pruning_predicate=prune)
        columns = [OFFSET, EMIT_TS] if stamped else [OFFSET]
        if dataset is None:
            rows = _rows_via_datafusion(table, tag, columns, since)
        else:
            rows = dataset.to_table(columns=columns, filter=ds.field(SOURCE) == tag)
        offsets = pc.cast(rows.column(OFFSET).combine_chunks(), pa.int64())
        earliest = pc.min(rows.column(EMIT_TS)).as_py() if stamped and rows.num_rows else None
    except (DeltaError, OSError, pa.ArrowException) as exc:
        raise TableTruthError(
            f"table {reader.table}: cannot read {SOURCE}/{OFFSET}{at} at {reader.uri}: {exc}"
        ) from exc
    return DeliveredRows(offsets, earliest)


def delivered_ranges(
    reader: TableReader, *, source: str, partition: str = "", emitted_since: dt.datetime | None = None
) -> tuple[OffsetRange, ...]:
    """Positions of (source, partition) visible in the table, merged: sorted, disjoint, non-adjacent."""
    offsets = delivered_offsets(reader, source=source, partition=partition, emitted_since=emitted_since)
    return offsets_to_ranges(offsets)


def source_tag_counts(reader: TableReader, *, prefix: str) -> dict[str, int]:
    """Rows per distinct ``_twg_source`` value in the table that starts with ``prefix``."""
    import pyarrow.dataset as ds  # loads pandas (~0.4 s): only a table-truth read pays for it
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    try:
        table = DeltaTable(reader.uri, storage_options=reveal(reader.storage_options) or None)
        dataset = _pyarrow_dataset(table)
        if dataset is None:
            tags = _tags_via_datafusion(table, prefix)
        else:
            wanted = pc.starts_with(ds.field(SOURCE), pattern=prefix)
            tags = dataset.to_table(columns=[SOURCE], filter=wanted).column(SOURCE)
    except (DeltaError, OSError, pa.ArrowException) as exc:
        raise TableTruthError(f"table {reader.table}: cannot read {SOURCE} at {reader.uri}: {exc}") from exc
    counts = pc.value_counts(tags.combine_chunks() if isinstance(tags, pa.ChunkedArray) else tags)
    return {str(c["values"]): int(c["counts"]) for c in counts.to_pylist() if c["values"] is not None}


@dataclass(frozen=True)
class HeldTwice:
    """One tag's positions held more than once: the merged ranges and the extra copies (rows beyond
    one per position)."""

    ranges: tuple[OffsetRange, ...]
    extra_rows: int


def positions_held_twice(reader: TableReader, *, prefix: str) -> dict[str, HeldTwice]:
    """Per ``_twg_source`` tag starting with ``prefix`` (``""``: every tag), the positions the table
    holds more than once (at-least-once re-sends). Reads the two reserved columns of those rows."""
    rows = _rows_of_tags(reader, prefix, [SOURCE, OFFSET])
    rows = pa.table({"tag": rows.column(SOURCE), "at": pc.cast(rows.column(OFFSET), pa.int64())})
    counts = rows.group_by(["tag", "at"]).aggregate([([], "count_all")])
    twice = counts.filter(pc.greater(counts["count_all"], 1))
    found: dict[str, HeldTwice] = {}
    for tag in sorted(str(t) for t in pc.unique(twice["tag"]).to_pylist() if t is not None):
        mine = twice.filter(pc.equal(twice["tag"], tag))
        extra = int(pc.sum(pc.subtract(mine["count_all"], 1)).as_py() or 0)
        found[tag] = HeldTwice(offsets_to_ranges(mine["at"].combine_chunks()), extra)
    return found


def first_stamps(reader: TableReader, *, prefix: str) -> dict[str, dt.datetime | None]:
    """Per ``_twg_source`` tag starting with ``prefix``, when its earliest row was stamped (``None`` in a
    table without ``_twg_emit_ts``): how runs of one source are told apart in time."""
    from deltalake import DeltaTable

    table = DeltaTable(reader.uri, storage_options=reveal(reader.storage_options) or None)
    stamped = any(field.name == EMIT_TS for field in table.schema().fields)
    rows = _rows_of_tags(reader, prefix, [SOURCE, EMIT_TS] if stamped else [SOURCE])
    if not stamped:
        return {str(t): None for t in pc.unique(rows.column(SOURCE)).to_pylist() if t is not None}
    first = rows.group_by([SOURCE]).aggregate([(EMIT_TS, "min")])
    return {
        str(tag): stamp
        for tag, stamp in zip(first[SOURCE].to_pylist(), first[f"{EMIT_TS}_min"].to_pylist(), strict=True)
        if tag is not None
    }


def _rows_of_tags(reader: TableReader, prefix: str, columns: list[str]) -> pa.Table:
    """``columns`` of the rows whose ``_twg_source`` starts with ``prefix``, plain types."""
    import pyarrow.dataset as ds  # loads pandas (~0.4 s): only a table-truth read pays for it
    from deltalake import DeltaTable, QueryBuilder
    from deltalake.exceptions import DeltaError

    try:
        table = DeltaTable(reader.uri, storage_options=reveal(reader.storage_options) or None)
        dataset = _pyarrow_dataset(table)
        if dataset is None:
            where = f'starts_with("{SOURCE}", {_sql_string(prefix)})'
            selected = ", ".join(f'"{c}"' for c in columns)
            query = f"SELECT {selected} FROM raw WHERE {where}"
            rows = pa.table(QueryBuilder().register("raw", table).execute(query).read_all())
        else:
            wanted = pc.starts_with(ds.field(SOURCE), pattern=prefix)
            rows = dataset.to_table(columns=columns, filter=wanted)
    except (DeltaError, OSError, pa.ArrowException) as exc:
        raise TableTruthError(f"table {reader.table}: cannot read {columns} at {reader.uri}: {exc}") from exc
    # DataFusion answers with view types (Utf8View), which pyarrow cannot compare, filter or sort.
    return rows.set_column(0, SOURCE, pc.cast(rows.column(SOURCE), pa.string()))


def other_runs(reader: TableReader, *, source: str, partition: str, replace_key: str) -> dict[str, int]:
    """Rows per tag of the other runs of logical partition ``replace_key`` (not ``partition``'s own).

    Two runs of one logical partition in a table written with ``replace`` are duplicates until the
    replace deletes the older one (``runtime/supersede.py``).
    """
    own = source_tag(source, partition)
    prefix = source_tag(source, replace_key)[:-1] if replace_key else source
    found = source_tag_counts(reader, prefix=prefix)
    same: dict[str, int] = {}
    for tag, rows in sorted(found.items()):
        part = partition_of_tag(tag, source)
        if tag != own and part is not None and logical_partition(part) == replace_key:
            same[tag] = rows
    return same


def table_version(reader: TableReader) -> int:
    """The table's latest Delta version (cheap: the log only); the catch-up polls it."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    try:
        return int(DeltaTable(reader.uri, storage_options=reveal(reader.storage_options) or None).version())
    except (DeltaError, OSError) as exc:
        raise TableTruthError(
            f"table {reader.table}: cannot read the Delta log at {reader.uri}: {exc}"
        ) from exc


# Commits that can make rows disappear (Delta operation names, delta-rs and Databricks spell them alike).
ROW_REMOVALS = frozenset({"DELETE", "MERGE", "UPDATE", "RESTORE", "TRUNCATE"})


@dataclass(frozen=True)
class RowRemoval:
    """A commit that can have removed rows: its version, operation and commit time (ms since the epoch,
    the committer's clock; ``None`` when the commit info carries none)."""

    version: int
    operation: str
    timestamp_ms: int | None


@dataclass(frozen=True)
class Removals:
    """The row-removing commits among the versions ``(after, latest]`` of the log, oldest first, and the
    commit time of version ``after + 1`` (``None``: unknown, or no such version)."""

    after: int
    latest: int
    commits: tuple[RowRemoval, ...]
    first_ms: int | None


def row_removals(reader: TableReader, *, after: int) -> Removals:
    """The commits after version ``after`` whose operation can remove rows (``ROW_REMOVALS``).

    Reads the commit infos of those versions only (the log's history, newest first, down to
    ``after + 1``), not their data. What a removal took is judged by the rows at the versions around
    it, not by the predicate it recorded (delta-rs and Databricks record it differently).
    """
    from deltalake import DeltaTable

    try:
        table = DeltaTable(reader.uri, storage_options=reveal(reader.storage_options) or None)
        latest = int(table.version())
        history = table.history(limit=max(1, latest - after))
    except Exception as exc:  # a log delta-rs cannot read (deltalake raises its own exception types)
        raise TableTruthError(
            f"table {reader.table}: cannot read the Delta log's history at {reader.uri}: {exc}"
        ) from exc
    removals: list[RowRemoval] = []
    first_ms: int | None = None
    for commit in history:
        raw_version, stamp = commit.get("version"), commit.get("timestamp")
        if raw_version is None or not after < int(raw_version) <= latest:
            continue
        version = int(raw_version)
        if version == after + 1 and stamp is not None:
            first_ms = int(stamp)
        operation = str(commit.get("operation", "")).upper()
        if operation in ROW_REMOVALS:
            removals.append(RowRemoval(version, operation, None if stamp is None else int(stamp)))
    removals.sort(key=lambda removal: removal.version)
    return Removals(after, latest, tuple(removals), first_ms)


def offsets_to_ranges(offsets: pa.Array) -> tuple[OffsetRange, ...]:
    """Distinct positions merged into half-open ranges (vectorised: millions of offsets in milliseconds)."""
    values = offsets.drop_null().to_numpy(zero_copy_only=False)
    if values.size == 0:
        return ()
    ordered = np.sort(values)  # sort + neighbour compare: several times faster than np.unique here
    ordered = ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]
    breaks = np.flatnonzero(np.diff(ordered) != 1)
    starts = ordered[np.concatenate(([0], breaks + 1))]
    ends = ordered[np.concatenate((breaks, [ordered.size - 1]))] + 1
    return tuple(OffsetRange(int(s), int(e)) for s, e in zip(starts.tolist(), ends.tolist(), strict=True))


def _pyarrow_dataset(table: DeltaTable, **kwargs: Any) -> pa_dataset.Dataset | None:
    """The table as a pyarrow dataset, or ``None`` when only DataFusion reads it right.

    Deletion vectors: deltalake refuses the dataset (``DeltaProtocolError``). Column mapping: deltalake
    hands one out whose columns read as all NULL, silently (its files name columns by physical name;
    delta-io/delta-rs#1814), so a truth read would claim nothing was delivered. DataFusion reads both.
    """
    from deltalake.exceptions import DeltaProtocolError

    mode = str(table.metadata().configuration.get("delta.columnMapping.mode", "none")).lower()
    if mode in ("name", "id"):
        return None
    try:
        return table.to_pyarrow_dataset(**kwargs)
    except DeltaProtocolError:
        return None


def _rows_via_datafusion(
    table: DeltaTable, tag: str, columns: list[str], emitted_since: dt.datetime | None
) -> pa.Table:
    from deltalake import QueryBuilder

    where = f'"{SOURCE}" = {_sql_string(tag)}'
    if emitted_since is not None:
        # DataFusion prunes files by this predicate's statistics too. As a row filter it drops only rows
        # stamped before the bound, which by the bound's definition are not this partition's.
        stamp = emitted_since.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        where += f" AND \"{EMIT_TS}\" >= arrow_cast('{stamp}', 'Timestamp(Microsecond, Some(\"UTC\"))')"
    selected = ", ".join(f'"{column}"' for column in columns)
    query = f"SELECT {selected} FROM raw WHERE {where}"
    return pa.table(QueryBuilder().register("raw", table).execute(query).read_all())


def _tags_via_datafusion(table: DeltaTable, prefix: str) -> pa.Array:
    where = f'starts_with("{SOURCE}", {_sql_string(prefix)})'
    return _column_via_datafusion(table, SOURCE, where, pa.string())


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"  # a SQL string literal: the only escape it needs


def _column_via_datafusion(table: DeltaTable, column: str, where: str, empty_type: pa.DataType) -> pa.Array:
    """One column of the rows matching ``where``, through deltalake's DataFusion engine (it reads the
    protocols pyarrow datasets cannot)."""
    from deltalake import QueryBuilder

    query = f'SELECT "{column}" FROM raw WHERE {where}'
    rows = pa.table(QueryBuilder().register("raw", table).execute(query).read_all())
    if rows.num_rows == 0:
        return pa.array([], empty_type)
    # DataFusion answers with view types (Utf8View), which pyarrow cannot compare, filter or sort.
    return pc.cast(rows.column(column).combine_chunks(), empty_type)
