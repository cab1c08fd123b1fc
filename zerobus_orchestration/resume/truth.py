"""Resume that also skips what the table shows delivered: the part of a resume that consults the truth.

The same-host coverage cache lags the table: the acknowledgements of the last bursts before a crash
never reach it, and a worker on another host has no cache at all. The raw table holds every durable
row's ``(_twg_source, _twg_offset)``, so a resume also skips positions the table shows (``table_truth``).

Two things make that exact rather than a snapshot of a moving target:

* **Catch-up.** What was acknowledged before a crash may not be in the table yet (Zerobus commits
  asynchronously; the emulator commits its write-ahead log on demand). ``catch_up`` polls the table
  until what it shows of (source, partition) holds the cache and has not changed for a settle period,
  at most ``max_s``. The settle period comes from the service's commit rhythm within a write
  (``coverage.commit_rhythm``: the gaps between data commits that rows kept flowing across, never the
  idle time between runs): ``CADENCE_FACTOR`` times the longest. A fixed period shorter than the
  rhythm would read the table between two commits and send again what the next one holds; one longer
  makes every resume wait for nothing. Only a table that shows no rhythm (fewer than two commits of
  one write) waits the configured ``catch_up_settle_s``. Nothing delivered anywhere (empty cache, no
  rows in the table) is a first write: no wait.
* **Laziness.** ``TruthSkip`` consults the table only when the first row the cache does not hold comes
  up, so a re-run the cache covers whole (the normal re-run of a finished write) never reads the table
  and never waits.

Positions learnt from the table resume **unverified**: the cache's content digests vouch for its own
ranges, but checking the table's ranges would mean reading every payload column of those rows back
(several times the cost of reading ``_twg_offset`` alone) and hashing them with the types the table
round trip gives. The write logs a warning naming how many rows were skipped on the table's word.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import pyarrow.compute as pc

from zerobus_orchestration import intervals
from zerobus_orchestration.catalog.base import TableCatalog
from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.coverage import commit_rhythm, table_truth
from zerobus_orchestration.errors import CatalogError
from zerobus_orchestration.ranges import CoverageKey, CoverageRecorder, OffsetRange
from zerobus_orchestration.resume.slices import CoveredIndex, ResumeSlice, without

log = logging.getLogger(__name__)

DEFAULT_POLL_S = 0.1
# How many of the table's latest commits show the service's commit rhythm (one Delta log read).
CADENCE_COMMITS = 10
# The settle period is this many times the longest gap between commits of one write: every row
# acknowledged before the resume began is committed within one such gap of its start (the service
# commits what it acknowledged at each tick), and half a gap more allows for a tick a loaded service
# runs late.
CADENCE_FACTOR = 1.5

S = TypeVar("S")


@dataclass(frozen=True)
class CaughtUp:
    """What the table showed of (source, partition) when the catch-up ended."""

    ranges: tuple[OffsetRange, ...]
    settled: bool  # False: the deadline passed while the table still moved or lagged the cache
    waited_s: float
    settle_s: float = 0.0  # the settle period it waited for (from the commit rhythm, or the configured one)


def settle_period(settle_s: float, rhythm_s: Sequence[float], max_s: float) -> float:
    """``CADENCE_FACTOR`` times the longest gap of the service's commit rhythm within a write
    (``coverage.commit_rhythm.write_rhythm_s``), or ``settle_s`` when the table shows none; never past
    ``max_s``. ``settle_s == 0`` (nothing more can arrive) stays 0.
    """
    if settle_s <= 0:
        return settle_s
    if not rhythm_s:
        return min(settle_s, max_s)
    return min(CADENCE_FACTOR * max(rhythm_s), max_s)


def emission_bound(
    not_before: dt.datetime | None, first_seen_us: int | None, margin_s: float
) -> dt.datetime | None:
    """The earliest a row of a partition can have been stamped, less ``margin_s``; None: unknown.

    Two bounds, each a time before every attempt of the partition began: ``not_before``, the caller's
    (an orchestrator's run start), and ``first_seen_us``, this host's first look at the partition in the
    table (``CoverageStore.touch``; what earlier attempts elsewhere delivered was in the table then, or
    arrived within the margin). The later of the two is the tighter. The margin covers clocks apart
    between hosts (rows are stamped on the writer's clock) and rows the service committed late.
    """
    bounds = [b.astimezone(dt.UTC) for b in (not_before,) if b is not None]
    if first_seen_us is not None:
        bounds.append(dt.datetime.fromtimestamp(first_seen_us / 1e6, dt.UTC))
    if not bounds:
        return None
    return max(bounds) - dt.timedelta(seconds=margin_s)


@dataclass(frozen=True)
class Settled(Generic[S]):
    """What the table showed when ``wait_settled`` ended."""

    state: S
    settled: bool  # False: the deadline passed while the table still moved or lacked what must show
    waited_s: float
    settle_s: float = 0.0  # the settle period it waited for (from the commit rhythm, or the configured one)


def wait_settled(
    read_state: Callable[[], S],
    read_version: Callable[[], int | None],
    *,
    holds: Callable[[S], bool],
    wait: Callable[[S], bool],
    settle_s: float,
    max_s: float,
    rhythm: Callable[[], Sequence[float]] = lambda: (),
    poll_s: float = DEFAULT_POLL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Settled[S]:
    """Poll the table until what ``read_state`` shows ``holds`` and stays unchanged for the settle period.

    The one settle wait: a resume's catch-up (``catch_up``) and a run's decision about the partition's
    other runs (``runtime/settled_runs.py``) both wait through it. ``wait``: whether the first look needs
    a settle period at all (False and ``holds``: the first look is returned at once, nothing waited).
    The settle period is ``settle_period(settle_s, rhythm(), max_s)``, re-read whenever the table's
    version moves (its rhythm shows in its newest commits). ``read_version`` is cheap (the Delta log);
    the state is re-read only when the version moved. Bounded by ``max_s``: past it the state last seen
    is returned with ``settled=False``.
    """
    started = clock()
    version = read_version()
    state = read_state()
    if holds(state) and not wait(state):
        return Settled(state, True, 0.0)

    def current_settle() -> float:  # the table's history is read only when a settle period applies
        return settle_period(settle_s, rhythm(), max_s) if settle_s > 0 else settle_s

    settle = current_settle()
    stable_since = clock()
    while True:
        now = clock()
        if holds(state) and now - stable_since >= settle:
            return Settled(state, True, now - started, settle)
        if now - started >= max_s:
            return Settled(state, False, now - started, settle)
        sleep(poll_s)
        latest = read_version()
        if latest != version:
            version = latest
            settle = current_settle()
            fresh = read_state()
            if fresh != state:
                state, stable_since = fresh, clock()


def catch_up(
    read_ranges: Callable[[], tuple[OffsetRange, ...]],
    read_version: Callable[[], int | None],
    *,
    cached: tuple[OffsetRange, ...],
    settle_s: float,
    max_s: float,
    rhythm: Callable[[], Sequence[float]] = lambda: (),
    poll_s: float = DEFAULT_POLL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> CaughtUp:
    """Poll the table until it holds ``cached`` and its ranges stay unchanged for the settle period
    (``wait_settled``). Nothing delivered anywhere (no range cached, none in the table) is a first
    write: nothing to wait for."""
    caught = wait_settled(
        read_ranges,
        read_version,
        holds=lambda ranges: not _subtract(cached, ranges),
        wait=lambda ranges: bool(ranges or cached),
        settle_s=settle_s,
        max_s=max_s,
        rhythm=rhythm,
        poll_s=poll_s,
        clock=clock,
        sleep=sleep,
    )
    return CaughtUp(caught.state, caught.settled, caught.waited_s, caught.settle_s)


def rhythm_of(reader: table_truth.TableReader, where: str) -> Callable[[], tuple[float, ...]]:
    """The service's commit rhythm within a write, read from ``reader``'s log at each call; a log that
    cannot be read shows none (the configured settle period still applies), warned of once."""
    warned = False

    def rhythm() -> tuple[float, ...]:
        nonlocal warned
        try:
            return commit_rhythm.write_rhythm_s(reader, commits=CADENCE_COMMITS)
        except table_truth.TableTruthError as exc:
            if not warned:  # once per wait, not at every version it sees
                log.warning("%s: %s; waiting the configured settle period only", where, exc)
                warned = True
            return ()

    return rhythm


def learn_from_table(
    catalog: TableCatalog,
    config: ZerobusConfig,
    key: CoverageKey,
    *,
    table: str,
    source: str,
    cached: tuple[OffsetRange, ...],
    cache: CoverageRecorder,
    commit: Callable[[str], object] | None,
    settle: bool,
    emitted_since: dt.datetime | None = None,
    looked: Callable[[dt.datetime | None], object] | None = None,
) -> tuple[OffsetRange, ...]:
    """Positions of ``key`` the table shows once it caught up; what it shows beyond ``cached`` is
    recorded in ``cache`` (rows visible in the table are durable: the cache never claims one that is not).

    ``emitted_since``: ``emission_bound``; only files holding rows stamped since then are read.
    ``looked``: called once the table was read (or found missing, or not to be consulted), with the
    earliest stamp among the rows it showed; not called when the table could not be read.

    ``commit``: has an embedded emulator commit everything it acknowledged (before each version read).
    ``settle``: wait for the table to stop changing (``zerobus.coverage.catch_up_settle_s``); False when
    nothing more can arrive. A table that cannot be read leaves the resume to the cache, with a warning.
    """
    settings = config.coverage
    if not settings.consult_table:
        if looked is not None:
            looked(None)  # no table read to bound later; the rows this host sends come after now
        return ()
    where = f"{table}: {source} {key.partition!r}"
    try:
        reader = table_truth.reader_for(catalog, config, table)
        if reader is None:
            if looked is not None:
                looked(None)  # no table yet: nothing of the partition is anywhere
            return ()

        def version() -> int:
            if commit is not None:
                commit(table)
            return table_truth.table_version(reader)

        earliest: list[dt.datetime] = []

        def read_ranges() -> tuple[OffsetRange, ...]:
            rows = table_truth.delivered_rows(
                reader, source=source, partition=key.partition, emitted_since=emitted_since
            )
            if rows.first_emitted is not None:
                earliest.append(rows.first_emitted)
            return table_truth.offsets_to_ranges(rows.offsets)

        caught = catch_up(
            read_ranges,
            version,
            cached=cached,
            settle_s=settings.catch_up_settle_s if settle else 0.0,
            max_s=settings.catch_up_max_s,
            rhythm=rhythm_of(reader, where),
        )
    except CatalogError as exc:  # TableTruthError included: the table's files could not be read
        # Safe to go on without it: the cache never claims a row that is not durable, so the worst case
        # is re-sending what the table holds (duplicates), never losing a row.
        log.warning(
            "%s: could not read the delivered positions from the table (%s: %s); resuming from this "
            "host's coverage only, so rows already in the table may be sent again. Fix: give the writer "
            "read access to the table (or set zerobus.coverage.consult_table = false)",
            where,
            type(exc).__name__,
            exc,
        )
        return ()
    if looked is not None:
        looked(min(earliest, default=None))
    log.info(
        "%s: the table shows %d delivered position(s) after a %.1f s catch-up (settle period %.1f s; %s)",
        where,
        intervals.covered_count(caught.ranges),
        caught.waited_s,
        caught.settle_s,
        "every file read"
        if emitted_since is None
        else f"files of rows stamped since {emitted_since:%Y-%m-%d %H:%M:%S} UTC",
    )
    if not caught.settled:
        log.warning(
            "%s: the table was still changing (or lagged this host's coverage) after %.1f s "
            "(zerobus.coverage.catch_up_max_s); resuming from what it showed then: rows acknowledged but "
            "not yet visible may be sent again",
            where,
            caught.waited_s,
        )
    learnt = _subtract(caught.ranges, cached)
    if learnt:
        log.warning(
            "%s: %d row position(s) are in the table but not in this host's coverage: they are skipped "
            "without checking the input still holds the same rows there (only this host's own coverage "
            "carries content digests)",
            where,
            intervals.covered_count(learnt),
        )
        cache.record_many((key, span) for span in learnt)
    return caught.ranges


class TruthSkip:
    """Drops from a resume's slices the positions the table shows, learning them on first need.

    ``learn`` runs at most once, when the first slice comes up (see the module docstring); it returns
    the table's ranges after the catch-up. Counts what it did, for the write's result: ``rows_resent``
    is every kept row below the highest position an earlier attempt reached (the cache's, the table's
    or ``handed_out``), so it never under-counts what the resume may duplicate.
    """

    def __init__(
        self,
        slices: Iterable[ResumeSlice],
        learn: Callable[[], tuple[OffsetRange, ...]],
        *,
        cached: tuple[OffsetRange, ...],
        offset_column: str | None,
        table: str | None,
        handed_out: int = 0,
    ) -> None:
        self._slices = slices
        self._learn = learn
        self._cached = cached
        self._offset_column = offset_column
        self._table = table
        self.learnt: tuple[OffsetRange, ...] = ()  # the table's ranges the cache did not hold
        self.consulted = False
        self.rows_skipped = 0  # rows skipped on the table's word alone
        self.rows_resent = 0  # rows sent at positions an earlier attempt had reached
        # ``handed_out``: how far an earlier attempt gave rows to its sink (``resume.pieces.HandedOut``).
        # Rows it sent but that were neither recorded nor visible when the table was read reach the table
        # later: without that mark they would be re-sent uncounted.
        self._reached = max(_high_mark(cached), handed_out)

    def __iter__(self) -> Iterator[ResumeSlice]:
        index = CoveredIndex(())
        for piece in self._slices:
            if not self.consulted:
                self.consulted = True
                truth = self._learn()
                self.learnt = _subtract(truth, self._cached)
                index = CoveredIndex(self.learnt)
                self._reached = max(self._reached, _high_mark(truth))
            kept = list(without(piece, index, offset_column=self._offset_column, table=self._table))
            self.rows_skipped += piece.batch.num_rows - sum(part.batch.num_rows for part in kept)
            self.rows_resent += sum(self._below_reached(part) for part in kept)
            # No loop variable, and neither ``piece`` nor ``kept`` kept: a slice pins its whole input
            # batch, which must not be alive while the source builds the next one.
            del piece
            yield from kept
            del kept

    def _below_reached(self, part: ResumeSlice) -> int:
        # Positions are submitted in order, so every position below the highest one known delivered was
        # submitted by an earlier attempt: sending it again may duplicate a row that is durable but was
        # neither recorded nor visible yet.
        if not self._reached:
            return 0
        if self._offset_column is None:
            end = part.start_offset + int(part.batch.num_rows)
            return max(0, min(end, self._reached) - part.start_offset)
        offsets = part.batch.column(self._offset_column)
        below: int = pc.sum(pc.less(offsets, self._reached)).as_py() or 0
        return below


def _subtract(ranges: Iterable[OffsetRange], minus: tuple[OffsetRange, ...]) -> tuple[OffsetRange, ...]:
    """Positions of ``ranges`` that ``minus`` lacks, normalised."""
    return intervals.merge(
        hole for span in ranges for hole in intervals.gaps_between(minus, span.start, span.end)
    )


def _high_mark(ranges: Iterable[OffsetRange]) -> int:
    return max((span.end for span in ranges), default=0)
