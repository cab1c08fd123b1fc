"""Why delivered positions are missing from a snapshot, told from the table's own Delta log.

Read-back scans an Iceberg snapshot that reflects Delta version ``S`` (its summary's ``delta-version``
embedded; Unity Catalog's ``converted_delta_version`` in production). Positions a write delivered and the
scan lacks are one of three things, and only the Delta table can tell which:

- **in Delta at** ``S``: Delta holds them at the version the snapshot claims to reflect, so the Iceberg
  side lacks rows it should show (unless a row-removal commit after ``S`` took them, which is then named:
  a production probe's ``S`` is a lower bound of what the snapshot reflects). Lost.
- **deleted**: absent at ``S`` but present at the version before a row-removal commit (``DELETE``,
  ``MERGE``, ``UPDATE``, ``RESTORE``, ``TRUNCATE``: ``table_truth.row_removals``) at or below ``S``. Rows
  of a position only disappear through such a commit, so the last one whose previous version held them
  took them. Lost, deleted after delivery, by that commit.
- **not committed**: in no version examined. Zerobus commits acknowledged rows asynchronously (time to
  table, P95 <= 30 s), so they may still come: late, waited for until the caller's deadline.

Reads happen only for missing positions (a verified read-back reads nothing here), through
``table_truth``'s pruned time-travel reads (files whose ``_twg_source`` / ``_twg_emit_ts`` statistics
exclude the tag are skipped, only ``_twg_offset`` and ``_twg_emit_ts`` are read), one per version looked
at. The log's history is read newest first, back to the commits made before the missing rows can have
been stamped (``emitted_since``, else the earliest stamp of the tag's rows at ``S``, less the margin),
and at most ``LOOKBACK_COMMITS[-1]`` commits: a removal older than that is not looked for, and its rows
stay "not committed" (waited for, as before this module), never wrongly lost.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from zerobus_orchestration import intervals
from zerobus_orchestration.coverage.table_truth import (
    DeliveredRows,
    RowRemoval,
    TableReader,
    TableTruthError,
    offsets_to_ranges,
    row_removals,
    table_version,
    tag_rows,
)
from zerobus_orchestration.ranges import OffsetRange

log = logging.getLogger(__name__)

# How far back the log's history is read, in commits, widened until it reaches commits older than the
# missing rows (Zerobus commits every few seconds: 4,096 commits are hours of a busy table).
LOOKBACK_COMMITS = (64, 512, 4_096)


class Cause(StrEnum):
    IN_DELTA = "in_delta"
    """Delta holds them at the version the snapshot reflects: the Iceberg side lacks them (lost)."""
    DELETED = "deleted"
    """A row-removal commit took them after they were delivered (lost)."""
    NOT_COMMITTED = "not_committed"
    """In no Delta version examined: maybe still to be committed (late)."""


@dataclass(frozen=True)
class Absence:
    """One missing range of ``tag`` (a ``_twg_source`` value) and why it is missing."""

    tag: str
    span: OffsetRange
    cause: Cause
    removed_at: int | None = None  # DELETED: the version of the commit that took them
    operation: str | None = None  # DELETED: that commit's operation (DELETE, MERGE, ...)

    @property
    def lost(self) -> bool:
        return self.cause is not Cause.NOT_COMMITTED


def explain(
    reader: TableReader,
    missing: Mapping[str, Sequence[OffsetRange]],
    *,
    reflects: int,
    emitted_since: dt.datetime | None = None,
    margin_s: float = 0.0,
) -> tuple[Absence, ...]:
    """Why each of ``missing`` (per tag) is absent from a snapshot that reflects Delta version
    ``reflects``; see the module docstring. ``emitted_since``: no missing row was stamped before it."""
    wanted = {tag: intervals.merge(spans) for tag, spans in missing.items() if spans}
    if not wanted:
        return ()
    at_snapshot = {t: tag_rows(reader, t, version=reflects, emitted_since=emitted_since) for t in wanted}
    held = {tag: _intersect(wanted[tag], _present(rows)) for tag, rows in at_snapshot.items()}
    gone = {tag: _subtract(spans, held[tag]) for tag, spans in wanted.items()}
    removals = _removals(reader, _not_before(at_snapshot, gone, emitted_since, margin_s))
    found: list[Absence] = []
    # Held at ``reflects``: a removal after it may have taken them (the snapshot reflecting a later version
    # than a production probe reported); whatever no removal took, the Iceberg side lacks.
    for removal in (r for r in removals if r.version > reflects):
        for tag in [t for t, spans in held.items() if spans]:
            after = _present(tag_rows(reader, tag, version=removal.version, emitted_since=emitted_since))
            taken = _subtract(held[tag], after)
            found.extend(_deleted(tag, taken, removal))
            held[tag] = _subtract(held[tag], taken)
    found.extend(Absence(tag, span, Cause.IN_DELTA) for tag, spans in held.items() for span in spans)
    # Absent at ``reflects``: the last removal at or below it whose previous version held them took them.
    for removal in sorted((r for r in removals if 0 < r.version <= reflects), key=lambda r: -r.version):
        if not any(gone.values()):
            break
        for tag in [t for t, spans in gone.items() if spans]:
            try:
                before = tag_rows(reader, tag, version=removal.version - 1, emitted_since=emitted_since)
            except TableTruthError as exc:
                # An old version whose files were vacuumed: what it held cannot be told. The rows stay
                # "not committed" (waited for, as without this module), never called lost on a guess.
                log.warning("%s: not looking back past version %d: %s", reader.table, removal.version, exc)
                return _sorted([*found, *_not_committed(gone)])
            taken = _intersect(gone[tag], _present(before))
            found.extend(_deleted(tag, taken, removal))
            gone[tag] = _subtract(gone[tag], taken)
    return _sorted([*found, *_not_committed(gone)])


def _present(rows: DeliveredRows) -> tuple[OffsetRange, ...]:
    return offsets_to_ranges(rows.offsets)


def _not_committed(gone: Mapping[str, Sequence[OffsetRange]]) -> list[Absence]:
    return [Absence(tag, span, Cause.NOT_COMMITTED) for tag, spans in gone.items() for span in spans]


def _sorted(found: Iterable[Absence]) -> tuple[Absence, ...]:
    return tuple(sorted(found, key=lambda a: (a.tag, a.span)))


def _not_before(
    at_snapshot: Mapping[str, DeliveredRows],
    gone: Mapping[str, Sequence[OffsetRange]],
    emitted_since: dt.datetime | None,
    margin_s: float,
) -> dt.datetime | None:
    """The earliest a removal of the missing rows can have been committed: none before the rows were
    stamped (``emitted_since``, else the earliest row of each tag still there; less ``margin_s`` for the
    writer's and the committer's clocks). ``None``: unknown (a tag with none of its rows left)."""
    if emitted_since is not None:
        return emitted_since
    stamps = [rows.first_emitted for tag, rows in at_snapshot.items() if gone.get(tag)]
    if not stamps or any(stamp is None for stamp in stamps):
        return None
    return min(stamp for stamp in stamps if stamp is not None) - dt.timedelta(seconds=margin_s)


def _removals(reader: TableReader, not_before: dt.datetime | None) -> tuple[RowRemoval, ...]:
    """The row-removal commits of the newest ``LOOKBACK_COMMITS`` commits, widened until the oldest
    commit read was made before ``not_before`` (or the log's start)."""
    latest = table_version(reader)
    bound_ms = None if not_before is None else not_before.timestamp() * 1000
    found: tuple[RowRemoval, ...] = ()
    for window in LOOKBACK_COMMITS:
        after = max(-1, latest - window)
        read = row_removals(reader, after=after)
        found = read.commits
        if after < 0 or (bound_ms is not None and read.first_ms is not None and read.first_ms < bound_ms):
            break
    return found


def _deleted(tag: str, spans: Iterable[OffsetRange], removal: RowRemoval) -> list[Absence]:
    return [Absence(tag, span, Cause.DELETED, removal.version, removal.operation) for span in spans]


def _subtract(spans: Iterable[OffsetRange], minus: Sequence[OffsetRange]) -> tuple[OffsetRange, ...]:
    return intervals.merge(hole for s in spans for hole in intervals.gaps_between(minus, s.start, s.end))


def _intersect(spans: Iterable[OffsetRange], other: Sequence[OffsetRange]) -> tuple[OffsetRange, ...]:
    return intervals.merge(part for span in spans for part in intervals.clip(other, span.start, span.end))
