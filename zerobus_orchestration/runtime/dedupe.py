"""``repair --dedupe``: remove the extra copies at-least-once delivery left, keeping one of each.

A position is one ``(_twg_source, _twg_offset)``: the sink stamps every row with where it belongs, so two
rows at one position are one row sent twice (an SDK reconnect replayed batches the service had made
durable, a pool rebuild re-submitted them, a write re-run with ``resume=False``). The table's own truth
(``table_truth.positions_held_twice``) finds them; the catalog rewrites exactly those positions in one
commit, keeping the first-stamped copy (``TableCatalog.keep_one_copy``: delta-rs locally, ``INSERT INTO
... REPLACE WHERE`` on Unity). Rows at any other position are not touched, and coverage stays true (every
position it names is still there, once). The table is read again afterwards: a repair that left a copy
fails, naming it. See docs/runbook.md, "Duplicated rows".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zerobus_orchestration.catalog.base import PositionsHeldTwice, TableCatalog
from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.coverage import table_truth
from zerobus_orchestration.errors import CatalogError, ConfigError
from zerobus_orchestration.tables import TableName
from zerobus_orchestration.write_modes import logical_partition, partition_of_tag, source_tag


@dataclass(frozen=True)
class DedupeReport:
    """What a dedupe found and (unless ``dry_run``) removed, per ``_twg_source`` tag."""

    table: str
    source: str | None
    partition: str | None
    dry_run: bool
    extra_rows: dict[str, int] = field(default_factory=dict)  # tag -> copies beyond one per position
    ranges: dict[str, list[list[int]]] = field(default_factory=dict)  # tag -> [[start, end], ...]
    delta_version_before: int | None = None
    delta_version_after: int | None = None

    @property
    def duplicate_rows(self) -> int:
        return sum(self.extra_rows.values())

    @property
    def removed_rows(self) -> int:
        return 0 if self.dry_run else self.duplicate_rows

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "source": self.source,
            "partition": self.partition,
            "dry_run": self.dry_run,
            "duplicate_rows": self.duplicate_rows,
            "removed_rows": self.removed_rows,
            "extra_rows": dict(self.extra_rows),
            "ranges": {tag: [list(r) for r in spans] for tag, spans in self.ranges.items()},
            "delta_version_before": self.delta_version_before,
            "delta_version_after": self.delta_version_after,
        }


def dedupe(
    catalog: TableCatalog,
    config: ZerobusConfig,
    table: str,
    *,
    source: str | None = None,
    partition: str | None = None,
    dry_run: bool = False,
) -> DedupeReport:
    """Find the positions of ``table`` (of ``source``, and of its logical ``partition``: every run of
    it) held more than once and, unless ``dry_run``, keep one copy of each, in one commit."""
    name = TableName.parse(table).full_name
    if partition is not None and source is None:
        raise ConfigError(
            f"repair --dedupe of {name}: --partition {partition!r} needs --source (a partition belongs to "
            "the source that wrote it)"
        )
    reader = table_truth.reader_for(catalog, config, name)
    if reader is None:
        raise ConfigError(f"repair --dedupe of {name}: the table does not exist; check --table")
    before = table_truth.table_version(reader)
    found = _held_twice(reader, source, partition)
    report = DedupeReport(
        name,
        source,
        partition,
        dry_run,
        extra_rows={tag: held.extra_rows for tag, held in found.items()},
        ranges={tag: [[r.start, r.end] for r in held.ranges] for tag, held in found.items()},
        delta_version_before=before,
        delta_version_after=before,
    )
    if dry_run or not found:
        return report
    spans = tuple((tag, span) for tag, held in found.items() for span in held.ranges)
    catalog.keep_one_copy(name, PositionsHeldTwice(spans))
    left = _held_twice(reader, source, partition)
    if any(tag in left and set(left[tag].ranges) & set(found[tag].ranges) for tag in found):
        raise CatalogError(
            f"repair --dedupe of {name}: positions are still held twice after the rewrite "
            f"({ {tag: held.extra_rows for tag, held in left.items()} }); run the repair again"
        )
    return DedupeReport(
        name,
        source,
        partition,
        dry_run,
        extra_rows=report.extra_rows,
        ranges=report.ranges,
        delta_version_before=before,
        delta_version_after=table_truth.table_version(reader),
    )


def _held_twice(
    reader: table_truth.TableReader, source: str | None, partition: str | None
) -> dict[str, table_truth.HeldTwice]:
    prefix = "" if source is None else source_tag(source)
    found = table_truth.positions_held_twice(reader, prefix=prefix)
    if source is None:
        return found
    kept: dict[str, table_truth.HeldTwice] = {}
    for tag, held in found.items():
        part = partition_of_tag(tag, source)
        if part is None:
            continue  # another source whose name merely starts with this one's
        if partition is not None and logical_partition(part) != partition:
            continue
        kept[tag] = held
    return kept
