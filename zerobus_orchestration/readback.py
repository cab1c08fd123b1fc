"""Read-back: prove through Iceberg that every range coverage recorded as delivered is in the table.

One code path for both modes: pyiceberg's ``RestCatalog`` against the emulator's read-only facade
locally, or against Unity Catalog's Iceberg REST endpoint in production (warehouse = catalog name,
identifier = ``<schema>.<table>``).

Iceberg visibility lags the Delta commit (Zerobus time-to-table plus the asynchronous UniForm
conversion), so read-back first waits until the Iceberg side reflects at least the Delta version the
writer observed. It polls a ``VisibilityProbe`` with exponential backoff up to a deadline and never
sleeps a fixed time: locally the probe reads the snapshot summary's ``delta-version``; in production the
caller passes a probe reading Unity Catalog's ``converted_delta_version``. With ``force=True`` the
embedded facade is asked to convert now instead.

Rows are matched to coverage by the engine-owned columns ``_twg_source`` and ``_twg_offset``. The raw
table carries no partition column of its own; when sources are written per partition, pass
``partition_column`` naming the payload column that holds the partition key, otherwise rows of one
source are matched regardless of partition.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import SecretStr
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.expressions import (
    AlwaysFalse,
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
from zerobus_orchestration.config import ReadbackConfig
from zerobus_orchestration.errors import ConfigError, ReadbackError, ReadbackTimeoutError
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.reserved import OFFSET, SOURCE
from zerobus_orchestration.tables import TableName

DELTA_VERSION_KEY: Final = "delta-version"  # what the emulator's mirror writes in the snapshot summary
SYNC_ROUTE: Final = "/zerobus/v1/sync/"  # the embedded facade's non-standard "convert now" endpoint
DEFAULT_SAMPLE_SIZE: Final = 10


# --------------------------------------------------------------------- where to read


@dataclass(frozen=True)
class IcebergEndpoint:
    """An Iceberg REST catalog shaped like Unity Catalog's (warehouse = catalog name).

    ``uri`` is the REST base, e.g. ``http://127.0.0.1:PORT/api/2.1/unity-catalog/iceberg-rest`` or
    ``https://<workspace>/api/2.1/unity-catalog/iceberg-rest``.
    """

    uri: str
    token: SecretStr | None = None
    properties: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: ReadbackConfig, *, default_uri: str | None = None) -> IcebergEndpoint:
        uri = config.iceberg_rest_uri or default_uri
        if not uri:
            raise ConfigError(
                "zerobus.readback.iceberg_rest_uri is not set: point it at the emulator's Iceberg REST "
                "facade or <workspace>/api/2.1/unity-catalog/iceberg-rest"
            )
        return cls(uri=uri.rstrip("/"), token=config.token)

    def catalog(self, warehouse: str) -> RestCatalog:
        """A pyiceberg RestCatalog for one Unity Catalog catalog."""
        properties: dict[str, str] = {"uri": self.uri, "warehouse": warehouse, **self.properties}
        if self.token is not None:
            properties["token"] = self.token.get_secret_value()
        return RestCatalog(f"zerobus-{warehouse}", **properties)

    def load_table(self, table: str) -> IcebergTable:
        name = TableName.parse(table)
        loaded: IcebergTable = self.catalog(name.catalog).load_table((name.schema, name.table))
        return loaded

    def force_sync(self, table: str, timeout_s: float = 60.0) -> int:
        """Ask the embedded facade to convert ``table`` now; returns the Delta version it reflects."""
        name = TableName.parse(table)
        url = self.uri.rstrip("/") + SYNC_ROUTE + quote(name.full_name, safe="")
        request = urllib.request.Request(url, data=b"", method="POST")
        if self.token is not None:
            request.add_header("Authorization", f"Bearer {self.token.get_secret_value()}")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                payload: dict[str, Any] = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            if exc.code in (404, 405) and "NoSuchTableException" not in detail:
                raise ReadbackError(
                    f"read-back of {table}: force=True needs the embedded emulator's Iceberg REST facade, "
                    f"and {self.uri} has no sync endpoint (HTTP {exc.code}); in production wait for the "
                    "UniForm conversion instead (force=False)"
                ) from exc
            raise ReadbackError(
                f"read-back of {table}: forcing Iceberg metadata failed with HTTP {exc.code}: {detail}"
            ) from exc
        return int(payload["delta_version"])


# --------------------------------------------------------------------- visibility


class VisibilityProbe(Protocol):
    """Which Delta version the Iceberg side of ``table`` reflects; ``None`` while it is not visible."""

    def converted_delta_version(self, table: str) -> int | None: ...


class SnapshotSummaryProbe:
    """The embedded probe: ``delta-version`` in the current snapshot summary, read through REST."""

    def __init__(self, endpoint: IcebergEndpoint) -> None:
        self._endpoint = endpoint
        self._catalogs: dict[str, Catalog] = {}

    def converted_delta_version(self, table: str) -> int | None:
        name = TableName.parse(table)
        catalog = self._catalogs.get(name.catalog)
        if catalog is None:
            catalog = self._catalogs[name.catalog] = self._endpoint.catalog(name.catalog)
        try:
            loaded = catalog.load_table((name.schema, name.table))
        except (NoSuchTableError, NoSuchNamespaceError):
            return None  # not mirrored yet: "not visible", not an error
        return summary_delta_version(loaded)


@dataclass(frozen=True)
class CallableProbe:
    """Adapts a plain callable, e.g. one reading UC's ``delta_uniform_iceberg.converted_delta_version``."""

    fn: Callable[[str], int | None]

    def converted_delta_version(self, table: str) -> int | None:
        return self.fn(table)


def summary_delta_version(table: IcebergTable) -> int | None:
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return None
    raw = snapshot.summary.additional_properties.get(DELTA_VERSION_KEY)
    return int(raw) if raw is not None else None


@dataclass(frozen=True)
class WaitPolicy:
    """Deadline and exponential backoff for waiting on Iceberg visibility."""

    timeout_s: float = 120.0
    initial_s: float = 0.2
    max_s: float = 5.0

    def __post_init__(self) -> None:
        if self.timeout_s <= 0 or self.initial_s <= 0 or self.max_s < self.initial_s:
            raise ConfigError(
                f"invalid read-back wait policy {self}: need timeout_s > 0 and 0 < initial_s <= max_s"
            )

    @classmethod
    def from_config(cls, config: ReadbackConfig) -> WaitPolicy:
        return cls(
            timeout_s=config.wait_timeout_s,
            initial_s=config.poll_initial_s,
            max_s=max(config.poll_max_s, config.poll_initial_s),
        )


@dataclass(frozen=True)
class Visibility:
    delta_version: int
    waited_s: float
    polls: int


def wait_for_delta_version(
    probe: VisibilityProbe, table: str, min_version: int, policy: WaitPolicy = WaitPolicy()
) -> Visibility:
    """Poll ``probe`` with exponential backoff until it reports ``>= min_version``.

    Raises ``ReadbackTimeoutError`` at the deadline, naming the table, the version waited for and the
    version last seen.
    """
    start = time.monotonic()
    deadline = start + policy.timeout_s
    delay = policy.initial_s
    polls = 0
    while True:
        seen = probe.converted_delta_version(table)
        polls += 1
        now = time.monotonic()
        if seen is not None and seen >= min_version:
            return Visibility(delta_version=seen, waited_s=now - start, polls=polls)
        if now >= deadline:
            shown = "the table is not visible in Iceberg yet" if seen is None else f"Delta version {seen}"
            raise ReadbackTimeoutError(
                f"read-back of {table}: Iceberg metadata did not reach Delta version {min_version} within "
                f"{policy.timeout_s:g}s (last seen: {shown}); raise zerobus.readback.wait_timeout_s, or "
                "check the UniForm conversion (converted_delta_version) / the emulator's Iceberg mirror"
            )
        time.sleep(min(delay, max(deadline - now, 0.0)))
        delay = min(delay * 2, policy.max_s)


# --------------------------------------------------------------------- coverage check


@dataclass(frozen=True)
class MissingRange:
    key: CoverageKey
    span: OffsetRange


@dataclass(frozen=True)
class RowRef:
    """A (source, partition, offset) seen in the table; ``count`` > 1 for duplicates."""

    source: str
    offset: int
    partition: str | None = None
    count: int = 1


@dataclass(frozen=True)
class CoverageCheck:
    missing: tuple[MissingRange, ...]
    duplicate_count: int
    duplicate_sample: tuple[RowRef, ...]
    rows_outside_coverage: int
    outside_sample: tuple[RowRef, ...]


_SRC, _OFF, _PART = "source", "offset", "partition"


def check_coverage(
    rows: pa.Table,
    coverage: Mapping[CoverageKey, Sequence[OffsetRange]],
    *,
    partition_column: str | None = None,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
) -> CoverageCheck:
    """Compare scanned ``rows`` (``_twg_source``, ``_twg_offset``[, partition]) with coverage ranges.

    Missing: covered offsets with no row. Duplicates: extra rows per (source[, partition], offset),
    expected only from at-least-once re-sends. Outside: rows of a covered source whose offset no range
    covers. Only sources named in ``coverage`` are considered.
    """
    normalised = _normalise_rows(rows, partition_column)
    by_group: dict[tuple[str, str | None], list[tuple[CoverageKey, Sequence[OffsetRange]]]] = {}
    for key, spans in coverage.items():
        group = (key.source, key.partition if partition_column else None)
        by_group.setdefault(group, []).append((key, spans))

    missing: list[MissingRange] = []
    outside_count = 0
    outside_sample: list[RowRef] = []
    for (source, partition), keyed in sorted(by_group.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        offsets = _group_offsets(normalised, source, partition)
        distinct = _sorted_unique(offsets)
        for key, spans in sorted(keyed, key=lambda ks: ks[0]):
            for span in intervals.merge(spans):
                missing.extend(MissingRange(key, gap) for gap in _gaps(distinct, span))
        merged = intervals.merge(span for _, spans in keyed for span in spans)
        outside = offsets.filter(pc.invert(_inside_mask(offsets, merged)))
        outside_count += len(outside)
        if len(outside_sample) < sample_size and len(outside):
            first = _sorted_unique(outside)[: sample_size - len(outside_sample)].to_pylist()
            outside_sample.extend(RowRef(source, int(o), partition) for o in first)

    dup_count, dup_sample = _duplicates(normalised, partition_column is not None, sample_size)
    return CoverageCheck(
        missing=tuple(missing),
        duplicate_count=dup_count,
        duplicate_sample=dup_sample,
        rows_outside_coverage=outside_count,
        outside_sample=tuple(outside_sample),
    )


def _normalise_rows(rows: pa.Table, partition_column: str | None) -> pa.Table:
    columns: dict[str, pa.ChunkedArray] = {
        _SRC: rows.column(SOURCE).cast(pa.string()),
        _OFF: rows.column(OFFSET).cast(pa.int64()),
    }
    if partition_column is not None:
        columns[_PART] = rows.column(partition_column).cast(pa.string())
    table = pa.table(columns)
    return table.filter(pc.and_(pc.is_valid(table[_SRC]), pc.is_valid(table[_OFF])))


def _group_offsets(rows: pa.Table, source: str, partition: str | None) -> pa.Array:
    mask = pc.equal(rows[_SRC], source)
    if partition is not None:
        mask = pc.and_(mask, pc.equal(rows[_PART], partition))
    return rows[_OFF].filter(mask).combine_chunks()


def _sorted_unique(values: pa.Array) -> pa.Array:
    unique = pc.unique(values)
    return unique.take(pc.array_sort_indices(unique))


def _gaps(sorted_distinct: pa.Array, span: OffsetRange) -> list[OffsetRange]:
    """Sub-ranges of ``span`` with no offset in ``sorted_distinct`` (vectorised over the offsets)."""
    inside = sorted_distinct.filter(
        pc.and_(pc.greater_equal(sorted_distinct, span.start), pc.less(sorted_distinct, span.end))
    )
    if len(inside) == len(span):
        return []
    before = pa.concat_arrays([pa.array([span.start - 1], pa.int64()), inside])
    after = pa.concat_arrays([inside, pa.array([span.end], pa.int64())])
    jumps = pc.greater(pc.subtract(after, before), 1)
    starts = pc.add(before.filter(jumps), 1).to_pylist()
    ends = after.filter(jumps).to_pylist()
    return [OffsetRange(int(s), int(e)) for s, e in zip(starts, ends, strict=True)]


def _inside_mask(offsets: pa.Array, merged: Sequence[OffsetRange]) -> pa.Array:
    mask = pa.array([False] * len(offsets), pa.bool_())
    for span in merged:
        mask = pc.or_(mask, pc.and_(pc.greater_equal(offsets, span.start), pc.less(offsets, span.end)))
    return mask


def _duplicates(rows: pa.Table, with_partition: bool, sample_size: int) -> tuple[int, tuple[RowRef, ...]]:
    keys = [_SRC, _PART, _OFF] if with_partition else [_SRC, _OFF]
    counts = rows.group_by(keys).aggregate([([], "count_all")])
    dups = counts.filter(pc.greater(counts["count_all"], 1))
    if dups.num_rows == 0:
        return 0, ()
    extra = pc.sum(pc.subtract(dups["count_all"], 1)).as_py()
    dups = dups.sort_by([(_SRC, "ascending"), (_OFF, "ascending")]).slice(0, sample_size)
    sample = tuple(
        RowRef(
            source=str(row[_SRC]),
            offset=int(row[_OFF]),
            partition=row.get(_PART),
            count=int(row["count_all"]),
        )
        for row in dups.to_pylist()
    )
    return int(extra or 0), sample


# --------------------------------------------------------------------- report


@dataclass(frozen=True)
class ReadbackReport:
    """What read-back found. ``verified`` means every covered range is present in the Iceberg scan;
    duplicates (at-least-once re-sends) and rows outside coverage are reported but do not fail it."""

    table: str
    delta_version_expected: int
    iceberg_delta_version: int
    snapshot_id: int | None
    waited_s: float
    rows_scanned: int
    missing_ranges: tuple[MissingRange, ...]
    duplicate_count: int
    duplicate_sample: tuple[RowRef, ...]
    rows_outside_coverage: int
    outside_sample: tuple[RowRef, ...]
    verified: bool

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (Dagster metadata, Airflow XCom, CLI output)."""
        return {
            "table": self.table,
            "delta_version_expected": self.delta_version_expected,
            "iceberg_delta_version": self.iceberg_delta_version,
            "snapshot_id": self.snapshot_id,
            "waited_s": round(self.waited_s, 3),
            "rows_scanned": self.rows_scanned,
            "missing_ranges": [
                {
                    "sink": m.key.sink,
                    "source": m.key.source,
                    "partition": m.key.partition,
                    "start": m.span.start,
                    "end": m.span.end,
                }
                for m in self.missing_ranges
            ],
            "missing_rows": sum(len(m.span) for m in self.missing_ranges),
            "duplicate_count": self.duplicate_count,
            "duplicate_sample": [_row_dict(r) for r in self.duplicate_sample],
            "rows_outside_coverage": self.rows_outside_coverage,
            "outside_sample": [_row_dict(r) for r in self.outside_sample],
            "verified": self.verified,
        }


def _row_dict(row: RowRef) -> dict[str, Any]:
    return {"source": row.source, "partition": row.partition, "offset": row.offset, "count": row.count}


# --------------------------------------------------------------------- entry points


def verify_readback(
    endpoint: IcebergEndpoint,
    table: str,
    coverage: Mapping[CoverageKey, Sequence[OffsetRange]],
    *,
    delta_version: int,
    probe: VisibilityProbe | None = None,
    force: bool = False,
    policy: WaitPolicy = WaitPolicy(),
    partition_column: str | None = None,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
) -> ReadbackReport:
    """Wait until Iceberg reflects ``delta_version`` (or force it), scan, and check ``coverage``.

    ``coverage`` maps each key to its delivered ranges (``CoverageStore`` output). ``probe`` defaults
    to the snapshot-summary probe over the same endpoint; pass a ``CallableProbe`` over UC's
    ``converted_delta_version`` in production. Raises ``ReadbackTimeoutError`` at the deadline.
    """
    name = TableName.parse(table)
    start = time.monotonic()
    if force:
        endpoint.force_sync(name.full_name)
    visible = wait_for_delta_version(probe or SnapshotSummaryProbe(endpoint), table, delta_version, policy)
    deadline = start + policy.timeout_s
    delay = policy.initial_s
    while True:
        loaded = _load_visible(endpoint, table, delta_version, deadline, policy)
        rows = _scan_sources(loaded, table, coverage, partition_column)
        check = check_coverage(rows, coverage, partition_column=partition_column, sample_size=sample_size)
        now = time.monotonic()
        if not check.missing or now >= deadline:
            break
        # In production ``delta_version`` is only a lower bound (Zerobus commits acknowledged rows
        # asynchronously, P95 time to table ~30 s), so rows may still be on their way into a later
        # commit: look again at newer snapshots until the deadline instead of reporting them missing.
        time.sleep(min(delay, deadline - now))
        delay = min(delay * 2, policy.max_s)
    snapshot = loaded.current_snapshot()
    seen = summary_delta_version(loaded)
    return ReadbackReport(
        table=name.full_name,
        delta_version_expected=delta_version,
        iceberg_delta_version=seen if seen is not None else visible.delta_version,
        snapshot_id=snapshot.snapshot_id if snapshot is not None else None,
        waited_s=time.monotonic() - start,
        rows_scanned=rows.num_rows,
        missing_ranges=check.missing,
        duplicate_count=check.duplicate_count,
        duplicate_sample=check.duplicate_sample,
        rows_outside_coverage=check.rows_outside_coverage,
        outside_sample=check.outside_sample,
        verified=not check.missing,
    )


def _scan_sources(
    loaded: IcebergTable,
    table: str,
    coverage: Mapping[CoverageKey, Sequence[OffsetRange]],
    partition_column: str | None,
) -> pa.Table:
    """The (source, offset[, partition]) columns of every covered source, from the current snapshot."""
    snapshot = loaded.current_snapshot()
    sources = sorted({key.source for key in coverage})
    _require_columns(loaded, table, [SOURCE, OFFSET, *([partition_column] if partition_column else [])])
    if snapshot is None or not sources:
        rows = pa.table({SOURCE: pa.array([], pa.string()), OFFSET: pa.array([], pa.int64())})
        if partition_column:
            rows = rows.append_column(partition_column, pa.array([], pa.string()))
        return rows
    selected = (SOURCE, OFFSET, *((partition_column,) if partition_column else ()))
    scanned: pa.Table = loaded.scan(
        row_filter=In(term=SOURCE, literals=sources),
        selected_fields=selected,
        snapshot_id=snapshot.snapshot_id,
    ).to_arrow()
    return scanned


def _load_visible(
    endpoint: IcebergEndpoint, table: str, version: int, deadline: float, policy: WaitPolicy
) -> IcebergTable:
    """Load ``table``; a production probe may report the conversion before REST serves the table."""
    delay = policy.initial_s
    while True:
        try:
            return endpoint.load_table(table)
        except (NoSuchTableError, NoSuchNamespaceError) as exc:
            now = time.monotonic()
            if now >= deadline:
                raise ReadbackTimeoutError(
                    f"read-back of {table}: the probe reported Delta version {version} converted, but the "
                    f"Iceberg REST catalog did not serve the table before the deadline ({exc}); check the "
                    "catalog name (warehouse) and the reader's permissions"
                ) from exc
            time.sleep(min(delay, deadline - now))
            delay = min(delay * 2, policy.max_s)


def read_back(
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
            f"read_back({table!r}, partition={partition!r}) needs partition_column: raw rows carry no "
            "partition of their own; name the payload column that holds the partition key"
        )
    loaded = endpoint.load_table(table)
    _require_columns(loaded, table, [SOURCE, OFFSET, *([partition_column] if partition_column else [])])
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


def _require_columns(table: IcebergTable, name: str, columns: Sequence[str]) -> None:
    present = {f.name for f in table.schema().fields}
    absent = [c for c in columns if c not in present]
    if absent:
        raise ReadbackError(
            f"read-back of {name}: column(s) {absent} are not in the Iceberg table; the table must be "
            f"written by the zerobus sink (reserved columns {SOURCE}, {OFFSET}) and partition_column must "
            "name an existing column"
        )
