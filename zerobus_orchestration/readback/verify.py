"""Verifying coverage against the table: wait for visibility, scan, compare, report.

In production the Delta version the writer observed is only a lower bound (Zerobus commits acknowledged
rows asynchronously), so covered rows still missing are looked for again in newer snapshots until the
deadline before they are reported missing. Unless they are lost: the caller's ``MissingExplainer``
(``readback/lost.py``) reads the table's Delta log at the version the snapshot reflects, and rows Delta
held there, or that a row-removal commit took after delivery, end the wait at once with a lost verdict.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.expressions import And, BooleanExpression, GreaterThanOrEqual, In
from pyiceberg.table import Table as IcebergTable

from zerobus_orchestration.errors import ReadbackTimeoutError
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.readback.coverage_check import (
    DEFAULT_SAMPLE_SIZE,
    CoverageCheck,
    MissingRange,
    RowRef,
    check_coverage,
)
from zerobus_orchestration.readback.endpoint import IcebergEndpoint, require_columns
from zerobus_orchestration.readback.lost import LostRange, MissingExplainer
from zerobus_orchestration.readback.visibility import (
    DEFAULT_WAIT,
    SnapshotSummaryProbe,
    VisibilityProbe,
    WaitPolicy,
    summary_delta_version,
    wait_for_delta_version,
)
from zerobus_orchestration.reserved import EMIT_TS, OFFSET, SOURCE
from zerobus_orchestration.retry import poll_until
from zerobus_orchestration.tables import TableName


@dataclass(frozen=True)
class ReadbackReport:
    """What read-back found. ``verified`` means every covered range is present in the Iceberg scan, each
    row once; duplicates (at-least-once re-sends) fail it, rows outside coverage are only reported.
    ``iceberg_delta_version``: the Delta version the scanned snapshot reflects (its summary's, else at
    least the probe's). ``lost_ranges``: the missing ranges the table's Delta log shows lost (held at that
    version, or removed after delivery), so no later snapshot can bring them; the other missing ranges
    were not committed yet."""

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
    lost_ranges: tuple[LostRange, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (Dagster metadata, Airflow XCom, CLI output)."""
        return {
            "table": self.table,
            "delta_version_expected": self.delta_version_expected,
            "iceberg_delta_version": self.iceberg_delta_version,
            "snapshot_id": self.snapshot_id,
            "waited_s": round(self.waited_s, 3),
            "rows_scanned": self.rows_scanned,
            "missing_ranges": [_range_dict(m) for m in self.missing_ranges],
            "missing_rows": sum(len(m.span) for m in self.missing_ranges),
            "lost_ranges": [lost.as_dict() for lost in self.lost_ranges],
            "lost_rows": sum(len(m.span) for m in self.lost_ranges),
            "duplicate_count": self.duplicate_count,
            "duplicate_sample": [_row_dict(r) for r in self.duplicate_sample],
            "rows_outside_coverage": self.rows_outside_coverage,
            "outside_sample": [_row_dict(r) for r in self.outside_sample],
            "verified": self.verified,
        }


def _range_dict(missing: MissingRange) -> dict[str, Any]:
    key, span = missing.key, missing.span
    return {
        "sink": key.sink,
        "source": key.source,
        "partition": key.partition,
        "start": span.start,
        "end": span.end,
    }


def _row_dict(row: RowRef) -> dict[str, Any]:
    return {"source": row.source, "partition": row.partition, "offset": row.offset, "count": row.count}


def verify_coverage(
    endpoint: IcebergEndpoint,
    table: str,
    coverage: Mapping[CoverageKey, Sequence[OffsetRange]],
    *,
    delta_version: int,
    probe: VisibilityProbe | None = None,
    force: bool = False,
    policy: WaitPolicy = DEFAULT_WAIT,
    partition_column: str | None = None,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    explain_missing: MissingExplainer | None = None,
    emitted_since: dt.datetime | None = None,
) -> ReadbackReport:
    """Wait until Iceberg reflects ``delta_version`` (or force it), scan, and check ``coverage``.

    ``coverage`` maps each key to its delivered ranges (``CoverageStore`` output). ``probe`` defaults
    to the snapshot-summary probe over the same endpoint; pass a ``CallableProbe`` over UC's
    ``converted_delta_version`` in production. Raises ``ReadbackTimeoutError`` at the deadline.
    ``explain_missing``: asked, for the ranges a snapshot lacks, which are lost (``readback/lost.py``);
    any lost ends the wait at once (``lost_ranges``), the rest are looked for again in newer snapshots
    until the deadline. ``None``: every missing range is waited for.
    ``emitted_since``: no row of ``coverage``'s keys was stamped before it (``resume.truth.emission_bound``):
    the scan reads only data files holding rows stamped since (their ``_twg_emit_ts`` bounds in the
    Iceberg manifests), not the table's whole history.
    """
    name = TableName.parse(table)
    start = time.monotonic()
    if force:
        endpoint.force_sync(name.full_name)
    probe = probe or SnapshotSummaryProbe(endpoint)
    visible = wait_for_delta_version(probe, table, delta_version, policy)
    deadline = start + policy.timeout_s
    looks: list[_Look] = []
    # The probe's last word, read before the next load: the snapshot loaded then reflects at least it.
    probed = [visible.delta_version]
    explained: dict[tuple[int, tuple[MissingRange, ...]], tuple[LostRange, ...]] = {}

    def complete() -> bool | None:
        loaded = _load_visible(endpoint, table, delta_version, deadline, policy)
        rows = _scan_sources(loaded, table, coverage, partition_column, emitted_since)
        check = check_coverage(rows, coverage, partition_column=partition_column, sample_size=sample_size)
        seen = summary_delta_version(loaded)
        reflects = seen if seen is not None else probed[0]
        lost: tuple[LostRange, ...] = ()
        if check.missing and explain_missing is not None:
            # A Delta version never changes: one answer per version and missing set, however many looks.
            asked = (reflects, check.missing)
            if asked not in explained:
                explained[asked] = tuple(explain_missing(check.missing, reflects))
            lost = explained[asked]
        looks.append(_Look(loaded, rows, check, reflects, lost))
        done = not check.missing or bool(lost)
        if not done and seen is None:  # production: the summary names no version, the probe does
            latest = probe.converted_delta_version(table)
            probed[0] = max(probed[0], latest if latest is not None else probed[0])
        return True if done else None

    # In production ``delta_version`` is only a lower bound (Zerobus commits acknowledged rows
    # asynchronously, P95 time to table ~30 s), so rows may still be on their way into a later
    # commit: look again at newer snapshots until the deadline instead of reporting them missing,
    # unless the Delta log says they are lost.
    poll_until(complete, timeout_s=deadline - time.monotonic(), backoff=policy.backoff)
    look = looks[-1]
    snapshot = look.loaded.current_snapshot()
    check = look.check
    return ReadbackReport(
        table=name.full_name,
        delta_version_expected=delta_version,
        iceberg_delta_version=look.reflects,
        snapshot_id=snapshot.snapshot_id if snapshot is not None else None,
        waited_s=time.monotonic() - start,
        rows_scanned=look.rows.num_rows,
        missing_ranges=check.missing,
        duplicate_count=check.duplicate_count,
        duplicate_sample=check.duplicate_sample,
        rows_outside_coverage=check.rows_outside_coverage,
        outside_sample=check.outside_sample,
        verified=not check.missing and not check.duplicate_count,
        lost_ranges=look.lost,
    )


@dataclass(frozen=True)
class _Look:
    """One scan of the current snapshot: what it showed, the Delta version it reflects, what is lost."""

    loaded: IcebergTable
    rows: pa.Table
    check: CoverageCheck
    reflects: int
    lost: tuple[LostRange, ...]


def _scan_sources(
    loaded: IcebergTable,
    table: str,
    coverage: Mapping[CoverageKey, Sequence[OffsetRange]],
    partition_column: str | None,
    emitted_since: dt.datetime | None = None,
) -> pa.Table:
    """The (source, offset[, partition]) columns of every covered source, from the current snapshot."""
    snapshot = loaded.current_snapshot()
    sources = sorted({key.source for key in coverage})
    require_columns(loaded, table, [SOURCE, OFFSET, *([partition_column] if partition_column else [])])
    if snapshot is None or not sources:
        rows = pa.table({SOURCE: pa.array([], pa.string()), OFFSET: pa.array([], pa.int64())})
        if partition_column:
            rows = rows.append_column(partition_column, pa.array([], pa.string()))
        return rows
    selected = (SOURCE, OFFSET, *((partition_column,) if partition_column else ()))
    row_filter: BooleanExpression = In(term=SOURCE, literals=sources)
    if emitted_since is not None and any(f.name == EMIT_TS for f in loaded.schema().fields):
        stamp = emitted_since.astimezone(dt.UTC).isoformat()
        row_filter = And(row_filter, GreaterThanOrEqual(term=EMIT_TS, value=stamp))
    scanned: pa.Table = loaded.scan(
        row_filter=row_filter,
        selected_fields=selected,
        snapshot_id=snapshot.snapshot_id,
    ).to_arrow()
    return scanned


def _load_visible(
    endpoint: IcebergEndpoint, table: str, version: int, deadline: float, policy: WaitPolicy
) -> IcebergTable:
    """Load ``table``; a production probe may report the conversion before REST serves the table."""
    absent: list[NoSuchTableError | NoSuchNamespaceError] = []

    def served() -> IcebergTable | None:
        try:
            return endpoint.load_table(table)
        except (NoSuchTableError, NoSuchNamespaceError) as exc:
            absent.append(exc)
            return None

    loaded = poll_until(served, timeout_s=deadline - time.monotonic(), backoff=policy.backoff)
    if loaded is None:
        exc = absent[-1]
        raise ReadbackTimeoutError(
            f"read-back of {table}: the probe reported Delta version {version} converted, but the "
            f"Iceberg REST catalog did not serve the table before the deadline ({exc}); check the "
            "catalog name (warehouse) and the reader's permissions",
            table=table,
            delta_version=version,
        ) from exc
    return loaded
