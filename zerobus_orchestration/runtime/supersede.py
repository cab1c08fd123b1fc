"""The ``replace`` step of a write: once its rows are visible, delete the partition's *older* runs.

Zerobus only appends, so ``replace`` never touches the ingest path (docs/adr/0007-write-modes.md): the
new run's rows are written under their own ``_twg_source`` tag exactly like an append. Once they are
durable and visible in the table (the write's flush, then the table's own ``(_twg_source,
_twg_offset)`` showing every position the write delivered), the runs of the same logical partition are
ordered by the Delta version at which their rows became visible (``coverage.run_order``), and only the
runs older than this one are deleted, through the catalog in one commit (``TableCatalog.delete_rows``).

A newer run in the table means this one is superseded: it deletes nothing of the newer run's, and fails
naming it (``RunSupersededError``), after deleting the runs older than itself. A run whose own rows a
newer run already deleted (it was still writing when the newer one finished) removes what of it landed
afterwards and fails the same way. So two replaces of one partition, on any hosts, end with the newer
one's rows; the partition is never emptied by two runs deleting each other.
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
from zerobus_orchestration.coverage.run_order import ABSENT, RunHistory
from zerobus_orchestration.errors import CatalogError, ConfigError, RunSupersededError
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.write_modes import RUN_SEPARATOR, PartitionRun

log = logging.getLogger(__name__)

_POLL_S = 0.25
_REMOVAL_CHECK_S = 1.0  # how often a wait for this run's rows asks whether a newer run deleted them


@dataclass(frozen=True)
class Supersession:
    """What a ``replace`` write removed: the older runs' tags of its logical partition, and the Delta
    version its own rows became visible at (its place in the partition's order; None with no rows)."""

    logical_partition: str
    deleted_tags: tuple[str, ...]
    birth_version: int | None = None


def supersede(
    catalog: TableCatalog,
    config: ZerobusConfig,
    table: str,
    *,
    run: PartitionRun,
    replace_key: str,
    delivered: tuple[OffsetRange, ...],
    start_version: int | None,
    commit: Callable[[], object] | None = None,
) -> Supersession:
    """Delete the older runs of ``replace_key`` once the table shows every position in ``delivered``.

    ``start_version``: the table's version before this write sent anything (None: no table yet), the
    lower end of the window in which its rows can first appear. ``commit`` asks an embedded emulator to
    commit what it acknowledged (production commits on its own within seconds: the table is polled up
    to ``readback.wait_timeout_s``). Nothing is deleted unless this write's rows are visible; the error
    then says the old rows were kept. ``RunSupersededError`` when a newer run holds the partition.
    """
    if run.key != replace_key:
        raise ConfigError(
            f"table {table}: a replace of partition {replace_key!r} must write under it, but this write's "
            f"partition is {run.partition!r}; fix: pass partition='{replace_key}{RUN_SEPARATOR}<run id>'"
        )
    reader = table_truth.reader_for(catalog, config, table)
    if reader is None:
        return Supersession(replace_key, ())
    start = ABSENT if start_version is None else start_version
    history = _wait_until_visible(catalog, config, reader, table, run, delivered, start, commit)
    if not delivered:
        # A replace with no row empties its partition: every run visible now is older than it.
        stale = tuple(sorted(history.live() - {run.tag}))
        _delete(catalog, table, replace_key, stale)
        return Supersession(replace_key, stale, None)
    seen = history.latest()
    lo = ABSENT if run.tag in history.present_at(start) else start  # a resumed run's rows predate it
    born = history.birth(run.tag, hi=seen, lo=lo)
    others = history.live() - {run.tag}
    older = {tag for tag in others if history.older(tag, than=run.tag, born=born, since=start)}
    _delete(catalog, table, replace_key, tuple(sorted(older)))

    # Again, fresh: a newer run may have appeared (or deleted this one) while it decided.
    if commit is not None:
        commit()
    after = RunHistory(reader, source=run.source, key=run.key)
    visible = table_truth.delivered_ranges(reader, source=run.source, partition=run.partition)
    if any(intervals.gaps_between(visible, r.start, r.end) for r in delivered):
        removal = after.deleted_since(run.tag, start)
        if removal is not None:
            _superseded_after_removal(catalog, table, run, after, removal, tuple(sorted(older)), start)
        raise CatalogError(
            f"table {table}: rows of run {run.tag!r} of partition {replace_key!r} went missing after they "
            "were visible, and no commit since this write started removed them; re-run the write"
        )
    back = after.live() & older  # an older run still writing when it was deleted: its rest landed since
    _delete(catalog, table, replace_key, tuple(sorted(back)))
    newer = {
        tag
        for tag in after.live() - {run.tag} - older
        if not after.older(tag, than=run.tag, born=born, since=start)
    }
    if newer:
        winner = after.newest(newer, after=born - 1)
        raise RunSupersededError(
            f"table {table}: run {run.tag!r} of partition {replace_key!r} was superseded by the newer run "
            f"{winner!r}, whose rows became visible after this run's (Delta version {born}); this run's "
            f"rows stay until that run deletes them"
            + (f"; this run deleted the older run(s) {sorted(older)}" if older else ""),
            table=table,
            partition=replace_key,
            run=run.tag,
            winner=winner,
            deleted_own=False,
            superseded=tuple(sorted(older)),
            birth_version=born,
        )
    if older:
        log.info("%s: replaced partition %r: deleted the rows of %s", table, replace_key, sorted(older))
    return Supersession(replace_key, tuple(sorted(older)), born)


def _wait_until_visible(
    catalog: TableCatalog,
    config: ZerobusConfig,
    reader: table_truth.TableReader,
    table: str,
    run: PartitionRun,
    delivered: tuple[OffsetRange, ...],
    start: int,
    commit: Callable[[], object] | None,
) -> RunHistory:
    """Poll until the table shows every delivered position; a newer run deleting them ends the wait."""
    deadline = time.monotonic() + config.readback.wait_timeout_s
    checked = float("-inf")
    while True:
        if commit is not None:
            commit()
        history = RunHistory(reader, source=run.source, key=run.key)
        history.latest()  # fix the version first: rows seen below are at it or later
        visible = table_truth.delivered_ranges(reader, source=run.source, partition=run.partition)
        missing = [r for r in delivered if intervals.gaps_between(visible, r.start, r.end)]
        if not missing and (not delivered or run.tag in history.present_at(history.latest())):
            return history
        if time.monotonic() - checked >= _REMOVAL_CHECK_S:  # reads the log's recent commits: not every poll
            checked = time.monotonic()
            removal = history.deleted_since(run.tag, start)
            if removal is not None:
                _superseded_after_removal(catalog, table, run, history, removal, (), start)
        if time.monotonic() >= deadline:
            raise CatalogError(
                f"table {table}: replace of partition {run.key!r} kept the earlier runs' rows: this "
                f"write's rows {missing[:3]} are durable but not yet visible in the table after "
                f"{config.readback.wait_timeout_s}s (readback.wait_timeout_s); re-run the write (it resumes "
                "and then deletes), or raise readback.wait_timeout_s"
            )
        time.sleep(_POLL_S)


def _superseded_after_removal(
    catalog: TableCatalog,
    table: str,
    run: PartitionRun,
    history: RunHistory,
    removed_at: int,
    deleted: tuple[str, ...],
    start: int,
) -> None:
    """This run's rows were deleted at ``removed_at``: a newer run finished while this one was still
    writing. Remove what of this run landed since (it would be read beside the newer run's) and fail."""
    others = history.live() - {run.tag}
    if not others:
        raise CatalogError(
            f"table {table}: rows of run {run.tag!r} of partition {run.key!r} were deleted by the commit at "
            f"Delta version {removed_at}, yet no other run of the partition is in the table; its remaining "
            "rows were kept. Re-run the write as a new run (a new run id) to load the partition again"
        )
    winner = history.newest(others, after=ABSENT)
    cleaned = run.tag in history.live()
    if cleaned:
        catalog.delete_rows(table, RowsOfSources((run.tag,)))
    raise RunSupersededError(
        f"table {table}: run {run.tag!r} of partition {run.key!r} was superseded by the newer run "
        f"{winner!r}, which deleted this run's rows (Delta version {removed_at}) while this run was still "
        "writing" + ("; this run removed its rows that landed after that" if cleaned else ""),
        table=table,
        partition=run.key,
        run=run.tag,
        winner=winner,
        deleted_own=True,
        superseded=deleted,
    )


def _delete(catalog: TableCatalog, table: str, replace_key: str, tags: tuple[str, ...]) -> None:
    if not tags:
        return
    catalog.delete_rows(table, RowsOfSources(tags))
    log.debug("%s: deleted the rows of %s of partition %r", table, list(tags), replace_key)
