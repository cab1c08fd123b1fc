"""A logical partition's runs as the table shows them once rows still on their way to it have landed.

Zerobus acknowledges rows before it commits them to the Delta table (a few seconds later; the emulator
every ``time_to_table_s``). A re-run of the partition from another host, started within that time of the
first run, would read no run in the table and write a second copy (docs/adr/0007-write-modes.md, "Rows
still on their way"). So ``lifecycle.decide`` reads the partition's runs through ``settled_history``,
which waits the way a resume does (``resume.truth.wait_settled``: the same wait, the same settle period
from the service's commit rhythm, ``resume.truth.settle_period``), but only when rows can be on their way:

- **The table was written lately**: its newest commit (any: a CREATE, the service's appends, a replace's
  delete) is younger than the settle period. Then the partition's rows per run must stay unchanged for
  the settle period, at most ``coverage.catch_up_max_s``. A table nobody wrote for longer is read once:
  whatever was acknowledged before this look has been committed, so a fresh partition on a quiet table
  waits for nothing (one more read of the Delta log's newest commit). The age compares the committer's
  clock with this host's: clocks apart by more than a fraction of the settle period shorten or lengthen
  the window.
- **This host delivered runs of the partition lately** (other runs than this one, recorded in its
  coverage within ``coverage.catch_up_max_s``): the table must show at least as many rows of each as this
  host recorded, waited for up to ``catch_up_max_s`` whatever the table's age (a short run on a quiet
  table leaves no commit behind to go by), then one settle period as above (the table just moved).
  This run's own attempts are the resume's to wait for.
- An in-process emulator commits everything it acknowledged on request (``commit``) and nothing else
  serves the warehouse (``settle=False``): nothing is waited for.

Not covered, since no look at the table can see it: a run on another host whose rows were all
acknowledged within one commit interval before this look, on a table with no commit in the settle period
before (a short run on a quiet table, re-run at once elsewhere); and two runs that start together, neither
acknowledged before the other looks: both write, as before this wait (only ``replace`` orders them).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from zerobus_orchestration.config import CoverageConfig
from zerobus_orchestration.coverage import commit_rhythm
from zerobus_orchestration.coverage.run_order import RunHistory
from zerobus_orchestration.coverage.table_truth import TableReader
from zerobus_orchestration.resume.truth import DEFAULT_POLL_S, rhythm_of, settle_period, wait_settled

log = logging.getLogger(__name__)


def settled_history(
    reader: TableReader,
    settings: CoverageConfig,
    *,
    source: str,
    key: str,
    expected: Mapping[str, int],
    commit: Callable[[str], object] | None,
    settle: bool,
    poll_s: float = DEFAULT_POLL_S,
    wall_clock: Callable[[], float] = time.time,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> RunHistory:
    """The ``RunHistory`` of ``source``'s partition ``key`` read once the table settled (the module
    docstring). ``expected``: ``{tag: rows}`` this host recorded lately of the partition's other runs,
    which the table must show. ``commit``: has an embedded emulator commit what it acknowledged (before
    each look); ``settle``: False when nothing more can arrive (an in-process emulator)."""
    where = f"{reader.table}: partition {key!r} of {source!r}"
    looks: list[RunHistory] = []
    newest: list[tuple[int, int | None]] = []  # (version, commit timestamp in ms) at each look
    read_rhythm = rhythm_of(reader, where)
    rhythms: dict[int, tuple[float, ...]] = {}

    def version() -> int:
        if commit is not None:
            commit(reader.table)
        newest.append(commit_rhythm.newest_commit(reader))
        return newest[-1][0]

    def runs() -> dict[str, int]:
        history = RunHistory(reader, source=source, key=key, latest=newest[-1][0])  # the log read once
        looks.append(history)
        return dict(history.rows_at(history.latest()))

    def rhythm() -> tuple[float, ...]:  # the rhythm shows in the newest commits: read once per version
        at = newest[-1][0]
        if at not in rhythms:
            rhythms.clear()
            rhythms[at] = read_rhythm()
        return rhythms[at]

    def written_lately(_: object) -> bool:
        if not settle or settings.catch_up_settle_s <= 0:
            return False
        stamp = newest[0][1]
        if stamp is None:
            return True  # the log does not say when: rows may be on their way
        age = wall_clock() - stamp / 1000.0
        if age >= settings.catch_up_max_s:
            return False  # past the longest settle period there is: the rhythm need not be read
        return age < settle_period(settings.catch_up_settle_s, rhythm(), settings.catch_up_max_s)

    caught = wait_settled(
        runs,
        version,
        holds=lambda seen: all(seen.get(tag, 0) >= rows for tag, rows in expected.items()),
        wait=written_lately,
        settle_s=settings.catch_up_settle_s if settle else 0.0,
        max_s=settings.catch_up_max_s,
        rhythm=rhythm,
        poll_s=poll_s,
        clock=clock,
        sleep=sleep,
    )
    if caught.waited_s > 0:
        log.info(
            "%s: waited %.1f s for rows on their way to the table before deciding on its runs (settle "
            "period %.1f s); it shows %s",
            where,
            caught.waited_s,
            caught.settle_s,
            dict(sorted(caught.state.items())) or "none",
        )
    if not caught.settled:
        log.warning(
            "%s: the table was still changing (or lacked rows this host delivered) after %.1f s "
            "(zerobus.coverage.catch_up_max_s); deciding from what it showed then: a run whose rows had "
            "not landed yet is not compared with, and its partition may be written twice",
            where,
            caught.waited_s,
        )
    return looks[-1]
