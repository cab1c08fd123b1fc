"""Which run of a source's logical partition a read-back verifies when it is named without one.

Dagster writes ``"<partition key>@<run id>"`` and a replace ``"<key>@<run>"``, while a reader names the
partition (or only the source): the run it stands for is read from the table's own Delta log, the way a
``replace`` orders runs (``run_order``), unless this host's coverage cache holds it already.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection

from zerobus_orchestration.catalog.base import TableCatalog
from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.coverage import table_truth
from zerobus_orchestration.ranges import CoverageKey
from zerobus_orchestration.tables import TableName
from zerobus_orchestration.write_modes import RUN_SEPARATOR, logical_partition, partition_of_tag, source_tag

CachedKeys = Callable[[str | None], Collection[CoverageKey]]
"""A partition of the source (None: all of them) -> the keys this host's coverage cache holds for it
(none when this host has no cache)."""


def latest_run(
    catalog: TableCatalog,
    config: ZerobusConfig,
    table: str,
    source: str,
    partition: str | None,
    *,
    cached: CachedKeys,
) -> str | None:
    """The coverage partition of the latest run of ``source``'s logical ``partition`` (``None``: of
    the source), or ``partition`` itself when it names a run, is cached here, or nothing matches.

    The runs of one partition are ordered as a ``replace`` orders them (``coverage.run_order``: the
    Delta version at which a run's rows became visible, ties to the greater tag); the runs of a whole
    source, across its partitions, by when their first row was stamped (``_twg_emit_ts``). A partition
    the table holds under its own name (an Airflow or CLI write) is its own run.
    """
    from zerobus_orchestration.coverage.run_order import ABSENT, RunHistory

    name = TableName.parse(table).full_name
    if partition is not None and RUN_SEPARATOR in partition:
        return partition
    if cached(partition):
        return partition  # this host wrote it: what it holds is what to verify
    reader = table_truth.reader_for(catalog, config, name)
    if reader is None:
        return partition
    if partition is not None:
        history = RunHistory(reader, source=source, key=partition)
        runs = {
            tag: part
            for tag in history.live()
            if (part := partition_of_tag(tag, source)) is not None and logical_partition(part) == partition
        }
        if source_tag(source, partition) in runs:
            return partition
        if not runs:
            # No run of it visible yet (the service commits late): the run this host delivered, if any
            # (of several, the greatest id: a CLI run's id starts with its UTC time).
            pending = _cached_runs(cached, partition)
            return max(pending) if pending else partition
        return runs[history.newest(runs, after=ABSENT)]
    first: dict[str, tuple[dt.datetime, str]] = {}
    oldest = dt.datetime.min.replace(tzinfo=dt.UTC)
    for tag, stamp in table_truth.first_stamps(reader, prefix=source).items():
        part = partition_of_tag(tag, source)
        if part is not None:
            first[part] = (stamp or oldest, part)
    return max(first, key=first.__getitem__) if first else None


def _cached_runs(cached: CachedKeys, partition: str) -> list[str]:
    """The coverage partitions of the runs of the source's logical ``partition`` this host delivered."""
    return [
        key.partition
        for key in cached(None)
        if RUN_SEPARATOR in key.partition and logical_partition(key.partition) == partition
    ]
