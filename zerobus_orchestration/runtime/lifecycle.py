"""What a write of a logical partition does about the partition's earlier runs, decided before it sends.

Every adapter maps its context onto a ``write_modes.PartitionRun`` (source, logical partition, run);
this module reads the table to find the partition's runs and decides (docs/adr/0007-write-modes.md):

- this run (any revision) already wrote: resume it; the facade turns a resume that finds other content
  into the run's next revision (``replace``) or a refusal (primary raw under ``auto``);
- another run holds the partition and the input is what it delivered (``resume.rerun.compare``): nothing
  is sent, the write reports the content already delivered by that run;
- primary raw under ``auto``: an input that extends the earlier run's rows (rows past its last position,
  the rest of a run that failed part-way, or positions a delete took) is written as that run, resumed:
  only the rows it lacks are sent (with ``resume=False``: every row again, as that run); any other content
  is refused (``RerunRefusedError``, naming the choices) with nothing sent;
- otherwise the run writes its rows, and a ``replace`` then supersedes the older runs.

The table is the record every host shares, so the decision is the same on any host; this host's coverage
cache adds only its own runs that are not visible yet. Rows are acknowledged seconds before Zerobus commits
them to the table, so the partition's runs are read once the table has settled: when it was written within
the settle period of the service's commit rhythm, or this host delivered another run of the partition
lately (``runtime/settled_runs.py``, the resume's wait); a table nobody wrote lately is read at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from zerobus_orchestration import intervals
from zerobus_orchestration.catalog.base import TableCatalog
from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.coverage import table_truth
from zerobus_orchestration.coverage.run_order import RunHistory
from zerobus_orchestration.coverage.run_rows import RunRows
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.errors import RerunRefusedError, ResumeMismatchError
from zerobus_orchestration.resume.rerun import Replay, Verdict, compare
from zerobus_orchestration.runtime import settled_runs
from zerobus_orchestration.write_modes import RAW_REPLACE_CHOICES, PartitionRun, Rerun

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Decision:
    """How a write proceeds: as ``run``, or not at all when ``delivered_by`` holds the content already.

    ``start_version``: the table's version before anything was sent (None: no table yet), where this
    run's place in the partition's order starts (``runtime/supersede.py``). ``resume``: resume ``run``'s
    own coverage (an earlier attempt of it, or the earlier run an input extends).
    """

    run: PartitionRun
    start_version: int | None
    delivered_by: str | None = None
    resume: bool = True
    rows: int = 0
    """Rows the input holds, when it was read whole for the comparison (already delivered)."""


def decide(
    catalog: TableCatalog,
    config: ZerobusConfig,
    store: CoverageStore,
    table: str,
    run: PartitionRun,
    policy: Rerun,
    data: Replay,
    *,
    resume: bool,
    offset_column: str | None,
    commit: Callable[[str], object] | None = None,
    settle: bool = True,
) -> Decision:
    """The write's ``Decision``; ``RerunRefusedError`` for primary raw given other content under ``auto``.

    The partition's runs are read once rows on their way to the table have landed
    (``runtime/settled_runs.py``). ``commit`` and ``settle`` are ``resume.truth.learn_from_table``'s: an
    embedded emulator's commit of what it acknowledged, and False when nothing more can arrive.
    """
    reader = table_truth.reader_for(catalog, config, table)
    if reader is None:
        return Decision(run, None, resume=resume)
    if not run.named:  # a write that names no run resumes its partition's last write, as ever
        return Decision(run, table_truth.table_version(reader), resume=resume)
    history = settled_runs.settled_history(
        reader,
        config.coverage,
        source=run.source,
        key=run.key,
        expected=_recent_runs(store, run, within_s=config.coverage.catch_up_max_s),
        commit=commit,
        settle=settle,
    )
    start = history.latest()
    live = {tag: PartitionRun.of_tag(tag, run.source) for tag in history.live()}
    runs = {r for r in live.values() if r is not None}
    own = [r for r in (*runs, *_cached_runs(store, run)) if run.same_run(r)]
    latest_own = max(own, key=lambda r: r.revision) if own else None
    if latest_own is not None and resume:
        return Decision(latest_own, start)  # an earlier attempt of this run: resume it
    if latest_own is not None and policy is Rerun.REPLACE:
        return Decision(run.revised(latest_own.revision + 1), start, resume=False)  # send it all again
    others = sorted((r for r in runs if not run.same_run(r) or policy is Rerun.MATCH), key=lambda r: r.tag)
    if not others or (policy is Rerun.REPLACE and len(others) > 1):
        # The first run, or a partition already holding several runs: write, the replace sorts them out.
        return Decision(run if latest_own is None else run.revised(latest_own.revision + 1), start)
    earlier = others[0] if policy is Rerun.REPLACE else _settled(history, others)
    delivered = table_truth.delivered_ranges(reader, source=earlier.source, partition=earlier.partition)
    found = compare(data.first(), RunRows(reader, earlier.tag, start), delivered, offset_column=offset_column)
    log.info(
        "%s: partition %r: the input %s run %s (%s)", table, run.key, found.verdict, earlier.tag, found.detail
    )
    if found.verdict is Verdict.SAME:
        return Decision(run, start, delivered_by=earlier.tag, rows=found.rows)
    if policy is Rerun.REPLACE:
        return Decision(run if latest_own is None else run.revised(latest_own.revision + 1), start)
    if found.verdict is Verdict.EXTENDS:
        # Raw: deliver what the earlier run lacks, as that run; ``resume=False`` sends the input whole again
        # as that run (rows a delete took: docs/runbook.md's recipe for LOST, then repair --dedupe).
        return Decision(earlier, start, resume=resume)
    raise _refusal(table, run, earlier.tag, found.detail)


def refused_change(table: str, run: PartitionRun, mismatch: ResumeMismatchError) -> RerunRefusedError:
    """A resume of ``run`` found other content where primary raw may not replace: the refusal to raise."""
    return _refusal(table, run, run.tag, f"{mismatch.span} differs from what it delivered there")


def _refusal(table: str, run: PartitionRun, existing: str, detail: str) -> RerunRefusedError:
    return RerunRefusedError(
        f"table {table}: a re-run of partition {run.key!r} of source {run.source!r} has other content than "
        f"the run the table holds ({existing}: {detail}); nothing was sent. {table} is primary raw, whose "
        "rows are the record every reader resumes and verifies from, so a re-run with other content is "
        f"refused under write_mode='auto'. Choices: {RAW_REPLACE_CHOICES}, either replacing the partition "
        "once the new rows are visible; or write_mode='append' to keep both runs' rows",
        table=table,
        source=run.source,
        partition=run.key,
        existing=existing,
    )


def _settled(history: RunHistory, runs: list[PartitionRun]) -> PartitionRun:
    """The run a reader takes as the partition's: the oldest (a newer one is still writing, or failed)."""
    if len(runs) == 1:
        return runs[0]
    latest = history.latest()
    return min(runs, key=lambda r: (history.birth(r.tag, hi=latest), r.tag))


def _cached_runs(store: CoverageStore, run: PartitionRun) -> Iterable[PartitionRun]:
    """This host's recorded revisions of ``run`` (rows it delivered that the table may not show yet)."""
    for key in store.keys(sink=None):
        cached = PartitionRun.of(run.source, key.partition)
        if cached.tag == key.source and run.same_run(cached):
            yield cached


def _recent_runs(store: CoverageStore, run: PartitionRun, *, within_s: float) -> dict[str, int]:
    """``{tag: rows}`` of this host's other runs of ``run``'s partition recorded within ``within_s``:
    rows it delivered that the table may not show yet (``runtime/settled_runs.py``)."""
    since_us = int((time.time() - within_s) * 1e6)
    recent: dict[str, int] = {}
    for key in store.recorded_since(since_us):
        other = PartitionRun.of(run.source, key.partition)
        if other.tag != key.source or other.key != run.key or run.same_run(other):
            continue
        rows = intervals.covered_count(store.covered_by_source(key.source, key.partition))
        if rows:
            recent[key.source] = rows
    return recent


def latest_runs(catalog: TableCatalog, config: ZerobusConfig, table: str, *, source: str) -> dict[str, str]:
    """``{logical partition: _twg_source tag}``: the run of each of ``source``'s partitions a reader takes.

    That is the partition's *settled* run: the oldest one in the table (by the version its rows became
    visible at, ``coverage.run_order``). A replace deletes the older runs once its own rows are visible,
    so a partition holds two runs only while a newer one is still writing, failed before its delete, or
    was superseded: the older one is then the last complete run. Filter on the tags with
    ``write_modes.latest_run_filter`` (docs/guides/write-modes.md).
    """
    reader = table_truth.reader_for(catalog, config, table)
    if reader is None:
        return {}
    tags = table_truth.source_tag_counts(reader, prefix=source)
    partitions: dict[str, list[PartitionRun]] = {}
    for tag in tags:
        run = PartitionRun.of_tag(tag, source)
        if run is not None:
            partitions.setdefault(run.key, []).append(run)
    settled: dict[str, str] = {}
    for key, runs in sorted(partitions.items()):
        if len(runs) == 1:
            settled[key] = runs[0].tag
        else:
            settled[key] = _settled(RunHistory(reader, source=source, key=key), runs).tag
    return settled
