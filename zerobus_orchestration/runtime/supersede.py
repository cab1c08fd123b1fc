"""The ``replace`` step of a write: delete the other runs of its logical partition once it is visible.

Zerobus only appends, so ``replace`` never touches the ingest path (docs/adr/0007-write-modes.md): the
new run's rows are written under their own ``_twg_source`` tag exactly like an append; once they are
durable and visible in the table (the write's flush, then the table's own ``(_twg_source,
_twg_offset)`` showing every position the write delivered), the rows of the other runs of the same
logical partition (``write_modes.logical_partition``) are deleted through the catalog in one commit
(``TableCatalog.delete_rows``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from zerobus_orchestration import intervals
from zerobus_orchestration.catalog.base import RowsOfSources, TableCatalog
from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.coverage import table_truth
from zerobus_orchestration.errors import CatalogError, ConfigError
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.write_modes import RUN_SEPARATOR, logical_partition

log = logging.getLogger(__name__)

_POLL_S = 0.25


@dataclass(frozen=True)
class Supersession:
    """What a ``replace`` write removed: the other runs' tags of its logical partition."""

    logical_partition: str
    deleted_tags: tuple[str, ...]


def supersede(
    catalog: TableCatalog,
    config: ZerobusConfig,
    table: str,
    *,
    source: str,
    partition: str,
    replace_key: str,
    delivered: tuple[OffsetRange, ...],
    commit: Callable[[], object] | None = None,
) -> Supersession:
    """Delete the other runs of ``replace_key`` once the table shows every position in ``delivered``.

    ``commit`` asks an embedded emulator to commit what it acknowledged (production commits on its own
    within seconds: the table truth is polled up to ``readback.wait_timeout_s``). Nothing is deleted
    unless this write's rows are visible; the error then says the old rows were kept.
    """
    if logical_partition(partition) != replace_key:
        raise ConfigError(
            f"table {table}: a replace of partition {replace_key!r} must write under it, but this write's "
            f"partition is {partition!r}; fix: pass partition='{replace_key}{RUN_SEPARATOR}<run id>'"
        )
    reader = table_truth.reader_for(catalog, config, table)
    kwargs = {"source": source, "partition": partition, "replace_key": replace_key}
    if reader is None:
        return Supersession(replace_key, ())
    deadline = time.monotonic() + config.readback.wait_timeout_s
    while True:
        if commit is not None:
            commit()
        visible = table_truth.delivered_ranges(reader, source=source, partition=partition)
        missing = [r for r in delivered if intervals.gaps_between(visible, r.start, r.end)]
        if not missing:
            break
        if time.monotonic() >= deadline:
            raise CatalogError(
                f"table {table}: replace of partition {replace_key!r} kept the earlier runs' rows: this "
                f"write's rows {missing[:3]} are durable but not yet visible in the table after "
                f"{config.readback.wait_timeout_s}s (readback.wait_timeout_s); re-run the write (it resumes "
                "and then deletes), or raise readback.wait_timeout_s"
            )
        time.sleep(_POLL_S)
    stale = tuple(table_truth.other_runs(reader, **kwargs))
    if stale:
        catalog.delete_rows(table, RowsOfSources(stale))
        left = set(table_truth.other_runs(reader, **kwargs))
        if left & set(stale):
            raise CatalogError(
                f"table {table}: the delete of superseded runs {sorted(left & set(stale))} of partition "
                f"{replace_key!r} committed but they are still in the table; re-run the write"
            )
        log.info("%s: replaced partition %r: deleted the rows of %s", table, replace_key, list(stale))
    return Supersession(replace_key, stale)
